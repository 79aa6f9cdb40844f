"""The modules one round of the fast trainer and one update call enter, read off a real run.

It trains a tiny fast run in this process and records, with a profiler hook, each call from
one fast_dqn module into another during the walks that docs/design.md ("One agent step, and
one update") describes and prints; tests/test_docs.py checks that they are its output:

    python tools/code_walk.py --functions
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import itertools
import sys
import tempfile
import threading
import unittest.mock
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # `python tools/code_walk.py` puts tools/, not the package, first

RUN_FLAGS = ["--game=breakout", "--workers=4", "--timesteps=1600", "--replay-capacity=5000",
             "--replay-start=400", "--target-update=400", "--max-episode-steps=400",
             "--exploration-steps=200", "--evaluate=0", "--checkpoint-every=0",
             "--batch-size=4", "--xla=off", "--seed=0"]
# A round inside an epoch (its sync points are at 400, 800, 1,200), with learning and
# exploration at their final epsilon.
ROUND_AT = 1_000
# The update calls left out before the one walked: the first calls trace TensorFlow's
# functions (Python runs the learning rule then); the walk is of a call like the run's others.
TRACED_CALLS = 3  # with K = 64, the epochs' calls are of 64 and 36 updates
PACKAGE = "fast_dqn"
_GENERATOR = inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR


class Walk:
    """One walk: the fast_dqn modules entered, in order, with the function each entry called,
    taken from the first recorded call whose modules `keep` accepts; `done` once taken."""

    def __init__(self, name: str, keep: Callable[[list[str]], bool] = lambda modules: True):
        self.name, self.keep, self.entries, self.done = name, keep, [], threading.Event()

    def line(self) -> str:
        modules = [module for module, _ in self.entries]
        return (f"{self.name}: {len(modules)} entries, {len(set(modules))} modules: "
                + " > ".join(modules))


def _module_of(frame: Any) -> str | None:
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    return name.removeprefix(PACKAGE + ".") if name.startswith(PACKAGE + ".") else None


def traced(function: Callable, when: Callable[[Any], bool], *walks: Walk) -> Callable:
    """`function` (a method), its walk recorded on the calls for which `when(self)` holds
    while one of `walks` is not taken, and given to each of those. A walk is the fast_dqn
    module that each Python call made on this thread enters from another module (a call
    within a module enters none), and the function called."""
    lock = threading.Lock()

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        with lock:
            record = not all(walk.done.is_set() for walk in walks) and when(self)
        if not record:
            return function(self, *args, **kwargs)
        entries: list[tuple[str, str]] = []

        def profile(frame: Any, event: str, arg: Any) -> None:
            if event != "call" or frame.f_code.co_flags & _GENERATOR:  # or a generator resumed
                return
            module = _module_of(frame)
            if module is not None and module != _module_of(frame.f_back):
                entries.append((module, frame.f_code.co_qualname))

        previous = sys.getprofile()
        sys.setprofile(profile)
        try:
            return function(self, *args, **kwargs)
        finally:
            sys.setprofile(previous)
            for walk in walks:
                if not walk.done.is_set() and walk.keep([module for module, _ in entries]):
                    walk.entries[:] = entries
                    walk.done.set()

    return wrapper


def after_calls(count: int) -> Callable[[Any], bool]:
    """A `when` that holds from the call after the first `count` on."""
    calls = itertools.count()
    return lambda instance: next(calls) >= count


def walks() -> list[Walk]:
    """Runs the tiny run and returns the walks of one round and one update call."""
    from fast_dqn import launch
    from fast_dqn.config import ALGO_FAST_DQN
    from fast_dqn.training_loops import FastDQN, LearnerThread

    found = [Walk("one round (FastDQN._act_round)"),
             Walk("one round in which a game ends", keep=lambda modules: "run_logs" in modules),
             Walk("one update call, drawing (LearnerThread._timed_draw)"),
             Walk("one update call, updating (LearnerThread._timed_update)")]
    learning = lambda loop: loop.counters.step >= ROUND_AT  # noqa: E731
    patched = {
        (FastDQN, "_act_round"): traced(FastDQN._act_round, learning, found[0], found[1]),
        (LearnerThread, "_timed_draw"): traced(
            LearnerThread._timed_draw, after_calls(TRACED_CALLS), found[2]),
        (LearnerThread, "_timed_update"): traced(
            LearnerThread._timed_update, after_calls(TRACED_CALLS), found[3]),
    }
    with contextlib.ExitStack() as stack:  # the methods restored at its end
        for (owner, name), wrapper in patched.items():
            stack.enter_context(unittest.mock.patch.object(owner, name, wrapper))
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        stack.enter_context(contextlib.redirect_stdout(sys.stderr))
        status = launch.main([*RUN_FLAGS, f"--logdir={scratch / 'run'}"], ALGO_FAST_DQN)
    if status != 0 or not all(walk.done.is_set() for walk in found):
        raise SystemExit(f"code_walk: the run ended with status {status} before each walk "
                         f"({[walk.done.is_set() for walk in found]})")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--functions", action="store_true",
                        help="also print each entry as module.function, one per line")
    args = parser.parse_args(argv)
    for walk in walks():
        print(walk.line())
        for number, entry in enumerate(walk.entries if args.functions else (), 1):
            print(f"  {number:2d}. {'.'.join(entry)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
