"""Host arrays that TensorFlow can read in place, without a copy.

TensorFlow's CPU kernels check that a tensor's memory starts on a multiple of
`TENSOR_ALIGNMENT` bytes and abort the process when it does not (a failed check in
tensor.cc, seen with a 16-byte-aligned array, NumPy's own alignment here). A tensor that
borrows an array's memory (`direct_calls.borrowed_tensor`) must therefore start there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

TENSOR_ALIGNMENT = 64  # bytes; Eigen's largest alignment, which TensorFlow's checks ask for


def is_tensor_aligned(array: np.ndarray) -> bool:
    return array.ctypes.data % TENSOR_ALIGNMENT == 0


def aligned_zeros(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """np.zeros(shape, dtype) whose memory starts on a multiple of TENSOR_ALIGNMENT bytes."""
    dtype = np.dtype(dtype)
    size = int(np.prod(shape)) * dtype.itemsize
    raw = np.zeros(size + TENSOR_ALIGNMENT, dtype=np.uint8)
    start = -raw.ctypes.data % TENSOR_ALIGNMENT
    return raw[start:start + size].view(dtype).reshape(shape)
