"""Tests of the environment pools (fast_dqn/env_pools.py); CPU only, no TensorFlow."""

from __future__ import annotations

import threading
from typing import Callable

import numpy as np
import pytest

from fast_dqn.atari import AtariStep, GameSettings
from fast_dqn.env_pools import (ALE_SEEDS, GroupedPool, PoolStep, PoolStopped, ThreadEnvPool,
                               VectorEnvPool, ale_seeds, make_env_pool)

DEADLINE_S = 60.0  # a call that takes longer than this counts as a hang


def make_pool(backend: str, num_envs: int = 2, game: str = "breakout", seed: int = 0,
              **kwargs):
    settings = GameSettings(game, **({"noop_max": 0} | kwargs))
    return make_env_pool(backend, settings, num_envs, seed=seed)


def finishes(fn: Callable[[], object]) -> object:
    """Runs fn in a helper thread; fails the test if it does not return within the deadline.
    Returns fn's result, or the exception it raised."""
    outcome: list[object] = []

    def target() -> None:
        try:
            outcome.append(fn())
        except BaseException as error:  # handed to the test
            outcome.append(error)

    helper = threading.Thread(target=target, name="test-deadline", daemon=True)
    helper.start()
    helper.join(DEADLINE_S)
    assert not helper.is_alive(), f"call did not return within {DEADLINE_S} s"
    return outcome[0]


def sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("sampler-")]


class FakeEnv:
    """A tiny stand-in for AtariEnv: frames hold the step count; can fail on demand."""

    n_actions = 3

    def __init__(self, index: int, fail_at_step: int | None = None):
        self.index = index
        self.fail_at_step = fail_at_step
        self.steps = 0
        self.closed = False
        self.thread_name = threading.current_thread().name

    def reset(self, seed: int | None = None) -> np.ndarray:
        self.steps = 0
        return np.full((84, 84), self.index, np.uint8)

    def step(self, action: int) -> AtariStep:
        self.steps += 1
        if self.steps == self.fail_at_step:
            raise RuntimeError(f"boom in env {self.index}")
        frame = np.full((84, 84), self.steps % 256, np.uint8)
        return AtariStep(frame, float(action), False, False, False, 0)

    def close(self) -> None:
        self.closed = True


def test_machados_settings_give_18_actions_and_terminals_only_at_game_over():
    # 500 rounds: 4 games end (2 by round 300); here a lost life is no terminal.
    actions = np.random.default_rng(1).integers(0, 18, size=(500, 2))
    runs = {}
    for backend in ("vector", "threads"):
        pool = make_pool(backend, life_loss_terminal=False, full_action_set=True)
        assert pool.n_actions == 18
        runs[backend] = record(pool, actions)
    for name in PoolStep._fields:
        assert np.array_equal(runs["vector"][name], runs["threads"][name]), name
    run = runs["threads"]
    assert run["game_overs"].sum() >= 2, "random play should end a few breakout games"
    np.testing.assert_array_equal(run["terminals"], run["game_overs"])


@pytest.mark.parametrize("backend", ["vector", "threads"])
def test_pool_shapes_and_dtypes(backend):
    pool = make_pool(backend, num_envs=3, game="pong")
    frames = pool.reset(seed=1)
    step = pool.step(np.zeros(3, np.int64))
    pool.close()
    assert pool.num_envs == 3 and pool.n_actions == 6
    assert frames.shape == (3, 84, 84) and frames.dtype == np.uint8
    assert isinstance(step, PoolStep)
    assert step.frames.shape == (3, 84, 84) and step.frames.dtype == np.uint8
    assert step.rewards.shape == (3,) and step.rewards.dtype == np.float32
    for flags in (step.terminals, step.episode_ends, step.game_overs):
        assert flags.shape == (3,) and flags.dtype == np.bool_


def record(pool, actions: np.ndarray) -> dict[str, np.ndarray]:
    steps = [pool.step(a) for a in actions]
    pool.close()
    return {name: np.stack([getattr(s, name) for s in steps]) for name in PoolStep._fields}


