"""Tests of fast_dqn.learner, fast_dqn.networks and fast_dqn.update_rule on the CPU: the Nature
CNN, the optimizer, the DQN update (against a naive NumPy reference on a hand-made minibatch),
the TD errors an update returns, and the substitutions of the update function and of the
traced calls (the simulated GPU's).
traced calls (the simulated GPU's).

Networks are expensive to build and trace on a 2-core CPU, so a few are shared per module;
a test that trains a network builds its own, so the order of tests never matters.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import numpy as np
import pytest

import tensorflow as tf

from fast_dqn.config import Config  # noqa: E402
from fast_dqn.direct_calls import DirectCall  # noqa: E402
from fast_dqn.learner import Learner, learner_settings, make_learner  # noqa: E402
from fast_dqn.networks import ScaleGradient, build_nature_cnn, dueling_q_values  # noqa: E402
from fast_dqn.simulated_gpu import (SimulatedCalls, SimulatedDevice, SimulatedGpu,  # noqa: E402
                                    make_simulated_learner)
from fast_dqn.transitions import (MINIBATCH_COLUMNS, Batch, SlotBatch,  # noqa: E402
                                  minibatch_columns)
from fast_dqn.update_rule import UpdateStats, dqn_update, huber, td_targets  # noqa: E402
from tests.fakes import (HAND_MADE, N_ACTIONS, ONLINE_W, TARGET_W, FakeClock, LinearQ,
                         hand_made_batch, q_values, random_batch, refusing_xla)

pytestmark = pytest.mark.usefixtures("cpu_device")  # deterministic ops, as in a real run

keras = tf.keras


def network_from(config: Config, n_actions: int = N_ACTIONS, seed: int | None = None) -> Learner:
    """A Learner built the way the entry points build it (fast_dqn.learner.make_learner)."""
    if seed is not None:
        config = config.replace(seed=seed)
    return make_learner(config, n_actions)


def zero_columns(rows: int, *leave_out: str) -> dict[str, np.ndarray]:
    """The MINIBATCH_COLUMNS for `rows` transitions, zero, but for those left out."""
    return {name: value for name, value in minibatch_columns(rows).items()
            if name not in leave_out}


def as_tensors(batch: Batch) -> Batch:
    return Batch(*(tf.constant(column) for column in batch))


def td_errors(network: Learner, batch: Batch) -> np.ndarray:
    """returns + discounts * max Q_target(s') - Q_online(s, a), in NumPy (the discounts are
    0 at terminals)."""
    next_q = q_values(network, batch.next_states, use_target=True).max(axis=1)
    targets = batch.returns + batch.discounts * next_q
    q_taken = q_values(network, batch.states)[np.arange(len(batch.actions)), batch.actions]
    return targets - q_taken


def expected_loss(network: Learner, batch: Batch) -> float:
    errors = np.abs(td_errors(network, batch)).astype(np.float64)
    return float(np.mean(np.where(errors <= 1, 0.5 * errors**2, errors - 0.5)))


@pytest.fixture(scope="module")
def default_network() -> Learner:
    """Built from the Config defaults; tests must not train it."""
    return network_from(Config())


# ------------------------------------------------------------------------ architecture


def test_nature_cnn_layer_shapes(default_network):
    model = default_network.online
    assert model.inputs[0].dtype == "uint8"
    assert tuple(model.inputs[0].shape) == (None, 4, 84, 84)
    convs = [layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D)]
    denses = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)]
    assert [(c.filters, c.kernel_size, c.strides) for c in convs] == [
        (32, (8, 8), (4, 4)), (64, (4, 4), (2, 2)), (64, (3, 3), (1, 1))]
    assert [tuple(c.output.shape) for c in convs] == [
        (None, 20, 20, 32), (None, 9, 9, 64), (None, 7, 7, 64)]
    assert [tuple(d.output.shape) for d in denses] == [(None, 512), (None, N_ACTIONS)]
    assert [layer.activation.__name__ for layer in convs + denses] == ["relu"] * 4 + ["linear"]
    assert all(c.padding == "valid" for c in convs)
    assert model.count_params() == (
        (8 * 8 * 4 * 32 + 32) + (4 * 4 * 32 * 64 + 64) + (3 * 3 * 64 * 64 + 64)
        + (7 * 7 * 64 * 512 + 512) + (512 * N_ACTIONS + N_ACTIONS))


def test_input_is_scaled_by_1_over_255(default_network):
    rescale = [layer for layer in default_network.online.layers
               if isinstance(layer, keras.layers.Rescaling)]
    assert len(rescale) == 1 and rescale[0].scale == pytest.approx(1 / 255)


def test_build_nature_cnn_output_for_a_batch():
    model = build_nature_cnn(3, "probe", random.Random(0))
    out = model(np.zeros((5, 4, 84, 84), np.uint8))
    assert tuple(out.shape) == (5, 3)


def test_online_and_target_start_equal(default_network):
    states = random_batch(0, size=4).states
    np.testing.assert_array_equal(q_values(default_network, states, use_target=False),
                                  q_values(default_network, states, use_target=True))


# --------------------------------------------------------------------------- optimizer


def test_optimizer_is_centered_rmsprop_with_nature_settings(default_network):
    optimizer = default_network.optimizer
    assert isinstance(optimizer, keras.optimizers.RMSprop)
    assert optimizer.centered is True
    assert optimizer.momentum == 0.0
    assert float(np.asarray(optimizer.learning_rate)) == pytest.approx(2.5e-4)
    assert optimizer.rho == pytest.approx(0.95)
    assert optimizer.epsilon == pytest.approx(0.01)


def _output_layer_gradient_by_hand(network: Learner, batch: Batch) -> tuple[np.ndarray, ...]:
    """The gradient of the Huber loss summed over the minibatch, for the output layer only.

    Computed without autodiff: Q(s, a) = h(s) . W[:, a] + b[a] for the penultimate features
    h, and d huber(y - q) / dq = -clip(y - q, -1, 1). Targets come from the target network's
    Q-values in numpy: y = r + 0.99 * max_a' Q_target(s', a'), no bootstrap at terminals.
    """
    features = keras.Model(network.online.inputs, network.online.layers[-2].output)
    h = features(tf.constant(batch.states)).numpy().astype(np.float64)
    rows = np.arange(len(batch.actions))
    q_taken = q_values(network, batch.states)[rows, batch.actions].astype(np.float64)
    next_q = q_values(network, batch.next_states, use_target=True).astype(np.float64)
    targets = batch.returns + batch.discounts * next_q.max(axis=1)
    dloss_dq = -np.clip(targets - q_taken, -1.0, 1.0)
    kernel = np.zeros((h.shape[1], network.n_actions))
    bias = np.zeros(network.n_actions)
    for i, action in enumerate(batch.actions):
        kernel[:, action] += dloss_dq[i] * h[i]
        bias[action] += dloss_dq[i]
    return kernel, bias


def _first_centered_rmsprop_step(gradient: np.ndarray) -> np.ndarray:
    """DeepMind's update (dqn/NeuralQLearner.lua) from zero slots: g = .95 g + .05 dw,
    g2 = .95 g2 + .05 dw^2, w -= lr * dw / sqrt(g2 - g^2 + 0.01): epsilon inside the root."""
    lr, rho, eps = 2.5e-4, 0.95, 0.01
    g = (1 - rho) * gradient
    g2 = (1 - rho) * gradient**2
    return lr * gradient / np.sqrt(g2 - g**2 + eps)


def test_first_update_is_rmsprop_on_the_summed_gradient():
    """Nature's first step from fresh optimizer slots, computed by hand (Mnih et al. 2015;
    pfrl's reproduction sums the minibatch's losses, batch_accumulator="sum")."""
    network = network_from(Config(), seed=11)
    batch = random_batch(1)
    kernel_grad, bias_grad = _output_layer_gradient_by_hand(network, batch)
    before = [v.numpy() for v in network.online.trainable_variables[-2:]]
    network.update(batch, 1)
    after = [v.numpy() for v in network.online.trainable_variables[-2:]]
    for index, gradient in enumerate((kernel_grad, bias_grad)):
        taken = before[index] - after[index]
        expected = _first_centered_rmsprop_step(gradient)
        # float32 against float64: an epsilon outside the root, or the gradient of the mean,
        # would be off by far more than this
        np.testing.assert_allclose(taken, expected, rtol=1e-2,
                                   atol=1e-3 * np.abs(expected).max())
        mean_step = _first_centered_rmsprop_step(gradient / len(batch.actions))
        assert np.linalg.norm(taken) > 2 * np.linalg.norm(mean_step)


# ------------------------------------------------------------------------------- loss


@pytest.mark.parametrize("x, expected", [(0.0, 0.0), (0.5, 0.125), (-0.5, 0.125), (1.0, 0.5),
                                         (-1.0, 0.5), (2.0, 1.5), (-3.0, 2.5), (100.0, 99.5)])
def test_huber_matches_its_definition(x, expected):
    assert float(huber(tf.constant(x))) == pytest.approx(expected)


def test_huber_gradient_is_clipped_to_one():
    x = tf.constant([-5.0, -0.3, 0.0, 0.4, 7.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(huber(x))
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [-1.0, -0.3, 0.0, 0.4, 1.0])


# ------------------------------------------------------------------------ the DQN update


def test_train_moves_q_toward_the_td_target():
    network = network_from(Config(), seed=1)
    batch = random_batch(2)
    initial = td_errors(network, batch)
    target_before = q_values(network, batch.next_states, use_target=True)
    mean_errors = [np.abs(initial).mean()]
    for _ in range(4):
        for _ in range(5):
            network.update(batch, 1)
        mean_errors.append(np.abs(td_errors(network, batch)).mean())
    assert all(np.diff(mean_errors) < 0), mean_errors  # shrinks with every few steps
    assert mean_errors[-1] < mean_errors[0] - 0.01, mean_errors
    closer = np.abs(td_errors(network, batch)) < np.abs(initial)
    assert closer.mean() > 0.7  # most Q(s, a) moved toward their own targets
    # the target network did not move: only the online network learns between syncs
    np.testing.assert_array_equal(q_values(network, batch.next_states, use_target=True),
                                  target_before)


def test_terminal_transitions_do_not_bootstrap():
    network = network_from(Config(), n_actions=2, seed=2)
    output_bias = network.target.layers[-1].bias
    output_bias.assign([1e6, 2e6])  # the target network now says every state is worth ~2e6
    rng = np.random.default_rng(0)
    next_states = rng.integers(0, 256, (3, 4, 84, 84), dtype=np.uint8)
    minibatch = Batch(states=next_states, next_states=next_states,
                      actions=np.zeros(3, np.int32),
                      returns=np.array([0.5, -1.0, 1.0], np.float32),
                      discounts=np.array([0.0, 0.0, 0.99], np.float32),
                      weights=np.ones(3, np.float32))
    targets = td_targets(network.online, network.target, as_tensors(minibatch),
                         double=False).numpy()
    assert targets[0] == 0.5 and targets[1] == -1.0
    assert targets[2] == pytest.approx(1.0 + 0.99 * 2e6, rel=1e-3)
    # a minibatch of terminal transitions trains on r alone: a modest loss
    batch = random_batch(3, size=8, n_actions=2, terminal_every=1)
    network.update(batch, 1)
    loss, _ = network.take_train_stats(1)
    assert loss < 5.0


def test_sync_target_copies_the_weights_exactly():
    network = network_from(Config(), seed=3)
    batch = random_batch(4)
    for _ in range(2):
        network.update(batch, 1)
    online = [v.numpy() for v in network.online.variables]
    assert any(not np.array_equal(o, t.numpy())
               for o, t in zip(online, network.target.variables))
    network.sync_target()
    for o, t in zip(online, network.target.variables):
        np.testing.assert_array_equal(t.numpy(), o)
    np.testing.assert_array_equal(q_values(network, batch.states, use_target=True),
                                  q_values(network, batch.states, use_target=False))
    np.testing.assert_array_equal(network.greedy_actions(batch.states, use_target=True),
                                  network.greedy_actions(batch.states, use_target=False))


def test_greedy_actions_are_the_argmax(default_network):
    states = random_batch(5, size=6).states
    q = q_values(default_network, states)
    assert default_network.greedy_actions(states, use_target=False).tolist() == \
        q.argmax(axis=1).tolist()


# ---------------------------------------------------------------------- training stats


def test_take_train_stats_returns_the_mean_loss_of_the_updates_counted():
    network = network_from(Config(), seed=4)
    assert np.isnan(network.take_train_stats(0)).all()
    losses, mean_qs = [], []
    for seed in (5, 6, 7):
        batch = random_batch(seed)
        losses.append(expected_loss(network, batch))
        mean_qs.append(float(q_values(network, batch.states)[np.arange(32), batch.actions].mean()))
        network.update(batch, 1)
    loss, mean_q = network.take_train_stats(3)
    assert loss == pytest.approx(np.mean(losses), rel=1e-4)
    assert mean_q == pytest.approx(np.mean(mean_qs), rel=1e-4, abs=1e-6)
    assert network.take_train_stats(1) == (0.0, 0.0)  # the sums were reset


def test_non_finite_loss_shows_in_train_stats():
    network = network_from(Config(), seed=5)
    batch = random_batch(8)
    batch = batch._replace(returns=np.full(32, np.nan, np.float32))
    network.update(batch, 1)
    loss, _ = network.take_train_stats(1)
    assert not np.isfinite(loss)


# ---------------------------------------------------------------------------- determinism


def test_same_seed_same_batches_gives_identical_weights():
    batches = [random_batch(seed) for seed in (10, 11, 12)]

    def trained(seed: int) -> list[np.ndarray]:
        network = network_from(Config(), seed=seed)
        for batch in batches:
            network.update(batch, 1)
        network.sync_target()
        network.update(batches[0], 1)
        return [v.numpy() for v in network.online.variables + network.target.variables]

    first, second = trained(seed=21), trained(seed=21)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)  # bit for bit
    # That the seed is used (another seed, other weights) is checked without a third trained
    # network by test_building_a_network_leaves_the_global_generators_alone.


# ------------------------------------------------------------------- updates per call


def _stack(batches: list[Batch]) -> Batch:
    return Batch(*(np.concatenate(arrays) for arrays in zip(*batches)))


@pytest.mark.parametrize("xla", ["on", "off"])
def test_an_update_call_returns_each_transitions_td_error_in_order(xla):
    """The TD errors a call of 2 updates returns are, row by row, the targets minus Q(s, a)
    worked out in NumPy before each update (the second minibatch's after the first update)."""
    batches = [random_batch(seed) for seed in (30, 31)]
    reference = network_from(Config(xla=xla), seed=4)
    expected = []
    for batch in batches:
        expected.append(td_errors(reference, batch))
        reference.update(batch, 1)
    network = network_from(Config(xla=xla, prioritized=True), seed=4)  # TD errors returned
    returned = network.update(_stack(batches), 2).numpy()
    assert reference.update(batches[0], 1) is None  # not asked for
    assert returned.shape == (64,)
    np.testing.assert_allclose(returned, np.concatenate(expected), rtol=1e-4, atol=1e-4)
    assert not np.allclose(expected[1], td_errors(network_from(Config(xla=xla), seed=4),
                                                  batches[1]), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("variant", [{}, {"double": True, "dueling": True}])
@pytest.mark.parametrize("xla", ["on", "off"])
def test_k_updates_in_one_call_equal_k_single_calls_bit_for_bit(xla, variant):
    """One count is enough: every count runs the one trace of the same loop (see the next
    test), the count only its trip count; 3 puts an update between the first and the last."""
    count = 3
    batches = [random_batch(seed) for seed in range(20, 20 + 2 * count)]
    one_by_one = network_from(Config(xla=xla, **variant), seed=9)
    for batch in batches:
        one_by_one.update(batch, 1)
    at_once = network_from(Config(xla=xla, **variant), seed=9)
    at_once.update(_stack(batches[:count]), count)
    at_once.update(_stack(batches[count:]), count)  # a second call reuses the trace
    assert len(at_once.online.variables) == len(one_by_one.online.variables)
    for a, b in zip(at_once.online.variables, one_by_one.online.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.name)
    for a, b in zip(at_once.optimizer.variables, one_by_one.optimizer.variables):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=a.name)
    assert at_once.take_train_stats(2 * count) == one_by_one.take_train_stats(2 * count)


def test_every_count_of_updates_per_call_shares_one_trace():
    network = network_from(Config(xla="off"), seed=9)
    for count in (2, 3, 5):
        network.update(_stack([random_batch(seed) for seed in range(count)]), count)
    assert network._update_many_fn.experimental_get_tracing_count() == 1


def test_building_a_network_leaves_the_global_generators_alone():
    """Randomness is passed in: Python's, NumPy's and TensorFlow's global generators draw
    the same numbers whether or not a network was built in between."""
    def draws() -> tuple:
        return random.random(), np.random.random(), float(tf.random.uniform(()))

    random.seed(1), np.random.seed(1), tf.random.set_seed(1)
    expected = draws()
    random.seed(1), np.random.seed(1), tf.random.set_seed(1)
    first = network_from(Config(), seed=5)
    assert draws() == expected
    second = network_from(Config(), seed=5)
    other = network_from(Config(), seed=6)
    for a, b, c in zip(first.online.get_weights(), second.online.get_weights(),
                       other.online.get_weights()):
        np.testing.assert_array_equal(a, b)  # the seed alone fixes the weights
        assert a.ndim == 1 or not np.array_equal(a, c)  # kernels differ with the seed


def test_make_learner_takes_the_optimizer_settings_from_the_config():
    config = Config(lr=1e-3, rmsprop_rho=0.9, rmsprop_epsilon=1e-4, discount=0.5)
    network = make_learner(config, 4)
    optimizer = network.optimizer
    assert float(optimizer.learning_rate.numpy()) == pytest.approx(1e-3)
    assert (optimizer.rho, optimizer.epsilon, optimizer.centered) == (0.9, 1e-4, True)
    assert network.n_actions == 4


def test_restore_of_a_damaged_checkpoint_is_a_value_error(tmp_path):
    network = network_from(Config(), seed=1)
    prefix = str(tmp_path / "ckpt")
    network.checkpoint().write(prefix)
    Path(prefix + ".index").write_bytes(b"damaged")
    with pytest.raises(ValueError, match="cannot restore the networks"):
        network_from(Config(), seed=2).restore(prefix)


def test_xla_is_on_by_default_on_every_device():
    """--xla=on, the default, compiles whatever the device: dispatched op by op, an H200's
    update cost five times its arithmetic (docs/throughput.md)."""
    assert Config().xla == "on"
    assert learner_settings(Config())["xla"] is True
    assert learner_settings(Config(xla="off"))["xla"] is False


def test_a_device_that_cannot_compile_runs_uncompiled_and_says_so_once():
    network = network_from(Config(), seed=3)
    lines = []
    network.on_xla_fallback = lines.append
    refusing_xla(network, "Detected unsupported operations when trying to compile graph "
                          "__inference_update on XLA_GPU_JIT: SomeOp\nmore detail")
    uncompiled = network_from(Config(xla="off"), seed=3)
    for seed in (40, 41):
        batch = random_batch(seed)
        network.update(batch, 1)  # the first one fails to compile, then is made uncompiled
        uncompiled.update(batch, 1)
    assert network.xla is False
    assert lines == ["note: XLA could not compile on this device (Detected unsupported "
                     "operations when trying to compile graph __inference_update on "
                     "XLA_GPU_JIT: SomeOp); the run goes on uncompiled, as with --xla=off"]
    for a, b in zip(network.online.get_weights(), uncompiled.online.get_weights()):
        np.testing.assert_array_equal(a, b)  # each update made once, as --xla=off makes it
    assert network.take_train_stats(2) == uncompiled.take_train_stats(2)


def test_an_error_that_is_not_xla_declining_is_raised():
    network = network_from(Config(), seed=3)
    network.on_xla_fallback = lambda line: pytest.fail(line)
    refusing_xla(network, "Incompatible shapes: [32] vs. [31]")
    with pytest.raises(tf.errors.InvalidArgumentError, match="Incompatible shapes"):
        network.update(random_batch(40), 1)
    assert network.xla is True


def test_the_ops_an_uncompiled_update_and_query_dispatch_are_the_networks_layers():
    """By hand, for the Nature CNN: a query runs the target's 3 convolutions and 2 dense
    layers and one argmax; an update runs the 3 convolutions forward twice (online on the
    states, target on the next states), each convolution's filter gradient once, and the
    2 dense layers forward twice and backward (input and weight gradients): 8 matmuls."""
    from fast_dqn.learner import dispatched_ops
    update, query = dispatched_ops(network_from(Config(xla="off")), 32, 16)
    assert (query["Conv2D"], query["MatMul"], query["ArgMax"]) == (3, 2, 1)
    assert (update["Conv2D"], update["Conv2DBackpropFilter"], update["MatMul"]) == (6, 3, 8)
    assert "Const" not in update and "Placeholder" not in query
    assert sum(update.values()) > 10 * 3  # hundreds of ops, dispatched one by one


def test_xla_is_deterministic_and_close_to_the_uncompiled_update(default_network):
    """Two networks with one seed and the same minibatches end bit-identical with XLA (these
    tests run on the CPU), and the compiled update is not the uncompiled one's arithmetic."""
    batches = [random_batch(seed) for seed in (40, 41, 42)]

    def trained(xla: str) -> list[np.ndarray]:
        network = network_from(Config(xla=xla), seed=3)
        assert network.xla is (xla == "on")
        for batch in batches:
            network.update(batch, 1)
        return network.online.get_weights()

    assert default_network.xla is True  # --xla=on, on the CPU
    first, second, plain = trained("on"), trained("on"), trained("off")
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(first, plain):  # the same update, up to float rounding
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)


