"""The benchmark's simulated GPU: a QNetwork whose arithmetic takes a GPU's time and no more.

No GPU is at hand on the machines this project is measured on; `SimulatedQNetwork` lets the
benchmark measure everything the host does around a GPU's work (docs/design.md §6).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Sequence

import numpy as np

from fast_dqn.config import Config
from fast_dqn.direct_calls import DirectCall
from fast_dqn.q_network import SLOT_UPDATES, QNetwork, gathered_batch, q_network_settings
from fast_dqn.quiet_tensorflow import quiet_tensorflow_start
from fast_dqn.transitions import Batch, SlotBatch

with quiet_tensorflow_start():
    import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class SimulatedGpu:
    """How long a GPU would take for one minibatch update and one batched query (ms)."""

    update_ms: float
    query_ms: float


class SimulatedCalls:
    """The simulated GPU's traced calls, one for each of the network's (`CALL_PURPOSES`), in
    place of the network's own (`QNetwork`'s `traced_calls`): the host work of a call is the
    real one's, the arithmetic is gone.

    Each call, whatever its K, is one uncompiled function dispatched once, as a real call of
    K updates is one host call. An update counts its updates (`updates_on_device`, which the
    tests read); from frames on the device it gathers the states of all its minibatches, as
    the real call's device work does, and keeps one pixel of them (`last_pixel`), so that
    the gathers are not left out of the function; a reduction over them would be CPU work of
    the simulation's own (a pass over each 900 KB result, 15% of the update's CPU time timed
    alone), which no GPU's update makes. A query's actions are all 0.

    Never compiled, with XLA or without: XLA keeps of a gather only the pixel kept (a call
    of 64 updates from slots took 3 ms of CPU instead of 19), so the CPU would not do the
    gather a GPU does within its time; and the real K call is an uncompiled loop whose
    compiled iterations are device work, which the simulation's wait stands for. Nor a
    loop: run per update, a call cost a loop iteration and a small gather per update
    (23-24 ms of CPU for 64).
    """

    def __init__(self):
        self.updates_on_device = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.last_pixel = tf.Variable(0, dtype=tf.uint8, trainable=False)

    def __call__(self, xla: bool) -> dict[str, Any]:
        def uncompiled(body: Any) -> Any:
            return tf.function(body, reduce_retracing=True)

        return {"query": uncompiled(self._no_actions),
                "online_query": uncompiled(self._no_actions),
                "update": uncompiled(self._count_updates),
                "update_many": uncompiled(self._count_updates),
                SLOT_UPDATES[0]: uncompiled(self._gather_and_count),
                SLOT_UPDATES[1]: uncompiled(self._gather_and_count)}

    def _count_updates(self, *columns: tf.Tensor) -> None:
        """A host minibatch's update, or K stacked (actions (K, B)): counted, nothing more."""
        actions = Batch(*columns).actions
        stacked = len(actions.shape) == 2
        count = tf.shape(actions, out_type=tf.int64)[0] if stacked else tf.constant(1, tf.int64)
        self.updates_on_device.assign_add(count)

    def _gather_and_count(self, frames: tf.Tensor, *columns: tf.Tensor) -> None:
        """The real gather of the states of the call's minibatches (one or K stacked) from
        the frames on the device, then counted."""
        batch = gathered_batch(frames, SlotBatch(*columns))
        self.last_pixel.assign(tf.maximum(_last_pixel(batch.states),
                                          _last_pixel(batch.next_states)))
        self._count_updates(*batch)

    @staticmethod
    def _no_actions(states: tf.Tensor) -> tf.Tensor:
        return tf.zeros(tf.shape(states)[:1], dtype=tf.int32)


class SimulatedQNetwork(QNetwork):
    """A QNetwork on a simulated GPU, for the benchmark where no GPU is at hand.

    Everything the host does for the network's work runs for real: the arguments become
    tensors (the copies a GPU needs), each call is dispatched once as the real network's is
    (one host call per K updates, with XLA or without), and a query's actions are copied
    back. Only the arithmetic is replaced, by substitution: the network is built with
    `SimulatedCalls` in place of its own traced calls (from frames on the device they still
    gather the states), and the call then waits, releasing the interpreter lock as a GPU's
    kernels would. Its actions are all 0 and its weights never change.

    A query waits `gpu.query_ms` after its call. An update call lasts `gpu.update_ms` per
    update counted from its dispatch: the gather of the states is device work, part of a
    GPU's time per update, which here runs on the CPU during that time (it takes longer
    only when the CPU's gather does).
    """

    def __init__(self, n_actions: int, gpu: SimulatedGpu,
                 calls: SimulatedCalls | None = None, **settings: Any):
        self.gpu = gpu
        self.simulated_seconds = 0.0  # the waits so far (only the trainer thread updates)
        self._dispatched_at: float | None = None  # the current update call's first dispatch
        self.simulated_calls = calls or SimulatedCalls()
        super().__init__(n_actions, traced_calls=self.simulated_calls,
                         dispatch=self._timed_dispatch, **settings)

    def greedy_actions(self, states: np.ndarray, use_target: bool = True) -> np.ndarray:
        actions = super().greedy_actions(states, use_target)
        time.sleep(self.gpu.query_ms / 1000.0)
        return actions

    def update_many(self, batches: Batch, count: int) -> None:
        super().update_many(batches, count)
        self._wait(count * self.gpu.update_ms / 1000.0)

    def update(self, batch: Batch) -> None:
        super().update(batch)
        self._wait(self.gpu.update_ms / 1000.0)

    def update_from_slots(self, frames: tf.Variable, slots: SlotBatch, count: int) -> None:
        self._dispatched_at = None
        super().update_from_slots(frames, slots, count)
        busy = count * self.gpu.update_ms / 1000.0
        time.sleep(max(0.0, self._dispatched_at + busy - time.perf_counter()))
        self.simulated_seconds += busy

    def _timed_dispatch(self, purpose: str, call: DirectCall,
                        tensors: list[tf.Tensor]) -> Sequence[tf.Tensor]:
        """Runs a hot call, noting when the current slot update's device work began.
        Only the trainer's thread makes slot updates; queries come from the acting loop."""
        if purpose in SLOT_UPDATES and self._dispatched_at is None:
            self._dispatched_at = time.perf_counter()
        return call(*tensors)

    @property
    def updates_on_device(self) -> int:
        return int(self.simulated_calls.updates_on_device.numpy())

    def _wait(self, seconds: float) -> None:
        time.sleep(seconds)
        self.simulated_seconds += seconds


def _last_pixel(states: tf.Tensor) -> tf.Tensor:
    return tf.reshape(states, [-1])[-1]  # a reshape is a view: no pass over the states


def make_simulated_q_network(config: Config, n_actions: int,
                             gpu: SimulatedGpu) -> SimulatedQNetwork:
    """The run's Q-network (`q_network.make_q_network`) on the simulated `gpu`."""
    return SimulatedQNetwork(n_actions, gpu, **q_network_settings(config))
