"""Prioritized replay (Schaul et al. 2016, proportional; fast_dqn/replay_memory.py): the sum
tree against a naive cumulative sum, draws in proportion to p^alpha (a chi-square test with a
fixed seed), priorities written back from TD errors, importance-sampling weights against the
paper's formula, and a memory restored from its arrays drawing what the original draws."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fast_dqn.replay_memory import (PRIORITY_EPSILON, PRIORITY_EXPONENT, MinibatchDraws,
                                    Priorities, ReplayMemory)
from fast_dqn.transitions import acted_transitions
from tests.fakes import fill_memory

ALPHA = 0.6  # Schaul et al. (2016), Table 3 (proportional variant); dqn_zoo's priority_exponent


def long_episode_memory(capacity: int, count: int, seed: int = 0) -> ReplayMemory:
    """`count` transitions of one unfinished episode: every slot but the newest can be
    drawn (and, once wrapped, but the oldest HISTORY - 1)."""
    memory = ReplayMemory(capacity, np.random.default_rng(seed), prioritized=True)
    frames = np.arange(count, dtype=np.uint8)[:, None, None] * np.ones((1, 84, 84), np.uint8)
    memory.add_many(acted_transitions(frames, np.zeros(count, np.uint8),
                                      np.zeros(count, np.float32), np.zeros(count, bool),
                                      np.zeros(count, bool)))
    return memory


def chi_square_critical(df: int, z: float = 3.09) -> float:
    """The chi-square quantile for a one-sided z (3.09: p = 0.001), Wilson-Hilferty."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def test_the_exponent_is_schauls():
    assert PRIORITY_EXPONENT == ALPHA


