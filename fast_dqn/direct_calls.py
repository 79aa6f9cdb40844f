"""Calling a traced TensorFlow function with less host work per call.

For the loops' hot calls (a query per round, an update call per K updates) the trace is
fixed and the inputs are tensors in the traced order, so `DirectCall` runs the traced graph
function (`AtomicFunction.call_flat`) without the ordinary call's argument binding, trace
lookup and tape checks; the results are the same bit for bit (tests/test_direct_calls.py).
`call_flat` is not public API: TensorFlow is pinned, and where it is missing `DirectCall`
falls back to the ordinary call (`DirectCall.direct` says which).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from fast_dqn.host_arrays import is_tensor_aligned
from fast_dqn.tensorflow_start import quiet_tensorflow_start

with quiet_tensorflow_start():
    import tensorflow as tf


class DirectCall:
    """One trace of a `tf.function`, its leading variable arguments and its captures bound,
    called with the rest of its inputs as tensors in the traced order."""

    def __init__(self, function: Any, *specs: tf.TensorSpec,
                 variables: Sequence[tf.Variable] = ()):
        """Args:
            function: a `tf.function`.
            specs: the tensor inputs that each call passes, after `variables`.
            variables: the leading arguments, the same variables at every call.
        """
        self._variables = tuple(variables)
        self._concrete = function.get_concrete_function(*self._variables, *specs)
        self._leading = [variable.handle for variable in self._variables]
        self._captured = list(self._concrete.captured_inputs)
        atomic = getattr(self._concrete, "_inference_function", None)
        definition = getattr(atomic, "cached_definition", None)
        expected = len(self._leading) + len(specs) + len(self._captured)
        self.direct = (callable(getattr(atomic, "call_flat", None)) and definition is not None
                       and len(definition.signature.input_arg) == expected)
        self._atomic = atomic if self.direct else None

    def __call__(self, *tensors: tf.Tensor) -> Sequence[tf.Tensor]:
        """Runs the trace; returns its flat outputs (empty for a function returning None)."""
        if self._atomic is not None:
            return self._atomic.call_flat(*self._leading, *tensors, *self._captured) or ()
        outputs = self._concrete(*self._variables, *tensors)
        return () if outputs is None else tf.nest.flatten(outputs)


# (purpose, call, tensors) -> the call's outputs: runs one hot call on its inputs.
Dispatch = Callable[[str, DirectCall, list], Sequence[tf.Tensor]]


def run_call(purpose: str, call: DirectCall, tensors: list[tf.Tensor]) -> Sequence[tf.Tensor]:
    """The ordinary dispatch: runs `call` on its inputs, now tensors."""
    return call(*tensors)


class DirectCalls:
    """A network's hot calls, each traced once per purpose and input shapes, then called
    directly: the ordinary call's argument matching costs more host time than the rest of
    the call (docs/throughput.md). `dispatch` runs a call on its inputs; the simulated GPU
    passes one that times the device's work from there."""

    def __init__(self, dispatch: Dispatch = run_call):
        self._dispatch = dispatch
        self.calls: dict[tuple, DirectCall] = {}

    def call(self, purpose: str, function: Any, arrays: list[np.ndarray],
             variables: Sequence[tf.Variable] = (), any_count: bool = False,
             borrow: bool = False) -> Sequence[tf.Tensor]:
        """function(*variables, *arrays) by its trace for arrays of these shapes (with
        `any_count`, of any length along their first axis). With `borrow` the arrays are
        lent, not copied (`borrowed_tensor`): only for a caller that reads the outputs
        before it changes them. Returns the flat outputs."""
        shapes = [(None, *array.shape[1:]) if any_count else array.shape for array in arrays]
        key = (purpose, *(variable.ref() for variable in variables),
               *((shape, array.dtype.str) for shape, array in zip(shapes, arrays)))
        call = self.calls.get(key)
        if call is None:
            specs = [tf.TensorSpec(shape, tf.as_dtype(array.dtype))
                     for shape, array in zip(shapes, arrays)]
            call = DirectCall(function, *specs, variables=variables)
            self.calls[key] = call
        to_tensor = borrowed_tensor if borrow else tf.constant
        return self._dispatch(purpose, call, [to_tensor(array) for array in arrays])


def borrowed_tensor(array: np.ndarray) -> tf.Tensor:
    """A CPU tensor that reads `array`'s memory through DLPack instead of copying it, as
    `tf.constant` does once per round for the samplers' states (docs/throughput.md).

    The tensor sees later changes to `array`: only for a call whose results are read
    (`.numpy()`, which waits for the call's use of its inputs) before `array` changes.
    Arrays not aligned for TensorFlow's kernels (`host_arrays.aligned_zeros`), or refused by
    DLPack, are copied.
    """
    if not (array.flags.c_contiguous and is_tensor_aligned(array)):
        return tf.constant(array)
    try:
        return tf.experimental.dlpack.from_dlpack(array.__dlpack__())
    except (AttributeError, BufferError, TypeError, ValueError, tf.errors.OpError):
        return tf.constant(array)
