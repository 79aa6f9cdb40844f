"""The replay memory: single frames in a circular store, 4-frame states rebuilt on sampling.

Its invariants are listed in docs/design.md §3; `ReplayMemory.check_valid` tests them.

Each slot holds one transition: the newest frame of the state the action was taken in,
the action, the reward clipped to its sign, and two flags (after dopamine's replay buffer):

  terminal     the transition ended the learning episode; its next state is never used.
  episode_end  the learning episode ended here (terminal, or cut off by the episode cap);
               no state reaches back across it.

A state is the frame of its own slot plus up to HISTORY - 1 older frames of the same learning
episode; frames from before the episode's start are zero. `FrameHistory` applies the same
rule on the actor side, so the state an actor saw and the state this memory rebuilds for the
same step are identical.

    slots:     ... | f5 | f6 | f7 | f8 | f9 | ...
                         end        ^ i
    state(i) = [0, f7, f8, f9]     (f6 ended the previous episode: zero padding)
    next(i)  = [f7, f8, f9, f10]   (slot i + 1)
"""

from __future__ import annotations

import os
from typing import Iterator, NamedTuple, Protocol, Sequence

import numpy as np

from fast_dqn.config import FRAME_SIZE, HISTORY
from fast_dqn.host_arrays import aligned_zeros

FRAME_SHAPE = (FRAME_SIZE, FRAME_SIZE)
_MAX_SAMPLING_ROUNDS = 1000

# The one declaration of a transition's columns: each column's shape for one transition and
# its dtype (the role dopamine's storage signature plays). The actors' rounds, the staging
# area, the sampler buffers, the replay memory and its checkpoint arrays are all built from it.
TRANSITION_COLUMNS: dict[str, tuple[tuple[int, ...], type]] = {
    "frames": (FRAME_SHAPE, np.uint8),  # the newest frame of the state acted in
    "actions": ((), np.uint8),
    "rewards": ((), np.float32),  # raw game rewards until the memory clips them
    "terminals": ((), np.bool_),  # the learning episode ended: no bootstrap
    "episode_ends": ((), np.bool_),  # terminal, or cut off: no state reaches back across it
    "sampleable": ((), np.bool_),  # False for context-only copies (see SamplerBuffer)
}



class Transitions(NamedTuple):
    """Transitions column by column (see TRANSITION_COLUMNS), time along the first axis (or
    rounds x environments in the staging area)."""

    frames: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminals: np.ndarray
    episode_ends: np.ndarray
    sampleable: np.ndarray


assert Transitions._fields == tuple(TRANSITION_COLUMNS), "one column list, in one order"


def zero_transitions(*leading: int) -> Transitions:
    """Zeroed columns for `leading` transitions, e.g. (capacity,) or (rounds, W); the frames
    start where TensorFlow can read them in place (`host_arrays`)."""
    return Transitions(*(aligned_zeros((*leading, *shape), dtype)
                         for shape, dtype in TRANSITION_COLUMNS.values()))


def acted_transitions(frames: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
                      terminals: np.ndarray, episode_ends: np.ndarray) -> Transitions:
    """Transitions as actors take them: every one can be sampled."""
    return Transitions(frames=frames, actions=actions, rewards=rewards, terminals=terminals,
                       episode_ends=episode_ends, sampleable=np.ones(len(frames), dtype=bool))


def select(transitions: Transitions, rows) -> Transitions:
    """The same rows (an index or slice of the leading axes) of every column."""
    return Transitions(*(column[rows] for column in transitions))


def concatenate(pieces: list[Transitions]) -> Transitions:
    """Transitions one after another, in the order given."""
    return Transitions(*(np.concatenate(columns) for columns in zip(*pieces)))


# Bytes one slot costs (7,064 for 84x84 frames).
BYTES_PER_TRANSITION = sum(int(np.prod(shape)) * np.dtype(dtype).itemsize
                           for shape, dtype in TRANSITION_COLUMNS.values())


