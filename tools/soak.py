#!/usr/bin/env python3
"""Soak test of stopping and resuming: one small run killed N times and resumed each time.

What it does: trains one small, fast run of run_fast_dqn.py (breakout, W = 4, a 5,000-
transition memory, a checkpoint every 400 agent steps, an evaluation every 800) and, cycle
after cycle, starts it (a new run the first time, `--resume` afterwards), waits a random time,
sends it a random one of SIGKILL, SIGTERM, SIGINT and SIGHUP and waits for its exit, until N
signals have been sent. About one resume in FINAL_WINDOW_SHARE is a final-window cycle: it gets
a --timesteps the run reaches within seconds, and its signal comes at a random moment of its
final window (the last epoch's updates, the final evaluation, the final checkpoint), timed by
the lines the run prints; the next cycle, when that left work, resumes the run without
extending it and lets it finish its work. With --without-replay the run is made with
--checkpoint-replay=false, so every resume refills the memory. The waits are uniform over the
first --wait-seconds (default WAIT_SECONDS) after the run takes its lock (the first cycle:
after its first checkpoint, without which there is nothing to resume), so kills land in the
start-up (checking the checkpoint, importing TensorFlow, restoring), while it acts, in
evaluations and while a checkpoint is written; a shorter --wait-seconds puts more of them in
the start-up and makes every launch, and so the soak, shorter (tests/test_soak.py). Before the
lock nothing is written and the interpreter may still be loading the modules that install the
trainer's handler (there a SIGINT is a KeyboardInterrupt traceback, a SIGTERM an exit by the
signal), so no kill lands there. Each launch gets a --timesteps the run cannot reach before its
signal (the run's own, or a larger one on a resume); a run that finishes first anyway does not
count as a kill and is extended at the next launch. At a few random cycles a second `--resume`
is started while the run holds its directory, and a second sweep (scripts/all_games.sh into
OUT, which holds the run under the name the sweep gives it); the first cycle gets a second
sweep too, once the new run has written config.json and before its first checkpoint (a sweep
that ignored the run's lock would take it for a dead run and move it aside). Last, the run is
resumed once more and left to finish; its directory is renamed while it runs (at its first
checkpoint after the resume), and it must finish whole in the new place, leaving nothing at the
old path (then it is renamed back for the checks).

Run it from the repository root (20 kills take about 15 minutes on 2 cores):

    python tools/soak.py --kills 20 --seed 0 --out /tmp/soak1
    python tools/soak.py --kills 6 --seed 2 --without-replay --out /tmp/soak2

--seed fixes the waits, the signals and the second-writer cycles (not the machine's timing).
The run is OUT/breakout-seed0; every launch's stdout and stderr are kept in OUT/logs.

What it checks (the first failure stops it, with the trainer's stderr tail):

- every exit: status -9 after SIGKILL, 143 after SIGTERM, 130 after SIGINT, 129 after
  SIGHUP (0 if the run finished first, or if its work was done when the signal came); no
  "Traceback" on stderr; a signalled run gone within SOAK_STOP_SECONDS;
- after every exit: a complete checkpoint that `verify_checkpoint` passes, not older than the
  one the run started from; CSVs that agree with it (`check_logs_match` with its step, games
  and evaluations); the CSV rows up to the step the run started from, unchanged (but for the
  evaluation due at that step, if a stop had cut it short: it is played again); after SIGTERM
  or SIGINT, a new summary.json naming the signal, at the checkpoint's step (or, for a resume
  stopped before it began, its config.json, CSVs and checkpoint unchanged);
- a second writer: exit 2 within SECOND_WRITER_SECONDS, one stderr line "is in use by another
  process" naming the holder's pid; the holder still running and holding the lock;
- a second sweep: exit 3 (runs left alone) within SECOND_WRITER_SECONDS, the run reported
  "running elsewhere" with the holder's pid, nothing moved aside, no log of its own; the
  holder still running and holding the lock;
- a resume that finishes a run's final work: exit 0, summary.json "finished", at the step
  the run had;
- the final run, renamed while it runs: nothing at the old path after its exit;
- at the end: exit 0 and summary.json "finished"; episodes.csv numbered 1..n without gaps or
  repeats, its timesteps non-decreasing; evaluations.csv at distinct multiples of the
  evaluation period, none missing up to the final step; the final checkpoint verifies and
  agrees with the CSVs; its replay memory, read back, passes `ReplayMemory.check_valid`
  (unless --without-replay).

Output: a row per cycle as it ends (the phase is the one seen from outside when the signal
went: start-up, acting, evaluation, checkpoint), a summary line, and last one JSON line with
the same figures. Exit status 0 only if every check passed; 1 on a failure, 2 on bad usage,
130 if the soak itself is interrupted (it kills the run it started).
"""

from __future__ import annotations

import argparse
import collections
import csv
import dataclasses
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # `python tools/soak.py` puts tools/, not the package, first

from fast_dqn.checkpoints import (CHECKPOINT, MANIFEST, NEW_CHECKPOINT,  # noqa: E402
                                  OLD_CHECKPOINT, CheckpointError, latest_checkpoint,
                                  read_manifest, read_replay_into, verify_checkpoint)
from fast_dqn.replay_memory import ReplayMemory  # noqa: E402
from fast_dqn.run_dir import (CONFIG_FILE, EPISODES_FILE, EVALUATIONS_FILE,  # noqa: E402
                              LOCK_FILE, SUMMARY_FILE)
