"""Stand-ins for a loop's parts that record what they are asked, shared by the tests."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from fast_dqn.transitions import Batch
from fast_dqn.samplers import OneCallStep, PoolStep


class FakeRunLog:
    """Records what a loop logs (the real one is fast_dqn.run_logs.RunLogs)."""

    def __init__(self):
        self.episodes: list[tuple[int, int, float]] = []  # timestep, length, return
        self.evaluations: list[tuple[int, list[float]]] = []
        self.scalars: list[tuple[int, dict[str, float]]] = []

    def log_episode(self, row) -> None:
        self.episodes.append((row.timestep, row.length, row.ret))

    def flush(self) -> None:
        pass

    def log_evaluation(self, timestep: int, returns: list[float], hours: float) -> dict:
        self.evaluations.append((timestep, returns))
        return {"mean": float(np.mean(returns))}

    def log_scalars(self, step: int, scalars: dict[str, float]) -> None:
        self.scalars.append((step, dict(scalars)))


class Tape:
    """Events in the order they happened, from the main and the trainer threads."""

    def __init__(self):
        self.events: list[tuple] = []

    def record(self, *event: Any) -> None:
        self.events.append((threading.current_thread().name, *event))

    def main_thread(self) -> list[tuple]:
        return [e for e in self.events if e[0] == threading.main_thread().name]


class RecordingNetwork:
    """A fake Q-network: each train call makes a new online 'version'; sync copies it.

    The greedy action depends on the agent's cell and on the version of the network asked,
    so a run's replay contents depend on when the target was synced and how many minibatches
    had been trained by then.
    """

    n_actions = 2

    def __init__(self, tape: Tape):
        self.tape = tape
        self.online_version = 0
        self.target_version = 0
        self._updates_since_stats = 0
        self.queried_states: list[np.ndarray] = []

    def greedy_actions(self, states: np.ndarray, use_target: bool = True) -> np.ndarray:
        self.tape.record("query", use_target, len(states))
        self.queried_states.append(states.copy())
        version = self.target_version if use_target else self.online_version
        cells = states[:, -1, 40, :].argmax(axis=1) // 14
        return ((cells + version // 7) % 2).astype(np.int64)

    def update(self, batch: Batch) -> None:
        self.tape.record("train", self.online_version)
        self.online_version += 1
        self._updates_since_stats += 1

    def update_many(self, batches: Batch, count: int) -> None:
        assert len(batches.actions) % count == 0
        for _ in range(count):
            self.update(batches)

    def sync_target(self) -> None:
        self.tape.record("sync", self.online_version)
        self.target_version = self.online_version

    def take_train_stats(self, updates: int) -> tuple[float, float]:
        # The loop counts the updates; the fake checks the count against those it made.
        assert updates == self._updates_since_stats, (updates, self._updates_since_stats)
        self._updates_since_stats = 0
        return (0.5, 1.0) if updates else (float("nan"), float("nan"))


class ScriptedPool(OneCallStep):
    """W envs whose games last `game_lengths[i]` steps with a life lost every `life_every`
    steps; every step scores `i + 1` points, so a game's score is known in advance. After a
    game over the env starts a new game at once, as the real pools do."""

    def __init__(self, game_lengths: list[int], life_every: int = 3, n_actions: int = 4):
        self.num_envs = len(game_lengths)
        self.n_actions = n_actions
        self.game_lengths = np.array(game_lengths)
        self.life_every = life_every
        self.steps = np.zeros(self.num_envs, dtype=np.int64)  # within the current game
        self.actions: list[np.ndarray] = []

    def _frames(self) -> np.ndarray:
        frames = np.zeros((self.num_envs, 84, 84), dtype=np.uint8)
        frames[:, 0, 0] = np.arange(self.num_envs)  # each env's frames name the env
        return frames

    def reset(self, seed: int) -> np.ndarray:
        self.steps[:] = 0
        return self._frames()

    def step(self, actions: np.ndarray) -> PoolStep:
        self.actions.append(np.array(actions))
        self.steps += 1
        game_overs = self.steps >= self.game_lengths
        life_lost = self.steps % self.life_every == 0
        rewards = np.arange(1, self.num_envs + 1, dtype=np.float32)
        lengths = np.where(game_overs, self.steps, 0)
        self.steps[game_overs] = 0
        return PoolStep(self._frames(), rewards, game_overs | life_lost,
                        game_overs | life_lost, game_overs, lengths)

    def run_in_samplers(self, fn):
        return [fn(i) for i in range(self.num_envs)]

    def close(self) -> None:
        pass
