"""The Nature-DQN network (Mnih et al. 2015), or Wang et al.'s (2016) dueling form of it."""

from __future__ import annotations

import math
import random
from typing import Any

from fast_dqn.tensorflow_start import quiet_tensorflow_start
from fast_dqn.transitions import STATE_SHAPE

with quiet_tensorflow_start():
    import tensorflow as tf

keras = tf.keras


class ScaleGradient(keras.layers.Layer):
    """The identity going forward; scales the gradient flowing back through it."""

    def __init__(self, scale: float, **kwargs: Any):
        super().__init__(**kwargs)
        self.scale = scale

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        @tf.custom_gradient
        def identity(x: tf.Tensor):
            def gradient(upstream: tf.Tensor) -> tf.Tensor:
                return upstream * self.scale
            return tf.identity(x), gradient

        return identity(inputs)


def dueling_q_values(value: tf.Tensor, advantages: tf.Tensor) -> tf.Tensor:
    """Q = V + (A - mean over actions of A): Wang et al. (2016), equation (9)."""
    return value + advantages - tf.reduce_mean(advantages, axis=1, keepdims=True)


def build_nature_cnn(n_actions: int, name: str, seeds: random.Random,
                     dueling: bool = False, precision: str = "float32") -> keras.Model:
    """Conv 32x8x8/4, conv 64x4x4/2, conv 64x3x3/1, dense 512, dense n_actions; ReLU.

    Takes uint8 states (B, HISTORY, 84, 84), scaled and transposed on the device; each
    Glorot-uniform kernel is seeded from `seeds`, in layer order. `dueling`: Wang et al.'s
    (2016) value and advantage streams (dense 512, then 1 or `n_actions`), combined by
    `dueling_q_values`, their gradient into the last convolution scaled by 1/sqrt(2).
    `precision` "bfloat16": every layer computes in bfloat16 on float32 weights (Keras's
    "mixed_bfloat16" policy), and the Q-values leave the network cast to float32.
    """

    def glorot() -> keras.initializers.Initializer:
        # Keras's draw for an unseeded initializer, from `seeds`, not Python's global one.
        return keras.initializers.GlorotUniform(seed=seeds.randint(1, int(1e9)))

    # None: the layers' default, float32 (the global policy).
    mixed = keras.mixed_precision.DTypePolicy("mixed_bfloat16") if precision == "bfloat16" \
        else None
    states = keras.Input(STATE_SHAPE, dtype="uint8", name="states")
    x = keras.layers.Rescaling(1.0 / 255.0, dtype=mixed)(states)
    x = keras.layers.Permute((2, 3, 1), dtype=mixed)(x)  # channels-last, as CPU convolutions need
    x = keras.layers.Conv2D(32, 8, strides=4, activation="relu", kernel_initializer=glorot(),
                            dtype=mixed)(x)
    x = keras.layers.Conv2D(64, 4, strides=2, activation="relu", kernel_initializer=glorot(),
                            dtype=mixed)(x)
    x = keras.layers.Conv2D(64, 3, strides=1, activation="relu", kernel_initializer=glorot(),
                            dtype=mixed)(x)
    x = keras.layers.Flatten(dtype=mixed)(x)
    if not dueling:
        x = keras.layers.Dense(512, activation="relu", kernel_initializer=glorot(), dtype=mixed)(x)
        q_values = keras.layers.Dense(n_actions, kernel_initializer=glorot(), dtype=mixed)(x)
    else:
        x = ScaleGradient(1.0 / math.sqrt(2.0), name="scale_gradient", dtype=mixed)(x)
        value = keras.layers.Dense(512, activation="relu", kernel_initializer=glorot(),
                                   dtype=mixed)(x)
        value = keras.layers.Dense(1, kernel_initializer=glorot(), name="value",
                                   dtype=mixed)(value)
        advantages = keras.layers.Dense(512, activation="relu", kernel_initializer=glorot(),
                                        dtype=mixed)(x)
        advantages = keras.layers.Dense(n_actions, kernel_initializer=glorot(),
                                        name="advantages", dtype=mixed)(advantages)
        q_values = keras.layers.Lambda(lambda streams: dueling_q_values(*streams),
                                       name="dueling", dtype=mixed)([value, advantages])
    if mixed is not None:  # the TD targets, the loss, the TD errors and the argmax stay float32
        q_values = keras.layers.Activation("linear", dtype="float32", name="q_float32")(q_values)
    return keras.Model(states, q_values, name=name)


def greedy(network: Any, states: tf.Tensor) -> tf.Tensor:
    """argmax_a Q(s, a) of `network` for a batch of uint8 states."""
    return tf.argmax(network(states, training=False), axis=1, output_type=tf.int32)
