"""Nature DQN on Atari, serial and concurrent-synchronized (Daley & Amato 2021).

`load` gives a trained run's agent; importing the package loads no TensorFlow (`load` does).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fast_dqn.agent import Agent


def load(run_dir: str | os.PathLike, seed: int | None = None) -> "Agent":
    """The agent of a training run: the online network of RUN_DIR's latest complete
    checkpoint (verified as a resume verifies it), loaded as `python -m fast_dqn.play` loads
    it. It takes batches of states as the trainers' networks take them:

        agent = fast_dqn.load("runs/pong-fast_dqn-seed0-...")
        actions = agent.act(states)                # (B, 4, 84, 84) uint8 -> (B,) greedy
        actions = agent.act(states, epsilon=0.05)  # Nature's evaluation policy

    `seed` seeds `agent.rng`, the generator of the random actions (default: the run's seed).

    Raises:
        ValueError: one line: no such directory, no config.json naming a game (not a run's),
            no complete checkpoint, or one that is damaged or does not fit the network.
    """
    from fast_dqn.agent import Agent, load_run

    return Agent(load_run(Path(run_dir)), seed)
