#!/usr/bin/env python3
"""Measures how long the fast trainer takes to stop on SIGTERM, phase by phase, with the
default evaluation (30 games, epsilon 0.05, up to 4,500 steps each) and a full-size replay
memory (1,000,000 transitions, about 7.1 GB in a checkpoint), and how long a resume of the
full checkpoint takes to start.

    nohup python tools/stop_times.py > /tmp/stop_times.log 2>&1 &

It prints what it does as it goes, then a table (phase, seconds from the signal to the
process's exit, of which checkpoint write, checkpoint size) and, last, one JSON line.
Everything is written under --workdir (default /tmp/stop_times-<pid>): the run, deleted at
the end unless --keep, and each trainer process's log (its output lines, timestamped). Peak
disk use is two checkpoints (~14.2 GB: the new one is written beside the old one); no
checkpoint is ever copied. Peak memory is one trainer (~7.5 GB).
It took 13 minutes on 2 busy cores, 8 of them filling the memory with random actions.
A dry run of the whole procedure at a small scale (~3 minutes):
--capacity=20000 --target-update=2000 --phase1-fraction=0.5.

One run directory is driven through four processes, each stopped by one SIGTERM (C is the
capacity, T the target update period; the flags are chosen so that the phases come in an
order that can be caught):

    --game=pong --workers=16 --replay-capacity=C --replay-start=C --evaluate=C
    --target-update=T --checkpoint-every=C+T --timesteps=C+4T --progress-every=1

1. new run, random start: it fills the memory with uniformly random actions; SIGTERM once
   a progress line shows step >= 0.95 C (--phase1-fraction). Checkpoint: 0.95 C slots.
2. resume 1, evaluation: it fills the rest and, at step C, evaluates (C is a multiple of
   --evaluate) before learning starts; SIGTERM in that evaluation. The evaluation is dropped
   and the stop writes a full checkpoint at step C, with the evaluation still due.
3. resume 2, from the full checkpoint (its files are first evicted from the page cache,
   so this is a cold start, as on a new node; --no-cold keeps them): it plays the due
   evaluation whole, then the first learning epoch C..C+T, and at C+T writes the periodic
   checkpoint (C+T is a multiple of --checkpoint-every); SIGTERM as soon as `checkpoint.tmp/`
   appears, so the whole 7.1 GB write is still to come (the worst case for a stop).
4. resume 3, from that checkpoint (warm page cache): a trainer epoch C+T..C+2T; SIGTERM half
   an epoch in (half of the epoch's duration measured in resume 2).

Resume start = launch -> the trainer's "resumed from ... at step N" line, for resumes 1
(0.95 C slots), 2 (full, cold) and 3 (full, warm); split by the trainer's own lines into
launch -> "run directory:" (Python start and the CRC-32 check of every checkpoint file),
-> the device line (TensorFlow's import) and -> "resumed from" (building the networks and
env pool, reading the networks and the 7 GB memory).

How each phase is recognized, and how sure that is:

- Random start: the progress line (`--progress-every=1` prints one a second off a terminal)
  shows the step; below C every action is random (epsilon 1) and nothing is learned.
  Certain; checked afterwards: summary.json's step < C and 0 updates.
- Evaluation: the run says so itself: off a terminal it prints "evaluation at step C" as
  the evaluation starts (`Progress.paused`); the signal goes --eval-delay (1 s) after that
  line. Certain; checked afterwards: the checkpoint is at step C, evaluations.csv has no
  row (the evaluation was cut short, not logged) and the next resume starts by playing it
  (evaluations.csv gets its row then). With the default delay the signal lands while the
  evaluation makes or resets its games (in groups of 8, the stop checked between groups);
  once the games are under way the stop is seen within one step (~10 ms). The timeline's
  checkpoint_tmp_appears says how long the stop took to be acted on.
- Periodic checkpoint write: `checkpoint.tmp/` appearing in the run directory (polled every
  20 ms; the signal is sent from the polling thread at once). Certain; checked afterwards:
  the checkpoint is at step C+T, and only one `checkpoint.tmp/` appeared in that process.
- UpdatePath epoch: progress lines past C+T come from inside `FastDQN._run_epoch` while the
  trainer thread makes the epoch's updates (the main thread may be acting or, as acting is
  faster than training here, already waiting for the trainer at the epoch's end; both are
  "during a trainer epoch"). Certain that it is in the epoch; checked afterwards:
  summary.json's updates minus the checkpoint's are above 0 and below the epoch's T/4,
  i.e. the rest was abandoned.

A phase that is not confirmed stops the procedure (the later phases depend on it), except
the last.

Checkpoint write time is read off the run directory: from `checkpoint.tmp/` appearing to it
being renamed to `checkpoint/` and the previous checkpoint's directory (`checkpoint.old/`)
being removed, polled every 20 ms (so +-0.04 s). "of which ckpt" is the part of that write
after the signal; "other" is the rest of the stop (finishing the round, abandoning the
trainer, summary.json, closing the envs, TensorFlow's and Python's exit). A stop whose
"other" exceeds 10 s is flagged: it should take seconds plus one checkpoint write.

Timings depend on the machine and on what else runs on it: the output records nproc, the
free disk, the memory, the load averages at each signal, and whether the checkpoint's files
were in the page cache at each resume.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tools/ is first otherwise

from tools.entry_point_runs import WaitFailed, launch, wait_until  # noqa: E402

REPO = Path(__file__).resolve().parent.parent  # the checkout whose entry points it runs
BYTES_PER_TRANSITION = 7_064  # fast_dqn.transitions: a checkpoint's replay bytes per slot
POLL_SECONDS = 0.02  # the run directory
SLOW_OTHER_SECONDS = 10.0  # a stop should take seconds plus one checkpoint write
PROGRESS = re.compile(r"^step (\d+)/(\d+) ")
RESUMED = re.compile(r"^resumed from (\S+) at step (\d+)")
GB = 1e9


class StageFailed(RuntimeError):
    """A phase could not be caught (the run ended, or a wait timed out)."""


# -- one trainer process, watched ----------------------------------------------------------

@dataclass
class Event:
    t: float  # time.monotonic()
    what: str


class UpdatePath:
    """A trainer process: its output lines and the changes in its run directory, timestamped.

    Started by the harness the tests use (tools/entry_point_runs.py: output in NAME.out
    and NAME.err). Three threads: one follows NAME.out (each line stamped and written to the
    log), one waits for the exit (stamped), one polls the run directory every POLL_SECONDS
    (`checkpoint.tmp`, `checkpoint.old` appearing and going, summary.json rewritten).
    `signal_on_tmp` makes the polling thread send SIGTERM the moment `checkpoint.tmp`
    appears.
    """

    def __init__(self, name: str, argv: list[str], run_dir: Path, log_path: Path,
                 repo: Path):
        self.name, self.argv, self.run_dir = name, argv, run_dir
        self.lines: list[tuple[float, str]] = []
        self.events: list[Event] = []
        self.t_signal: float | None = None
        self.t_exit: float | None = None
        self.returncode: int | None = None
        self.signal_on_tmp = False
        self._lock = threading.Lock()
        self._log = open(log_path, "w", buffering=1)
        self.t_launch = time.monotonic()
        # Whatever device the machine has: this measures real runs, not the tests' CPU runs.
        self.launched = launch(repo / "run_fast_dqn.py", argv, log_path.with_suffix(""),
                               repo=repo, env={"PYTHONUNBUFFERED": "1"})
        self.proc = self.launched.process
        self._done = threading.Event()
        for target in (self._read, self._wait, self._poll):
            threading.Thread(target=target, daemon=True).start()

    def _read(self) -> None:
        """Follows the run's stdout file, a line as soon as it is whole, until the exit."""
        with open(self.launched.log.with_suffix(".out")) as out:
            pending = ""
            while True:
                exited = self._done.is_set()
                pending += out.read()
                *whole, pending = pending.split("\n")
                now = time.monotonic()
                for line in whole:
                    with self._lock:
                        self.lines.append((now, line))
                    self._log.write(f"{now - self.t_launch:9.3f} {line}\n")
                if exited:
                    return
                time.sleep(POLL_SECONDS)

    def _wait(self) -> None:
        self.returncode = self.proc.wait()
        self.t_exit = time.monotonic()
        self._done.set()

    def _poll(self) -> None:
        tmp, old = self.run_dir / "checkpoint.tmp", self.run_dir / "checkpoint.old"
        summary = self.run_dir / "summary.json"
        state = {"tmp": tmp.exists(), "old": old.exists()}
        summary_mtime = _mtime(summary)
        while not self._done.is_set():
            now = time.monotonic()
            for key, path in (("tmp", tmp), ("old", old)):
                present = path.exists()
                if present != state[key]:
                    state[key] = present
                    self.events.append(Event(now, f"{key}{'+' if present else '-'}"))
                    if key == "tmp" and present and self.signal_on_tmp:
                        self.signal_on_tmp = False
                        self.send(signal.SIGTERM)
            mtime = _mtime(summary)
            if mtime != summary_mtime:
                summary_mtime = mtime
                self.events.append(Event(now, "summary"))
            time.sleep(POLL_SECONDS)

    # -- what the stages ask --------------------------------------------------------------------

    def send(self, signum: int) -> None:
        if self.t_signal is None:
            self.t_signal = time.monotonic()
        try:
            self.proc.send_signal(signum)
        except ProcessLookupError:
            pass

    @property
    def running(self) -> bool:
        return not self._done.is_set()

    def lines(self) -> list[tuple[float, str]]:
        with self._lock:
            return list(self.lines)

    def progress(self) -> list[tuple[float, int]]:
        """(time, step) of every progress line so far."""
        found = []
        for t, line in self.lines():
            match = PROGRESS.match(line)
            if match:
                found.append((t, int(match.group(1))))
        return found

    def first_line(self, pattern: str | re.Pattern) -> tuple[float, str] | None:
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        for t, line in self.lines():
            if regex.search(line):
                return t, line
        return None

    def wait_until(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        """Waits until `predicate()`; StageFailed if the process ends (its last lines read)
        or time runs out."""
        try:
            wait_until(predicate, lambda: self.running, timeout, what)
        except WaitFailed as failure:
            raise StageFailed(f"{self.name} (exit {self.returncode}): {failure}; see its log") \
                from None

    def wait_exit(self, timeout: float) -> None:
        if not self._done.wait(timeout):
            self.kill()
            raise StageFailed(f"{self.name}: still running {timeout:.0f} s after the signal; "
                              "killed (SIGKILL)")
        time.sleep(0.3)  # the reader thread drains the last lines
        self._log.close()

    def kill(self) -> None:
        if self.running:
            self.proc.kill()
            self._done.wait(30)

    # -- what happened ------------------------------------------------------------------------

    def checkpoint_writes(self) -> list[tuple[float, float | None]]:
        """(start, end) of every checkpoint write seen: `checkpoint.tmp` appearing, then
        gone and the previous checkpoint (`checkpoint.old`) removed; end None if unfinished."""
        writes = []
        events = list(self.events)
        for index, event in enumerate(events):
            if event.what != "tmp+":
                continue
            end = None
            for later in events[index + 1:]:
                if later.what == "tmp+":
                    break
                if later.what in ("tmp-", "old-"):
                    end = later.t
            writes.append((event.t, end))
        return writes


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


# -- the run directory ------------------------------------------------------------------------

def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def manifest_counters(run_dir: Path) -> dict:
    return read_json(run_dir / "checkpoint" / "manifest.json").get("counters", {})


def checkpoint_gb(run_dir: Path) -> float:
    total = sum(path.stat().st_size for path in (run_dir / "checkpoint").rglob("*")
                if path.is_file())
    return total / GB


def evaluation_rows(run_dir: Path) -> int:
    try:
        with open(run_dir / "evaluations.csv") as file:
            return max(0, sum(1 for row in csv.reader(file) if row) - 1)
    except OSError:
        return 0


def checkpoint_files(run_dir: Path) -> list[Path]:
    return [path for path in (run_dir / "checkpoint").rglob("*") if path.is_file()]


def page_cache_fraction(files: list[Path]) -> float | None:
    """The part of the files' bytes in the page cache (util-linux `fincore`), or None."""
    if not files or shutil.which("fincore") is None:
        return None
    try:
        out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES,SIZE",
                              *map(str, files)], capture_output=True, text=True, timeout=60,
                             check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    cached = size = 0
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2:
            cached, size = cached + int(parts[0]), size + int(parts[1])
    return cached / size if size else None


