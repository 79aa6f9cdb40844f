"""Running the entry points as subprocesses, for the end-to-end tests of stopping, resuming
and failing (shared by tests/test_resume.py and tests/test_faults.py).

Runs start from the repository root, on the CPU (where a seed fixes a run bit for bit), with
stdout and stderr in files rather than pipes (a full pipe would stall a chatty run).
"""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from fast_dqn.checkpoints import CHECKPOINT, MANIFEST

REPO = Path(__file__).resolve().parent.parent
RUN_FAST_DQN = REPO / "run_fast_dqn.py"
RUN_DQN = REPO / "run_dqn.py"
# The CPU only, so that runs are deterministic on any machine; TensorFlow's logs kept short.
ENV = {**os.environ, "CUDA_VISIBLE_DEVICES": "-1", "TF_CPP_MIN_LOG_LEVEL": "3"}
TINY = ["--game=breakout", "--replay-capacity=5000", "--replay-start=400",
        "--target-update=400", "--max-episode-steps=400", "--seed=0"]
FAST = [*TINY, "--workers=4"]
STOP_SECONDS = 20  # a signalled run must be gone within this


@dataclasses.dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: str
    seconds: float  # from start (or from the signal, for a signalled run) to exit


@dataclasses.dataclass
class Running:
    """An entry point running as a subprocess; stdout and stderr go to LOG.out and LOG.err."""

    process: subprocess.Popen
    log: Path
    started: float

    def finish(self, timeout: float, since: float | None = None) -> Finished:
        """Waits for the exit (killing the run after `timeout` s) and collects its output."""
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"{self.process.args} did not exit within {timeout} s")
        seconds = time.monotonic() - (self.started if since is None else since)
        return Finished(self.process.returncode, self.log.with_suffix(".out").read_text(),
                        self.log.with_suffix(".err").read_text(), seconds)


def start(script: Path, args: list[str], log: Path,
          signals: dict[int, Any] | None = None) -> Running:
    """Starts an entry point from the repository root (files, not pipes, take its output),
    with the signal handlers in `signals` (e.g. SIGHUP ignored, as under `nohup`)."""
    with open(log.with_suffix(".out"), "w") as out, open(log.with_suffix(".err"), "w") as err:
        process = subprocess.Popen([sys.executable, str(script), *args], cwd=REPO, env=ENV,
                                   stdout=out, stderr=err,
                                   preexec_fn=with_handlers(signals) if signals else None)
    return Running(process, log, time.monotonic())


def with_handlers(signals: dict[int, Any]) -> Callable[[], None]:
    """A child's set-up that installs `signals` (signal -> SIG_IGN or SIG_DFL) before it runs:
    a test run under `nohup` would otherwise pass SIGHUP on to its runs ignored."""
    def install() -> None:
        for signum, handler in signals.items():
            signal.signal(signum, handler)

    return install


def run_cli(script: Path, args: list[str], log: Path, timeout: float = 120) -> Finished:
    return start(script, args, log).finish(timeout)


def wait_for(run: Running, path: Path, timeout: float = 90) -> None:
    """Waits until `path` exists while the run goes on."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if run.process.poll() is not None:
            result = run.finish(1)
            pytest.fail(f"the run exited ({result.returncode}) before {path} appeared:\n"
                        f"{result.stderr[-3000:]}")
        if time.monotonic() > deadline:
            run.process.kill()
            run.finish(10)
            pytest.fail(f"{path} did not appear within {timeout} s")
        time.sleep(0.1)


def wait_for_line(run: Running, text: str, timeout: float = 90) -> None:
    """Waits until the run's stdout holds `text`."""
    out = run.log.with_suffix(".out")
    deadline = time.monotonic() + timeout
    while text not in out.read_text():
        if run.process.poll() is not None or time.monotonic() > deadline:
            run.process.kill()
            result = run.finish(10)
            pytest.fail(f"{text!r} did not appear (exit {result.returncode}):\n"
                        f"{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
        time.sleep(0.05)


def run_bytes(run_dir: Path) -> dict[str, str]:
    """The digests `scripts/same_bytes.py` takes of a run: its CSVs without the wall-clock
    column, its checkpoint's network tensors and its replay arrays."""
    spec = importlib.util.spec_from_file_location("same_bytes", REPO / "scripts" / "same_bytes.py")
    same_bytes = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, same_bytes)  # its dataclasses look themselves up there
    spec.loader.exec_module(same_bytes)
    return same_bytes.file_digests(run_dir)


def interrupt(script: Path, args: list[str], run_dir: Path, signum: int) -> Finished:
    """Starts a long run, signals it once its first checkpoint exists, waits for its exit."""
    run = start(script, [*args, "--timesteps=20000", f"--logdir={run_dir}"],
                run_dir.parent / f"{run_dir.name}-interrupted")
    wait_for(run, run_dir / CHECKPOINT / MANIFEST)
    signalled = time.monotonic()
    run.process.send_signal(signum)
    return run.finish(timeout=60, since=signalled)


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def without_hours(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{key: value for key, value in row.items() if key != "hours"} for row in rows]


def step_of(manifest: dict) -> int:
    return manifest["counters"]["step"]


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def assert_no_traceback(result: Finished) -> None:
    assert "Traceback" not in result.stderr, result.stderr[-3000:]


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file's bytes, but the lock's (a resume locks the directory before it checks)."""
    return {str(path.relative_to(directory)): path.read_bytes()
            for path in sorted(directory.rglob("*")) if path.is_file() and path.name != ".lock"}


