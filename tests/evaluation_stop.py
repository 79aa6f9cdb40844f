"""Runs an entry point with a stop while its first evaluation makes its games, whatever the
machine's load:

    python tests/evaluation_stop.py SIGNAL run_fast_dqn.py|run_dqn.py ARGS...

is `python run_*.py ARGS...`, except that once the first evaluation has made its first group
of games (launch.EVAL_GROUP_SIZE of them) the run gets SIGNAL (INT, TERM or HUP) from itself,
as from a user at that moment, and each group of evaluation games made is printed as
"evaluation games made: N from env F". A signal sent from outside at the evaluation's line
lands wherever the run then is (a short evaluation may be over by then); this one lands
between two groups, where a stop must cut the evaluation short.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script

from fast_dqn import launch  # noqa: E402
from fast_dqn.config import ALGO_DQN, ALGO_FAST_DQN  # noqa: E402


def stop_after_the_first_group(signum: int) -> None:
    grouped_pool = launch.GroupedPool
    signalled = []

    def signalling_pool(make_group, num_envs, group_size, should_stop):
        def make_and_signal(first: int, count: int):
            pool = make_group(first, count)
            print(f"evaluation games made: {count} from env {first}", flush=True)
            if not signalled:
                signalled.append(True)
                os.kill(os.getpid(), signum)  # its handler runs here, before the next line
            return pool

        return grouped_pool(make_and_signal, num_envs, group_size, should_stop)

    launch.GroupedPool = signalling_pool


if __name__ == "__main__":
    stop_after_the_first_group(getattr(signal, f"SIG{sys.argv[1]}"))
    algo = ALGO_FAST_DQN if Path(sys.argv[2]).name == "run_fast_dqn.py" else ALGO_DQN
    sys.exit(launch.main(sys.argv[3:], algo, exiting=True))