def counted_lengths(game_overs: np.ndarray) -> np.ndarray:
    """The (rounds, W) game lengths a pool should report, counted round by round: the agent
    steps since the env's previous game over (or its start) where a game ends, else 0."""
    lengths = np.zeros(game_overs.shape, np.int64)
    since = np.zeros(game_overs.shape[1], np.int64)
    for round_index, ended in enumerate(game_overs):
        since += 1
        lengths[round_index] = np.where(ended, since, 0)
        since[ended] = 0
    return lengths


@pytest.mark.parametrize("steps, max_episode_steps", [(400, 27_000), (120, 25)])
def test_backends_give_identical_runs(steps, max_episode_steps):
    actions = np.random.default_rng(0).integers(0, 4, size=(steps, 2))
    runs = {}
    for backend in ("vector", "threads"):
        pool = make_pool(backend, max_episode_steps=max_episode_steps)
        runs[backend] = record(pool, actions)
    for name in PoolStep._fields:
        assert np.array_equal(runs["vector"][name], runs["threads"][name]), name
    run = runs["threads"]
    assert (run["terminals"] & ~run["game_overs"]).any(), "the run should lose a life"
    assert run["game_overs"].any(), "the run should end a game"
    np.testing.assert_array_equal(run["game_lengths"], counted_lengths(run["game_overs"]))
    if max_episode_steps < steps:
        assert (run["episode_ends"] & ~run["terminals"]).any(), "the run should truncate"


@pytest.mark.parametrize("backend", ["vector", "threads"])
def test_env_i_is_seeded_seed_plus_i(backend):
    settings = {"noop_max": 30, "sticky_actions": 0.25}
    actions = np.random.default_rng(1).integers(0, 4, size=(40, 3))
    pool = make_pool(backend, num_envs=3, seed=10, **settings)
    first = pool.reset(seed=10)
    run = record(pool, actions)
    single = make_pool(backend, num_envs=1, seed=12, **settings)
    single_first = single.reset(seed=12)
    single_run = record(single, actions[:, 2:3])
    assert np.array_equal(first[2], single_first[0])
    assert np.array_equal(run["frames"][:, 2], single_run["frames"][:, 0])


def test_ale_seeds_are_seed_plus_i_wherever_that_fits():
    """Runs with ordinary seeds keep their env seeds; larger ones wrap into ale-py's range."""
    assert ale_seeds(0, 3).tolist() == [0, 1, 2]
    assert ale_seeds(1_000_003 * 200 + 7, 2).tolist() == [200_000_607, 200_000_608]
    assert ale_seeds(ALE_SEEDS - 2, 3).tolist() == [ALE_SEEDS - 2, ALE_SEEDS - 1, 0]
    assert ale_seeds(2**32 + 5, 1).tolist() == [5]
    assert ale_seeds(2**80, 2).tolist() == [0, 1]


def test_vector_pool_takes_seeds_beyond_ales_range():
    """ale-py's vector env raised a pybind11 TypeError for seeds of 2**31 and more."""
    settings = {"noop_max": 30, "sticky_actions": 0.25}
    actions = np.random.default_rng(1).integers(0, 4, size=(40, 3))
    pool = make_pool("vector", num_envs=3, seed=ALE_SEEDS - 2, **settings)
    first = pool.reset(seed=ALE_SEEDS - 2)  # envs seeded 2**31 - 2, 2**31 - 1 and 0
    run = record(pool, actions)
    single = make_pool("vector", num_envs=1, seed=0, **settings)
    single_first = single.reset(seed=0)
    single_run = record(single, actions[:, 2:3])
    assert np.array_equal(first[2], single_first[0])
    assert np.array_equal(run["frames"][:, 2], single_run["frames"][:, 0])
    huge = make_pool("vector", num_envs=2, seed=2**32 - 1 + 1_000_003 * 5000, **settings)
    huge.reset(seed=2**32 - 1 + 50_000_000)  # a resumed run's seed + step
    huge.close()


