"""The live progress line of a training run: for people to read, never parsed by the code.

A run has two stages, each measured on its own clock of training time (wall time less the
pauses for evaluations and checkpoints) from the first step the line is given in it:

- filling the replay memory (random actions, no updates) up to the replay start: the line
  says so and gives the time to the replay start only, since this stage runs many times
  faster than learning and tells nothing of the run's length;
- learning: the line shows the run's rates as every other report does (`rates`: the
  counters' steps/s and updates/s over the wall clock since the replay start). The ETA has a
  measure of its own, of the agent steps whose updates are made (the fast trainer's samplers
  run up to an epoch ahead of its learner and then wait), so a partial epoch measures it;
  its clock starts again once the learner's first call (which holds the network's compile)
  is done. ETA = the steps left at that rate from when they were last counted, less the
  training time since (so it counts down between two of the learner's calls), + the pauses
  still to come at each kind's mean measured duration; it is marked rough (`~`) until an
  epoch's steps have been measured.

On a terminal the line is redrawn in place within the terminal's width, leaving out first
the bar, then the exact step, the recent return, epsilon, updates/s and the phase's time.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping, NamedTuple, TextIO

# Pauses that come once more when the run ends, besides their periodic ones: the loop always
# writes a final checkpoint (and skips the periodic one that would fall on the total itself).
FINAL_PAUSES: Mapping[str, int] = {"checkpoint": 1}
SEPARATOR = " | "
BAR_WIDTH = 30  # columns inside the bar's brackets, at most
# What a terminal's line shows beyond the step, the phase, steps/s, the ETA and the last
# evaluation (shown at every level): a field is shown from its level on, and the line takes
# the highest level that fits the terminal; off a terminal, the highest.
PHASE_TIME, UPDATE_RATE, EPSILON, RECENT_RETURN, EXACT_STEP = range(1, 6)
ALWAYS = range(EXACT_STEP + 1)
LONG_RUN_SECONDS = 24 * 3600.0  # an ETA past this gets the long-run note
# Learning measured before the long-run note may be given: the first updates carry the
# network's compile.
NOTE_AFTER_SECONDS = 60.0


@dataclass
class _OpenPause:
    kind: str
    start: float
    nested_seconds: float = 0.0  # time inside pauses opened within this one


@dataclass
class _Phase:
    label: str  # what the line says, e.g. "waiting for learner"
    start: float
    step: int  # the step it began at


class _Start(NamedTuple):
    """Where a stage's clock starts."""
    filling: bool
    time: float
    paused: float  # the paused time before it
    step: int  # while learning, the step whose updates are all made
    updates: int
    warm: bool  # the learner's first call (with the network's compile) is behind it


class _Measure(NamedTuple):
    """A stage's training seconds and the steps counted and updates made in them."""
    seconds: float
    steps: int
    updates: int


