"""Evaluation: full games at a small epsilon with the online network, played as one batch.

Nature DQN evaluates with epsilon = 0.05 over 30 games, each starting with up to 30 random
no-ops (Mnih et al., 2015). Every game runs in its own environment of one pool, so the Q
queries are batched and the games play side by side instead of one after another. Each env
plays exactly one game: taking the first N games to finish from a larger pool would favour
short games.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from fast_dqn.replay_memory import FrameHistory
from fast_dqn.samplers import EnvPool

GreedyFn = Callable[[np.ndarray], np.ndarray]


def epsilon_greedy(greedy: np.ndarray, epsilon: np.ndarray | float, n_actions: int,
                   rng: np.random.Generator) -> np.ndarray:
    """Replaces each greedy action by a uniformly random one with probability epsilon."""
    explore = rng.random(len(greedy)) < epsilon
    random_actions = rng.integers(0, n_actions, size=len(greedy))
    return np.where(explore, random_actions, greedy).astype(np.int64)


def evaluate(pool: EnvPool, greedy: GreedyFn, *, epsilon: float, seed: int,
             rng: np.random.Generator) -> list[float]:
    """Plays one full game (all lives) in each env of `pool`; returns the raw scores."""
    history = FrameHistory(pool.num_envs)
    states = history.reset(pool.reset(seed=seed))
    scores = np.zeros(pool.num_envs, dtype=np.float64)
    playing = np.ones(pool.num_envs, dtype=bool)
    while playing.any():
        greedy_actions = np.zeros(pool.num_envs, dtype=np.int64)
        greedy_actions[playing] = greedy(states[playing])  # finished games need no query
        actions = epsilon_greedy(greedy_actions, epsilon, pool.n_actions, rng)
        result = pool.step(actions)
        scores += np.where(playing, result.rewards, 0.0)
        playing &= ~result.game_overs
        states = history.push(result.frames, result.episode_ends)
    return scores.tolist()