@pytest.mark.parametrize("capacity", [1, 5, 64, 100])
def test_the_sum_tree_finds_what_a_cumulative_sum_finds(capacity):
    rng = np.random.default_rng(capacity)
    tree = Priorities(capacity)
    priorities = rng.random(capacity) * 5
    tree.set(np.arange(capacity), priorities)
    for _ in range(3):  # and after changes to some of them
        powered = priorities ** ALPHA
        assert tree.total == pytest.approx(powered.sum(), rel=1e-12)
        targets = rng.random(500) * powered.sum()
        expected = np.minimum(np.searchsorted(np.cumsum(powered), targets, side="right"),
                              capacity - 1)
        np.testing.assert_array_equal(tree.find(targets), expected)
        changed = rng.choice(capacity, size=max(1, capacity // 3), replace=False)
        priorities[changed] = rng.random(len(changed)) * 5
        tree.set(changed, priorities[changed])


def test_a_tree_summed_from_its_leaves_is_the_same_bit_for_bit():
    rng = np.random.default_rng(3)
    tree = Priorities(100)
    for _ in range(20):
        slots = rng.choice(100, size=7, replace=False)
        tree.set(slots, rng.random(7) * 3)
    rebuilt = Priorities(100)
    rebuilt.leaves[:] = tree.leaves
    rebuilt.sum_up()
    np.testing.assert_array_equal(rebuilt.tree, tree.tree)


def test_draws_follow_the_priorities_to_the_power_alpha():
    """200,000 draws from 59 drawable slots with known priorities: the counts fit
    p^alpha / sum p^alpha over the drawable slots (chi-square, p = 0.001), and the newest
    slot, which cannot be drawn, never is."""
    memory = long_episode_memory(64, 60)
    known = 1.0 + np.arange(60) % 7  # priorities 1 .. 7
    memory.priorities.set(np.arange(60), known)
    draws = np.concatenate([memory.sample_indices(1000) for _ in range(200)])
    counts = np.bincount(draws, minlength=64)
    assert counts[59] == 0 and counts[60:].sum() == 0  # the newest, and the empty slots
    drawable = known[:59] ** ALPHA
    expected = len(draws) * drawable / drawable.sum()
    chi_square = float(((counts[:59] - expected) ** 2 / expected).sum())
    assert chi_square < chi_square_critical(58), chi_square
    uniform = np.full(59, len(draws) / 59)  # and not what uniform draws give
    assert float(((counts[:59] - uniform) ** 2 / uniform).sum()) > chi_square_critical(58)


def test_a_large_td_error_is_drawn_more_often_afterwards():
    memory = long_episode_memory(64, 60)
    draws = MinibatchDraws(memory, batch_size=4, importance_exponent=lambda update: 0.4)
    before = np.bincount(np.concatenate([memory.sample_indices(1000) for _ in range(20)]),
                         minlength=64)
    drawn = draws.draw(1, buffer=0).states[:, -1, 0, 0]  # slot i holds frames of value i
    errors = np.zeros(4)
    errors[0] = 50.0  # the first transition drawn gets a large error, the others none
    draws.write_back(0, errors)
    after = np.bincount(np.concatenate([memory.sample_indices(1000) for _ in range(20)]),
                        minlength=64)
    assert after[drawn[0]] > 5 * before[drawn[0]]
    assert memory.priorities.max_seen == pytest.approx(50.0 + PRIORITY_EPSILON)
    # the others' priorities fell from the largest seen (1) to epsilon: nearly never drawn
    assert all(after[slot] < before[slot] / 10 for slot in drawn[1:] if slot != drawn[0])


def test_draws_without_an_importance_exponent_still_write_back_to_the_slots_drawn():
    """Regression: MinibatchDraws kept the drawn slots only when given an importance
    exponent, so the benchmark's learner-alone draws (which give none) wrote the priorities
    back to `leaves[None]` and crashed `python -m fast_dqn.benchmark --prioritized`."""
    memory = long_episode_memory(64, 60)
    draws = MinibatchDraws(memory, batch_size=4)
    drawn = draws.draw(1, buffer=0).states[:, -1, 0, 0]  # slot i holds frames of value i
    leaves = memory.priorities.leaves.copy()
    draws.write_back(0, np.full(4, 3.0))
    written = np.flatnonzero(memory.priorities.leaves != leaves)
    assert sorted(written) == sorted(set(drawn))
    np.testing.assert_allclose(memory.priorities.leaves[written],
                               (3.0 + PRIORITY_EPSILON) ** ALPHA)


def test_new_transitions_enter_with_the_largest_priority_seen():
    memory = long_episode_memory(64, 10)
    memory.priorities.write_back(np.array([2]), np.array([-9.0]))
    memory.add_many(acted_transitions(np.ones((3, 84, 84), np.uint8), np.zeros(3, np.uint8),
                                      np.zeros(3, np.float32), np.zeros(3, bool),
                                      np.zeros(3, bool)))
    np.testing.assert_allclose(memory.priorities.leaves[10:13], (9.0 + PRIORITY_EPSILON) ** ALPHA)
    np.testing.assert_allclose(memory.priorities.leaves[3:10], 1.0)  # the first ones: 1


def test_transitions_never_to_be_drawn_enter_with_priority_0():
    """A fast flush's pieces hold rows marked not to be sampled (an unfinished episode's
    last transitions and the context copied before the next piece), which stay so. At the
    largest priority they held 7% of the sampling mass by the end of a learning check,
    every draw of them rejected and drawn again; at 0 they are never drawn, and the draws
    among the others keep their proportions (`test_draws_follow_the_priorities_to_the_power_alpha`)."""
    memory = long_episode_memory(64, 10)
    memory.priorities.write_back(np.array([2]), np.array([-4.0]))
    piece = acted_transitions(np.ones((6, 84, 84), np.uint8), np.zeros(6, np.uint8),
                              np.zeros(6, np.float32), np.zeros(6, bool), np.zeros(6, bool))
    piece.sampleable[[0, 1, 5]] = False  # context, context, the unfinished last one
    piece.episode_ends[5] = True
    memory.add_in_order([piece])
    np.testing.assert_allclose(memory.priorities.leaves[10:16],
                               np.array([0, 0, 1, 1, 1, 0]) * (4.0 + PRIORITY_EPSILON) ** ALPHA)
    tree = memory.priorities
    assert tree.total == pytest.approx(tree.leaves.sum())
    found = tree.find(np.random.default_rng(0).random(2000) * tree.total)  # before rejection
    assert not np.isin(found, [10, 11, 15]).any()


def test_an_episode_closed_on_resume_leaves_its_last_row_at_priority_0():
    """A resumed serial run closes the saved open episode: its newest row, stored at the
    largest priority, can never be drawn now. At that priority it was drawn and rejected for
    the rest of the run; at 0 the tree never finds it and the other leaves keep theirs."""
    memory = long_episode_memory(64, 10)
    memory.priorities.write_back(np.array([2]), np.array([-4.0]))
    memory.add_many(acted_transitions(np.ones((1, 84, 84), np.uint8), np.zeros(1, np.uint8),
                                      np.zeros(1, np.float32), np.zeros(1, bool),
                                      np.zeros(1, bool)))
    before = memory.priorities.leaves[:11].copy()
    assert before[10] == pytest.approx((4.0 + PRIORITY_EPSILON) ** ALPHA)  # the largest seen
    memory.close_open_episode()
    np.testing.assert_array_equal(memory.priorities.leaves[:10], before[:10])
    assert memory.priorities.leaves[10] == 0
    tree = memory.priorities
    assert tree.total == pytest.approx(before[:10].sum())
    found = tree.find(np.random.default_rng(0).random(2000) * tree.total)
    assert not (found == 10).any()


@pytest.mark.parametrize("beta", [0.4, 0.7, 1.0])
def test_importance_weights_are_the_papers_normalized_by_the_largest(beta):
    """w_i = (N P(i))^-beta / max_j w_j (Schaul et al. 2016, Algorithm 1), P(i) = p_i^alpha /
    sum_k p_k^alpha over the memory, each minibatch normalized by its own largest weight."""
    memory = long_episode_memory(64, 60)
    rng = np.random.default_rng(1)
    priorities = rng.random(60) * 4 + 0.1
    memory.priorities.set(np.arange(60), priorities)
    slots = rng.choice(59, size=(3, 8))  # 3 minibatches of 8
    weights = memory.slot_batch(slots.reshape(-1), np.full(3, beta)).weights.reshape(3, 8)
    probabilities = priorities ** ALPHA / (priorities ** ALPHA).sum()
    naive = (60 * probabilities[slots]) ** -beta
    naive /= naive.max(axis=1, keepdims=True)
    np.testing.assert_allclose(weights, naive, rtol=1e-6)
    assert (weights.max(axis=1) == 1).all() and (weights < 1).any()


def test_without_priorities_every_weight_is_one():
    memory = ReplayMemory(64, np.random.default_rng(0))
    memory.add_many(acted_transitions(np.ones((30, 84, 84), np.uint8), np.zeros(30, np.uint8),
                                      np.zeros(30, np.float32), np.zeros(30, bool),
                                      np.zeros(30, bool)))
    assert memory.priorities is None
    assert memory.slot_batch(np.arange(8), np.full(1, 0.5)).weights.tolist() == [1.0] * 8


def test_a_memory_restored_from_its_arrays_draws_what_the_original_draws():
    original = long_episode_memory(64, 80, seed=4)  # wrapped
    original.priorities.write_back(np.arange(20), np.linspace(0, 3, 20))
    restored = ReplayMemory(64, np.random.default_rng(99), prioritized=True)
    fill_memory(restored, {name: np.array(array) for name, array in
                           original.state_dict().items()})
    restored.restore_generator(original.generator_state())
    np.testing.assert_array_equal(restored.priorities.tree, original.priorities.tree)
    np.testing.assert_array_equal(restored.sample_indices(500), original.sample_indices(500))


def test_the_importance_exponent_goes_from_0_4_to_1_over_the_runs_updates():
    """Schaul et al. (2016) anneal beta from beta_0 = 0.4 to 1 by the end of learning
    (dqn_zoo: 0.4 to 1 over the run). 1,000 steps after a 200-step start at 4 steps per update
    make 200 updates, numbered 0 to 199."""
    from fast_dqn.config import Config
    from fast_dqn.schedule import importance_exponent_at
    config = Config(timesteps=1000, replay_start=200, train_freq=4)
    assert importance_exponent_at(0, config) == pytest.approx(0.4)
    assert importance_exponent_at(199, config) == pytest.approx(1.0)
    assert importance_exponent_at(99, config) == pytest.approx(0.4 + 0.6 * 99 / 199)
    assert importance_exponent_at(10_000, config) == pytest.approx(1.0)  # an extended run's


def test_prioritized_replay_lowers_rmsprops_step_as_dqn_zoo_does_and_implies_nothing_else():
    """dqn_zoo/prioritized/run_atari.py: learning rate 0.00025 / 4 and optimizer epsilon
    (0.01 / 32**2) * (1 / 4)**2 for its mean loss, which is 0.01 / 16 for the summed loss
    (dividing the loss by 32 divides the squared gradients by 32**2). A flag given wins; Adam
    keeps its own learning rate; Double DQN stays off (Schaul et al. ran it on Double DQN:
    here that is --double, given or not)."""
    from fast_dqn.config import Config, new_run_settings
    settings = new_run_settings({"prioritized": True})
    assert settings["lr"] == pytest.approx(0.00025 / 4)
    assert settings["rmsprop_epsilon"] == pytest.approx(0.01 / 16)
    assert Config(**settings).double is False
    assert new_run_settings({"prioritized": True, "lr": 1e-4})["lr"] == 1e-4
    assert new_run_settings({"prioritized": True, "optimizer": "adam"})["lr"] == \
        new_run_settings({"optimizer": "adam"})["lr"]
    assert "lr" not in new_run_settings({})  # Nature's run takes the field's default
