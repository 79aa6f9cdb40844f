"""Acting: the exploration schedule of Nature DQN, checked against the paper and DeepMind's
code; the round's actions (`Actor.actions`); the actors' frame stacks.

Extended Data Table 1: epsilon is annealed linearly from 1.0 to 0.1 over the first
1,000,000 steps and fixed at 0.1 thereafter; during the 50,000 replay-start steps a uniformly
random policy fills the memory. DeepMind's dqn/NeuralQLearner.lua counts the annealing from the
end of the replay start (ep = ep_end + max(0, (ep_start - ep_end) * (ep_endt -
max(0, numSteps - learn_start)) / ep_endt)), and so does dopamine's linearly_decaying_epsilon
(warmup_steps). The expectations below are that formula evaluated by hand.
"""

import hashlib

import numpy as np
import pytest

from fast_dqn.acting import Actor, Exploration, FinishedGame, FrameHistory
from fast_dqn.training_loops import FastDQN
from fast_dqn.schedule import epsilon_at
from fast_dqn.config import Config

from tests.fakes import NATURE, FakeRunLog, ScriptedPool, id_frame, ids_of


@pytest.mark.parametrize("step, expected", [
    (0, 1.0),
    (49_999, 1.0),           # the replay start is uniformly random
    (50_000, 1.0),           # the decay starts where learning starts
    (50_000 + 250_000, 0.775),
    (50_000 + 500_000, 0.55),
    (50_000 + 999_999, 0.1 + 0.9 / 1_000_000),
    (1_050_000, 0.1),        # 1,000,000 steps after the replay start
    (1_050_001, 0.1),
    (50_000_000, 0.1),       # and 0.1 for the rest of the run
])
def test_nature_schedule(step, expected):
    assert epsilon_at(step, NATURE) == pytest.approx(expected, abs=1e-12)


def test_slope_is_0_9_over_one_million_steps():
    steps = np.arange(50_000, 1_050_000, 12_345)
    values = np.array([epsilon_at(int(step), NATURE) for step in steps])
    np.testing.assert_allclose(np.diff(values), -0.9 * 12_345 / 1_000_000, rtol=1e-9)


def test_flags_move_the_schedule():
    config = Config(replay_start=100, exploration_steps=1_000, final_epsilon=0.01)
    assert epsilon_at(99, config) == 1.0
    assert epsilon_at(600, config) == pytest.approx(1.0 - 0.99 / 2)
    assert epsilon_at(1_100, config) == pytest.approx(0.01)
    assert epsilon_at(10**9, config) == pytest.approx(0.01)
    without_decay = Config(replay_start=100, exploration_steps=0)
    assert epsilon_at(100, without_decay) == pytest.approx(0.1)


class _Network:
    n_actions = 18

    def greedy_actions(self, states, use_target=True):
        return np.zeros(len(states), dtype=np.int64)


def test_fast_samplers_take_epsilon_from_the_global_step_each_executes(monkeypatch):
    """With W workers, sampler i draws its epsilon from step `step + i`."""
    from fast_dqn.loop_interfaces import LoopParts
    from fast_dqn.replay_memory import ReplayMemory

    config = Config(replay_start=0, exploration_steps=8, workers=4, concurrent=False)
    parts = LoopParts(config=config, learner=_Network(),
                      memory=ReplayMemory(100, np.random.default_rng(0)),
                      pool=ScriptedPool([50] * 4), make_eval_pool=None, run_log=FakeRunLog(),
                      rng=np.random.default_rng(0))
    loop = FastDQN(parts)
    loop.counters.step = 2
    seen = {}

    def recording(epsilon, num_envs, n_actions, rng):
        seen["epsilon"] = np.array(epsilon)
        return Exploration(np.zeros(num_envs, bool), np.zeros(num_envs, np.int64))

    monkeypatch.setattr("fast_dqn.acting.draw_exploration", recording)
    loop.choose_actions(use_target=True)
    # steps 2, 3, 4, 5 of an 8-step decay from 1.0 to 0.1
    np.testing.assert_allclose(seen["epsilon"], 1.0 - 0.9 * np.array([2, 3, 4, 5]) / 8)
    loop.counters.step = 6  # the decay ends within the round: steps 8 and 9 are final
    loop.choose_actions(use_target=True)
    np.testing.assert_allclose(seen["epsilon"], [1.0 - 0.9 * 6 / 8, 1.0 - 0.9 * 7 / 8, 0.1, 0.1])
    loop.counters.step = 8
    loop.choose_actions(use_target=True)
    np.testing.assert_allclose(np.broadcast_to(seen["epsilon"], 4), [0.1] * 4)