# ------------------------------------------------------------ Double DQN and dueling


class FixedQ:
    """Stands in for a network: the same Q-values whatever the states."""

    def __init__(self, q_values: list[list[float]]):
        self.q_values = tf.constant(q_values, tf.float32)

    def __call__(self, states, training: bool = False) -> tf.Tensor:
        return self.q_values


def test_double_target_is_valued_by_the_target_network_at_the_online_choice():
    # Worked by hand, discount 0.5. Row 0: the online network prefers action 1, which the
    # target values 4, so the Double target is 1 + 0.5 * 4 = 3; Nature's takes the target's
    # own best, 6: 1 + 0.5 * 6 = 4. Row 1: both networks prefer action 0 (value 2): 0 + 1 = 1.
    # Row 2 is terminal: the reward alone, -1.
    online = FixedQ([[1.0, 3.0, 0.0], [5.0, 0.0, 1.0], [0.0, 9.0, 0.0]])
    target = FixedQ([[6.0, 4.0, 5.0], [2.0, 1.0, 0.0], [7.0, 8.0, 9.0]])
    states = tf.zeros((3, 4, 84, 84), tf.uint8)
    minibatch = Batch(states=states, next_states=states, actions=tf.zeros(3, tf.int32),
                      returns=tf.constant([1.0, 0.0, -1.0]),
                      discounts=tf.constant([0.5, 0.5, 0.0]), weights=tf.ones(3))
    expected = {False: [4.0, 1.0, -1.0], True: [3.0, 1.0, -1.0]}
    for double, targets in expected.items():
        np.testing.assert_array_equal(
            td_targets(online, target, minibatch, double=double).numpy(), targets)


