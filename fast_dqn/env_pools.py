"""A pool of W Atari environments stepped in lock-step rounds, behind one interface.

Two backends give the same frames, rewards and flags for the same actions (without no-ops
and sticky actions, where no random draw is involved): `VectorEnvPool`, ale-py's
`AtariVectorEnv`, whose C++ threads step the emulators with the GIL released (the default);
and `ThreadEnvPool`, one `AtariEnv` per persistent Python sampler thread as in Daley & Amato
(2021), for fidelity to the paper (ale-py's `act` holds the GIL, so they do not emulate in
parallel). Env i of a pool seeded `seed` is seeded `seed + i`, as ale-py's vector env does.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable, NamedTuple, Protocol, TypeVar

import numpy as np
from ale_py.vector_env import AtariVectorEnv

from fast_dqn.atari import AtariEnv, AtariStep, GameSettings, games_over, make_atari_env

T = TypeVar("T")
SERIAL = "serial"  # the serial reference's pool: envs stepped in the caller's thread
ALE_SEEDS = 2**31  # ale-py's vector env takes seeds in [0, ALE_SEEDS - 1]


def ale_seeds(seed: int, num_envs: int) -> np.ndarray:
    """The seeds of a vector env's W envs: seed + i modulo 2**31 (ale-py takes C++ ints, -1
    meaning unseeded), so seeds that fit are unchanged and larger ones (a resumed run's
    seed + step) wrap around instead of failing inside ale-py."""
    return (int(seed) % ALE_SEEDS + np.arange(num_envs, dtype=np.int64)) % ALE_SEEDS


class PoolStep(NamedTuple):
    """One lock-step round of all W environments."""

    frames: np.ndarray  # (W, 84, 84) uint8; after an episode end, the next episode's first
    rewards: np.ndarray  # (W,) float32, raw game score changes
    terminals: np.ndarray  # (W,) bool, learning episode over without bootstrap
    episode_ends: np.ndarray  # (W,) bool, terminals or truncations
    game_overs: np.ndarray  # (W,) bool, the whole game ended (its score can be logged)
    # (W,) int64: the agent steps of the game that ended, 0 where none did. The envs count
    # a game's steps for the episode cap; the loops read its length here.
    game_lengths: np.ndarray


class EnvPool(Protocol):
    """W Atari environments stepped together; env i is seeded `seed + i`."""

    num_envs: int
    n_actions: int

    def reset(self, seed: int) -> np.ndarray:
        """Starts a new game in every env; returns the (W, 84, 84) uint8 first frames."""

    def step(self, actions: np.ndarray) -> PoolStep:
        """Steps env i with actions[i]; games that end are reset (see `PoolStep`)."""

    def send(self, actions: np.ndarray) -> None:
        """Starts `step(actions)` and returns while the envs step, so that the caller can
        work meanwhile; `receive` returns the round's `PoolStep`. One round at a time."""

    def receive(self) -> PoolStep:
        """Waits for the round that `send` started and returns it."""

    def run_in_env_threads(self, fn: Callable[[int], T]) -> list[T]:
        """Calls fn(i) for each env i, in env i's sampler (a thread, or the caller)."""

    def close(self) -> None:
        """Releases the environments (and stops sampler threads)."""


class OneCallStep:
    """`send` and `receive` for a pool whose `step` is one call, made by `receive`: nothing
    steps meanwhile, and the loop's order of work stays that of the other pools."""

    _sent: np.ndarray | None = None

    def step(self, actions: np.ndarray) -> PoolStep:
        raise NotImplementedError

    def send(self, actions: np.ndarray) -> None:
        _check_nothing_sent(self._sent is not None)
        self._sent = np.array(actions)  # the caller may reuse its array meanwhile

    def receive(self) -> PoolStep:
        _check_sent(self._sent is not None)
        actions, self._sent = self._sent, None
        return self.step(actions)


def _check_nothing_sent(in_flight: bool) -> None:
    if in_flight:
        raise RuntimeError("a round is already under way: receive() it before the next send()")


