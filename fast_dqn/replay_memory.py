"""The replay memory: single frames in a circular store, 4-frame states rebuilt on sampling.

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
from typing import NamedTuple

import numpy as np

from fast_dqn.config import FRAME_SIZE, HISTORY

FRAME_SHAPE = (FRAME_SIZE, FRAME_SIZE)
# Bytes one slot costs: frame + action (uint8) + reward (float32) + three flags.
BYTES_PER_TRANSITION = FRAME_SIZE * FRAME_SIZE + 1 + 4 + 1 + 1 + 1
_MAX_SAMPLING_ROUNDS = 1000


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

    def __init__(self, capacity: int, rng: np.random.Generator):
        if capacity < HISTORY + 1:
            raise ValueError(f"replay capacity must be at least {HISTORY + 1}; got {capacity}")
        self.capacity = capacity
        self._rng = rng
        self.frames = np.zeros((capacity, *FRAME_SHAPE), dtype=np.uint8)
        self.actions = np.zeros(capacity, dtype=np.uint8)
        self.rewards = np.zeros(capacity, dtype=np.float32)
        self.terminals = np.zeros(capacity, dtype=bool)
        self.episode_ends = np.zeros(capacity, dtype=bool)
        self.sampleable = np.zeros(capacity, dtype=bool)  # False for context-only copies
        self.cursor = 0  # the slot the next transition goes to
        self.size = 0

    def __len__(self) -> int:
        return self.size

    @property
    def rng(self) -> np.random.Generator:
        return self._rng

    def add(self, frame: np.ndarray, action: int, reward: float, terminal: bool,
            episode_end: bool) -> None:
        """Stores one transition; `reward` is the raw game reward (clipped here)."""
        slot = self.cursor
        self.frames[slot] = frame
        self.actions[slot] = action
        self.rewards[slot] = clip_reward(reward)
        self.terminals[slot] = terminal
        self.episode_ends[slot] = episode_end or terminal
        self.sampleable[slot] = True
        self._advance(1)

    def add_many(self, frames: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
                 terminals: np.ndarray, episode_ends: np.ndarray,
                 sampleable: np.ndarray | None = None) -> None:
        """Stores transitions in time order (one sampler's buffer), vectorized."""
        count = len(frames)
        if sampleable is None:
            sampleable = np.ones(count, dtype=bool)
        if count > self.capacity:
            keep = slice(count - self.capacity, count)
            frames, actions, rewards = frames[keep], actions[keep], rewards[keep]
            terminals, episode_ends = terminals[keep], episode_ends[keep]
            sampleable = sampleable[keep]
            count = self.capacity
        slots = (self.cursor + np.arange(count)) % self.capacity
        self.frames[slots] = frames
        self.actions[slots] = actions
        self.rewards[slots] = clip_reward(rewards)
        self.terminals[slots] = terminals
        self.episode_ends[slots] = np.logical_or(episode_ends, terminals)
        self.sampleable[slots] = sampleable
        self._advance(count)

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
        has_next = (ages >= 1) | self.terminals[slots]
        truncated = self.episode_ends[slots] & ~self.terminals[slots]
        ok = written & has_next & ~truncated & self.sampleable[slots]
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
        return self.batch(self.sample_indices(batch_size), out)

    def sample_many(self, count: int, batch_size: int, out: Batch | None = None) -> Batch:
        """`count` uniform minibatches gathered at once, minibatch k in rows
        k * batch_size ... (k + 1) * batch_size - 1.

        The indices are drawn exactly as `count` calls of `sample` draw them, one minibatch
        after another from the same generator, so a run's minibatches do not depend on how
        many are trained per call.
        """
        indices = np.concatenate([self.sample_indices(batch_size) for _ in range(count)])
        return self.batch(indices, out)

    def batch(self, indices: np.ndarray, out: Batch | None = None) -> Batch:
        """The transitions at explicit slots (they must be valid).

        With `out` (from `empty_batch`) the arrays are written into its buffers and `out` is
        returned: a trainer that reuses one buffer allocates nothing per minibatch (fresh
        megabyte-sized arrays cost page faults that made sampling 8 times slower).
        """
        indices = np.asarray(indices)
        if out is None:
            out = empty_batch(len(indices))
        window = (indices[:, None] + np.arange(-(HISTORY - 1), 1)) % self.capacity
        next_slots = (indices + 1) % self.capacity
        np.take(self.frames, window, axis=0, out=out.states, mode="clip")
        out.states[self._history_mask(indices) == 0] = 0  # frames before the episode start
        # The next state shares three frames with the state. For a valid slot, every frame
        # the state's mask zeroes is zeroed by the next state's mask too, so the masked
        # frames can be copied; only the newest frame is read from the store again.
        out.next_states[:, :-1] = out.states[:, 1:]
        np.take(self.frames, next_slots, axis=0, out=out.next_states[:, -1], mode="clip")
        out.next_states[self._history_mask(next_slots) == 0] = 0
        out.actions[...] = self.actions[indices]  # stored as uint8, trained on as int32
        np.take(self.rewards, indices, out=out.rewards)
        np.take(self.terminals, indices, out=out.terminals)
        return out

    def _history_mask(self, newest: np.ndarray) -> np.ndarray:
        """(B, HISTORY) bool: which frames of the state ending at `newest` are real.

        Frame `newest - k` is real when no episode ended in slots newest - k .. newest - 1
        and it is not older than the oldest stored frame.
        """
        back = np.arange(1, HISTORY)
        older = (newest[:, None] - back) % self.capacity
        ended = np.logical_or.accumulate(self.episode_ends[older], axis=1)
        too_old = self._ages(newest)[:, None] + back > self.size - 1
        real_back = ~(ended | np.logical_or.accumulate(too_old, axis=1))
        mask = np.ones((len(newest), HISTORY), dtype=np.uint8)
        mask[:, :-1] = real_back[:, ::-1]
        return mask

    def state_at(self, slot: int) -> np.ndarray:
        """The (HISTORY, 84, 84) state whose newest frame is in `slot`."""
        window = (slot + np.arange(-(HISTORY - 1), 1)) % self.capacity
        mask = self._history_mask(np.array([slot]))[0]
        return self.frames[window] * mask[:, None, None]

    def close_open_episode(self) -> None:
        """Ends the newest episode where it stands (a resumed run starts fresh episodes).

        The newest transition then has no next frame to sample and no later frame reaches
        back into it.
        """
        if self.size == 0:
            return
        newest = (self.cursor - 1) % self.capacity
        if not self.episode_ends[newest]:
            self.episode_ends[newest] = True
            self.sampleable[newest] = False

    _ARRAYS = ("frames", "actions", "rewards", "terminals", "episode_ends", "sampleable")

    def state_dict(self) -> dict[str, np.ndarray]:
        """Arrays that restore this memory exactly (for checkpoints; no pickles).

        Before the memory first wraps around only the filled slots are given (views), so an
        early checkpoint does not write gigabytes of empty slots.
        """
        filled = slice(0, self.size)
        state = {name: getattr(self, name)[filled] for name in self._ARRAYS}
        state.update(cursor=np.array(self.cursor), size=np.array(self.size),
                     capacity=np.array(self.capacity))
        return state

    def buffers(self) -> dict[str, np.ndarray]:
        """The full arrays (and counters), for a checkpoint reader to fill in place."""
        state = {name: getattr(self, name) for name in self._ARRAYS}
        state.update(cursor=np.array(0), size=np.array(0), capacity=np.array(self.capacity))
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restores `state_dict()`; arrays that are this memory's own buffers (filled in
        place from `buffers()`) are not copied again."""
        size = int(state["size"])
        if int(state["capacity"]) != self.capacity or len(state["frames"]) < size:
            raise ValueError(f"checkpoint replay capacity {int(state['capacity'])} differs "
                             f"from {self.capacity}")
        for name in self._ARRAYS:
            target = getattr(self, name)
            if state[name] is not target:
                target[:len(state[name])] = state[name]
        self.cursor = int(state["cursor"])
        self.size = size

class FrameHistory:
    """The actors' side of the padding rule: W stacks of the last HISTORY frames.

    At a learning episode's start the older frames are zero, exactly as `ReplayMemory`
    rebuilds them.
    """

    def __init__(self, num_envs: int):
        self.states = np.zeros((num_envs, HISTORY, *FRAME_SHAPE), dtype=np.uint8)

    def reset(self, frames: np.ndarray) -> np.ndarray:
        self.states[...] = 0
        self.states[:, -1] = frames
        return self.states

    def push(self, frames: np.ndarray, episode_starts: np.ndarray) -> np.ndarray:
        """Appends each env's newest frame; `episode_starts` marks frames that begin an episode."""
        self.states[:, :-1] = self.states[:, 1:]
        self.states[:, -1] = frames
        self.states[episode_starts, :-1] = 0
        return self.states