@pytest.mark.parametrize("backend", ["vector", "threads"])
def test_bad_actions_raise_value_error(backend):
    # ale-py 0.12.1's vector env never returns from an out-of-range action: check first.
    pool = make_pool(backend)
    for bad in (np.array([0, 4]), np.array([-1, 0]), np.array([0]), np.array([0.0, 1.0])):
        error = finishes(lambda: pool.step(bad))
        assert isinstance(error, ValueError) and "actions" in str(error), bad
    pool.close()


def test_run_in_env_threads_runs_in_each_envs_thread():
    pool = ThreadEnvPool(lambda i: FakeEnv(i), num_envs=3)
    names = pool.run_in_env_threads(lambda i: (i, threading.current_thread().name))
    owners = pool.run_in_envs(lambda i, env: env.thread_name)
    pool.close()
    assert names == [(0, "sampler-0"), (1, "sampler-1"), (2, "sampler-2")]
    assert owners == ["sampler-0", "sampler-1", "sampler-2"]


def test_vector_run_in_env_threads_runs_in_the_caller():
    pool = VectorEnvPool(GameSettings("pong", noop_max=0, max_episode_steps=100), 2)
    names = pool.run_in_env_threads(lambda i: (i, threading.current_thread().name))
    pool.close()
    assert names == [(0, threading.current_thread().name), (1, threading.current_thread().name)]


def test_sampler_exception_is_raised_by_step_without_hanging():
    envs: list[FakeEnv] = []

    def factory(i: int) -> FakeEnv:
        envs.append(FakeEnv(i, fail_at_step=3 if i == 1 else None))
        return envs[-1]

    pool = ThreadEnvPool(factory, num_envs=3)
    pool.reset(seed=0)
    for _ in range(2):
        pool.step(np.zeros(3, np.int64))
    error = finishes(lambda: pool.step(np.zeros(3, np.int64)))
    assert isinstance(error, RuntimeError) and "boom in env 1" in str(error)
    assert any("sampler-1" in note for note in getattr(error, "__notes__", []))
    finishes(pool.close)
    assert not sampler_threads()
    assert all(env.closed for env in envs)


def test_env_creation_failure_is_raised_by_constructor_and_threads_stop():
    def factory(i: int) -> FakeEnv:
        if i == 2:
            raise OSError("no ROM for env 2")
        return FakeEnv(i)

    error = finishes(lambda: ThreadEnvPool(factory, num_envs=3))
    assert isinstance(error, OSError) and "no ROM for env 2" in str(error)
    assert not sampler_threads()


@pytest.mark.parametrize("backend", ["vector", "threads"])
def test_close_stops_threads_and_is_idempotent(backend):
    pool = make_pool(backend, num_envs=2)
    assert len(sampler_threads()) == (2 if backend == "threads" else 0)
    finishes(pool.close)
    finishes(pool.close)
    assert not sampler_threads()
    with pytest.raises(RuntimeError, match="closed"):
        pool.step(np.zeros(2, np.int64))


@pytest.mark.parametrize("backend", ["vector", "threads", "serial"])
def test_a_step_returns_new_frame_arrays_that_later_steps_leave_alone(backend):
    """`acting.Actor` keeps the frames of the last step, not a copy, as the next
    transition's frame: that needs every step's frames to be arrays of their own."""
    pool = make_pool(backend, num_envs=3, game="pong")
    rng = np.random.default_rng(0)
    kept = []
    for _ in range(40):
        frames = pool.step(rng.integers(0, pool.n_actions, 3)).frames
        kept.append((frames, frames.copy()))
    pool.close()
    for frames, copy in kept:
        np.testing.assert_array_equal(frames, copy)
    assert len({frames.ctypes.data for frames, _ in kept[-2:]}) == 2


