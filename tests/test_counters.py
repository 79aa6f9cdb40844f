"""Tests of fast_dqn.counters: EpisodeStats and RunCounters (the schedule's tests are in
test_schedule.py)."""

from __future__ import annotations

import json
import math

import pytest

from fast_dqn import counters
from fast_dqn.config import Config
from fast_dqn.counters import EpisodeStats, RunCounters
from fast_dqn.state_fields import StateError
from tests.fakes import NATURE, FakeClock, episodes_of


@pytest.fixture
def clock(monkeypatch):
    """Stands in for the `time` module of fast_dqn.counters (only `monotonic` is read)."""
    fake = FakeClock(1000.0)
    monkeypatch.setattr(counters, "time", fake)
    return fake


def test_episode_stats_average_the_last_window_games():
    stats = EpisodeStats(window=3)
    assert stats.episodes == 0 and math.isnan(stats.avg_return) and math.isnan(stats.avg_length)
    for length, score in [(10, 1.0), (20, 2.0)]:
        stats.add(length, score)
    assert (stats.episodes, stats.avg_length, stats.avg_return) == (2, 15.0, 1.5)
    for length, score in [(30, 3.0), (40, 10.0)]:
        stats.add(length, score)
    assert (stats.episodes, stats.avg_length, stats.avg_return) == (4, 30.0, 5.0)
    with pytest.raises(ValueError, match="at least 1"):
        EpisodeStats(window=0)


def test_episode_stats_state_round_trips_through_json():
    stats = EpisodeStats()
    for length, ret in episodes_of(130):
        stats.add(length, ret)
    restored = EpisodeStats()
    restored.restore(json.loads(json.dumps(stats.state())))
    assert restored.state() == stats.state()
    for length, ret in episodes_of(20):
        stats.add(length, ret)
        restored.add(length, ret)
    assert restored.state() == stats.state()
    assert (restored.episodes, restored.avg_length, restored.avg_return) == \
        (stats.episodes, stats.avg_length, stats.avg_return)


def test_episode_stats_round_trip_before_the_window_fills_and_with_no_games():
    for games in (0, 7):
        stats = EpisodeStats()
        for length, ret in episodes_of(games):
            stats.add(length, ret)
        restored = EpisodeStats()
        restored.restore(json.loads(json.dumps(stats.state())))
        assert restored.state() == stats.state() and restored.episodes == games


MISSING = object()  # a key left out of the state
GOOD_STATS = {"window": 100, "episodes": 2, "lengths": [5, 6], "returns": [1.0, -2.0]}


@pytest.mark.parametrize("change, message", [
    ({"returns": MISSING}, "'returns' is missing"),
    ({"episodes": "abc"}, "'episodes' must be an integer"),
    ({"episodes": -1}, "'episodes' must be at least 0"),
    ({"episodes": 1}, "'lengths' must be a list of at most 1 numbers"),  # 2 lengths, 1 game
    ({"lengths": [5, 6, 7], "returns": [1.0, 2.0, 3.0]}, "at most 2"),
    ({"lengths": [0, 6]}, "'lengths' must be at least 1"),
    ({"lengths": [5]}, "keep 1 lengths and 2 returns of 2 games; expected 2"),
    ({"lengths": [5, 6.5]}, "whole agent steps"),
    ({"returns": [1.0, math.nan]}, "'returns' must be a finite number"),
    ({"window": 0}, "'window' must be at least 1"),
], ids=["missing-key", "episodes-abc", "negative-episodes", "more-lengths-than-games",
        "more-than-episodes", "length-0", "fewer-lengths", "fractional-length", "nan-return",
        "window-0"])
def test_episode_stats_restore_refuses_bad_states(change, message):
    state = {key: value for key, value in {**GOOD_STATS, **change}.items()
             if value is not MISSING}
    stats = EpisodeStats()
    stats.add(3, 4.0)
    before = stats.state()
    with pytest.raises(StateError, match=message):
        stats.restore(state)
    assert stats.state() == before  # nothing changed


def test_episode_stats_restore_accepts_the_good_state():
    stats = EpisodeStats()
    stats.restore(GOOD_STATS)
    assert (stats.episodes, stats.avg_length, stats.avg_return) == (2, 5.5, -0.5)


# ---------------------------------------------------------------------------- RunCounters


def test_run_counters_state_round_trips_through_json(clock):
    run = RunCounters(NATURE)
    run.step, run.updates = 60_000, 2_500
    for length, ret in episodes_of(5):
        run.games.add(length, ret)
    run.mark_learning_start()
    clock.now += 36.0
    run.step, run.updates = 64_000, 3_500
    state = json.loads(json.dumps(run.state()))
    assert state == {"step": 64_000, "updates": 3_500, "refill_until": 0,
                     "updates_before_refill": 0, "games": run.games.state(),
                     "hours": pytest.approx(0.01), "learning_seconds": 36.0,
                     "learning_steps": 4_000, "learning_updates": 1_000}
    restored = RunCounters(NATURE)
    restored.restore(state)
    assert restored.state() == state
    assert (restored.step, restored.updates, restored.games.episodes) == (64_000, 3_500, 5)
    assert restored.recent_mean_score() == pytest.approx(
        sum(ret for _, ret in episodes_of(5)) / 5)


