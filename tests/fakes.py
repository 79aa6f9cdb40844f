"""Stand-ins for a loop's parts that record what they are asked, and the small makers of
test data (minibatches, clocks, damaged files), shared by the tests."""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from fast_dqn.acting import FrameHistory
from fast_dqn.checkpoints import save_checkpoint
from fast_dqn.config import ALGO_DQN, HISTORY, Config
from fast_dqn.transitions import FRAME_SHAPE, Batch
from fast_dqn.env_pools import OneCallStep, PoolStep
from tests.run_files import write_stand_in_network

if TYPE_CHECKING:
    import tensorflow as tf


class FakeRunLog:
    """Records what a loop logs (the real one is fast_dqn.run_logs.RunLogs)."""

    def __init__(self):
        self.episodes: list[tuple[int, int, float]] = []  # timestep, length, return
        self.evaluations: list[tuple[int, list[float]]] = []
        self.scalars: list[tuple[int, dict[str, float]]] = []

    def log_episode(self, row) -> None:
        self.episodes.append((row.timestep, row.length, row.ret))

    def flush(self) -> None:
        pass

    def log_evaluation(self, timestep: int, returns: list[float], hours: float) -> dict:
        self.evaluations.append((timestep, returns))
        return {"mean": float(np.mean(returns))}

    def log_scalars(self, step: int, scalars: dict[str, float]) -> None:
        self.scalars.append((step, dict(scalars)))


class Tape:
    """Events in the order they happened, from the main and the trainer threads."""

    def __init__(self):
        self.events: list[tuple] = []

    def record(self, *event: Any) -> None:
        self.events.append((threading.current_thread().name, *event))

    def main_thread(self) -> list[tuple]:
        return [e for e in self.events if e[0] == threading.main_thread().name]


