"""Tests of fast_dqn.schedule: Nature's numbers and the fast scheme's epochs, worked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from fast_dqn.config import Config
from fast_dqn.schedule import (epoch_end, epsilon_at, epsilons_at, final_epsilon_step,
                               learning_started, next_target_sync, period_passed,
                               target_sync_due, updates_due)
from tests.fakes import NATURE


def test_nature_settings_are_the_defaults():
    assert (NATURE.replay_start, NATURE.train_freq, NATURE.target_update) == \
        (50_000, 4, 10_000)
    assert (NATURE.initial_epsilon, NATURE.final_epsilon, NATURE.exploration_steps) == \
        (1.0, 0.1, 1_000_000)


def test_learning_started_at_the_replay_start():
    assert not learning_started(0, NATURE)
    assert not learning_started(49_999, NATURE)
    assert learning_started(50_000, NATURE)
    assert learning_started(10_000_000, NATURE)


def test_epsilon_at_nature_steps():
    assert epsilon_at(0, NATURE) == 1.0
    assert epsilon_at(49_999, NATURE) == 1.0
    assert epsilon_at(50_000, NATURE) == 1.0  # the decay starts here
    assert epsilon_at(300_000, NATURE) == pytest.approx(0.775)  # 1 - 0.25 * 0.9
    assert epsilon_at(550_000, NATURE) == pytest.approx(0.55)  # halfway: 1 - 0.5 * 0.9
    assert epsilon_at(1_049_999, NATURE) == pytest.approx(0.1000009)  # 1 - 0.999999 * 0.9
    assert epsilon_at(1_050_000, NATURE) == 0.1
    assert epsilon_at(1_050_001, NATURE) == 0.1
    assert epsilon_at(50_000_000, NATURE) == 0.1


def test_epsilon_is_final_from_the_end_of_the_decay_on():
    # Nature: 50,000 random steps, then a decay over 1,000,000 steps.
    assert final_epsilon_step(NATURE) == 1_050_000
    assert final_epsilon_step(NATURE.replace(exploration_steps=0)) == 50_000


def test_epsilon_without_a_decay_drops_at_the_replay_start():
    config = NATURE.replace(exploration_steps=0)
    assert epsilon_at(49_999, config) == 1.0
    assert epsilon_at(50_000, config) == 0.1


@pytest.mark.parametrize("config", [NATURE, NATURE.replace(exploration_steps=0),
                                    NATURE.replace(replay_start=0, initial_epsilon=0.5)],
                         ids=["nature", "no-decay", "no-replay-start"])
def test_epsilons_at_equals_epsilon_at_elementwise(config):
    steps = np.array([0, 1, 49_999, 50_000, 50_001, 300_000, 550_000, 777_777, 1_049_999,
                      1_050_000, 1_050_001, 50_000_000], dtype=np.int64)
    expected = [epsilon_at(int(step), config) for step in steps]
    got = epsilons_at(steps, config)
    assert got.dtype == np.float64 and got.shape == steps.shape
    assert got.tolist() == expected  # the same arithmetic: equal, not just close


@pytest.mark.parametrize("first", [0, 49_990, 50_000, 300_000, 1_049_984, 1_049_990, 1_050_000])
def test_epsilons_of_one_round_equal_epsilon_at_on_either_side_of_the_decay(first):
    """The W steps of one round: inside the decay (where no masked write is made), and
    straddling its start or end."""
    steps = np.arange(first, first + 16, dtype=np.int64)
    expected = [epsilon_at(int(step), NATURE) for step in steps]
    assert epsilons_at(steps, NATURE).tolist() == expected


def test_updates_due_one_per_four_steps_after_the_replay_start():
    assert updates_due(0, NATURE) == 0
    assert updates_due(49_999, NATURE) == 0
    assert updates_due(50_003, NATURE) == 0
    assert updates_due(50_004, NATURE) == 1
    assert updates_due(50_007, NATURE) == 1
    assert updates_due(50_008, NATURE) == 2
    assert updates_due(90_000, NATURE) == 10_000  # 40,000 steps / 4
    assert updates_due(50_000_000, NATURE) == 12_487_500  # (50M - 50k) / 4


def test_target_sync_every_10000_steps_after_the_replay_start():
    assert not target_sync_due(0, NATURE)
    assert not target_sync_due(40_000, NATURE)  # a multiple, but before the replay start
    assert not target_sync_due(50_000, NATURE)
    assert target_sync_due(60_000, NATURE)
    assert not target_sync_due(65_000, NATURE)
    assert target_sync_due(70_000, NATURE)
    assert not target_sync_due(70_001, NATURE)


def test_next_target_sync():
    assert next_target_sync(50_000, NATURE) == 60_000
    assert next_target_sync(50_001, NATURE) == 60_000
    assert next_target_sync(59_999, NATURE) == 60_000
    assert next_target_sync(60_000, NATURE) == 70_000  # the first one after the step
    assert next_target_sync(65_000, NATURE) == 70_000


def test_the_fast_schemes_epochs_end_at_the_sync_points_and_where_a_refill_ends():
    """By hand, for a replay start of 400 and target syncs every 400 steps (W = 4): the
    random start in epochs of 400 steps; then every 400 steps from 400; a refill resumed at
    step 8,484 (a stop's checkpoint, between two sync points) ends at 8,884, and the sync
    points stay at 8,800 and 9,200. Regression (the soak): the refill's epochs moved every
    later sync point, so an evaluation due at 8,800 came at 8,884."""
    config = Config(replay_start=400, target_update=400, replay_capacity=5000,
                    timesteps=10_000, workers=4)

    def ends(step: int, learning_from: int, until: int) -> list[int]:
        found = []
        while step < until:
            step = epoch_end(step, learning_from, config, num_envs=4)
            found.append(step)
        return found

    assert ends(0, 400, 1200) == [400, 800, 1200]
    assert ends(8484, 8884, 9600) == [8800, 8884, 9200, 9600]
    assert ends(9900, 400, 10_000) == [10_000]  # the run's last round, not 10,000 + 400
    assert epoch_end(9_996, 400, config.replace(timesteps=9_999), 4) == 10_000


def test_period_passed():
    assert period_passed(250_000, 249_999, 250_000)
    assert period_passed(250_000, 240_000, 260_000)
    assert not period_passed(250_000, 250_000, 250_008)  # already passed at the start
    assert not period_passed(250_000, 0, 249_999)
    assert period_passed(250_000, 0, 500_000)  # two multiples at once still count
    assert not period_passed(0, 0, 10**9)  # 0 = never
    assert not period_passed(4, 8, 8)  # an empty interval


# ---------------------------------------------------------------------------- EpisodeStats
