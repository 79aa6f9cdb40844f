"""Tests of fast_dqn.progress: the live progress line, its rate and its ETA.

Every expected rate and ETA below is worked out by hand from the fake clock's times.
"""

from __future__ import annotations

import fcntl
import io
import os
import re
import select
import struct
import subprocess
import sys
import termios
import threading

import pytest

from fast_dqn import progress as progress_module
from fast_dqn.progress import Progress
from tests.fakes import FakeClock, screen

# Nature's schedule (the Config defaults): the fill, the steps per update, an epoch.
NATURE = {"replay_start": 50_000, "steps_per_update": 4, "epoch_steps": 10_000}


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    """A FakeTerminal has no size of its own: its width is $COLUMNS, 200 unless a test
    says otherwise."""
    monkeypatch.setenv("COLUMNS", "200")


def plain(total: int, first: dict | None = None, **kwargs
          ) -> tuple[Progress, io.StringIO, FakeClock]:
    """A progress line off a terminal with a fake clock at 0, given the run's first step
    then (`first`: report's arguments; step 0 by default), as the loop does as it starts."""
    stream, clock = io.StringIO(), FakeClock()
    kwargs.setdefault("every_seconds", 1.0)
    progress = Progress(total, stream=stream, clock=clock, **kwargs)
    report(progress, **(first or {"step": 0}))
    return progress, stream, clock


def report(progress: Progress, step: int, **kwargs) -> None:
    progress.update(step, epsilon=0.5, recent_return=1.0, last_eval=2.0, **kwargs)


def pause(progress: Progress, clock: FakeClock, kind: str, seconds: float) -> None:
    with progress.paused(kind):
        clock.now += seconds


def last_line(stream: io.StringIO) -> str:
    return stream.getvalue().splitlines()[-1]


def drawn(stream: io.StringIO) -> str:
    """The progress line as last drawn on a terminal."""
    return stream.getvalue().split("\r")[-1].rstrip()


# ---------------------------------------------------------------------------- the plain line


def test_progress_off_a_terminal_prints_plain_periodic_lines():
    progress, stream, clock = plain(50_000_000, every_seconds=10.0)
    clock.now = 5.0
    progress.update(5_000, epsilon=0.95, recent_return=None, last_eval=None)
    assert stream.getvalue() == ""  # not due yet
    clock.now = 10.0
    progress.update(12_000, epsilon=0.91, recent_return=-20.3, last_eval=-21.0)
    clock.now = 20.0
    progress.update(32_000, epsilon=0.88, recent_return=-20.04, last_eval=None)
    progress.close()
    lines = stream.getvalue().splitlines()
    # 12000 steps in 10 s: 1200 steps/s; 49 988 000 / 1200 = 41 657 s = 11h34m.
    assert lines[0] == ("step 12000/50000000 (0.0%) | 1200 steps/s | ETA 11h34m | "
                        "eps 0.91 | return -20.3 | eval -21.0")
    # The rate is the average since the start, not over the last interval:
    # 32000 steps in 20 s = 1600 steps/s; 49 968 000 / 1600 = 31 230 s = 8h40m.
    assert lines[1] == ("step 32000/50000000 (0.1%) | 1600 steps/s | ETA 8h40m | "
                        "eps 0.88 | return -20.0 | eval -")
    assert len(lines) == 2  # close adds nothing when the last step was already shown
    assert "\r" not in stream.getvalue()


def test_progress_off_a_terminal_with_real_clock():
    stream = io.StringIO()
    progress = Progress(1000, every_seconds=1e-9, stream=stream)
    for step in range(100, 1001, 100):
        progress.update(step, epsilon=0.5, recent_return=1.0, last_eval=2.0)
    progress.close()
    lines = stream.getvalue().splitlines()
    assert 9 <= len(lines) <= 10  # the first may come before the clock moved
    assert all(" steps/s | ETA " in line for line in lines)
    assert lines[-1].startswith("step 1000/1000 (100.0%)") and "ETA 0m00s" in lines[-1]


def test_progress_close_prints_the_final_step():
    progress, stream, clock = plain(100, every_seconds=30.0)
    clock.now = 2.0
    progress.update(100, epsilon=0.1, recent_return=3.0, last_eval=None)
    assert stream.getvalue() == ""
    progress.close()
    assert stream.getvalue() == ("step 100/100 (100.0%) | 50 steps/s | ETA 0m00s | "
                                 "eps 0.10 | return 3.0 | eval -\n")


# ---------------------------------------------------------------------------- rate and pauses


