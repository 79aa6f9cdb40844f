"""Tests of fast_dqn.staging: an epoch's transitions on their way into the replay memory.

The samplers' buffers are flushed in sampler order at every sync point, with unfinished
episodes carried in pieces; the memory they fill must hold what a naive reference of each
actor's stream holds (the reference and its helpers are test_replay_memory's).
"""

from __future__ import annotations

import numpy as np
import pytest

from fast_dqn.config import HISTORY
from fast_dqn.replay_memory import ReplayMemory
from fast_dqn.staging import SamplerStaging, StagingArea
from fast_dqn.transitions import FRAME_SHAPE, Transitions, acted_transitions, concatenate

from tests.fakes import (Stream, actor_states, id_frame, naive_n_step, naive_transitions,
                         random_frame, random_stream)

DISCOUNT = 0.9


def tagged_frame(rng: np.random.Generator, env: int, obs: int) -> np.ndarray:
    """A random nonzero frame whose first pixels say which env and observation it is."""
    frame = random_frame(rng)
    frame[0, :3] = (env + 1, obs // 256, obs % 256)
    return frame


def tag_of(frame: np.ndarray) -> tuple[int, int]:
    return int(frame[0, 0]) - 1, int(frame[0, 1]) * 256 + int(frame[0, 2])


def sampler_streams(rng: np.random.Generator, num_envs: int, rounds: int) -> list[Stream]:
    """One stream per sampler; transition t of env e has observation t's frame."""
    streams = []
    for env in range(num_envs):
        stream = random_stream(rng, rounds)
        frames = [tagged_frame(rng, env, obs) for obs in range(rounds + 1)]
        steps = [s._replace(frame=frames[t], next_frame=frames[t + 1])
                 for t, s in enumerate(stream.steps)]
        streams.append(Stream(frames[0], steps))
    return streams


def run_samplers(streams: list[Stream], memory: ReplayMemory, sync_rounds: set[int],
                 rng: np.random.Generator) -> None:
    """Feeds W buffers round by round (in random-sized chunks, as an epoch's staging area
    would) and flushes them in sampler order at the sync rounds and at the end."""
    buffers = [SamplerStaging(memory.n_step) for _ in streams]
    rounds = len(streams[0].steps)
    pending = [[] for _ in streams]

    def hand_over(env: int) -> None:
        if pending[env]:
            steps = pending[env]
            buffers[env].extend(acted_transitions(np.stack([s.frame for s in steps]),
                                np.array([s.action for s in steps]),
                                np.array([s.reward for s in steps], np.float32),
                                np.array([s.terminal for s in steps]),
                                np.array([s.episode_end for s in steps])))
            pending[env] = []

    for r in range(rounds):
        for env, stream in enumerate(streams):
            pending[env].append(stream.steps[r])
            if rng.random() < 0.2:
                hand_over(env)
        if r + 1 in sync_rounds or r + 1 == rounds:
            for env, buffer in enumerate(buffers):
                hand_over(env)
                memory.add_in_order(buffer.take())


def check_fast_memory(memory: ReplayMemory, streams: list[Stream], wrapped: bool) -> None:
    references = [naive_transitions(stream) for stream in streams]
    for stream, reference in zip(streams, references):  # the actors saw the same states
        for (state, after), ref in zip(actor_states(stream), reference):
            np.testing.assert_array_equal(state, ref.state)
            if not ref.terminal and not ref.truncated:
                np.testing.assert_array_equal(after, ref.next_state)

    slots = np.flatnonzero(memory.valid(np.arange(memory.capacity)))
    tags = [tag_of(memory.frames.array[slot]) for slot in slots]
    assert len(set(tags)) == len(tags), "a transition is sampleable twice"
    n_step = {env: naive_n_step(reference, memory.n_step, DISCOUNT)
              for env, reference in enumerate(references)}
    expected = {(env, t) for env in n_step for t in n_step[env]}
    if wrapped:
        assert set(tags) <= expected
    else:
        assert set(tags) == expected, "every finished transition is sampleable exactly once"
    batch = memory.batch(slots)
    for row, (env, t) in enumerate(tags):
        ref = references[env][t]
        np.testing.assert_array_equal(batch.states[row], ref.state, err_msg=f"{env}, {t}")
        drawn = n_step[env][t]
        assert batch.actions[row] == ref.action
        assert batch.returns[row] == pytest.approx(drawn.returns, abs=1e-6)  # float32
        assert batch.discounts[row] == pytest.approx(drawn.discount, rel=1e-6)
        if drawn.next_state is not None:
            np.testing.assert_array_equal(batch.next_states[row], drawn.next_state,
                                          err_msg=f"next state {env}, {t}")


@pytest.mark.parametrize("num_envs, rounds, sync_every, seed", [
    (3, 150, (1, 9), 0),  # many short pieces: contexts shorter than HISTORY - 1
    (3, 150, (10, 40), 1),
    (2, 120, (1, 3), 2),  # a piece of one row per sampler now and then
    (4, 100, (25, 26), 3),
    (1, 90, (1, 20), 4),
])
@pytest.mark.parametrize("n", [1, 3])
def test_sampler_buffers_flushed_in_order_match_the_actors(num_envs, rounds, sync_every, seed,
                                                           n):
    """With n-step returns the last n transitions of an unfinished episode wait for the next
    flush; at the end every transition whose n steps were all acted is drawable once."""
    rng = np.random.default_rng(seed)
    streams = sampler_streams(rng, num_envs, rounds)
    syncs, r = set(), 0
    while r < rounds:
        r += int(rng.integers(*sync_every))
        syncs.add(r)
    memory = ReplayMemory(10_000, np.random.default_rng(seed), discount=DISCOUNT, n_step=n)
    run_samplers(streams, memory, syncs, rng)
    check_fast_memory(memory, streams, wrapped=False)
    # context copies (and the first copy of a carried row) are stored but never sampleable
    stored = [tag_of(memory.frames.array[slot]) for slot in range(memory.size)]
    assert len(stored) > len(set(stored)), "expected episodes left unfinished across flushes"
    valid = memory.valid(np.arange(memory.size))
    for tag in set(stored):
        copies = [slot for slot, other in enumerate(stored) if other == tag]
        assert valid[copies].sum() <= 1


@pytest.mark.parametrize("capacity, seed, n", [
    (97, 0, 1), (150, 1, 1), (HISTORY + 1, 2, 1), (40, 3, 1),
    (97, 0, 3), (150, 1, 3), (HISTORY + 3, 2, 3), (40, 3, 3),  # the smallest memory for n
])
def test_sampler_buffers_with_wrap_around(capacity, seed, n):
    rng = np.random.default_rng(seed)
    streams = sampler_streams(rng, 3, 120)
    syncs = set(np.cumsum(rng.integers(1, 15, size=40)).tolist())
    memory = ReplayMemory(capacity, np.random.default_rng(seed), discount=DISCOUNT, n_step=n)
    run_samplers(streams, memory, syncs, rng)
    assert memory.size == capacity
    check_fast_memory(memory, streams, wrapped=True)


@pytest.mark.parametrize("context_rows", [0, 1, 2, 3])
def test_unfinished_episode_is_carried_with_its_context(context_rows):
    """flush k:  | ... a_n [a_n+1: end, not sampled] |  flush k+1: | (context) a_n+1 ... |"""
    buffer = SamplerStaging()
    ids = np.arange(1, context_rows + 2)
    buffer.extend(acted_transitions(np.stack([id_frame(i) for i in ids]), ids, np.zeros(len(ids)),
                  np.zeros(len(ids), bool), np.zeros(len(ids), bool)))
    frames, actions, _, terminals, ends, sampleable = concatenate(buffer.take())
    assert actions.tolist() == ids.tolist()
    assert ends.tolist() == [False] * context_rows + [True]
    assert sampleable.tolist() == [True] * context_rows + [False]
    assert len(buffer) == 1
    buffer.extend(acted_transitions(id_frame(50)[None], np.array([50]), np.zeros(1),
                                    np.array([True]), np.array([True])))
    frames, actions, _, terminals, ends, sampleable = concatenate(buffer.take())
    assert actions.tolist() == ids[-4:].tolist() + [50]
    assert sampleable.tolist() == [False] * min(context_rows, HISTORY - 1) + [True, True]
    assert ends.tolist()[-2:] == [False, True]
    assert buffer.take() == [] and len(buffer) == 0


@pytest.mark.parametrize("rounds, num_envs", [(5, 3), (8, 2), (1, 4)])
def test_staging_hands_each_sampler_its_rows_in_place_and_lendable(rounds, num_envs):
    """The flush stores a sampler's staged rows without copying them first: they must be
    that sampler's transitions in round order, contiguous, with frames TensorFlow can borrow."""
    staging = StagingArea(rounds, num_envs)
    rng = np.random.default_rng(rounds)
    staged = []
    for r in range(rounds - 1):  # one round short of full
        frames = rng.integers(0, 256, (num_envs, *FRAME_SHAPE), dtype=np.uint8)
        row = acted_transitions(frames, rng.integers(0, 6, num_envs),
                                rng.normal(size=num_envs).astype(np.float32),
                                rng.random(num_envs) < 0.3, rng.random(num_envs) < 0.5)
        staging.append(row)
        staged.append(row)
    for env in range(num_envs):
        rows = staging.env_rows(env)
        assert rows.frames.flags.c_contiguous and rows.frames.ctypes.data % 64 == 0
        for name, column in zip(Transitions._fields, rows):
            expected = [getattr(row, name)[env] for row in staged]
            np.testing.assert_array_equal(column, np.array(expected).reshape(column.shape))
    staging.clear()
    assert len(staging.env_rows(0).frames) == 0
