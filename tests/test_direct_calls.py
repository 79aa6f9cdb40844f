"""The hot calls run their traces directly (fast_dqn/direct_calls.py): the same results as
TensorFlow's ordinary call of the same `tf.function`, bit for bit, and on the pinned
TensorFlow the direct path is the one taken."""

from __future__ import annotations

import numpy as np
import pytest

import tensorflow as tf

from fast_dqn.config import Config
from fast_dqn.acting import FrameHistory
from fast_dqn.direct_calls import DirectCall, borrowed_tensor
from fast_dqn.learner import make_learner
from fast_dqn.device_frames import DeviceFrames
from fast_dqn.transitions import SlotBatch
from tests.fakes import N_ACTIONS, random_batch

pytestmark = pytest.mark.usefixtures("cpu_device")  # deterministic ops, as in a run


def scaled_sum_function():
    """A function of a variable argument and a tensor that also writes a captured variable."""
    total = tf.Variable(0.0)

    @tf.function
    def scaled_sum(frames, scale):
        total.assign_add(tf.reduce_sum(tf.cast(frames, tf.float32)) * scale)
        return total.read_value(), tf.shape(frames)[0]

    return scaled_sum, total


@pytest.mark.parametrize("direct", [True, False])
def test_a_direct_call_returns_what_the_ordinary_call_returns(direct):
    function, total = scaled_sum_function()
    frames = tf.Variable(np.arange(12, dtype=np.uint8).reshape(3, 4))
    call = DirectCall(function, tf.TensorSpec((), tf.float32), variables=(frames,))
    assert call.direct  # TensorFlow as pinned in requirements.txt
    if not direct:
        call._atomic = None  # the fallback a TensorFlow without the direct path takes
    outputs = call(tf.constant(0.5))
    assert [value.numpy() for value in outputs] == [0.5 * sum(range(12)), 3]
    ordinary = function(frames, tf.constant(0.5))
    assert [value.numpy() for value in ordinary] == [2 * 0.5 * sum(range(12)), 3]
    assert total.numpy() == 66.0


def assert_same_networks(a, b) -> None:
    for x, y in zip(a.online.variables + a.optimizer.variables + a.target.variables,
                    b.online.variables + b.optimizer.variables + b.target.variables):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=x.name)


@pytest.mark.parametrize("xla", ["on", "off"])
def test_the_networks_calls_equal_the_ordinary_calls_bit_for_bit(xla):
    """Updates with host minibatches (one and K per call) and the target query, against the
    same tf.functions called the ordinary way on a twin network."""
    rng = np.random.default_rng(0)
    config = Config(xla=xla, seed=4)
    direct, ordinary = make_learner(config, N_ACTIONS), make_learner(config, N_ACTIONS)
    one, many = random_batch(rng, 32), random_batch(rng, 3 * 32)
    direct.update(one, 1)
    ordinary._update_fn(*(tf.constant(array) for array in one))
    direct.update(many, 3)
    if xla == "on":  # with XLA, one call of K updates gives the floats of K compiled calls
        for k in range(3):
            ordinary._update_fn(*(tf.constant(array[32 * k:32 * (k + 1)]) for array in many))
    else:
        ordinary._update_many_fn(*(tf.constant(array.reshape(3, 32, *array.shape[1:]))
                                   for array in many))
    assert_same_networks(direct, ordinary)
    states = random_batch(rng, 16).states
    np.testing.assert_array_equal(
        direct.greedy_actions(states, use_target=True),
        ordinary._greedy_fns[True](tf.constant(states)).numpy())
    assert direct.take_train_stats(3) == ordinary.take_train_stats(3)
    assert all(call.direct for call in direct.direct_calls.calls.values())


