"""What a training loop is built from (`LoopParts`), and the few methods it calls of each
part, so that the tests' recording fakes stand in for the real ones."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Protocol

import numpy as np

from fast_dqn.config import Config
from fast_dqn.evaluation import EvaluationLog
from fast_dqn.replay_memory import Minibatches, ReplayMemory
from fast_dqn.run_logs import EpisodeRow
from fast_dqn.env_pools import EnvPool
from fast_dqn.stop_request import StopRequest
from fast_dqn.transitions import Transitions


class Learner(Protocol):
    """What the loops need of a learner (`fast_dqn.learner.Learner`; the tests' fakes)."""

    n_actions: int

    def greedy_actions(self, states: np.ndarray, use_target: bool = True) -> np.ndarray: ...

    def update(self, minibatches: Minibatches, count: int) -> Any: ...

    def sync_target(self) -> None: ...

    def take_train_stats(self, updates: int) -> tuple[float, float]: ...


class RunLog(EvaluationLog, Protocol):
    """What the loops need of the run's logs (see `fast_dqn.run_logs.RunLogs`)."""

    def log_episode(self, row: EpisodeRow) -> None: ...

    def flush(self) -> None: ...


class LoopParts(NamedTuple):
    """Everything a training loop is built from; the entry points wire these up."""

    config: Config
    learner: Learner
    memory: ReplayMemory
    pool: EnvPool
    make_eval_pool: Callable[[Callable[[], bool]], EnvPool] | None  # (should_stop)
    run_log: RunLog
    rng: np.random.Generator
    progress: object | None = None  # fast_dqn.progress.Progress
    # Saves the loop's state (JSON-able) and the transitions it holds apart from the memory,
    # with the learner and the memory the entry point built.
    save_checkpoint: Callable[[dict[str, Any], Transitions | None], None] | None = None
    stop: StopRequest | None = None  # installed by the entry point before the run is built
