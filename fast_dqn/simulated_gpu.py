"""The benchmark's simulated GPU: a learner whose arithmetic takes a GPU's time and no more.

No GPU is at hand on the machines this project is measured on; `SimulatedDevice` lets the
benchmark measure everything the host does around a GPU's work (docs/design.md §6).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Sequence

from fast_dqn.config import Config
from fast_dqn.direct_calls import DirectCall
from fast_dqn.learner import SLOT_UPDATES, Learner, gathered_batch, learner_settings
from fast_dqn.tensorflow_start import quiet_tensorflow_start
from fast_dqn.transitions import Batch, SlotBatch

with quiet_tensorflow_start():
    import tensorflow as tf

MANY_UPDATES = ("update_many", SLOT_UPDATES[1])  # the calls of K updates, stacked along axis 0


@dataclasses.dataclass(frozen=True)
class SimulatedGpu:
    """How long a GPU would take for one minibatch update and one batched query (ms)."""

    update_ms: float
    query_ms: float


class SimulatedCalls:
    """The simulated GPU's traced calls, one per `CALL_PURPOSES`, in place of the learner's
    own (`traced_calls`): a call's host work is the real one's, its arithmetic is gone.

    Each call, whatever its K, is one uncompiled function dispatched once, as a real call of
    K updates is one host call. An update counts its updates (`updates_on_device`) and, from
    frames on the device, gathers the states of all its minibatches as the real call's
    device work does, keeping one pixel (`last_pixel`) so that the gathers stay in the
    function without a reduction no GPU's update makes. Not compiled (XLA would drop all of
    a gather but that pixel), nor a loop per update (host work a real call does not have):
    docs/design.md §6. A query's actions are all 0.
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

    def _count_updates(self, *columns: tf.Tensor) -> tf.Tensor:
        """A host minibatch's update, or K stacked (actions (K, B)): counted, its TD errors
        all 1, so that `--prioritized`'s priorities stay at the largest seen (1 at first) and
        the draws are rejected as often as a real memory's: at 0, every drawn row would fall
        to the epsilon and the rows never valid would hold nearly all the mass."""
        actions = Batch(*columns).actions
        stacked = len(actions.shape) == 2
        count = tf.shape(actions, out_type=tf.int64)[0] if stacked else tf.constant(1, tf.int64)
        self.updates_on_device.assign_add(count)
        return tf.ones_like(tf.reshape(actions, [-1]), dtype=tf.float32)

    def _gather_and_count(self, frames: tf.Tensor, *columns: tf.Tensor) -> tf.Tensor:
        """The real gather of the states of the call's minibatches (one or K stacked) from
        the frames on the device, then counted."""
        batch = gathered_batch(frames, SlotBatch(*columns))
        self.last_pixel.assign(tf.maximum(_last_pixel(batch.states),
                                          _last_pixel(batch.next_states)))
        return self._count_updates(*batch)

    @staticmethod
    def _no_actions(states: tf.Tensor) -> tf.Tensor:
        return tf.zeros(tf.shape(states)[:1], dtype=tf.int32)


class SimulatedDevice:
    """A learner's device on a simulated GPU: its traced calls (`calls`) and their dispatch
    (`dispatch`), both handed to the `Learner` when it is built.

    The host's work runs for real (arguments become tensors, one dispatch per call, a
    query's actions copied back); each call then waits, releasing the interpreter lock as a
    GPU's kernels would, until the simulated GPU would be done, counted from its dispatch
    (`gpu.update_ms` per update, `gpu.query_ms` per query). A gather from frames on the
    device runs on the CPU within that time. The weights never change.
    """

    def __init__(self, gpu: SimulatedGpu):
        self.gpu = gpu
        self.calls = SimulatedCalls()
        self.simulated_seconds = 0.0  # the updates' waits so far (the learner's threads)

    def dispatch(self, purpose: str, call: DirectCall,
                 tensors: list[tf.Tensor]) -> Sequence[tf.Tensor]:
        """Runs a hot call, then waits out the simulated GPU's time for it."""
        dispatched = time.perf_counter()
        outputs = call(*tensors)
        if purpose in ("query", "online_query"):
            busy = self.gpu.query_ms / 1000.0
        else:
            count = int(tensors[0].shape[0]) if purpose in MANY_UPDATES else 1
            busy = count * self.gpu.update_ms / 1000.0
            self.simulated_seconds += busy
        time.sleep(max(0.0, dispatched + busy - time.perf_counter()))
        return outputs

    @property
    def updates_on_device(self) -> int:
        return int(self.calls.updates_on_device.numpy())


def _last_pixel(states: tf.Tensor) -> tf.Tensor:
    return tf.reshape(states, [-1])[-1]  # a reshape is a view: no pass over the states


def make_simulated_learner(config: Config, n_actions: int, device: SimulatedDevice,
                           replay_frames: tf.Variable | None = None) -> Learner:
    """The run's learner (`learner.make_learner`) on the simulated `device`."""
    return Learner(n_actions, replay_frames=replay_frames, traced_calls=device.calls,
                   dispatch=device.dispatch, **learner_settings(config))