def test_a_phase_says_that_it_starts_and_its_time_stays_in_the_rate():
    progress, stream, clock = plain(1_000_000, every_seconds=30.0)
    clock.now = 10.0
    report(progress, 1000)  # not due yet
    progress.phase("waiting for the learner")
    assert stream.getvalue() == "waiting for the learner at step 1000\n"
    clock.now = 40.0
    report(progress, 1000)  # due, the phase named: the rate as the steps were last counted
    # (1000 steps in 10 s), the ETA counted down since: 999 000 / 100 - 30 = 9960 s.
    assert last_line(stream).startswith("step 1000/1000000 (0.1%) | waiting for the learner "
                                        "0m30s | 100 steps/s | ETA 2h46m | ")
    clock.now = 70.0
    report(progress, 1400)  # acting again: the phase is over; 1400 steps / 70 s
    assert last_line(stream).startswith("step 1400/1000000 (0.1%) | 20 steps/s | ")


def test_a_pause_inside_a_print_interval_leaves_the_rate_alone():
    progress, stream, clock = plain(1_000_000, every_seconds=30.0)
    clock.now = 10.0
    report(progress, 1000)  # 1000 steps in 10 s of acting; not due yet
    pause(progress, clock, "evaluation", 100.0)
    # A pause only says that it starts, so that a log tells why the progress lines stop.
    assert stream.getvalue() == "evaluation at step 1000\n"
    report(progress, 1000)  # t = 110: due; 1000 steps / (110 - 100) s = 100 steps/s
    assert last_line(stream).startswith("step 1000/1000000 (0.1%) | 100 steps/s | ")
    clock.now = 140.0
    report(progress, 4000)  # 4000 steps / (140 - 100) s = 100 steps/s
    assert last_line(stream).startswith("step 4000/1000000 (0.4%) | 100 steps/s | ")
    assert len(stream.getvalue().splitlines()) == 3


def test_the_eta_counts_the_pauses_to_come_at_their_measured_cost():
    periods = {"evaluation": 25_000, "checkpoint": 50_000}
    progress, stream, clock = plain(100_000, periods=periods)
    clock.now = 250.0
    report(progress, 25_000)  # 100 steps/s; no pause measured yet: 75 000 / 100 = 750 s
    assert "| 100 steps/s | ETA 12m30s |" in last_line(stream)
    pause(progress, clock, "evaluation", 60.0)  # t = 310
    report(progress, 25_000)
    # 750 s of steps + 3 evaluations to come (50k, 75k, 100k) x 60 s = 930 s.
    assert "| 100 steps/s | ETA 15m30s |" in last_line(stream)
    clock.now = 560.0
    report(progress, 50_000)  # 50 000 steps in 560 - 60 = 500 s of training
    pause(progress, clock, "evaluation", 90.0)  # t = 650; evaluations average 75 s
    pause(progress, clock, "checkpoint", 120.0)  # t = 770
    report(progress, 50_000)
    # 50 000 / 100 = 500 s of steps + 2 evaluations (75k, 100k) x 75 s + 1 checkpoint
    # (the final one, which replaces the periodic one at 100k) x 120 s = 770 s.
    assert "| 100 steps/s | ETA 12m50s |" in last_line(stream)


def test_nested_pauses_charge_each_kind_its_own_time():
    progress, stream, clock = plain(1000, periods={"evaluation": 500, "checkpoint": 500})
    clock.now = 1.0
    report(progress, 100)
    with progress.paused("evaluation"):
        clock.now += 10.0
        pause(progress, clock, "checkpoint", 30.0)
    report(progress, 100)  # t = 41: 100 steps / 1 s of training = 100 steps/s
    # 900 / 100 = 9 s + 2 evaluations (500, 1000) x 10 s + 2 checkpoints (500, and the
    # final one, which replaces the one at 1000) x 30 s = 9 + 20 + 60 = 89 s.
    assert "| 100 steps/s | ETA 1m29s |" in last_line(stream)


def test_an_interrupted_pause_is_left_out_of_the_rate_but_not_measured():
    progress, stream, clock = plain(10_000, periods={"evaluation": 5000})
    clock.now = 10.0
    report(progress, 1000)
    with pytest.raises(KeyboardInterrupt):
        with progress.paused("evaluation"):
            clock.now += 500.0
            raise KeyboardInterrupt
    report(progress, 1000)  # 1000 steps / 10 s; 9000 / 100 = 90 s, no evaluation measured
    assert "| 100 steps/s | ETA 1m30s |" in last_line(stream)


def test_steps_during_a_pause_count():
    progress, stream, clock = plain(100_000)
    clock.now = 10.0
    report(progress, 1000)
    with progress.paused("checkpoint"):
        clock.now = 20.0
        report(progress, 2000)  # counted: 2000 steps / 10 s of training = 200 steps/s
    assert "| 200 steps/s |" in last_line(stream)