class RecordingNetwork:
    """A fake Q-network: each train call makes a new online 'version'; sync copies it.

    The greedy action depends on the agent's cell and on the version of the network asked,
    so a run's replay contents depend on when the target was synced and how many minibatches
    had been trained by then.
    """

    n_actions = 2

    def __init__(self, tape: Tape):
        self.tape = tape
        self.online_version = 0
        self.target_version = 0
        self._updates_since_stats = 0
        self.queried_states: list[np.ndarray] = []

    def greedy_actions(self, states: np.ndarray, use_target: bool = True) -> np.ndarray:
        self.tape.record("query", use_target, len(states))
        self.queried_states.append(states.copy())
        version = self.target_version if use_target else self.online_version
        cells = states[:, -1, 40, :].argmax(axis=1) // 14
        return ((cells + version // 7) % 2).astype(np.int64)

    def update(self, minibatches: Batch, count: int) -> None:
        assert len(minibatches.actions) % count == 0
        for _ in range(count):
            self.tape.record("train", self.online_version)
            self.online_version += 1
            self._updates_since_stats += 1

    def sync_target(self) -> None:
        self.tape.record("sync", self.online_version)
        self.target_version = self.online_version

    def take_train_stats(self, updates: int) -> tuple[float, float]:
        # The loop counts the updates; the fake checks the count against those it made.
        assert updates == self._updates_since_stats, (updates, self._updates_since_stats)
        self._updates_since_stats = 0
        return (0.5, 1.0) if updates else (float("nan"), float("nan"))


class ScriptedPool(OneCallStep):
    """W envs whose games last `game_lengths[i]` steps with a life lost every `life_every`
    steps; every step scores `i + 1` points, so a game's score is known in advance. After a
    game over the env starts a new game at once, as the real pools do."""

    def __init__(self, game_lengths: list[int], life_every: int = 3, n_actions: int = 4):
        self.num_envs = len(game_lengths)
        self.n_actions = n_actions
        self.game_lengths = np.array(game_lengths)
        self.life_every = life_every
        self.steps = np.zeros(self.num_envs, dtype=np.int64)  # within the current game
        self.actions: list[np.ndarray] = []

    def _frames(self) -> np.ndarray:
        frames = np.zeros((self.num_envs, 84, 84), dtype=np.uint8)
        frames[:, 0, 0] = np.arange(self.num_envs)  # each env's frames name the env
        return frames

    def reset(self, seed: int) -> np.ndarray:
        self.steps[:] = 0
        return self._frames()

    def step(self, actions: np.ndarray) -> PoolStep:
        self.actions.append(np.array(actions))
        self.steps += 1
        game_overs = self.steps >= self.game_lengths
        life_lost = self.steps % self.life_every == 0
        rewards = np.arange(1, self.num_envs + 1, dtype=np.float32)
        lengths = np.where(game_overs, self.steps, 0)
        self.steps[game_overs] = 0
        return PoolStep(self._frames(), rewards, game_overs | life_lost,
                        game_overs | life_lost, game_overs, lengths)

    def run_in_env_threads(self, fn):
        return [fn(i) for i in range(self.num_envs)]

    def first_screen(self) -> np.ndarray:
        """An Atari-sized RGB screen whose pixels are env 0's step in its game."""
        return np.full((210, 160, 3), self.steps[0], dtype=np.uint8)

    def close(self) -> None:
        pass


class FakeClock:
    """A clock that moves only when told (`clock.now += seconds`) or slept on: callable as
    a `clock` argument, and with the `monotonic`, `perf_counter` and `sleep` of a stand-in
    for the `time` module."""

    def __init__(self, now: float = 0.0):
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def random_batch(seed: int | np.random.Generator, size: int = 32, n_actions: int = 6,
                 terminal_every: int = 4, discount: float = 0.99) -> Batch:
    """A minibatch of random frames, actions and clipped rewards as 1-step returns; every
    `terminal_every`-th transition ends its game (discount 0), the others are discounted
    by `discount`; weights 1. `seed` may be a generator, which is drawn on."""
    rng = np.random.default_rng(seed)  # a Generator is used as it is
    terminals = np.arange(size) % terminal_every == 0
    return Batch(states=rng.integers(0, 256, (size, 4, 84, 84), dtype=np.uint8),
                 actions=rng.integers(0, n_actions, size).astype(np.int32),
                 returns=rng.choice([-1.0, 0.0, 1.0], size).astype(np.float32),
                 next_states=rng.integers(0, 256, (size, 4, 84, 84), dtype=np.uint8),
                 discounts=np.where(terminals, 0.0, discount).astype(np.float32),
                 weights=np.ones(size, np.float32))


def q_values(learner, states: np.ndarray, use_target: bool = False) -> np.ndarray:
    """Q(s, .) of a learner's online (or target) network for a batch of uint8 states."""
    import tensorflow as tf

    network = learner.target if use_target else learner.online
    return network(tf.constant(states), training=False).numpy()


def flip_byte(file: Path, offset: int | None = None, fraction: float = 0.5) -> None:
    """Inverts one byte of `file`: at `offset`, or at `fraction` of its length."""
    data = bytearray(file.read_bytes())
    data[int(len(data) * fraction) if offset is None else offset] ^= 0xFF
    file.write_bytes(bytes(data))


def refusing_xla(network, message: str) -> None:
    """Makes `network`'s compiled calls fail as XLA failing to compile them would, until
    the network rebuilds them (which replaces its DirectCalls)."""
    import tensorflow as tf

    refused = network.direct_calls

    def call(*args, **kwargs):
        if network.direct_calls is refused and network.xla:
            raise tf.errors.InvalidArgumentError(None, None, message)
        return type(refused).call(refused, *args, **kwargs)

    refused.call = call


# -- frames named by an id, and one actor's stream against a naive replay reference ------------


def id_frame(frame_id: int) -> np.ndarray:
    return np.full(FRAME_SHAPE, frame_id, dtype=np.uint8)


def ids_of(state: np.ndarray) -> list[int]:
    """The frame ids of a (HISTORY, 84, 84) state made of `id_frame`s."""
    assert all((frame == frame[0, 0]).all() for frame in state)
    return [int(frame[0, 0]) for frame in state]


class Step(NamedTuple):
    frame: np.ndarray  # newest frame of the state the action was taken in
    action: int
    reward: float  # raw
    terminal: bool
    episode_end: bool
    next_frame: np.ndarray  # the frame the env returned (the next episode's first after an end)


class Stream(NamedTuple):
    first_frame: np.ndarray
    steps: list[Step]


def random_frame(rng: np.random.Generator) -> np.ndarray:
    """A nonzero frame (so that zero padding is never mistaken for it)."""
    return rng.integers(1, 256, size=FRAME_SHAPE, dtype=np.uint8)


def random_stream(rng: np.random.Generator, transitions: int) -> Stream:
    """Episodes of random lengths (1-12) ending in a terminal (a life loss, say) or a
    truncation; the last episode may be unfinished."""
    steps = []
    frame = first_frame = random_frame(rng)
    left = int(rng.integers(1, 13))
    for _ in range(transitions):
        left -= 1
        ends = left == 0
        terminal = ends and rng.random() < 0.7
        next_frame = random_frame(rng)
        reward = float(rng.choice([-2.5, 0.0, 0.0, 0.0, 1.0, 7.0]))
        steps.append(Step(frame, int(rng.integers(0, 6)), reward, terminal, ends, next_frame))
        frame = next_frame
        if ends:
            left = int(rng.integers(1, 13))
    return Stream(first_frame, steps)


class Reference(NamedTuple):
    """A whole transition, as a naive replay memory would store it."""

    state: np.ndarray
    action: int
    reward: float  # clipped
    next_state: np.ndarray
    terminal: bool
    truncated: bool


def naive_transitions(stream: Stream) -> list[Reference]:
    """States rebuilt the obvious way: the last HISTORY frames of the current episode, with
    zeros in front while the episode is shorter than that."""
    def stack(episode: list[np.ndarray]) -> np.ndarray:
        frames = [np.zeros(FRAME_SHAPE, np.uint8)] * HISTORY + episode
        return np.stack(frames[-HISTORY:])

    episode = [stream.first_frame]
    out = []
    for step in stream.steps:
        state = stack(episode)
        episode = episode + [step.next_frame]
        next_state = stack(episode)
        out.append(Reference(state, step.action, float(np.sign(step.reward)), next_state,
                             step.terminal, step.episode_end and not step.terminal))
        if step.episode_end:
            episode = [step.next_frame]
    return out


class NStep(NamedTuple):
    """An n-step transition as a naive reference works it out from whole transitions."""

    returns: float
    discount: float  # 0 where a terminal ends the return
    next_state: np.ndarray | None  # the state n steps on (None after a terminal)


def naive_n_step(reference: list[Reference], n: int, discount: float,
                 capacity: int | None = None) -> dict[int, NStep]:
    """The transitions a memory of `capacity` holding `reference` must let be drawn, by
    number, as n-step transitions worked out step by step: the clipped rewards discounted
    by discount^k up to the first terminal (then no bootstrap), else the state after the
    n-th step with discount^n. Not drawn: a return that meets an episode's end without a
    terminal (no state follows in the episode), one whose steps (and bootstrap state) are not
    all stored yet, and, once the memory has wrapped, the oldest HISTORY - 1 transitions."""
    count = len(reference)
    oldest = count - capacity + HISTORY - 1 if capacity and count >= capacity else 0
    out = {}
    for t in range(oldest, count):
        total = 0.0
        for k in range(n):
            if t + k >= count:
                break  # not stored yet
            step = reference[t + k]
            total += discount ** k * step.reward
            if step.terminal:
                out[t] = NStep(total, 0.0, None)
                break
            if step.truncated:
                break
            if k == n - 1 and t + n < count:  # the state n steps on is stored as well
                out[t] = NStep(total, discount ** n, step.next_state)
    return out


def actor_states(stream: Stream) -> list[tuple[np.ndarray, np.ndarray]]:
    """(state, state after the step) as the actors' `FrameHistory` sees them."""
    history = FrameHistory(1)
    history.reset(stream.first_frame[None])
    out = []
    for step in stream.steps:
        state = history.states[0].copy()
        assert (state[-1] == step.frame).all()
        history.shift()
        history.put_newest(step.next_frame[None], np.array([step.episode_end]))
        out.append((state, history.states[0].copy()))
    return out


def expected_valid(reference: list[Reference], capacity: int) -> set[int]:
    """Transition numbers that must be sampleable after adding all of `reference`."""
    count = len(reference)
    oldest_sampleable = count - capacity + HISTORY - 1 if count >= capacity else 0
    return {t for t, r in enumerate(reference)
            if t >= oldest_sampleable and not r.truncated and (r.terminal or t < count - 1)}


def screen(output: str) -> list[str]:
    """What a terminal shows of `output`, line by line: a carriage return moves to the
    line's start and what follows overwrites it; escape sequences are dropped."""
    output = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output)
    shown: list[str] = []
    for raw in output.replace("\r\n", "\n").split("\n"):
        line: list[str] = []
        column = 0
        for char in raw:
            if char == "\r":
                column = 0
                continue
            if column < len(line):
                line[column] = char
            else:
                line.append(char)
            column += 1
        shown.append("".join(line).rstrip())
    return shown


# -- Constants and data makers more than one test file used to define for itself -----------
# (issue 35 item 7: one definition each)

# Nature's settings (the Config defaults): replay start 50,000, an update every 4 steps, the
# target synced every 10,000 steps, epsilon 1.0 -> 0.1 over 1,000,000 steps counted from the
# replay start.
NATURE = Config()
N_ACTIONS = 6  # a network's action count where any will do (pong's; random_batch's default)


def episodes_of(n: int) -> list[tuple[int, float]]:
    """n (length, return) pairs that differ from game to game."""
    return [(100 + 7 * i, float((i * 13) % 41 - 20)) for i in range(n)]


RUN_SEED = 0  # the seed in write_run_dir's config.json: `play` builds its network with it


def write_run_dir(run_dir: Path, **config_changes) -> Path:
    """config.json as a training run writes it (settings plus the algorithm)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    config = Config(game="pong", max_episode_steps=200, seed=RUN_SEED).replace(**config_changes)
    settings = {**dataclasses.asdict(config), "algo": ALGO_DQN}
    (run_dir / "config.json").write_text(json.dumps(settings))
    return run_dir


def write_checkpoint(run_dir: Path, step: int, write_network=write_stand_in_network) -> None:
    """A checkpoint as a run writes it: files, and a manifest that lists and signs them."""
    save_checkpoint(run_dir, {"counters": {"step": step}}, write_network, None)


# -- A stand-in network and its hand-made minibatch, for the tests of the learning rule against
# a naive reference (test_q_network.py, test_optimizer_loss.py). TensorFlow is imported in
# LinearQ's methods, as in refusing_xla: importing this module loads no TensorFlow.


class LinearQ:
    """Q(s, .) = s W for float states (B, F): a network whose gradient is known by hand."""

    def __init__(self, weights: list[list[float]]):
        import tensorflow as tf

        self.weights = tf.keras.Variable(np.array(weights, np.float32))  # as a Keras layer's
        self.trainable_variables = [self.weights]

    def __call__(self, states: tf.Tensor, training: bool = False) -> tf.Tensor:
        import tensorflow as tf

        return tf.matmul(states, self.weights)


# A hand-made minibatch of 4 transitions with 3 features and 2 actions. Row 2 is terminal;
# the TD errors fall on both sides of the Huber loss's kink (|error| below and above 1).
ONLINE_W = [[0.5, -1.0], [2.0, 0.25], [-0.5, 1.5]]
TARGET_W = [[1.0, 0.0], [0.0, 2.0], [3.0, -1.0]]
HAND_MADE = dict(
    states=[[1.0, 0.0, 2.0], [0.0, 1.0, 0.0], [2.0, 2.0, 0.0], [0.5, 0.0, 0.5]],
    next_states=[[0.0, 1.0, 0.0], [1.0, 0.0, 1.0], [9.0, 9.0, 9.0], [0.0, 0.5, 1.0]],
    actions=[1, 0, 0, 1], rewards=[1.0, 0.0, -1.0, 0.5], terminals=[False, False, True, False])


def hand_made_batch(discount: float, weights: list[float] | None = None):
    """HAND_MADE as the learning rule takes it (tensors): 1-step returns, discounts 0 at
    the terminal row, importance-sampling weights 1 unless given."""
    import tensorflow as tf

    from fast_dqn.transitions import Batch

    size = len(HAND_MADE["actions"])
    columns = dict(
        states=HAND_MADE["states"], next_states=HAND_MADE["next_states"],
        actions=HAND_MADE["actions"], returns=HAND_MADE["rewards"],
        discounts=[0.0 if end else discount for end in HAND_MADE["terminals"]],
        weights=[1.0] * size if weights is None else weights)
    return Batch(**{name: tf.constant(value, tf.int32 if name == "actions" else tf.float32)
                    for name, value in columns.items()})


def fill_memory(memory: Any, state: dict) -> None:
    """Fills `memory` with the arrays of another memory's `state_dict()` as a checkpoint's
    reader does (`checkpoints.read_replay_into`): into its `restore_targets`, then
    `set_extent`."""
    for name, target in memory.restore_targets().items():
        rows = np.asarray(state[name])
        if isinstance(target, np.ndarray):
            target[:len(rows)] = rows
        else:
            target.put_rows(0, rows)
    memory.set_extent(cursor=int(state["cursor"]), size=int(state["size"]))
