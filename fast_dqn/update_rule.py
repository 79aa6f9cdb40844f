"""The DQN learning rule, in one function: TD targets, the loss and the gradient step.

`dqn_update` is the whole rule, read top to bottom: the targets from the target network
(Mnih et al. 2015, or van Hasselt et al. 2016's Double DQN), the Huber loss on the TD error
summed over the minibatch, and one step of the optimizer on the online network. It is a
function of (online network, target network, optimizer, minibatch) and nothing else: the
network (fast_dqn/q_network.py) traces it, compiles it, loops it K times in one call and
dispatches it; a caller may hand the network another function of the same signature
(`QNetwork`'s `update_function`). TensorFlow's closest form of a pure update: it writes the
new weights and optimizer slots into their variables instead of returning them.

Nature's loss and optimizer (Mnih et al. 2015): the TD error is clipped to [-1, 1] in the
backward pass, which is the gradient of a Huber loss with delta 1; centered RMSProp with
learning rate 2.5e-4, rho 0.95 and epsilon 0.01 added inside the square root. The loss is
summed over the minibatch, not averaged: DeepMind's Lua code back-propagates each sample's
clipped TD error and accumulates the 32 gradients, and pfrl's Nature reproduction uses
`batch_accumulator="sum"`. With a mean the gradient is 32 times smaller while the optimizer's
epsilon stays 0.01, so most updates would be many times smaller than Nature's.

The minibatch is a `transitions.Batch` of tensors, read by column name: a column declared in
`transitions.MINIBATCH_COLUMNS` reaches this function from either frame store.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from fast_dqn.quiet_tensorflow import quiet_tensorflow_start
from fast_dqn.transitions import Batch

with quiet_tensorflow_start():
    import tensorflow as tf

keras = tf.keras


class UpdateStats(NamedTuple):
    """What one update reports (scalars): the loss per transition, as other tools plot it
    (the gradient is of the sum), and the mean Q(s, a) of the actions taken."""

    loss: tf.Tensor
    mean_q: tf.Tensor


# (online, target, optimizer, minibatch) -> stats: what the network's traced calls run.
UpdateFunction = Callable[[Any, Any, Any, Batch], UpdateStats]


def nature_rmsprop(lr: float, rho: float, epsilon: float) -> keras.optimizers.Optimizer:
    """Centered RMSProp without momentum; Keras 3 adds `epsilon` inside the square root, as
    DeepMind's update does (dqn/NeuralQLearner.lua)."""
    return keras.optimizers.RMSprop(learning_rate=lr, rho=rho, epsilon=epsilon, centered=True,
                                    momentum=0.0)


def huber(x: tf.Tensor, delta: float = 1.0) -> tf.Tensor:
    """0.5 x^2 for |x| <= delta, delta (|x| - delta / 2) beyond: its gradient is x clipped
    to [-delta, delta]."""
    abs_x = tf.abs(x)
    quadratic = tf.minimum(abs_x, delta)
    return 0.5 * tf.square(quadratic) + delta * (abs_x - quadratic)


def td_targets(online: Any, target: Any, batch: Batch, *, discount: float,
               double: bool) -> tf.Tensor:
    """r + discount * max_a' Q_target(s', a'), with no bootstrap from terminal transitions.

    With `double` (van Hasselt et al. 2016): r + discount * Q_target(s', a*), where
    a* = argmax_a' Q_online(s', a').
    """
    target_q = target(batch.next_states, training=False)
    if double:
        chosen = tf.argmax(online(batch.next_states, training=False), axis=1,
                           output_type=tf.int32)
        next_q = tf.gather(target_q, chosen, axis=1, batch_dims=1)
    else:
        next_q = tf.reduce_max(target_q, axis=1)
    not_terminal = 1.0 - tf.cast(batch.terminals, tf.float32)
    return batch.rewards + discount * not_terminal * next_q


def dqn_update(online: Any, target: Any, optimizer: Any, batch: Batch, *, discount: float,
               double: bool = False) -> UpdateStats:
    """One minibatch update of `online`: the summed Huber loss of its Q(s, a) against the TD
    targets, and one step of `optimizer` on its gradient."""
    targets = tf.stop_gradient(td_targets(online, target, batch, discount=discount,
                                          double=double))
    with tf.GradientTape() as tape:
        q = online(batch.states, training=True)
        q_taken = tf.gather(q, batch.actions, axis=1, batch_dims=1)
        per_transition = huber(targets - q_taken)
        loss = tf.reduce_sum(per_transition)
    gradients = tape.gradient(loss, online.trainable_variables)
    optimizer.apply_gradients(zip(gradients, online.trainable_variables))
    return UpdateStats(loss=tf.reduce_mean(per_transition), mean_q=tf.reduce_mean(q_taken))
