"""The first SIGINT/SIGTERM/SIGHUP as a request to stop; the second as "stop now"; and the
line with which a run says what its stop does.

Schedulers stop runs with SIGTERM, then SIGKILL after a grace period: the loops look at the
request once per round, evaluation step and trainer call, then checkpoint and exit
(docs/design.md §5). SIGHUP (the terminal closed) stops the run as SIGTERM does, unless it
is ignored (`nohup`).
"""

from __future__ import annotations

import os
import signal
import stat
import threading
import time

from fast_dqn.transitions import replay_bytes

# A second signal sooner than this after the first is the same request: GNU timeout, for
# one, signals the run and then its whole process group, so the run gets the signal twice.
SAME_REQUEST_SECONDS = 1.0


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StopRequest:
    """Turns the first SIGINT/SIGTERM/SIGHUP into a request to stop at the end of the round;
    a second, a second or more later, raises KeyboardInterrupt. Main thread only."""

    def __init__(self):
        self.signal_number: int | None = None
        self._first_at = 0.0
        self._previous: dict[int, object] = {}

    def __bool__(self) -> bool:
        return self.signal_number is not None

    def install(self) -> bool:
        """Takes over SIGINT, SIGTERM and SIGHUP (unless SIGHUP is ignored); False if it was
        installed already (or cannot be, off the main thread)."""
        if threading.current_thread() is not threading.main_thread() or self._previous:
            return False
        for signum in STOP_SIGNALS:
            if signum == signal.SIGHUP and signal.getsignal(signum) is signal.SIG_IGN:
                continue
            self._previous[signum] = signal.signal(signum, self._handle)
        return True

    def uninstall(self, ignore_later: bool = False) -> None:
        """Gives the signals back their previous handlers or, with `ignore_later`, ignores
        them: a process whose run is over and only exits (TensorFlow's teardown takes a
        second) must not die of a late stop signal with another status than the run's."""
        for signum, handler in self._previous.items():
            signal.signal(signum, signal.SIG_IGN if ignore_later else handler)
        self._previous.clear()

    def _handle(self, signum: int, frame) -> None:
        if signum == signal.SIGHUP:
            _leave_lost_terminal()
        now = time.monotonic()
        if self.signal_number is None:
            self.signal_number, self._first_at = signum, now
        elif now - self._first_at >= SAME_REQUEST_SECONDS:
            raise KeyboardInterrupt


def _leave_lost_terminal() -> None:
    """Points stdout and stderr at /dev/null where they are a character device (a hung-up
    terminal no longer answers `isatty`): writes to it fail (EIO) and must not stop the
    run from saving itself. Files and pipes are kept."""
    null = None
    try:
        for fd in (1, 2):
            if stat.S_ISCHR(os.fstat(fd).st_mode):
                if null is None:
                    null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, fd)
    except OSError:
        pass  # no such descriptor: nothing to protect
    finally:
        if null is not None:
            os.close(null)


def stop_line(step: int, *, updates_running: bool, evaluating: bool,
              checkpoint: str | None) -> str:
    """What a stop taken at `step` does before the process exits, e.g. "stopping at step
    50800: finishing the learner's update call, then writing the checkpoint (about 21 s)";
    `checkpoint` is what becomes of the checkpoint (None: the run writes none)."""
    steps = []
    if updates_running:
        steps.append("finishing the learner's update call")
    if evaluating:
        steps.append("dropping the evaluation under way (a resume plays it again)")
    if checkpoint is not None:
        steps.append(checkpoint)
    return f"stopping at step {step}: {', then '.join(steps) or 'now'}"


def checkpoint_estimate(last_write: tuple[float, int] | None, stored: int,
                        with_replay: bool) -> str:
    """"writing the checkpoint (...)": its write time from the last one this process wrote
    (`last_write`: its seconds and transitions; scaled by the memory's growth to `stored`),
    else what it has to write."""
    if last_write is not None:
        seconds, stored_then = last_write
        if with_replay and stored_then > 0:
            seconds *= max(1.0, stored / stored_then)
        if seconds < 1:
            estimate = "under a second"
        elif seconds < 120:
            estimate = f"about {seconds:.0f} s"
        else:
            estimate = f"about {seconds / 60:.0f} min"
        return f"writing the checkpoint ({estimate}, from the last one's write)"
    if with_replay:
        size = replay_bytes(stored)
        size_text = f"{size / 1e6:.0f} MB" if size < 1e9 else f"{size / 1e9:.1f} GB"
        return f"writing the checkpoint ({size_text} of replay memory and the networks)"
    return "writing the checkpoint (the networks)"
