"""The live progress line of a training run: for people to read, never parsed by the code.

The line shows the agent step out of the total (percent capped at 100), the rate in agent
steps per second of training time (wall time minus the pauses for evaluations and checkpoints,
averaged since learning started), the ETA, epsilon, the recent return and the last
evaluation's mean return. ETA = remaining steps / that rate + for each pause kind, the pauses
still to come × the mean measured duration of that kind; so neither an evaluation nor a
checkpoint write makes the rate or the ETA swing, and both are still counted in the ETA.
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


class Progress:
    """The live progress line: step/total, steps/s of training time, ETA, epsilon, returns.

    On a terminal, a single line redrawn by tqdm (our rate and ETA, not tqdm's own, which
    would collapse after every pause). Off a terminal (CI, a cluster log), one plain line
    every `every_seconds`, e.g.

        step 12000/50000000 (0.0%) | 1534 steps/s training | ETA 9h02m | eps 0.91 | return -20.3 | eval -21.0

    `periods` maps a pause kind (as given to `paused`) to its period in agent steps, 0 = never,
    e.g. {"evaluation": 250_000, "checkpoint": 1_000_000}. Periodic pauses fall at the
    multiples of the period in (step, total]; a kind in `final_pauses` (default FINAL_PAUSES)
    also comes that many times at the end of the run, and that final pause replaces the
    periodic one at the total itself. Once the step reaches the total no pause is expected.
    A kind never measured yet (e.g. before the first checkpoint, or after a resume) adds
    nothing to the ETA, so the ETA is optimistic until each kind has happened once.

    `update` is cheap when nothing is due (a clock read and a comparison), so it may be
    called every agent step. Output happens only from `update` and `close`.
    Thread ownership: owned by the main (sampler-loop) thread, like RunFiles.
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
        self._shown_step, self._shown_time = initial_step, now  # last line drawn (or start)
        self._bar = self._make_bar(initial_step) if _isatty(self._stream) else None
        self._output_lost = False  # a write failed (a terminal hung up): nothing more shown
        self._period = self.REDRAW_SECONDS if self._bar is not None else every_seconds

    # -- what the training loop calls ------------------------------------------------------

    def update(self, step: int, *, epsilon: float, recent_return: float | None,
               last_eval: float | None) -> None:
        """Reports the agent step reached; draws or prints only when its period has passed."""
        self._step = step
        self._epsilon, self._recent_return, self._last_eval = epsilon, recent_return, last_eval
        now = self._clock()
        if now - self._shown_time >= self._period:
            self._show(now)

    @contextlib.contextmanager
    def paused(self, kind: str) -> Iterator[None]:
        """Marks a pause (e.g. "evaluation", "checkpoint"): its time is left out of the rate,
        and its duration, if it completes, is recorded for the ETA of the pauses to come.
        Pauses may nest; each kind is charged only its own time. Off a terminal a line says
        that one starts ("evaluation at step N"), so a log (or a script) tells why the
        progress lines stopped for a while."""
        self.phase(kind)
        pause = _OpenPause(kind, self._clock())
        self._open.append(pause)
        completed = False
        try:
            yield
            completed = True
        finally:
            self._close_pause(pause, completed)

    def phase(self, kind: str) -> None:
        """Marks the start of a phase that is not a pause (e.g. "waiting for the trainer"):
        off a terminal a line says so ("waiting for the trainer at step N"), as `paused`
        does, so a log (or a script) can tell what the run is doing; its time stays in the
        rate."""
        if self._bar is None:
            self._write_line(f"{kind} at step {self._step}")

    def start_rate(self, step: int | None = None) -> None:
        """Restarts the rate from now: called when learning starts, since the random-action
        steps before the replay start are much faster and would make the ETA optimistic.
        `step` is the step reached now; by default the last one given to `update`."""
        now = self._clock()
        self._rate_step = self._step if step is None else step
        self._rate_time, self._rate_paused = now, self._paused_until(now)

    def close(self) -> None:
        """Shows the final state (the last step reached) and ends the line."""
        if self._bar is not None:
            self._show(self._clock())
            with contextlib.suppress(OSError):  # a terminal lost to a hang-up
                if self._bar is not None:
                    self._bar.close()
            self._bar = None
        elif self._step != self._shown_step and self._epsilon is not None:
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
        """Agent steps per second of unpaused time since the rate started; None before any."""
        seconds = (now - self._rate_time) - (self._paused_until(now) - self._rate_paused)
        steps = self._step - self._rate_step
        return steps / seconds if seconds > 0 and steps > 0 else None

    def _eta(self, rate: float | None) -> str:
        remaining = max(0, self._total - self._step)
        if remaining == 0:
            return _duration(0)
        if rate is None:
            return "?"
        return _duration(remaining / rate + self._expected_pause_seconds())

    def _text(self, now: float) -> str:
        rate = self._rate(now)
        percent = min(100.0, 100.0 * self._step / self._total) if self._total else 100.0
        rate_text = "?" if rate is None else f"{rate:.0f}" if rate >= 10 else f"{rate:.1f}"
        return (f"step {self._step}/{self._total} ({percent:.1f}%) | {rate_text} steps/s "
                f"training | ETA {self._eta(rate)} | {self._fields()}")

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
        self._shown_step, self._shown_time = self._step, now

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
