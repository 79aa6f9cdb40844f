"""The installed commands: the console scripts of pyproject.toml and `python -m fast_dqn`.

    fast-dqn ARGS            python -m fast_dqn train ARGS      = python run_fast_dqn.py ARGS
    fast-dqn-serial ARGS     python -m fast_dqn serial ARGS     = python run_dqn.py ARGS
    fast-dqn-play ARGS       python -m fast_dqn play ARGS       = python -m fast_dqn.play ARGS
    fast-dqn-benchmark ARGS  python -m fast_dqn benchmark ARGS  = python -m fast_dqn.benchmark ARGS

Each is the command it stands for, with its exit statuses and signal handling: the trainers
call `launch.main(..., exiting=True)` as the run scripts do. `python -m fast_dqn` wants a
command first; a missing or unknown one gets one line and exit status 2. The modules behind
the commands are imported when a command runs, so that one command does not load another's.
"""

from __future__ import annotations

import difflib
import sys
from typing import Callable, Sequence

PROG = "python -m fast_dqn"


def train(argv: Sequence[str] | None = None) -> int:
    """`fast-dqn`: the concurrent, synchronized trainer, as run_fast_dqn.py."""
    from fast_dqn.config import ALGO_FAST_DQN
    from fast_dqn.launch import main

    return main(sys.argv[1:] if argv is None else argv, ALGO_FAST_DQN, exiting=True)


def train_serial(argv: Sequence[str] | None = None) -> int:
    """`fast-dqn-serial`: the serial reference trainer, as run_dqn.py."""
    from fast_dqn.config import ALGO_DQN
    from fast_dqn.launch import main

    return main(sys.argv[1:] if argv is None else argv, ALGO_DQN, exiting=True)


def play(argv: Sequence[str] | None = None) -> int:
    """`fast-dqn-play`: full games with a run's latest checkpoint, as python -m fast_dqn.play."""
    from fast_dqn import play as play_module

    return play_module.main(argv)


def benchmark(argv: Sequence[str] | None = None) -> int:
    """`fast-dqn-benchmark`: the throughput benchmark, as python -m fast_dqn.benchmark."""
    from fast_dqn import benchmark as benchmark_module

    return benchmark_module.main(argv)


COMMANDS: dict[str, tuple[Callable[[Sequence[str] | None], int], str]] = {
    "train": (train, "train with the concurrent, synchronized scheme (fast-dqn, "
                     "run_fast_dqn.py)"),
    "serial": (train_serial, "train with the serial reference procedure (fast-dqn-serial, "
                             "run_dqn.py)"),
    "play": (play, "play full games with a run's latest checkpoint (fast-dqn-play)"),
    "benchmark": (benchmark, "measure the trainers' throughput (fast-dqn-benchmark)"),
}


def usage() -> str:
    lines = [f"usage: {PROG} {{{','.join(COMMANDS)}}} [ARGS ...]", "",
             "Nature DQN on Atari. COMMAND --help lists a command's flags.", "", "commands:"]
    lines += [f"  {name:<10} {summary}" for name, (_, summary) in COMMANDS.items()]
    return "\n".join(lines)


def unknown_command_line(command: str) -> str:
    """The one line for a command that is not one of COMMANDS."""
    if command.startswith("-"):
        what = f"a command comes first, before {command}"
    else:
        close = difflib.get_close_matches(command, COMMANDS, n=1)
        what = f"unknown command '{command}'" + (f" (did you mean '{close[0]}'?)" if close
                                                   else "")
    return f"{PROG}: error: {what}; the commands are {', '.join(COMMANDS)} (see --help)"


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m fast_dqn COMMAND ARGS`: runs COMMAND with ARGS; returns its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if not argv:
        print(f"{PROG}: error: no command given; the commands are {', '.join(COMMANDS)} "
              "(see --help)", file=sys.stderr)
        return 2
    command = COMMANDS.get(argv[0])
    if command is None:
        print(unknown_command_line(argv[0]), file=sys.stderr)
        return 2
    # The commands' usage and error lines take their name from argv[0]: `python -m fast_dqn
    # train: error: ...` rather than `__main__.py: error: ...`.
    sys.argv[0] = f"{PROG} {argv[0]}"
    run, _ = command
    return run(argv[1:])
