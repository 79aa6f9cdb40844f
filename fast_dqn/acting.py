"""Acting in W environments: the frame stacks, epsilon-greedy choices and the games' scores.

Training, evaluation and `play` all act through these; the replay memory rebuilds states from
stored frames by the same padding rule as `FrameHistory` (zeros before an episode's first
frame), which its tests check against this one.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np

from fast_dqn.config import HISTORY, Config
from fast_dqn.schedule import epsilons_at, final_epsilon_step
from fast_dqn.host_arrays import aligned_zeros
from fast_dqn.transitions import FRAME_SHAPE, Transitions, acted_transitions
from fast_dqn.env_pools import EnvPool


class GreedyPolicy(Protocol):
    """What acting needs of a Q-network (`QNetwork.greedy_actions`)."""

    def greedy_actions(self, states: np.ndarray, use_target: bool = True) -> np.ndarray: ...


class Exploration(NamedTuple):
    """One round's epsilon-greedy draws, made before the greedy actions are known."""

    explore: np.ndarray  # (W,) bool: env i takes random_actions[i]
    random_actions: np.ndarray  # (W,) int64

    @property
    def all_random(self) -> bool:
        """Every env explores: the greedy actions would go unused."""
        return bool(self.explore.all())

    def actions(self, greedy: np.ndarray) -> np.ndarray:
        return np.where(self.explore, self.random_actions, greedy).astype(np.int64, copy=False)


def draw_exploration(epsilon: np.ndarray | float, num_envs: int, n_actions: int,
                     rng: np.random.Generator) -> Exploration:
    """Whether each of `num_envs` envs explores (probability epsilon) and its random action,
    drawn in this order from `rng` (W uniforms, then W actions)."""
    explore = rng.random(num_envs) < epsilon
    return Exploration(explore, rng.integers(0, n_actions, size=num_envs))


class EpsilonGreedy:
    """The training loops' draws: in a round taken at global step `step`, env i explores
    with probability epsilon_at(step + i) (docs/design.md §1)."""

    def __init__(self, config: Config, num_envs: int, n_actions: int,
                 rng: np.random.Generator):
        self._config = config
        self._offsets = np.arange(num_envs)
        self._n_actions = n_actions
        self._rng = rng

    def draw(self, step: int) -> Exploration:
        """The draws of the round taken at `step`."""
        epsilons: np.ndarray | float = self._config.final_epsilon
        if step < final_epsilon_step(self._config):  # else every env is past the schedule
            epsilons = epsilons_at(step + self._offsets, self._config)
        return draw_exploration(epsilons, len(self._offsets), self._n_actions, self._rng)


def epsilon_greedy(greedy: np.ndarray, epsilon: np.ndarray | float, n_actions: int,
                   rng: np.random.Generator) -> np.ndarray:
    """Replaces each greedy action by a uniformly random one with probability epsilon."""
    return draw_exploration(epsilon, len(greedy), n_actions, rng).actions(greedy)


class FrameHistory:
    """The actors' side of the padding rule: W stacks of the last HISTORY frames.

    At a learning episode's start the older frames are zero, exactly as `ReplayMemory`
    rebuilds them.
    """

    def __init__(self, num_envs: int):
        # Aligned so that the network's query reads the states in place (no copy per round).
        self.states = aligned_zeros((num_envs, HISTORY, *FRAME_SHAPE), np.uint8)

    def reset(self, frames: np.ndarray) -> np.ndarray:
        self.states[...] = 0
        self.states[:, -1] = frames
        return self.states

    def push(self, frames: np.ndarray, after_episode_end: np.ndarray) -> np.ndarray:
        """Appends each env's newest frame; `after_episode_end` marks envs whose last step
        ended a learning episode, so that their new frame begins the next one."""
        self.shift()
        return self.put_newest(frames, after_episode_end)

    def shift(self) -> None:
        """The first half of `push`: each stack's frames move one place older. The newest
        place keeps its frame until `put_newest`, so the stacks are only whole again then."""
        self.states[:, :-1] = self.states[:, 1:]

    def put_newest(self, frames: np.ndarray, after_episode_end: np.ndarray) -> np.ndarray:
        """The second half of `push`, after `shift`."""
        self.states[:, -1] = frames
        if after_episode_end.any():  # an empty masked assignment still costs its call
            self.states[after_episode_end, :-1] = 0
        return self.states


class FinishedGame(NamedTuple):
    env: int
    length: int  # agent steps
    score: float  # raw game score


class Actor:
    """W environments, their frame histories and the running scores of their games.

    Owned by the main thread.
    """

    def __init__(self, pool: EnvPool):
        self.pool = pool
        self.history = FrameHistory(pool.num_envs)
        self._scores = np.zeros(pool.num_envs, dtype=np.float64)
        # The frames the envs last returned, the stacks' newest: the pools return new arrays
        # at every step, so these are kept as they are rather than copied from the stacks.
        self._newest = self.history.states[:, -1].copy()
        self._sent: np.ndarray | None = None  # the actions of the round under way

    @property
    def states(self) -> np.ndarray:
        return self.history.states

    def actions(self, exploration: Exploration, network: GreedyPolicy, use_target: bool,
                one_query: bool = True) -> np.ndarray:
        """The round's epsilon-greedy actions: env i's random action where it explores, else
        the greedy action of `network` on its state. One batched query for the W states
        (`--synchronize`), or with `one_query=False` one per sampler, each in its own
        thread. No query when every env explores (the random phase, and rounds early in the
        decay), as its greedy actions would go unused."""
        if exploration.all_random:
            greedy = np.zeros(len(exploration.explore), dtype=np.int64)
        elif one_query:
            greedy = network.greedy_actions(self.states, use_target=use_target)
        else:
            greedy = self._query_each(network, use_target)
        return exploration.actions(greedy)

    def _query_each(self, network: GreedyPolicy, use_target: bool) -> np.ndarray:
        states = self.states

        def query_one(env: int) -> int:
            return int(network.greedy_actions(states[env:env + 1], use_target)[0])

        return np.array(self.pool.run_in_env_threads(query_one), dtype=np.int64)

    def reset(self, seed: int) -> None:
        self._newest = self.pool.reset(seed=seed)
        self.history.reset(self._newest)
        self._scores[:] = 0

    def act(self, actions: np.ndarray) -> tuple[Transitions, list[FinishedGame]]:
        """One round: each env takes its action; returns the W transitions and the games
        that ended."""
        self.send(actions)
        return self.receive()

    def send(self, actions: np.ndarray) -> None:
        """Starts a round (`act` in two halves): the envs step while the caller goes on.
        The stacks are shifted meanwhile; `states` is whole again after `receive`."""
        self.pool.send(actions)
        self._sent = np.asarray(actions)
        self.history.shift()

    def receive(self) -> tuple[Transitions, list[FinishedGame]]:
        """Ends the round `send` started; returns what `act` returns."""
        actions, self._sent = self._sent, None
        frames = self._newest
        result = self.pool.receive()
        self._newest = result.frames
        self._scores += result.rewards
        finished = []
        if result.game_overs.any():  # most rounds end no game
            finished = [FinishedGame(int(i), int(result.game_lengths[i]), float(self._scores[i]))
                        for i in np.flatnonzero(result.game_overs)]
            self._scores[result.game_overs] = 0
        self.history.put_newest(result.frames, after_episode_end=result.episode_ends)
        transitions = acted_transitions(frames, actions, result.rewards, result.terminals,
                                        result.episode_ends)
        return transitions, finished
