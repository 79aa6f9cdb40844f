"""What a run has done so far, and what its schedule asks for at a given agent step.

Both training loops keep their counters here rather than in the loop classes (dqn_zoo keeps
its step and rate trackers apart from the agent for the same reason): a newcomer finds what a
step, an update and a rate mean in one file (`fast_dqn.launch.run_summary` writes them to
summary.json). The schedule functions are pure functions of the agent step and the settings;
the loops ask them, they never re-derive them.
"""

from __future__ import annotations

import math
import time
from collections import deque
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from fast_dqn import saved_state
from fast_dqn.config import Config
from fast_dqn.saved_state import StateError

AVERAGE_WINDOW = 100  # games in the running averages, as the original tool used


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
        epsilons = np.full(len(steps), config.final_epsilon)
    else:
        fraction = learning_steps / config.exploration_steps
        epsilons = config.initial_epsilon + fraction * (config.final_epsilon -
                                                        config.initial_epsilon)
        # The acting loop asks once per round, for W steps that are rarely on either side
        # of the decay: the masked writes are made only when some are.
        if learning_steps.max() >= config.exploration_steps:
            epsilons[learning_steps >= config.exploration_steps] = config.final_epsilon
    if learning_steps.min() < 0:
        epsilons[learning_steps < 0] = 1.0
    return epsilons


def final_epsilon_step(config: Config) -> int:
    """The first agent step from which epsilon stays at `final_epsilon`."""
    return config.replay_start + config.exploration_steps


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


def final_step(config: Config, num_envs: int) -> int:
    """The agent step a run of `timesteps` ends at, stepping `num_envs` envs per round: the
    fast trainer's last round may end past --timesteps."""
    return round_up(config.timesteps, num_envs)


def epoch_end(step: int, learning_from: int, config: Config, num_envs: int) -> int:
    """The agent step at which the fast scheme's epoch that starts at `step` ends (a sync
    point): before the replay start every `target_update` steps and at the replay start;
    then at the target syncs; at `learning_from` too, where a refill (after a resume without
    the replay memory) ends, so that no epoch with updates starts before it; and at the
    run's last round in any case. The periodic sync points stay where they are, and with them
    the evaluations and checkpoints."""
    if step < config.replay_start:
        end = min(step + config.target_update, config.replay_start)
    else:
        end = next_target_sync(step, config)
    if step < learning_from:
        end = min(end, learning_from)
    return min(end, final_step(config, num_envs))


def steps_at_sync_points(period: int, config: Config, count: int,
                         at_last_step: bool = True) -> list[int]:
    """The first `count` steps at which the fast scheme acts on a period (an evaluation; a
    checkpoint, which the last step has anyway: `at_last_step=False`): the first sync point
    at or after each multiple of it. They are the multiples themselves where `period` and
    the replay start are multiples of `target_update`."""
    found: list[int] = []
    step, last = 0, final_step(config, config.workers)
    while period > 0 and len(found) < count and step < last:
        end = epoch_end(step, config.replay_start, config, config.workers)
        if (end < last or at_last_step) and period_passed(period, step, end):
            found.append(end)
        step = end
    return found


def period_passed(period: int, previous_step: int, step: int) -> bool:
    """Whether a multiple of `period` (0 = never) lies in (previous_step, step]."""
    return period > 0 and step // period > previous_step // period


