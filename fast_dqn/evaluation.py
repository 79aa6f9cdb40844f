"""Evaluation: full games at a small epsilon with the online network, played as one batch.

Nature DQN evaluates 30 games at epsilon 0.05 (Mnih et al. 2015). Each game has its own
environment of one pool, so the queries are batched and the games play side by side; each
env plays exactly one game, since the first N to finish of a larger pool favour short games.
With --video-every the first game of every Nth evaluation is recorded as play records one.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple, Protocol

import numpy as np

from fast_dqn import state_fields
from fast_dqn.acting import Actor, GreedyFn
from fast_dqn.config import Config, counted
from fast_dqn.schedule import period_passed
from fast_dqn.env_pools import EnvPool, PoolStopped
from fast_dqn.run_dir import OpenDirectory
from fast_dqn.state_fields import StateError
from fast_dqn.video import VideoRecorder, VideoTarget


def evaluate(pool: EnvPool, greedy: GreedyFn, *, epsilon: float, seed: int,
             rng: np.random.Generator, should_stop: Callable[[], bool] | None = None,
             recorder: VideoRecorder | None = None) -> list[float]:
    """Plays one full game (all lives) in each env of `pool`; returns the raw scores. An env's
    first game alone counts, and a finished game is not queried again. `recorder` gets env
    0's game as play's video gets one: its screen before each of its steps (`first_screen`).

    Raises:
        PoolStopped: `should_stop()` turned true (asked every step, so that a stop is not
            held up for minutes).
    """
    actor = Actor(pool)
    actor.reset(seed=seed)
    scores = np.zeros(pool.num_envs, dtype=np.float64)
    playing = np.ones(pool.num_envs, dtype=bool)
    while playing.any():
        if should_stop is not None and should_stop():
            raise PoolStopped("stopped during the evaluation's games")
        if recorder is not None and playing[0]:
            recorder.write(pool.first_screen())  # type: ignore[attr-defined]
        for game in actor.play_round(greedy, epsilon, rng, asking=playing):
            if playing[game.env]:
                scores[game.env] = game.score
                playing[game.env] = False
    return scores.tolist()


class Evaluated(NamedTuple):
    """An evaluation played whole: its agent step, each game's raw score, its wall time
    (making and resetting the games included) and its first game's video, if recorded."""

    step: int
    returns: list[float]
    seconds: float
    video: Path | None = None

    def line(self) -> str:
        """The one line a run prints for it, on a terminal and in a log."""
        video = "" if self.video is None else f"; video {self.video}"
        return (f"evaluation at step {self.step}: mean {np.mean(self.returns):.1f} over "
                f"{counted(len(self.returns), 'game')} (min {min(self.returns):.1f}, max "
                f"{max(self.returns):.1f}), {self.seconds:.1f} s{video}")


def _never() -> bool:
    return False


class EvaluationLog(Protocol):
    """What evaluations write (see `fast_dqn.run_logs.RunLogs`), their videos in `directory`."""

    directory: OpenDirectory

    def log_evaluation(self, timestep: int, returns: list[float], hours: float) -> dict: ...

    def log_scalars(self, step: int, scalars: dict[str, float]) -> None: ...


class Evaluator:
    """Evaluations on the schedule: one every `evaluate` agent steps, in a pool of
    `eval_episodes` envs made on first use; one cut short by a stop (`PoolStopped` while
    the pool is made or reset, or `should_stop`) is played again when the run resumes, and
    its video is removed unfinished."""

    def __init__(self, config: Config,
                 make_pool: Callable[[Callable[[], bool]], EnvPool] | None,
                 run_log: EvaluationLog):
        self.config = config
        self._make_pool = make_pool
        self._pool: EnvPool | None = None
        self._should_stop: Callable[[], bool] = _never  # the running evaluation's
        self._run_log = run_log
        self.count = 0
        self.evaluated_at = 0  # the agent step of the last evaluation
        self.last: dict | None = None  # the last evaluation's row

    def due(self, step: int) -> bool:
        return period_passed(self.config.evaluate, self.evaluated_at, step)

    def run(self, step: int, greedy: GreedyFn, hours: float,
            should_stop: Callable[[], bool] | None = None) -> Evaluated | None:
        """Plays and logs the evaluation due at `step`; returns it, or None if it was cut
        short by `should_stop`: then it is neither logged nor counted, so a resumed run
        plays it again, whole."""
        if self._make_pool is None or (should_stop is not None and should_stop()):
            return None  # building and resetting 30 games takes seconds: not for a stop
        started = time.monotonic()
        self._should_stop = _never if should_stop is None else should_stop
        seed = self.config.seed + 1_000_003 * (self.count + 1)
        try:
            if self._pool is None:
                self._pool = self._make_pool(self._asked_to_stop)
            with self._video(step) as recorder:
                returns = evaluate(self._pool, greedy, epsilon=self.config.eval_epsilon,
                                   seed=seed, rng=np.random.default_rng(seed),
                                   should_stop=should_stop, recorder=recorder)
        except PoolStopped:
            return None
        self.count += 1
        self.evaluated_at = step
        self.last = self._run_log.log_evaluation(step, returns, hours)
        self._run_log.log_scalars(step, {"eval/mean_return": float(np.mean(returns))})
        return Evaluated(step, returns, time.monotonic() - started,
                         None if recorder is None else recorder.path)

    def _video(self, step: int) -> contextlib.AbstractContextManager[VideoRecorder | None]:
        """The video of this evaluation's first game in the run directory, every
        `video_every`th evaluation; renamed into place as the `with` block ends normally."""
        every = self.config.video_every
        if not every or (self.count + 1) % every:
            return contextlib.nullcontext()
        return VideoRecorder(VideoTarget(self._run_log.directory, f"eval-step{step}.mp4"),
                             self._pool.first_screen().shape[:2])  # type: ignore[union-attr]

    def _asked_to_stop(self) -> bool:
        """What the pool asks between two groups of envs: the running evaluation's request."""
        return self._should_stop()

    def last_mean(self) -> float | None:
        return self.last["mean"] if self.last else None

    def state(self) -> dict[str, Any]:
        return {"evaluations": self.count, "evaluated_at": self.evaluated_at,
                "last_evaluation": self.last}

    def restore(self, state: Mapping[str, Any], step: int) -> None:
        """Restores what `state()` returned, for a run at agent step `step`.

        Raises:
            StateError: a key is missing or a value is out of range (nothing is changed then).
        """
        count = state_fields.integer(state, "evaluations", 0, step)
        evaluated_at = state_fields.integer(state, "evaluated_at", 0, step)
        last = state.get("last_evaluation", "missing")
        if last is not None:
            last = dict(state_fields.section(state, "last_evaluation"))
            state_fields.integer(last, "timestep", evaluated_at, evaluated_at)
            for key in ("mean", "std", "hours"):
                state_fields.number(last, key)
            state_fields.integer(last, "episodes", 1)
        if (count == 0) != (last is None):
            raise StateError(f"{count} evaluations but last_evaluation is {last!r}")
        self.count, self.evaluated_at, self.last = count, evaluated_at, last

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
