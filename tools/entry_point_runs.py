"""An entry point run as a subprocess: the one harness of the tests (tests/cli_runs.py) and
the developer tools that drive runs (tools/soak.py, tools/stop_times.py, tools/same_bytes.py),
and what they share about such runs: how long a stop may take, a checkpoint's step, a wait
for a run's file or line.

A run starts from a repository root (this one unless told), on the CPU unless told (where a
seed fixes a run bit for bit), with stdin from /dev/null and stdout and stderr in files,
LOG.out and LOG.err, rather than pipes: a full pipe would stall a chatty run, and a file can
be read while the run goes on and after it ended.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

REPO = Path(__file__).resolve().parent.parent
RUN_FAST_DQN = REPO / "run_fast_dqn.py"
RUN_DQN = REPO / "run_dqn.py"
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
    started_wall: float  # time.time(), to compare with file times

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def stdout(self) -> str:
        return self.log.with_suffix(".out").read_text(errors="replace")

    def stderr(self) -> str:
        return self.log.with_suffix(".err").read_text(errors="replace")

    def stderr_tail(self, lines: int = 30) -> str:
        return "\n".join(self.stderr().splitlines()[-lines:])

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


def launch(script: Path | str, args: Sequence[str], log: Path, *, repo: Path = REPO,
           env: Mapping[str, str] | None = CPU_ONLY,
           signals: Mapping[int, Any] | None = None, own_session: bool = False) -> Launch:
    """Starts `python script args...` from `repo` with `env` added to this environment.

    `signals` (signal -> SIG_IGN or SIG_DFL) are installed in the child before it runs: a
    run started under `nohup` would otherwise inherit SIGHUP ignored. With `own_session` the
    run is in a session of its own, so only the signals sent to it reach it (not a Ctrl-C
    in the terminal of the script that started it).
    """
    with open(log.with_suffix(".out"), "w") as out, open(log.with_suffix(".err"), "w") as err:
        process = subprocess.Popen(
            [sys.executable, str(script), *args], cwd=repo, env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=own_session,
            preexec_fn=with_handlers(signals) if signals else None)
    return Launch(process, log, time.monotonic(), time.time())


def with_handlers(signals: Mapping[int, Any]) -> Callable[[], None]:
    """A child's set-up that installs `signals` (signal -> handler) before it runs."""
    def install() -> None:
        for signum, handler in signals.items():
            signal.signal(signum, handler)

    return install
