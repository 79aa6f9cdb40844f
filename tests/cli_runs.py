"""Running the entry points as subprocesses, for the end-to-end tests of stopping, resuming
and failing: the one harness that starts them, and what the tests share about such runs.

A run starts from the repository root, on the CPU (where a seed fixes a run bit for bit),
with stdin from /dev/null and stdout and stderr in files, LOG.out and LOG.err, rather than
pipes: a full pipe would stall a chatty run, and a file can be read while the run goes on and
after it ended.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import pytest

from fast_dqn import benchmark
from fast_dqn.checkpoints import CHECKPOINT, MANIFEST
from fast_dqn.config import ALGO_DQN, ALGO_FAST_DQN

REPO = Path(__file__).resolve().parent.parent
RUN_FAST_DQN = REPO / "run_fast_dqn.py"
RUN_DQN = REPO / "run_dqn.py"
SAME_BYTES = REPO / "tools" / "same_bytes.py"
# The CPU only, so that runs are deterministic on any machine; TensorFlow's logs kept short.
CPU_ONLY = {"CUDA_VISIBLE_DEVICES": "-1", "TF_CPP_MIN_LOG_LEVEL": "3"}
STOP_SECONDS = 20  # a signalled run must be gone within this
POLL_SECONDS = 0.02  # between two looks at a run's files or output


class WaitFailed(AssertionError):
    """What a wait was for did not happen: the run exited first, or the time ran out."""


def step_of(manifest: dict) -> int:
    """The agent step a checkpoint was taken at, from its manifest."""
    return int(manifest["counters"]["step"])


def wait_until(condition: Callable[[], bool], running: Callable[[], bool], timeout: float,
               what: str) -> float:
    """Polls `condition` until it holds while `running()` says the run goes on; returns the
    moment it held (time.monotonic()). WaitFailed naming `what` if the run ends or `timeout`
    seconds pass first."""
    deadline = time.monotonic() + timeout
    while not condition():
        if not running():
            raise WaitFailed(f"the run exited before {what}")
        if time.monotonic() > deadline:
            raise WaitFailed(f"{what} did not happen within {timeout:.0f} s")
        time.sleep(POLL_SECONDS)
    return time.monotonic()


class RunTimedOut(AssertionError):
    """A run did not exit in the time given (it was killed)."""


@dataclasses.dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: str
    seconds: float  # from start (or from the moment given, e.g. a signal) to exit


@dataclasses.dataclass
class Launch:
    """An entry point running as a subprocess; its output in LOG.out and LOG.err."""

    process: subprocess.Popen
    log: Path
    started: float  # time.monotonic()

    @property
    def pid(self) -> int:
        return self.process.pid

    def stdout(self) -> str:
        return self.log.with_suffix(".out").read_text(errors="replace")

    def stderr(self) -> str:
        return self.log.with_suffix(".err").read_text(errors="replace")

    def finish(self, timeout: float, since: float | None = None) -> Finished:
        """Waits for the exit and collects the output; kills the run and raises RunTimedOut
        after `timeout` s. `seconds` counts from `since` (time.monotonic()) if given."""
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise RunTimedOut(f"{self.process.args} did not exit within {timeout} s") from None
        seconds = time.monotonic() - (self.started if since is None else since)
        return Finished(self.process.returncode, self.stdout(), self.stderr(), seconds)


def with_handlers(signals: Mapping[int, Any]) -> Callable[[], None]:
    """A child's set-up that installs `signals` (signal -> handler) before it runs."""
    def install() -> None:
        for signum, handler in signals.items():
            signal.signal(signum, handler)

    return install


ENV = {**os.environ, **CPU_ONLY}  # for a test that starts a run itself (a terminal's)
TINY = ["--game=breakout", "--replay-capacity=5000", "--replay-start=400",
        "--target-update=400", "--max-episode-steps=400", "--seed=0"]
FAST = [*TINY, "--workers=4"]
# For runs whose test is not about the trainer being slower than the acting: an update of 4
# transitions costs a fraction of one of 32 on the CPU.
SMALL_BATCH = "--batch-size=4"
# The tiny run of conftest's `video_run` (the serial trainer): evaluations at steps 300 and
# 600, the second recorded (--video-every=2); games cut at VIDEO_EVAL_CAP steps, which a game
# of breakout (5 lives) always outlasts, so the recorded game is that long. Its final
# checkpoint is past the replay start: its network has been trained.
VIDEO_EVAL_CAP = 60
VIDEO_RUN = [*TINY, SMALL_BATCH, "--timesteps=600", "--evaluate=300", "--eval-episodes=2",
             f"--eval-max-episode-steps={VIDEO_EVAL_CAP}", "--video-every=2",
             "--checkpoint-every=0"]
# `python FINAL_WINDOW_STOP SIGNAL run_fast_dqn.py ARGS...`: the fast trainer stopped by SIGNAL
# once its epoch's steps are all taken and before its updates are (see the file).
FINAL_WINDOW_STOP = REPO / "tests" / "final_window_stop.py"


def start(script: Path, args: list[str], log: Path,
          signals: Mapping[int, Any] | None = None) -> Launch:
    """Starts `python SCRIPT ARGS...` from the repository root on the CPU, with the signal
    handlers in `signals` (e.g. SIGHUP ignored, as under `nohup`) installed before it runs;
    SIGHUP otherwise at its default, whatever the suite was started under (a suite started
    with nohup made a run ignore the SIGHUP a test sent it)."""
    handlers = {signal.SIGHUP: signal.SIG_DFL, **(signals or {})}
    with open(log.with_suffix(".out"), "w") as out, open(log.with_suffix(".err"), "w") as err:
        process = subprocess.Popen(
            [sys.executable, str(script), *args], cwd=REPO, env={**os.environ, **CPU_ONLY},
            stdin=subprocess.DEVNULL, stdout=out, stderr=err, preexec_fn=with_handlers(handlers))
    return Launch(process, log, time.monotonic())