class Batch(NamedTuple):
    """A minibatch; states are (B, HISTORY, 84, 84) uint8, oldest frame first."""

    states: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_states: np.ndarray
    terminals: np.ndarray


def empty_batch(batch_size: int) -> Batch:
    """Buffers for `ReplayMemory.batch(..., out=)`."""
    states_shape = (batch_size, HISTORY, *FRAME_SHAPE)
    return Batch(np.zeros(states_shape, np.uint8), np.zeros(batch_size, np.int32),
                 np.zeros(batch_size, np.float32), np.zeros(states_shape, np.uint8),
                 np.zeros(batch_size, bool))


class SlotBatch(NamedTuple):
    """Minibatches as the slots their states are made of, for a gather where the frames live
    (the training device). State i is frames[state_slots[i]] with the frames where
    state_mask[i] is 0 set to zero (before the episode's start); likewise its next state.
    `ReplayMemory.batch` makes the same states on the host."""

    state_slots: np.ndarray  # (N, HISTORY) int32, oldest frame first
    state_mask: np.ndarray  # (N, HISTORY) uint8
    next_slots: np.ndarray
    next_mask: np.ndarray
    actions: np.ndarray  # (N,) int32
    rewards: np.ndarray  # (N,) float32
    terminals: np.ndarray  # (N,) bool


class DeviceFrameStore(Protocol):
    """The frames column of a replay memory, kept on the training device
    (fast_dqn/device_frames.py)."""

    capacity: int
    frame_shape: tuple[int, int]

    def write(self, slots: np.ndarray, frames: np.ndarray) -> None:
        """frames[slots] = frames, in one assignment."""

    def rows(self, start: int, stop: int) -> np.ndarray:
        """A host copy of rows start .. stop - 1."""

    def put_rows(self, start: int, frames: np.ndarray) -> None:
        """Writes host rows from `start` on."""


class FrameRows:
    """A device's frame rows 0 .. size - 1 as a checkpoint writes them: a chunk at a time,
    so that saving them never holds a second full copy in host memory."""

    def __init__(self, frames: DeviceFrameStore, size: int):
        self._frames = frames
        self.shape = (size, *FRAME_SHAPE)
        self.dtype = np.dtype(np.uint8)

    def chunks(self, rows_per_chunk: int) -> Iterator[np.ndarray]:
        for start in range(0, self.shape[0], rows_per_chunk):
            yield self._frames.rows(start, min(start + rows_per_chunk, self.shape[0]))


def replay_bytes(capacity: int) -> int:
    return capacity * BYTES_PER_TRANSITION