def evict_from_page_cache(files: list[Path]) -> None:
    """Drops these files' (clean, synced) pages from the page cache: only these files, no
    privilege needed (posix_fadvise DONTNEED)."""
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


# -- measurements -----------------------------------------------------------------------------

@dataclass
class StopTime:
    phase: str
    process: str
    seconds: float | None  # signal -> exit
    checkpoint_write_after_signal: float | None
    checkpoint_write_whole: float | None
    other: float | None  # seconds - checkpoint_write_after_signal
    checkpoint_gb: float
    exit_status: int | None
    step_at_checkpoint: int | None
    confirmed: bool
    evidence: list[str] = field(default_factory=list)
    timeline: dict = field(default_factory=dict)  # seconds after the signal
    load_average: tuple = ()
    slow: bool = False


@dataclass
class ResumeStart:
    process: str
    checkpoint_gb: float
    checkpoint_step: int
    page_cache_fraction: float | None
    cold: bool
    seconds: float | None  # launch -> "resumed from"
    to_run_directory: float | None  # launch -> "run directory:" (includes the CRC check)
    to_device_line: float | None  # -> TensorFlow imported
    to_resumed: float | None  # device line -> "resumed from" (networks, envs, memory read)


def stop_time(trainer: UpdatePath, phase: str, run_dir: Path, confirmed: bool,
              evidence: list[str], load: tuple) -> StopTime:
    t0, t1 = trainer.t_signal, trainer.t_exit
    seconds = t1 - t0 if t0 is not None and t1 is not None else None
    writes = trainer.checkpoint_writes()
    after = whole = None
    timeline: dict[str, float] = {}
    if t0 is not None:
        for start, end in writes:
            if end is None or end < t0:
                continue
            after = (after or 0.0) + end - max(start, t0)
            whole = (whole or 0.0) + end - start
            timeline.setdefault("checkpoint_tmp_appears", round(start - t0, 3))
            timeline["checkpoint_swapped_in"] = round(end - t0, 3)
        for event in trainer.events:
            if event.what == "summary" and event.t >= t0:
                timeline["summary_json_written"] = round(event.t - t0, 3)
        done = trainer.first_line(r"^(done: |stopped at step )")  # the run's last line
        if done is not None:
            timeline["done_line"] = round(done[0] - t0, 3)
        if t1 is not None:
            timeline["exit"] = round(t1 - t0, 3)
    if len(writes) > 1:
        evidence.append(f"{len(writes)} checkpoint writes in this process")
    other = seconds - (after or 0.0) if seconds is not None else None
    step = manifest_counters(run_dir).get("step")
    return StopTime(phase=phase, process=trainer.name, seconds=_round(seconds),
                    checkpoint_write_after_signal=_round(after),
                    checkpoint_write_whole=_round(whole), other=_round(other),
                    checkpoint_gb=round(checkpoint_gb(run_dir), 3),
                    exit_status=trainer.returncode, step_at_checkpoint=step,
                    confirmed=confirmed, evidence=evidence, timeline=timeline,
                    load_average=load,
                    slow=other is not None and other > SLOW_OTHER_SECONDS)