@pytest.mark.parametrize("backend", ["vector", "threads"])
def test_integer_actions_of_any_width_are_taken(backend):
    frames = []
    for dtype in (np.int64, np.int32, np.uint8):
        pool = make_pool(backend, num_envs=2, game="pong")
        steps = [pool.step(np.array([a, 5 - a], dtype)) for a in (0, 1, 2, 3, 4, 5) * 5]
        pool.close()
        frames.append(np.stack([step.frames for step in steps]))
    np.testing.assert_array_equal(frames[0], frames[1])
    np.testing.assert_array_equal(frames[0], frames[2])


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32, np.int64, np.uint64])
def test_actions_outside_the_action_set_are_refused_whatever_their_integer_width(dtype):
    from fast_dqn.env_pools import _check_actions
    n_actions = 6
    valid = np.array([0, 5, 3], dtype=dtype)
    assert _check_actions(valid, 3, n_actions).tolist() == [0, 5, 3]
    with pytest.raises(ValueError, match=r"within \[0, 6\)"):
        _check_actions(np.array([0, 6, 1], dtype=dtype), 3, n_actions)
    if np.dtype(dtype).kind == "i":
        with pytest.raises(ValueError, match=r"within \[0, 6\)"):
            _check_actions(np.array([0, -1, 1], dtype=dtype), 3, n_actions)
        with pytest.raises(ValueError, match=r"within \[0, 6\)"):
            _check_actions(np.array([np.iinfo(dtype).min, 1, 1], dtype=dtype), 3, n_actions)
    with pytest.raises(ValueError, match="must be 3 integers"):
        _check_actions(valid[:2], 3, n_actions)
    with pytest.raises(ValueError, match="must be 3 integers"):
        _check_actions(valid.astype(np.float32), 3, n_actions)
    every_other = np.array([1, -7, 2, 9, 4, 0], dtype=np.int64)[::2]  # strided: a view
    assert _check_actions(every_other, 3, n_actions).tolist() == [1, 2, 4]


@pytest.mark.parametrize("backend", ["vector", "threads", "serial"])
def test_a_step_sent_and_received_in_two_calls_is_the_step(backend):
    """The training loop works while the envs step (`send`, then `receive`); the rounds it
    gets are those of `step`, and the caller may change its action array meanwhile."""
    actions = np.random.default_rng(2).integers(0, 4, size=(150, 2))
    stepped = record(make_pool(backend, max_episode_steps=60), actions)
    pool = make_pool(backend, max_episode_steps=60)
    received = []
    for round_actions in actions:
        sent = round_actions.copy()
        pool.send(sent)
        sent[:] = 3 - sent  # the caller's array, changed before the round is received
        received.append(finishes(pool.receive))
    pool.close()
    for name in PoolStep._fields:
        np.testing.assert_array_equal(stepped[name],
                                      np.stack([getattr(s, name) for s in received]), name)
    assert stepped["game_overs"].any(), "the run should end a game"


@pytest.mark.parametrize("backend", ["vector", "threads", "serial"])
def test_one_round_at_a_time(backend):
    pool = make_pool(backend)
    with pytest.raises(RuntimeError, match="needs a send"):
        pool.receive()
    pool.send(np.zeros(2, np.int64))
    with pytest.raises(RuntimeError, match="under way"):
        pool.send(np.zeros(2, np.int64))
    with pytest.raises(RuntimeError, match="under way"):
        pool.step(np.zeros(2, np.int64))
    with pytest.raises(RuntimeError, match="under way"):
        pool.reset(seed=0)
    assert isinstance(finishes(pool.receive), PoolStep)
    pool.step(np.zeros(2, np.int64))  # and the pool goes on as before
    finishes(pool.close)


def test_a_pool_closed_with_a_round_under_way_closes():
    for backend in ("vector", "threads"):
        pool = make_pool(backend)
        pool.send(np.zeros(2, np.int64))
        finishes(pool.close)
    assert not sampler_threads()


# -- a pool made and reset in groups (the evaluation's) -------------------------------------


@pytest.mark.parametrize("backend", ["vector", "threads"])
def test_a_grouped_pool_plays_as_one_pool_of_its_envs(backend):
    """Env i of a grouped pool is env i of one pool with the same seed: the same frames,
    rewards and flags for the same actions (with the no-ops and sticky actions, which draw
    from each env's seed)."""
    settings = GameSettings("pong", noop_max=30, sticky_actions=0.25, max_episode_steps=40)
    # 3 envs in groups of 2: a whole group and a short one, seeded from its first env.
    whole = make_env_pool(backend, settings, 3, seed=11)
    grouped = GroupedPool(lambda first, n: make_env_pool(backend, settings, n, seed=11 + first),
                          3, 2, should_stop=lambda: False)
    try:
        np.testing.assert_array_equal(grouped.reset(11), whole.reset(11))
        rng = np.random.default_rng(0)
        for _ in range(60):  # through the 40-step cap
            actions = rng.integers(0, whole.n_actions, size=3)
            for name, a, b in zip(PoolStep._fields, grouped.step(actions), whole.step(actions)):
                np.testing.assert_array_equal(a, b, err_msg=name)
    finally:
        grouped.close()
        whole.close()


