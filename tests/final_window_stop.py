"""Runs the fast trainer with a stop in its epoch's final window, whatever the machine's load:

    python tests/final_window_stop.py SIGNAL run_fast_dqn.py ARGS...

is `python run_fast_dqn.py ARGS...` (the second word is there so that a sweep can call this
as its --python), except that the trainer's first update waits until the acting of its epoch
is over and the run waits for the trainer; the run then gets SIGNAL (INT, TERM or HUP) from
itself, as from a user at that moment, and the held update goes on only once the stop has
abandoned the epoch. So the run stops with the epoch's steps all taken and exactly one call
of its updates made (--updates-per-call of them), where a signal sent from outside when the
run prints its last step may come after the trainer is done (on a loaded machine it did:
all 200 updates made, the case the test meant never happened).

The run must have one epoch of learning (--replay-start + --target-update >= --timesteps):
the first wait for the trainer is then the last.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script

from fast_dqn import learner, training_loops  # noqa: E402
from fast_dqn.config import ALGO_FAST_DQN  # noqa: E402
from fast_dqn.launch import main  # noqa: E402


def hold_the_trainer_until_a_stop(signum: int) -> None:
    released = threading.Event()
    update, wait = learner.Learner.update, training_loops.LearnerThread.wait

    def held_update(self, minibatches, count: int):
        released.wait()
        return update(self, minibatches, count)

    def release_once_abandoned(thread: training_loops.LearnerThread) -> None:
        thread._abandon.wait()  # set by `wait` once it sees the stop request
        released.set()

    def stopping_wait(self, abandon_if=None) -> None:
        if not released.is_set():
            os.kill(os.getpid(), signum)  # the handler runs on this thread before the next line
            threading.Thread(target=release_once_abandoned, args=(self,), daemon=True).start()
        wait(self, abandon_if)

    learner.Learner.update = held_update
    training_loops.LearnerThread.wait = stopping_wait


if __name__ == "__main__":
    hold_the_trainer_until_a_stop(getattr(signal, f"SIG{sys.argv[1]}"))
    sys.exit(main(sys.argv[3:], ALGO_FAST_DQN, exiting=True))