def round_up(value: int, multiple: int) -> int:
    """The smallest multiple of `multiple` at or above `value` (steps taken in rounds of W)."""
    return -(-value // multiple) * multiple


# -- the counters -------------------------------------------------------------------------

class EpisodeStats:
    """Games finished since the run began, and the lengths and returns of the last `window`.

    The one place where recent scores are kept: episodes.csv's averages and the progress
    line's recent return both read them here.
    """

    def __init__(self, window: int = AVERAGE_WINDOW):
        if window < 1:
            raise ValueError(f"the averaging window must be at least 1 game; got {window}")
        self._window = window
        self._lengths: deque[int] = deque(maxlen=window)
        self._returns: deque[float] = deque(maxlen=window)
        self.episodes = 0

    def add(self, length: int, score: float) -> None:
        """Records one finished game: its length in agent steps and its raw score."""
        self._lengths.append(int(length))
        self._returns.append(float(score))
        self.episodes += 1

    @property
    def avg_length(self) -> float:
        """Mean length of the last `window` games (NaN before the first game)."""
        return _mean(self._lengths)

    @property
    def avg_return(self) -> float:
        """Mean return of the last `window` games (NaN before the first game)."""
        return _mean(self._returns)

    def state(self) -> dict[str, Any]:
        return {"window": self._window, "episodes": self.episodes,
                "lengths": list(self._lengths), "returns": list(self._returns)}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Restores what `state()` returned.

        Raises:
            StateError: a key is missing or a value is out of range or inconsistent.
        """
        window = saved_state.integer(state, "window", 1)
        episodes = saved_state.integer(state, "episodes")
        kept = min(window, episodes)
        lengths = saved_state.numbers(state, "lengths", kept, low=1)
        returns = saved_state.numbers(state, "returns", kept)
        if len(lengths) != kept or len(returns) != kept:
            raise StateError(f"the episode statistics keep {len(lengths)} lengths and "
                             f"{len(returns)} returns of {episodes} games; expected {kept}")
        if any(length != int(length) for length in lengths):
            raise StateError("'lengths' must be whole agent steps")
        self._window = window
        self._lengths = deque((int(length) for length in lengths), maxlen=window)
        self._returns = deque(returns, maxlen=window)
        self.episodes = episodes


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else math.nan


class RunCounters:
    """Agent steps, minibatch updates, finished games and the run's clock.

    `step` counts agent steps: one per environment per round (W per round in the fast
    scheme). `updates` counts minibatch updates applied to the online network. Owned by the
    main thread; the trainer thread's updates are added when an epoch's work is collected.
    The clock and the rates span the whole run, earlier processes of a resumed run included.
    """

    def __init__(self, config: Config):
        self.config = config
        self.step = 0
        self.updates = 0
        self.games = EpisodeStats()
        # Learning pauses after a resume without the replay memory until it is refilled.
        self._refill_until = 0
        self._updates_before_refill = 0
        self._hours_before = 0.0
        self._started = time.monotonic()
        # Learning time, steps and updates of earlier processes of this run.
        self._learning_before = (0.0, 0, 0)
        self._learning_clock: tuple[float, int, int] | None = None  # time, step, updates
        self.on_learning_start: list[Callable[[], None]] = []  # e.g. a benchmark's clocks

    def updates_due(self, step: int) -> int:
        """Minibatch updates the run has made by agent step `step`, refill pauses included."""
        return self._updates_due_after(step, self._refill_until, self._updates_before_refill)

    def learning_from(self) -> int:
        """The agent step from which updates are due: the replay start or, after a resume
        without the replay memory, `replay_start` steps after the resume (the refill)."""
        if self._refill_until == 0:
            return self.config.replay_start
        return self._refill_until + self.config.replay_start

    def start_refill(self) -> None:
        """After a resume with an empty memory: act `replay_start` steps before learning."""
        self._refill_until = self.step
        self._updates_before_refill = self.updates

    def recent_mean_score(self) -> float | None:
        """Mean score of the last 100 games (None before the first)."""
        return self.games.avg_return if self.games.episodes else None

    # -- the clock and the rates --------------------------------------------------------------

    def hours(self) -> float:
        """Wall-clock hours of training, earlier runs of a resumed run included."""
        return self._hours_before + (time.monotonic() - self._started) / 3600.0

    def mark_learning_start(self) -> None:
        """Starts this process's learning clock once the run is past the replay start."""
        if self._learning_clock is None and learning_started(self.step, self.config):
            self._learning_clock = (time.monotonic(), self.step, self.updates)
            for callback in self.on_learning_start:
                callback()

    def _learning_totals(self) -> tuple[float, int, int]:
        """Seconds, agent steps and updates after the replay start, over the whole run."""
        seconds, steps, updates = self._learning_before
        if self._learning_clock is not None:
            since, step0, updates0 = self._learning_clock
            seconds += time.monotonic() - since
            steps += self.step - step0
            updates += self.updates - updates0
        return seconds, steps, updates

    def rates(self) -> tuple[float, float]:
        """Agent steps/s and updates/s after the replay start, over the whole run (0 before)."""
        seconds, steps, updates = self._learning_totals()
        if seconds <= 0:
            return 0.0, 0.0
        return steps / seconds, updates / seconds

    # -- checkpoints ----------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        seconds, steps, updates = self._learning_totals()
        return {"step": self.step, "updates": self.updates,
                "refill_until": self._refill_until,
                "updates_before_refill": self._updates_before_refill,
                "games": self.games.state(), "hours": self.hours(),
                "learning_seconds": seconds, "learning_steps": steps,
                "learning_updates": updates}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Restores what `state()` returned, for a run of `config.timesteps` at most.

        Raises:
            StateError: a key is missing, or a value is out of range or disagrees with the
                others (nothing is changed then).
        """
        # The fast trainer's last round may end up to W - 1 steps past --timesteps.
        last_step = self.config.timesteps + self.config.workers - 1
        step = saved_state.integer(state, "step", 0, last_step)
        updates = saved_state.integer(state, "updates")
        refill_until = saved_state.integer(state, "refill_until", 0, step)
        before_refill = saved_state.integer(state, "updates_before_refill", 0, updates)
        hours = saved_state.number(state, "hours", low=0.0)
        learning = (saved_state.number(state, "learning_seconds", low=0.0),
                    saved_state.integer(state, "learning_steps", 0, step),
                    saved_state.integer(state, "learning_updates", 0, updates))
        games = EpisodeStats()
        games.restore(saved_state.section(state, "games"))
        # The fast trainer makes an epoch's updates while its steps are taken, so a run
        # stopped mid-epoch may be up to one epoch ahead of the steps.
        ahead = step + self.config.target_update
        if updates > self._updates_due_after(ahead, refill_until, before_refill):
            raise StateError(f"'updates' ({updates}) exceeds the updates due by the end of "
                             f"the epoch of step {step}")
        self.step, self.updates, self.games = step, updates, games
        self._refill_until, self._updates_before_refill = refill_until, before_refill
        self._hours_before, self._started = hours, time.monotonic()
        self._learning_before, self._learning_clock = learning, None

    def _updates_due_after(self, step: int, refill_until: int, before_refill: int) -> int:
        """`updates_due(step)` for a run that paused learning at `refill_until` (0 = never)
        after `before_refill` updates."""
        if refill_until == 0:
            return updates_due(step, self.config)
        return before_refill + updates_due(step - refill_until, self.config)
