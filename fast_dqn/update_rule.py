"""The DQN learning rule, in one function: TD targets, the loss and the gradient step.

`dqn_update` is a function of (online network, target network, optimizer, minibatch) and
nothing else, read top to bottom as dqn_zoo's: the learner (fast_dqn/learner.py) traces,
compiles, loops and dispatches it, and may be handed another of the same signature.

Nature's rule (Mnih et al. 2015): the TD error clipped to [-1, 1] in the backward pass (the
gradient of a Huber loss with delta 1), and centered RMSProp with epsilon inside the square
root. The loss is summed over the minibatch, not averaged, as DeepMind's Lua code
accumulates the 32 samples' gradients and pfrl's reproduction uses
`batch_accumulator="sum"`: a mean makes the gradient 32 times smaller against the same
optimizer epsilon, and most steps many times smaller than Nature's.

Dopamine's JAX DQN (`--optimizer=adam --loss=mse`, docs/protocol.md): the squared TD error
without a factor 1/2, averaged; Adam as optax computes it (`DopamineAdam`).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from fast_dqn.tensorflow_start import quiet_tensorflow_start
from fast_dqn.transitions import Batch

with quiet_tensorflow_start():
    import tensorflow as tf

keras = tf.keras


class UpdateStats(NamedTuple):
    """What one update reports: the loss per transition, as other tools plot it (the
    gradient of the Huber loss is of the sum), the mean Q(s, a) of the actions taken, and
    each transition's TD error (what prioritized replay turns into priorities)."""

    loss: tf.Tensor
    mean_q: tf.Tensor
    td_errors: tf.Tensor


# (online, target, optimizer, minibatch) -> stats: what the network's traced calls run.
UpdateFunction = Callable[[Any, Any, Any, Batch], UpdateStats]


def nature_rmsprop(lr: float, rho: float, epsilon: float) -> keras.optimizers.Optimizer:
    """Centered RMSProp without momentum; Keras 3 adds `epsilon` inside the square root, as
    DeepMind's update does (dqn/NeuralQLearner.lua)."""
    return keras.optimizers.RMSprop(learning_rate=lr, rho=rho, epsilon=epsilon, centered=True,
                                    momentum=0.0)


# Dopamine's Adam settings (dopamine/jax/agents/dqn/dqn_agent.py, create_optimizer's
# defaults; its Atari configuration, dqn.gin, sets the same epsilon). Its learning rate is
# --lr's value with --optimizer=adam (fast_dqn/config.py).
ADAM_BETA_1 = 0.9
ADAM_BETA_2 = 0.999
ADAM_EPSILON = 1.5e-4


class DopamineAdam(keras.optimizers.Optimizer):
    """Adam as optax.adam computes it (Kingma and Ba 2015, Algorithm 1): with m and v the
    moving averages of the gradient and its square, t the step count from 1,

        variable -= lr * (m / (1 - beta_1^t)) / (sqrt(v / (1 - beta_2^t)) + epsilon)

    Keras's Adam adds epsilon before the bias correction, another step for the same
    epsilon. The moments are optimizer variables, so checkpoints hold them.
    """

    def __init__(self, learning_rate: float, epsilon: float = ADAM_EPSILON,
                 beta_1: float = ADAM_BETA_1, beta_2: float = ADAM_BETA_2,
                 name: str = "dopamine_adam"):
        super().__init__(learning_rate=learning_rate, name=name)
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon

    def build(self, var_list: list) -> None:
        if self.built:
            return
        super().build(var_list)
        self._first_moments, self._second_moments = self.add_optimizer_variables(
            var_list, ["first_moment", "second_moment"])

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        dtype = variable.dtype
        lr = tf.cast(learning_rate, dtype)
        gradient = tf.cast(gradient, dtype)
        step = tf.cast(self.iterations + 1, dtype)
        index = self._get_variable_index(variable)
        m, v = self._first_moments[index], self._second_moments[index]
        self.assign(m, (1 - self.beta_1) * gradient + self.beta_1 * m)
        self.assign(v, (1 - self.beta_2) * tf.square(gradient) + self.beta_2 * v)
        m_hat = m / (1 - tf.pow(tf.cast(self.beta_1, dtype), step))
        v_hat = v / (1 - tf.pow(tf.cast(self.beta_2, dtype), step))
        self.assign_sub(variable, lr * (m_hat / (tf.sqrt(v_hat) + self.epsilon)))

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(beta_1=self.beta_1, beta_2=self.beta_2, epsilon=self.epsilon)
        return config