def available_memory_bytes() -> int | None:
    """MemAvailable from /proc/meminfo; elsewhere the physical memory; None if unknown."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_memory_for(capacity: int, headroom_bytes: int = 2 * 1024**3) -> None:
    """Raises ValueError if this machine cannot hold a replay memory of `capacity`.

    numpy allocates lazily, so an oversized memory would fail hours into a run; this check
    runs before anything is allocated.
    """
    needed = replay_bytes(capacity)
    available = available_memory_bytes()
    if available is not None and needed + headroom_bytes > available:
        raise ValueError(
            f"--replay-capacity {capacity} needs {needed / 1e9:.1f} GB of memory (plus "
            f"{headroom_bytes / 1e9:.0f} GB headroom) but only {available / 1e9:.1f} GB is "
            f"available; lower --replay-capacity")


def clip_reward(reward: np.ndarray | float) -> np.ndarray:
    """Nature DQN clips rewards to their sign for learning (Mnih et al., 2015)."""
    return np.sign(np.asarray(reward, dtype=np.float32))


class ReplayMemory:
    """Circular store of single-frame transitions with vectorized minibatch sampling.

    Owned by whoever adds: in the fast scheme only the main thread adds, at sync points,
    while the trainer thread is drained; during an epoch the trainer only reads.
    """

    def __init__(self, capacity: int, rng: np.random.Generator,
                 device_frames: DeviceFrameStore | None = None):
        if capacity < HISTORY + 1:
            raise ValueError(f"replay capacity must be at least {HISTORY + 1}; got {capacity}")
        if device_frames is not None and device_frames.capacity != capacity:
            raise ValueError(f"device frames hold {device_frames.capacity} slots, not {capacity}")
        self.capacity = capacity
        self._rng = rng
        # With `device_frames` the frames column lives there and `store.frames` is empty:
        # minibatches are then drawn as slots (`sample_slots`) and gathered on the device.
        self.device_frames = device_frames
        self.store = zero_transitions(capacity)
        if device_frames is not None:
            self.store = self.store._replace(frames=np.zeros((0, *FRAME_SHAPE), np.uint8))
        self.cursor = 0  # the slot the next transition goes to
        self.size = 0

    def __len__(self) -> int:
        return self.size

    @property
    def rng(self) -> np.random.Generator:
        return self._rng

    def add_many(self, transitions: Transitions) -> None:
        """Stores transitions in time order (a round of one env, or one sampler's buffer).

        Rewards are clipped to their sign here and a terminal is always an episode end.
        """
        self.add_in_order([transitions])

    def add_in_order(self, pieces: Sequence[Transitions]) -> None:
        """Stores the pieces one after another, as `add_many` of their concatenation would;
        where the frames are on the device, in one assignment per piece."""
        count = sum(len(piece.frames) for piece in pieces)
        if count == 0:
            return
        if count > self.capacity:  # only the newest `capacity` transitions stay
            pieces = [select(concatenate(list(pieces)), slice(count - self.capacity, count))]
            count = self.capacity
        start = self.cursor
        for piece in pieces:
            self._write_columns(start, piece)
            if self.device_frames is not None:
                # Not one assignment of all the pieces: joining them first makes a fresh
                # 70 MB host array per sync point (W = 16), and the join with its one
                # assignment took 10x as long as the W assignments in the benchmark's run.
                slots = (start + np.arange(len(piece.frames))) % self.capacity
                self.device_frames.write(slots, piece.frames)
            start = (start + len(piece.frames)) % self.capacity
        self._advance(count)

    def _write_columns(self, start: int, transitions: Transitions) -> None:
        """Writes rows from slot `start` on, around the end of the ring (the frames only
        where they are on the host)."""
        count = len(transitions.frames)
        first = min(count, self.capacity - start)
        on_host = self.device_frames is None
        for ring, rows in ((slice(start, start + first), slice(0, first)),
                           (slice(0, count - first), slice(first, count))):
            for name, stored, column in zip(Transitions._fields, self.store, transitions):
                if name != "frames" or on_host:
                    stored[ring] = column[rows]
            self.store.rewards[ring] = clip_reward(transitions.rewards[rows])
            self.store.episode_ends[ring] |= transitions.terminals[rows]

    def _advance(self, count: int) -> None:
        self.cursor = (self.cursor + count) % self.capacity
        self.size = min(self.size + count, self.capacity)

    def _ages(self, slots: np.ndarray) -> np.ndarray:
        """0 for the newest slot, size - 1 for the oldest."""
        return (self.cursor - 1 - slots) % self.capacity

    def valid(self, slots: np.ndarray) -> np.ndarray:
        """Whether each slot can be sampled as a transition.

        A slot needs its next frame stored (not the newest slot, unless terminal), must not
        be cut off by the episode cap (no next state exists), must not be a context-only
        copy (see `SamplerBuffer`), and, once the memory has
        wrapped, must not reach back into overwritten frames (the oldest HISTORY - 1 slots).
        """
        slots = np.asarray(slots)
        ages = self._ages(slots)
        written = ages < self.size
        has_next = (ages >= 1) | self.store.terminals[slots]
        truncated = self.store.episode_ends[slots] & ~self.store.terminals[slots]
        ok = written & has_next & ~truncated & self.store.sampleable[slots]
        if self.size == self.capacity:
            ok &= ages <= self.capacity - HISTORY
        return ok

    def sample_indices(self, batch_size: int) -> np.ndarray:
        """Uniform over valid slots, by vectorized rejection sampling."""
        indices = self._rng.integers(0, self.size, size=batch_size)
        for _ in range(_MAX_SAMPLING_ROUNDS):
            invalid = ~self.valid(indices)
            if not invalid.any():
                return indices
            indices[invalid] = self._rng.integers(0, self.size, size=int(invalid.sum()))
        raise RuntimeError(f"no valid transitions to sample among {self.size} stored")

    def sample(self, batch_size: int, out: Batch | None = None) -> Batch:
        """A uniform minibatch; see `batch` for `out`."""
        self._check_frames_on_host()
        return self.batch(self.sample_indices(batch_size), out)

    def sample_many(self, count: int, batch_size: int, out: Batch | None = None) -> Batch:
        """`count` uniform minibatches gathered at once, minibatch k in rows
        k * batch_size ... (k + 1) * batch_size - 1 (see `many_indices`)."""
        self._check_frames_on_host()
        return self.batch(self.many_indices(count, batch_size), out)

    def many_indices(self, count: int, batch_size: int) -> np.ndarray:
        """The slots of `count` minibatches, drawn exactly as `count` calls of `sample` draw
        them, one minibatch after another from the same generator, so a run's minibatches
        do not depend on how many are trained per call or where their frames are gathered."""
        return np.concatenate([self.sample_indices(batch_size) for _ in range(count)])

    def sample_slots(self, count: int, batch_size: int) -> SlotBatch:
        """`sample_many`'s minibatches as slots, for a gather on the device."""
        return self.slot_batch(self.many_indices(count, batch_size))

    def slot_batch(self, indices: np.ndarray) -> SlotBatch:
        """The transitions at explicit (valid) slots, their states as frame slots and masks."""
        indices = np.asarray(indices)
        window = (indices[:, None] + np.arange(-(HISTORY - 1), 1)) % self.capacity
        next_slots = (indices + 1) % self.capacity
        return SlotBatch(
            state_slots=window.astype(np.int32), state_mask=self._history_mask(indices),
            next_slots=((window + 1) % self.capacity).astype(np.int32),
            next_mask=self._history_mask(next_slots),
            actions=self.store.actions[indices].astype(np.int32),
            rewards=self.store.rewards[indices], terminals=self.store.terminals[indices])

    def batch(self, indices: np.ndarray, out: Batch | None = None) -> Batch:
        """The transitions at explicit slots (they must be valid), gathered on the host.

        With `out` (from `empty_batch`) the arrays are written into its buffers and `out` is
        returned: a trainer that reuses one buffer allocates nothing per minibatch (fresh
        megabyte-sized arrays cost page faults that made sampling 8 times slower).
        """
        self._check_frames_on_host()
        indices = np.asarray(indices)
        if out is None:
            out = empty_batch(len(indices))
        window = (indices[:, None] + np.arange(-(HISTORY - 1), 1)) % self.capacity
        next_slots = (indices + 1) % self.capacity
        np.take(self.store.frames, window, axis=0, out=out.states, mode="clip")
        out.states[self._history_mask(indices) == 0] = 0  # frames before the episode start
        # The next state shares three frames with the state. For a valid slot, every frame
        # the state's mask zeroes is zeroed by the next state's mask too, so the masked
        # frames can be copied; only the newest frame is read from the store again.
        out.next_states[:, :-1] = out.states[:, 1:]
        np.take(self.store.frames, next_slots, axis=0, out=out.next_states[:, -1], mode="clip")
        out.next_states[self._history_mask(next_slots) == 0] = 0
        out.actions[...] = self.store.actions[indices]  # stored as uint8, trained on as int32
        np.take(self.store.rewards, indices, out=out.rewards)
        np.take(self.store.terminals, indices, out=out.terminals)
        return out

    def _check_frames_on_host(self) -> None:
        """Before anything is drawn: a refused call leaves the generator as it was."""
        if self.device_frames is not None:
            raise ValueError("the frames are on the device: draw slots with sample_slots")

    def _history_mask(self, newest: np.ndarray) -> np.ndarray:
        """(B, HISTORY) bool: which frames of the state ending at `newest` are real.

        Frame `newest - k` is real when no episode ended in slots newest - k .. newest - 1
        and it is not older than the oldest stored frame.
        """
        back = np.arange(1, HISTORY)
        older = (newest[:, None] - back) % self.capacity
        ended = np.logical_or.accumulate(self.store.episode_ends[older], axis=1)
        too_old = self._ages(newest)[:, None] + back > self.size - 1
        real_back = ~(ended | np.logical_or.accumulate(too_old, axis=1))
        mask = np.ones((len(newest), HISTORY), dtype=np.uint8)
        mask[:, :-1] = real_back[:, ::-1]
        return mask

    def close_open_episode(self) -> None:
        """Ends the newest episode where it stands (a resumed run starts fresh episodes).

        The newest transition then has no next frame to sample and no later frame reaches
        back into it.
        """
        if self.size == 0:
            return
        newest = (self.cursor - 1) % self.capacity
        if not self.store.episode_ends[newest]:
            self.store.episode_ends[newest] = True
            self.store.sampleable[newest] = False

    def state_dict(self) -> dict[str, np.ndarray]:
        """Arrays that restore this memory exactly (for checkpoints; no pickles).

        Before the memory first wraps around only the filled slots are given (views), so an
        early checkpoint does not write gigabytes of empty slots.
        """
        state = select(self.store, slice(0, self.size))._asdict()
        if self.device_frames is not None:
            state["frames"] = FrameRows(self.device_frames, self.size)
        state.update(cursor=np.array(self.cursor), size=np.array(self.size),
                     capacity=np.array(self.capacity))
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restores `state_dict()` (a checkpoint reader fills `store` in place instead and
        then calls `set_extent`)."""
        if int(state["capacity"]) != self.capacity:
            raise ValueError(f"checkpoint replay capacity {int(state['capacity'])} differs "
                             f"from {self.capacity}")
        for name, stored in self.store._asdict().items():
            if name == "frames" and self.device_frames is not None:
                self.device_frames.put_rows(0, np.asarray(state[name]))
            else:
                stored[:len(state[name])] = state[name]
        self.set_extent(cursor=int(state["cursor"]), size=int(state["size"]))

    def set_extent(self, cursor: int, size: int) -> None:
        """Where the next transition goes and how many slots are filled (after a restore)."""
        if not (0 <= size <= self.capacity and 0 <= cursor < self.capacity):
            raise ValueError(f"replay cursor {cursor} and size {size} do not fit capacity "
                             f"{self.capacity}")
        self.cursor = cursor
        self.size = size

    def check_valid(self) -> None:
        """Raises ValueError, naming the broken rule, unless the memory keeps its invariants.

        Run after a restore and by the tests; it reads every slot, so not on the hot path.
        """
        store = self.store
        if self.size < self.capacity and self.cursor != self.size % self.capacity:
            raise ValueError(f"replay memory: cursor {self.cursor} is not at the end of the "
                             f"{self.size} filled slots of a memory that has not wrapped")
        if (store.terminals & ~store.episode_ends).any():
            raise ValueError("replay memory: a terminal transition is not an episode end")
        filled = slice(0, self.size)
        if not np.isin(store.rewards[filled], (-1.0, 0.0, 1.0)).all():
            raise ValueError("replay memory: a stored reward is not clipped to -1, 0 or 1")
        if store.sampleable[self.size:].any():
            raise ValueError("replay memory: an unfilled slot is marked sampleable")