def resume_start(trainer: UpdatePath, gb: float, step: int, cached: float | None,
                 cold: bool) -> ResumeStart:
    launch = trainer.t_launch
    run_line = trainer.first_line(r"^run directory: ")
    device = trainer.first_line(r"^training on ")
    resumed = trainer.first_line(RESUMED)
    at = lambda found: found[0] - launch if found else None  # noqa: E731
    split = (at(device) - at(run_line) if run_line and device else None,
             at(resumed) - at(device) if device and resumed else None)
    return ResumeStart(process=trainer.name, checkpoint_gb=round(gb, 3), checkpoint_step=step,
                       page_cache_fraction=None if cached is None else round(cached, 3),
                       cold=cold, seconds=_round(at(resumed)),
                       to_run_directory=_round(at(run_line)), to_device_line=_round(split[0]),
                       to_resumed=_round(split[1]))


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


# -- the procedure ---------------------------------------------------------------------------

class Procedure:
    def __init__(self, args: argparse.Namespace, workdir: Path):
        self.args = args
        self.workdir = workdir
        self.run_dir = workdir / "run"
        self.stops: list[StopTime] = []
        self.resumes: list[ResumeStart] = []
        self.notes: list[str] = []
        self.commands: list[str] = []
        self.current: UpdatePath | None = None
        self.fill_rate: float | None = None
        self.epoch_seconds: float | None = None
        C, T = args.capacity, args.target_update
        self.flags = [f"--game={args.game}", f"--seed={args.seed}", f"--workers={args.workers}",
                      f"--replay-capacity={C}", f"--replay-start={C}", f"--evaluate={C}",
                      f"--target-update={T}", f"--checkpoint-every={C + T}",
                      f"--timesteps={C + 4 * T}", "--progress-every=1",
                      f"--logdir={self.run_dir}"]

    def say(self, text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)

    def launch(self, name: str, argv: list[str]) -> UpdatePath:
        trainer = UpdatePath(name, argv, self.run_dir, self.workdir / f"{name}.log", REPO)
        self.current = trainer
        command = " ".join(["python", "run_fast_dqn.py", *argv])
        self.commands.append(command)
        self.say(f"{name}: {command} (pid {trainer.proc.pid}; log {self.workdir / name}.log)")
        return trainer

    def stop_and_measure(self, trainer: UpdatePath, phase: str, check: Callable[[], tuple],
                         signal_now: bool = True, required: bool = True) -> StopTime:
        """Signals (unless sent already), waits for the exit and measures; StageFailed if
        the phase is not confirmed and `required` (the next phases need it)."""
        load = os.getloadavg()
        if signal_now:
            trainer.send(signal.SIGTERM)
        self.say(f"{trainer.name}: SIGTERM sent ({phase}); load average {load[0]:.2f}")
        trainer.wait_exit(self.args.stop_timeout)
        confirmed, evidence = check()
        result = stop_time(trainer, phase, self.run_dir, confirmed, evidence,
                           tuple(round(x, 2) for x in load))
        self.stops.append(result)
        self.say(f"{trainer.name}: exit {result.exit_status} {result.seconds} s after the "
                 f"signal (checkpoint write {result.checkpoint_write_after_signal} s, "
                 f"{result.checkpoint_gb:.2f} GB); {'confirmed' if confirmed else 'NOT confirmed'}"
                 f": {'; '.join(evidence)}")
        if required and not confirmed:
            raise StageFailed(f"{trainer.name}: the {phase} was not caught; the later phases "
                              "depend on it")
        return result

    def resume(self, name: str, cold: bool) -> UpdatePath:
        files = checkpoint_files(self.run_dir)
        gb = sum(path.stat().st_size for path in files) / GB
        step = manifest_counters(self.run_dir).get("step", -1)
        if cold:
            evict_from_page_cache(files)
        cached = page_cache_fraction(files)
        trainer = self.launch(name, ["--resume", str(self.run_dir)])
        trainer.wait_until(lambda: trainer.first_line(RESUMED) is not None,
                           self.args.timeout, '"resumed from" line')
        result = resume_start(trainer, gb, step, cached, cold)
        self.resumes.append(result)
        self.say(f"{name}: resumed from step {step} ({gb:.2f} GB, "
                 f"{'?' if cached is None else f'{100 * cached:.0f}%'} in the page cache) "
                 f"{result.seconds} s after launch (run directory line {result.to_run_directory}"
                 f" s, TensorFlow {result.to_device_line} s, restore {result.to_resumed} s)")
        return trainer

    # -- the four processes -----------------------------------------------------------------

    def run(self) -> None:
        args, C, T = self.args, self.args.capacity, self.args.target_update

        # 1. A new run, stopped late in its random start.
        phase1_step = int(args.phase1_fraction * C)
        trainer = self.launch("new-run", self.flags)
        trainer.wait_until(lambda: any(s >= phase1_step for _, s in trainer.progress()),
                           args.timeout, f"progress line at step >= {phase1_step}")
        if trainer.progress()[-1][1] >= C:
            raise StageFailed(f"new-run: the first progress line at or past step {phase1_step} "
                              f"is at step {trainer.progress()[-1][1]}, past the random start; "
                              "lower --phase1-fraction")
        progress = trainer.progress()
        (ta, sa), (tb, sb) = progress[0], progress[-1]
        self.fill_rate = (sb - sa) / (tb - ta) if tb > ta else None

        def check_random() -> tuple[bool, list[str]]:
            summary = read_json(self.run_dir / "summary.json")
            steps, updates = summary.get("steps"), summary.get("updates")
            ok = steps is not None and steps < C and updates == 0
            return ok, [f"summary.json: {steps} steps < replay start {C}, {updates} updates",
                        f"random fill at {self.fill_rate:.0f} steps/s" if self.fill_rate
                        else "fill rate unknown"]

        self.stop_and_measure(trainer, "random start (memory filling)", check_random)

        # 2. Resume 1: the rest of the fill, then the evaluation at step C, stopped.
        trainer = self.resume("resume-1", cold=False)
        evaluation_line = re.compile(rf"^evaluation at step {C}$")

        def at_evaluation() -> bool:
            progress = trainer.progress()
            if progress and progress[-1][1] > C:
                raise StageFailed(f"resume-1: at step {progress[-1][1]} already: the "
                                  f"evaluation at step {C} was missed")
            return trainer.first_line(evaluation_line) is not None

        trainer.wait_until(at_evaluation, args.timeout, f"evaluation at step {C}")
        self.say(f"resume-1: the run says 'evaluation at step {C}'")
        time.sleep(args.eval_delay)
        rows_before = evaluation_rows(self.run_dir)

        def check_evaluation() -> tuple[bool, list[str]]:
            step = manifest_counters(self.run_dir).get("step")
            rows = evaluation_rows(self.run_dir)
            summary = read_json(self.run_dir / "summary.json")
            ok = step == C and rows == 0 and summary.get("evaluations") == 0
            return ok, [f"checkpoint at step {step} (expected {C})",
                        f"evaluations.csv rows: {rows_before} before, {rows} after (0: cut "
                        "short, not logged)",
                        f"summary.json evaluations: {summary.get('evaluations')}"]

        self.stop_and_measure(trainer, "evaluation (30 games, eps 0.05)", check_evaluation)

        # 3. Resume 2 (cold): the due evaluation, the first epoch, the periodic checkpoint.
        trainer = self.resume("resume-2", cold=not args.no_cold)
        trainer.wait_until(lambda: evaluation_rows(self.run_dir) >= 1, args.timeout,
                           "the evaluation's row in evaluations.csv")
        t_eval_done = time.monotonic()
        self.say(f"resume-2: the evaluation cut short in resume-1 was played again whole; "
                 f"its row is in evaluations.csv {t_eval_done - trainer.t_launch:.1f} s after "
                 "launch")
        trainer.signal_on_tmp = True
        trainer.wait_until(lambda: trainer.t_signal is not None, args.timeout,
                           f"checkpoint.tmp of the periodic checkpoint at step {C + T}")
        epoch_start = next((t for t, s in trainer.progress() if s > C), None)
        tmp_seen = trainer.checkpoint_writes()[0][0]
        if epoch_start is not None:
            self.epoch_seconds = tmp_seen - epoch_start
        self.say(f"resume-2: checkpoint.tmp appeared (epoch {C}..{C + T} took "
                 f"~{self.epoch_seconds or 0:.1f} s); SIGTERM at once")

        def check_periodic() -> tuple[bool, list[str]]:
            step = manifest_counters(self.run_dir).get("step")
            writes = trainer.checkpoint_writes()
            summary = read_json(self.run_dir / "summary.json")
            delay = trainer.t_signal - writes[0][0]
            ok = step == C + T and len(writes) == 1 and summary.get("steps") == C + T
            return ok, [f"signal {delay:.3f} s after checkpoint.tmp appeared",
                        f"checkpoint at step {step} (expected {C + T})",
                        f"{len(writes)} checkpoint write(s) in this process (expected 1)",
                        f"summary.json: {summary.get('steps')} steps, "
                        f"{summary.get('evaluations')} evaluations"]

        self.stop_and_measure(trainer, "periodic checkpoint write (full memory)",
                              check_periodic, signal_now=False)

        # 4. Resume 3 (warm): a trainer epoch, stopped half-way.
        updates_at_checkpoint = manifest_counters(self.run_dir).get("updates", 0)
        step_at_checkpoint = manifest_counters(self.run_dir).get("step", 0)
        trainer = self.resume("resume-3", cold=False)
        trainer.wait_until(lambda: any(s > step_at_checkpoint for _, s in trainer.progress()),
                           args.timeout, f"progress line past step {step_at_checkpoint}")
        t_epoch = trainer.progress()[0][0]
        delay = min(max(0.5 * (self.epoch_seconds or 10.0), 3.0), 120.0)
        self.say(f"resume-3: in the epoch {step_at_checkpoint}..{step_at_checkpoint + T}; "
                 f"SIGTERM {delay:.1f} s in (half of resume-2's epoch)")
        trainer.wait_until(lambda: time.monotonic() >= t_epoch + delay, args.timeout,
                           "the middle of the epoch")
        last_step = trainer.progress()[-1][1]
        epoch_updates = T // 4

        def check_epoch() -> tuple[bool, list[str]]:
            summary = read_json(self.run_dir / "summary.json")
            made = (summary.get("updates") or 0) - updates_at_checkpoint
            steps = summary.get("steps")
            ok = (steps is not None and step_at_checkpoint < steps <= step_at_checkpoint + T
                  and 0 < made < epoch_updates)
            return ok, [f"last progress line before the signal: step {last_step}",
                        f"stopped at step {steps} (epoch {step_at_checkpoint}.."
                        f"{step_at_checkpoint + T})",
                        f"{made} of the epoch's {epoch_updates} updates made, the rest "
                        "abandoned"]

        self.stop_and_measure(trainer, "trainer epoch (learning)", check_epoch,
                              required=False)


