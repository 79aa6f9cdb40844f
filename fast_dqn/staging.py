"""One epoch's transitions on their way into the replay memory (FastDQN's flush).

During an epoch the acting loop stages each round's W transitions (`StagingArea`); at the
sync point each sampler's column goes to its `SamplerBuffer`, and the buffers are flushed
into the memory one after another, in sampler order, so the memory's contents do not depend
on thread timing (docs/design.md §3, "Pieces at a flush").
"""

from __future__ import annotations

from fast_dqn.config import HISTORY
from fast_dqn.replay_memory import Transitions, select, zero_transitions


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
        self._chunks: list[Transitions] = []
        self._context: Transitions | None = None  # the rows before the carried one
        # `take` joins into these, reused: a fresh multi-megabyte array per sync point
        # is mapped page by page again each time (half the flush's time in the benchmark).
        self._joined: Transitions | None = None

    def __len__(self) -> int:
        return sum(len(chunk.frames) for chunk in self._chunks)

    def extend(self, transitions: Transitions) -> None:
        """Appends transitions in time order. They are kept as given, not copied (a flush
        moves 70 MB): the caller's arrays must not change until `take` has copied them."""
        if len(transitions.frames):
            self._chunks.append(transitions)

    def take(self) -> Transitions | None:
        """Removes everything buffered and returns it ready for `ReplayMemory.add_many`, or
        None if empty. The rows are valid until the next `take`."""
        if not self._chunks:
            return None
        pieces = self._chunks if self._context is None else [self._context, *self._chunks]
        rows = self._join(pieces)
        rows.episode_ends[:] |= rows.terminals
        self._chunks = []
        self._context = None
        if not rows.episode_ends[-1]:
            self._carry_unfinished(rows)
        return rows

    def _join(self, pieces: list[Transitions]) -> Transitions:
        """The pieces one after another, in the reused arrays (grown when too short)."""
        count = sum(len(piece.frames) for piece in pieces)
        if self._joined is None or len(self._joined.frames) < count:
            self._joined = zero_transitions(count)
        rows = select(self._joined, slice(0, count))
        start = 0
        for piece in pieces:
            stop = start + len(piece.frames)
            for joined, column in zip(rows, piece):
                joined[start:stop] = column
            start = stop
        return rows

    def _carry_unfinished(self, rows: Transitions) -> None:
        """Keeps the unfinished episode's last transition (and its context) for next time,
        and marks it in `rows` as an unsampleable end."""
        last = len(rows.frames) - 1
        start = max(0, last - (HISTORY - 1))
        self._context = Transitions(*(column[start:last].copy() for column in rows))
        self._context.sampleable[:] = False
        self._chunks = [Transitions(*(column[last:].copy() for column in rows))]
        rows.episode_ends[last] = True  # a stop for states reaching back, no next frame
        rows.sampleable[last] = False


class StagingArea:
    """Preallocated (rounds, W) columns for one epoch's transitions, before the sync point
    hands each sampler's column to its `SamplerBuffer`."""

    def __init__(self, rounds: int, num_envs: int):
        self._rows = zero_transitions(rounds, num_envs)
        for column in self._rows:
            column.fill(0)  # its pages mapped now, not one by one in the first epoch's rounds
        self.count = 0

    def clear(self) -> None:
        self.count = 0

    def append(self, transitions: Transitions) -> None:
        for column, values in zip(self._rows, transitions):
            column[self.count] = values
        self.count += 1

    def transitions(self) -> Transitions:
        return select(self._rows, slice(0, self.count))