def test_a_kind_without_a_period_costs_only_its_final_pauses():
    progress, stream, clock = plain(10_000)  # no periods; a final checkpoint all the same
    clock.now = 10.0
    report(progress, 1000)
    pause(progress, clock, "checkpoint", 30.0)  # e.g. a checkpoint on request
    pause(progress, clock, "evaluation", 30.0)  # no period: none to come
    report(progress, 1000)  # 9000 / 100 = 90 s + 1 final checkpoint x 30 s = 120 s
    assert "| 100 steps/s | ETA 2m00s |" in last_line(stream)


# ---------------------------------------------------------------------------- the two stages


def test_the_fill_is_labelled_with_the_time_to_the_replay_start_and_no_run_eta():
    """Regression (issue 46): while the memory filled, the line read `880 steps/s training
    | ETA 15h47m` for a run that learning then put at 11.7 days: the ETA of the whole run,
    from the random steps' rate."""
    progress, stream, clock = plain(50_000_000, **NATURE)
    clock.now = 32.0
    report(progress, 35_520)
    # 35 520 steps in 32 s = 1110 steps/s; (50 000 - 35 520) / 1110 = 13.05 s to the start.
    assert last_line(stream) == ("step 35520/50000000 (0.1%) | filling replay 35,520/50,000 | "
                                 "1110 steps/s | learning in 0m13s | eps 0.50 | return 1.0 | "
                                 "eval 2.0")
    assert "ETA" not in stream.getvalue()


def test_learning_is_measured_from_its_own_start():
    progress, stream, clock = plain(61_000, replay_start=50_000)
    clock.now = 5.0
    report(progress, 25_000)  # 25 000 random steps in 5 s: 25 000 more take 5 s
    assert "| filling replay 25,000/50,000 | 5000 steps/s | learning in 0m05s |" in \
        last_line(stream)
    clock.now = 10.0
    report(progress, 50_000)  # learning starts: its clock too
    assert "| ? steps/s | ETA ? |" in last_line(stream)
    clock.now = 20.0
    report(progress, 51_000)  # 1000 steps in 10 s: 100 steps/s; 10 000 / 100 = 100 s
    assert last_line(stream).startswith("step 51000/61000 (83.6%) | 100 steps/s | ETA 1m40s | ")


def test_a_stage_that_starts_inside_a_pause_counts_only_the_rest_of_it():
    progress, stream, clock = plain(1_000_000, replay_start=1000)
    with progress.paused("evaluation"):
        clock.now = 30.0
        report(progress, 1000)  # learning starts in the pause
        clock.now = 50.0  # 20 s of this pause come after learning started
    clock.now = 60.0
    report(progress, 2000)  # 1000 steps / (60 - 30 - 20) s = 100 steps/s
    assert "| 100 steps/s | ETA" in last_line(stream)


def test_the_eta_comes_within_the_first_minute_of_learning():
    """Regression (issue 46): after the replay start the line read `? steps/s training |
    ETA ?` for more than 3.5 minutes, until a whole epoch (10,000 steps) had ended. Ten
    seconds of learning give the rate now: the samplers ran 10,000 steps ahead, but the
    learner made 250 updates, whose steps are the ones counted."""
    progress, stream, clock = plain(50_000_000, **NATURE)
    clock.now = 46.5
    report(progress, 50_000)  # the replay start
    clock.now = 66.5
    report(progress, 55_000, updates=64)  # the learner's first call, its compile: 20 s
    assert "| ? steps/s | ? updates/s | ETA ? |" in last_line(stream)
    clock.now = 76.5
    report(progress, 60_000, updates=314)
    # From the first call's end (its 64 updates count the steps to 50 256): 250 updates x 4
    # = 1000 steps in 10 s, 100 steps/s, 25 updates/s; (50 000 000 - 50 256 - 1000) / 100 =
    # 499 487 s = 138 h = 5d18h, rough before an epoch's 10 000 steps.
    assert "| 100 steps/s | 25 updates/s | ETA ~5d18h |" in last_line(stream)


