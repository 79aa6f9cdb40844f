"""One epoch's transitions on their way into the replay memory (FastDQN's flush):
staged per round (`StagingArea`), then flushed sampler by sampler (`SamplerStaging`) at the sync
point (docs/design.md §3, "Pieces at a flush")."""

from __future__ import annotations

import math

import numpy as np

from fast_dqn.config import FRAME_SIZE, HISTORY
from fast_dqn.schedule import round_up
from fast_dqn.host_arrays import TENSOR_ALIGNMENT
from fast_dqn.transitions import Transitions, concatenate, select, zero_transitions

# The fewest frames whose bytes end on a TensorFlow-aligned boundary (4 frames of 84 x 84).
_ALIGNED_FRAMES = TENSOR_ALIGNMENT // math.gcd(FRAME_SIZE * FRAME_SIZE, TENSOR_ALIGNMENT)


class SamplerStaging:
    """One sampler's transitions between two sync points, flushed whole at each one.

    Buffers are flushed in sampler order, so the memory's contents do not depend on thread
    timing (brett-daley/fast-dqn's per-sampler buffers). An episode still running at a sync
    point is flushed in pieces without stitching it to its neighbours in the memory:

    - a flushed piece that stops mid-episode ends with the unfinished episode's last
      transitions, at most `carried` (n, the return's steps), marked as not to be sampled
      there, since the steps their returns need are not stored yet, and its last one marked
      as an episode end, which also keeps the next sampler's states from reaching back into
      this piece;
    - the next piece starts with those transitions again, preceded by copies of the
      HISTORY - 1 transitions before them, stored as context that states reach back into
      but that is never sampled itself.

        flush k:      | a1 a2 a3 a4 a5 [a6: end, not sampled] |      (n = 1)
        flush k + 1:  | (a3 a4 a5: context) a6 a7 a8 ...      |
    """

    def __init__(self, carried: int = 1):
        self._carried_count = carried
        self._chunks: list[Transitions] = []
        # The rows carried from the last flush: the context, then the unfinished transition.
        self._carried: Transitions | None = None

    def __len__(self) -> int:
        """The transitions waiting to be stored (a carried one counts, its context not)."""
        carried = 0 if self._carried is None else 1
        return carried + sum(len(chunk.frames) for chunk in self._chunks)

    def extend(self, transitions: Transitions) -> None:
        """Appends transitions in time order, kept as given, not copied; `take` marks their
        episode ends in place, so the caller's arrays must not change until they are stored."""
        if len(transitions.frames):
            self._chunks.append(transitions)

    def take(self) -> list[Transitions]:
        """Removes everything buffered and returns it as pieces in time order, for
        `ReplayMemory.add_in_order`: the rows carried from the last flush, then the
        transitions as extended (empty if nothing is buffered)."""
        if not self._chunks and self._carried is None:
            return []
        pieces = self._chunks if self._carried is None else [self._carried, *self._chunks]
        for piece in pieces:
            piece.episode_ends[:] |= piece.terminals
        self._chunks = []
        self._carried = None
        if not pieces[-1].episode_ends[-1]:
            self._carry_unfinished(pieces)
        return pieces

    def _carry_unfinished(self, pieces: list[Transitions]) -> None:
        """Carries the unfinished episode's last transitions (at most `carried`) and their
        context to the next flush, marked here as not sampled, the last as an end."""
        ends = _last_rows(pieces, self._carried_count).episode_ends
        count = len(ends) - int(np.flatnonzero(ends).max(initial=-1)) - 1  # after the last end
        tail = _last_rows(pieces, HISTORY - 1 + count)
        self._carried = tail
        tail.sampleable[:-count] = False  # the context
        left = count
        for piece in reversed(pieces):  # the carried rows, over the last pieces
            rows = min(left, len(piece.frames))
            piece.sampleable[len(piece.frames) - rows:] = False
            left -= rows
            if left == 0:
                break
        pieces[-1].episode_ends[-1] = True  # a stop for states reaching back, no next frame


def _last_rows(pieces: list[Transitions], count: int) -> Transitions:
    """A copy of the last `count` rows of the pieces taken one after another (fewer if
    they hold fewer)."""
    tail: list[Transitions] = []
    needed = count
    for piece in reversed(pieces):
        rows = select(piece, slice(max(0, len(piece.frames) - needed), None))
        tail.insert(0, rows)
        needed -= len(rows.frames)
        if needed == 0:
            break
    return concatenate(tail)


class StagingArea:
    """Preallocated columns for one epoch's transitions: each sampler's rows contiguous,
    its frames aligned for TensorFlow to read in place, so a flush stores them uncopied."""

    def __init__(self, rounds: int, num_envs: int):
        # Each sampler's frames then start aligned, as its first sampler's do.
        self._rows = zero_transitions(num_envs, round_up(rounds, _ALIGNED_FRAMES))
        for column in self._rows:
            column.fill(0)  # its pages mapped now, not one by one in the first epoch's rounds
        self.count = 0

    def clear(self) -> None:
        self.count = 0

    def append(self, transitions: Transitions) -> None:
        for column, values in zip(self._rows, transitions):
            column[:, self.count] = values
        self.count += 1

    def env_rows(self, env: int) -> Transitions:
        """Env `env`'s transitions staged since the last `clear`, in time order (a view)."""
        return select(self._rows, (env, slice(0, self.count)))