class CountedPool:
    """A pool that only records that it was made, reset and closed."""

    def __init__(self, first: int, num_envs: int, events: list):
        self.first, self.num_envs, self.n_actions, self.events = first, num_envs, 3, events
        events.append(("made", first))

    def reset(self, seed: int) -> np.ndarray:
        self.events.append(("reset", self.first, seed))
        return np.zeros((self.num_envs, 84, 84), np.uint8)

    def close(self) -> None:
        self.events.append(("closed", self.first))


def test_a_grouped_pool_stops_between_two_groups_and_closes_what_it_made():
    """Regression: an evaluation of 256 games made and reset its envs in one call each (54
    and 25 s here), and a stop waited for them. Now a stop waits for one group."""
    events: list = []
    stop_after = {"made": 2}

    def should_stop() -> bool:
        return sum(event[0] == "made" for event in events) >= stop_after["made"]

    with pytest.raises(PoolStopped):
        GroupedPool(lambda first, n: CountedPool(first, n, events), 10, 4, should_stop)
    assert events == [("made", 0), ("made", 4), ("closed", 0), ("closed", 4)]

    events.clear()
    stop_after["made"] = 99
    pool = GroupedPool(lambda first, n: CountedPool(first, n, events), 10, 4, should_stop)
    assert [event for event in events if event[0] == "made"] == [("made", 0), ("made", 4),
                                                                  ("made", 8)]
    events.clear()
    stop_after["made"] = 0  # asked to stop from now on: the first reset already stops
    with pytest.raises(PoolStopped):
        pool.reset(100)
    assert events == []
    stop_after["made"] = 99
    assert pool.reset(100).shape == (10, 84, 84)
    assert events == [("reset", 0, 100), ("reset", 4, 104), ("reset", 8, 108)]


class _BuiltWith(Exception):
    """Raised by a stand-in vector env, carrying the keywords it was built with."""


def test_the_vector_env_is_built_from_the_settings_pipeline(monkeypatch):
    """The pipeline is declared once, in `GameSettings`: the vector env takes the Nature
    steps from it (4 frames per step, 84x84 grayscale, FIRE at reset) and the run's settings,
    the cap counted in frames (here 100 agent steps = 400 frames)."""
    def built_with(game, num_envs, **options):
        raise _BuiltWith({"game": game, "num_envs": num_envs, **options})

    monkeypatch.setattr("fast_dqn.env_pools.AtariVectorEnv", built_with)
    settings = GameSettings("pong", noop_max=7, sticky_actions=0.25, life_loss_terminal=False,
                            full_action_set=True, max_episode_steps=100)
    with pytest.raises(_BuiltWith) as built:
        VectorEnvPool(settings, 3)
    options = built.value.args[0]
    assert {key: options[key] for key in (
        "game", "num_envs", "frameskip", "maxpool", "grayscale", "img_height", "img_width",
        "use_fire_reset", "noop_max", "repeat_action_probability", "life_loss_info",
        "full_action_space", "max_num_frames_per_episode", "reward_clipping",
        "episodic_life", "autoreset_mode")} == {
        "game": "pong", "num_envs": 3, "frameskip": 4, "maxpool": True, "grayscale": True,
        "img_height": 84, "img_width": 84, "use_fire_reset": True, "noop_max": 7,
        "repeat_action_probability": 0.25, "life_loss_info": False,
        "full_action_space": True, "max_num_frames_per_episode": 400,
        "reward_clipping": False, "episodic_life": False, "autoreset_mode": "SameStep"}