def test_dueling_aggregation_subtracts_the_mean_advantage():
    # Wang et al. (2016), eq. (9): Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a'), by hand.
    value = tf.constant([[1.0], [2.0]])
    advantages = tf.constant([[1.0, 2.0, 3.0], [0.0, 0.0, 6.0]])
    np.testing.assert_array_equal(dueling_q_values(value, advantages).numpy(),
                                  [[0.0, 1.0, 2.0], [0.0, 0.0, 6.0]])


def count_parameters(layers: list[tuple[int, int]]) -> int:
    """Weights plus biases of layers given as (inputs per output, outputs)."""
    return sum(fan_in * outputs + outputs for fan_in, outputs in layers)


def test_dueling_network_has_two_512_unit_streams_and_q_values_around_the_value():
    n_actions = 6
    model = build_nature_cnn(n_actions, "dueling", random.Random(0), dueling=True)
    convolutions = [(8 * 8 * 4, 32), (4 * 4 * 32, 64), (3 * 3 * 64, 64)]
    streams = [(7 * 7 * 64, 512), (512, 1), (7 * 7 * 64, 512), (512, n_actions)]
    assert model.count_params() == count_parameters(convolutions + streams)
    states = random_batch(3, size=5).states
    q_values = model(states).numpy()
    assert q_values.shape == (5, n_actions)
    value = keras.Model(model.inputs, model.get_layer("value").output)(states).numpy()
    # The advantages average to zero, so the Q-values average to the value (up to rounding).
    np.testing.assert_allclose(q_values.mean(axis=1), value[:, 0], rtol=1e-5, atol=1e-6)


