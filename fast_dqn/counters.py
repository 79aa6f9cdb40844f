"""What a run has done so far, and what its schedule asks for at a given agent step.

Both training loops keep their counters here rather than in the loop classes (dqn_zoo keeps
its step and rate trackers apart from the agent for the same reason): a newcomer finds what a
step, an update and a rate mean in one file (`fast_dqn.launch.run_summary` writes them to
summary.json). The schedule functions are pure functions of the agent step and the settings;
the loops ask them, they never re-derive them.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from fast_dqn.config import Config

RECENT_GAMES = 100  # games in the progress line's running mean


# -- the schedule -------------------------------------------------------------------------

def learning_started(step: int, config: Config) -> bool:
    """Whether agent step `step` is past the random start: epsilon decays and minibatch
    updates are due from here on."""
    return step >= config.replay_start


def epsilon_at(step: int, config: Config) -> float:
    """Exploration epsilon for the agent step `step`.

    Uniformly random during the replay start, then linear from `initial_epsilon` to
    `final_epsilon` over `exploration_steps` counted from the replay start (as DeepMind's
    original DQN code counts it), then constant.
    """
    if not learning_started(step, config):
        return 1.0
    learning_steps = step - config.replay_start
    if config.exploration_steps == 0 or learning_steps >= config.exploration_steps:
        return config.final_epsilon
    fraction = learning_steps / config.exploration_steps
    return config.initial_epsilon + fraction * (config.final_epsilon - config.initial_epsilon)


def epsilons_at(steps: np.ndarray, config: Config) -> np.ndarray:
    """`epsilon_at` for many steps at once, with the same float64 arithmetic."""
    learning_steps = steps - config.replay_start
    if config.exploration_steps == 0:
        decayed = np.full(len(steps), config.final_epsilon)
    else:
        fraction = np.minimum(learning_steps / config.exploration_steps, 1.0)
        decayed = config.initial_epsilon + fraction * (config.final_epsilon -
                                                        config.initial_epsilon)
        decayed[learning_steps >= config.exploration_steps] = config.final_epsilon
    return np.where(learning_steps < 0, 1.0, decayed)


def updates_due(step: int, config: Config) -> int:
    """Minibatch updates a run has made by agent step `step` (1 per `train_freq` steps)."""
    return max(0, step - config.replay_start) // config.train_freq


def target_sync_due(step: int, config: Config) -> bool:
    """Whether the target network takes the online weights on reaching `step`: every
    `target_update` agent steps counted from the replay start."""
    learning_steps = step - config.replay_start
    return learning_steps > 0 and learning_steps % config.target_update == 0


def next_target_sync(step: int, config: Config) -> int:
    """The first step after `step` (which is past the replay start) at which the target is
    synced."""
    done_periods = (step - config.replay_start) // config.target_update
    return config.replay_start + (done_periods + 1) * config.target_update


def period_passed(period: int, previous_step: int, step: int) -> bool:
    """Whether a multiple of `period` (0 = never) lies in (previous_step, step]."""
    return period > 0 and step // period > previous_step // period


# -- the counters -------------------------------------------------------------------------

class RunCounters:
    """Agent steps, minibatch updates, recent game scores and the run's clock.

    `step` counts agent steps: one per environment per round (W per round in the fast
    scheme). `updates` counts minibatch updates applied to the online network. Owned by the
    main thread; the trainer thread's updates are added when an epoch's work is collected.
    """

    def __init__(self, config: Config):
        self.config = config
        self.step = 0
        self.updates = 0
        self.recent_scores: list[float] = []
        # Learning pauses after a resume without the replay memory until it is refilled.
        self._refill_until = 0
        self._updates_before_refill = 0
        self._hours_before = 0.0
        self._started = time.monotonic()
        self._learning_clock: tuple[float, int, int] | None = None  # time, step, updates
        self.on_learning_start: list[Callable[[], None]] = []  # e.g. a benchmark's clocks

    def updates_due(self, step: int) -> int:
        """Minibatch updates the run has made by agent step `step`, refill pauses included."""
        if self._refill_until == 0:
            return updates_due(step, self.config)
        return self._updates_before_refill + updates_due(step - self._refill_until, self.config)

    def start_refill(self) -> None:
        """After a resume with an empty memory: act `replay_start` steps before learning."""
        self._refill_until = self.step
        self._updates_before_refill = self.updates

    def add_game(self, score: float) -> None:
        self.recent_scores = (self.recent_scores + [score])[-RECENT_GAMES:]

    def recent_mean_score(self) -> float | None:
        return float(np.mean(self.recent_scores)) if self.recent_scores else None

    # -- the clock and the rates --------------------------------------------------------------

    def hours(self) -> float:
        """Wall-clock hours of training, earlier runs of a resumed run included."""
        return self._hours_before + (time.monotonic() - self._started) / 3600.0

    def mark_learning_start(self) -> None:
        """Starts the rates' clock the first time the run reaches the replay start."""
        if self._learning_clock is None and learning_started(self.step, self.config):
            self._learning_clock = (time.monotonic(), self.step, self.updates)
            for callback in self.on_learning_start:
                callback()

    def rates(self) -> tuple[float, float]:
        """Agent steps/s and updates/s since learning started (0 before)."""
        if self._learning_clock is None:
            return 0.0, 0.0
        since, step0, updates0 = self._learning_clock
        elapsed = max(time.monotonic() - since, 1e-9)
        return (self.step - step0) / elapsed, (self.updates - updates0) / elapsed

    # -- checkpoints ----------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        return {"step": self.step, "updates": self.updates,
                "refill_until": self._refill_until,
                "updates_before_refill": self._updates_before_refill,
                "recent_scores": self.recent_scores, "hours": self.hours()}

    def restore(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.updates = int(state["updates"])
        self._refill_until = int(state["refill_until"])
        self._updates_before_refill = int(state["updates_before_refill"])
        self.recent_scores = [float(score) for score in state["recent_scores"]]
        self._hours_before = float(state["hours"])
        self._started = time.monotonic()