def test_the_samplers_running_ahead_move_neither_the_rate_nor_the_eta():
    """Regression (issue 36): within an epoch the samplers run ahead, then wait for the
    learner; a rate of the steps alone swung the ETA by a factor of ten within minutes."""
    progress, stream, clock = plain(101_000, replay_start=1000, steps_per_update=4,
                                    epoch_steps=10_000)
    clock.now = 5.0
    report(progress, 1000)  # the replay start
    clock.now = 15.0
    report(progress, 11_000, updates=250)  # the first call's end: its steps counted to 2000
    progress.phase("waiting for the learner")
    clock.now = 25.0
    report(progress, 11_000, updates=500)  # 9000 steps ahead, 1000 steps' updates in 10 s
    # 1000 steps / 10 s = 100 steps/s (the steps alone would say 900); 98 000 / 100 = 980 s.
    assert "| 100 steps/s | 25 updates/s | ETA ~16m20s |" in last_line(stream)
    clock.now = 105.0
    report(progress, 11_000, updates=2500)  # the epoch's updates: 9000 steps in 90 s
    assert "| 100 steps/s | 25 updates/s | ETA ~15m00s |" in last_line(stream)  # 90 000 / 100
    clock.now = 115.0
    report(progress, 21_000, updates=2750)  # ahead again: 10 000 steps' updates in 100 s
    # 89 000 / 100 = 890 s; an epoch's steps measured: no longer rough.
    assert "| 100 steps/s | 25 updates/s | ETA 14m50s |" in last_line(stream)
    with progress.paused("evaluation"):
        clock.now = 175.0
    clock.now = 265.0
    report(progress, 21_000, updates=5000)  # 19 000 steps in 250 - 60 = 190 s
    # 80 000 / 100 = 800 s (no evaluation period given: none to come).
    assert "| 100 steps/s | 25 updates/s | ETA 13m20s |" in last_line(stream)


def test_when_the_envs_are_slower_than_the_learner_the_steps_set_the_rate():
    progress, stream, clock = plain(101_000, replay_start=1000, steps_per_update=4)
    clock.now = 5.0
    report(progress, 1000)
    clock.now = 7.0
    report(progress, 1100, updates=64)  # the first call's end: 100 steps counted
    clock.now = 107.0
    report(progress, 6100, updates=2564)  # the epoch's updates made; 5000 steps taken
    # 5000 steps / 100 s = 50 steps/s, 2500 updates: 25 updates/s; 94 900 / 50 = 1898 s.
    assert "| 50 steps/s | 25 updates/s | ETA 31m38s |" in last_line(stream)


def test_after_a_resume_the_eta_comes_with_the_first_updates():
    """Regression (issue 46): a resumed run showed `ETA ?` for its first whole epoch."""
    # Resumed past the replay start: the loop's first report is the resumed step's.
    progress, stream, clock = plain(50_000_000, {"step": 1_000_000, "updates": 237_500},
                                    **NATURE)
    clock.now = 5.0
    report(progress, 1_002_000, updates=237_564)  # the first call: its steps to 1 000 256
    clock.now = 25.0
    report(progress, 1_010_000, updates=238_064)
    # 500 updates x 4 = 2000 steps in 20 s: 100 steps/s; (50 000 000 - 1 002 256) / 100 =
    # 489 977 s = 136 h.
    assert "| 100 steps/s | 25 updates/s | ETA ~5d16h |" in last_line(stream)


def test_a_resume_that_first_makes_the_updates_an_epoch_owed_gets_its_eta_from_them():
    """A run stopped while its learner finished an epoch (all the epoch's steps taken)
    makes the rest of the epoch's updates first when resumed, for minutes on a CPU: they
    count the steps they are due for, taken before the stop."""
    progress, stream, clock = plain(50_000_000, {"step": 1_010_000, "updates": 235_000,
                                                 "updates_due": 237_500}, **NATURE)
    clock.now = 5.0
    report(progress, 1_010_000, updates=235_064)  # the first call: steps to 1 000 256
    clock.now = 15.0
    report(progress, 1_010_000, updates=235_314)
    # 250 updates x 4 = 1000 steps in 10 s; (50 000 000 - 1 001 256) / 100 = 489 987 s.
    assert "| 100 steps/s | 25 updates/s | ETA ~5d16h |" in last_line(stream)


def test_a_refill_after_a_resume_is_labelled_as_filling():
    refilled = 1_050_000  # resumed at step 1 000 000 without the memory
    progress, stream, clock = plain(50_000_000, {"step": 1_000_000, "updates": 237_500,
                                                 "learning_from": refilled}, **NATURE)
    clock.now = 10.0
    report(progress, 1_020_000, updates=237_500, learning_from=refilled)
    # 20 000 steps in 10 s; 30 000 more take 15 s.
    assert "| filling replay 20,000/50,000 | 2000 steps/s | learning in 0m15s |" in \
        last_line(stream)
    assert "ETA" not in last_line(stream)
    clock.now = 25.0
    report(progress, refilled, updates=237_500, learning_from=refilled)
    clock.now = 27.0
    report(progress, 1_050_400, updates=237_564, learning_from=refilled)  # to 1 050 256
    clock.now = 37.0
    report(progress, 1_052_000, updates=237_814, learning_from=refilled)
    # 1000 steps in 10 s; (50 000 000 - 1 051 256) / 100 = 489 487 s = 135 h.
    assert "| 100 steps/s | 25 updates/s | ETA ~5d15h |" in last_line(stream)


