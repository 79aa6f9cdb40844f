"""Reading back what a part saved (dqn_zoo's `get_state`/`set_state`), every key present,
of its type and within its range: a damaged or hand-edited manifest is refused in one line
(`StateError`, naming the key) before anything is changed."""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np


class StateError(ValueError):
    """A saved state is missing a key, or a value has the wrong type or range."""


def section(state: Any, key: str) -> Mapping[str, Any]:
    """`state[key]`, which must be a JSON object."""
    value = _get(state, key)
    if not isinstance(value, Mapping):
        raise StateError(f"'{key}' must be an object; got {_shown(value)}")
    return value


def integer(state: Any, key: str, low: int = 0, high: int | None = None) -> int:
    """`state[key]`, an integer within [low, high] (no upper bound if `high` is None)."""
    value = _get(state, key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise StateError(f"'{key}' must be an integer; got {_shown(value)}")
    if value < low or (high is not None and value > high):
        bound = f"[{low}, {high}]" if high is not None else f"at least {low}"
        raise StateError(f"'{key}' must be {'within ' if high is not None else ''}{bound}; "
                         f"got {value}")
    return value


def number(state: Any, key: str, low: float = -math.inf) -> float:
    """`state[key]`, a finite number of at least `low`."""
    return finite(_get(state, key), key, low)


def finite(value: Any, key: str, low: float = -math.inf) -> float:
    """`value` (found at `key`), a finite number of at least `low`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise StateError(f"'{key}' must be a finite number; got {_shown(value)}")
    if value < low:
        raise StateError(f"'{key}' must be at least {low}; got {value}")
    return float(value)


def numbers(state: Any, key: str, most: int, low: float = -math.inf) -> list[float]:
    """`state[key]`, a list of at most `most` finite numbers of at least `low`."""
    values = _get(state, key)
    if not isinstance(values, list) or len(values) > most:
        raise StateError(f"'{key}' must be a list of at most {most} numbers")
    return [finite(value, key, low) for value in values]


def boolean(state: Any, key: str) -> bool:
    value = _get(state, key)
    if not isinstance(value, bool):
        raise StateError(f"'{key}' must be true or false; got {_shown(value)}")
    return value


def _get(state: Any, key: str) -> Any:
    if not isinstance(state, Mapping):
        raise StateError(f"expected an object holding '{key}'")
    if key not in state:
        raise StateError(f"'{key}' is missing")
    return state[key]


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def generator_state(state: Mapping[str, Any], key: str) -> dict:
    """A saved PCG64 generator state, checked by loading it into a scratch generator."""
    value = section(state, key)
    try:
        np.random.PCG64().state = dict(value)
    except (ValueError, TypeError, KeyError) as error:
        raise StateError(f"'{key}' is not a PCG64 generator state ({error})") from None
    return dict(value)