class SamplerBuffer:
    """One sampler's transitions between two sync points, flushed whole at each sync point.

    Samplers' buffers are flushed one after another in sampler order, so the memory's
    contents do not depend on thread timing. A learning episode still running at a sync point
    is flushed in pieces without stitching it to its neighbours in the memory:

    - a flushed piece that stops mid-episode ends with its last transition marked as an
      episode end that cannot be sampled (its next frame is not stored yet), which also keeps
      the next sampler's states from reaching back into this piece;
    - the next piece starts with that transition again, preceded by copies of the HISTORY - 1
      transitions before it, stored as context that states reach back into but that is
      never sampled itself.

        flush k:      | a1 a2 a3 a4 a5 [a6: end, not sampled] |
        flush k + 1:  | (a3 a4 a5: context) a6 a7 a8 ...      |
    """

    def __init__(self):
        self._chunks: list[tuple[np.ndarray, ...]] = []
        self._context: tuple[np.ndarray, ...] | None = None  # rows before the carried one

    def __len__(self) -> int:
        return sum(len(chunk[0]) for chunk in self._chunks)

    def extend(self, frames: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
               terminals: np.ndarray, episode_ends: np.ndarray) -> None:
        """Appends transitions in time order (copied: the caller may reuse its arrays)."""
        if len(frames):
            columns = (frames, actions, rewards, terminals, np.logical_or(episode_ends, terminals))
            self._chunks.append(tuple(np.array(column) for column in columns))

    def take(self) -> tuple[np.ndarray, ...] | None:
        """Removes everything buffered; returns (frames, actions, rewards, terminals,
        episode_ends, sampleable) ready for `ReplayMemory.add_many`, or None if empty."""
        if not self._chunks:
            return None
        rows = [np.concatenate(parts) for parts in zip(*self._chunks)]
        sampleable = np.ones(len(rows[0]), dtype=bool)
        if self._context is not None:
            rows = [np.concatenate(pair) for pair in zip(self._context, rows)]
            sampleable = np.concatenate([np.zeros(len(self._context[0]), bool), sampleable])
        self._chunks = []
        self._context = None
        if not rows[4][-1]:
            rows, sampleable = self._carry_unfinished(rows, sampleable)
        return (*rows, sampleable)

    def _carry_unfinished(self, rows: list[np.ndarray], sampleable: np.ndarray):
        """Keeps the unfinished episode's last transition (and its context) for next time."""
        last = len(rows[0]) - 1
        start = max(0, last - (HISTORY - 1))
        self._context = tuple(column[start:last].copy() for column in rows)
        self._chunks = [tuple(column[last:].copy() for column in rows)]
        rows = [column.copy() for column in rows]
        rows[4][last] = True  # a stop for states reaching back, and no next frame to sample
        sampleable = sampleable.copy()
        sampleable[last] = False
        return rows, sampleable