def test_nature_network_is_unchanged_without_dueling():
    model = build_nature_cnn(N_ACTIONS, "nature", random.Random(0))
    layers = [(8 * 8 * 4, 32), (4 * 4 * 32, 64), (3 * 3 * 64, 64), (7 * 7 * 64, 512),
              (512, N_ACTIONS)]
    assert model.count_params() == count_parameters(layers)
    assert not any(isinstance(layer, ScaleGradient) for layer in model.layers)


def test_dueling_scales_the_gradient_into_the_last_convolution_by_one_over_root_two():
    states = random_batch(4, size=3).states

    def last_convolution_gradient(scale: float) -> np.ndarray:
        model = build_nature_cnn(N_ACTIONS, "dueling", random.Random(1), dueling=True)
        model.get_layer("scale_gradient").scale = scale
        last_convolution = [layer for layer in model.layers
                            if isinstance(layer, keras.layers.Conv2D)][-1]
        with tf.GradientTape() as tape:
            total = tf.reduce_sum(model(states))
        return tape.gradient(total, last_convolution.kernel).numpy()

    scaled, unscaled = last_convolution_gradient(2 ** -0.5), last_convolution_gradient(1.0)
    largest = np.abs(unscaled).max()
    assert largest > 0
    # Scaling before or after the sums over positions rounds differently: ~1e-6 of the largest.
    np.testing.assert_allclose(scaled, unscaled / np.sqrt(2.0), rtol=0, atol=1e-5 * largest)