def _check_sent(in_flight: bool) -> None:
    if not in_flight:
        raise RuntimeError("receive() needs a send() first")


def _check_actions(actions: np.ndarray, num_envs: int, n_actions: int) -> np.ndarray:
    """The actions as 32- or 64-bit integers (what ale-py's vector env takes), checked."""
    actions = np.asarray(actions)
    if actions.shape != (num_envs,) or actions.dtype.kind not in "iu":
        raise ValueError(f"actions must be {num_envs} integers; got {actions.dtype} "
                         f"array of shape {actions.shape}")
    if actions.size and (actions.min() < 0 or actions.max() >= n_actions):
        raise ValueError(f"actions must be within [0, {n_actions}); got {actions.tolist()}")
    if actions.dtype in (np.int32, np.int64):
        return actions
    return actions.astype(np.int64)


class VectorEnvPool:
    """W games in ale-py's `AtariVectorEnv`, stepped by its C++ threads, built from the same
    `GameSettings` as `AtariEnv`: a life loss terminal without a game reset
    (`life_loss_info`), raw rewards, games reset in the step they end ("SameStep").

    The vector env does not say whether a terminated env was reset (game over) or only lost
    a life. A reset restarts the episode frame counter at the few FIRE and no-op frames,
    while a continuing game's grows; so a game ended when it terminated and its counter did
    not grow.
    """

    def __init__(self, settings: GameSettings, num_envs: int, *, num_threads: int = 0):
        self._env: AtariVectorEnv | None = AtariVectorEnv(
            settings.game, num_envs, stack_num=1, autoreset_mode="SameStep",
            life_loss_info=settings.life_loss_terminal, reward_clipping=False,
            episodic_life=False, noop_max=settings.noop_max,
            repeat_action_probability=settings.sticky_actions,
            full_action_space=settings.full_action_set,
            max_num_frames_per_episode=settings.max_episode_frames,
            frameskip=settings.frame_skip, maxpool=True, grayscale=settings.grayscale,
            img_height=settings.frame_size, img_width=settings.frame_size,
            use_fire_reset=settings.fire_at_reset, num_threads=num_threads)
        self.num_envs = num_envs
        self.n_actions: int = int(self._env.single_action_space.n)
        self._max_episode_steps = settings.max_episode_steps
        self._episode_frames = np.zeros(num_envs, np.int64)
        self._steps = np.zeros(num_envs, np.int64)  # agent steps since each game's reset
        self._no_game_over = np.zeros(num_envs, np.int64)
        self._no_game_over.flags.writeable = False
        self._in_flight = False  # sent and not yet received

    def reset(self, seed: int) -> np.ndarray:
        _check_nothing_sent(self._in_flight)
        obs, info = self._open_env().reset(seed=ale_seeds(seed, self.num_envs))
        self._episode_frames = info["episode_frame_number"].astype(np.int64)
        self._steps[:] = 0
        return obs[:, 0]

    def step(self, actions: np.ndarray) -> PoolStep:
        self.send(actions)
        return self.receive()

    def send(self, actions: np.ndarray) -> None:
        """Hands the actions to the C++ threads, which step the envs with the interpreter
        lock released while the caller goes on."""
        _check_nothing_sent(self._in_flight)
        actions = _check_actions(actions, self.num_envs, self.n_actions)
        self._open_env().send(actions)
        self._in_flight = True

    def receive(self) -> PoolStep:
        _check_sent(self._in_flight)
        self._in_flight = False
        obs, rewards, terminated, truncated, info = self._open_env().recv()
        self._steps += 1
        episode_frames = info["episode_frame_number"].astype(np.int64)
        restarted = terminated & (episode_frames <= self._episode_frames)
        game_overs = games_over(restarted, truncated, self._steps, self._max_episode_steps)
        self._episode_frames = episode_frames
        game_lengths = self._no_game_over
        if game_overs.any():  # most rounds end no game; an empty masked write still costs
            game_lengths = np.where(game_overs, self._steps, 0)
            self._steps[game_overs] = 0
        return PoolStep(frames=obs[:, 0], rewards=rewards.astype(np.float32, copy=False),
                        terminals=terminated.astype(bool, copy=False),
                        episode_ends=terminated | truncated, game_overs=game_overs,
                        game_lengths=game_lengths)

    def run_in_env_threads(self, fn: Callable[[int], T]) -> list[T]:
        return [fn(i) for i in range(self.num_envs)]

    def close(self) -> None:
        """Stops the C++ threads: they end only when the vector env is freed. Idempotent."""
        if self._env is not None:
            self._env.close()
            self._env = None

    def _open_env(self) -> AtariVectorEnv:
        if self._env is None:
            raise RuntimeError("the pool is closed")
        return self._env


