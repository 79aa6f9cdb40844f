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
from fast_dqn.q_network import SLOT_UPDATES, QNetwork, q_network_settings
from fast_dqn.quiet_tensorflow import quiet_tensorflow_start
from fast_dqn.transitions import Batch, SlotBatch
from fast_dqn.update_rule import UpdateStats

with quiet_tensorflow_start():
    import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class SimulatedGpu:
    """How long a GPU would take for one minibatch update and one batched query (ms)."""

    update_ms: float
    query_ms: float


class SimulatedArithmetic:
    """Stand-ins for the network's arithmetic, of the learning rule's and the query's
    signatures (`update_rule.UpdateFunction`, `q_network.GreedyFunction`): the network's own
    traced calls run them where they would run the real ones.

    The update counts itself (`updates_on_device`, which the tests read) and keeps one pixel
    of the states it is given (`last_pixel`): from frames on the device, the network gathers
    the states before the update, and a kept pixel keeps those gathers in the compiled
    function; a reduction over them would be CPU work of the simulation's own (a pass over
    each 900 KB result, 15% of the update's CPU time timed alone), which no GPU's update
    makes. The query's actions are all 0.
    """

    def __init__(self):
        self.updates_on_device = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.last_pixel = tf.Variable(0, dtype=tf.uint8, trainable=False)

    def update(self, online: Any, target: Any, optimizer: Any, batch: Batch) -> UpdateStats:
        self.last_pixel.assign(tf.maximum(_last_pixel(batch.states),
                                          _last_pixel(batch.next_states)))
        self.updates_on_device.assign_add(1)
        nothing = tf.constant(0.0)
        return UpdateStats(loss=nothing, mean_q=nothing)

    @staticmethod
    def greedy(network: Any, states: tf.Tensor) -> tf.Tensor:
        return tf.zeros(tf.shape(states)[:1], dtype=tf.int32)


class SimulatedQNetwork(QNetwork):
    """A QNetwork on a simulated GPU, for the benchmark where no GPU is at hand.

    Everything the host does for the network's work runs for real: the arguments become
    tensors (the copies a GPU needs), the network's traced calls are dispatched as it
    dispatches them (one host call per K updates, with XLA or without), and a query's
    actions are copied back. Only the arithmetic is replaced, by substitution: the network
    runs `SimulatedArithmetic`'s update and query instead of the learning rule and the
    argmax (from frames on the device it still gathers the states), and the call then waits,
    releasing the interpreter lock as a GPU's kernels would. Its actions are all 0 and its
    weights never change.

    A query waits `gpu.query_ms` after its call. An update call lasts `gpu.update_ms` per
    update counted from its dispatch: the gather of the states is device work, part of a
    GPU's time per update, which here runs on the CPU during that time (it takes longer
    only when the CPU's gather does).
    """

    def __init__(self, n_actions: int, gpu: SimulatedGpu,
                 arithmetic: SimulatedArithmetic | None = None, **settings: Any):
        self.gpu = gpu
        self.simulated_seconds = 0.0  # the waits so far (only the trainer thread updates)
        self._dispatched_at: float | None = None  # the current update call's first dispatch
        self.arithmetic = arithmetic or SimulatedArithmetic()
        super().__init__(n_actions, update_function=self.arithmetic.update,
                         greedy_function=self.arithmetic.greedy, dispatch=self._timed_dispatch,
                         **settings)

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
        return int(self.arithmetic.updates_on_device.numpy())

    def _wait(self, seconds: float) -> None:
        time.sleep(seconds)
        self.simulated_seconds += seconds


def _last_pixel(states: tf.Tensor) -> tf.Tensor:
    return tf.reshape(states, [-1])[-1]  # a reshape is a view: no pass over the states


def make_simulated_q_network(config: Config, n_actions: int,
                             gpu: SimulatedGpu) -> SimulatedQNetwork:
    """The run's Q-network (`q_network.make_q_network`) on the simulated `gpu`."""
    return SimulatedQNetwork(n_actions, gpu, **q_network_settings(config))