from fast_dqn.run_logs import check_logs_match  # noqa: E402
from tools.entry_point_runs import (CPU_ONLY, RUN_FAST_DQN, Launch,  # noqa: E402
                                    WaitFailed, step_of, wait_until)
from tools.entry_point_runs import launch as start_entry_point  # noqa: E402

TRAINER = RUN_FAST_DQN
EVALUATE = 800  # agent steps between evaluations
REPLAY_CAPACITY = 5000
RUN_FLAGS = ("--game=breakout", "--workers=4", f"--replay-capacity={REPLAY_CAPACITY}",
             "--replay-start=400", "--target-update=400", f"--evaluate={EVALUATE}",
             "--eval-episodes=2", "--eval-max-episode-steps=300", "--max-episode-steps=400",
             "--checkpoint-every=400", "--seed=0", "--progress-every=0.2")
WITHOUT_REPLAY = "--checkpoint-replay=false"
# The run's directory under --out: the name scripts/all_games.sh gives the run of
# `--games breakout --seeds 0`, so that a second sweep into --out finds it.
RUN_NAME = "breakout-seed0"
ALL_GAMES = REPO / "scripts" / "all_games.sh"
# A second sweep's flags: the run's own, but for those the sweep sets per run. It should start
# nothing; if it did, a small run rather than the 50M-step default.
SWEEP_FLAGS = tuple(flag for flag in RUN_FLAGS if not flag.startswith(("--game=", "--seed=")))
RUNNING_ELSEWHERE = 3  # all_games.sh's exit status when it left runs alone

SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
EXPECTED_STATUS = {signal.SIGKILL: -signal.SIGKILL, signal.SIGTERM: 128 + signal.SIGTERM,
                   signal.SIGINT: 128 + signal.SIGINT, signal.SIGHUP: 128 + signal.SIGHUP}
# About 5 s of start-up (TensorFlow's import alone takes 3) and then ~200 steps/s on 2 cores:
# an evaluation every ~4 s, a checkpoint every ~2 s. 16 s puts a third of the kills in the
# start-up and the rest over several periods of acting, evaluating and checkpointing.
WAIT_SECONDS = 16.0
# Agent steps per second above what a run reaches here (~230 on 2 cores): a launch's
# --timesteps leaves at least its wait times this to go, so the run is still going when its
# signal comes, and not much more, so that the final run, which goes to the end, is short. A
# faster machine doubles it each time a run finishes before its signal.
STEPS_PER_SECOND_BOUND = 250.0
FIRST_CHECKPOINT_STEP = 400  # the first cycle's wait starts at its first checkpoint
STEP_GRAIN = 800  # --timesteps is a multiple of the evaluation and checkpoint periods and W
SECOND_WRITER_SHARE = 6  # about one cycle in this many gets a second writer
FINAL_WINDOW_SHARE = 4  # about one resume in this many is a final-window cycle
# A final-window cycle's signal comes this long at most after the run's last step (its last
# epoch's 100 updates, an evaluation of 2 games and a small checkpoint take seconds here).
FINAL_WINDOW_SECONDS = 4.0
# A signalled run must be gone within this. More than the tests' STOP_SECONDS
# (tools/entry_point_runs.py): a stop waits for the trainer's call in progress, and here a
# call is up to 64 updates of 32 transitions (the tests' runs take 4).
SOAK_STOP_SECONDS = 30.0
LOCK_SECONDS = 120.0  # generous: the machine is shared
FIRST_CHECKPOINT_SECONDS = 300.0
SECOND_WRITER_SECONDS = 10.0
FINAL_SECONDS = 900.0
POLL_SECONDS = 0.05
IN_USE = "is in use by another process"
MOVED_SUFFIX = ".moved"  # the final run's directory is renamed to this while it runs
TIMESTEP_COLUMN = {EPISODES_FILE: 1, EVALUATIONS_FILE: 0}  # CSV log: its timestep column

Rows = dict[str, list[tuple[str, ...]]]  # CSV log name: its rows


class SoakFailure(RuntimeError):
    """A check failed; `tail` holds the stderr tail of the trainer at fault, if any."""

    def __init__(self, message: str, tail: str = ""):
        super().__init__(message)
        self.tail = tail


@dataclasses.dataclass(frozen=True)
class Draw:
    """A cycle's random choices, drawn in one fixed order so that --seed repeats them."""

    wait: float  # seconds from the lock (cycle 1: the first checkpoint) to the signal
    signum: signal.Signals
    second_writer: bool
    writer_at: float  # when the second writer starts, as a fraction of `wait`
    final_window: bool  # the signal comes in the run's final window, `window_at` s into it
    window_at: float


@dataclasses.dataclass
class Cycle:
    """One launch of the trainer and what became of it (a row of the table)."""

    name: str
    signal: str
    timesteps: int
    before: int | None  # the step of the latest checkpoint at the launch
    after: int | None = None  # ... and after the exit
    phase: str = "-"
    signalled_at: float | None = None  # seconds from the launch
    alive: float | None = None  # seconds from the launch to the exit
    status: int | None = None
    second_writer: str = "-"
    files: dict[str, bytes] = dataclasses.field(default_factory=dict, repr=False)


@dataclasses.dataclass
class Tally:
    cycles: list[Cycle] = dataclasses.field(default_factory=list)
    kills: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    resumes: int = 0
    second_writers: int = 0
    second_sweeps: int = 0
    sweeps_left_alone: int = 0
    refusals: int = 0
    rows_lost: int = 0
    rows_repeated: int = 0
    failures: int = 0
    final_step: int | None = None
    steps_per_second: float = STEPS_PER_SECOND_BOUND  # see timesteps_for
    renamed: bool = False  # the final run's directory was renamed while it ran
    without_replay: bool = False  # the run's setting (--without-replay), not a figure