def test_scale_gradient_is_the_identity_going_forward():
    x = tf.constant([[0.1, -3.0, 7.5]])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = ScaleGradient(0.25)(x)
        total = tf.reduce_sum(3.0 * y)
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    np.testing.assert_array_equal(tape.gradient(total, x).numpy(), [[0.75, 0.75, 0.75]])


def test_the_simulated_gpu_counts_updates_and_waits_but_leaves_the_weights_alone():
    """The benchmark's stand-in for a GPU: the host work of the real calls, no arithmetic."""
    device = SimulatedDevice(SimulatedGpu(update_ms=20.0, query_ms=10.0))
    network = make_simulated_learner(Config(), N_ACTIONS, device)
    before = [variable.numpy().copy() for variable in network.online.variables]
    batch = random_batch(0, size=64)
    start = time.perf_counter()
    network.update(batch, 2)  # two updates of 32
    network.update(random_batch(1), 1)
    assert time.perf_counter() - start >= 0.06  # 3 updates of 20 ms
    assert device.updates_on_device == 3
    assert device.simulated_seconds == pytest.approx(0.06)
    start = time.perf_counter()
    actions = network.greedy_actions(batch.states[:5])
    assert time.perf_counter() - start >= 0.01
    assert actions.tolist() == [0] * 5
    for variable, value in zip(network.online.variables, before):
        np.testing.assert_array_equal(variable.numpy(), value)


def test_the_simulated_gpus_priorities_leave_the_draws_as_a_real_memorys():
    """With `--prioritized`, the stand-in's TD errors must not skew the draws: every drawn
    transition falling to the epsilon (TD errors of 0) left the rows never valid (a capped
    episode's end, the newest, the oldest) at the largest priority with nearly all the mass,
    every draw of them rejected (here the draws gave up; docs/throughput.md). After 3,200
    draws from 256 rows their share of the mass is still about their share of the rows."""
    from fast_dqn.replay_memory import MinibatchDraws, ReplayMemory
    from fast_dqn.transitions import Transitions
    rng = np.random.default_rng(0)
    memory = ReplayMemory(256, rng, prioritized=True)
    ends = np.zeros(256, bool)
    ends[5::32] = True  # capped: no terminal, never valid
    memory.add_many(Transitions(frames=rng.integers(0, 256, (256, 84, 84), dtype=np.uint8),
                                actions=rng.integers(0, N_ACTIONS, 256),
                                rewards=np.zeros(256, np.float32), terminals=np.zeros(256, bool),
                                episode_ends=ends, sampleable=np.ones(256, bool)))
    never = ~memory.valid(np.arange(256))
    assert never.sum() == 8 + 1 + 3  # the capped ends, the newest, the oldest HISTORY - 1
    device = SimulatedDevice(SimulatedGpu(update_ms=0.0, query_ms=0.0))
    learner = make_simulated_learner(Config(xla="off"), N_ACTIONS, device)
    draws = MinibatchDraws(memory, 32, 4)
    for _ in range(25):  # 3,200 draws of 256 rows
        draws.write_back(0, learner.update(draws.draw(4, buffer=0), 4))
    leaves = memory.priorities.leaves
    assert leaves[never].sum() / leaves.sum() < 2 * never.mean()


