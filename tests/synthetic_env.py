"""A tiny image-based environment pool whose optimal Q-values are known in closed form.

`CorridorPool` implements the `EnvPool` protocol of `fast_dqn.env_pools`, so the real training
loops (`DQN`, `FastDQN`) can run on it unchanged. Each env is a corridor of cells drawn as a
bright block in an 84x84 uint8 frame:

    cell:    0     1     2     3     4     5
            pit  start start start start goal
    reward:  -3                            +10     (raw; the agent learns their signs)

Action 0 moves left, action 1 moves right. Entering the pit or the goal ends the episode
(terminal, and the game is over); a new episode starts in a uniformly random cell 1..4 and
its first frame is returned in the same step (as the Atari pools do). An episode that
reaches `max_steps` is cut off (an episode end that is not terminal).

With discount g and rewards clipped to their sign, for cells s = 1..4:

    Q*(s, right) = g ** (4 - s)                  (4 - s more steps to the goal after this one)
    Q*(s, left)  = -1 if s == 1 else g ** (6 - s)
"""

from __future__ import annotations

from typing import Callable, TypeVar

import numpy as np

from fast_dqn.env_pools import OneCallStep, PoolStep

T = TypeVar("T")

CELLS = 6
PIT, GOAL = 0, CELLS - 1
START_CELLS = tuple(range(1, CELLS - 1))
PIT_REWARD, GOAL_REWARD = -3.0, 10.0
LEFT, RIGHT = 0, 1
_BLOCK = 84 // CELLS  # 14 pixels per cell


def draw(cell: int) -> np.ndarray:
    """The 84x84 uint8 frame that shows the agent in `cell`."""
    frame = np.zeros((84, 84), dtype=np.uint8)
    frame[28:56, cell * _BLOCK:(cell + 1) * _BLOCK] = 255
    return frame


def optimal_q(cell: int, discount: float) -> np.ndarray:
    """[Q*(cell, left), Q*(cell, right)] for the clipped rewards (-1 pit, +1 goal)."""
    right = discount ** (GOAL - 1 - cell)
    left = -1.0 if cell == PIT + 1 else discount ** (GOAL + 1 - cell)
    return np.array([left, right])


class CorridorPool(OneCallStep):
    """W independent corridors stepped together; env i is seeded `seed + i`."""

    n_actions = 2

    def __init__(self, num_envs: int, max_steps: int = 30,
                 on_step: Callable[[np.ndarray], None] | None = None):
        self.num_envs = num_envs
        self.max_steps = max_steps
        self._on_step = on_step  # tests record the rounds with it
        self.cells = np.zeros(num_envs, dtype=np.int64)
        self._steps = np.zeros(num_envs, dtype=np.int64)
        self._rngs = [np.random.default_rng(i) for i in range(num_envs)]
        self.closed = False

    def _start(self, env: int) -> None:
        self.cells[env] = self._rngs[env].choice(START_CELLS)
        self._steps[env] = 0

    def _frames(self) -> np.ndarray:
        return np.stack([draw(int(cell)) for cell in self.cells])

    def reset(self, seed: int) -> np.ndarray:
        self._rngs = [np.random.default_rng(seed + i) for i in range(self.num_envs)]
        for env in range(self.num_envs):
            self._start(env)
        return self._frames()

    def step(self, actions: np.ndarray) -> PoolStep:
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs,) or not np.isin(actions, (LEFT, RIGHT)).all():
            raise ValueError(f"bad actions {actions!r}")
        if self._on_step is not None:
            self._on_step(actions)
        self.cells += np.where(actions == RIGHT, 1, -1)
        self._steps += 1
        rewards = np.where(self.cells == GOAL, GOAL_REWARD,
                           np.where(self.cells == PIT, PIT_REWARD, 0.0)).astype(np.float32)
        terminals = (self.cells == GOAL) | (self.cells == PIT)
        truncated = ~terminals & (self._steps >= self.max_steps)
        episode_ends = terminals | truncated
        lengths = np.where(episode_ends, self._steps, 0)
        for env in np.flatnonzero(episode_ends):
            self._start(int(env))
        return PoolStep(frames=self._frames(), rewards=rewards, terminals=terminals,
                        episode_ends=episode_ends, game_overs=episode_ends.copy(),
                        game_lengths=lengths)

    def run_in_env_threads(self, fn: Callable[[int], T]) -> list[T]:
        return [fn(i) for i in range(self.num_envs)]

    def close(self) -> None:
        self.closed = True
