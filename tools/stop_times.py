#!/usr/bin/env python3
"""How long the fast trainer takes to stop on SIGTERM in each phase of a full-size run.

A Pong run (W = 16, the default evaluation, a replay memory and replay start of --capacity C,
by default 1,000,000: ~7.1 GB a checkpoint; epochs of --target-update T) goes through four
processes, each stopped by one SIGTERM: the new run late in its random start, a resume 1 s
into its evaluation at step C, a resume from a cold page cache as its checkpoint at C + T
begins, and a resume half-way through its next epoch. It prints a JSON line per stop (the
seconds from the signal to the exit, of which writing a checkpoint) and per resume (the
seconds to its start-up lines); docs/checkpoints.md holds its figures. It needs ~14.2 GB of
disk; a dry run takes 3 minutes:

    nohup python tools/stop_times.py > /tmp/stop_times.log 2>&1 &
    python tools/stop_times.py --capacity 20000 --target-update 2000 --phase1-fraction 0.5
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
BYTES_PER_TRANSITION = 7_064  # a checkpoint's replay bytes per slot
PROGRESS = re.compile(r"^step (\d+)/\d+ ")
# A resume's start-up lines: after the checkpoint's CRC check, TensorFlow imported, memory
# read (the first progress line, due every second from before the read).
LINES = {"resuming": re.compile(r"^resuming from "),
         "device": re.compile(r"^\w+ on (CPU|GPU)\b"), "first step": PROGRESS}
TMP, OLD = "checkpoint.tmp", "checkpoint.old"
TIMEOUT, STOP_TIMEOUT = 3600.0, 1800.0  # seconds for a phase to come; for an exit


class StageFailed(RuntimeError):
    """A phase could not be caught (the run ended, or a wait timed out)."""


class TrainerProcess:
    """One run_fast_dqn.py process, watched: `watch()` stamps with time.monotonic() each new
    line of its output (in `log`) and each appearance (+) or removal (-) of checkpoint.tmp/
    and checkpoint.old/ in its run directory, and with `signal_on_tmp` sends SIGTERM the
    moment checkpoint.tmp/ appears. The waits call it every 20 ms."""

    def __init__(self, argv: list[str], run_dir: Path, log: Path, signal_on_tmp: bool = False):
        self.run_dir, self.log, self.signal_on_tmp = run_dir, log, signal_on_tmp
        self.lines: list[tuple[float, str]] = []
        self.events: list[tuple[float, str]] = []
        self.present = {name: (run_dir / name).exists() for name in (TMP, OLD)}
        self.t_signal: float | None = None
        self.t_launch, self.t_exit, self.read = time.monotonic(), 0.0, 0
        with open(log, "w") as out:
            self.process = subprocess.Popen(
                [sys.executable, str(REPO / "run_fast_dqn.py"), *argv], cwd=REPO,
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def watch(self) -> bool:
        """Takes in what happened since the last call; whether the process still runs."""
        running, now = self.process.poll() is None, time.monotonic()
        text = self.log.read_text(errors="replace")[self.read:]
        whole = text[:text.rfind("\n") + 1]
        self.read += len(whole)
        self.lines += [(now, line) for line in whole.splitlines()]
        for name, was in self.present.items():
            if (self.run_dir / name).exists() != was:
                self.present[name] = not was
                self.events.append((now, name + "+-"[was]))
                if name == TMP and not was and self.signal_on_tmp:
                    self.send_sigterm()
        if not running and not self.t_exit:
            self.t_exit = now
        return running

    def send_sigterm(self) -> None:
        self.t_signal = self.t_signal or time.monotonic()
        self.process.send_signal(signal.SIGTERM)

    def first(self, pattern: re.Pattern) -> float | None:
        """The time of the first line that matches `pattern`, or None."""
        return next((t for t, line in self.lines if pattern.search(line)), None)

    def last_step(self) -> int:
        steps = [int(m[1]) for _, line in self.lines if (m := PROGRESS.match(line))]
        return steps[-1] if steps else -1

    def wait_for(self, condition: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
        """Watches until `condition()`; StageFailed if the process exits first or the time
        runs out."""
        deadline = time.monotonic() + timeout
        while not condition():
            if (not self.watch() and not condition()) or time.monotonic() > deadline:
                raise StageFailed(f"no {what} (exit {self.process.poll()}); see {self.log}")
            time.sleep(0.02)

    def write_seconds(self) -> float:
        """Seconds of checkpoint writing after the signal: from the last checkpoint.tmp/
        appearing (or the signal) to the last removal (its rename, then checkpoint.old/'s)."""
        starts = [t for t, what in self.events if what == TMP + "+"]
        ends = [t for t, what in self.events if what.endswith("-")]
        if not starts or not ends or ends[-1] < self.t_signal:
            return 0.0
        return ends[-1] - max(starts[-1], self.t_signal)


def checkpoint_counters_and_gb(run_dir: Path) -> tuple[dict, float]:
    manifest = json.loads((run_dir / "checkpoint" / "manifest.json").read_text())
    files = [path for path in (run_dir / "checkpoint").rglob("*") if path.is_file()]
    return manifest["counters"], sum(path.stat().st_size for path in files) / 1e9


def measure(args: argparse.Namespace, workdir: Path, trainers: list[TrainerProcess]) -> None:
    """The four processes (see the module's docstring), each appended to `trainers`."""
    C, T, run_dir = args.capacity, args.target_update, workdir / "run"

    def launch(name: str, argv: list[str], **options) -> TrainerProcess:
        print(f"{name}: python run_fast_dqn.py {' '.join(argv)}", flush=True)
        trainers.append(TrainerProcess(argv, run_dir, workdir / f"{name}.log", **options))
        return trainers[-1]

    def stop(trainer: TrainerProcess, phase: str, confirms: Callable[[int, int], bool]) -> None:
        load = os.getloadavg()[0]
        if trainer.t_signal is None:
            trainer.send_sigterm()
        trainer.wait_for(lambda: trainer.t_exit > 0, f"exit in {phase}", STOP_TIMEOUT)
        counters, gb = checkpoint_counters_and_gb(run_dir)
        step, updates = counters["step"], counters["updates"]
        seconds, write = trainer.t_exit - trainer.t_signal, trainer.write_seconds()
        confirmed = confirms(step, updates)
        print(json.dumps({"phase": phase, "seconds": round(seconds, 2), "checkpoint_write":
                          round(write, 2), "other": round(seconds - write, 2), "checkpoint_gb":
                          round(gb, 2), "step": step, "exit": trainer.process.returncode,
                          "load": load, "confirmed": confirmed}), flush=True)
        if not confirmed and len(trainers) < 4:
            raise StageFailed(f"{phase}: the checkpoint's step {step} does not confirm it")

    def resume(name: str, cold: bool = False, **options) -> TrainerProcess:
        for path in (run_dir / "checkpoint").rglob("*") if cold else ():
            if path.is_file():  # out of the page cache: a cold start, as on a new node
                fd = os.open(path, os.O_RDONLY)
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.close(fd)
        trainer = launch(name, ["--resume", str(run_dir)], **options)
        trainer.wait_for(lambda: trainer.first(PROGRESS) is not None, "first progress line")
        times = {key: round(trainer.first(pattern) - trainer.t_launch, 2)
                 for key, pattern in LINES.items() if trainer.first(pattern) is not None}
        print(json.dumps({"process": name, "cold": cold, "seconds_to": times}), flush=True)
        return trainer

    trainer = launch("new-run", [
        "--game=pong", "--workers=16", f"--replay-capacity={C}", f"--replay-start={C}",
        f"--evaluate={C}", f"--target-update={T}", f"--checkpoint-every={C + T}",
        f"--timesteps={C + 4 * T}", "--progress-every=1", f"--logdir={run_dir}"])
    trainer.wait_for(lambda: trainer.last_step() >= args.phase1_fraction * C,
                     "progress line late in the random start")
    stop(trainer, "random start (memory filling)", lambda step, updates: step < C)
    trainer = resume("resume-1")
    trainer.wait_for(lambda: trainer.first(re.compile(f"^evaluation at step {C}$")) is not None,
                     f"evaluation at step {C}")
    time.sleep(1.0)
    stop(trainer, "evaluation (30 games)", lambda step, updates: step == C)
    trainer = resume("resume-2", cold=True, signal_on_tmp=True)
    trainer.wait_for(lambda: trainer.t_signal is not None, "checkpoint.tmp/")
    epoch_seconds = trainer.t_signal - next((t for t, line in trainer.lines if (
        m := PROGRESS.match(line)) and int(m[1]) > C), trainer.t_signal)
    stop(trainer, "periodic checkpoint being written", lambda step, updates: step == C + T)
    updates_before = checkpoint_counters_and_gb(run_dir)[0]["updates"]
    trainer = resume("resume-3")
    trainer.wait_for(lambda: trainer.last_step() > C + T, "the next epoch")
    time.sleep(min(max(epoch_seconds / 2, 3.0), 120.0))
    stop(trainer, "trainer epoch (learning)",  # some of the epoch's T / 4 updates abandoned
         lambda step, updates: C + T < step <= C + 2 * T and 0 < updates - updates_before < T // 4)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, help="a new directory for the run and the "
                        "trainers' logs (default /tmp/stop_times-PID)")
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--target-update", type=int, default=10_000)
    parser.add_argument("--phase1-fraction", type=float, default=0.95)
    args = parser.parse_args(argv)
    if args.capacity % 16 or args.target_update % 16:
        parser.error("--capacity and --target-update must be multiples of 16 (W)")
    workdir = args.workdir or Path(f"/tmp/stop_times-{os.getpid()}")
    if workdir.exists():
        parser.error(f"{workdir} exists; give a new --workdir")
    workdir.mkdir(parents=True)
    if shutil.disk_usage(workdir).free < 2 * args.capacity * BYTES_PER_TRANSITION + 2**31:
        workdir.rmdir()
        parser.error(f"not enough free disk under {workdir} for two checkpoints")
    print(f"stop times: {os.cpu_count()} cores, load {os.getloadavg()}, in {workdir}",
          flush=True)
    trainers, status = [], 0
    try:
        measure(args, workdir, trainers)
    except StageFailed as error:
        print(f"error: {error}", flush=True)
        status = 1
    finally:
        for trainer in trainers:
            trainer.process.kill()  # if still running: a failed or interrupted measurement
        shutil.rmtree(workdir / "run", ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
