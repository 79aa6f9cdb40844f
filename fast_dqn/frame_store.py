"""The replay memory's frames column, behind one seam: on the host or on the device.

The frames are 7,056 of a transition's 7,064 bytes, and where they live decides how a
minibatch reaches the network: on the host (`HostFrames`) NumPy gathers its states into a
`Batch`; on the training device (`device_frames.DeviceFrames`) the host sends the slots
(`SlotBatch`) and the update gathers them there. The rest of the memory is the same in both
places, so both make the same updates; nothing outside a store asks where the frames live.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from fast_dqn.config import HISTORY
from fast_dqn.host_arrays import aligned_zeros
from fast_dqn.transitions import FRAME_SHAPE, MINIBATCH_COLUMNS, Batch, SlotBatch, empty_batch


class FrameStore(Protocol):
    """Frame rows 0 .. capacity - 1 of a replay memory, one 84x84 uint8 frame per slot."""

    capacity: int
    device_frames: Any  # the frames as a device variable that the update gathers from, or None

    def write(self, start: int, frames: np.ndarray) -> None:
        """Writes `frames` to rows start, start + 1, ... (around the end of the ring)."""

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows start .. stop - 1 as a host array."""

    def put_rows(self, start: int, frames: np.ndarray) -> None:
        """Writes host rows from `start` on (no wrap-around; a checkpoint read's chunks)."""

    def minibatch_buffers(self, rows: int) -> Batch | None:
        """Reusable buffers for `gather` to fill with `rows` transitions, or None where
        the minibatches it makes need none."""

    def gather(self, slots: SlotBatch, out: Batch | None = None,
               shift: int = 1) -> Batch | SlotBatch:
        """The minibatches whose states are made of `slots`, as the update takes them; each
        next state is the state `shift` (n) steps on."""

    def saved_rows(self, size: int) -> Any:
        """Rows 0 .. size - 1 as a checkpoint writes them: an array, or a source that hands
        them out a chunk at a time (`chunks(rows_per_chunk)`, `shape`, `dtype`)."""

    def restore_target(self) -> Any:
        """Where a checkpoint's rows are read to: an array filled in place, or a sink that
        takes them a chunk at a time (`put_rows`, `shape`, `dtype`)."""


class HostFrames:
    """The frames in host memory, one (capacity, 84, 84) uint8 array. Minibatches are
    gathered into reused buffers: fresh ones per call cost page faults (docs/throughput.md)."""

    device_frames = None  # the update takes gathered states

    def __init__(self, capacity: int):
        self.capacity = capacity
        # Aligned as the staging area's frames are, which TensorFlow reads in place.
        self.array = aligned_zeros((capacity, *FRAME_SHAPE), np.uint8)

    def write(self, start: int, frames: np.ndarray) -> None:
        count = len(frames)
        first = min(count, self.capacity - start)
        self.array[start:start + first] = frames[:first]
        self.array[:count - first] = frames[first:]

    def rows(self, start: int, stop: int) -> np.ndarray:
        return self.array[start:stop].copy()

    def put_rows(self, start: int, frames: np.ndarray) -> None:
        self.array[start:start + len(frames)] = frames

    def minibatch_buffers(self, rows: int) -> Batch:
        return empty_batch(rows)

    def gather(self, slots: SlotBatch, out: Batch | None = None, shift: int = 1) -> Batch:
        """The states of `slots` gathered on the host: into the leading rows of `out`'s
        buffers when given (those rows are returned), else into fresh arrays."""
        rows = len(slots.actions)
        if out is None:
            out = empty_batch(rows)
        out = out._make(array[:rows] for array in out)
        np.take(self.array, slots.state_slots, axis=0, out=out.states, mode="clip")
        out.states[slots.state_mask == 0] = 0  # frames before the episode's start
        # The next state `shift` steps on shares HISTORY - shift frames with the state. For a
        # valid slot, every frame the state's mask zeroes is zeroed by the next state's mask
        # too, so the masked frames can be copied; only the newer frames are read again.
        shared = max(0, HISTORY - shift)
        out.next_states[:, :shared] = out.states[:, shift:]
        np.take(self.array, slots.next_slots[:, shared:], axis=0,
                out=out.next_states[:, shared:], mode="clip")
        out.next_states[slots.next_mask == 0] = 0
        for name in MINIBATCH_COLUMNS:  # the columns beside the states, by name
            getattr(out, name)[...] = getattr(slots, name)
        return out

    def saved_rows(self, size: int) -> np.ndarray:
        return self.array[:size]  # np.save streams it: no second copy

    def restore_target(self) -> np.ndarray:
        return self.array  # read straight into: no second copy
