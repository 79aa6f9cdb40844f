"""Tests of fast_dqn.progress: the live progress line, its rate and its ETA.

Every expected rate and ETA below is worked out by hand from the fake clock's times.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import threading

import pytest

from fast_dqn import progress as progress_module
from fast_dqn.progress import Progress
from tests.fakes import FakeClock, screen


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def plain(total: int, **kwargs) -> tuple[Progress, io.StringIO, FakeClock]:
    """A progress line off a terminal with a fake clock at 0."""
    stream, clock = io.StringIO(), FakeClock()
    kwargs.setdefault("every_seconds", 1.0)
    return Progress(total, stream=stream, clock=clock, **kwargs), stream, clock


def report(progress: Progress, step: int) -> None:
    progress.update(step, epsilon=0.5, recent_return=1.0, last_eval=2.0)


def pause(progress: Progress, clock: FakeClock, kind: str, seconds: float) -> None:
    with progress.paused(kind):
        clock.now += seconds


def last_line(stream: io.StringIO) -> str:
    return stream.getvalue().splitlines()[-1]


# ---------------------------------------------------------------------------- the plain line


def test_progress_off_a_terminal_prints_plain_periodic_lines():
    stream, clock = io.StringIO(), FakeClock()
    progress = Progress(50_000_000, every_seconds=10.0, stream=stream, clock=clock)
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
    assert lines[0] == ("step 12000/50000000 (0.0%) | 1200 steps/s training | ETA 11h34m | "
                        "eps 0.91 | return -20.3 | eval -21.0")
    # The rate is the average since the start, not over the last interval:
    # 32000 steps in 20 s = 1600 steps/s; 49 968 000 / 1600 = 31 230 s = 8h40m.
    assert lines[1] == ("step 32000/50000000 (0.1%) | 1600 steps/s training | ETA 8h40m | "
                        "eps 0.88 | return -20.0 | eval -")
    assert len(lines) == 2  # close adds nothing when the last step was already shown
    assert "\r" not in stream.getvalue()


def test_progress_off_a_terminal_with_real_clock():
    stream = io.StringIO()
    progress = Progress(1000, initial_step=100, every_seconds=1e-9, stream=stream)
    for step in range(200, 1001, 200):
        progress.update(step, epsilon=0.5, recent_return=1.0, last_eval=2.0)
    progress.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 5
    assert all("steps/s training" in line and "ETA" in line for line in lines)
    assert lines[-1].startswith("step 1000/1000 (100.0%)") and "ETA 0m00s" in lines[-1]


def test_progress_close_prints_the_final_step():
    stream, clock = io.StringIO(), FakeClock()
    progress = Progress(100, every_seconds=30.0, stream=stream, clock=clock)
    clock.now = 2.0
    progress.update(100, epsilon=0.1, recent_return=3.0, last_eval=None)
    assert stream.getvalue() == ""
    progress.close()
    assert stream.getvalue() == ("step 100/100 (100.0%) | 50 steps/s training | ETA 0m00s | "
                                 "eps 0.10 | return 3.0 | eval -\n")


def test_progress_as_a_context_manager_closes():
    stream, clock = io.StringIO(), FakeClock()
    with Progress(1000, every_seconds=30.0, stream=stream, clock=clock) as progress:
        clock.now = 4.0
        report(progress, 400)
    assert stream.getvalue().startswith("step 400/1000 (40.0%) | 100 steps/s training | ")


def test_progress_rejects_bad_settings():
    with pytest.raises(ValueError, match="positive"):
        Progress(10, every_seconds=0, stream=io.StringIO())
    with pytest.raises(ValueError, match="0 or more"):
        Progress(-1, stream=io.StringIO())
    with pytest.raises(ValueError, match="'evaluation'"):
        Progress(10, stream=io.StringIO(), periods={"evaluation": -1})


# ---------------------------------------------------------------------------- rate and pauses


def test_a_phase_says_that_it_starts_and_its_time_stays_in_the_rate():
    progress, stream, clock = plain(1_000_000, every_seconds=30.0)
    clock.now = 10.0
    report(progress, 1000)  # not due yet
    progress.phase("waiting for the learner")
    assert stream.getvalue() == "waiting for the learner at step 1000\n"
    clock.now = 40.0
    report(progress, 1000)  # due: 1000 steps / 40 s, the wait counted; the phase named
    assert last_line(stream).startswith("step 1000/1000000 (0.1%) | waiting for the learner "
                                        "0m30s | 25 steps/s training | ")
    clock.now = 70.0
    report(progress, 1400)  # acting again: the phase is over; 1400 steps / 70 s
    assert last_line(stream).startswith("step 1400/1000000 (0.1%) | 20 steps/s training | ")


def test_a_pause_inside_a_print_interval_leaves_the_rate_alone():
    progress, stream, clock = plain(1_000_000, every_seconds=30.0)
    clock.now = 10.0
    report(progress, 1000)  # 1000 steps in 10 s of acting; not due yet
    pause(progress, clock, "evaluation", 100.0)
    # A pause only says that it starts, so that a log tells why the progress lines stop.
    assert stream.getvalue() == "evaluation at step 1000\n"
    report(progress, 1000)  # t = 110: due; 1000 steps / (110 - 100) s = 100 steps/s
    assert last_line(stream).startswith("step 1000/1000000 (0.1%) | 100 steps/s training | ")
    clock.now = 140.0
    report(progress, 4000)  # 4000 steps / (140 - 100) s = 100 steps/s
    assert last_line(stream).startswith("step 4000/1000000 (0.4%) | 100 steps/s training | ")
    assert len(stream.getvalue().splitlines()) == 3


def test_the_eta_counts_the_pauses_to_come_at_their_measured_cost():
    periods = {"evaluation": 25_000, "checkpoint": 50_000}
    progress, stream, clock = plain(100_000, periods=periods)
    clock.now = 250.0
    report(progress, 25_000)  # 100 steps/s; no pause measured yet: 75 000 / 100 = 750 s
    assert "| 100 steps/s training | ETA 12m30s |" in last_line(stream)
    pause(progress, clock, "evaluation", 60.0)  # t = 310
    report(progress, 25_000)
    # 750 s of steps + 3 evaluations to come (50k, 75k, 100k) x 60 s = 930 s.
    assert "| 100 steps/s training | ETA 15m30s |" in last_line(stream)
    clock.now = 560.0
    report(progress, 50_000)  # 50 000 steps in 560 - 60 = 500 s of training
    pause(progress, clock, "evaluation", 90.0)  # t = 650; evaluations average 75 s
    pause(progress, clock, "checkpoint", 120.0)  # t = 770
    report(progress, 50_000)
    # 50 000 / 100 = 500 s of steps + 2 evaluations (75k, 100k) x 75 s + 1 checkpoint
    # (the final one, which replaces the periodic one at 100k) x 120 s = 770 s.
    assert "| 100 steps/s training | ETA 12m50s |" in last_line(stream)


def test_start_rate_leaves_out_the_steps_before_it():
    progress, stream, clock = plain(61_000)
    clock.now = 10.0
    report(progress, 50_000)  # the random-action phase: 5000 steps/s
    assert "| 5000 steps/s training |" in last_line(stream)
    progress.start_rate()
    clock.now = 20.0
    progress.epoch_ended(51_000)  # 1000 steps in 10 s: 100 steps/s; 10 000 / 100 = 100 s
    report(progress, 51_000)
    assert last_line(stream).startswith("step 51000/61000 (83.6%) | 100 steps/s training | "
                                        "ETA 1m40s | ")


def test_start_rate_takes_the_step_it_starts_from():
    progress, stream, clock = plain(61_000)
    clock.now = 10.0
    report(progress, 40_000)
    progress.start_rate(50_000)  # the loop knows a later step than the last one reported
    clock.now = 20.0
    progress.epoch_ended(51_000)
    report(progress, 51_000)  # (51 000 - 50 000) / 10 s
    assert "| 100 steps/s training | ETA 1m40s |" in last_line(stream)


def test_start_rate_inside_a_pause_counts_only_the_rest_of_it():
    progress, stream, clock = plain(1_000_000)
    with progress.paused("evaluation"):
        clock.now = 30.0
        progress.start_rate()
        clock.now = 50.0  # 20 s of this pause come after the rate started
    clock.now = 60.0
    progress.epoch_ended(1000)
    report(progress, 1000)  # 1000 steps / (60 - 30 - 20) s = 100 steps/s
    assert "| 100 steps/s training |" in last_line(stream)


def test_once_learning_started_the_rate_and_eta_come_from_whole_epochs():
    """Regression (issue 36): within an epoch the samplers run ahead, then wait for the
    trainer, and the rate read at any moment swung the ETA by a factor of ten within
    minutes (14h01m, 5d13h, 39h, 4d21h in 90 s). Now it is over whole epochs only."""
    progress, stream, clock = plain(101_000)
    clock.now = 5.0
    report(progress, 1000)  # the random start
    progress.start_rate(1000)
    clock.now = 15.0
    report(progress, 11_000)  # the samplers ran ahead: 10 000 steps in 10 s, epoch not done
    # The running rate would say 1000 steps/s and an ETA of 90 000 / 1000 = 1m30s.
    assert "| ? steps/s training | ETA ? |" in last_line(stream)
    progress.phase("waiting for the learner")
    clock.now = 105.0
    progress.epoch_ended(11_000)  # the whole epoch: 10 000 steps in 100 s
    report(progress, 11_000)  # 90 000 / 100 = 900 s
    assert "| 100 steps/s training | ETA 15m00s |" in last_line(stream)
    clock.now = 115.0
    report(progress, 21_000)  # ahead again: the rate stays the whole epochs', and the ETA
    # counts down with the clock from the epoch's end: 900 s - 10 s (the running rate: 7m20s)
    assert "| 100 steps/s training | ETA 14m50s |" in last_line(stream)
    with progress.paused("evaluation"):
        clock.now = 175.0
    clock.now = 265.0
    progress.epoch_ended(21_000)  # the second epoch: 10 000 steps in 160 - 60 = 100 s
    report(progress, 21_000)
    # 20 000 steps in 200 s = 100 steps/s; 800 s + no evaluation period given: 13m20s.
    assert "| 100 steps/s training | ETA 13m20s |" in last_line(stream)


def test_the_final_line_carries_the_last_evaluation_at_an_unchanged_step():
    """Regression (issue 36): the smoke run's last progress line said "eval -" although
    its evaluation at that step had been logged: `close` printed nothing when the step was
    the one last printed."""
    progress, stream, clock = plain(6000, every_seconds=30.0)
    clock.now = 30.0
    progress.update(6000, epsilon=1.0, recent_return=None, last_eval=None)
    assert last_line(stream).endswith("| eval -")
    with progress.paused("evaluation"):
        clock.now = 40.0
    progress.update(6000, epsilon=1.0, recent_return=None, last_eval=-21.0)  # not due
    progress.close()
    assert last_line(stream).startswith("step 6000/6000 (100.0%) | ")
    assert last_line(stream).endswith("| eps 1.00 | return - | eval -21.0")


def test_a_message_is_a_plain_line_off_a_terminal():
    progress, stream, clock = plain(1000)
    progress.message("evaluation at step 0: mean 1.0 over 2 games (min 0.0, max 2.0), 3.0 s")
    assert stream.getvalue() == ("evaluation at step 0: mean 1.0 over 2 games (min 0.0, max "
                                 "2.0), 3.0 s\n")


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
    assert "| 100 steps/s training | ETA 1m29s |" in last_line(stream)


def test_an_interrupted_pause_is_left_out_of_the_rate_but_not_measured():
    progress, stream, clock = plain(10_000, periods={"evaluation": 5000})
    clock.now = 10.0
    report(progress, 1000)
    with pytest.raises(KeyboardInterrupt):
        with progress.paused("evaluation"):
            clock.now += 500.0
            raise KeyboardInterrupt
    report(progress, 1000)  # 1000 steps / 10 s; 9000 / 100 = 90 s, no evaluation measured
    assert "| 100 steps/s training | ETA 1m30s |" in last_line(stream)


def test_steps_during_a_pause_count():
    progress, stream, clock = plain(100_000)
    clock.now = 10.0
    report(progress, 1000)
    with progress.paused("checkpoint"):
        clock.now = 20.0
        report(progress, 2000)  # counted: 2000 steps / 10 s of training = 200 steps/s
    assert "| 200 steps/s training |" in last_line(stream)


def test_a_kind_without_a_period_costs_only_its_final_pauses():
    progress, stream, clock = plain(10_000)  # no periods; a final checkpoint all the same
    clock.now = 10.0
    report(progress, 1000)
    pause(progress, clock, "checkpoint", 30.0)  # e.g. a checkpoint on request
    pause(progress, clock, "evaluation", 30.0)  # no period: none to come
    report(progress, 1000)  # 9000 / 100 = 90 s + 1 final checkpoint x 30 s = 120 s
    assert "| 100 steps/s training | ETA 2m00s |" in last_line(stream)


# ---------------------------------------------------------------------------- edges


def test_the_percent_stops_at_100_and_the_step_is_shown_as_is():
    progress, stream, clock = plain(6000)
    clock.now = 6.0
    report(progress, 6004)  # the fast trainer may overshoot by up to W - 1 steps
    assert last_line(stream).startswith("step 6004/6000 (100.0%) | 1001 steps/s training | "
                                        "ETA 0m00s | ")


def test_the_eta_is_unknown_before_any_rate():
    progress, stream, clock = plain(1000)
    clock.now = 5.0
    report(progress, 0)  # no steps yet
    assert "| ? steps/s training | ETA ? |" in last_line(stream)
    pause(progress, clock, "evaluation", 10.0)
    report(progress, 10)  # 10 steps / (15 - 10) s of training: a slow rate gets a decimal
    assert "| 2.0 steps/s training |" in last_line(stream)
    progress.start_rate()
    pause(progress, clock, "evaluation", 10.0)
    report(progress, 20)  # 10 steps, all in a pause: no training time since the rate started
    assert "| ? steps/s training | ETA ? |" in last_line(stream)


def test_the_eta_is_zero_at_the_end_even_with_pauses_measured():
    progress, stream, clock = plain(1000, periods={"evaluation": 500, "checkpoint": 500})
    clock.now = 5.0
    report(progress, 500)
    pause(progress, clock, "evaluation", 20.0)
    pause(progress, clock, "checkpoint", 30.0)
    clock.now = 59.0
    report(progress, 900)  # 900 steps / 9 s; 1 s + 1 evaluation (1000) + 1 final checkpoint
    assert "| 100 steps/s training | ETA 0m51s |" in last_line(stream)
    clock.now = 60.0
    report(progress, 1000)
    assert "| 100 steps/s training | ETA 0m00s |" in last_line(stream)


def test_update_writes_nothing_when_not_due():
    progress, stream, clock = plain(1000, every_seconds=30.0)
    for step in range(1, 300):
        clock.now = step / 10
        report(progress, step)
    assert stream.getvalue() == ""


# ---------------------------------------------------------------------------- the terminal


def test_progress_on_a_terminal_redraws_one_line_with_tqdm():
    stream, clock = FakeTerminal(), FakeClock()
    progress = Progress(10_000, every_seconds=30.0, stream=stream, clock=clock)
    for i in range(1, 11):
        clock.now = float(i)
        progress.update(1000 * i, epsilon=0.5, recent_return=-3.0, last_eval=4.0)
        assert "\n" not in stream.getvalue()  # redrawn in place, never a new line per update
    progress.close()
    output = stream.getvalue()
    assert output.count("\r") >= 10
    assert output.count("\n") <= 1
    assert "step 10000/10000 (100.0%)" in output
    assert "eps 0.50 | return -3.0 | eval 4.0" in output


def test_the_terminal_line_shows_our_rate_and_eta_not_tqdms():
    stream, clock = FakeTerminal(), FakeClock()
    progress = Progress(100_000, every_seconds=30.0, stream=stream, clock=clock,
                        periods={"evaluation": 50_000})
    clock.now = 10.0
    report(progress, 1000)
    pause(progress, clock, "evaluation", 100.0)
    report(progress, 1000)  # t = 110: tqdm's own average would be 1000 / 110 s = 9 step/s
    drawn = stream.getvalue().split("\r")[-1]
    # 1000 steps / 10 s of training; 99 000 / 100 = 990 s + 2 evaluations x 100 s = 1190 s.
    assert drawn.startswith("step 1000/100000 (1.0%) | 100 steps/s training | ETA 19m50s | "
                            "eps 0.50 | return 1.0 | eval 2.0 |")
    assert "step/s" not in stream.getvalue() and "it/s" not in stream.getvalue()
    assert "<" not in stream.getvalue()  # tqdm's [elapsed<remaining]
    progress.close()


def drawn(stream: io.StringIO) -> str:
    """The progress line as last drawn on a terminal."""
    return stream.getvalue().split("\r")[-1]


def test_on_a_terminal_the_line_names_its_phase_while_it_lasts():
    """Regression (issue 36): the terminal's line sat unchanged for minutes while the run
    waited for its trainer (a log said so; the terminal did not)."""
    stream, clock = FakeTerminal(), FakeClock()
    progress = Progress(10_000, stream=stream, clock=clock)
    clock.now = 1.0
    report(progress, 1000)
    progress.phase("waiting for the learner")
    assert drawn(stream).startswith("step 1000/10000 (10.0%) | waiting for the learner | ")
    clock.now = 3.0
    progress.tick()  # what the loop calls while it waits
    assert "| waiting for the learner 0m02s | " in drawn(stream)
    progress.end_phase()
    with progress.paused("evaluation", "evaluating 30 games"):
        assert "| evaluating 30 games | " in drawn(stream)
        clock.now = 10.0
        progress.tick()
        assert "| evaluating 30 games 0m07s | " in drawn(stream)
    clock.now = 11.0
    report(progress, 1000)
    assert "evaluating" not in drawn(stream) and "waiting" not in drawn(stream)
    assert "\n" not in stream.getvalue()  # a phase leaves no line behind on a terminal
    progress.phase("waiting for the learner")
    clock.now = 12.0
    report(progress, 1400)  # acting again: the phase is over
    assert "waiting" not in drawn(stream)


def test_on_a_terminal_a_checkpoint_and_a_message_stay_above_the_line():
    """Regression (issue 36): "checkpoint at step N" was printed only off a terminal."""
    stream, clock = FakeTerminal(), FakeClock()
    progress = Progress(10_000, stream=stream, clock=clock)
    clock.now = 1.0
    report(progress, 1000)
    with progress.paused("checkpoint", "writing the checkpoint", lasting=True):
        assert "| writing the checkpoint | " in drawn(stream)
        clock.now = 5.0
    progress.message("stopping at step 1000: writing the checkpoint (about 4 s)")
    progress.close()
    shown = [line for line in screen(stream.getvalue()) if line]
    assert shown[:2] == ["checkpoint at step 1000",
                         "stopping at step 1000: writing the checkpoint (about 4 s)"]
    # 1000 steps in 1 s of training; 9000 / 1000 = 9 s + the final checkpoint at 4 s.
    assert shown[2].startswith("step 1000/10000 (10.0%) | 1000 steps/s training | ETA 0m13s | ")
    assert len(shown) == 3


def test_the_terminal_bar_survives_an_overshoot():
    stream, clock = FakeTerminal(), FakeClock()
    progress = Progress(6000, stream=stream, clock=clock)
    clock.now = 6.0
    report(progress, 6004)
    progress.close()
    drawn = stream.getvalue().rstrip("\n").split("\r")[-1]
    assert drawn.startswith("step 6004/6000 (100.0%) | ")
    # A full bar (ASCII or not, as tqdm picks for the stream), not tqdm's blank one for an
    # unknown total, which it falls back to when the count passes the total.
    assert re.search(r"\|([#█]{10})\|$", drawn)


# ---------------------------------------------------------------------------- the module


def test_duration_format():
    assert progress_module._duration(9 * 3600 + 2 * 60 + 10) == "9h02m"
    assert progress_module._duration(245) == "4m05s"
    assert progress_module._duration(99 * 3600 + 59 * 60) == "99h59m"
    assert progress_module._duration((5 * 24 + 3) * 3600 + 1800) == "5d03h"
    assert progress_module._duration(-3) == "0m00s"


def test_the_module_loads_without_tensorflow():
    code = "import sys, fast_dqn.progress; assert 'tensorflow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# -- the real run ---------------------------------------------------------------------------


def _seconds(eta: str) -> float:
    """Reads back `4m05s` or `1h02m` (this test's runs never take days)."""
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
