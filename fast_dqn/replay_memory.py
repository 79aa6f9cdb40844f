"""The replay memory: single frames in a circular store, 4-frame states rebuilt on sampling.

Invariants: docs/design.md §3 (`ReplayMemory.check_valid`). The frames live in a frame
store (fast_dqn/frame_store.py); the memory keeps the other columns, decides which slots
are valid and draws minibatches with its own generator. After dopamine's replay buffer, a
slot's `terminal` (no bootstrap) is kept apart from its `episode_end` (no state reaches back
across it: a terminal, the episode cap or a flush); `sampleable` is false for context copies
and for a flushed piece's provisional last transition (`staging.SamplerStaging`). Frames from
before an episode's start are zero, as the actor's `FrameHistory` makes them:

    slots:     ... | f5 | f6 | f7 | f8 | f9 | ...
                         end        ^ i
    state(i) = [0, f7, f8, f9]     (f6 ended the previous episode: zero padding)
    next(i)  = [f7, f8, f9, f10]   (slot i + n, here n = 1)

An n-step transition (`n_step`, Dopamine's `update_horizon`) sums the clipped rewards of
slots i .. i + n - 1, discounted by gamma^k, up to the first terminal (then its discount is
0, else gamma^n), when a minibatch is drawn. Prioritized replay (Schaul et al. 2016,
proportional): a slot is drawn with probability p^alpha / sum p^alpha (`Priorities`), its
loss weighted by (min p^alpha / p^alpha)^beta over its minibatch; the learner thread writes
back p = |TD error| + epsilon, and new transitions get the largest p seen.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from fast_dqn.config import HISTORY, Config
from fast_dqn.frame_store import FrameStore, HostFrames
from fast_dqn.transitions import (TRANSITION_COLUMNS, Batch, SlotBatch, Transitions, concatenate,
                                  select)

Minibatches = Batch | SlotBatch  # states gathered on the host, or the slots to gather them

_MAX_SAMPLING_ROUNDS = 1000
PRIORITY_EXPONENT = 0.6  # alpha: Schaul et al. (2016), proportional; dqn_zoo's
PRIORITY_EPSILON = 1e-6  # added to |TD error|, so that no transition stops being drawn


def clip_reward(reward: np.ndarray | float) -> np.ndarray:
    """Nature DQN clips rewards to their sign for learning (Mnih et al., 2015)."""
    return np.sign(np.asarray(reward, dtype=np.float32))


class ReplayMemory:
    """Circular store of single-frame transitions with vectorized minibatch sampling.

    Thread use: only the main thread adds, at sync points, with the trainer drained; during
    an epoch the trainer only reads. A checkpoint keeps its arrays (`state_dict`) in files
    and its generator's state (`generator_state`) in the manifest.
    """

    def __init__(self, capacity: int, rng: np.random.Generator,
                 frames: FrameStore | None = None, discount: float = 0.99, n_step: int = 1,
                 prioritized: bool = False):
        if capacity < HISTORY + 1:
            raise ValueError(f"replay capacity must be at least {HISTORY + 1}; got {capacity}")
        if frames is not None and frames.capacity != capacity:
            raise ValueError(f"the frame store holds {frames.capacity} slots, not {capacity}")
        if not 1 <= n_step <= capacity - HISTORY:  # a state and its n steps fit
            raise ValueError(f"n-step returns need 1 <= n <= {capacity - HISTORY}; got {n_step}")
        self.capacity = capacity
        self.n_step = n_step
        # gamma^k for k < n (the returns' terms) and gamma^n (the bootstrap's), in float32 as
        # the minibatches carry them
        self._term_discounts = (discount ** np.arange(n_step)).astype(np.float32)
        self._discount_n = np.float32(discount ** n_step)
        self._rng = rng
        self.frames: FrameStore = HostFrames(capacity) if frames is None else frames
        # Every column but the frames, which `frames` holds (`store.frames` stays empty).
        self.columns = Transitions(**{
            name: np.zeros((capacity if name != "frames" else 0, *shape), dtype)
            for name, (shape, dtype) in TRANSITION_COLUMNS.items()})
        self.cursor = 0  # the slot the next transition goes to
        self.size = 0
        self.priorities = Priorities(capacity) if prioritized else None

    def __len__(self) -> int:
        return self.size

    @property
    def rng(self) -> np.random.Generator:
        return self._rng

    def add_many(self, transitions: Transitions) -> None:
        """Stores transitions in time order, rewards clipped to their sign, each terminal
        an episode end."""
        self.add_in_order([transitions])

    def add_in_order(self, pieces: Sequence[Transitions]) -> None:
        """Stores the pieces one after another, as `add_many` of their concatenation would,
        one frame write per piece: joining them first would make a fresh host array of the
        epoch's frames at every sync point (docs/throughput.md). With priorities, each
        transition enters with the largest seen (Schaul et al. 2016), but those marked not
        to be sampled (a flushed piece's unfinished ones and context, which stay so) with 0:
        at the largest they would be drawn and rejected for good."""
        count = sum(len(piece.frames) for piece in pieces)
        if count == 0:
            return
        if count > self.capacity:  # only the newest `capacity` transitions stay
            pieces = [select(concatenate(list(pieces)), slice(count - self.capacity, count))]
            count = self.capacity
        start = self.cursor
        for piece in pieces:
            self._write_columns(start, piece)
            self.frames.write(start, piece.frames)
            start = (start + len(piece.frames)) % self.capacity
        if self.priorities is not None:  # the largest seen; 0 for a row never to be drawn
            slots = (self.cursor + np.arange(count)) % self.capacity
            self.priorities.set(slots, np.where(self.columns.sampleable[slots],
                                                self.priorities.max_seen, 0.0))
        self._advance(count)

    def _write_columns(self, start: int, transitions: Transitions) -> None:
        """Writes every column but the frames from slot `start` on, around the end of the
        ring."""
        count = len(transitions.frames)
        first = min(count, self.capacity - start)
        for ring, rows in ((slice(start, start + first), slice(0, first)),
                           (slice(0, count - first), slice(first, count))):
            for name, stored, column in zip(Transitions._fields, self.columns, transitions):
                if name != "frames":
                    stored[ring] = column[rows]
            self.columns.rewards[ring] = clip_reward(transitions.rewards[rows])
            self.columns.episode_ends[ring] |= transitions.terminals[rows]

    def _advance(self, count: int) -> None:
        self.cursor = (self.cursor + count) % self.capacity
        self.size = min(self.size + count, self.capacity)

    def _ages(self, slots: np.ndarray) -> np.ndarray:
        """0 for the newest slot, size - 1 for the oldest."""
        return (self.cursor - 1 - slots) % self.capacity

    def _window(self, slots: np.ndarray) -> np.ndarray:
        """(B, n): the slots i .. i + n - 1 of each transition's return."""
        return (slots[:, None] + np.arange(self.n_step)) % self.capacity

    def valid(self, slots: np.ndarray) -> np.ndarray:
        """Whether each slot can be sampled as an n-step transition: its return's slots are
        stored up to their first terminal (without one, the state n steps on too); no
        episode ends among them without a terminal (the cap, or where a flushed piece
        stops); it is `sampleable`; and, once the memory has wrapped, it does not reach back
        into overwritten frames (the oldest HISTORY - 1 slots)."""
        slots = np.asarray(slots)
        ages = self._ages(slots)
        if self.n_step == 1:  # the same rule for one slot, in a few operations (hot path)
            followed = ((ages >= 1) & ~self.columns.episode_ends[slots]
                        | self.columns.terminals[slots])
        else:
            window = self._window(slots)
            terminals = self.columns.terminals[window]
            ends_at = np.where(terminals.any(axis=1), terminals.argmax(axis=1), self.n_step)
            # The slots before the return's last one, or all n without a terminal, continue it.
            crossed = (self.columns.episode_ends[window]
                       & (np.arange(self.n_step) < ends_at[:, None]))
            followed = (ages >= ends_at) & ~crossed.any(axis=1)
        ok = (ages < self.size) & followed & self.columns.sampleable[slots]
        if self.size == self.capacity:
            ok &= ages <= self.capacity - HISTORY
        return ok

    def sample_indices(self, batch_size: int) -> np.ndarray:
        """Valid slots, uniform or in proportion to their priorities, by vectorized
        rejection sampling."""
        indices = self._draw_slots(batch_size)
        for _ in range(_MAX_SAMPLING_ROUNDS):
            invalid = ~self.valid(indices)
            if not invalid.any():
                return indices
            indices[invalid] = self._draw_slots(int(invalid.sum()))
        raise RuntimeError(f"no valid transitions to sample among {self.size} stored")

    def _draw_slots(self, count: int) -> np.ndarray:
        if self.priorities is None:
            return self._rng.integers(0, self.size, size=count)
        return self.priorities.find(self._rng.random(count) * self.priorities.total)

    def many_indices(self, count: int, batch_size: int) -> np.ndarray:
        """The slots of `count` minibatches, minibatch k in rows k * batch_size ...
        (k + 1) * batch_size - 1, drawn one minibatch after another from the same generator,
        so a run's minibatches do not depend on how many are trained per call or where their
        frames are gathered."""
        return np.concatenate([self.sample_indices(batch_size) for _ in range(count)])

    def batch(self, indices: np.ndarray, out: Batch | None = None,
              importance_exponents: np.ndarray | None = None) -> Minibatches:
        """The transitions at explicit (valid) slots, as the frame store gathers them: a
        `Batch` of states on the host (into `out`'s buffers when given), slots on the
        device. With priorities, `importance_exponents` (one per minibatch of the indices)
        give the importance-sampling weights."""
        slots = self.slot_batch(indices, importance_exponents)
        return self.frames.gather(slots, out, self.n_step)

    def slot_batch(self, indices: np.ndarray,
                   importance_exponents: np.ndarray | None = None) -> SlotBatch:
        """The transitions at explicit (valid) slots, their states as frame slots and masks."""
        indices = np.asarray(indices)
        history = (indices[:, None] + np.arange(-(HISTORY - 1), 1)) % self.capacity
        next_slots = (indices + self.n_step) % self.capacity
        returns, discounts = self._returns(indices)
        return SlotBatch(
            state_slots=history.astype(np.int32), state_mask=self._history_mask(indices),
            next_slots=((history + self.n_step) % self.capacity).astype(np.int32),
            next_mask=self._history_mask(next_slots),
            actions=self.columns.actions[indices].astype(np.int32),  # stored as uint8
            returns=returns, discounts=discounts,
            weights=self._weights(indices, importance_exponents))

    def _weights(self, indices: np.ndarray, exponents: np.ndarray | None) -> np.ndarray:
        """Importance-sampling weights (1 / (N P(i)))^beta normalized by each minibatch's
        largest, which is (min p^alpha / p_i^alpha)^beta: N and the sum cancel out."""
        if self.priorities is None or exponents is None:
            return np.ones(len(indices), np.float32)
        exponents = np.asarray(exponents, np.float64)
        drawn = self.priorities.leaves[indices].reshape(len(exponents), -1)
        weights = (drawn.min(axis=1, keepdims=True) / drawn) ** exponents[:, None]
        return weights.reshape(-1).astype(np.float32)

    def _returns(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each transition's n-step return and its bootstrap's discount (0 where a terminal
        ends the return), float32."""
        if self.n_step == 1:  # the stored reward itself, as the 1-step rule reads it
            terminals = self.columns.terminals[indices]
            return (self.columns.rewards[indices],
                    np.where(terminals, np.float32(0), self._discount_n))
        window = self._window(indices)
        terminals = self.columns.terminals[window]
        # a term counts up to the first terminal, that one included
        before_end = np.cumsum(terminals, axis=1) - terminals == 0
        returns = (self.columns.rewards[window] * self._term_discounts * before_end).sum(axis=1)
        discounts = np.where(terminals.any(axis=1), np.float32(0), self._discount_n)
        return returns.astype(np.float32), discounts

    def _history_mask(self, newest: np.ndarray) -> np.ndarray:
        """(B, HISTORY): which frames of the state ending at `newest` are real: no episode
        ended in slots newest - k .. newest - 1, and not older than the oldest stored."""
        back = np.arange(1, HISTORY)
        older = (newest[:, None] - back) % self.capacity
        ended = np.logical_or.accumulate(self.columns.episode_ends[older], axis=1)
        too_old = self._ages(newest)[:, None] + back > self.size - 1
        real_back = ~(ended | np.logical_or.accumulate(too_old, axis=1))
        mask = np.ones((len(newest), HISTORY), dtype=np.uint8)
        mask[:, :-1] = real_back[:, ::-1]
        return mask

    def close_open_episode(self) -> None:
        """Ends the newest episode where it stands, unsampled (a resumed run starts fresh
        episodes, which must not reach back into it); with priorities, at priority 0, as
        `add_in_order` gives rows never to be drawn."""
        if self.size == 0:
            return
        newest = (self.cursor - 1) % self.capacity
        if not self.columns.episode_ends[newest]:
            self.columns.episode_ends[newest] = True
            self.columns.sampleable[newest] = False
            if self.priorities is not None:
                self.priorities.set(np.array([newest]), np.zeros(1))

    def state_dict(self) -> dict[str, Any]:
        """Arrays that restore this memory exactly (no pickles), the frames as their store
        saves them; only the filled slots (views), so an early checkpoint does not write
        gigabytes of empty ones."""
        state = select(self.columns, slice(0, self.size))._asdict()
        state["frames"] = self.frames.saved_rows(self.size)
        if self.priorities is not None:
            state["priorities"] = self.priorities.leaves[:self.size]
        state.update(cursor=np.array(self.cursor), size=np.array(self.size),
                     capacity=np.array(self.capacity))
        return state

    def restore_targets(self) -> dict[str, Any]:
        """Where a checkpoint's columns are read to, by name: the memory's own arrays,
        filled in place, and the frame store's target (`FrameStore.restore_target`). The
        reader then calls `set_extent`."""
        targets: dict[str, Any] = self.columns._asdict()
        targets["frames"] = self.frames.restore_target()
        if self.priorities is not None:
            targets["priorities"] = self.priorities.leaves
        return targets

    def generator_state(self) -> dict[str, Any]:
        """The state of the generator that draws the minibatches (JSON-able)."""
        return self._rng.bit_generator.state

    def restore_generator(self, state: Mapping[str, Any]) -> None:
        """Sets the generator back to a `generator_state()` (a checkpoint's, read by
        `state_fields.generator_state`; or one taken before draws that are taken back)."""
        self._rng.bit_generator.state = dict(state)

    def set_extent(self, cursor: int, size: int) -> None:
        """Where the next transition goes and how many slots are filled (after a restore)."""
        if not (0 <= size <= self.capacity and 0 <= cursor < self.capacity):
            raise ValueError(f"replay cursor {cursor} and size {size} do not fit capacity "
                             f"{self.capacity}")
        self.cursor = cursor
        self.size = size
        if self.priorities is not None:
            self.priorities.sum_up()  # the leaves were read in place

    def check_valid(self) -> None:
        """Raises ValueError, naming the broken rule, unless the memory keeps its invariants
        (after a restore and in the tests: it reads every slot)."""
        store = self.columns
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


def make_replay_memory(config: Config, rng: np.random.Generator,
                       frames: FrameStore | None = None) -> ReplayMemory:
    """The run's replay memory as `config` describes it: its capacity, and the discount,
    the n of the returns and the priorities its minibatches are drawn with."""
    return ReplayMemory(config.replay_capacity, rng, frames, discount=config.discount,
                        n_step=config.n_step, prioritized=config.prioritized)


class Priorities:
    """Each slot's p^alpha in a sum tree: proportional draws in O(log N) per transition.

        tree[1] = sum of all;  tree[k] = tree[2k] + tree[2k + 1];  leaves tree[L + slot]

    Each sum is recomputed from its two children, so the tree is a function of its leaves:
    one restored from saved leaves is the same bit for bit. `max_seen` (1 at first, as
    dqn_zoo's) is the largest p written, which new transitions get. Thread use: the main
    thread sets new slots' priorities at sync points; during an epoch only the learner
    thread does, and it draws the next call only after writing the last call's (Schaul et
    al.'s order), so a run does not depend on timing.
    """

    def __init__(self, capacity: int):
        self._first_leaf = 1 << max(0, (capacity - 1).bit_length())
        self.tree = np.zeros(2 * self._first_leaf)
        self.leaves = self.tree[self._first_leaf:self._first_leaf + capacity]  # a view
        self.max_seen = 1.0

    @property
    def total(self) -> float:
        return float(self.tree[1])

    def set(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        """Sets the slots' priorities p (stored as p^alpha) and the sums above them."""
        self.leaves[slots] = np.asarray(priorities, np.float64) ** PRIORITY_EXPONENT
        nodes = np.unique((np.asarray(slots) + self._first_leaf) // 2)
        while len(nodes) and nodes[-1] >= 1:
            self.tree[nodes] = self.tree[2 * nodes] + self.tree[2 * nodes + 1]
            nodes = np.unique(nodes[nodes > 1] // 2)

    def sum_up(self) -> None:
        """Every sum from the leaves (after the leaves were read from a checkpoint)."""
        level = self._first_leaf
        while level > 1:
            self.tree[level // 2:level] = self.tree[level:2 * level:2] + self.tree[level + 1:2 * level:2]
            level //= 2

    def find(self, targets: np.ndarray) -> np.ndarray:
        """The slot whose leaf holds each target in [0, total): a walk down from the root."""
        nodes = np.ones(len(targets), np.int64)
        targets = np.array(targets, np.float64)
        while nodes[0] < self._first_leaf:
            left = self.tree[2 * nodes]
            right = targets >= left
            targets -= np.where(right, left, 0.0)
            nodes = 2 * nodes + right
        return np.minimum(nodes - self._first_leaf, len(self.leaves) - 1)

    def write_back(self, slots: np.ndarray, td_errors: np.ndarray) -> None:
        """The priorities |TD error| + epsilon of the transitions just trained on."""
        priorities = np.abs(np.asarray(td_errors, np.float64)) + PRIORITY_EPSILON
        self.max_seen = max(self.max_seen, float(priorities.max()))
        self.set(slots, priorities)


class MinibatchDraws:
    """Draws a memory's minibatches K at a time into one of two reused buffers (the learner
    thread draws the next call while it trains on this one), and takes draws back.

    Draws taken back (a call drawn but never trained on: an abandoned epoch) leave the
    generator where they began, so a checkpoint holds the state of the updates made and a
    resumed run draws those minibatches for its next updates. Thread use: `draw` and `undo`
    on one buffer never overlap another call on the same buffer.
    """

    def __init__(self, memory: ReplayMemory, batch_size: int, updates_per_call: int = 1,
                 importance_exponent: Callable[[int], float] | None = None):
        self.memory = memory
        self.batch_size = batch_size
        self.updates_per_call = updates_per_call
        # With priorities: the next call is drawn only once the last one's are written back.
        self.drawn_ahead = memory.priorities is None
        self._importance_exponent = importance_exponent  # of the n-th update, from 0
        rows = batch_size * updates_per_call
        self._buffers = (memory.frames.minibatch_buffers(rows),
                         memory.frames.minibatch_buffers(rows))
        self._drawn_from: list[dict | None] = [None, None]  # the generator before each draw
        self._slots: list[np.ndarray | None] = [None, None]  # each buffer's slots

    def draw(self, count: int, buffer: int, first_update: int = 0) -> Minibatches:
        """`count` minibatches for updates first_update, first_update + 1, ..., as the
        memory's frame store makes them (into buffer 0 or 1, where it gathers into
        buffers)."""
        self._drawn_from[buffer] = self.memory.generator_state()
        slots = self.memory.many_indices(count, self.batch_size)
        exponents = None
        if self.memory.priorities is not None:
            self._slots[buffer] = slots  # for `write_back`
            if self._importance_exponent is not None:
                exponents = np.array([self._importance_exponent(first_update + k)
                                      for k in range(count)])
        return self.memory.batch(slots, self._buffers[buffer], exponents)

    def write_back(self, buffer: int, td_errors: Any) -> None:
        """The priorities of the transitions in `buffer` from the TD errors of their updates
        (a tensor; reading it waits for them); nothing without priorities."""
        if self.memory.priorities is not None:
            self.memory.priorities.write_back(self._slots[buffer], np.asarray(td_errors))

    def undo(self, buffer: int) -> None:
        """Takes back the draws of the minibatches in `buffer`."""
        state = self._drawn_from[buffer]
        if state is not None:
            self.memory.restore_generator(state)
            self._drawn_from[buffer] = None