def run_cli(script: Path, args: list[str], log: Path, timeout: float = 120) -> Finished:
    return start(script, args, log).finish(timeout)


def run_in_process(script: Path, args: list[str],
                   capture: pytest.CaptureFixture) -> Finished:
    """`python SCRIPT ARGS...` as its `launch.main` called in the test's process, for a test
    of a run's files or lines where no signal, no process's exit and no second process is
    under test: it skips the seconds a subprocess spends importing TensorFlow. Its status
    (what the scripts pass to sys.exit) and what it printed (through `capture`: capsys, or
    capfd for what native code writes too), as a finished subprocess's. No --device=cpu in
    `args`: before TensorFlow's import it would set CUDA_VISIBLE_DEVICES for the rest of the
    session."""
    from fast_dqn import launch

    capture.readouterr()  # what came before is not this call's
    started = time.monotonic()
    status = launch.main(args, {RUN_FAST_DQN: ALGO_FAST_DQN, RUN_DQN: ALGO_DQN}[script])
    out, err = capture.readouterr()
    return Finished(status, out, err, time.monotonic() - started)


def wait_for(run: Launch, path: Path, timeout: float = 90) -> None:
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


def _give_up_waiting(run: Launch, deadline: float, what: str) -> None:
    """Fails the test, with the run's output, once the run has exited or `deadline` passed."""
    if run.process.poll() is not None or time.monotonic() > deadline:
        run.process.kill()
        result = run.finish(10)
        pytest.fail(f"{what} (exit {result.returncode}):\n"
                    f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")


def wait_for_holder(run: Launch, run_dir: Path, timeout: float = 90) -> None:
    """Waits until the run holds the lock of `run_dir`: it writes its pid into .lock once its
    flock is taken (before TensorFlow's import)."""
    lock = run_dir / ".lock"
    deadline = time.monotonic() + timeout
    while not (lock.exists() and f" pid {run.pid} " in lock.read_text()):
        _give_up_waiting(run, deadline, "the run did not take the lock")
        time.sleep(0.02)


def wait_for_line(run: Launch, text: str, timeout: float = 90) -> None:
    """Waits until the run's stdout holds `text`."""
    out = run.log.with_suffix(".out")
    deadline = time.monotonic() + timeout
    while text not in out.read_text():
        _give_up_waiting(run, deadline, f"{text!r} did not appear")
        time.sleep(0.05)


def wait_for_match(run: Launch, pattern: str, accept: Callable[[re.Match], bool] | None = None,
                   timeout: float = 300) -> re.Match:
    """Reads the run's stdout as it grows until a whole line matches `pattern` (and passes
    `accept`, if given)."""
    regex = re.compile(pattern)
    deadline = time.monotonic() + timeout
    while True:
        for line in run.stdout().splitlines(keepends=True):
            match = regex.fullmatch(line.rstrip("\n"))
            if line.endswith("\n") and match and (accept is None or accept(match)):
                return match
        _give_up_waiting(run, deadline, f"no line matched {pattern!r}")
        time.sleep(0.02)


def run_bytes(*run_dirs: Path) -> list[dict[str, str]]:
    """Each run's digests, file by file, as `tools/same_bytes.py --digests` prints them: its
    CSVs without the wall-clock column, its checkpoint's network tensors and replay arrays."""
    result = subprocess.run([sys.executable, str(SAME_BYTES), "--digests", *map(str, run_dirs)],
                            capture_output=True, text=True, timeout=300, env=ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    digests = json.loads(result.stdout.splitlines()[-1])
    return [digests[str(run_dir)] for run_dir in run_dirs]


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


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def assert_no_traceback(result: Finished) -> None:
    assert "Traceback" not in result.stderr, result.stderr[-3000:]


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file's bytes, but the lock's (a resume locks the directory before it checks)."""
    return {str(path.relative_to(directory)): path.read_bytes()
            for path in sorted(directory.rglob("*")) if path.is_file() and path.name != ".lock"}

# -- A run that signals itself at one of its own lines
# `python LINE_STOP SIGNAL PATTERN run_*.py ARGS...`: the run signals itself with SIGNAL right
# after it prints a whole line PATTERN fullmatches (see the file), so that the stop lands at
# that line however loaded the machine is, and the run needs no work left after it.
LINE_STOP = REPO / "tests" / "line_stop.py"


# -- The benchmark (python -m fast_dqn.benchmark) called in the test's process
# (test_benchmark.py, test_variants.py)

# The real network's run, kept short on a 2-core CPU: one update per trainer call (the
# default 64 puts 64-update warm-up calls before every measured loop and window, and a
# second compiled function per network) and 200 measured steps per loop.
REAL_NETWORK = ["--steps=200", "--random-steps=200", "--trainer-seconds=0.25",
                "--trainer-windows=3", "--target-update=200", "--emulation-seconds=0.3",
                "--updates-per-call=1"]


def last_json_line(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


def benchmark_parser(monkeypatch) -> "argparse.ArgumentParser":
    """The parser `benchmark.parse_args` builds, caught before it parses anything."""
    caught = {}

    def catch(parser, *args, **kwargs):
        caught["parser"] = parser
        raise SystemExit(0)

    monkeypatch.setattr(benchmark.OneLineErrorParser, "parse_args", catch)
    with pytest.raises(SystemExit):
        benchmark.parse_args([])
    return caught["parser"]
