"""The live progress line of a training run: for people to read, never parsed by the code.

The rate is agent steps per second of training time (wall time less the pauses for
evaluations and checkpoints), over whole epochs once learning has started (`epoch_ended`):
within an epoch the samplers first run ahead and then wait for the trainer, so a rate read
mid-epoch swings by a factor of ten. ETA = remaining steps / rate + the pauses still to come
at each kind's mean measured duration, so pauses make neither swing.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, TextIO

# Pauses that come once more when the run ends, besides their periodic ones: the loop always
# writes a final checkpoint (and skips the periodic one that would fall on the total itself).
FINAL_PAUSES: Mapping[str, int] = {"checkpoint": 1}


@dataclass
class _OpenPause:
    kind: str
    start: float
    nested_seconds: float = 0.0  # time inside pauses opened within this one


@dataclass
class _Phase:
    label: str  # what the line says, e.g. "waiting for the learner"
    start: float
    step: int  # the step it began at


class Progress:
    """The live progress line: step/total, steps/s of training time, ETA, epsilon, returns.

    On a terminal, a single line redrawn by tqdm (our rate and ETA, not tqdm's own, which
    would collapse after every pause). Off a terminal (CI, a cluster log), one plain line
    every `every_seconds`, e.g.

        step 12000/50000000 (0.0%) | 1534 steps/s training | ETA 9h02m | eps 0.91 | return -20.3 | eval -21.0

    `periods` maps a pause kind (as given to `paused`) to its period in agent steps (0 =
    never); periodic pauses fall at its multiples in (step, total], and a kind in
    `final_pauses` also comes that many times at the end, in place of the periodic one at
    the total. A kind not measured yet adds nothing to the ETA. `update` is cheap when
    nothing is due, so it may be called every step. Owned by the main thread.
    """

    REDRAW_SECONDS = 0.5  # terminal redraw period

    def __init__(self, total_steps: int, *, initial_step: int = 0, every_seconds: float = 30.0,
                 stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic,
                 periods: Mapping[str, int] | None = None,
                 final_pauses: Mapping[str, int] | None = None):
        if total_steps < 0:
            raise ValueError(f"total steps must be 0 or more; got {total_steps}")
        if not every_seconds > 0:
            raise ValueError(f"the progress period must be positive; got {every_seconds}")
        self._periods = _counts(periods or {}, "pause period")
        self._final = _counts(FINAL_PAUSES if final_pauses is None else final_pauses,
                              "final pause count")
        self._total = total_steps
        self._stream = sys.stdout if stream is None else stream
        self._clock = clock
        self._step = initial_step
        self._epsilon: float | None = None  # None until the first update
        self._recent_return: float | None = None
        self._last_eval: float | None = None
        # Pauses: the open ones (innermost last), the closed outermost ones' total time, and
        # per kind the count and total duration of the completed ones (for the ETA).
        self._open: list[_OpenPause] = []
        self._paused_seconds = 0.0
        self._measured: dict[str, tuple[int, float]] = {}
        now = clock()
        self._rate_step, self._rate_time, self._rate_paused = initial_step, now, 0.0
        # Once learning started, the rate is over whole epochs: the last epoch end's step,
        # time and paused time (None before the first one since the rate started).
        self._whole_epochs = False
        self._epoch_end: tuple[int, float, float] | None = None
        self._phase: _Phase | None = None
        self._shown_time = now  # when the last line was drawn (or the start)
        self._shown_fields: tuple | None = None  # what the last line drawn showed
        self._bar = self._make_bar(initial_step) if _isatty(self._stream) else None
        self._output_lost = False  # a write failed (a terminal hung up): nothing more shown
        self._period = self.REDRAW_SECONDS if self._bar is not None else every_seconds

    # -- what the training loop calls ------------------------------------------------------

    def update(self, step: int, *, epsilon: float, recent_return: float | None,
               last_eval: float | None) -> None:
        """Reports the agent step reached; draws or prints only when its period has passed.
        A step other than the one a phase began at ends that phase."""
        if self._phase is not None and step != self._phase.step:
            self._phase = None
        self._step = step
        self._epsilon, self._recent_return, self._last_eval = epsilon, recent_return, last_eval
        now = self._clock()
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
        if self._bar is None:
            self._write_line(f"{kind} at step {self._step}")
            return
        if lasting:
            self.message(f"{kind} at step {self._step}")
        self._show(now)

    def end_phase(self) -> None:
        """The phase begun by `phase` is over: the line no longer names it."""
        self._phase = None

    def tick(self) -> None:
        """Draws (or prints) the line again if its period has passed: called while the loop
        waits inside a phase, so that the line shows how long it has been waiting."""
        now = self._clock()
        if now - self._shown_time >= self._period:
            self._show(now)

    def message(self, line: str) -> None:
        """Prints a line that stays (an evaluation's result, a checkpoint, a stop): on a
        terminal above the progress line, which is drawn again below it."""
        if self._bar is None:
            self._write_line(line)
            return
        try:
            self._bar.clear()
            self._stream.write(line + "\n")
            self._stream.flush()
            self._bar.refresh()
        except OSError:
            # The terminal was hung up: the run goes on to save itself, unseen.
            self._bar = None
            self._output_lost = True

    def epoch_ended(self, step: int | None = None) -> None:
        """Marks an epoch's end (a sync point) at `step` (default: the last given to
        `update`): once learning has started (`start_rate`), the rate is measured up to the
        last such end, over whole epochs."""
        if step is not None:
            self._step = step
        if self._whole_epochs:
            now = self._clock()
            self._epoch_end = (self._step, now, self._paused_until(now))

    def start_rate(self, step: int | None = None) -> None:
        """Restarts the rate from now: called when learning starts, since the random-action
        steps before the replay start are much faster and would make the ETA optimistic.
        `step` is the step reached now; by default the last one given to `update`. From then
        on the rate is measured over whole epochs (`epoch_ended`)."""
        now = self._clock()
        self._rate_step = self._step if step is None else step
        self._rate_time, self._rate_paused = now, self._paused_until(now)
        self._whole_epochs, self._epoch_end = True, None

    def close(self) -> None:
        """Shows the final state (the last step reached, the last evaluation) and ends the
        line; off a terminal, unless the last line printed showed the same."""
        self._phase = None
        if self._bar is not None:
            self._show(self._clock())
            with contextlib.suppress(OSError):  # a terminal lost to a hang-up
                if self._bar is not None:
                    self._bar.close()
            self._bar = None
        elif self._fields_now() != self._shown_fields and self._epsilon is not None:
            self._show(self._clock())

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

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
        final = self._final.get(kind, 0)
        period = self._periods.get(kind, 0)
        periodic = 0
        if period > 0:
            last = self._total - 1 if final else self._total  # the final one replaces it
            periodic = max(0, last // period - self._step // period)
        return periodic + final

    def _expected_pause_seconds(self) -> float:
        return sum(self._pauses_left(kind) * seconds / count
                   for kind, (count, seconds) in self._measured.items())

    # -- the line ----------------------------------------------------------------------------

    def _rate(self, now: float) -> float | None:
        """Agent steps per second of unpaused time since the rate started, up to now or,
        once learning has started, up to the last epoch's end; None before any."""
        step, until, paused = self._step, now, self._paused_until(now)
        if self._whole_epochs:
            if self._epoch_end is None:
                return None
            step, until, paused = self._epoch_end
        seconds = (until - self._rate_time) - (paused - self._rate_paused)
        steps = step - self._rate_step
        return steps / seconds if seconds > 0 and steps > 0 else None

    def _eta(self, rate: float | None, now: float) -> str:
        if self._whole_epochs:
            return self._eta_from_epochs(rate, now)
        remaining = max(0, self._total - self._step)
        if remaining == 0:
            return _duration(0)
        if rate is None:
            return "?"
        return _duration(remaining / rate + self._expected_pause_seconds())

    def _eta_from_epochs(self, rate: float | None, now: float) -> str:
        """Once learning has started: the steps left after the last epoch's end at the
        whole epochs' rate, less the training time since that end, so that the ETA counts
        down with the clock, not with the steps the samplers run ahead of their trainer
        (and is not 0 while the last epoch's updates are still being made)."""
        if self._epoch_end is None or rate is None:
            return "?"
        step, since, paused = self._epoch_end
        if step >= self._total:
            return _duration(0)
        training = (now - since) - (self._paused_until(now) - paused)
        return _duration(max(0.0, (self._total - step) / rate - training)
                         + self._expected_pause_seconds())

    def _text(self, now: float) -> str:
        rate = self._rate(now)
        percent = min(100.0, 100.0 * self._step / self._total) if self._total else 100.0
        rate_text = "?" if rate is None else f"{rate:.0f}" if rate >= 10 else f"{rate:.1f}"
        return (f"step {self._step}/{self._total} ({percent:.1f}%) | {self._phase_text(now)}"
                f"{rate_text} steps/s training | ETA {self._eta(rate, now)} | {self._fields()}")

    def _phase_text(self, now: float) -> str:
        if self._phase is None:
            return ""
        waited = now - self._phase.start
        return f"{self._phase.label}{f' {_duration(waited)}' if waited >= 1 else ''} | "

    def _fields_now(self) -> tuple:
        return self._step, self._epsilon, self._recent_return, self._last_eval

    def _fields(self) -> str:
        if self._epsilon is None:
            return "eps - | return - | eval -"
        return (f"eps {self._epsilon:.2f} | return {_number(self._recent_return)} | "
                f"eval {_number(self._last_eval)}")

    def _show(self, now: float) -> None:
        text = self._text(now)
        try:
            if self._bar is not None:
                self._bar.set_description_str(text, refresh=False)
                self._bar.n = min(self._step, self._total)  # past the total tqdm drops the bar
                self._bar.refresh()
            else:
                self._write_line(text)
        except OSError:
            # The terminal was hung up (EIO) as the line was drawn: the run goes on to save
            # itself (SIGHUP stops it), and a line that cannot be shown is not shown.
            self._bar = None
            self._output_lost = True
        self._shown_time = now
        self._shown_fields = self._fields_now()

    def _write_line(self, text: str) -> None:
        if self._output_lost:
            return
        try:
            self._stream.write(text + "\n")
            self._stream.flush()
        except OSError:
            self._output_lost = True

    def _make_bar(self, initial_step: int):
        from tqdm import tqdm
        # Our whole line is the description, then the bar: tqdm's own rate and ETA are per
        # interval and would collapse after every pause. tqdm's throttling is off: update()
        # already redraws at most every REDRAW_SECONDS.
        return tqdm(total=self._total, initial=min(initial_step, self._total),
                    file=self._stream, bar_format="{desc} |{bar}|", dynamic_ncols=True,
                    mininterval=0, miniters=1)


def _counts(mapping: Mapping[str, int], what: str) -> dict[str, int]:
    for kind, value in mapping.items():
        if value < 0:
            raise ValueError(f"the {what} of {kind!r} must be 0 or more; got {value}")
    return dict(mapping)


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


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