# -- the trainer as a subprocess ---------------------------------------------------------------


def launch(args: Sequence[str], log: Path) -> Launch:
    """Starts run_fast_dqn.py (tools/entry_point_runs.py) in its own session: only this
    script's signals reach it. A run started by a soak under `nohup` would inherit SIGHUP
    ignored, and the soak's SIGHUP would then not stop it: the run gets the default, as
    from a terminal."""
    return start_entry_point(TRAINER, args, log, own_session=True,
                             signals={signal.SIGHUP: signal.SIG_DFL})


def kill_if_running(run: Launch) -> None:
    """SIGKILL for a run this script leaves behind (a failed check, Ctrl-C)."""
    if run.running():
        run.process.kill()
    run.process.wait()


def wait_while_running(condition: Callable[[], bool], run: Launch, timeout: float,
                       what: str) -> float:
    """`wait_until` for a trainer this script started: a failure carries its stderr tail."""
    try:
        return wait_until(condition, run.running, timeout, what)
    except WaitFailed as failure:
        raise SoakFailure(f"{failure} (exit status {run.process.returncode})",
                          run.stderr_tail()) from None


def sleep_until(moment: float, run: Launch) -> None:
    """Sleeps until `moment` (time.monotonic()) or the run's exit, whichever comes first."""
    while run.running() and (left := moment - time.monotonic()) > 0:
        time.sleep(min(POLL_SECONDS, left))


def holds_lock(run_dir: Path, pid: int) -> bool:
    """Whether the run directory's lock names `pid`: the trainer writes "host H pid P since T"
    into .lock once it holds the flock (the text of a dead holder stays until then)."""
    try:
        return f" pid {pid} " in (run_dir / LOCK_FILE).read_text()
    except OSError:
        return False


# -- the run directory -------------------------------------------------------------------------


def latest_manifest(run_dir: Path) -> dict:
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise SoakFailure(f"{run_dir} has no complete checkpoint")
    return read_manifest(checkpoint)


def verify_latest(run_dir: Path) -> tuple[Path, dict]:
    """The latest checkpoint, every file read back against its manifest, and the manifest;
    the CSVs must hold what it counted."""
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise SoakFailure(f"{run_dir} has no complete checkpoint")
    try:
        manifest = verify_checkpoint(checkpoint)
        check_logs_match(run_dir, step_of(manifest), manifest["counters"]["games"]["episodes"],
                         manifest["evaluator"]["evaluations"])
    except (CheckpointError, ValueError, KeyError) as error:
        raise SoakFailure(f"{checkpoint}: {error}") from None
    return checkpoint, manifest


def saved_timesteps(run_dir: Path) -> int:
    """The --timesteps the run has now (config.json: a resume writes a larger one there)."""
    return int(json.loads((run_dir / CONFIG_FILE).read_text())["timesteps"])


