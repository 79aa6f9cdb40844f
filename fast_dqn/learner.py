"""The update path in one place: minibatches from the replay memory, the network's updates.

DQN's loop calls `Learner.update_now` on the main thread; FastDQN's trainer thread
(fast_dqn/trainer.py) calls `update` while its preparing thread calls `prepare` for the next
call, on the other of the two minibatch buffers. A call makes k updates (k is at most
`updates_per_call`): the memory is frozen during an epoch, so k minibatches can be drawn at
once and trained in one call, paying the host's per-call cost once.

Where the memory's frames live decides what a minibatch is: on the host, `prepare` gathers
its states into a buffer (`ReplayMemory.sample_many`); on the device, it draws only their
slots and masks (`ReplayMemory.sample_slots`) and the update gathers the states inside its
compiled step (`QNetwork.update_from_slots`). Both draw the same slots from the same
generator, so the updates are the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fast_dqn.replay_memory import Batch, ReplayMemory, SlotBatch, empty_batch

if TYPE_CHECKING:
    from fast_dqn.loop_parts import QFunction


class NonFiniteLoss(RuntimeError):
    """Training diverged: the loss is NaN or infinite."""


def check_loss_finite(loss: float, count: int, step: int) -> None:
    """The NaN guard: stops a diverged run before it logs or saves anything more."""
    if count and not np.isfinite(loss):
        raise NonFiniteLoss(f"training diverged at step {step}: the mean loss of the last "
                            f"{count} minibatches is {loss}; try a smaller --lr")


class Learner:
    """Owns the minibatch buffers; draws minibatches from `memory` and updates `network`.

    Thread use: `prepare(k, buffer)` and `update(minibatches, k)` may run on two threads at
    once as long as they use different buffers; `update_now` runs alone.
    """

    def __init__(self, memory: ReplayMemory, network: QFunction, batch_size: int,
                 updates_per_call: int):
        self.memory = memory
        self.network = network
        self.batch_size = batch_size
        self.updates_per_call = updates_per_call
        frames = memory.device_frames
        self._frames = None if frames is None else frames.variable  # None: on the host
        rows = batch_size * updates_per_call
        # Reused, not allocated per call: fresh megabyte-sized arrays cost page faults.
        self._buffers = (empty_batch(rows), empty_batch(rows)) if frames is None else None
        # The memory's generator state before each buffer's draws, for `discard`.
        self._drawn_from: list[dict | None] = [None, None]

    def prepare(self, count: int, buffer: int) -> Batch | SlotBatch:
        """`count` minibatches drawn from the memory (into buffer 0 or 1 on the host)."""
        self._drawn_from[buffer] = self.memory.rng.bit_generator.state
        if self._frames is not None:
            return self.memory.sample_slots(count, self.batch_size)
        rows = count * self.batch_size
        out = Batch(*(array[:rows] for array in self._buffers[buffer]))
        return self.memory.sample_many(count, self.batch_size, out=out)

    def discard(self, buffer: int) -> None:
        """Takes back the draws of the minibatches in `buffer`, prepared but never trained
        on (the trainer's epoch was abandoned after the draws ahead): the memory's generator
        is again where those draws began, so a checkpoint holds the state of the updates
        made, and the run resumed from it draws those minibatches for its next updates."""
        state = self._drawn_from[buffer]
        if state is not None:
            self.memory.rng.bit_generator.state = state
            self._drawn_from[buffer] = None

    def update(self, minibatches: Batch | SlotBatch, count: int) -> None:
        """`count` updates, one per minibatch, in one call."""
        if self._frames is not None:
            self.network.update_from_slots(self._frames, minibatches, count)
        else:
            self.network.update_many(minibatches, count)

    def update_now(self, count: int = 1) -> None:
        """Draws and makes `count` updates on the calling thread."""
        self.update(self.prepare(count, buffer=0), count)