@pytest.mark.parametrize("replay_start,updates", [(1000, 250), (1001, 249)])
def test_the_eta_reaches_zero_with_the_last_update(replay_start, updates):
    """At the last step the learner may still owe an epoch's updates: the ETA counts them.
    With a replay start that is no multiple of 4, the last update is due 3 steps short of
    the end (updates_due rounds down)."""
    progress, stream, clock = plain(2000, replay_start=replay_start, steps_per_update=4)
    clock.now = 1.0
    report(progress, replay_start)
    clock.now = 6.0
    report(progress, 2000, updates=62)  # the first call: its steps counted to 1248 (1249)
    clock.now = 11.0
    report(progress, 2000, updates=updates // 2)  # 252 (248) steps in 5 s; 500 (503) left
    assert re.search(r"\| \d+ steps/s \| \S+ updates/s \| ETA 0m(09|10)s \|", last_line(stream))
    clock.now = 21.0
    report(progress, 2000, updates=updates)
    assert "| ETA 0m00s |" in last_line(stream)


def test_a_run_of_more_than_a_day_says_so_once_after_a_minute():
    """Issue 46: on the CPU, a 50M-step run takes days; the launch hands the line a note
    that names the way to a shorter run."""
    progress, stream, clock = plain(50_000_000, long_run_note="NOTE", **NATURE)
    clock.now = 50.0
    report(progress, 50_000)
    clock.now = 52.0
    report(progress, 50_500, updates=64)  # the first call: its steps counted to 50 256
    clock.now = 82.0
    report(progress, 53_256, updates=814)  # 30 s: too soon to say
    assert "note" not in stream.getvalue()
    clock.now = 113.0
    report(progress, 56_356, updates=1589)
    # 6100 steps in 61 s: 100 steps/s; (50 000 000 - 56 356) / 100 = 499 436 s = 138 h.
    assert last_line(stream) == ("note: at the rate measured so far the run needs about "
                                 "5d18h more; NOTE")
    clock.now = 200.0
    report(progress, 65_000, updates=3750)
    notes = [line for line in stream.getvalue().splitlines() if "NOTE" in line]
    assert len(notes) == 1 and last_line(stream).startswith("step 65000/")


@pytest.mark.parametrize("total,note", [(1_000_000, "NOTE"), (50_000_000, None)])
def test_a_shorter_run_or_one_without_the_note_says_nothing(total, note):
    progress, stream, clock = plain(total, long_run_note=note, **NATURE)
    clock.now = 50.0
    report(progress, 50_000)
    clock.now = 52.0
    report(progress, 50_500, updates=64)
    clock.now = 113.0
    report(progress, 56_356, updates=1589)  # (1 000 000 - 56 356) / 100 = 9436 s
    assert "note" not in stream.getvalue()


# ---------------------------------------------------------------------------- edges


def test_the_percent_stops_at_100_and_the_step_is_shown_as_is():
    progress, stream, clock = plain(6000)
    clock.now = 6.0
    report(progress, 6004)  # the fast trainer may overshoot by up to W - 1 steps
    assert last_line(stream).startswith("step 6004/6000 (100.0%) | 1001 steps/s | ETA 0m00s | ")


def test_the_eta_is_unknown_before_any_rate():
    progress, stream, clock = plain(1000)
    clock.now = 5.0
    report(progress, 0)  # no steps yet
    assert "| ? steps/s | ETA ? |" in last_line(stream)
    pause(progress, clock, "evaluation", 10.0)
    report(progress, 10)  # 10 steps / (15 - 10) s of training: a slow rate gets a decimal
    assert "| 2.0 steps/s |" in last_line(stream)


def test_the_eta_is_zero_at_the_end_even_with_pauses_measured():
    progress, stream, clock = plain(1000, periods={"evaluation": 500, "checkpoint": 500})
    clock.now = 5.0
    report(progress, 500)
    pause(progress, clock, "evaluation", 20.0)
    pause(progress, clock, "checkpoint", 30.0)
    clock.now = 59.0
    report(progress, 900)  # 900 steps / 9 s; 1 s + 1 evaluation (1000) + 1 final checkpoint
    assert "| 100 steps/s | ETA 0m51s |" in last_line(stream)
    clock.now = 60.0
    report(progress, 1000)
    assert "| 100 steps/s | ETA 0m00s |" in last_line(stream)


def test_update_writes_nothing_when_not_due():
    progress, stream, clock = plain(1000, every_seconds=30.0)
    for step in range(1, 300):
        clock.now = step / 10
        report(progress, step)
    assert stream.getvalue() == ""


# ---------------------------------------------------------------------------- the terminal


def on_terminal(total: int, **kwargs) -> tuple[Progress, FakeTerminal, FakeClock]:
    stream, clock = FakeTerminal(), FakeClock()
    progress = Progress(total, stream=stream, clock=clock, **kwargs)
    report(progress, 0)
    return progress, stream, clock


def test_progress_on_a_terminal_redraws_one_line():
    progress, stream, clock = on_terminal(10_000, every_seconds=30.0)
    for i in range(1, 11):
        clock.now = float(i)
        progress.update(1000 * i, epsilon=0.5, recent_return=-3.0, last_eval=4.0)
        assert "\n" not in stream.getvalue()  # redrawn in place, never a new line per update
    progress.close()
    output = stream.getvalue()
    assert output.count("\r") >= 10 and output.endswith("\n") and output.count("\n") == 1
    assert screen(output) == ["step 10000/10000 (100.0%) | 1000 steps/s | ETA 0m00s | eps 0.50 "
                              "| return -3.0 | eval 4.0 [##############################]", ""]


def test_the_terminal_line_shows_the_rate_and_eta_of_training_time():
    progress, stream, clock = on_terminal(100_000, periods={"evaluation": 50_000})
    clock.now = 10.0
    report(progress, 1000)
    pause(progress, clock, "evaluation", 100.0)
    report(progress, 1000)  # t = 110: the wall clock's average would be 9 steps/s
    # 1000 steps / 10 s of training; 99 000 / 100 = 990 s + 2 evaluations x 100 s = 1190 s.
    assert drawn(stream).startswith("step 1000/100000 (1.0%) | 100 steps/s | ETA 19m50s | "
                                    "eps 0.50 | return 1.0 | eval 2.0 [")
    progress.close()


def test_on_a_terminal_the_line_names_its_phase_while_it_lasts():
    """Regression (issue 36): the terminal's line sat unchanged for minutes while the run
    waited for its trainer (a log said so; the terminal did not)."""
    progress, stream, clock = on_terminal(10_000)
    clock.now = 1.0
    report(progress, 1000)
    progress.phase("waiting for the learner", "waiting for learner")
    assert drawn(stream).startswith("step 1000/10000 (10.0%) | waiting for learner | ")
    clock.now = 3.0
    report(progress, 1000)  # what the loop hands it while it waits
    assert "| waiting for learner 0m02s | " in drawn(stream)
    progress.end_phase()
    with progress.paused("evaluation", "evaluating 30 games"):
        assert "| evaluating 30 games | " in drawn(stream)
        clock.now = 10.0
        report(progress, 1000)
        assert "| evaluating 30 games 0m07s | " in drawn(stream)
    clock.now = 11.0
    report(progress, 1000)
    assert "evaluating" not in drawn(stream) and "waiting" not in drawn(stream)
    assert "\n" not in stream.getvalue()  # a phase leaves no line behind on a terminal
    progress.phase("waiting for the learner", "waiting for learner")
    clock.now = 12.0
    report(progress, 1400)  # acting again: the phase is over
    assert "waiting" not in drawn(stream)


def test_on_a_terminal_a_checkpoint_and_a_message_stay_above_the_line():
    """Regression (issue 36): "checkpoint at step N" was printed only off a terminal."""
    progress, stream, clock = on_terminal(10_000)
    clock.now = 1.0
    report(progress, 1000)
    with progress.paused("checkpoint", "writing checkpoint", lasting=True):
        assert "| writing checkpoint | " in drawn(stream)
        clock.now = 5.0
    progress.message("stopping at step 1000: writing the checkpoint (about 4 s)")
    progress.close()
    shown = [line for line in screen(stream.getvalue()) if line]
    assert shown[:2] == ["checkpoint at step 1000",
                         "stopping at step 1000: writing the checkpoint (about 4 s)"]
    # 1000 steps in 1 s of training; 9000 / 1000 = 9 s + the final checkpoint at 4 s.
    assert shown[2].startswith("step 1000/10000 (10.0%) | 1000 steps/s | ETA 0m13s | ")
    assert len(shown) == 3


def test_the_terminal_bar_survives_an_overshoot():
    progress, stream, clock = on_terminal(6000)
    clock.now = 6.0
    report(progress, 6004)
    progress.close()
    assert drawn(stream).startswith("step 6004/6000 (100.0%) | ")
    assert re.search(r" \[#{30}\]$", drawn(stream))  # a full bar


def test_a_shorter_line_blanks_what_is_left_of_a_longer_one(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    progress, stream, clock = on_terminal(50_000_000, **NATURE)
    clock.now = 10.0
    report(progress, 10_000)
    with progress.paused("evaluation", "evaluating 30 games"):  # a longer line
        progress.message("a line above")
    clock.now = 11.0
    report(progress, 11_000)  # 11 000 steps in 11 s; 39 000 more in 39 s
    assert screen(stream.getvalue()) == [
        "a line above",
        "filling replay 11,000/50,000 | 1000 steps/s | learning in 0m39s | eval 2.0"]


def test_a_terminal_too_narrow_for_the_least_line_cuts_it(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    progress, stream, clock = on_terminal(50_000_000, **NATURE)
    clock.now = 10.0
    report(progress, 10_000)
    assert drawn(stream) == "filling replay 10,000/50,000 | 1000 ste"  # 39 columns


# -- a pseudo-terminal of 80 and 200 columns ------------------------------------------------


def read_terminal(main: int) -> str:
    """What has been written to the terminal so far (its side never waits on this one)."""
    chunks = []
    while select.select([main], [], [], 0)[0]:
        chunks.append(os.read(main, 65536))
    return b"".join(chunks).decode()


@pytest.mark.parametrize("columns", [80, 200])
def test_the_line_fits_a_terminal_of_80_or_200_columns(columns):
    """Regression (issue 46): at 80 columns the line was cut after `? steps/s training |`
    while a phase was shown, losing the ETA and the evaluation; at 160 an empty bar took
    60 columns. Driven through a pseudo-terminal of that size: each state drawn fits, with
    the step, the phase, steps/s, the ETA and the evaluation at 80 columns, and epsilon,
    the recent return, updates/s, the exact step and the bar at 200."""
    main, side = os.openpty()
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    clock, output = FakeClock(), ""
    with open(side, "w", encoding="ascii") as terminal:
        progress = Progress(50_000_000, stream=terminal, clock=clock, **NATURE)
        progress.update(0, epsilon=1.0, recent_return=None, last_eval=None)
        clock.now = 33.0
        progress.update(35_520, epsilon=1.0, recent_return=-20.5, last_eval=None)
        fill = read_terminal(main)
        clock.now = 46.0
        progress.update(50_000, epsilon=1.0, recent_return=-20.5, last_eval=None)
        clock.now = 66.0
        progress.update(55_000, updates=64, epsilon=1.0, recent_return=-20.5, last_eval=None)
        clock.now = 12_066.0
        progress.update(1_234_568, updates=296_142, epsilon=0.1, recent_return=-19.5,
                        last_eval=-20.3)
        progress.phase("waiting for the learner", "waiting for learner")
        clock.now = 12_112.0
        progress.update(1_234_568, updates=296_142, epsilon=0.1, recent_return=-19.5,
                        last_eval=-20.3)
        output = fill + read_terminal(main)
    os.close(main)
    states = [piece for piece in re.split(r"[\r\n]", output) if piece.strip()]
    assert all(len(state) < columns for state in states), states
    fill_line = [state.rstrip() for state in re.split(r"[\r\n]", fill) if state.strip()][-1]
    line = screen(output)[-1]
    # The fill: 35 520 steps in 33 s = 1076 steps/s, 14 480 more in 13.5 s. Learning, from
    # the first call's end (its 64 updates: steps to 50 256): 296 078 updates x 4 = 1 184 312
    # steps in 12 000 s = 98.7 steps/s (24.7 updates/s), counted 46 s before the line;
    # (50 000 000 - 1 234 568) / 98.7 - 46 = 494 066 s = 137 h.
    if columns == 80:
        assert "[" not in output  # no bar: the whole line does not fit
        assert fill_line == ("filling replay 35,520/50,000 | 1076 steps/s | learning in 0m13s "
                             "| eval -")
        assert line == ("step 1.23M/50M | waiting for learner | 99 steps/s | ETA 5d17h | "
                        "eval -20.3")
    else:
        assert fill_line.startswith("step 35520/50000000 (0.1%) | filling replay 35,520/50,000 "
                                    "| 1076 steps/s | learning in 0m13s | eps 1.00 | "
                                    "return -20.5 | eval - [")
        assert line == ("step 1234568/50000000 (2.5%) | waiting for learner 0m46s | 99 steps/s "
                        "| 25 updates/s | ETA 5d17h | eps 0.10 | return -19.5 | eval -20.3 "
                        "[#-----------------------------]")


# ---------------------------------------------------------------------------- the module


def test_duration_format():
    assert progress_module._duration(9 * 3600 + 2 * 60 + 10) == "9h02m"
    assert progress_module._duration(245) == "4m05s"
    assert progress_module._duration(99 * 3600 + 59 * 60) == "99h59m"
    assert progress_module._duration((5 * 24 + 3) * 3600 + 1800) == "5d03h"
    assert progress_module._duration(-3) == "0m00s"


def test_short_count_format():
    assert progress_module._short(35_520) == "35,520"
    assert progress_module._short(999_999) == "999,999"
    assert progress_module._short(1_239_999) == "1.23M"  # rounded down: not there yet
    assert progress_module._short(50_000_000) == "50M"


def test_the_module_loads_without_tensorflow():
    code = "import sys, fast_dqn.progress; assert 'tensorflow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# -- the real run ---------------------------------------------------------------------------


def _seconds(eta: str) -> float:
    """Reads back `4m05s` or `1h02m`, rough (`~`) or not (this test's runs never take days)."""
    eta = eta.lstrip("~")
    if match := re.fullmatch(r"(\d+)m(\d+)s", eta):
        return 60.0 * int(match[1]) + int(match[2])
    match = re.fullmatch(r"(\d+)h(\d+)m", eta)
    assert match, eta
    return 3600.0 * int(match[1]) + 60.0 * int(match[2])


class WorkClock:
    """The time a run takes by its work alone: each env step, trainer update and checkpoint
    moves it on by a fixed cost, whatever the machine's load (threads share it)."""

    ENV_STEP = 0.010  # an env step, in training and in evaluations
    UPDATE = 0.040  # a minibatch update: a learning step costs twice a random one
    CHECKPOINT = 6.0

    def __init__(self):
        self.now = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


class TimedPool:
    """An env pool whose every step costs its envs' steps on the work clock."""

    def __init__(self, pool, clock: WorkClock):
        self._pool, self._clock = pool, clock

    def step(self, actions):
        self._clock.advance(self._pool.num_envs * WorkClock.ENV_STEP)
        return self._pool.step(actions)

    def receive(self):
        self._clock.advance(self._pool.num_envs * WorkClock.ENV_STEP)
        return self._pool.receive()

    def __getattr__(self, name: str):
        return getattr(self._pool, name)


class TimedLines(io.StringIO):
    """The progress line's output, each line with the work clock's time when it was written."""

    def __init__(self, clock: WorkClock):
        super().__init__()
        self.clock = clock
        self.lines: list[tuple[float, str]] = []

    def write(self, text: str) -> int:
        self.lines.extend((self.clock.now, line) for line in text.splitlines())
        return super().write(text)


@pytest.mark.slow
def test_the_eta_at_halfway_is_within_a_factor_of_1_5_of_the_time_left(tmp_path, monkeypatch):
    """A tiny real run with evaluations and checkpoints, whose progress line reads a clock
    that its work moves (WorkClock: env steps, updates, checkpoints at fixed costs), so that
    the machine's load cannot move it: the ETA printed at the halfway point is compared with
    the time the run then took to finish on that clock. Evaluations and checkpoints are
    about half of the time left, so an ETA that left them out would fail."""
    from fast_dqn import launch, learner
    from fast_dqn.config import ALGO_FAST_DQN
    from tests.cli_runs import FAST, SMALL_BATCH

    clock = WorkClock()
    lines = TimedLines(clock)
    make_pool, save_checkpoint = launch.make_pool, launch.save_checkpoint
    update = learner.Learner.update

    def timed_update(self, minibatches, count):
        clock.advance(count * WorkClock.UPDATE)
        return update(self, minibatches, count)

    def timed_save(*args, **kwargs):
        clock.advance(WorkClock.CHECKPOINT)
        save_checkpoint(*args, **kwargs)

    monkeypatch.setattr(launch, "make_pool", lambda *a, **k: TimedPool(make_pool(*a, **k), clock))
    monkeypatch.setattr(launch, "save_checkpoint", timed_save)
    monkeypatch.setattr(learner.Learner, "update", timed_update)
    monkeypatch.setattr(launch, "Progress", lambda *a, **k: Progress(
        *a, **{**k, "clock": clock, "stream": lines}))
    # Every evaluation game is cut at 100 steps (an untrained player rarely ends one sooner),
    # so that each evaluation costs about the same: the ETA counts them at their mean. The
    # periods are multiples of the sync points' 400 steps, where both pauses fall. An update
    # costs the clock UPDATE whatever its minibatch, so the minibatches are small (4): the
    # real updates take a fraction of the real time.
    status = launch.main([*FAST, "--timesteps=2000", "--evaluate=400", "--eval-episodes=4",
                          "--eval-max-episode-steps=100", "--checkpoint-every=800",
                          SMALL_BATCH, "--progress-every=0.5", "--xla=off",
                          f"--logdir={tmp_path / 'run'}"],
                         ALGO_FAST_DQN)
    assert status == 0
    printed = "\n".join(line for _, line in lines.lines)
    halfway = None  # (the ETA printed, the clock's time then)
    for seen_at, line in lines.lines:
        match = re.match(r"step (\d+)/2000 .*\| ETA (\S+) \|", line)
        if match and int(match[1]) >= 1000 and match[2] != "?":
            halfway = (_seconds(match[2]), seen_at)
            break
    assert halfway is not None, printed
    eta, seen_at = halfway
    took = clock.now - seen_at
    assert took / 1.5 <= eta <= took * 1.5, (eta, took, printed)