@pytest.mark.parametrize("device_work_ms, expected_sleep_ms", [(7.0, 33.0), (55.0, 0.0)])
def test_a_simulated_slot_update_lasts_the_gpu_time_counted_from_its_dispatch(
        monkeypatch, device_work_ms, expected_sleep_ms):
    """Gathering the states is device work, inside a GPU's time per update: a call of 2
    updates of 20 ms ends 40 ms after its dispatch, with the CPU's gather (faked here as
    `device_work_ms` of clock) done within them, or later when that gather takes longer."""
    from fast_dqn import simulated_gpu
    from fast_dqn.device_frames import DeviceFrames
    device = SimulatedDevice(SimulatedGpu(update_ms=20.0, query_ms=10.0))
    frames = DeviceFrames(64)
    network = make_simulated_learner(Config(xla="off"), N_ACTIONS, device, frames.variable)
    rng = np.random.default_rng(0)
    slots = rng.integers(0, 64, (2 * 32, 4)).astype(np.int32)
    mask = np.ones((2 * 32, 4), np.uint8)
    minibatches = SlotBatch(state_slots=slots, state_mask=mask, next_slots=(slots + 1) % 64,
                            next_mask=mask,
                            actions=rng.integers(0, N_ACTIONS, 2 * 32).astype(np.int32),
                            **zero_columns(2 * 32, "actions"))
    network.update(minibatches, 2)  # traced before the clock
    clock = FakeClock(100.0)
    run = DirectCall.__call__

    def run_taking_device_time(self, *tensors):
        outputs = run(self, *tensors)
        clock.now += device_work_ms / 1000.0
        return outputs

    monkeypatch.setattr(DirectCall, "__call__", run_taking_device_time)
    monkeypatch.setattr(simulated_gpu.time, "perf_counter", clock.perf_counter)
    monkeypatch.setattr(simulated_gpu.time, "sleep", clock.sleep)
    before = device.simulated_seconds
    network.update(minibatches, 2)
    assert clock.slept == [pytest.approx(expected_sleep_ms / 1000.0)]
    assert device.simulated_seconds - before == pytest.approx(0.040)  # the GPU's busy time
    assert device.updates_on_device == 4


@pytest.mark.parametrize("xla", ["on", "off"])
def test_a_simulated_slot_update_gathers_the_states_it_is_given(xla):
    """The simulated GPU keeps the real gather (its host-visible cost): what it keeps of the
    last update's states is the pixel of the frames its slots name, worked out by hand."""
    from fast_dqn.device_frames import DeviceFrames
    device = SimulatedDevice(SimulatedGpu(update_ms=0.0, query_ms=0.0))
    frames = DeviceFrames(64)
    network = make_simulated_learner(Config(xla=xla), N_ACTIONS, device, frames.variable)
    frames.write(0, np.arange(1, 65, dtype=np.uint8)[:, None, None]
                 * np.ones((1, 84, 84), np.uint8))  # slot i holds i + 1 everywhere
    slots = np.zeros((2 * 32, 4), np.int32)
    next_slots = np.zeros((2 * 32, 4), np.int32)
    slots[-1, -1], next_slots[-1, -1] = 40, 9  # the last update's last states end there
    mask = np.ones((2 * 32, 4), np.uint8)
    batch = SlotBatch(state_slots=slots, state_mask=mask, next_slots=next_slots,
                      next_mask=mask, actions=np.zeros(2 * 32, np.int32),
                      **zero_columns(2 * 32, "actions"))
    network.update(batch, 2)
    assert int(device.calls.last_pixel.numpy()) == 41
    masked = mask.copy()
    masked[-1, -1] = 0  # now a padded frame: zero, so the next state's 10 is kept
    network.update(batch._replace(state_mask=masked), 2)
    assert int(device.calls.last_pixel.numpy()) == 10


# ------------------------------------------- the learning rule against a naive reference
# (on tests/fakes.py's LinearQ and hand-made minibatch, which test_optimizer_loss.py uses too)


def naive_update(double: bool, discount: float, lr: float,
                 weights: list[float] | None = None) -> tuple[np.ndarray, float, float]:
    """The DQN update written out transition by transition in float64: the targets, the
    Huber loss with its gradient (the TD error clipped to [-1, 1]) summed over the minibatch,
    each term times its importance-sampling weight (1 unless given), and one plain gradient
    step. Returns the new weights, the mean loss (unweighted) and the mean Q(s, a)."""
    online, target = np.array(ONLINE_W), np.array(TARGET_W)
    gradient = np.zeros_like(online)
    losses, q_taken = [], []
    weights = weights or [1.0] * len(HAND_MADE["actions"])
    for i, action in enumerate(HAND_MADE["actions"]):
        state = np.array(HAND_MADE["states"][i])
        next_state = np.array(HAND_MADE["next_states"][i])
        if HAND_MADE["terminals"][i]:
            y = HAND_MADE["rewards"][i]
        else:
            target_q = [next_state @ target[:, a] for a in range(2)]
            online_q = [next_state @ online[:, a] for a in range(2)]
            best = online_q.index(max(online_q)) if double else target_q.index(max(target_q))
            y = HAND_MADE["rewards"][i] + discount * target_q[best]
        q = state @ online[:, action]
        error = y - q
        losses.append(0.5 * error**2 if abs(error) <= 1 else abs(error) - 0.5)
        q_taken.append(q)
        gradient[:, action] += -weights[i] * min(max(error, -1.0), 1.0) * state
    return online - lr * gradient, sum(losses) / len(losses), sum(q_taken) / len(q_taken)


@pytest.mark.parametrize("double", [False, True])
def test_the_update_is_the_naive_dqn_update_on_a_hand_made_minibatch(double):
    online, target = LinearQ(ONLINE_W), LinearQ(TARGET_W)
    optimizer = keras.optimizers.SGD(learning_rate=0.1)
    stats = dqn_update(online, target, optimizer, hand_made_batch(0.9), double=double)
    weights, loss, mean_q = naive_update(double, discount=0.9, lr=0.1)
    np.testing.assert_allclose(online.weights.numpy(), weights, rtol=1e-6, atol=1e-6)
    assert float(stats.loss) == pytest.approx(loss, rel=1e-6)
    assert float(stats.mean_q) == pytest.approx(mean_q, rel=1e-6)
    np.testing.assert_array_equal(target.weights.numpy(), np.float32(TARGET_W))  # untouched


def test_importance_weights_scale_each_transitions_term_of_the_loss():
    """Schaul et al. (2016): each transition's term of the loss is multiplied by its
    importance-sampling weight; the hand-made rows get four different weights."""
    given = [0.5, 1.0, 2.0, 0.25]
    online, target = LinearQ(ONLINE_W), LinearQ(TARGET_W)
    optimizer = keras.optimizers.SGD(learning_rate=0.1)
    dqn_update(online, target, optimizer, hand_made_batch(0.9, weights=given))
    expected, _, _ = naive_update(False, discount=0.9, lr=0.1, weights=given)
    np.testing.assert_allclose(online.weights.numpy(), expected, rtol=1e-6, atol=1e-6)
    assert not np.allclose(expected, naive_update(False, discount=0.9, lr=0.1)[0])