def test_updates_from_device_slots_equal_the_ordinary_calls_bit_for_bit():
    rng = np.random.default_rng(1)
    frames = DeviceFrames(64)
    frames.put_rows(0, rng.integers(0, 256, (64, 84, 84), dtype=np.uint8))
    slots = rng.integers(0, 64, (4 * 32, 4)).astype(np.int32)
    mask = (rng.random((4 * 32, 4)) < 0.8).astype(np.uint8)
    minibatches = SlotBatch(state_slots=slots, state_mask=mask, next_slots=(slots + 1) % 64,
                            next_mask=mask,
                            actions=rng.integers(0, N_ACTIONS, 4 * 32).astype(np.int32),
                            returns=rng.normal(size=4 * 32).astype(np.float32),
                            discounts=np.where(rng.random(4 * 32) < 0.1, 0.0, 0.99
                                               ).astype(np.float32),
                            weights=np.ones(4 * 32, np.float32))
    config = Config(xla="off", seed=4)
    direct = make_learner(config, N_ACTIONS, frames.variable)
    ordinary = make_learner(config, N_ACTIONS)
    direct.update(minibatches, 4)
    ordinary._update_many_slots_fn(frames.variable, *(
        tf.constant(column.reshape(4, 32, *column.shape[1:])) for column in minibatches))
    assert_same_networks(direct, ordinary)
    assert all(call.direct for call in direct.direct_calls.calls.values())


def at_offset(array: np.ndarray, offset: int) -> np.ndarray:
    """A copy of `array` whose memory starts `offset` bytes past a 64-byte boundary."""
    raw = np.empty(array.nbytes + 128, np.uint8)
    start = -raw.ctypes.data % 64 + offset
    copy = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    copy[...] = array
    return copy


def test_a_borrowed_tensor_reads_an_aligned_array_in_place():
    states = at_offset(np.arange(2 * 4 * 84 * 84, dtype=np.uint64).astype(np.uint8)
                       .reshape(2, 4, 84, 84), 0)
    tensor = borrowed_tensor(states)
    states[1, 3, 83, 83] = 200  # seen by the tensor: no copy was made
    assert tensor.numpy()[1, 3, 83, 83] == 200
    np.testing.assert_array_equal(tensor.numpy(), states)


@pytest.fixture(scope="module")
def query_network():
    """`query_network(xla)`: one network per XLA setting for the tests that only query it
    (a query changes no weight), built on first use."""
    networks = {}

    def network(xla: str):
        if xla not in networks:
            networks[xla] = make_learner(Config(xla=xla, seed=5), N_ACTIONS)
        return networks[xla]

    return network


@pytest.mark.parametrize("offset", [1, 16, 32])
@pytest.mark.parametrize("xla", ["on", "off"])
def test_queries_of_states_tensorflow_cannot_borrow_are_answered_from_a_copy(query_network,
                                                                             offset, xla):
    """TensorFlow's kernels abort the process on memory not aligned to 64 bytes (an
    array 16 bytes past a boundary did), so such states, and read-only ones, are copied."""
    rng = np.random.default_rng(2)
    network = query_network(xla)
    states = rng.integers(0, 256, (16, 4, 84, 84), dtype=np.uint8)
    expected = {use_target: network._greedy_fns[use_target](tf.constant(states)).numpy()
                for use_target in (True, False)}
    misaligned = at_offset(states, offset)
    read_only = at_offset(states, 0)
    read_only.flags.writeable = False
    for array in (misaligned, read_only):
        for use_target in (True, False):
            np.testing.assert_array_equal(network.greedy_actions(array, use_target),
                                          expected[use_target])
    copied = borrowed_tensor(misaligned)
    misaligned[0, 0, 0, 0] ^= 1
    assert copied.numpy()[0, 0, 0, 0] == states[0, 0, 0, 0]


def test_the_actors_frame_stacks_are_lent_to_the_query_without_a_copy():
    history = FrameHistory(16)
    assert history.states.ctypes.data % 64 == 0
    tensor = borrowed_tensor(history.states)
    history.shift()
    history.put_newest(np.full((16, 84, 84), 9, np.uint8), np.zeros(16, bool))
    assert tensor.numpy()[:, -1].min() == 9
