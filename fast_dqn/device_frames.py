"""The replay memory's frames in a TensorFlow variable on the training device (the second
frame store, fast_dqn/frame_store.py), and the choice between the two (`--replay-device`).

On a GPU, gathering a minibatch's states on the host (about 900 KB) and copying them over
is the largest host cost of an update, under the interpreter lock; with the frames on the
device the host sends only the slots and masks (`SlotBatch`, a few KB). The slots are drawn
with the same generator and rules, so the minibatches are the same bit for bit.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Iterator

import numpy as np

from fast_dqn.config import FRAME_SIZE
from fast_dqn.direct_calls import borrowed_tensor
from fast_dqn.frame_store import FrameStore, HostFrames
from fast_dqn.tensorflow_start import quiet_tensorflow_start
from fast_dqn.transitions import Batch, SlotBatch

with quiet_tensorflow_start():
    import tensorflow as tf

ResourceExhausted = tf.errors.ResourceExhaustedError  # the device has no room left

# What the device must keep free beside the frames: the networks, their optimizer slots,
# a K-update call's activations and the framework's own pools, with room to spare.
DEVICE_HEADROOM_BYTES = 2 * 1024**3


class DeviceFrames:
    """A (capacity + 1, 84, 84) uint8 variable: rows 0 .. capacity - 1 are the memory's
    slots; the last stays zero, the frame a state's padding gathers (`learner.gather_states`).
    Written only at sync points (the trainer drained) and by checkpoint reads; read by the
    trainer's update during an epoch."""

    def __init__(self, capacity: int, device: str | None = None):
        self.capacity = capacity
        self.frame_shape = (FRAME_SIZE, FRAME_SIZE)
        self.shape = (capacity, *self.frame_shape)  # the rows a checkpoint holds
        self.dtype = np.dtype(np.uint8)
        shape = (capacity + 1, *self.frame_shape)
        # Created by an initializer that runs on the device: no host copy of the zeros.
        with tf.device(device or _training_device()):
            self.variable = tf.Variable(lambda: tf.zeros(shape, tf.uint8), trainable=False,
                                        name="replay_frames")
        self.device_frames = self.variable  # what the learner's update gathers from

    def write(self, start: int, frames: np.ndarray) -> None:
        """One scatter of whole rows from `start` on, around the ring: the fastest write
        (docs/throughput.md). The frames are lent, not copied; the row read after the scatter
        waits for it (and a GPU's copy), so the caller may then change `frames`."""
        slots = (start + np.arange(len(frames))) % self.capacity
        self.variable.scatter_update(tf.IndexedSlices(borrowed_tensor(frames),
                                                      tf.constant(slots)))
        if len(slots):
            self.variable.sparse_read(slots[-1:]).numpy()

    def rows(self, start: int, stop: int) -> np.ndarray:
        return self.variable.sparse_read(tf.range(start, stop)).numpy()

    def put_rows(self, start: int, frames: np.ndarray) -> None:
        self.write(start, frames)

    def minibatch_buffers(self, rows: int) -> None:
        return None  # slots are small, made fresh per call

    def gather(self, slots: SlotBatch, out: Batch | None = None, shift: int = 1) -> SlotBatch:
        return slots  # the update gathers the states on the device

    def saved_rows(self, size: int) -> "DeviceRows":
        return DeviceRows(self, size)

    def restore_target(self) -> "DeviceFrames":
        return self  # takes the rows a chunk at a time (`put_rows`)


class DeviceRows:
    """A device's frame rows 0 .. size - 1 as a checkpoint writes them: a chunk at a time,
    so that saving them never holds a second full copy in host memory."""

    def __init__(self, frames: DeviceFrames, size: int):
        self._frames = frames
        self.shape = (size, *frames.frame_shape)
        self.dtype = frames.dtype

    def chunks(self, rows_per_chunk: int) -> Iterator[np.ndarray]:
        for start in range(0, self.shape[0], rows_per_chunk):
            yield self._frames.rows(start, min(start + rows_per_chunk, self.shape[0]))


def has_gpu() -> bool:
    return bool(tf.config.list_physical_devices("GPU"))


def _training_device() -> str:
    return "/GPU:0" if has_gpu() else "/CPU:0"


def frames_bytes(capacity: int) -> int:
    return capacity * FRAME_SIZE * FRAME_SIZE


def gpu_free_bytes() -> int | None:
    """The first GPU's free memory as nvidia-smi reports it, or None where it cannot say."""
    command = shutil.which("nvidia-smi")
    if command is None:
        return None
    try:
        output = subprocess.run([command, "--query-gpu=memory.free", "--format=csv,noheader,nounits",
                                 "--id=0"], capture_output=True, text=True, timeout=20,
                                check=True).stdout
        return int(output.split()[0]) * 1024**2  # MiB
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def choose_replay_device(setting: str, capacity: int, has_gpu: bool,
                         free_bytes: int | None) -> tuple[bool, str]:
    """Whether the frames go on the device for `--replay-device`, and the reason, for the
    device line. `auto` chooses a GPU with room for them and DEVICE_HEADROOM_BYTES; on the
    CPU, the host (the device store would be the same memory, gathered by TensorFlow)."""
    needed = frames_bytes(capacity)
    if setting == "host":
        return False, "replay frames on the host"
    if setting == "device":
        return True, f"replay frames on the device ({needed / 1e9:.1f} GB)"
    if not has_gpu:
        return False, "replay frames on the host"
    if free_bytes is None:
        return False, "replay frames on the host (the GPU's free memory is unknown)"
    if needed + DEVICE_HEADROOM_BYTES > free_bytes:
        return False, (f"replay frames on the host (they need {needed / 1e9:.1f} GB, the GPU "
                       f"has {free_bytes / 1e9:.1f} GB free)")
    return True, f"replay frames on the GPU ({needed / 1e9:.1f} GB of {free_bytes / 1e9:.1f} GB free)"


def make_frame_store(setting: str, capacity: int) -> tuple[FrameStore, str]:
    """The replay memory's frame store for `--replay-device` (`choose_replay_device`), and
    the device line's words on the choice.

    Raises:
        ValueError: the device has no room for the frames.
    """
    gpu = has_gpu()
    free = gpu_free_bytes() if gpu and setting == "auto" else None
    on_device, line = choose_replay_device(setting, capacity, gpu, free)
    if not on_device:
        return HostFrames(capacity), line
    try:
        return DeviceFrames(capacity), line
    except ResourceExhausted as error:
        raise ValueError(f"--replay-device=device: the training device has no room for the "
                         f"replay memory's frames ({frames_bytes(capacity) / 1e9:.1f} GB); use "
                         "--replay-device=host or a smaller --replay-capacity") from error