def test_the_hand_made_minibatch_tells_the_two_targets_apart():
    """Row 0's next state: the online network prefers action 0 (2 > 0.25), the target
    network action 1 (2 > 0), so the Double target differs from Nature's there."""
    assert naive_update(False, 0.9, 0.1)[1] != naive_update(True, 0.9, 0.1)[1]


# ----------------------------------------------------- the update function substituted


def four_paths(network: Learner, seed: int = 0) -> float:
    """Updates by every path the loops take: a host minibatch, K host minibatches in one
    call, and from slots of frames on the device, one and K in a call (7 updates). Returns
    the sum of the returns the 7 minibatches carry."""
    from fast_dqn.device_frames import DeviceFrames
    rng = np.random.default_rng(seed)
    frames = DeviceFrames(64)
    frames.put_rows(0, rng.integers(0, 256, (64, 84, 84), dtype=np.uint8))
    network.replay_frames = frames.variable
    host = [random_batch(seed + k) for k in range(4)]
    network.update(host[0], 1)
    network.update(Batch(*(np.concatenate(c) for c in zip(*host[1:]))), 3)
    returns = sum(float(batch.returns.sum()) for batch in host)
    for count in (1, 2):
        slots = rng.integers(0, 64, (count * 32, 4)).astype(np.int32)
        minibatches = SlotBatch(state_slots=slots, state_mask=np.ones_like(slots, np.uint8),
                                next_slots=(slots + 1) % 64,
                                next_mask=np.ones_like(slots, np.uint8),
                                actions=np.zeros(count * 32, np.int32),
                                returns=rng.normal(size=count * 32).astype(np.float32),
                                discounts=np.zeros(count * 32, np.float32),
                                weights=np.ones(count * 32, np.float32))
        network.update(minibatches, count)
        returns += float(minibatches.returns.sum())
    return returns


class RecordingUpdate:
    """An update function that changes no weight: it counts its calls and sums the returns
    of the minibatches it is given, on the device; its TD errors are the returns."""

    def __init__(self):
        self.calls = tf.Variable(0, dtype=tf.int64)
        self.returns = tf.Variable(0.0)

    def __call__(self, online, target, optimizer, batch: Batch) -> UpdateStats:
        self.calls.assign_add(1)
        self.returns.assign_add(tf.reduce_sum(batch.returns))
        return UpdateStats(loss=tf.constant(1.5), mean_q=tf.constant(-2.0),
                           td_errors=batch.returns)


def weights(network: Learner) -> list[np.ndarray]:
    return [v.numpy() for v in network.online.variables + network.optimizer.variables]


@pytest.mark.parametrize("xla", ["on", "off"])
def test_the_update_function_given_is_the_one_every_path_runs(xla):
    recording = RecordingUpdate()
    network = Learner(N_ACTIONS, update_function=recording,
                       **learner_settings(Config(xla=xla, seed=3)))
    before = weights(network)
    returns = four_paths(network)
    assert int(recording.calls.numpy()) == 7
    assert float(recording.returns.numpy()) == pytest.approx(returns, rel=1e-5)
    assert network.take_train_stats(7) == (1.5, -2.0)  # its stats, summed as the rule's
    for a, b in zip(before, weights(network)):
        np.testing.assert_array_equal(a, b)  # the learning rule itself never ran


@pytest.mark.parametrize("xla", ["on", "off"])
def test_the_simulation_replaces_every_path(xla):
    """Every update path and both queries run the simulated GPU's calls: 7 updates counted,
    actions all 0, the weights and optimizer slots never changed."""
    device = SimulatedDevice(SimulatedGpu(update_ms=0.0, query_ms=0.0))
    network = make_simulated_learner(Config(xla=xla, seed=3), N_ACTIONS, device)
    before = weights(network)
    four_paths(network, seed=5)
    assert device.updates_on_device == 7
    states = random_batch(9, size=3).states
    assert network.greedy_actions(states).tolist() == [0, 0, 0]
    assert network.greedy_actions(states, use_target=False).tolist() == [0, 0, 0]
    for a, b in zip(before, weights(network)):
        np.testing.assert_array_equal(a, b)


def test_traced_calls_that_leave_out_a_purpose_are_refused():
    """A call the substituted table lacks would run the network's own arithmetic in the
    simulation: the network refuses the table instead."""
    calls = SimulatedCalls()

    def without_online_query(xla: bool):
        return {purpose: function for purpose, function in calls(xla).items()
                if purpose != "online_query"}

    with pytest.raises(ValueError, match="online_query"):
        Learner(N_ACTIONS, traced_calls=without_online_query,
                 **learner_settings(Config(xla="off")))


def compiled_by_xla(call: DirectCall) -> bool:
    """Whether a function that `call`'s graph runs is one XLA compiles."""
    library = call._concrete.graph.as_graph_def().library.function
    return any(function.attr["_XlaMustCompile"].b for function in library
               if "_XlaMustCompile" in function.attr)


@pytest.mark.parametrize("xla", ["on", "off"])
def test_a_simulated_call_of_k_slot_updates_gathers_all_their_states_uncompiled(xla):
    """The simulation stands for a GPU by doing the host's part of the real call
    (docs/design.md): one dispatched function per call of K updates, in which the CPU
    gathers the K minibatches' states (K x 32 states of 4 frames of 84 x 84, and as many
    next states) at once, as the device would. Compiled, XLA keeps of the gather only the one pixel the stand-in keeps;
    looped per update (the real network's loop), a call costs a loop iteration and a small
    gather per update: either way the host cost measured is no longer the real call's.
    The real network with XLA does compile its update: what `compiled_by_xla` looks for."""
    from fast_dqn.device_frames import DeviceFrames
    k, size = 3, 32
    frames = DeviceFrames(64)
    rng = np.random.default_rng(0)
    slots = rng.integers(0, 64, (k * size, 4)).astype(np.int32)
    mask = np.ones_like(slots, np.uint8)
    minibatches = SlotBatch(state_slots=slots, state_mask=mask, next_slots=(slots + 1) % 64,
                            next_mask=mask, **zero_columns(k * size))
    device = SimulatedDevice(SimulatedGpu(update_ms=0.0, query_ms=0.0))
    network = make_simulated_learner(Config(xla=xla), N_ACTIONS, device, frames.variable)
    network.update(minibatches, k)
    network.update(SlotBatch(*(column[:size] for column in minibatches)), 1)
    calls = {key[0]: call for key, call in network.direct_calls.calls.items()}
    assert set(calls) == {"update_slots", "update_many_slots"}
    for purpose, leading in (("update_many_slots", [None, size]), ("update_slots", [size])):
        gathered = [op.outputs[0].shape.as_list()
                    for op in calls[purpose]._concrete.graph.get_operations()
                    if op.type in ("ResourceGather", "GatherV2")]
        assert gathered == [leading + [4, 84, 84]] * 2, purpose  # states, next states
        assert not compiled_by_xla(calls[purpose]), purpose
    assert device.updates_on_device == k + 1
    if xla == "on":
        real = make_learner(Config(xla="on"), N_ACTIONS, frames.variable)
        real.update(minibatches, k)
        assert [compiled_by_xla(call) for call in real.direct_calls.calls.values()] == [True]