@pytest.mark.parametrize("config", [NATURE, Config(replay_start=100, exploration_steps=1_000,
                                                   initial_epsilon=0.9, final_epsilon=0.01),
                                    Config(replay_start=0, exploration_steps=0)])
def test_vectorized_schedule_equals_the_scalar_one_bit_for_bit(config):
    from fast_dqn.schedule import epsilons_at
    steps = np.concatenate([np.arange(0, 2_000, 7), np.arange(1_040_000, 1_060_000, 333)])
    expected = np.array([epsilon_at(int(step), config) for step in steps])
    np.testing.assert_array_equal(epsilons_at(steps, config), expected)


# ------------------------------------------------------------------ the round's actions


class CountingGreedy:
    """Greedy action 3 for every state; records the envs of each query (the frames of a
    `ScriptedPool` name their env)."""

    def __init__(self):
        self.queries: list[list[int]] = []

    def __call__(self, states):
        self.queries.append(states[:, -1, 0, 0].tolist())
        return np.full(len(states), 3, dtype=np.int64)


def test_a_round_takes_the_random_action_where_an_env_explores_and_else_the_greedy_one():
    actor, greedy = Actor(ScriptedPool([50] * 4)), CountingGreedy()
    actor.reset(seed=0)
    exploration = Exploration(np.array([True, False, True, False]), np.array([1, 2, 0, 5]))
    assert actor.actions(exploration, greedy).tolist() == [1, 3, 0, 3]
    assert greedy.queries == [[0, 1, 2, 3]]  # one batched query
    assert actor.actions(exploration, greedy, one_query=False).tolist() == [1, 3, 0, 3]
    assert greedy.queries[1:] == [[0], [1], [2], [3]]  # one query per sampler


def test_a_round_asks_only_about_the_envs_it_is_told_to():
    """An evaluation's finished games are not queried again: their greedy action is 0."""
    actor, greedy = Actor(ScriptedPool([50] * 4)), CountingGreedy()
    actor.reset(seed=0)
    exploration = Exploration(np.array([False, False, True, False]), np.array([1, 2, 0, 5]))
    asking = np.array([False, True, True, True])
    assert actor.actions(exploration, greedy, asking=asking).tolist() == [0, 3, 0, 3]
    assert greedy.queries == [[1, 2, 3]]


def test_a_round_where_every_env_explores_makes_no_query():
    actor, greedy = Actor(ScriptedPool([50] * 3)), CountingGreedy()
    exploration = Exploration(np.ones(3, bool), np.array([4, 0, 2]))
    assert actor.actions(exploration, greedy).tolist() == [4, 0, 2]
    assert actor.actions(exploration, greedy, asking=np.ones(3, bool)).tolist() == [4, 0, 2]
    assert greedy.queries == []


class _CutOffPool(ScriptedPool):
    """`ScriptedPool` whose env 0 has its games cut off: they end without a terminal."""

    def step(self, actions):
        result = super().step(actions)
        cut_off = result.game_overs & (np.arange(self.num_envs) == 0)
        return result._replace(terminals=result.terminals & ~cut_off)


def test_a_round_reports_each_finished_game_with_its_length_raw_score_and_cut_off():
    """Env i scores i + 1 a step and ends its games after its length (`ScriptedPool`); a game
    whose last step is not terminal was cut off."""
    actor = Actor(_CutOffPool([2, 3]))
    actor.reset(seed=0)
    finished = [actor.act(np.zeros(2, np.int64))[1] for _ in range(6)]
    assert finished == [[], [FinishedGame(0, 2, 2.0, True)], [FinishedGame(1, 3, 6.0, False)],
                        [FinishedGame(0, 2, 2.0, True)], [],
                        [FinishedGame(0, 2, 2.0, True), FinishedGame(1, 3, 6.0, False)]]