_STOP = object()  # sentinel: a sampler thread closes its env and exits


class _EnvThread:
    """A named, persistent thread that owns one env: it creates, steps and closes it. Every
    (round, callable) sent gets a reply in the pool's outbox (its result or its exception),
    so the caller never waits forever."""

    def __init__(self, index: int, make_env: Callable[[], AtariEnv], outbox: queue.Queue):
        self.index = index
        self._make_env = make_env
        self._inbox: queue.Queue = queue.Queue()
        self._outbox = outbox
        # Daemon only so that a pool never closed cannot keep the interpreter alive;
        # close() stops and joins the thread.
        self.thread = threading.Thread(target=self._run, name=f"sampler-{index}", daemon=True)
        self.thread.start()

    def send(self, round_id: int, fn: Callable[[AtariEnv], Any]) -> None:
        self._inbox.put((round_id, fn))

    def stop(self) -> None:
        self._inbox.put(_STOP)

    def _run(self) -> None:
        try:
            env = self._make_env()  # this thread alone touches env from here on
        except BaseException as error:  # reported to the caller, never lost
            self._outbox.put((0, self.index, None, error))
            self._serve_after_failure()
            return
        try:
            self._outbox.put((0, self.index, None, None))
            self._serve(env)
        finally:
            env.close()

    def _serve(self, env: AtariEnv) -> None:
        while (request := self._inbox.get()) is not _STOP:
            round_id, fn = request
            try:
                self._outbox.put((round_id, self.index, fn(env), None))
            except BaseException as error:  # reported to the caller, never lost
                self._outbox.put((round_id, self.index, None, error))

    def _serve_after_failure(self) -> None:
        """Answers every later request with an error until stopped (env creation failed)."""
        while (request := self._inbox.get()) is not _STOP:
            self._outbox.put((request[0], self.index, None, RuntimeError(
                f"sampler-{self.index} has no environment: its creation failed")))