def test_run_counters_before_learning(clock):
    run = RunCounters(NATURE)
    assert run.rates() == (0.0, 0.0)
    assert run.recent_mean_score() is None
    run.step = 49_999
    run.mark_learning_start()  # too early: no clock yet
    clock.now += 50.0
    assert run.rates() == (0.0, 0.0)


def test_rates_of_a_resumed_run_include_the_earlier_process(clock):
    started = []
    state = {"step": 51_000, "updates": 250, "refill_until": 0, "updates_before_refill": 0,
             "games": EpisodeStats().state(), "hours": 0.5, "learning_seconds": 100.0,
             "learning_steps": 1_000, "learning_updates": 250}
    run = RunCounters(NATURE)
    run.on_learning_start.append(lambda: started.append(run.step))
    run.restore(state)
    assert run.rates() == (10.0, 2.5)  # 1,000 steps and 250 updates in 100 s
    assert run.hours() == 0.5
    run.mark_learning_start()
    run.mark_learning_start()  # the clock starts once
    assert started == [51_000]
    clock.now += 100.0
    run.step, run.updates = 53_000, 750
    assert run.rates() == (15.0, 3.75)  # 3,000 steps and 750 updates in 200 s
    assert run.hours() == pytest.approx(0.5 + 100 / 3600)
    saved = run.state()
    assert (saved["learning_seconds"], saved["learning_steps"], saved["learning_updates"]) == \
        (200.0, 3_000, 750)


def test_the_rate_counts_only_the_steps_whose_updates_are_made(clock):
    """Regression (issue 46): a fast run stopped while its samplers ran ahead wrote 79
    steps/s to summary.json while its learner trained about 50 (12.5 updates/s x 4). By
    hand: 2,000 steps taken but 250 updates (1,000 steps' worth) in 100 s = 10 steps/s."""
    run = RunCounters(NATURE)
    run.step = NATURE.replay_start
    run.mark_learning_start()
    clock.now += 100.0
    run.step, run.updates = NATURE.replay_start + 2_000, 250
    assert run.rates() == (10.0, 2.5)
    run.updates = 600  # more updates than steps (a resume's owed epoch): the steps count
    assert run.rates() == (20.0, 6.0)


def good_counters_state(**changes) -> dict:
    state = {"step": 60_000, "updates": 2_500, "refill_until": 0, "updates_before_refill": 0,
             "games": EpisodeStats().state(), "hours": 1.0, "learning_seconds": 0.0,
             "learning_steps": 0, "learning_updates": 0}
    return {**state, **changes}


@pytest.mark.parametrize("config, change, message", [
    # The fast trainer's last round may end up to W - 1 = 7 steps past --timesteps.
    (NATURE.replace(timesteps=59_992), {}, r"'step' must be within \[0, 59999\]"),
    # The fast trainer runs up to one epoch (10,000 steps: 2,500 updates) ahead of its steps.
    (NATURE, {"updates": 5_001}, r"'updates' \(5001\) exceeds the updates due by the end of "
                                 r"the epoch of step 60000"),
    (NATURE, {"updates": -1}, r"'updates' must be at least 0"),
    (NATURE, {"hours": -0.5}, "'hours' must be at least 0.0"),
    (NATURE, {"learning_seconds": -1.0}, "'learning_seconds' must be at least 0.0"),
    (NATURE, {"learning_steps": 60_001}, "'learning_steps' must be within"),
    (NATURE, {"games": {"window": 100, "episodes": -1}}, "'episodes' must be at least 0"),
    (NATURE, {"step": 6.0e4}, "'step' must be an integer"),
], ids=["step-above-timesteps", "updates-above-due", "negative-updates", "negative-hours",
        "negative-seconds", "learning-steps-above-step", "bad-games", "float-step"])
def test_run_counters_restore_refuses_bad_states(config, change, message):
    run = RunCounters(config)
    run.step, run.updates = 123, 0
    with pytest.raises(StateError, match=message):
        run.restore(good_counters_state(**change))
    assert (run.step, run.updates) == (123, 0)  # nothing changed


def test_run_counters_restore_accepts_the_edges():
    RunCounters(NATURE.replace(timesteps=60_000)).restore(good_counters_state())
    RunCounters(NATURE).restore(good_counters_state(updates=2_500))
    RunCounters(NATURE).restore(good_counters_state(updates=5_000))  # a whole epoch ahead


