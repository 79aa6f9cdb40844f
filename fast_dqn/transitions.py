"""What one transition is, and what a minibatch of them is, wherever the frames live.

`TRANSITION_COLUMNS` declares a transition's columns once (as dopamine's storage signature
does), `MINIBATCH_COLUMNS` what a minibatch carries beside its states; the rounds, the
staging area, the replay memory, its checkpoints and both kinds of minibatch (`Batch` of
states, `SlotBatch` of slots) are built from them.
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
    "sampleable": ((), np.bool_),  # False for context-only copies (see SamplerStaging)
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


# What a minibatch carries beside its two states, by name: a column added here (and filled
# by `ReplayMemory.slot_batch`) reaches the learning rule from either frame store. The target
# `returns + discounts * max_a Q_target(next_state, a)` serves 1-step and n-step returns
# alike (dqn_zoo's `discount_t`).
MINIBATCH_COLUMNS: dict[str, tuple[tuple[int, ...], type]] = {
    "actions": ((), np.int32),
    "returns": ((), np.float32),  # the discounted sum of the clipped rewards
    "discounts": ((), np.float32),  # gamma^n, or 0 where the learning episode ends first
    "weights": ((), np.float32),  # importance-sampling weights of the loss terms (1: uniform)
}
STATE_SHAPE = (HISTORY, *FRAME_SHAPE)


def _minibatch_type(name: str, states: tuple[str, ...], doc: str) -> type:
    """A named tuple of arrays: the `states` fields, then MINIBATCH_COLUMNS in order."""
    fields = [(field, np.ndarray) for field in (*states, *MINIBATCH_COLUMNS)]
    minibatch = NamedTuple(name, fields)  # type: ignore[misc]
    minibatch.__doc__ = doc
    minibatch.__module__ = __name__
    return minibatch


Batch = _minibatch_type("Batch", ("states", "next_states"), """A minibatch (or K stacked one
    after another): states and next states (B, HISTORY, 84, 84) uint8, oldest frame first,
    then the MINIBATCH_COLUMNS.""")

SlotBatch = _minibatch_type(
    "SlotBatch", ("state_slots", "state_mask", "next_slots", "next_mask"), """Minibatches as
    the slots their states are made of, for a gather where the frames live (the training
    device), then the MINIBATCH_COLUMNS. State i is frames[state_slots[i]] ((N, HISTORY)
    int32, oldest frame first) with the frames where state_mask[i] ((N, HISTORY) uint8) is 0
    set to zero (before the episode's start); likewise its next state. `HostFrames.gather`
    makes the same states as a `Batch` on the host.""")


def minibatch_columns(rows: int) -> dict[str, np.ndarray]:
    """Zeroed MINIBATCH_COLUMNS for `rows` transitions, by name."""
    return {name: np.zeros((rows, *shape), dtype)
            for name, (shape, dtype) in MINIBATCH_COLUMNS.items()}


def empty_batch(batch_size: int) -> Batch:
    """Buffers for the minibatches a host frame store gathers (`HostFrames.gather`)."""
    return Batch(states=np.zeros((batch_size, *STATE_SHAPE), np.uint8),
                 next_states=np.zeros((batch_size, *STATE_SHAPE), np.uint8),
                 **minibatch_columns(batch_size))
