"""Host arrays that TensorFlow can read in place: its CPU kernels abort the process on a
tensor whose memory does not start on a multiple of `TENSOR_ALIGNMENT` bytes (NumPy aligns
to 16), so an array lent to it (`direct_calls.borrowed_tensor`) must start there."""

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