class ThreadEnvPool:
    """W `AtariEnv`s, env i owned by the persistent Python thread `sampler-i`. An exception
    in a sampler is re-raised by the call that waits for the work (the lowest env index
    first); the envs may then be out of step, so close the pool."""

    def __init__(self, env_factory: Callable[[int], AtariEnv], num_envs: int):
        """Args:
            env_factory: builds env i; it is called in sampler thread i, which owns the env.
            num_envs: W, the number of envs and sampler threads.
        """
        self.num_envs = num_envs
        self._outbox: queue.Queue = queue.Queue()
        self._round = 0  # replies of an earlier, interrupted round are dropped
        self._in_flight = False  # a step sent and not yet received
        # Sampler i is the thread "sampler-i"; it creates, steps and closes env i.
        self._samplers = [_EnvThread(i, _bind(env_factory, i), self._outbox)
                          for i in range(num_envs)]
        self._closed = False
        try:
            self._collect()  # each sampler reports once its env exists
            self.n_actions: int = self.run_in_envs(lambda i, env: env.n_actions)[0]
        except BaseException:
            self.close()
            raise

    def run_in_envs(self, fn: Callable[[int, AtariEnv], T]) -> list[T]:
        """Calls fn(i, env_i) in sampler thread i for every i; returns the W results."""
        self._dispatch(fn)
        return self._collect()

    def run_in_env_threads(self, fn: Callable[[int], T]) -> list[T]:
        return self.run_in_envs(lambda i, env: fn(i))

    def reset(self, seed: int) -> np.ndarray:
        frames = self.run_in_envs(lambda i, env: env.reset(seed=seed + i))
        return np.stack(frames)

    def step(self, actions: np.ndarray) -> PoolStep:
        self.send(actions)
        return self.receive()

    def send(self, actions: np.ndarray) -> None:
        """Hands each sampler its action; they step while the caller goes on (as far as
        ale-py's `act`, which holds the interpreter lock, lets them)."""
        actions = _check_actions(actions, self.num_envs, self.n_actions).copy()
        self._dispatch(lambda i, env: env.step(int(actions[i])))
        self._in_flight = True

    def receive(self) -> PoolStep:
        _check_sent(self._in_flight)
        self._in_flight = False
        return _pool_step(self._collect())

    def _dispatch(self, fn: Callable[[int, AtariEnv], Any]) -> None:
        """Sends fn(i, env_i) to sampler thread i for every i, as a new round."""
        if self._closed:
            raise RuntimeError("the pool is closed")
        _check_nothing_sent(self._in_flight)
        self._round += 1
        for sampler in self._samplers:
            sampler.send(self._round, _bind_env(fn, sampler.index))

    def close(self) -> None:
        """Stops every sampler thread (each closes its env) and joins them. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for sampler in self._samplers:
            sampler.stop()
        for sampler in self._samplers:
            sampler.thread.join()

    def _collect(self) -> list[Any]:
        """Waits for one reply per sampler; raises the first error by env index."""
        results: list[Any] = [None] * self.num_envs
        errors: dict[int, BaseException] = {}
        replies = 0
        while replies < self.num_envs:
            round_id, index, result, error = self._outbox.get()
            if round_id != self._round:
                continue
            replies += 1
            results[index] = result
            if error is not None:
                errors[index] = error
        if errors:
            index = min(errors)
            error = errors[index]
            error.add_note(f"(raised in sampler thread sampler-{index})")
            raise error
        return results


class SerialEnvPool(OneCallStep):
    """W `AtariEnv`s stepped one after another in the caller's thread (the serial loop's)."""

    def __init__(self, env_factory: Callable[[int], AtariEnv], num_envs: int):
        self.num_envs = num_envs
        self._envs = [env_factory(i) for i in range(num_envs)]
        self.n_actions: int = self._envs[0].n_actions

    def run_in_envs(self, fn: Callable[[int, AtariEnv], T]) -> list[T]:
        """Calls fn(i, env_i) for every i (here, in the caller's thread)."""
        return [fn(i, env) for i, env in enumerate(self._envs)]

    def run_in_env_threads(self, fn: Callable[[int], T]) -> list[T]:
        return [fn(i) for i in range(self.num_envs)]

    def first_screen(self) -> np.ndarray:
        """The raw RGB screen of env 0, for a video."""
        return self._envs[0].screen_rgb()

    def reset(self, seed: int) -> np.ndarray:
        _check_nothing_sent(self._sent is not None)
        return np.stack([env.reset(seed=seed + i) for i, env in enumerate(self._envs)])

    def step(self, actions: np.ndarray) -> PoolStep:
        _check_nothing_sent(self._sent is not None)
        actions = _check_actions(actions, self.num_envs, self.n_actions)
        return _pool_step([env.step(int(a)) for env, a in zip(self._envs, actions)])

    def close(self) -> None:
        for env in self._envs:
            env.close()
        self._envs = []


class PoolStopped(Exception):
    """A `GroupedPool`'s making or reset was stopped between two groups of envs."""


class GroupedPool:
    """W envs as pools of at most `group_size` (env i seeded `seed + i` as in one pool),
    made and reset one group after another, asking `should_stop` between two
    (`PoolStopped`): making hundreds of emulators takes a minute in calls nothing
    interrupts (docs/checkpoints.md). A round steps every group at once."""

    def __init__(self, make_group: Callable[[int, int], EnvPool], num_envs: int,
                 group_size: int, should_stop: Callable[[], bool]):
        """Args:
            make_group: builds the pool of envs first, ..., first + n - 1, as (first, n).
            should_stop: asked before each group is made or reset.
        Raises:
            PoolStopped: `should_stop` turned true before every group was made.
        """
        if num_envs < 1 or group_size < 1:
            raise ValueError(f"a grouped pool needs envs and groups of at least 1; got "
                             f"{num_envs} envs in groups of {group_size}")
        self.num_envs = num_envs
        self._should_stop = should_stop
        self._firsts = list(range(0, num_envs, group_size))
        self._groups: list[EnvPool] = []
        try:
            for first in self._firsts:
                self._check_stop()
                self._groups.append(make_group(first, min(group_size, num_envs - first)))
        except BaseException:
            self.close()
            raise
        self.n_actions: int = self._groups[0].n_actions

    def reset(self, seed: int) -> np.ndarray:
        frames = []
        for first, group in zip(self._firsts, self._groups):
            self._check_stop()
            frames.append(group.reset(seed + first))
        return np.concatenate(frames)

    def step(self, actions: np.ndarray) -> PoolStep:
        self.send(actions)
        return self.receive()

    def send(self, actions: np.ndarray) -> None:
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs,):
            raise ValueError(f"actions must be {self.num_envs} integers; got shape "
                             f"{actions.shape}")
        for first, group in zip(self._firsts, self._groups):
            group.send(actions[first:first + group.num_envs])

    def receive(self) -> PoolStep:
        steps = [group.receive() for group in self._groups]
        return PoolStep(*(np.concatenate(columns) for columns in zip(*steps)))

    def run_in_env_threads(self, fn: Callable[[int], T]) -> list[T]:
        return [result for first, group in zip(self._firsts, self._groups)
                for result in group.run_in_env_threads(lambda i, first=first: fn(first + i))]

    def first_screen(self) -> np.ndarray:
        """Env 0's raw RGB screen, where its group is a `SerialEnvPool`."""
        return self._groups[0].first_screen()  # type: ignore[attr-defined]

    def close(self) -> None:
        for group in self._groups:
            group.close()
        self._groups = []

    def _check_stop(self) -> None:
        if self._should_stop():
            raise PoolStopped("stopped between two groups of environments")