def make_optimizer(name: str, *, lr: float, rmsprop_rho: float,
                   rmsprop_epsilon: float) -> keras.optimizers.Optimizer:
    """The optimizer `--optimizer` names (config.OPTIMIZERS): "rmsprop" (Nature's, with its
    rho and epsilon) or "adam" (Dopamine's)."""
    if name == "rmsprop":
        return nature_rmsprop(lr, rmsprop_rho, rmsprop_epsilon)
    if name == "adam":
        return DopamineAdam(lr)
    raise ValueError(f"unknown optimizer {name!r}")


def huber(x: tf.Tensor, delta: float = 1.0) -> tf.Tensor:
    """0.5 x^2 for |x| <= delta, delta (|x| - delta / 2) beyond: its gradient is x clipped
    to [-delta, delta]."""
    abs_x = tf.abs(x)
    quadratic = tf.minimum(abs_x, delta)
    return 0.5 * tf.square(quadratic) + delta * (abs_x - quadratic)


class Loss(NamedTuple):
    """A loss on the TD errors: each transition's term, and how the minibatch's terms make
    the loss whose gradient the optimizer steps on."""

    per_transition: Callable[[tf.Tensor], tf.Tensor]
    reduce: Callable[[tf.Tensor], tf.Tensor]


def loss_named(name: str) -> Loss:
    """The loss `--loss` names (config.LOSSES). huber: Nature's, summed (the module's
    docstring says why). mse: Dopamine's losses.mse_loss, (target - Q)^2 with no 1/2,
    averaged by its train step."""
    if name == "huber":
        return Loss(huber, tf.reduce_sum)
    if name == "mse":
        return Loss(tf.square, tf.reduce_mean)
    raise ValueError(f"unknown loss {name!r}")


def td_targets(online: Any, target: Any, batch: Batch, *, double: bool) -> tf.Tensor:
    """returns + discounts * max_a' Q_target(s', a'), the discount 0 at a terminal; with
    `double` (van Hasselt et al. 2016), Q_target(s', argmax_a' Q_online(s', a'))."""
    target_q = target(batch.next_states, training=False)
    if double:
        chosen = tf.argmax(online(batch.next_states, training=False), axis=1,
                           output_type=tf.int32)
        next_q = tf.gather(target_q, chosen, axis=1, batch_dims=1)
    else:
        next_q = tf.reduce_max(target_q, axis=1)
    return batch.returns + batch.discounts * next_q


def dqn_update(online: Any, target: Any, optimizer: Any, batch: Batch, *, double: bool = False,
               loss: str = "huber") -> UpdateStats:
    """One minibatch update of `online`: the loss `loss` names (`loss_named`; Nature's summed
    Huber loss by default) of its Q(s, a) against the TD targets, each transition's term
    weighted by the minibatch's importance-sampling weight, and one step of `optimizer` on
    its gradient."""
    chosen_loss = loss_named(loss)
    targets = tf.stop_gradient(td_targets(online, target, batch, double=double))
    with tf.GradientTape() as tape:
        q = online(batch.states, training=True)
        q_taken = tf.gather(q, batch.actions, axis=1, batch_dims=1)
        td_errors = targets - q_taken
        per_transition = chosen_loss.per_transition(td_errors)
        total = chosen_loss.reduce(batch.weights * per_transition)
    gradients = tape.gradient(total, online.trainable_variables)
    optimizer.apply_gradients(zip(gradients, online.trainable_variables))
    return UpdateStats(loss=tf.reduce_mean(per_transition), mean_q=tf.reduce_mean(q_taken),
                       td_errors=td_errors)
