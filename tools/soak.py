#!/usr/bin/env python3
"""Soak test of stopping and resuming: one small run (OUT/breakout-seed0) killed N times with
a random signal at a random moment, resumed each time, every exit checked; a second sweep
before its first checkpoint, and its directory renamed in its last resume, which runs to the
end (docs/checkpoints.md, "The soak test", lists the checks). The last line is a JSON object
of figures (tests/test_soak.py reads it); exit 0 if all passed:

    python tools/soak.py --kills 20 --seed 0 --out /tmp/soak
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import csv
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # `python tools/soak.py` puts tools/, not the package, first

from fast_dqn.checkpoints import (CHECKPOINT, MANIFEST, NEW_CHECKPOINT,  # noqa: E402
                                  OLD_CHECKPOINT, CheckpointError, latest_checkpoint,
                                  read_replay_into, verify_checkpoint)
from fast_dqn.replay_memory import ReplayMemory  # noqa: E402
from fast_dqn.run_dir import (CONFIG_FILE, EPISODES_FILE, EVALUATIONS_FILE,  # noqa: E402
                              LOCK_FILE, SUMMARY_FILE)
from fast_dqn.run_logs import check_logs_match  # noqa: E402

EVALUATE, CAPACITY = 800, 5000  # agent steps between evaluations; replay capacity
RUN_FLAGS = ("--workers=4", f"--replay-capacity={CAPACITY}", "--replay-start=400",
             "--target-update=400", f"--evaluate={EVALUATE}", "--eval-episodes=2",
             "--eval-max-episode-steps=300", "--max-episode-steps=400",
             "--checkpoint-every=400", "--progress-every=0.2")
RUN_NAME = "breakout-seed0"  # what scripts/all_games.sh names the run of breakout, seed 0
CPU_ONLY = {"CUDA_VISIBLE_DEVICES": "-1", "TF_CPP_MIN_LOG_LEVEL": "3"}
SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
WAIT_SECONDS = 16.0  # a third of the kills in the start-up, the rest over several periods
# Steps/s above what a run reaches here (~230 on 2 cores), so that a launch's --timesteps is
# out of reach before its signal; doubled each time a run finishes first anyway.
STEPS_PER_SECOND = 250.0
STEP_GRAIN = 800  # --timesteps: a multiple of the evaluation and checkpoint periods and W
STOP_SECONDS, START_SECONDS, FINAL_SECONDS = 30.0, 300.0, 900.0


class SoakFailure(RuntimeError):
    """A check failed."""


class Trainer(contextlib.AbstractContextManager):
    """run_fast_dqn.py in a session of its own (only this script's signals reach it), SIGHUP at
    its default (nohup would leave it ignored), output in LOG.out/.err; killed at the end of
    its `with` block if it still runs (a failed check, a stop of the soak)."""

    def __init__(self, args: list[str], log: Path):
        self.log, self.started_wall = log, time.time()
        with open(f"{log}.out", "w") as out, open(f"{log}.err", "w") as err:
            self.process = subprocess.Popen(
                [sys.executable, str(REPO / "run_fast_dqn.py"), *args], cwd=REPO,
                env={**os.environ, **CPU_ONLY}, stdin=subprocess.DEVNULL, stdout=out,
                stderr=err, start_new_session=True,
                preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))

    def __exit__(self, *exc_info: object) -> None:
        self.process.kill()
        self.process.wait()

    def running(self) -> bool:
        return self.process.poll() is None

    def output(self, stream: str) -> str:
        return Path(f"{self.log}.{stream}").read_text(errors="replace")

    def fail(self, message: str) -> SoakFailure:
        tail = "\n".join(self.output("err").splitlines()[-30:])
        return SoakFailure(f"{message}; stderr tail:\n{tail}")

    def wait_for(self, condition: Callable[[], bool], timeout: float, what: str) -> float:
        """Polls until `condition()` holds and returns the moment; fails if the run exits
        first or the time runs out."""
        deadline = time.monotonic() + timeout
        while not condition():
            if not self.running() or time.monotonic() > deadline:
                raise self.fail(f"no {what} (exit status {self.process.poll()})")
            time.sleep(0.05)
        return time.monotonic()

    def exit_status(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise self.fail(f"still running {timeout:.0f} s on") from None

    def holds_lock(self, run_dir: Path) -> bool:
        """Whether .lock names this process (the trainer writes it once it holds the flock)."""
        try:
            return f" pid {self.process.pid} " in (run_dir / LOCK_FILE).read_text()
        except OSError:
            return False

    def summary(self, run_dir: Path) -> dict:
        """summary.json if written since this process started; else {}."""
        try:
            path = run_dir / SUMMARY_FILE
            fresh = path.stat().st_mtime >= self.started_wall
            return json.loads(path.read_text()) if fresh else {}
        except (OSError, ValueError):
            return {}


def verified_step(run_dir: Path) -> int:
    """The latest checkpoint's step, every file verified, the CSVs agreeing with it."""
    try:
        checkpoint = latest_checkpoint(run_dir)
        if checkpoint is None:
            raise ValueError("no complete checkpoint")
        manifest = verify_checkpoint(checkpoint)
        step = manifest["counters"]["step"]
        check_logs_match(run_dir, step, manifest["counters"]["games"]["episodes"],
                         manifest["evaluator"]["evaluations"])
    except (CheckpointError, ValueError, KeyError) as error:
        raise SoakFailure(f"{run_dir}: {error}") from None
    return step


def logged(run_dir: Path, name: str) -> list[tuple[str, ...]]:
    """A CSV log's complete rows (the header and a row torn by a kill left out)."""
    path = run_dir / name
    lines = path.read_text().split("\n")[1:-1] if path.exists() else []
    return [tuple(row) for row in csv.reader(lines) if row]


def rows_before(run_dir: Path, step: int) -> collections.Counter:
    """The CSV logs' rows with a timestep before `step`, as (log, row) pairs: what a resume
    from a checkpoint at `step` keeps (at `step` itself it may play a cut evaluation again)."""
    return collections.Counter(
        (name, row) for name, column in ((EPISODES_FILE, 1), (EVALUATIONS_FILE, 0))
        for row in logged(run_dir, name) if int(row[column]) < step)


class Start:
    """Where a resume starts: the checkpoint's step, the rows it keeps, the run's timesteps."""

    def __init__(self, run_dir: Path):
        self.step = verified_step(run_dir)
        self.rows = rows_before(run_dir, self.step)
        self.timesteps = json.loads((run_dir / CONFIG_FILE).read_text())["timesteps"]

    def args(self, run_dir: Path, timesteps: int) -> list[str]:
        extend = [f"--timesteps={timesteps}"] if timesteps > self.timesteps else []
        return ["--resume", str(run_dir), *extend]


def second_sweep(out: Path, holder: Trainer) -> None:
    """scripts/all_games.sh into OUT while the run goes on: exit 3 within 10 s naming the
    holder's pid, nothing moved aside, no log; the holder still running, holding its lock."""
    try:
        sweep = subprocess.run(
            ["bash", str(REPO / "scripts" / "all_games.sh"), "--games", "breakout", "--seeds",
             "0", "--jobs", "1", "--out", str(out), "--python", sys.executable, "--",
             *RUN_FLAGS], cwd=REPO, capture_output=True, text=True, timeout=10,
            env={**os.environ, **CPU_ONLY})
    except subprocess.TimeoutExpired:
        raise SoakFailure("a second sweep did not exit within 10 s") from None
    pid = holder.process.pid
    named = f"{RUN_NAME} (running elsewhere: " in sweep.stderr and f" pid {pid} " in sweep.stderr
    if sweep.returncode != 3 or not named or list(out.glob(f"{RUN_NAME}.incomplete-*")) \
            or (out / f"{RUN_NAME}.log").exists():
        raise SoakFailure(f"a second sweep exited {sweep.returncode}, not 3 naming pid {pid}, "
                          f"nothing moved aside, no log:\n{sweep.stderr}")
    if not holder.running() or not holder.holds_lock(out / RUN_NAME):
        raise holder.fail("the run did not survive a second sweep")


def check_exit(run_dir: Path, run: Trainer, status: int, signum: int | None,
               start: Start | None, tally: dict) -> int:
    """Checks what an exit left; returns the checkpoint's step."""
    summary = run.summary(run_dir)
    expected = 0 if signum is None else -signum if signum == signal.SIGKILL else 128 + signum
    if (status != expected and not (status == 0 and summary.get("finished"))) \
            or "Traceback" in run.output("err"):
        raise run.fail(f"exit status {status} (expected {expected}) or a traceback")
    step = verified_step(run_dir)
    handled = signum is not None and status == 128 + signum
    if (start and step < start.step) or (summary and summary.get("steps") != step) \
            or (summary and handled and summary.get("stopped_by_signal") != signum):
        raise run.fail(f"checkpoint at step {step}, from {start and start.step}; {summary}")
    if start is not None:
        now = rows_before(run_dir, start.step)
        lost, added = sum((start.rows - now).values()), sum((now - start.rows).values())
        tally["rows_lost"] += lost
        tally["rows_repeated"] += added
        if lost or added:
            raise run.fail(f"of the CSV rows before step {start.step}, {lost} lost or changed "
                           f"and {added} added")
    return step


def out_of_reach(step: int, wait: float, tally: dict) -> int:
    """A --timesteps the run cannot reach `wait` seconds after `step`."""
    needed = step + wait * tally["steps_per_second"] + STEP_GRAIN
    return int(-(-needed // STEP_GRAIN) * STEP_GRAIN)


def cycle(number: int, run_dir: Path, rng: random.Random, wait_seconds: float,
          tally: dict) -> None:
    """One launch: a new run (number 1) or a resume, signalled after a random wait."""
    wait, signum = rng.uniform(0.0, wait_seconds), rng.choice(SIGNALS)
    start = None if number == 1 else Start(run_dir)
    if start is None:  # its wait counts from its first checkpoint, at step 400
        args = ["--game=breakout", "--seed=0", *RUN_FLAGS, f"--logdir={run_dir}",
                f"--timesteps={out_of_reach(400, wait, tally)}"]
    else:
        args = start.args(run_dir, max(start.timesteps, out_of_reach(start.step, wait, tally)))
        tally["resumes"] += 1
    sent = None
    with Trainer(args, run_dir.parent / "logs" / f"cycle{number:02d}") as run:
        zero = run.wait_for(lambda: run.holds_lock(run_dir), START_SECONDS, "lock taken")
        if start is None:  # a run without a checkpoint, which a sweep must not take as dead
            run.wait_for((run_dir / CONFIG_FILE).is_file, START_SECONDS, "config.json")
            tally["second_sweeps"] += 1
            second_sweep(run_dir.parent, run)
            tally["sweeps_left_alone"] += 1
            zero = run.wait_for((run_dir / CHECKPOINT / MANIFEST).is_file, START_SECONDS,
                                "first checkpoint")
        while run.running() and time.monotonic() < zero + wait:
            time.sleep(0.05)
        if run.running():
            run.process.send_signal(signum)
            sent = signum
            tally["kills"][signum.name] += 1
        else:  # it finished first: this machine is faster than the bound
            tally["steps_per_second"] *= 2
        status = run.exit_status(STOP_SECONDS)
    step = check_exit(run_dir, run, status, sent, start, tally)
    print(f"cycle {number}: {sent.name if sent else 'no signal'} {wait:.1f} s after "
          f"{'the lock' if start else 'the first checkpoint'}, exit {status}, checkpoint "
          f"{start and start.step} -> {step}", flush=True)


def final_run(run_dir: Path, tally: dict) -> None:
    """Resumes the run to its end, renamed at its first checkpoint; checks all it left."""
    start = Start(run_dir)
    timesteps = start.timesteps if start.timesteps > start.step else \
        out_of_reach(start.step, 0.0, tally)
    moved = run_dir.with_name(RUN_NAME + ".moved")
    tally["resumes"] += 1
    with Trainer(start.args(run_dir, timesteps), run_dir.parent / "logs" / "final") as run:
        # A line that starts so: a resume's first line, "resuming from RUN/checkpoint at
        # step N", holds the words too, and a rename then would be before the restore.
        run.wait_for(lambda: "\ncheckpoint at step" in "\n" + run.output("out"), FINAL_SECONDS,
                     '"checkpoint at step" line')
        run_dir.rename(moved)
        tally["renamed_mid_run"] = True
        status = run.exit_status(FINAL_SECONDS)
    if run_dir.exists():
        raise SoakFailure(f"{run_dir} was made again after the run was renamed to {moved}")
    moved.rename(run_dir)  # for the checks
    if not run.summary(run_dir).get("finished"):
        raise run.fail(f"the final run exited {status}, its summary.json not finished")
    # Its games are 1..n, once each (check_logs_match); its evaluations one at each period:
    step = tally["final_step"] = check_exit(run_dir, run, status, None, start, tally)
    evaluations = [int(row[0]) for row in logged(run_dir, EVALUATIONS_FILE)]
    expected = list(range(EVALUATE, step + 1, EVALUATE))
    tally["rows_lost"] += len(set(expected) - set(evaluations))
    tally["rows_repeated"] += len(evaluations) - len(set(evaluations))
    left = [name for name in (NEW_CHECKPOINT, OLD_CHECKPOINT) if (run_dir / name).exists()]
    if step < timesteps or left or evaluations != expected:
        raise SoakFailure(f"the finished run: step {step} of {timesteps}, {left} left, "
                          f"evaluations at {evaluations}")
    memory = ReplayMemory(CAPACITY, np.random.default_rng(0))
    try:
        if not read_replay_into(latest_checkpoint(run_dir), memory) or len(memory) == 0:
            raise ValueError("no replay memory")
        memory.check_valid()
    except (CheckpointError, ValueError) as error:
        raise SoakFailure(f"the final checkpoint's replay memory: {error}") from None
    print(f"final: renamed mid-run, exit {status}, finished at step {step}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20, help="signals to send (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the waits and signals")
    parser.add_argument("--out", type=Path, required=True, help="directory for the run")
    parser.add_argument("--wait-seconds", type=float, default=WAIT_SECONDS,
                        help="each signal comes within this many seconds of the run taking "
                             f"its lock (default {WAIT_SECONDS:g})")
    options = parser.parse_args(argv)
    if options.kills < 1 or not 0 < options.wait_seconds <= 3600:
        parser.error("--kills must be 1 or more, --wait-seconds in (0, 3600]")
    if (options.out / RUN_NAME).exists():
        parser.error(f"{options.out / RUN_NAME} exists; give a fresh --out")
    run_dir, rng, number = options.out / RUN_NAME, random.Random(options.seed), 0
    (options.out / "logs").mkdir(parents=True, exist_ok=True)
    # A Ctrl-C or SIGTERM of the soak stops it and kills the trainer it started, even where
    # it was started with SIGINT ignored (which the trainers would then inherit).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    tally = {"kills": collections.Counter(), "resumes": 0, "second_sweeps": 0,
             "sweeps_left_alone": 0, "rows_lost": 0, "rows_repeated": 0, "final_step": None,
             "renamed_mid_run": False, "steps_per_second": STEPS_PER_SECOND}
    started, status = time.monotonic(), 0
    print(f"soak: {options.kills} kills, seed {options.seed}, in {run_dir}", flush=True)
    try:
        while sum(tally["kills"].values()) < options.kills:
            number += 1
            if number > 3 * options.kills + 5:
                raise SoakFailure(f"{number - 1} cycles, {dict(tally['kills'])} signals: the "
                                  "run keeps finishing first")
            cycle(number, run_dir, rng, options.wait_seconds, tally)
        final_run(run_dir, tally)
    except SoakFailure as failure:
        status = 1
        print(f"FAILED: {failure}", flush=True)
    except KeyboardInterrupt:
        status = 130
        print("soak: interrupted", flush=True)
    figures = {**tally, "passed": status == 0, "kills_by_signal": dict(tally["kills"]),
               "kills": sum(tally["kills"].values()),
               "wall_seconds": round(time.monotonic() - started, 1)}
    print(f"soak {'PASSED' if status == 0 else 'FAILED'}\n{json.dumps(figures)}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