def timesteps_for(step: int, current: int, wait: float, steps_per_second: float) -> int:
    """The --timesteps to launch with, for a run at `step` signalled after `wait` seconds:
    the run's own if the run cannot reach it by then, else a larger one (a resume may only
    extend a run). A run that finishes first anyway is extended at its next launch."""
    needed = step + math.ceil(wait * steps_per_second) + STEP_GRAIN
    return max(current, -(-needed // STEP_GRAIN) * STEP_GRAIN)


def read_summary(run_dir: Path, since: float) -> dict:
    """summary.json, if written after `since` (time.time()); else {}."""
    path = run_dir / SUMMARY_FILE
    try:
        if path.stat().st_mtime < since:
            return {}
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def resume_files(run_dir: Path) -> dict[str, bytes]:
    """The bytes of the files a resume may change: config.json, the CSVs, the manifest."""
    checkpoint = latest_checkpoint(run_dir)
    paths = [run_dir / name for name in (CONFIG_FILE, *TIMESTEP_COLUMN)]
    paths += [checkpoint / MANIFEST] if checkpoint is not None else []
    return {str(path): path.read_bytes() for path in paths if path.exists()}


def made_since(path: Path, since: float) -> bool:
    """Whether `path` exists and was made (or renamed) after `since` (time.time())."""
    try:
        return path.stat().st_ctime >= since
    except OSError:
        return False


def logged_rows(path: Path) -> list[tuple[str, ...]]:
    """The complete rows of a CSV log, header left out. The piece after the last newline is
    left out too: empty, or a row torn by a kill (a resume drops it)."""
    if not path.exists():
        return []
    lines = path.read_text().split("\n")[:-1]
    return [tuple(row) for row in csv.reader(lines[1:]) if row]


def rows_up_to(run_dir: Path, step: int) -> Rows:
    """The rows of each CSV log with a timestep up to `step`: what a resume must keep."""
    return {name: [row for row in logged_rows(run_dir / name) if int(row[column]) <= step]
            for name, column in TIMESTEP_COLUMN.items()}


def compare_kept(before: Rows, after: Rows, due_evaluation: int | None) -> tuple[int, int]:
    """Rows lost (gone or changed) and rows added among those a resume must keep. One
    evaluation row at `due_evaluation` may be added: the one a stop cut short, played again."""
    lost = added = 0
    for name in before:
        old, new = collections.Counter(before[name]), collections.Counter(after[name])
        lost += sum((old - new).values())
        extra = list((new - old).elements())
        if name == EVALUATIONS_FILE and due_evaluation is not None:
            made_up = [row for row in extra if int(row[0]) == due_evaluation][:1]
            extra = [row for row in extra if row not in made_up]
        added += len(extra)
    return lost, added


# -- one cycle ---------------------------------------------------------------------------------


def draw_cycle(rng: random.Random, second_writer: bool, first: bool,
               wait_seconds: float = WAIT_SECONDS) -> Draw:
    return Draw(wait=rng.uniform(0.0, wait_seconds), signum=rng.choice(SIGNALS),
                second_writer=second_writer, writer_at=rng.random(),
                final_window=not first and rng.randrange(FINAL_WINDOW_SHARE) == 0,
                window_at=rng.uniform(0.0, FINAL_WINDOW_SECONDS))


def launch_args(run_dir: Path, first: bool, timesteps: int,
                without_replay: bool = False) -> list[str]:
    """A new run the first time; afterwards --resume, with --timesteps only to extend."""
    if first:
        replay = [WITHOUT_REPLAY] if without_replay else []
        return [*RUN_FLAGS, *replay, f"--timesteps={timesteps}", f"--logdir={run_dir}"]
    extend = [f"--timesteps={timesteps}"] if timesteps != saved_timesteps(run_dir) else []
    return ["--resume", str(run_dir), *extend]


def phase_now(run_dir: Path, run: Launch, resumed: bool) -> str:
    """What the run is doing, as far as its files and stdout tell: a checkpoint being
    written (checkpoint.tmp made, or checkpoint.old during the swap), its start-up (a resume
    prints "resumed from" when restored) or acting (which may be evaluating)."""
    if any(made_since(run_dir / name, run.started_wall)
           for name in (NEW_CHECKPOINT, OLD_CHECKPOINT)):
        return "checkpoint"
    if resumed and "resumed from " not in run.stdout():
        return "start-up"
    return "acting"


def stopped_in_evaluation(manifest: dict) -> bool:
    """Whether a stopped run's checkpoint has an evaluation due at its step: the stop came in
    that evaluation (cut short, to be played again) or just before it."""
    step = step_of(manifest)
    return step % EVALUATE == 0 and manifest["evaluator"]["evaluated_at"] < step


def check_second_writer(run_dir: Path, holder: Launch, log: Path) -> float:
    """A second --resume while `holder` runs: refused at once in one line naming the holder,
    and the holder still running and holding the lock. Returns its seconds."""
    second = launch(["--resume", str(run_dir)], log)
    try:
        second.process.wait(timeout=SECOND_WRITER_SECONDS)
    except subprocess.TimeoutExpired:
        kill_if_running(second)
        raise SoakFailure(f"a second writer did not exit within {SECOND_WRITER_SECONDS:.0f} s",
                          second.stderr_tail()) from None
    lines = [line for line in second.stderr().splitlines() if line.strip()]
    refused = (second.process.returncode == 2 and len(lines) == 1 and IN_USE in lines[0]
               and f"pid {holder.pid} " in lines[0])
    if not refused:
        raise SoakFailure(f"a second writer exited with status {second.process.returncode}, "
                          f"not 2 with one line naming pid {holder.pid}", second.stderr_tail())
    if not holder.running() or not holds_lock(run_dir, holder.pid):
        raise SoakFailure("the run holding the directory did not survive a second writer",
                          holder.stderr_tail())
    return time.monotonic() - second.started


def check_second_sweep(run_dir: Path, holder: Launch, log: Path) -> float:
    """scripts/all_games.sh into the run's --out while `holder` runs: it leaves the run
    alone and says so (exit 3, the holder's pid named), moves nothing aside and writes no
    log of its own; the holder still runs and holds the lock. Returns its seconds."""
    out = run_dir.parent
    args = ["bash", str(ALL_GAMES), "--games", "breakout", "--seeds", "0", "--jobs", "1",
            "--out", str(out), "--python", sys.executable, "--", *SWEEP_FLAGS]
    started = time.monotonic()
    with log.with_suffix(".out").open("w") as stdout, log.with_suffix(".err").open("w") as err:
        sweep = subprocess.Popen(args, cwd=REPO, stdin=subprocess.DEVNULL, stdout=stdout,
                                 stderr=err, env={**os.environ, **CPU_ONLY})
        try:
            sweep.wait(timeout=SECOND_WRITER_SECONDS)
        except subprocess.TimeoutExpired:
            sweep.terminate()  # the sweep passes it on to any trainer it started
            sweep.wait()
            raise SoakFailure(f"a second sweep did not exit within "
                              f"{SECOND_WRITER_SECONDS:.0f} s", log.with_suffix(".err")
                              .read_text()) from None
    seconds = time.monotonic() - started
    stderr = log.with_suffix(".err").read_text()
    named = [line for line in stderr.splitlines()
             if f"{RUN_NAME} (running elsewhere: " in line and f" pid {holder.pid} " in line]
    moved = sorted(path.name for path in out.glob(f"{RUN_NAME}.incomplete-*"))
    if sweep.returncode != RUNNING_ELSEWHERE or not named or moved \
            or (out / f"{RUN_NAME}.log").exists():
        raise SoakFailure(f"a second sweep exited with status {sweep.returncode} (expected "
                          f"{RUNNING_ELSEWHERE}), named pid {holder.pid} running elsewhere: "
                          f"{bool(named)}, moved aside: {moved}, wrote its log: "
                          f"{(out / f'{RUN_NAME}.log').exists()}", stderr)
    if not holder.running() or not holds_lock(run_dir, holder.pid):
        raise SoakFailure("the run holding the directory did not survive a second sweep",
                          holder.stderr_tail())
    return seconds


def check_exit(run_dir: Path, run: Launch, cycle: Cycle, signum: signal.Signals) -> None:
    """The exit status the signal calls for (0 for a run that finished first), no traceback;
    after SIGTERM/SIGINT a new summary.json that names the signal."""
    status = run.process.returncode
    summary = read_summary(run_dir, run.started_wall)
    finished = status == 0 and summary.get("finished") is True
    where = moment(cycle)
    if status != EXPECTED_STATUS[signum] and not finished:
        raise SoakFailure(f"{where}: exit status {status}, expected "
                          f"{EXPECTED_STATUS[signum]}", run.stderr_tail())
    if "Traceback" in run.stderr():
        raise SoakFailure(f"{where}: a traceback on stderr", run.stderr_tail())
    if status == 128 + signum and summary.get("stopped_by_signal") != signum:
        # A resume stopped before it began exits without a summary, changing nothing.
        if summary or resume_files(run_dir) != cycle.files:
            raise SoakFailure(f"{where}: no summary.json naming the signal, and the run's "
                              "files changed", run.stderr_tail())
        cycle.phase = "start-up"


def moment(cycle: Cycle) -> str:
    """Which cycle, which signal and when: where a failure came from."""
    if cycle.signalled_at is None:
        return f"{cycle.name} ({cycle.phase}, no signal)"
    return f"{cycle.name}: {cycle.signal} at {cycle.signalled_at:.1f} s ({cycle.phase})"


def check_after(run_dir: Path, run: Launch, cycle: Cycle, kept: Rows | None,
                due_evaluation: int | None, tally: Tally) -> dict:
    """The checks of the run directory after an exit; returns the checkpoint's manifest."""
    try:
        _, manifest = verify_latest(run_dir)
    except SoakFailure as failure:
        raise SoakFailure(f"{moment(cycle)}, then {failure}", run.stderr_tail()) from None
    cycle.after = step_of(manifest)
    if cycle.before is not None and cycle.after < cycle.before:
        raise SoakFailure(f"{cycle.name}: the latest checkpoint went back from step "
                          f"{cycle.before} to {cycle.after}", run.stderr_tail())
    summary = read_summary(run_dir, run.started_wall)
    if summary and summary.get("steps") != cycle.after:
        raise SoakFailure(f"{cycle.name}: summary.json says step {summary.get('steps')}, the "
                          f"checkpoint {cycle.after}", run.stderr_tail())
    if kept is not None:
        lost, added = compare_kept(kept, rows_up_to(run_dir, cycle.before), due_evaluation)
        tally.rows_lost += lost
        tally.rows_repeated += added
        if lost or added:
            raise SoakFailure(f"{cycle.name}: of the CSV rows up to step {cycle.before}, "
                              f"{lost} lost or changed and {added} added", run.stderr_tail())
    return manifest


def run_cycle(number: int, run_dir: Path, logs: Path, draw: Draw, tally: Tally) -> None:
    """Launches the run, signals it after the drawn wait (or in its final window), and checks
    what it left."""
    first = number == 1
    start = None if first else latest_manifest(run_dir)
    before = None if start is None else step_of(start)
    kept = None if first else rows_up_to(run_dir, before)
    due = before if start is not None and stopped_in_evaluation(start) else None
    if first:
        timesteps = timesteps_for(FIRST_CHECKPOINT_STEP, 0, draw.wait, tally.steps_per_second)
    elif draw.final_window:
        timesteps = max(saved_timesteps(run_dir), -(-(before + 1) // STEP_GRAIN) * STEP_GRAIN)
    else:
        timesteps = timesteps_for(before, saved_timesteps(run_dir), draw.wait,
                                  tally.steps_per_second)
    cycle = Cycle(f"cycle {number}", draw.signum.name, timesteps, before,
                  files={} if first else resume_files(run_dir))
    tally.cycles.append(cycle)
    run = launch(launch_args(run_dir, first, timesteps, tally.without_replay),
                 logs / f"cycle{number:02d}")
    tally.resumes += not first
    try:
        # The wait counts from the lock: before it no file is touched and the trainer may not
        # have installed its signal handler yet (the interpreter's start and imports).
        zero = wait_while_running(lambda: holds_lock(run_dir, run.pid), run, LOCK_SECONDS,
                          "it took the run directory's lock")
        if first:  # a run without a checkpoint yet, which a sweep must not take as dead
            wait_while_running((run_dir / CONFIG_FILE).is_file, run, LOCK_SECONDS,
                       "it wrote config.json")
            tally.second_sweeps += 1
            seconds = check_second_sweep(run_dir, run, logs / f"cycle{number:02d}-sweep")
            tally.sweeps_left_alone += 1
            cycle.second_writer = f"sweep left it {seconds:.1f}s"
        if first:  # a new run killed before its first checkpoint leaves nothing to resume
            zero = wait_while_running((run_dir / CHECKPOINT / MANIFEST).is_file, run,
                              FIRST_CHECKPOINT_SECONDS, "its first checkpoint")
        if draw.final_window:
            window = wait_for_final_window(run, timesteps)
            sleep_until(window + draw.window_at, run)
        else:
            if draw.second_writer:
                sleep_until(zero + draw.writer_at * draw.wait, run)
                if run.running():
                    tally.second_writers += 1
                    seconds = check_second_writer(run_dir, run,
                                                  logs / f"cycle{number:02d}-second")
                    tally.refusals += 1
                    cycle.second_writer = f"refused {seconds:.1f}s"
                if run.running():
                    tally.second_sweeps += 1
                    seconds = check_second_sweep(run_dir, run,
                                                 logs / f"cycle{number:02d}-sweep")
                    tally.sweeps_left_alone += 1
                    cycle.second_writer += f", sweep left it {seconds:.1f}s"
            sleep_until(zero + draw.wait, run)
        signal_and_wait(run_dir, run, cycle, draw.signum, tally,
                        extend_if_finished=not draw.final_window)
    finally:
        kill_if_running(run)
    if draw.final_window and cycle.signalled_at is not None:
        cycle.phase = "final window"
    check_exit(run_dir, run, cycle, draw.signum)
    manifest = check_after(run_dir, run, cycle, kept, due, tally)
    if cycle.phase == "acting" and cycle.status == 128 + draw.signum \
            and stopped_in_evaluation(manifest):
        cycle.phase = "evaluation"


def wait_for_final_window(run: Launch, timesteps: int) -> float:
    """Waits until the run's stdout shows its last step (the progress line at it, or the
    evaluation or checkpoint it starts there), or its exit; returns the moment."""
    marks = (f"step {timesteps}/{timesteps} ", f"evaluation at step {timesteps}\n",
             f"checkpoint at step {timesteps}\n")
    deadline = time.monotonic() + FINAL_SECONDS
    while run.running() and not any(mark in run.stdout() for mark in marks):
        if time.monotonic() > deadline:
            raise SoakFailure(f"the run did not reach step {timesteps} within "
                              f"{FINAL_SECONDS:.0f} s", run.stderr_tail())
        time.sleep(POLL_SECONDS)
    return time.monotonic()


def run_owes_final_work(run_dir: Path) -> bool:
    """Whether the latest checkpoint is at the run's last step, and summary.json does not say
    finished: a stop in its final window (or a kill just after it) left it so."""
    try:
        finished = json.loads((run_dir / SUMMARY_FILE).read_text()).get("finished") is True
    except (OSError, ValueError):
        finished = False
    return not finished and step_of(latest_manifest(run_dir)) >= saved_timesteps(run_dir)


def finish_cycle(number: int, run_dir: Path, logs: Path, tally: Tally) -> None:
    """Resumes a run that owes the work of its final window, without extending it, and lets
    it finish: exit 0, finished, at the same step, every row kept."""
    start = latest_manifest(run_dir)
    before = step_of(start)
    kept = rows_up_to(run_dir, before)
    due = before if stopped_in_evaluation(start) else None
    cycle = Cycle(f"cycle {number}", "-", saved_timesteps(run_dir), before, phase="finish")
    tally.cycles.append(cycle)
    run = launch(launch_args(run_dir, False, cycle.timesteps), logs / f"cycle{number:02d}")
    tally.resumes += 1
    try:
        run.process.wait(timeout=FINAL_SECONDS)
    except subprocess.TimeoutExpired:
        raise SoakFailure(f"{cycle.name}: the run did not finish its final work within "
                          f"{FINAL_SECONDS:.0f} s", run.stderr_tail()) from None
    finally:
        kill_if_running(run)
    cycle.alive, cycle.status = time.monotonic() - run.started, run.process.returncode
    said_finished = "is finished" in run.stdout()
    summary = read_summary(run_dir, run.started_wall)
    if cycle.status != 0 or "Traceback" in run.stderr() or not (
            said_finished or summary.get("finished") is True):
        raise SoakFailure(f"{cycle.name}: the resume that finishes the run's final work exited "
                          f"with status {cycle.status}, finished: "
                          f"{said_finished or summary.get('finished')}", run.stderr_tail())
    check_after(run_dir, run, cycle, kept, due, tally)
    if cycle.after != before:
        raise SoakFailure(f"{cycle.name}: finishing the final work moved the run from step "
                          f"{before} to {cycle.after}")


def signal_and_wait(run_dir: Path, run: Launch, cycle: Cycle, signum: signal.Signals,
                    tally: Tally, extend_if_finished: bool = True) -> None:
    """Sends the signal (unless the run has finished) and waits SOAK_STOP_SECONDS for the
    exit. A run that finished first shows this machine faster than the bound, unless it was meant
    to reach its end (a final-window cycle)."""
    cycle.phase = phase_now(run_dir, run, resumed=cycle.before is not None)
    if run.running():
        run.process.send_signal(signum)
        cycle.signalled_at = time.monotonic() - run.started
        tally.kills[signum.name] += 1
    else:
        cycle.phase = "finished"
        if extend_if_finished:
            tally.steps_per_second *= 2
    try:
        run.process.wait(timeout=SOAK_STOP_SECONDS)
    except subprocess.TimeoutExpired:
        raise SoakFailure(f"{cycle.name}: the run was still there {SOAK_STOP_SECONDS:.0f} s "
                          f"after {signum.name} ({cycle.phase})", run.stderr_tail()) from None
    cycle.alive = time.monotonic() - run.started
    cycle.status = run.process.returncode


# -- the end -----------------------------------------------------------------------------------


def final_run(run_dir: Path, logs: Path, tally: Tally) -> None:
    """Resumes the run once more, lets it finish, and checks everything it left."""
    start = latest_manifest(run_dir)
    before = step_of(start)
    kept = rows_up_to(run_dir, before)
    due = before if stopped_in_evaluation(start) else None
    current = saved_timesteps(run_dir)
    timesteps = current if current > before else timesteps_for(before, current, 0.0, 0.0)
    cycle = Cycle("final", "-", timesteps, before)
    tally.cycles.append(cycle)
    run = launch(launch_args(run_dir, False, timesteps), logs / "final")
    tally.resumes += 1
    try:
        tally.renamed = move_while_running(run_dir, run)
        run.process.wait(timeout=FINAL_SECONDS)
    except subprocess.TimeoutExpired:
        raise SoakFailure(f"the final run did not finish within {FINAL_SECONDS:.0f} s",
                          run.stderr_tail()) from None
    finally:
        kill_if_running(run)
    if tally.renamed:
        if run_dir.exists():
            raise SoakFailure(f"{run_dir} was made again after the run's directory was "
                              f"renamed to {run_dir.name}{MOVED_SUFFIX}")
        run_dir.with_name(run_dir.name + MOVED_SUFFIX).rename(run_dir)  # for the checks
    cycle.alive, cycle.status = time.monotonic() - run.started, run.process.returncode
    cycle.phase = "finished"
    if cycle.status != 0 or "Traceback" in run.stderr():
        raise SoakFailure(f"the final run exited with status {cycle.status}",
                          run.stderr_tail())
    if not read_summary(run_dir, run.started_wall).get("finished"):
        raise SoakFailure("the final run's summary.json does not say finished")
    manifest = check_after(run_dir, run, cycle, kept, due, tally)
    tally.final_step = cycle.after
    check_final(run_dir, manifest, timesteps, tally)


def move_while_running(run_dir: Path, run: Launch) -> bool:
    """Renames the run's directory when the run prints its first "checkpoint at step" line
    (mid-run, while that checkpoint is written); False if the run ended before any."""
    out = run.log.with_suffix(".out")
    deadline = time.monotonic() + LOCK_SECONDS
    while "checkpoint at step" not in out.read_text(errors="replace"):
        if not run.running() or time.monotonic() > deadline:
            return False
        time.sleep(POLL_SECONDS)
    run_dir.rename(run_dir.with_name(run_dir.name + MOVED_SUFFIX))
    return True


def check_final(run_dir: Path, manifest: dict, timesteps: int, tally: Tally) -> None:
    """The finished run's CSVs over its whole life, its last checkpoint and replay memory."""
    step = step_of(manifest)
    if step < timesteps:
        raise SoakFailure(f"the finished run stopped at step {step} of {timesteps}")
    leftovers = [name for name in (NEW_CHECKPOINT, OLD_CHECKPOINT) if (run_dir / name).exists()]
    if leftovers:
        raise SoakFailure(f"a finished run left {', '.join(leftovers)} behind")
    check_episodes(run_dir, tally)
    check_evaluations(run_dir, step, tally)
    if not tally.without_replay:
        check_replay(latest_checkpoint(run_dir))


def check_episodes(run_dir: Path, tally: Tally) -> None:
    """episodes.csv: games 1..n, each once, at non-decreasing timesteps."""
    rows = logged_rows(run_dir / EPISODES_FILE)
    numbers = [int(row[0]) for row in rows]
    lost = len(set(range(1, max(numbers, default=0) + 1)) - set(numbers))
    repeated = len(numbers) - len(set(numbers))
    tally.rows_lost += lost
    tally.rows_repeated += repeated
    if lost or repeated or numbers != sorted(numbers):
        raise SoakFailure(f"{EPISODES_FILE}: {lost} games missing, {repeated} repeated, "
                          f"numbers in order: {numbers == sorted(numbers)}")
    timesteps = [int(row[1]) for row in rows]
    if timesteps != sorted(timesteps):
        raise SoakFailure(f"{EPISODES_FILE}: its timesteps go back")


def check_evaluations(run_dir: Path, step: int, tally: Tally) -> None:
    """evaluations.csv: one row at each multiple of the period up to the final step."""
    timesteps = [int(row[0]) for row in logged_rows(run_dir / EVALUATIONS_FILE)]
    expected = set(range(EVALUATE, step + 1, EVALUATE))
    lost = len(expected - set(timesteps))
    repeated = len(timesteps) - len(set(timesteps))
    tally.rows_lost += lost
    tally.rows_repeated += repeated
    strays = sorted(set(timesteps) - expected)
    if lost or repeated or strays:
        raise SoakFailure(f"{EVALUATIONS_FILE}: {lost} evaluations missing, {repeated} "
                          f"repeated, off the period: {strays}")


def check_replay(checkpoint: Path) -> None:
    """The checkpoint's replay memory read back keeps the memory's invariants."""
    memory = ReplayMemory(REPLAY_CAPACITY, np.random.default_rng(0))
    try:
        if not read_replay_into(checkpoint, memory):
            raise SoakFailure(f"{checkpoint} holds no replay memory")
        memory.check_valid()
    except (CheckpointError, ValueError) as error:
        raise SoakFailure(f"{checkpoint}: {error}") from None
    if len(memory) == 0:
        raise SoakFailure(f"{checkpoint}: the replay memory read back is empty")


# -- the soak and its report -------------------------------------------------------------------


def second_writer_cycles(rng: random.Random, kills: int) -> set[int]:
    """A few resume cycles (not the first: a second --resume needs config.json written)."""
    resumes = range(2, kills + 1)
    count = min(len(resumes), max(1, round(kills / SECOND_WRITER_SHARE)))
    return set(rng.sample(resumes, count))


def soak(kills: int, seed: int, run_dir: Path, logs: Path, tally: Tally,
         wait_seconds: float = WAIT_SECONDS) -> None:
    """Cycles until `kills` signals have been sent, then the final run."""
    rng = random.Random(seed)
    writers = second_writer_cycles(rng, kills)
    number = 0
    while sum(tally.kills.values()) < kills:
        number += 1
        if number > 3 * kills + 5:  # a run that keeps finishing before its signal
            raise SoakFailure(f"{number - 1} cycles sent only {sum(tally.kills.values())} "
                              "signals")
        if number > 1 and run_owes_final_work(run_dir):
            finish_cycle(number, run_dir, logs, tally)
        else:
            run_cycle(number, run_dir, logs,
                      draw_cycle(rng, number in writers, number == 1, wait_seconds), tally)
        print_row(tally.cycles[-1])
    if run_owes_final_work(run_dir):
        finish_cycle(number + 1, run_dir, logs, tally)
        print_row(tally.cycles[-1])
    final_run(run_dir, logs, tally)
    print_row(tally.cycles[-1])


TABLE = "{:>8} {:>8} {:>10} {:>6} {:>7} {:>6} {:>7} {:>7} {:>9}  {}"


def print_header() -> None:
    print(TABLE.format("cycle", "signal", "phase", "at s", "alive s", "exit", "ckpt<", "ckpt>",
                       "timesteps", "2nd writer"), flush=True)


def print_row(cycle: Cycle) -> None:
    def show(value: object, spec: str = "") -> str:
        return "-" if value is None else format(value, spec)

    print(TABLE.format(cycle.name.replace("cycle ", ""), cycle.signal.replace("SIG", ""),
                       cycle.phase, show(cycle.signalled_at, ".1f"), show(cycle.alive, ".1f"),
                       show(cycle.status), show(cycle.before), show(cycle.after),
                       cycle.timesteps, cycle.second_writer), flush=True)


def figures(tally: Tally, seconds: float, passed: bool) -> dict:
    killed = [cycle for cycle in tally.cycles if cycle.name != "final"]
    phases = collections.Counter(cycle.phase for cycle in killed)
    return {"passed": passed, "cycles": len(killed), "kills": sum(tally.kills.values()),
            "kills_by_signal": {signum.name: tally.kills[signum.name] for signum in SIGNALS},
            "phases": dict(sorted(phases.items())), "resumes": tally.resumes,
            "second_writers": tally.second_writers, "refusals": tally.refusals,
            "second_sweeps": tally.second_sweeps, "sweeps_left_alone": tally.sweeps_left_alone,
            "rows_lost": tally.rows_lost, "rows_repeated": tally.rows_repeated,
            "failures": tally.failures, "final_step": tally.final_step,
            "without_replay": tally.without_replay, "renamed_mid_run": tally.renamed,
            "wall_seconds": round(seconds, 1)}


def summary_line(figs: dict) -> str:
    by_signal = ", ".join(f"{name} {count}" for name, count in figs["kills_by_signal"].items())
    return (f"soak {'PASSED' if figs['passed'] else 'FAILED'}: {figs['kills']} kills "
            f"({by_signal}), {figs['resumes']} resumes, {figs['refusals']} of "
            f"{figs['second_writers']} second writers refused, {figs['sweeps_left_alone']} of "
            f"{figs['second_sweeps']} second sweeps left the run alone, rows lost "
            f"{figs['rows_lost']}, "
            f"rows repeated {figs['rows_repeated']}, failures {figs['failures']}, final step "
            f"{figs['final_step']}"
            f"{', renamed mid-run' if figs['renamed_mid_run'] else ''}, "
            f"wall {figs['wall_seconds']:.0f} s")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20, help="signals to send (default 20)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the waits, signals and second writers (default 0)")
    parser.add_argument("--out", required=True, help="directory for the run and the logs")
    parser.add_argument("--wait-seconds", type=float, default=WAIT_SECONDS,
                        help="a signal comes at a random moment of the first this many seconds "
                             f"after the run takes its lock (default {WAIT_SECONDS:g})")
    parser.add_argument("--without-replay", action="store_true",
                        help="make the run with --checkpoint-replay=false: every resume "
                             "refills its replay memory")
    options = parser.parse_args(argv)
    if options.kills < 1:
        parser.error("--kills must be 1 or more")
    if not 0 < options.wait_seconds <= 3600:
        parser.error("--wait-seconds must be more than 0 and at most 3600")
    if (Path(options.out) / RUN_NAME).exists():
        parser.error(f"{Path(options.out) / RUN_NAME} exists; give a fresh --out")
    return options


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_args(argv)
    # `soak.py &` from a script starts this with SIGINT ignored, which the trainers would
    # inherit until they install their handler; handling it here gives them the default (and
    # lets a SIGTERM or Ctrl-C of the soak stop the trainer it started).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    run_dir, logs = Path(options.out) / RUN_NAME, Path(options.out) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    tally, started, status = Tally(without_replay=options.without_replay), time.monotonic(), 0
    replay = ", without a saved replay memory" if options.without_replay else ""
    print(f"soak: {options.kills} kills, seed {options.seed}, waits up to "
          f"{options.wait_seconds:g} s, run in {run_dir}{replay}",
          flush=True)
    print_header()
    try:
        soak(options.kills, options.seed, run_dir, logs, tally, options.wait_seconds)
    except SoakFailure as failure:
        tally.failures += 1
        status = 1
        if tally.cycles:
            print_row(tally.cycles[-1])
        print(f"FAILED: {failure}", flush=True)
        if failure.tail:
            print(f"stderr tail:\n{failure.tail}", flush=True)
    except KeyboardInterrupt:
        tally.failures += 1
        status = 130
        print("soak: interrupted", flush=True)
    figs = figures(tally, time.monotonic() - started, passed=status == 0)
    print(summary_line(figs))
    print(json.dumps(figs), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
