"""Tests of `--optimizer` and `--loss`: Dopamine's Adam and mean squared loss beside Nature's
centered RMSProp and summed Huber loss (fast_dqn/update_rule.py, fast_dqn/config.py).

The expectations are written out here: optax.adam's update in NumPy (Dopamine's JAX DQN
steps with it), the squared TD error averaged over a hand-made minibatch, Dopamine's values
as docs/protocol.md cites them.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil

import numpy as np
import pytest

import tensorflow as tf

from fast_dqn import config as config_module, launch, update_rule
from fast_dqn.checkpoints import CHECKPOINT
from fast_dqn.config import ALGO_DQN, ALGO_FAST_DQN, Config, make_parser, new_run_settings
from fast_dqn.learner import Learner, make_learner
from fast_dqn.update_rule import DopamineAdam, dqn_update
from tests.cli_runs import (FAST, REPO, RUN_DQN, RUN_FAST_DQN, SMALL_BATCH, TINY, run_in_process,
                            summary)
from tests.fakes import (HAND_MADE, N_ACTIONS, ONLINE_W, TARGET_W, LinearQ, hand_made_batch,
                         random_batch)

pytestmark = pytest.mark.usefixtures("cpu_device")  # deterministic ops, as in a real run

keras = tf.keras


# ------------------------------------------------------------------------------ Adam


def optax_adam_steps(weights: np.ndarray, gradients: list[np.ndarray], lr: float,
                     eps: float, b1: float = 0.9, b2: float = 0.999) -> list[np.ndarray]:
    """optax.adam (optax/_src/transform.py, scale_by_adam; eps_root 0) in float64: the
    weights after each gradient. m, v start at zero; t counts from 1."""
    w = weights.astype(np.float64)
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    after = []
    for t, g in enumerate(gradients, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat = m / (1 - b1**t)
        v_hat = v / (1 - b2**t)
        w = w - lr * m_hat / (np.sqrt(v_hat) + eps)
        after.append(w.copy())
    return after


START = np.array([0.5, -1.5, 2.0, 0.0], np.float32)
# The third component is small beside eps, where optax's and Keras's placements of eps part.
GRADIENTS = [np.array([0.1, -2.0, 3e-4, 1.0]), np.array([-0.3, 0.5, 1e-4, 1.0])]


def adam_steps(optimizer: keras.optimizers.Optimizer, steps: int) -> list[np.ndarray]:
    variable = keras.Variable(START)
    optimizer.build([variable])
    after = []
    for gradient in GRADIENTS[:steps]:
        optimizer.apply_gradients([(tf.constant(gradient, tf.float32), variable)])
        after.append(variable.numpy().astype(np.float64))
    return after


@pytest.mark.parametrize("steps", [1, 2])
def test_adam_is_optax_adam_for_one_and_two_steps(steps):
    taken = adam_steps(DopamineAdam(learning_rate=0.01, epsilon=1.5e-4), steps)
    expected = optax_adam_steps(START, GRADIENTS[:steps], lr=0.01, eps=1.5e-4)
    for got, wanted in zip(taken, expected):
        np.testing.assert_allclose(got, wanted, rtol=1e-5, atol=1e-7)


def test_keras_adam_with_the_same_epsilon_is_another_update():
    """Why the step is written out: Keras adds its epsilon before the bias correction."""
    keras_adam = adam_steps(keras.optimizers.Adam(learning_rate=0.01, epsilon=1.5e-4), 1)[0]
    expected = optax_adam_steps(START, GRADIENTS[:1], lr=0.01, eps=1.5e-4)[0]
    # the small weight: optax steps lr / 1.5 = 0.0067, Keras 11 times less
    assert START[2] - expected[2] > 5 * (START[2] - keras_adam[2]) > 0


def test_adam_keeps_its_moments_and_step_count_as_optimizer_variables():
    optimizer = DopamineAdam(learning_rate=0.01, epsilon=1.5e-4)
    adam_steps(optimizer, 2)
    assert int(optimizer.iterations.numpy()) == 2
    # the step count, the learning rate, and two moments of the one variable
    assert len(optimizer.variables) == 4


def test_adam_network_has_dopamines_settings_and_the_configs_learning_rate():
    network = make_learner(Config(optimizer="adam", lr=3e-5), N_ACTIONS)
    assert isinstance(network.optimizer, DopamineAdam)
    assert float(network.optimizer.learning_rate.numpy()) == pytest.approx(3e-5)
    # dopamine/jax/agents/dqn/configs/dqn.gin and create_optimizer's defaults
    assert network.optimizer.epsilon == 1.5e-4
    assert (network.optimizer.beta_1, network.optimizer.beta_2) == (0.9, 0.999)


# ------------------------------------------------------------------------------- mse


def naive_mse_update(discount: float, lr: float) -> tuple[np.ndarray, float]:
    """The DQN update of the hand-made minibatch with the squared TD error averaged over the
    minibatch, by hand in float64: d/dq (y - q)^2 / B = -2 (y - q) / B. Returns the weights
    after one plain gradient step and the loss."""
    online, target = np.array(ONLINE_W), np.array(TARGET_W)
    gradient = np.zeros_like(online)
    squares = []
    size = len(HAND_MADE["actions"])
    for i, action in enumerate(HAND_MADE["actions"]):
        state = np.array(HAND_MADE["states"][i])
        next_state = np.array(HAND_MADE["next_states"][i])
        bootstrap = 0.0 if HAND_MADE["terminals"][i] else discount * max(next_state @ target)
        error = HAND_MADE["rewards"][i] + bootstrap - state @ online[:, action]
        squares.append(error**2)
        gradient[:, action] += -2.0 * error * state / size
    return online - lr * gradient, sum(squares) / size


def test_mse_loss_is_the_mean_squared_td_error_of_a_hand_made_minibatch():
    online, target = LinearQ(ONLINE_W), LinearQ(TARGET_W)
    stats = dqn_update(online, target, keras.optimizers.SGD(learning_rate=0.1),
                       hand_made_batch(0.9), loss="mse")
    weights, loss = naive_mse_update(discount=0.9, lr=0.1)
    np.testing.assert_allclose(online.weights.numpy(), weights, rtol=1e-6, atol=1e-6)
    assert float(stats.loss) == pytest.approx(loss, rel=1e-6)
    # By hand: the TD errors y - Q(s, a) of rows 0-3 are 2.8 - 2 = 0.8, 3.6 - 2 = 1.6,
    # -1 - 5 = -6 (terminal) and 3.2 - 0.25 = 2.95; no 1/2, and the mean, not the sum.
    assert loss == pytest.approx((0.8**2 + 1.6**2 + 6**2 + 2.95**2) / 4)
    assert float(stats.loss) == pytest.approx(11.975625, rel=1e-6)


# -------------------------------------------------------------------------- defaults


def test_the_defaults_are_natures_rmsprop_and_huber():
    config = Config()
    assert (config.optimizer, config.loss, config.lr) == ("rmsprop", "huber", 2.5e-4)
    network = make_learner(config, N_ACTIONS)
    assert isinstance(network.optimizer, keras.optimizers.RMSprop)
    assert network.optimizer.centered is True
    assert "lr" not in new_run_settings({})  # no optimizer preset


def test_adam_takes_dopamines_learning_rate_unless_lr_is_given():
    assert new_run_settings({"optimizer": "adam"})["lr"] == 6.25e-5
    assert new_run_settings({"optimizer": "adam", "lr": 1e-4})["lr"] == 1e-4
    assert "lr" not in new_run_settings({"optimizer": "rmsprop"})


@pytest.mark.parametrize("algo", [ALGO_FAST_DQN, ALGO_DQN])
def test_both_trainers_take_the_flags_and_list_them_in_help(algo):
    parser = make_parser(algo, "")
    help_text = " ".join(parser.format_help().split())
    assert "--optimizer {rmsprop,adam}" in help_text
    assert "--loss {huber,mse}" in help_text
    args = parser.parse_args(["--optimizer=adam", "--loss=mse"])
    assert (args.optimizer, args.loss) == ("adam", "mse")


def test_the_readme_names_every_variant_flag():
    """Every departure from Nature DQN is a flag named in the README (its list of variants),
    not only in docs/flags.md."""
    from fast_dqn.config import VARIANTS

    readme = (REPO / "README.md").read_text()
    for variant in VARIANTS:
        assert re.search(rf"`{variant.flag}[`= ]", readme), variant.flag


@pytest.mark.parametrize("args, message", [
    (["--optimizer=adam", "--rmsprop-epsilon=0.1"],
     "--rmsprop-epsilon is a setting of --optimizer=rmsprop; this run's optimizer is adam"),
    (["--optimizer=adam", "--rmsprop-rho=0.9"],
     "--rmsprop-rho is a setting of --optimizer=rmsprop; this run's optimizer is adam"),
    (["--optimizer=adam", "--lr=0"], "--lr must be positive"),
    (["--optimizer=sgd"], "argument --optimizer: invalid choice: 'sgd'"),
    (["--loss=l1"], "argument --loss: invalid choice: 'l1'"),
], ids=["rmsprop-epsilon", "rmsprop-rho", "zero-lr", "optimizer", "loss"])
@pytest.mark.parametrize("algo", [ALGO_FAST_DQN, ALGO_DQN])
def test_a_flag_of_the_other_optimizer_is_refused_in_one_line(tmp_path, capsys, algo, args,
                                                             message):
    """In this process: each refusal comes before TensorFlow is needed."""
    try:
        status = launch.main(["--game=breakout", f"--logdir={tmp_path / 'run'}", *args], algo)
    except SystemExit as exit_:  # argparse's refusals
        status = exit_.code
    err = capsys.readouterr().err
    assert status == 2, err
    assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------ checkpoints


def adam_network(seed: int = 3) -> Learner:
    return make_learner(Config(optimizer="adam", lr=1e-3, loss="mse", seed=seed,
                                 xla="off"), N_ACTIONS)


def all_variables(network: Learner) -> list[np.ndarray]:
    return [np.array(v.numpy()) for v in
            [*network.online.variables, *network.target.variables,
             *network.optimizer.variables]]


def test_an_adam_network_restored_from_its_checkpoint_continues_as_if_never_stopped(tmp_path):
    """Stopped after 2 updates, restored into a fresh network, 2 more updates: the weights,
    Adam's moments and its step count are the straight run's of 4 updates, bit for bit
    (a moment or the step count left at zero changes the bias correction)."""
    batches = [random_batch(seed, size=8, n_actions=N_ACTIONS) for seed in range(4)]
    straight = adam_network()
    for batch in batches:
        straight.update(batch, 1)

    stopped = adam_network()
    for batch in batches[:2]:
        stopped.update(batch, 1)
    prefix = str(tmp_path / "ckpt")
    stopped.checkpoint().write(prefix)
    resumed = adam_network(seed=4)  # other initial weights: all must come from the file
    resumed.restore(prefix)
    assert int(resumed.optimizer.iterations.numpy()) == 2
    for batch in batches[2:]:
        resumed.update(batch, 1)
    for got, wanted in zip(all_variables(resumed), all_variables(straight), strict=True):
        np.testing.assert_array_equal(got, wanted)


@pytest.mark.parametrize("saved, restored", [("rmsprop", "adam"), ("adam", "rmsprop")])
def test_a_checkpoint_of_one_optimizer_is_refused_by_the_other(tmp_path, saved, restored):
    prefix = str(tmp_path / "ckpt")
    make_learner(Config(optimizer=saved, xla="off"), N_ACTIONS).checkpoint().write(prefix)
    other = make_learner(Config(optimizer=restored, xla="off"), N_ACTIONS)
    with pytest.raises(ValueError) as error:
        other.restore(prefix)
    assert str(error.value) == (f"cannot restore the networks from {prefix}: it holds the "
                                f"slots of --optimizer={saved}, and this run's optimizer is "
                                f"{restored}")


def test_a_resume_with_another_optimizer_is_refused_in_one_line(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    config = Config(game="breakout", timesteps=1000, logdir=str(run_dir))
    (run_dir / "config.json").write_text(json.dumps({"algo": ALGO_FAST_DQN,
                                                     **dataclasses.asdict(config)}))
    status = launch.main(["--resume", str(run_dir), "--optimizer=adam"], ALGO_FAST_DQN)
    err = capsys.readouterr().err
    assert status == 2 and len(err.splitlines()) == 1, err
    assert "may be given with --resume; got --optimizer" in err


# ------------------------------------------------------------------- both trainers, run


@pytest.mark.slow
@pytest.mark.parametrize("script", [RUN_FAST_DQN, RUN_DQN])
def test_both_trainers_train_and_resume_with_adam_and_mse(tmp_path, capsys, script):
    """A tiny run of each trainer with Dopamine's optimizer and loss, then a resume that
    extends it: config.json records them, the checkpoint's Adam slots are read back (a
    resume restores with every variable matched, or refuses), and a copy whose config.json
    was edited to RMSProp is refused in one line."""
    run_dir = tmp_path / "run"
    args = [*(FAST if script == RUN_FAST_DQN else TINY), SMALL_BATCH, "--timesteps=800",
            "--evaluate=0", "--xla=off", "--optimizer=adam", "--loss=mse",
            f"--logdir={run_dir}"]
    first = run_in_process(script, args, capsys)
    assert first.returncode == 0, first.stderr[-3000:]
    saved = json.loads((run_dir / "config.json").read_text())
    assert (saved["optimizer"], saved["loss"], saved["lr"]) == ("adam", "mse", 6.25e-5)
    # The same checkpoint under a config.json edited to Nature's optimizer: refused.
    edited = tmp_path / "edited"
    shutil.copytree(run_dir, edited)
    (edited / "config.json").write_text(json.dumps({**saved, "optimizer": "rmsprop",
                                                    "logdir": str(edited)}))
    refused = run_in_process(script, ["--resume", str(edited), "--timesteps=1200"], capsys)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert len(refused.stderr.splitlines()) == 1, refused.stderr
    assert ("holds the slots of --optimizer=adam, and this run's optimizer is rmsprop"
            in refused.stderr)

    resumed = run_in_process(script, ["--resume", str(run_dir), "--timesteps=1200"], capsys)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert resumed.stdout.startswith(f"resuming from {run_dir / CHECKPOINT} at step "), \
        resumed.stdout
    assert summary(run_dir)["finished"] is True


@pytest.mark.parametrize("optimizer", config_module.OPTIMIZERS)
@pytest.mark.parametrize("loss", config_module.LOSSES)
def test_every_choice_of_the_flags_makes_an_update(optimizer, loss):
    """Each name --optimizer and --loss offer (config's lists, the only ones) is one the
    update rule makes: a name without its implementation would be a flag that fails only
    once the network is built."""
    online, target = LinearQ(ONLINE_W), LinearQ(TARGET_W)
    made = update_rule.make_optimizer(optimizer, lr=0.1, rmsprop_rho=0.95, rmsprop_epsilon=0.01)
    stats = dqn_update(online, target, made, hand_made_batch(0.9), loss=loss)
    assert np.isfinite(float(stats.loss)) and float(stats.loss) > 0
    assert not np.allclose(online.weights.numpy(), ONLINE_W)


def test_a_name_the_update_rule_does_not_make_is_refused():
    with pytest.raises(ValueError, match="unknown optimizer 'sgd'"):
        update_rule.make_optimizer("sgd", lr=1e-4, rmsprop_rho=0.95, rmsprop_epsilon=0.01)
    with pytest.raises(ValueError, match="unknown loss 'l1'"):
        update_rule.loss_named("l1")