# --------------------------------------------------------------------- frame stacks


def test_frame_history_reset_and_starts_per_env():
    history = FrameHistory(2)
    history.reset(np.stack([id_frame(1), id_frame(2)]))
    assert [ids_of(s) for s in history.states] == [[0, 0, 0, 1], [0, 0, 0, 2]]
    history.shift()
    history.put_newest(np.stack([id_frame(3), id_frame(4)]), np.array([False, True]))
    history.shift()
    history.put_newest(np.stack([id_frame(5), id_frame(6)]), np.array([False, False]))
    assert [ids_of(s) for s in history.states] == [[0, 1, 3, 5], [0, 0, 4, 6]]


# ------------------------------------------------ one acting path: evaluation and play


class _PixelGreedy:
    """A stand-in network whose action depends on every pixel of the state; it records a
    digest of each state it is asked about."""

    def __init__(self, n_actions: int):
        self.n_actions = n_actions
        self.seen: list[bytes] = []

    def __call__(self, states: np.ndarray) -> np.ndarray:
        self.seen.extend(hashlib.sha256(state.tobytes()).digest() for state in states)
        return (states.astype(np.int64).sum(axis=(1, 2, 3)) // 7) % self.n_actions


def _first_game_by_hand(settings, seed: int, epsilon: float, rng_seed: int, greedy):
    """The first game of one env, played by a loop written out here: the stack of the last 4
    frames with zeros before a learning episode's first frame, epsilon-greedy with a uniform
    then an action drawn per step (the greedy action asked only where it is taken); returns
    the raw score, the steps, whether it was cut off and the learning episodes that ended
    before it did."""
    from fast_dqn.atari import make_atari_env

    env = make_atari_env(settings, seed=seed)
    rng = np.random.default_rng(rng_seed)
    blank = np.zeros((84, 84), np.uint8)
    stack = [blank, blank, blank, env.reset(seed=seed)]
    score, steps, episodes = 0.0, 0, 0
    try:
        while True:
            explore = rng.random(1)[0] < epsilon
            action = int(rng.integers(0, env.n_actions, size=1)[0])
            if not explore:
                action = int(greedy(np.stack(stack)[None])[0])
            step = env.step(action)
            score += step.reward
            steps += 1
            if step.game_over:
                return score, steps, step.truncated, episodes
            if step.terminal or step.truncated:
                episodes += 1
                stack = [blank, blank, blank, step.frame]
            else:
                stack = stack[1:] + [step.frame]
    finally:
        env.close()


def test_evaluation_and_play_score_a_game_as_a_loop_written_out_by_hand():
    """Evaluation and play act through the training loop's `Actor`; on one env seeded alike,
    with the same generator, both play the game a hand-written loop plays: the same states
    asked about, draws, score and length."""
    from fast_dqn import play
    from fast_dqn.atari import GameSettings
    from fast_dqn.evaluation import evaluate
    from fast_dqn.env_pools import SERIAL, make_env_pool

    config = Config(game="space_invaders", seed=11)
    settings = GameSettings.of_run(config, max_episode_steps=400)
    epsilon, rng_seed = 0.3, 5
    by_hand = _PixelGreedy(n_actions=6)
    score, steps, cut_off, lives_lost = _first_game_by_hand(settings, config.seed, epsilon,
                                                            rng_seed, by_hand)
    assert score > 0 and lives_lost >= 1  # not a trivial case: points scored, a life lost

    pool = make_env_pool(SERIAL, settings, 1, seed=config.seed)
    evaluating = _PixelGreedy(pool.n_actions)
    try:
        evaluated = evaluate(pool, evaluating, epsilon=epsilon, seed=config.seed,
                             rng=np.random.default_rng(rng_seed))
    finally:
        pool.close()
    assert evaluated == [score]
    assert evaluating.seen == by_hand.seen

    pool = play.make_pool(config, seed=config.seed, max_steps=400)
    playing = _PixelGreedy(pool.n_actions)
    try:
        played = play.play_games(pool, playing, epsilon=epsilon,
                                 rng=np.random.default_rng(rng_seed), games=1, seed=config.seed)
    finally:
        pool.close()
    assert played == [play.GameResult(score, steps, cut_off)]
    assert playing.seen == by_hand.seen
