"""What a run has done so far: agent steps, minibatch updates, finished games and its clock.

Kept apart from the loops, as dqn_zoo keeps its step and rate trackers apart from the agent,
so that what a step, an update and a rate mean is in one file."""

from __future__ import annotations

import math
import time
from collections import deque
from typing import Any, Callable, Mapping, Sequence

from fast_dqn import state_fields
from fast_dqn.config import Config, counted
from fast_dqn.state_fields import StateError
from fast_dqn.schedule import learning_started, updates_due

AVERAGE_WINDOW = 100  # games in the running averages, as the original tool used


# -- the counters -------------------------------------------------------------------------

class EpisodeStats:
    """Games finished since the run began, and the lengths and returns of the last `window`
    (what episodes.csv's averages and the progress line's recent return read)."""

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
        window = state_fields.integer(state, "window", 1)
        episodes = state_fields.integer(state, "episodes")
        kept = min(window, episodes)
        lengths = state_fields.numbers(state, "lengths", kept, low=1)
        returns = state_fields.numbers(state, "returns", kept)
        if len(lengths) != kept or len(returns) != kept:
            raise StateError(f"the episode statistics keep {len(lengths)} lengths and "
                             f"{len(returns)} returns of {counted(episodes, 'game')}; "
                             f"expected {kept}")
        if any(length != int(length) for length in lengths):
            raise StateError("'lengths' must be whole agent steps")
        self._window = window
        self._lengths = deque((int(length) for length in lengths), maxlen=window)
        self._returns = deque(returns, maxlen=window)
        self.episodes = episodes


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else math.nan


class RunCounters:
    """Agent steps (one per environment per round), minibatch updates, finished games and
    the run's clock, which spans earlier processes of a resumed run. Thread use: during an
    epoch only the learner thread adds to `updates`; the main thread reads them after `wait`
    (and the progress line, as it goes: a count read whole).
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
        self._learning_announced = False  # on_learning_start has been called
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
        """Starts this process's learning clock once the run is past the replay start (a run
        resumed past it has it running since `restore`), and calls `on_learning_start`'s
        callbacks once, as the loop acts its first learning step."""
        if self._learning_announced or not learning_started(self.step, self.config):
            return
        if self._learning_clock is None:
            self._learning_clock = (time.monotonic(), self.step, self.updates)
        self._learning_announced = True
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
        """The run's one rate of each kind, which every report shows: agent steps/s and
        updates/s over the wall-clock time after the replay start (evaluations, checkpoints
        and the network's compile included), over the whole run (0 before). Only steps whose
        updates are made count: the fast trainer's samplers run up to an epoch ahead."""
        seconds, steps, updates = self._learning_totals()
        if seconds <= 0:
            return 0.0, 0.0
        return min(steps, updates * self.config.train_freq) / seconds, updates / seconds

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
        step = state_fields.integer(state, "step", 0, last_step)
        updates = state_fields.integer(state, "updates")
        refill_until = state_fields.integer(state, "refill_until", 0, step)
        before_refill = state_fields.integer(state, "updates_before_refill", 0, updates)
        hours = state_fields.number(state, "hours", low=0.0)
        learning = (state_fields.number(state, "learning_seconds", low=0.0),
                    state_fields.integer(state, "learning_steps", 0, step),
                    state_fields.integer(state, "learning_updates", 0, updates))
        games = EpisodeStats()
        games.restore(state_fields.section(state, "games"))
        # The fast trainer makes an epoch's updates while its steps are taken, so a run
        # stopped mid-epoch may be up to one epoch ahead of the steps.
        ahead = step + self.config.target_update
        if updates > self._updates_due_after(ahead, refill_until, before_refill):
            raise StateError(f"'updates' ({updates}) exceeds the updates due by the end of "
                             f"the epoch of step {step}")
        self.step, self.updates, self.games = step, updates, games
        self._refill_until, self._updates_before_refill = refill_until, before_refill
        now = time.monotonic()
        self._hours_before, self._started = hours, now
        self._learning_before = learning
        # A run resumed past the replay start learns from here: the updates an epoch still
        # owed, made before the loop acts again (the whole of a resume in the final window),
        # belong to the measured time, and so does the time they take.
        self._learning_clock = (now, step, updates) if learning_started(step, self.config) \
            else None
        self._learning_announced = False

    def _updates_due_after(self, step: int, refill_until: int, before_refill: int) -> int:
        """`updates_due(step)` for a run that paused learning at `refill_until` (0 = never)
        after `before_refill` updates."""
        if refill_until == 0:
            return updates_due(step, self.config)
        return before_refill + updates_due(step - refill_until, self.config)
