"""What one transition is, and what a minibatch of them is, wherever the frames live.

`TRANSITION_COLUMNS` declares a transition's columns once (the role dopamine's storage
signature plays); the actors' rounds, the staging area, the sampler buffers, the replay
memory and its checkpoint arrays are all built from it. A minibatch reaches the network
either as states (`Batch`, gathered on the host) or as the slots its states are made of
(`SlotBatch`, gathered where the frames are); `fast_dqn.frame_store` decides which.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fast_dqn.config import FRAME_SIZE, HISTORY
from fast_dqn.host_arrays import aligned_zeros

FRAME_SHAPE = (FRAME_SIZE, FRAME_SIZE)

# Each column's shape for one transition, and its dtype.
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


def replay_bytes(capacity: int) -> int:
    return capacity * BYTES_PER_TRANSITION


class Batch(NamedTuple):
    """A minibatch; states are (B, HISTORY, 84, 84) uint8, oldest frame first."""

    states: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_states: np.ndarray
    terminals: np.ndarray


def empty_batch(batch_size: int) -> Batch:
    """Buffers for the minibatches a host frame store gathers (`HostFrames.gather`)."""
    states_shape = (batch_size, HISTORY, *FRAME_SHAPE)
    return Batch(np.zeros(states_shape, np.uint8), np.zeros(batch_size, np.int32),
                 np.zeros(batch_size, np.float32), np.zeros(states_shape, np.uint8),
                 np.zeros(batch_size, bool))


class SlotBatch(NamedTuple):
    """Minibatches as the slots their states are made of, for a gather where the frames live
    (the training device). State i is frames[state_slots[i]] with the frames where
    state_mask[i] is 0 set to zero (before the episode's start); likewise its next state.
    `HostFrames.gather` makes the same states as a `Batch` on the host."""

    state_slots: np.ndarray  # (N, HISTORY) int32, oldest frame first
    state_mask: np.ndarray  # (N, HISTORY) uint8
    next_slots: np.ndarray
    next_mask: np.ndarray
    actions: np.ndarray  # (N,) int32
    rewards: np.ndarray  # (N,) float32
    terminals: np.ndarray  # (N,) bool