def _pool_step(steps: list[AtariStep]) -> PoolStep:
    terminals = np.array([s.terminal for s in steps], dtype=bool)
    truncations = np.array([s.truncated for s in steps], dtype=bool)
    return PoolStep(frames=np.stack([s.frame for s in steps]),
                    rewards=np.array([s.reward for s in steps], dtype=np.float32),
                    terminals=terminals, episode_ends=terminals | truncations,
                    game_overs=np.array([s.game_over for s in steps], dtype=bool),
                    game_lengths=np.array([s.game_length for s in steps], dtype=np.int64))


def _bind(factory: Callable[[int], AtariEnv], index: int) -> Callable[[], AtariEnv]:
    return lambda: factory(index)


def _bind_env(fn: Callable[[int, AtariEnv], T], index: int) -> Callable[[AtariEnv], T]:
    return lambda env: fn(index, env)


def make_env_pool(backend: str, settings: GameSettings, num_envs: int, *,
                  seed: int) -> EnvPool:
    """Builds a pool of `num_envs` games and resets it with `seed` (env i gets seed + i):
    `backend` is one of config.BACKENDS, which the flags check, or SERIAL; the settings are
    those config.validate checked (ale-py's vector env always resizes with area
    interpolation, and validate refuses another with it)."""
    pool: EnvPool
    if backend == "vector":
        pool = VectorEnvPool(settings, num_envs)
    else:
        def make_env(i: int) -> AtariEnv:
            return make_atari_env(settings, seed=seed + i)
        pool_class = SerialEnvPool if backend == SERIAL else ThreadEnvPool
        pool = pool_class(make_env, num_envs)
    pool.reset(seed)
    return pool
