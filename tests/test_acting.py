"""Acting: the exploration schedule of Nature DQN, checked against the paper and DeepMind's
code; the round's actions (`Actor.actions`); the actors' frame stacks.

Extended Data Table 1: epsilon is annealed linearly from 1.0 to 0.1 over the first
1,000,000 steps and fixed at 0.1 thereafter; during the 50,000 replay-start steps a uniformly
random policy fills the memory. DeepMind's dqn/NeuralQLearner.lua counts the annealing from the
end of the replay start (ep = ep_end + max(0, (ep_start - ep_end) * (ep_endt -
max(0, numSteps - learn_start)) / ep_endt)), and so does dopamine's linearly_decaying_epsilon
(warmup_steps). The expectations below are that formula evaluated by hand.
"""

import numpy as np
import pytest

from fast_dqn.acting import Actor, Exploration, FrameHistory
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
    from fast_dqn.loop_parts import LoopParts
    from fast_dqn.replay_memory import ReplayMemory

    config = Config(replay_start=0, exploration_steps=8, workers=4, concurrent=False)
    parts = LoopParts(config=config, network=_Network(),
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


class CountingNetwork:
    """Greedy action 3 for every state; records each query's batch size and network."""

    def __init__(self):
        self.queries: list[tuple[int, bool]] = []

    def greedy_actions(self, states, use_target=True):
        self.queries.append((len(states), use_target))
        return np.full(len(states), 3, dtype=np.int64)


def test_a_round_takes_the_random_action_where_an_env_explores_and_else_the_greedy_one():
    actor, network = Actor(ScriptedPool([50] * 4)), CountingNetwork()
    exploration = Exploration(np.array([True, False, True, False]), np.array([1, 2, 0, 5]))
    assert actor.actions(exploration, network, use_target=True).tolist() == [1, 3, 0, 3]
    assert network.queries == [(4, True)]  # one batched query of the target network
    assert actor.actions(exploration, network, use_target=False,
                         one_query=False).tolist() == [1, 3, 0, 3]
    assert network.queries[1:] == [(1, False)] * 4  # one query per sampler


def test_a_round_where_every_env_explores_makes_no_query():
    actor, network = Actor(ScriptedPool([50] * 3)), CountingNetwork()
    exploration = Exploration(np.ones(3, bool), np.array([4, 0, 2]))
    assert actor.actions(exploration, network, use_target=True).tolist() == [4, 0, 2]
    assert network.queries == []


# --------------------------------------------------------------------- frame stacks


def test_frame_history_reset_and_starts_per_env():
    history = FrameHistory(2)
    history.reset(np.stack([id_frame(1), id_frame(2)]))
    assert [ids_of(s) for s in history.states] == [[0, 0, 0, 1], [0, 0, 0, 2]]
    history.push(np.stack([id_frame(3), id_frame(4)]), np.array([False, True]))
    history.push(np.stack([id_frame(5), id_frame(6)]), np.array([False, False]))
    assert [ids_of(s) for s in history.states] == [[0, 1, 3, 5], [0, 0, 4, 6]]