# -- output -----------------------------------------------------------------------------------

def machine() -> dict:
    meminfo = {}
    try:
        with open("/proc/meminfo") as file:
            for line in file:
                key, value = line.split(":", 1)
                meminfo[key] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "sched_cpus": len(os.sched_getaffinity(0)),
            "mem_total_gb": round(meminfo.get("MemTotal", 0) / GB, 1),
            "mem_available_gb": round(meminfo.get("MemAvailable", 0) / GB, 1),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "python": sys.version.split()[0]}


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def print_report(proc: Procedure, info: dict) -> None:
    print()
    print(f"machine: nproc {info['nproc']}, {info['mem_total_gb']} GB RAM "
          f"({info['mem_available_gb']} GB available at the start), "
          f"{info['free_disk_gb']} GB free on {info['workdir_fs']} at the start; "
          f"load average at the start {info['load_average']}, at the end "
          f"{info.get('load_average_end')}. Other work shared the cores and the disk while "
          "this ran (load averages at each signal below), so the times are of a busy 2-core "
          "machine, not an idle one.")
    print(f"trainer flags: {' '.join(proc.flags)}")
    if proc.fill_rate:
        print(f"random fill: {proc.fill_rate:.0f} steps/s")
    print()
    header = (f"{'phase':<42} {'signal->exit s':>14} {'of which ckpt s':>15} "
              f"{'other s':>8} {'ckpt GB':>8} {'exit':>5} {'load1':>6}  confirmed")
    print(header)
    print("-" * len(header))
    for number, stop in enumerate(proc.stops, 1):
        ckpt = _fmt(stop.checkpoint_write_after_signal)
        if (stop.checkpoint_write_whole is not None
                and stop.checkpoint_write_whole - (stop.checkpoint_write_after_signal or 0) > 0.05):
            ckpt += f" (whole {stop.checkpoint_write_whole:.1f})"
        print(f"{f'{number}. {stop.phase}':<42} {_fmt(stop.seconds):>14} {ckpt:>15} "
              f"{_fmt(stop.other):>8} {stop.checkpoint_gb:>8.2f} {stop.exit_status!s:>5} "
              f"{_fmt(stop.load_average[0] if stop.load_average else None, 2):>6}  "
              f"{'yes' if stop.confirmed else 'NO'}{'  SLOW' if stop.slow else ''}")
    print()
    for stop in proc.stops:
        print(f"{stop.phase} [{stop.process}]: " + "; ".join(stop.evidence))
        print("    after the signal (s): " + ", ".join(f"{k} {v}" for k, v in
                                                      stop.timeline.items()))
    print()
    print(f"{'resume start':<28} {'ckpt GB':>8} {'step':>9} {'cached':>7} {'launch->resumed s':>18}"
          f" {'->run dir (CRC) s':>18} {'->TF s':>7} {'->restore s':>12}")
    for res in proc.resumes:
        cached = "?" if res.page_cache_fraction is None else f"{100 * res.page_cache_fraction:.0f}%"
        label = f"{res.process} ({'cold' if res.cold else 'as left'})"
        print(f"{label:<28} {res.checkpoint_gb:>8.2f} {res.checkpoint_step:>9} {cached:>7} "
              f"{_fmt(res.seconds):>18} {_fmt(res.to_run_directory):>18} "
              f"{_fmt(res.to_device_line):>7} {_fmt(res.to_resumed):>12}")
    slow = [stop for stop in proc.stops if stop.slow]
    print()
    if slow:
        for stop in slow:
            print(f"SLOW STOP: {stop.phase}: {stop.other:.1f} s besides the checkpoint write "
                  f"(more than {SLOW_OTHER_SECONDS:.0f} s); timeline {stop.timeline}")
    elif proc.stops:
        print(f"every stop took at most {SLOW_OTHER_SECONDS:.0f} s besides its checkpoint write")
    for note in proc.notes:
        print(f"note: {note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where the run goes (default /tmp/stop_times-<pid>); must not exist")
    parser.add_argument("--keep", action="store_true", help="keep the run directory and logs")
    parser.add_argument("--capacity", type=int, default=1_000_000,
                        help="replay capacity = replay start = evaluation period "
                             "(default 1,000,000: the full size)")
    parser.add_argument("--target-update", type=int, default=10_000,
                        help="agent steps per epoch (default 10,000, the trainer's default)")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--game", default="pong")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--phase1-fraction", type=float, default=0.95,
                        help="stop the random start once this fraction of the memory is full")
    parser.add_argument("--eval-delay", type=float, default=1.0,
                        help="seconds from the run's 'evaluation at step C' line to the "
                             "signal in phase 2 (default 1: while its games are made)")
    parser.add_argument("--no-cold", action="store_true",
                        help="do not evict the full checkpoint from the page cache before "
                             "the second resume")
    parser.add_argument("--timeout", type=float, default=3600.0,
                        help="seconds to wait for a phase to come")
    parser.add_argument("--stop-timeout", type=float, default=1800.0,
                        help="seconds to wait for an exit after the signal before SIGKILL")
    args = parser.parse_args(argv)
    if args.capacity % args.workers or args.target_update % args.workers \
            or args.target_update % 4:
        parser.error("--workers must divide --capacity and --target-update, and 4 (the "
                     "default --train-freq) --target-update")

    workdir = args.workdir or Path(f"/tmp/stop_times-{os.getpid()}")
    if workdir.exists():
        parser.error(f"{workdir} exists; give a new --workdir")
    workdir.mkdir(parents=True)
    usage = shutil.disk_usage(workdir)
    info = {**machine(), "free_disk_gb": round(usage.free / GB, 1),
            "workdir_fs": str(workdir), "repo": str(REPO)}
    need = 2 * args.capacity * BYTES_PER_TRANSITION + 2 * 1024**3
    if usage.free < need:
        shutil.rmtree(workdir)
        print(f"error: {need / GB:.1f} GB of free disk needed under {workdir}, "
              f"{usage.free / GB:.1f} GB free", file=sys.stderr)
        return 2

    proc = Procedure(args, workdir)
    proc.say(f"stop times: nproc {info['nproc']}, {info['free_disk_gb']} GB free, "
             f"{info['mem_available_gb']} GB memory available, load {info['load_average']}; "
             f"trainer {REPO}; work directory {workdir}")
    status = 0
    try:
        proc.run()
    except StageFailed as error:
        proc.say(f"error: {error}")
        proc.notes.append(f"stopped early: {error}")
        status = 1
    except KeyboardInterrupt:
        proc.notes.append("interrupted")
        status = 130
    finally:
        if proc.current is not None and proc.current.running:
            proc.say(f"killing the trainer (pid {proc.current.proc.pid})")
            proc.current.kill()
    info["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    print_report(proc, info)
    if args.keep:
        print(f"kept: {workdir}")
    else:
        shutil.rmtree(proc.run_dir, ignore_errors=True)
        print(f"removed the run {proc.run_dir} (--keep keeps it); the trainers' logs are in "
              f"{workdir}")
    print(json.dumps({"machine": info, "flags": proc.flags, "commands": proc.commands,
                      "fill_steps_per_second": _round(proc.fill_rate),
                      "first_epoch_seconds": _round(proc.epoch_seconds),
                      "stops": [asdict(stop) for stop in proc.stops],
                      "resumes": [asdict(res) for res in proc.resumes],
                      "slow_stops": [stop.phase for stop in proc.stops if stop.slow],
                      "notes": proc.notes, "status": status}))
    return status


if __name__ == "__main__":
    sys.exit(main())
