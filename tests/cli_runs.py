"""Running the entry points as subprocesses, for the end-to-end tests of stopping, resuming
and failing: the harness the developer tools use too (tools/entry_point_runs.py), and what the
tests share about such runs.
"""

from __future__ import annotations

import csv
import json
import os
import re
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from fast_dqn import benchmark
from fast_dqn.checkpoints import CHECKPOINT, MANIFEST
from fast_dqn.config import ALGO_DQN, ALGO_FAST_DQN
from tools import same_bytes
from tools.entry_point_runs import (CPU_ONLY, REPO, RUN_DQN, RUN_FAST_DQN, STOP_SECONDS,
                                    Finished, Launch, launch, step_of, with_handlers)

__all__ = ["Finished", "Launch", "RUN_DQN", "RUN_FAST_DQN", "REPO", "STOP_SECONDS", "step_of",
           "with_handlers"]

ENV = {**os.environ, **CPU_ONLY}  # for a test that starts a run itself (a terminal's)
TINY = ["--game=breakout", "--replay-capacity=5000", "--replay-start=400",
        "--target-update=400", "--max-episode-steps=400", "--seed=0"]
FAST = [*TINY, "--workers=4"]
# For runs whose test is not about the trainer being slower than the acting: an update of 4
# transitions costs a fraction of one of 32 on the CPU.
SMALL_BATCH = "--batch-size=4"
# `python FINAL_WINDOW_STOP SIGNAL run_fast_dqn.py ARGS...`: the fast trainer stopped by SIGNAL
# once its epoch's steps are all taken and before its updates are (see the file).
FINAL_WINDOW_STOP = REPO / "tests" / "final_window_stop.py"


def start(script: Path, args: list[str], log: Path,
          signals: dict[int, Any] | None = None) -> Launch:
    """Starts an entry point from the repository root, with the signal handlers in
    `signals` (e.g. SIGHUP ignored, as under `nohup`)."""
    return launch(script, args, log, signals=signals)


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


def run_bytes(run_dir: Path) -> dict[str, str]:
    """The digests `tools/same_bytes.py` takes of a run: its CSVs without the wall-clock
    column, its checkpoint's network tensors and its replay arrays."""
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