def test_a_fast_run_stopped_mid_epoch_restores():
    """Regression: a stop in the middle of an epoch saved the epoch's updates, made ahead of
    its steps, and the resume refused them. Replay start 400, epochs of 400 steps, W = 4:
    at step 816 the epoch 800-1200 may have made all of its 100 updates: 104 in all, and up
    to (1216 - 400) / 4 = 204 within one more epoch."""
    config = Config(replay_start=400, target_update=400, timesteps=20_000)
    RunCounters(config).restore(good_counters_state(step=816, updates=108))
    RunCounters(config).restore(good_counters_state(step=816, updates=204))
    with pytest.raises(StateError, match="exceeds the updates due"):
        RunCounters(config).restore(good_counters_state(step=816, updates=205))


def test_updates_due_after_a_refill_pause():
    # Resumed at step 1,000,000 after 237,500 updates ((1,000,000 - 50,000) / 4), with an
    # empty memory: 50,000 steps of refilling before the next update is due.
    run = RunCounters(NATURE)
    run.step, run.updates = 1_000_000, 237_500
    run.start_refill()
    assert run.updates_due(1_000_000) == 237_500
    assert run.updates_due(1_050_003) == 237_500
    assert run.updates_due(1_050_004) == 237_501
    assert run.updates_due(1_090_000) == 247_500
    state = good_counters_state(step=1_050_004, updates=237_501, refill_until=1_000_000,
                                updates_before_refill=237_500)
    RunCounters(NATURE).restore(state)
    # Up to one epoch ahead: due by step 1,060,004 is 237,500 + 10,004 // 4 = 240,001.
    RunCounters(NATURE).restore({**state, "updates": 240_001})
    with pytest.raises(StateError, match="exceeds the updates due"):
        RunCounters(NATURE).restore({**state, "updates": 240_002})


# A run with a 400-step random start and 800-step epochs: its epochs end at 1,200, 2,000, ...
SHORT = Config(replay_start=400, target_update=800, timesteps=1_200, workers=4)


def resumed_at_1200(updates: int, seconds: float, timesteps: int = 1_200) -> dict:
    """A checkpoint at step 1,200 whose first process learned 800 steps and made `updates`
    updates in `seconds`: the epoch 400-1,200 owes the rest of its 200."""
    return {"step": 1_200, "updates": updates, "refill_until": 0, "updates_before_refill": 0,
            "games": EpisodeStats().state(), "hours": 0.1, "learning_seconds": seconds,
            "learning_steps": 800, "learning_updates": updates}


def test_a_final_window_resume_counts_its_updates_in_the_rate(clock):
    """Regression (issue 34): a resume in the final window makes the updates its last epoch
    owes before the loop acts, so `mark_learning_start` never came, and summary.json's
    updates_per_second left them and their time out: 50 / 20 s = 2.5 instead of the 6.7 by
    hand below."""
    run = RunCounters(SHORT)
    run.restore(resumed_at_1200(updates=50, seconds=20.0))
    clock.now += 10.0  # the 150 owed updates, made in 10 s
    run.updates = 200
    steps_per_second, updates_per_second = run.rates()
    assert updates_per_second == pytest.approx(200 / 30)  # (50 + 150) in (20 + 10) s
    assert steps_per_second == pytest.approx(800 / 30)  # no step in the 10 s
    saved = run.state()
    assert (saved["learning_seconds"], saved["learning_steps"], saved["learning_updates"]) == \
        (30.0, 800, 200)


def test_a_resume_counts_the_updates_owed_before_it_acts_and_announces_learning_once(clock):
    """A resume at 1,200 of 2,000: the 150 owed updates (10 s), then the loop acts, marks the
    learning start (its callbacks run then, once) and takes 800 steps with 200 updates (40 s).
    By hand: 1,600 steps and 400 updates in 20 + 10 + 40 = 70 s."""
    started = []
    run = RunCounters(SHORT.replace(timesteps=2_000))
    run.on_learning_start.append(lambda: started.append(run.step))
    run.restore(resumed_at_1200(updates=50, seconds=20.0))
    clock.now += 10.0
    run.updates = 200
    run.mark_learning_start()
    assert started == [1_200]
    clock.now += 40.0
    run.step, run.updates = 2_000, 400
    run.mark_learning_start()
    assert started == [1_200]
    assert run.rates() == (pytest.approx(1_600 / 70), pytest.approx(400 / 70))


def test_a_resume_before_the_replay_start_starts_its_clock_at_the_replay_start(clock):
    state = {**resumed_at_1200(updates=0, seconds=0.0), "step": 200, "learning_steps": 0}
    run = RunCounters(SHORT)
    run.restore(state)
    clock.now += 50.0  # random steps: no learning time
    run.step = 400
    run.mark_learning_start()
    clock.now += 10.0
    run.step, run.updates = 800, 100
    assert run.rates() == (pytest.approx(400 / 10), pytest.approx(100 / 10))
