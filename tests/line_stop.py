"""Runs an entry point that signals itself the moment it prints a given line, whatever the
machine's load:

    python tests/line_stop.py SIGNAL PATTERN run_fast_dqn.py|run_dqn.py ARGS...

is `python run_*.py ARGS...` (its sys.argv too), except that once the run has written a
whole line (ended by a newline or, on a terminal, a carriage return) that PATTERN matches in
full (re.fullmatch), the run gets SIGNAL (INT, TERM or HUP) from itself, once, as from a
user who reacted to that line at once. A signal sent from outside when the line shows lands
wherever the run is by then, so such a test relied on the run having seconds of work left
after the line; this one lands while the run is at the line, so a short run does.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script

from fast_dqn import launch  # noqa: E402
from fast_dqn.config import ALGO_DQN, ALGO_FAST_DQN  # noqa: E402


class SignallingStream:
    """A text stream that passes everything to `stream` and signals this process after the
    first whole line that `pattern` matches; the rest (isatty, fileno...) is the stream's."""

    def __init__(self, stream: Any, pattern: str, signum: int):
        self._stream, self._pattern, self._signum = stream, re.compile(pattern), signum
        self._partial = ""
        self._signalled = False

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        if not self._signalled:
            *lines, self._partial = re.split(r"[\r\n]", self._partial + text)
            if any(self._pattern.fullmatch(line) for line in lines):
                self._signalled = True
                self._stream.flush()
                # On the main thread, the handler runs before `write` returns.
                os.kill(os.getpid(), self._signum)
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


if __name__ == "__main__":
    sys.stdout = SignallingStream(sys.stdout, sys.argv[2], getattr(signal, f"SIG{sys.argv[1]}"))
    algo = ALGO_FAST_DQN if Path(sys.argv[3]).name == "run_fast_dqn.py" else ALGO_DQN
    sys.argv = sys.argv[3:]  # as `python run_*.py ARGS...` has it: its resume command names it
    sys.exit(launch.main(sys.argv[1:], algo, exiting=True))