class Progress:
    """The live progress line: the step, the replay filling or the learning rate and ETA,
    epsilon, the recent return and the last evaluation.

    On a terminal, one line redrawn in place; off a terminal (CI, a cluster log), one plain
    line every `every_seconds`, e.g.

        step 1234567/50000000 (2.5%) | 112 steps/s | 28 updates/s | ETA ~5d01h | eps 0.10 | return -20.3 | eval -21.0

    `replay_start` is the fill's length in agent steps, `steps_per_update` the steps per
    minibatch update (0: the updates are not counted), `epoch_steps` the steps measured
    before the ETA is no longer rough. `periods` maps a pause kind (as given to `paused`) to
    its period in agent steps (0 = never); periodic pauses fall at its multiples in (step,
    total], and a kind in FINAL_PAUSES also comes that many times at the end, in place of
    the periodic one at the total. A kind not measured yet adds nothing to the ETA. The
    settings are the run's, which config.validate checked. With
    `long_run_note`, a line says once, after a minute of learning, that the ETA passed a
    day, followed by the note. `update` is cheap when nothing is due, so it may be called
    every step. Owned by the main thread.
    """

    REDRAW_SECONDS = 0.5  # terminal redraw period

    def __init__(self, total_steps: int, *, every_seconds: float = 30.0,
                 stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic,
                 periods: Mapping[str, int] | None = None, replay_start: int = 0,
                 steps_per_update: int = 0, epoch_steps: int = 0,
                 long_run_note: str | None = None):
        # The steps/s and updates/s shown while learning (the run's counters' `rates`, set
        # by the loop); without it, the ETA's own measure's.
        self.rates: Callable[[], tuple[float, float]] | None = None
        self._periods = dict(periods or {})
        self._total = total_steps
        self._replay_start, self._learning_from = replay_start, replay_start
        self._steps_per_update, self._epoch_steps = steps_per_update, epoch_steps
        self._long_run_note = long_run_note
        self._stream = sys.stdout if stream is None else stream
        self._clock = clock
        self._step = self._updates = 0
        self._epsilon: float | None = None  # None until the first update
        self._recent_return: float | None = None
        self._last_eval: float | None = None
        self._start: _Start | None = None  # the stage's, from its first `update`
        self._counted = _Measure(0.0, 0, 0)  # the stage's, when its counted steps last moved
        # Pauses: the open ones (innermost last), the closed outermost ones' total time, and
        # per kind the count and total duration of the completed ones (for the ETA).
        self._open: list[_OpenPause] = []
        self._paused_seconds = 0.0
        self._measured: dict[str, tuple[int, float]] = {}
        self._phase: _Phase | None = None
        self._shown_time = clock()  # when the last line was drawn (or the start)
        self._shown_fields: tuple | None = None  # what the last line drawn showed
        self._terminal = _isatty(self._stream)
        self._drawn = ""  # the line last drawn on the terminal
        self._output_lost = False  # a write failed (a terminal hung up): nothing more shown
        self._period = self.REDRAW_SECONDS if self._terminal else every_seconds

    # -- what the training loop calls ------------------------------------------------------

    def update(self, step: int, *, epsilon: float, recent_return: float | None,
               last_eval: float | None, updates: int = 0, updates_due: int | None = None,
               learning_from: int | None = None) -> None:
        """Reports the agent step, the updates made and those due by it (if more: a resumed
        run makes those an epoch still owed first); `learning_from` is the step learning
        (re)starts at, if not the replay start (a refill after a resume). Draws or prints
        only when its period has passed. A step other than the one a phase began at ends
        that phase."""
        if self._phase is not None and step != self._phase.step:
            self._phase = None
        now = self._clock()
        self._step, self._updates = step, updates
        if learning_from is not None:
            self._learning_from = learning_from
        filling = self._filling()
        if self._start is None or self._start.filling != filling:
            owed = 0 if filling or updates_due is None else max(0, updates_due - updates)
            self._start = _Start(filling, now, self._paused_until(now),
                                 step - owed * self._steps_per_update, updates,
                                 warm=filling or not self._steps_per_update)
            self._counted = _Measure(0.0, 0, 0)
        elif not self._start.warm and updates != self._start.updates:
            # Restarted from the steps the first call's updates count, after its time.
            first = self._measure(now)
            self._start = _Start(False, now, self._paused_until(now),
                                 self._start.step + first.steps, updates, warm=True)
            self._counted = _Measure(0.0, 0, 0)
        measure = self._measure(now)
        if measure.steps != self._counted.steps:
            self._counted = measure
        self._epsilon, self._recent_return, self._last_eval = epsilon, recent_return, last_eval
        if now - self._shown_time >= self._period:
            self._show(now)

    @contextlib.contextmanager
    def paused(self, kind: str, label: str | None = None, *, lasting: bool = False
               ) -> Iterator[None]:
        """Marks a pause (e.g. "evaluation", "checkpoint"): its time is left out of the rate,
        and its duration, if it completes, is recorded for the ETA of the pauses to come.
        Pauses may nest; each kind is charged only its own time. Off a terminal a line says
        that one starts ("evaluation at step N"), so a log (or a script) tells why the
        progress lines stopped for a while; on a terminal the progress line names it while
        it lasts (`label`, e.g. "evaluating 30 games"; else `kind`)."""
        outer = self._phase
        self.phase(kind, label, lasting=lasting)
        pause = _OpenPause(kind, self._clock())
        self._open.append(pause)
        completed = False
        try:
            yield
            completed = True
        finally:
            self._close_pause(pause, completed)
            self._phase = outer

    def phase(self, kind: str, label: str | None = None, *, lasting: bool = False) -> None:
        """Marks the start of a phase that is not a pause (e.g. "waiting for the learner"):
        off a terminal a line "KIND at step N" says so; on one the line names it (`label`)
        until the step moves on, another phase begins or `end_phase`, and with `lasting`
        "KIND at step N" is printed above it too. Its time stays in the rate."""
        now = self._clock()
        self._phase = _Phase(label or kind, now, self._step)
        if not self._terminal:
            self._write(f"{kind} at step {self._step}\n")
            return
        if lasting:
            self.message(f"{kind} at step {self._step}")
        self._show(now)

    def end_phase(self) -> None:
        """The phase begun by `phase` is over: the line no longer names it."""
        self._phase = None

    def message(self, line: str) -> None:
        """Prints a line that stays (an evaluation's result, a checkpoint, a stop): on a
        terminal above the progress line, which is drawn again below it."""
        if self._terminal:
            self._write(f"\r{' ' * len(self._drawn)}\r{line}\n\r{self._drawn}")
        else:
            self._write(line + "\n")

    def close(self) -> None:
        """Shows the final state (the last step reached, the last evaluation) and ends the
        line; off a terminal, unless the last line printed showed the same."""
        self._phase = None
        if self._terminal:
            self._show(self._clock())
            self._write("\n")
            self._terminal = False
        elif self._fields_now() != self._shown_fields and self._epsilon is not None:
            self._show(self._clock())

    # -- pauses ------------------------------------------------------------------------------

    def _close_pause(self, pause: _OpenPause, completed: bool) -> None:
        duration = self._clock() - pause.start
        self._open.remove(pause)
        if self._open:
            self._open[-1].nested_seconds += duration  # the outer pause is not charged for it
        else:
            self._paused_seconds += duration
        # An interrupted pause says nothing about what a whole one costs.
        if completed:
            count, seconds = self._measured.get(pause.kind, (0, 0.0))
            self._measured[pause.kind] = (count + 1, seconds + duration - pause.nested_seconds)

    def _paused_until(self, now: float) -> float:
        """Total paused time from the start to `now`, counting an open pause up to now."""
        return self._paused_seconds + (now - self._open[0].start if self._open else 0.0)

    def _pauses_left(self, kind: str) -> int:
        if self._step >= self._total:
            return 0  # the final pauses are under way or done
        final = FINAL_PAUSES.get(kind, 0)
        period = self._periods.get(kind, 0)
        periodic = 0
        if period > 0:
            last = self._total - 1 if final else self._total  # the final one replaces it
            periodic = max(0, last // period - self._step // period)
        return periodic + final

    def _expected_pause_seconds(self) -> float:
        return sum(self._pauses_left(kind) * seconds / count
                   for kind, (count, seconds) in self._measured.items())

    # -- the rate and the ETA ------------------------------------------------------------------

    def _filling(self) -> bool:
        return self._step < self._learning_from

    def _training_seconds(self, now: float) -> float:
        """The stage's time so far, less its pauses."""
        if self._start is None:
            return 0.0
        return (now - self._start.time) - (self._paused_until(now) - self._start.paused)

    def _measure(self, now: float) -> _Measure:
        """The stage's training time so far and the steps counted in it: while learning,
        those whose updates are made."""
        steps = self._step - self._start.step
        updates = self._updates - self._start.updates
        if not self._start.filling and self._steps_per_update:
            steps = min(steps, updates * self._steps_per_update)
        return _Measure(self._training_seconds(now), steps, updates)

    def _eta_seconds(self, now: float) -> float | None:
        """Seconds to the replay start while filling, else to the run's end; None before
        any rate."""
        counted = self._counted
        if self._filling():
            left, pauses = self._learning_from - self._step, 0.0
        else:
            start = self._step if self._start is None else self._start.step
            left = self._total - start - counted.steps
            # updates_due rounds down: the updates' steps may fall short of the last step's
            # by less than an update's.
            left = 0 if left < max(1, self._steps_per_update) else left
            pauses = self._expected_pause_seconds()
        rate = _per_second(counted.steps, counted)
        if left == 0:
            return pauses
        if rate is None:
            return None
        return max(0.0, left / rate - (self._training_seconds(now) - counted.seconds)) + pauses

    # -- the line ----------------------------------------------------------------------------

    def _fields(self, now: float) -> list[tuple[range, str]]:
        """The line's fields in order, each with the levels it is shown at."""
        counted, eta = self._counted, self._eta_seconds(now)
        eta_text = "?" if eta is None else _duration(eta)
        percent = min(100.0, 100.0 * self._step / self._total) if self._total else 100.0
        fields = [(_from(EXACT_STEP), f"step {self._step}/{self._total} ({percent:.1f}%)")]
        if self._filling():  # the fill's count says where it is
            done = self._step - (self._learning_from - self._replay_start)
            fields.append((ALWAYS, f"filling replay {done:,}/{self._replay_start:,}"))
        else:
            fields.append((_below(EXACT_STEP),
                           f"step {_short(self._step)}/{_short(self._total)}"))
        if self._phase is not None:
            waited = now - self._phase.start
            fields += [(_below(PHASE_TIME), self._phase.label),
                       (_from(PHASE_TIME), self._phase.label +
                        (f" {_duration(waited)}" if waited >= 1 else ""))]
        steps_rate = _per_second(counted.steps, counted)
        updates_rate = _per_second(counted.updates, counted)
        if self.rates is not None and not self._filling():
            steps_rate, updates_rate = (rate or None for rate in self.rates())
        fields.append((ALWAYS, f"{_rate(steps_rate)} steps/s"))
        if self._filling():
            fields.append((ALWAYS, f"learning in {eta_text}"))
        else:
            if self._steps_per_update:
                fields.append((_from(UPDATE_RATE), f"{_rate(updates_rate)} updates/s"))
            rough = "~" if eta and counted.steps < self._epoch_steps else ""
            fields.append((ALWAYS, f"ETA {rough}{eta_text}"))
        epsilon = "-" if self._epsilon is None else f"{self._epsilon:.2f}"
        return fields + [(_from(EPSILON), f"eps {epsilon}"),
                         (_from(RECENT_RETURN), f"return {_number(self._recent_return)}"),
                         (ALWAYS, f"eval {_number(self._last_eval)}")]

    def _fitted(self, fields: list[tuple[range, str]], width: int) -> str:
        """The line at the highest level that fits `width` (cut there as a last resort),
        with the bar if the whole line leaves room for one."""
        for level in reversed(ALWAYS):
            text = _joined(fields, level)
            if len(text) <= width:
                break
        else:
            return text[:width]
        inside = min(BAR_WIDTH, width - len(text) - 3)
        if level < ALWAYS[-1] or inside < 10:
            return text
        filled = round(inside * min(1.0, self._step / self._total)) if self._total else inside
        return f"{text} [{'#' * filled}{'-' * (inside - filled)}]"

    def _fields_now(self) -> tuple:
        return self._step, self._epsilon, self._recent_return, self._last_eval

    def _show(self, now: float) -> None:
        fields = self._fields(now)
        if self._terminal:
            # One column spare: a line that fills the last one wraps on some terminals. Spaces
            # blank what is left of a longer line drawn before.
            drawn = self._fitted(fields, _columns(self._stream) - 1)
            self._write(f"\r{drawn}{' ' * (len(self._drawn) - len(drawn))}")
            self._drawn = drawn
        else:
            self._write(_joined(fields, ALWAYS[-1]) + "\n")
        self._shown_time = now
        self._shown_fields = self._fields_now()
        self._note_a_long_run(now)

    def _note_a_long_run(self, now: float) -> None:
        """The long-run note, once: after a minute of learning with an ETA past a day."""
        if self._long_run_note is None or self._filling():
            return
        eta = self._eta_seconds(now)
        if self._training_seconds(now) >= NOTE_AFTER_SECONDS and eta and eta > LONG_RUN_SECONDS:
            self.message(f"note: at the rate measured so far the run needs about "
                         f"{_duration(eta)} more; {self._long_run_note}")
            self._long_run_note = None

    def _write(self, text: str) -> None:
        if self._output_lost:
            return
        try:
            self._stream.write(text)
            self._stream.flush()
        except OSError:
            # The terminal was hung up (EIO): the run goes on to save itself (SIGHUP stops
            # it), and a line that cannot be shown is not shown.
            self._output_lost = True


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _columns(stream: TextIO) -> int:
    """The terminal's width: the stream's own (it follows a resize), else $COLUMNS or 80."""
    with contextlib.suppress(AttributeError, ValueError, OSError):
        columns = os.get_terminal_size(stream.fileno()).columns
        if columns > 0:
            return columns
    return shutil.get_terminal_size().columns


def _from(level: int) -> range:
    return range(level, len(ALWAYS))


def _below(level: int) -> range:
    return range(level)


def _joined(fields: list[tuple[range, str]], level: int) -> str:
    return SEPARATOR.join(text for levels, text in fields if level in levels)


def _per_second(count: int, measure: _Measure) -> float | None:
    """`count` per second of `measure`'s training time; None before either."""
    if measure.seconds <= 0 or count <= 0:
        return None
    return count / measure.seconds


def _rate(rate: float | None) -> str:
    return "?" if rate is None else f"{rate:.0f}" if rate >= 10 else f"{rate:.1f}"


def _short(count: int) -> str:
    """`35,520` below a million, `1.23M` (rounded down) from a million on."""
    return f"{count:,}" if count < 1_000_000 else f"{count // 10_000 / 100:g}M"


def _number(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.1f}"


def _duration(seconds: float) -> str:
    """`5d03h` from 100 hours on, `9h02m` from an hour on, `4m05s` below."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours >= 100:
        return f"{hours // 24}d{hours % 24:02d}h"
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
