"""Tests of fast_dqn.replay_memory: index arithmetic, padding, wrap-around and sampling (the
fast scheme's sampler buffers and flushes are tested in test_staging.py, with this file's
naive reference).

Table-driven cases name every stored frame by an id (a frame filled with that value, 0 being
padding), so an expected state reads as a list of ids, oldest first. The randomized cases
compare the memory against a naive reference that keeps whole states.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytest

from fast_dqn.config import HISTORY
from fast_dqn.launch import check_memory_for
from fast_dqn.replay_memory import ReplayMemory, clip_reward
from fast_dqn.staging import SamplerStaging
from fast_dqn.transitions import (BYTES_PER_TRANSITION, FRAME_SHAPE, acted_transitions,
                                  zero_transitions)
from tests.fakes import (actor_states, expected_valid, fill_memory, id_frame, ids_of, naive_transitions,
                         random_stream)

# ------------------------------------------------------------------------------- helpers


def add_one(memory: ReplayMemory, frame: np.ndarray, action: int, reward: float,
            terminal: bool, episode_end: bool) -> None:
    """Stores one transition as a round of one environment stores it (raw reward)."""
    memory.add_many(acted_transitions(frame[None], np.array([action]), np.array([reward]),
                                      np.array([terminal]), np.array([episode_end])))


def state_at(memory: ReplayMemory, slot: int) -> np.ndarray:
    """The state whose newest frame is in `slot`, as a minibatch would hold it."""
    return memory.batch(np.array([slot])).states[0]


def parse_steps(spec: str) -> list[tuple[int, bool, bool]]:
    """'1 2 3T 4X' -> [(id, terminal, truncated)]: T ends with a terminal, X cuts off."""
    steps = []
    for token in spec.split():
        steps.append((int(token.rstrip("TX")), token.endswith("T"), token.endswith("X")))
    return steps


def memory_from(spec: str, capacity: int, seed: int = 0) -> ReplayMemory:
    """Adds the transitions of `spec` in order; transition k (1-based id) goes to slot k - 1."""
    memory = ReplayMemory(capacity, np.random.default_rng(seed))
    for frame_id, terminal, truncated in parse_steps(spec):
        add_one(memory, id_frame(frame_id), action=frame_id % 3, reward=float(frame_id),
                terminal=terminal, episode_end=truncated)
    return memory


def slot_of(frame_id: int, capacity: int) -> int:
    return (frame_id - 1) % capacity


def valid_ids(memory: ReplayMemory) -> set[int]:
    slots = np.flatnonzero(memory.valid(np.arange(memory.capacity)))
    return {int(memory.frames.array[slot, 0, 0]) for slot in slots}


# ------------------------------------------------------------------- table-driven cases


class Case(NamedTuple):
    steps: str  # see parse_steps
    capacity: int
    valid: set[int]  # ids of the sampleable transitions
    states: dict[int, list[int]]  # id -> the state's frame ids, oldest first
    next_states: dict[int, list[int]]  # id -> next state's frame ids (valid, non-terminal)


CASES = {
    # cursor at 1: one transition, nothing comes after it
    "one non-terminal step": Case("1", 8, set(), {1: [0, 0, 0, 1]}, {}),
    # a terminal newest slot needs no next frame
    "one terminal step": Case("1T", 8, {1}, {1: [0, 0, 0, 1]}, {}),
    "newest slot not sampleable": Case("1 2 3", 8, {1, 2}, {3: [0, 1, 2, 3]},
                                       {2: [0, 1, 2, 3]}),
    "newest slot terminal is sampleable": Case("1 2 3T", 8, {1, 2, 3}, {3: [0, 1, 2, 3]}, {}),
    # cursor at capacity - 1
    "cursor at capacity - 1": Case(
        "1 2 3 4 5 6 7", 8, {1, 2, 3, 4, 5, 6},
        {1: [0, 0, 0, 1], 4: [1, 2, 3, 4], 6: [3, 4, 5, 6], 7: [4, 5, 6, 7]},
        {1: [0, 0, 1, 2], 6: [4, 5, 6, 7]}),
    # full, cursor back at 0: the oldest HISTORY - 1 slots (ids 1-3) are not sampleable
    "full, cursor at 0": Case("1 2 3 4 5 6 7 8", 8, {4, 5, 6, 7},
                              {4: [1, 2, 3, 4], 7: [4, 5, 6, 7]}, {7: [5, 6, 7, 8]}),
    # wrapped: ids 9, 10 overwrote 1, 2 in slots 0, 1; cursor at 2 (id 3, the oldest)
    "wrap-around": Case(
        "1 2 3 4 5 6 7 8 9 10", 8, {6, 7, 8, 9},
        {9: [6, 7, 8, 9], 10: [7, 8, 9, 10], 6: [3, 4, 5, 6],
         # no state reaches back across the cursor into the newest frames
         3: [0, 0, 0, 3], 4: [0, 0, 3, 4], 5: [0, 3, 4, 5]},
        {9: [7, 8, 9, 10], 6: [4, 5, 6, 7]}),
    "wrap-around, terminal newest": Case("1 2 3 4 5 6 7 8 9 10T", 8, {6, 7, 8, 9, 10},
                                         {10: [7, 8, 9, 10]}, {}),
    # capacity 5 holds ids 16-20; only age 1 (id 19) has its whole state and a next frame
    "wrap-around twice": Case(" ".join(str(i) for i in range(1, 21)), 5, {19},
                              {19: [16, 17, 18, 19], 18: [0, 16, 17, 18], 16: [0, 0, 0, 16]},
                              {19: [17, 18, 19, 20]}),
    # episode starts: frames before the start are zero
    "episode start after a terminal": Case(
        "1 2T 3 4 5", 8, {1, 2, 3, 4},
        {2: [0, 0, 1, 2], 3: [0, 0, 0, 3], 4: [0, 0, 3, 4], 5: [0, 3, 4, 5]},
        {1: [0, 0, 1, 2], 3: [0, 0, 3, 4], 4: [0, 3, 4, 5]}),
    "terminal inside the stack": Case(
        "1 2 3T 4 5 6 7", 8, {1, 2, 3, 4, 5, 6},
        {4: [0, 0, 0, 4], 5: [0, 0, 4, 5], 6: [0, 4, 5, 6], 7: [4, 5, 6, 7]},
        {4: [0, 0, 4, 5], 6: [4, 5, 6, 7]}),
    "two short episodes in one stack": Case(
        "1T 2T 3 4", 8, {1, 2, 3},
        {1: [0, 0, 0, 1], 2: [0, 0, 0, 2], 3: [0, 0, 0, 3], 4: [0, 0, 3, 4]},
        {3: [0, 0, 3, 4]}),
    # truncation: an episode end without terminal has no next state
    "truncated episode end": Case(
        "1 2 3X 4 5", 8, {1, 2, 4},
        {3: [0, 1, 2, 3], 4: [0, 0, 0, 4], 5: [0, 0, 4, 5]},
        {2: [0, 1, 2, 3], 4: [0, 0, 4, 5]}),
    "truncated newest slot": Case("1 2X", 8, {1}, {2: [0, 0, 1, 2]}, {1: [0, 0, 1, 2]}),
    # wrapped: ids 4-11 stored; the terminal 5 and the episode start 6 are among the oldest
    # slots (not sampleable), yet later states keep the padding of that start
    "episode start near the oldest slots": Case(
        "1 2 3 4 5T 6 7 8 9 10 11", 8, {7, 8, 9, 10},
        {4: [0, 0, 0, 4], 6: [0, 0, 0, 6], 7: [0, 0, 6, 7], 9: [6, 7, 8, 9],
         11: [8, 9, 10, 11]},
        {7: [0, 6, 7, 8], 10: [8, 9, 10, 11]}),
    "minimum capacity": Case("1 2 3 4 5 6", HISTORY + 1, {5},
                             {5: [2, 3, 4, 5], 4: [0, 2, 3, 4], 2: [0, 0, 0, 2]},
                             {5: [3, 4, 5, 6]}),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_valid_slots(case: Case):
    memory = memory_from(case.steps, case.capacity)
    assert valid_ids(memory) == case.valid


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_rebuilt_states(case: Case):
    memory = memory_from(case.steps, case.capacity)
    for frame_id, expected in case.states.items():
        slot = slot_of(frame_id, case.capacity)
        assert memory.frames.array[slot, 0, 0] == frame_id, "table names an overwritten id"
        assert ids_of(state_at(memory, slot)) == expected, f"state of id {frame_id}"
        if frame_id in case.valid:
            batch = memory.batch(np.array([slot]))
            assert ids_of(batch.states[0]) == expected, f"batch state of id {frame_id}"


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_rebuilt_next_states(case: Case):
    memory = memory_from(case.steps, case.capacity)
    for frame_id, expected in case.next_states.items():
        assert frame_id in case.valid
        batch = memory.batch(np.array([slot_of(frame_id, case.capacity)]))
        assert batch.discounts[0] > 0  # bootstraps from the next state
        assert ids_of(batch.next_states[0]) == expected, f"next state of id {frame_id}"


@pytest.mark.parametrize("count, cursor, size", [(0, 0, 0), (1, 1, 1), (7, 7, 7), (8, 0, 8),
                                                 (9, 1, 8), (15, 7, 8), (16, 0, 8)])
def test_cursor_and_size(count, cursor, size):
    memory = memory_from(" ".join(str(i) for i in range(1, count + 1)), 8)
    assert (memory.cursor, memory.size, len(memory)) == (cursor, size, size)


def test_add_many_matches_add_across_the_wrap_point():
    spec = "1 2 3T 4 5 6X 7 8 9 10 11 12T 13"
    one_by_one = memory_from(spec, 8)
    steps = parse_steps(spec)
    in_pieces = ReplayMemory(8, np.random.default_rng(0))
    for piece in (steps[:1], steps[1:7], steps[7:]):  # the last piece wraps
        in_pieces.add_many(acted_transitions(np.stack([id_frame(i) for i, _, _ in piece]),
                           np.array([i % 3 for i, _, _ in piece]),
                           np.array([float(i) for i, _, _ in piece]),
                           np.array([t for _, t, _ in piece]), np.array([x for _, _, x in piece])))
    for name, array in one_by_one.state_dict().items():
        np.testing.assert_array_equal(in_pieces.state_dict()[name], array, err_msg=name)


def test_add_many_longer_than_capacity_keeps_the_newest():
    memory = ReplayMemory(6, np.random.default_rng(0))
    ids = np.arange(1, 15)
    memory.add_many(acted_transitions(np.stack([id_frame(i) for i in ids]), ids % 3, np.zeros(14),
                    np.zeros(14, bool), np.zeros(14, bool)))
    assert memory.size == 6
    assert valid_ids(memory) == {12, 13}
    assert memory.cursor == 0
    assert ids_of(state_at(memory, 4)) == [10, 11, 12, 13]


# ------------------------------------------------------------------ explicit indices


def test_batch_at_explicit_indices_in_the_given_order():
    memory = memory_from("1 2 3T 4 5 6 7", 8)
    indices = np.array([slot_of(5, 8), slot_of(2, 8), slot_of(5, 8), slot_of(3, 8)])
    batch = memory.batch(indices)
    assert [ids_of(s) for s in batch.states] == [
        [0, 0, 4, 5], [0, 0, 1, 2], [0, 0, 4, 5], [0, 1, 2, 3]]
    assert batch.actions.tolist() == [5 % 3, 2 % 3, 5 % 3, 3 % 3]
    assert batch.returns.tolist() == [1.0, 1.0, 1.0, 1.0]
    assert batch.discounts.tolist() == [np.float32(0.99)] * 3 + [0.0]  # 3T is terminal
    assert batch.weights.tolist() == [1.0] * 4
    assert ids_of(batch.next_states[1]) == [0, 1, 2, 3]


# ---------------------------------------------------------------------------- rewards


@pytest.mark.parametrize("raw, clipped", [(-7.5, -1.0), (-0.01, -1.0), (0.0, 0.0), (0.2, 1.0),
                                          (1.0, 1.0), (400.0, 1.0)])
def test_rewards_are_clipped_to_their_sign(raw, clipped):
    assert clip_reward(raw) == clipped
    memory = ReplayMemory(8, np.random.default_rng(0))
    add_one(memory, id_frame(1), 0, raw, terminal=True, episode_end=True)
    memory.add_many(acted_transitions(id_frame(2)[None], np.array([1]), np.array([raw]),
                                      np.array([True]), np.array([True])))
    assert memory.columns.rewards[:2].tolist() == [clipped, clipped]
    assert memory.batch(np.array([0, 1])).returns.tolist() == [clipped, clipped]
    assert memory.columns.rewards.dtype == np.float32


# ------------------------------------------------------------------- state_dict round trip


def filled_memory(capacity: int, transitions: int, seed: int) -> ReplayMemory:
    stream = random_stream(np.random.default_rng(seed), transitions)
    memory = ReplayMemory(capacity, np.random.default_rng(seed))
    for step in stream.steps:
        add_one(memory, step.frame, step.action, step.reward, step.terminal, step.episode_end)
    return memory


def test_state_dict_round_trip():
    original = filled_memory(40, 57, seed=3)  # wrapped, cursor mid-way
    original.columns.sampleable[5] = False  # as a context copy would be
    restored = ReplayMemory(40, np.random.default_rng(99))
    fill_memory(restored, {k: np.copy(v) for k, v in original.state_dict().items()})
    assert (restored.cursor, restored.size) == (original.cursor, original.size) == (17, 40)
    for name, array in original.state_dict().items():
        np.testing.assert_array_equal(restored.state_dict()[name], array, err_msg=name)
    slots = np.arange(40)
    np.testing.assert_array_equal(restored.valid(slots), original.valid(slots))
    indices = np.flatnonzero(original.valid(slots))
    for a, b in zip(original.batch(indices), restored.batch(indices)):
        np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------- naive reference, one actor


@pytest.mark.parametrize("capacity, transitions, seed", [
    (1000, 300, 0),  # no wrap
    (64, 300, 1),  # wraps several times, cursor mid-way
    (50, 300, 2),  # cursor exactly at 0 after wrapping
    (HISTORY + 1, 40, 3),  # the smallest memory
    (37, 37, 4),  # exactly full
])
def test_memory_matches_naive_reference(capacity, transitions, seed):
    stream = random_stream(np.random.default_rng(seed), transitions)
    reference = naive_transitions(stream)
    memory = ReplayMemory(capacity, np.random.default_rng(seed))
    for step in stream.steps:
        add_one(memory, step.frame, step.action, step.reward, step.terminal, step.episode_end)

    slots = np.arange(capacity)
    valid_transitions = {int(t) for t in np.flatnonzero(memory.valid(slots))}
    expected = expected_valid(reference, capacity)
    # slot of transition t is t % capacity
    assert valid_transitions == {t % capacity for t in expected}
    assert expected, "the stream should leave something to sample"
    order = sorted(expected)
    batch = memory.batch(np.array([t % capacity for t in order]))
    for row, t in enumerate(order):
        ref = reference[t]
        np.testing.assert_array_equal(batch.states[row], ref.state, err_msg=f"state {t}")
        assert batch.actions[row] == ref.action
        assert batch.returns[row] == ref.reward
        assert (batch.discounts[row] == 0) == ref.terminal
        if not ref.terminal:
            np.testing.assert_array_equal(batch.next_states[row], ref.next_state,
                                          err_msg=f"next state {t}")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_frame_history_gives_the_states_of_the_reference(seed):
    """The actor's padding rule is the memory's: the FrameHistory states equal the
    reference's, which equal the memory's (test above)."""
    stream = random_stream(np.random.default_rng(seed), 200)
    reference = naive_transitions(stream)
    for t, ((state, after), ref) in enumerate(zip(actor_states(stream), reference)):
        np.testing.assert_array_equal(state, ref.state, err_msg=f"state {t}")
        if not ref.terminal and not ref.truncated:
            np.testing.assert_array_equal(after, ref.next_state, err_msg=f"next state {t}")


# ---------------------------------------------------------------------------- sampling


def test_sampling_is_uniform_over_valid_slots():
    memory = filled_memory(200, 450, seed=5)
    slots = np.arange(200)
    valid = np.flatnonzero(memory.valid(slots))
    assert 100 < len(valid) < 200  # wrapped, with truncations and a newest slot to skip
    draws = 200_000
    indices = memory.sample_indices(draws)
    assert memory.valid(indices).all()
    counts = np.bincount(indices, minlength=200)
    assert counts[~memory.valid(slots)].sum() == 0
    expected = draws / len(valid)
    chi_square = float(((counts[valid] - expected) ** 2 / expected).sum())
    dof = len(valid) - 1
    assert chi_square < dof + 6 * np.sqrt(2 * dof), chi_square  # ~ 6 sigma


def test_sampling_uses_the_injected_rng():
    first = filled_memory(100, 260, seed=7)
    second = ReplayMemory(100, np.random.default_rng(7))
    fill_memory(second, first.state_dict())
    assert first.rng is not second.rng
    for _ in range(5):
        np.testing.assert_array_equal(first.sample_indices(32), second.sample_indices(32))
    other = ReplayMemory(100, np.random.default_rng(8))
    fill_memory(other, first.state_dict())
    assert not np.array_equal(first.sample_indices(32), other.sample_indices(32))


def test_sample_shapes_and_dtypes():
    memory = filled_memory(300, 200, seed=1)
    batch = memory.batch(memory.many_indices(1, 32))
    assert batch.states.shape == batch.next_states.shape == (32, HISTORY, *FRAME_SHAPE)
    assert batch.states.dtype == batch.next_states.dtype == np.uint8
    assert all(column.shape == (32,) for column in batch[2:])
    assert batch.actions.dtype == np.int32
    assert batch.returns.dtype == batch.discounts.dtype == batch.weights.dtype == np.float32


def test_sampling_with_nothing_valid_raises():
    memory = memory_from("1X 2X 3", 8)
    with pytest.raises(RuntimeError, match="no valid transitions"):
        memory.batch(memory.many_indices(1, 4))


# ----------------------------------------------------------------------------- memory cost


def test_a_million_transitions_fit_in_7_2_gb():
    assert BYTES_PER_TRANSITION * 1_000_000 < 7.2e9
    memory = ReplayMemory(10, np.random.default_rng(0))
    per_slot = sum(array.nbytes for array in memory.state_dict().values()
                   if array.ndim and len(array) == 10) / 10
    assert per_slot <= BYTES_PER_TRANSITION


def test_check_memory_refuses_an_absurd_capacity_and_passes_a_small_one():
    with pytest.raises(ValueError, match="--replay-capacity"):
        check_memory_for(10**12)
    check_memory_for(1000)  # 7 MB


def test_capacity_below_one_state_is_rejected():
    with pytest.raises(ValueError, match="at least"):
        ReplayMemory(HISTORY, np.random.default_rng(0))


def test_batch_into_reused_buffers_equals_a_fresh_batch():
    """The trainers reuse one buffer per minibatch (fresh arrays cost page faults)."""
    from fast_dqn.transitions import empty_batch

    rng = np.random.default_rng(3)
    memory = ReplayMemory(64, np.random.default_rng(0))
    count = 150  # wraps around twice
    memory.add_many(acted_transitions(rng.integers(0, 256, (count, 84, 84), dtype=np.uint8),
                    rng.integers(0, 6, count), rng.normal(size=count),
                    rng.random(count) < 0.1, rng.random(count) < 0.15))
    buffer = empty_batch(24)  # more rows than a minibatch: its leading rows are filled
    for _ in range(5):
        indices = memory.sample_indices(16)
        fresh = memory.batch(indices)
        reused = memory.batch(indices, out=buffer)
        for array, buffered in zip(reused, buffer):
            assert len(array) == 16 and np.shares_memory(array, buffered)
        for name in fresh._fields:
            np.testing.assert_array_equal(getattr(fresh, name), getattr(reused, name))
            assert getattr(fresh, name).dtype == getattr(reused, name).dtype


def test_checkpoint_of_a_memory_that_has_not_wrapped_holds_only_its_filled_slots(tmp_path):
    """Regression: an early checkpoint wrote the whole 7 GB capacity of empty slots."""
    from fast_dqn.checkpoints import latest_checkpoint, read_replay_into, save_checkpoint

    rng = np.random.default_rng(5)
    memory = ReplayMemory(100, np.random.default_rng(0))
    memory.add_many(acted_transitions(rng.integers(0, 256, (30, 84, 84), dtype=np.uint8),
                                      rng.integers(0, 6, 30), rng.normal(size=30),
                                      rng.random(30) < 0.2, rng.random(30) < 0.3))
    state = memory.state_dict()
    assert len(state["frames"]) == 30
    save_checkpoint(tmp_path, {"step": 30}, None, state)
    restored = ReplayMemory(100, np.random.default_rng(0))
    assert read_replay_into(latest_checkpoint(tmp_path), restored)
    assert (restored.cursor, restored.size) == (memory.cursor, memory.size)
    np.testing.assert_array_equal(restored.frames.array, memory.frames.array)
    for name in ("actions", "rewards", "terminals", "episode_ends", "sampleable"):
        np.testing.assert_array_equal(getattr(restored.columns, name),
                                      getattr(memory.columns, name))


def test_many_indices_give_the_minibatches_of_as_many_single_draws():
    """K updates per call must see the same minibatches as K single updates."""
    from fast_dqn.transitions import empty_batch

    def filled(seed: int) -> ReplayMemory:
        rng = np.random.default_rng(3)
        memory = ReplayMemory(64, np.random.default_rng(seed))
        count = 150  # wraps around twice; many slots are invalid, so rejections happen
        memory.add_many(acted_transitions(rng.integers(0, 256, (count, 84, 84), dtype=np.uint8),
                        rng.integers(0, 6, count), rng.normal(size=count),
                        rng.random(count) < 0.1, rng.random(count) < 0.3))
        return memory

    one_by_one, at_once = filled(7), filled(7)
    singles = [one_by_one.batch(one_by_one.many_indices(1, 16)) for _ in range(6)]
    stacked = at_once.batch(at_once.many_indices(3, 16), empty_batch(48))
    stacked_again = at_once.batch(at_once.many_indices(3, 16))
    for k, single in enumerate(singles):
        source, row = (stacked, k) if k < 3 else (stacked_again, k - 3)
        for name in single._fields:
            np.testing.assert_array_equal(getattr(source, name)[16 * row:16 * (row + 1)],
                                          getattr(single, name), err_msg=f"{name} {k}")


# ------------------------------------------------------------------------- check_valid


def test_check_valid_accepts_memories_built_by_add_and_by_flushes():
    filled_memory(40, 25, seed=1).check_valid()  # not wrapped
    filled_memory(40, 57, seed=3).check_valid()  # wrapped
    ReplayMemory(8, np.random.default_rng(0)).check_valid()  # empty
    memory = filled_memory(40, 57, seed=3)
    memory.close_open_episode()
    memory.check_valid()
    # a first flush of one round per env: only unfinished pieces, none of them sampleable
    flushed = ReplayMemory(16, np.random.default_rng(0))
    for env in range(4):
        buffer = SamplerStaging()
        buffer.extend(acted_transitions(id_frame(env)[None], np.array([0]), np.zeros(1),
                                        np.zeros(1, bool), np.zeros(1, bool)))
        flushed.add_in_order(buffer.take())
    assert not flushed.valid(np.arange(flushed.size)).any()
    flushed.close_open_episode()
    flushed.check_valid()


@pytest.mark.parametrize("damage, message", [
    (lambda m: setattr(m, "cursor", 3), "cursor 3 is not at the end of the 25 filled slots"),
    (lambda m: m.columns.episode_ends.__setitem__(np.flatnonzero(m.columns.terminals)[0], False),
     "a terminal transition is not an episode end"),
    (lambda m: m.columns.rewards.__setitem__(2, 0.5), "not clipped"),
    (lambda m: m.columns.sampleable.__setitem__(30, True), "an unfilled slot is marked sampleable"),
], ids=["cursor", "terminal", "reward", "unfilled"])
def test_check_valid_names_the_broken_invariant(damage, message):
    memory = filled_memory(40, 25, seed=1)
    assert memory.columns.terminals[:25].any()
    damage(memory)
    with pytest.raises(ValueError, match=message):
        memory.check_valid()


def test_a_transition_costs_the_bytes_of_its_columns():
    # an 84 x 84 uint8 frame, a uint8 action, a float32 reward and three bool flags
    assert BYTES_PER_TRANSITION == 84 * 84 + 1 + 4 + 3


@pytest.mark.parametrize("leading", [(1,), (3,), (5, 4)])
def test_zeroed_transitions_start_their_frames_where_tensorflow_can_borrow_them(leading):
    columns = zero_transitions(*leading)
    assert columns.frames.ctypes.data % 64 == 0
    assert columns.frames.shape == (*leading, 84, 84) and columns.frames.dtype == np.uint8
    for column in columns:
        assert column.shape[:len(leading)] == leading and not column.any()
        assert column.flags.c_contiguous and column.flags.writeable
