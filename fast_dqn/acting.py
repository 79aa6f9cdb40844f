"""Acting in W environments: the frame stacks, epsilon-greedy choices and the games' scores.

Training, evaluation and `play` all act through `Actor`; what is theirs stays with them
(training's exploration schedule, `EpsilonGreedy`; evaluation's one game per env; play's
games one after another). `FrameHistory` pads as the replay memory does (zeros before an
episode's first frame), so the state acted on is the state the memory rebuilds.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from fast_dqn.config import HISTORY, Config
from fast_dqn.schedule import epsilons_at, final_epsilon_step
from fast_dqn.host_arrays import aligned_zeros
from fast_dqn.transitions import FRAME_SHAPE, Transitions, acted_transitions
from fast_dqn.env_pools import EnvPool


# The greedy actions of a batch of states: the learner's query, or a stand-in.
GreedyFn = Callable[[np.ndarray], np.ndarray]


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


class FrameHistory:
    """W stacks of the last HISTORY frames, the older ones zero at a learning episode's
    start, as `ReplayMemory` rebuilds them."""

    def __init__(self, num_envs: int):
        # Aligned so that the network's query reads the states in place (no copy per round).
        self.states = aligned_zeros((num_envs, HISTORY, *FRAME_SHAPE), np.uint8)

    def reset(self, frames: np.ndarray) -> np.ndarray:
        self.states[...] = 0
        self.states[:, -1] = frames
        return self.states

    def shift(self) -> None:
        """Each stack's frames move one place older. The newest place keeps its frame until
        `put_newest`, so the stacks are only whole again then."""
        self.states[:, :-1] = self.states[:, 1:]

    def put_newest(self, frames: np.ndarray, after_episode_end: np.ndarray) -> np.ndarray:
        """Puts each env's newest frame in, after `shift`; `after_episode_end` marks envs
        whose last step ended a learning episode, so that their new frame begins the next
        one."""
        self.states[:, -1] = frames
        if after_episode_end.any():  # an empty masked assignment still costs its call
            self.states[after_episode_end, :-1] = 0
        return self.states


class FinishedGame(NamedTuple):
    env: int
    length: int  # agent steps
    score: float  # raw game score
    cut_off: bool  # ended by the episode cap (or the ALE's), not by the game


class Actor:
    """W environments, their frame stacks and their games' scores; owned by the main thread."""

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

    def actions(self, exploration: Exploration, greedy: GreedyFn, one_query: bool = True,
                asking: np.ndarray | None = None) -> np.ndarray:
        """The round's epsilon-greedy actions: one batched query for the W states
        (`--synchronize`), or one per sampler in its own thread (`one_query=False`); with
        `asking`, one query for those envs alone, the others' greedy actions 0 (an
        evaluation's finished games). No query when every env explores."""
        if exploration.all_random:
            greedy_actions = np.zeros(len(exploration.explore), dtype=np.int64)
        elif asking is not None:
            greedy_actions = np.zeros(len(exploration.explore), dtype=np.int64)
            greedy_actions[asking] = greedy(self.states[asking])
        elif one_query:
            greedy_actions = greedy(self.states)
        else:
            greedy_actions = self._query_each(greedy)
        return exploration.actions(greedy_actions)

    def _query_each(self, greedy: GreedyFn) -> np.ndarray:
        states = self.states

        def query_one(env: int) -> int:
            return int(greedy(states[env:env + 1])[0])

        return np.array(self.pool.run_in_env_threads(query_one), dtype=np.int64)

    def play_round(self, greedy: GreedyFn, epsilon: float, rng: np.random.Generator,
                   asking: np.ndarray | None = None) -> list[FinishedGame]:
        """One round at a fixed epsilon (evaluation, play): the draws (`draw_exploration`,
        W of each from `rng`), the actions (`actions`, with `asking`), the step; returns the
        games that ended."""
        exploration = draw_exploration(epsilon, self.pool.num_envs, self.pool.n_actions, rng)
        _, finished = self.act(self.actions(exploration, greedy, asking=asking))
        return finished

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
            finished = [FinishedGame(int(i), int(result.game_lengths[i]), float(self._scores[i]),
                                     bool(result.episode_ends[i] and not result.terminals[i]))
                        for i in np.flatnonzero(result.game_overs)]
            self._scores[result.game_overs] = 0
        self.history.put_newest(result.frames, after_episode_end=result.episode_ends)
        transitions = acted_transitions(frames, actions, result.rewards, result.terminals,
                                        result.episode_ends)
        return transitions, finished
