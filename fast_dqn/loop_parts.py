"""What a training loop is built from, and what it needs of each part.

The entry points (`fast_dqn.launch`, `fast_dqn.benchmark`) and the tests build `LoopParts`;
`fast_dqn.agents` runs them. The protocols name the few methods the loops call, so that the
tests' recording fakes stand in for the real parts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, NamedTuple, Protocol

import numpy as np

from fast_dqn.config import Config
from fast_dqn.evaluation import EvaluationLog
from fast_dqn.replay_memory import Batch, ReplayMemory, SlotBatch
from fast_dqn.run_logs import EpisodeRow
from fast_dqn.samplers import EnvPool
from fast_dqn.stop_request import StopRequest

if TYPE_CHECKING:
    from fast_dqn.agents import TrainingLoop


class QFunction(Protocol):
    """What the loops need of a Q-network (and `fast_dqn.learner` of its updates)."""

    n_actions: int

    def greedy_actions(self, states: np.ndarray, use_target: bool = True) -> np.ndarray: ...

    def update(self, batch: Batch) -> None: ...

    def update_many(self, batches: Batch, count: int) -> None: ...

    def update_from_slots(self, frames: object, slots: SlotBatch, count: int) -> None: ...

    def sync_target(self) -> None: ...

    def take_train_stats(self) -> tuple[float, float, int]: ...


class RunLog(EvaluationLog, Protocol):
    """What the loops need of the run's logs (see `fast_dqn.run_logs.RunLogs`)."""

    def log_episode(self, row: EpisodeRow) -> None: ...

    def flush(self) -> None: ...


class LoopParts(NamedTuple):
    """Everything a training loop is built from; the entry points wire these up."""

    config: Config
    network: QFunction
    memory: ReplayMemory
    pool: EnvPool
    make_eval_pool: Callable[[Callable[[], bool]], EnvPool] | None  # (should_stop)
    run_log: RunLog
    rng: np.random.Generator
    progress: object | None = None  # fast_dqn.progress.Progress
    save_checkpoint: Callable[["TrainingLoop"], None] | None = None
    stop: StopRequest | None = None  # installed by the entry point before the run is built