def test_a_minibatch_carries_the_declared_columns_by_name():
    """Batch and SlotBatch are made from MINIBATCH_COLUMNS: its columns follow the states."""
    assert Batch._fields == ("states", "next_states", *MINIBATCH_COLUMNS)
    assert SlotBatch._fields == ("state_slots", "state_mask", "next_slots", "next_mask",
                                 *MINIBATCH_COLUMNS)
    assert list(MINIBATCH_COLUMNS) == ["actions", "returns", "discounts", "weights"]


# ----------------------------------------------------------------- --precision=bfloat16

# The ops of the network's layers in the traced update: forward, and the gradients of the
# weights and of the layers' inputs.
LAYER_OPS = ("Conv2D", "Conv2DBackpropFilter", "Conv2DBackpropInput", "MatMul")


def layer_op_dtypes(network: Learner) -> set[tuple[str, str]]:
    """(op type, dtype) of every convolution and matmul in the traced update and query."""
    states = tf.TensorSpec((32, 4, 84, 84), tf.uint8)
    minibatch = Batch(states=states, next_states=states, **{
        name: tf.TensorSpec((32, *shape), tf.as_dtype(dtype))
        for name, (shape, dtype) in MINIBATCH_COLUMNS.items()})
    graphs = [network._update_fn.get_concrete_function(*minibatch).graph,
              network._greedy_fns[True].get_concrete_function(states).graph]
    return {(op.type, op.get_attr("T").name) for graph in graphs
            for op in graph.get_operations() if op.type in LAYER_OPS}


def float_variables(network: Learner) -> list[tf.Variable]:
    """The networks' weights and the optimizer's slots (its step count is an integer)."""
    return [*network.online.variables, *network.target.variables,
            *(v for v in network.optimizer.variables if v.name != "iteration")]


@pytest.mark.parametrize("dueling", [False, True])
@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_the_layers_compute_at_the_precision_on_float32_weights_and_slots(precision, dueling):
    network = network_from(Config(precision=precision, dueling=dueling, xla="off",
                                  prioritized=True), seed=2)
    weighted = [layer for layer in network.online.layers if layer.weights]
    assert {(layer.compute_dtype, layer.variable_dtype) for layer in weighted} == {
        (precision, "float32")}
    assert layer_op_dtypes(network) == {(op, precision) for op in LAYER_OPS}
    td_errors_ = network.update(random_batch(60), 1)
    assert td_errors_.dtype == tf.float32
    assert network.online(random_batch(61, size=2).states).dtype == tf.float32  # the Q-values
    assert {v.dtype for v in float_variables(network)} == {"float32"}
    assert len(network.optimizer.variables) > len(network.online.variables)  # slots, built
    assert keras.mixed_precision.global_policy().name == "float32"  # no leak to others


@pytest.mark.parametrize("saved", ["float32", "bfloat16"])
def test_a_checkpoint_is_float32_and_loads_at_either_precision(saved, tmp_path):
    trained = network_from(Config(precision=saved, xla="off"), seed=5)
    trained.update(random_batch(50), 1)
    prefix = str(tmp_path / "ckpt")
    trained.checkpoint().write(prefix)
    written = tf.train.load_checkpoint(prefix).get_variable_to_dtype_map()
    assert {dtype for name, dtype in written.items()
            if "VARIABLE_VALUE" in name and "iteration" not in name} == {tf.float32}
    states = random_batch(51, size=16).states
    q = {}
    for precision in ("float32", "bfloat16"):
        restored = network_from(Config(precision=precision, xla="off"), seed=6)
        restored.restore(prefix)
        for a, b in zip(float_variables(restored), float_variables(trained)):
            np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.name)
        q[precision] = q_values(restored, states)
    # bfloat16 keeps 8 significant bits: the same Q-values to about 1% of their scale.
    scale = np.abs(q["float32"]).max()
    np.testing.assert_allclose(q["bfloat16"], q["float32"], rtol=0, atol=0.02 * scale)
    assert not np.array_equal(q["bfloat16"], q["float32"])


@pytest.mark.parametrize("xla", ["on", "off"])
def test_bfloat16_updates_by_every_path_with_or_without_xla(xla):
    """From host minibatches and from frames on the device, with XLA (on the CPU it
    compiles bfloat16: no fallback) or without. The first update moves the weights as
    float32's does, to bfloat16's rounding (later ones drift apart, as rounding compounds)."""
    moved = {}
    for precision in ("float32", "bfloat16"):
        network = network_from(Config(precision=precision, xla=xla), seed=7)
        network.on_xla_fallback = pytest.fail
        before = network.online.get_weights()
        network.update(random_batch(40), 1)
        moved[precision] = np.concatenate([(after - w).ravel() for after, w in
                                           zip(network.online.get_weights(), before)])
        four_paths(network, seed=3)
        assert network.xla is (xla == "on")
        assert np.isfinite(network.take_train_stats(8)).all()
        assert all(np.isfinite(w).all() for w in network.online.get_weights())
    assert np.corrcoef(moved["float32"], moved["bfloat16"])[0, 1] > 0.98
    assert not np.array_equal(moved["float32"], moved["bfloat16"])
