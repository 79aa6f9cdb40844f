"""Everything a run leaves on disk, and the live progress line.

A run directory (docs/design.md §4) holds:

    config.json        every resolved setting plus the library versions
    episodes.csv       episode,timestep,length,return,avg_length,avg_return,hours
    evaluations.csv    timestep,mean,std,episodes,hours
    events.out.tfevents.*   TensorBoard scalars (TensorFlow's own tf.summary)
    summary.json       written when the run ends (also on Ctrl-C)

The CSV columns of episodes.csv are the ones the original fast-dqn tool printed, so old
analysis scripts keep working. Whole files are written atomically (temporary file in the same
directory, fsync, rename) and every CSV row goes out in one write, so a crash never leaves a
half-written file or row behind.

TensorFlow is imported only when the first TensorBoard scalar is logged, so this module (and
the tests of everything that writes CSVs) loads without it.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import platform
import re
import secrets
import shutil
import stat
import sys
import time
from collections import deque
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import IO, Any, Callable, Iterator, Mapping, Sequence, TextIO

CONFIG_FILE = "config.json"
EPISODES_FILE = "episodes.csv"
EVALUATIONS_FILE = "evaluations.csv"
SUMMARY_FILE = "summary.json"
RUN_FILES = (CONFIG_FILE, EPISODES_FILE, EVALUATIONS_FILE, SUMMARY_FILE)

EPISODE_COLUMNS = ("episode", "timestep", "length", "return", "avg_length", "avg_return",
                   "hours")
EVALUATION_COLUMNS = ("timestep", "mean", "std", "episodes", "hours")

AVERAGE_WINDOW = 100  # games in the running averages, as the original tool used

# Distribution names to try, first found wins (importlib.metadata never imports the package).
_DISTRIBUTIONS = {
    "numpy": ("numpy",),
    "tensorflow": ("tensorflow", "tensorflow-cpu", "tensorflow-macos", "tf-nightly"),
    "gymnasium": ("gymnasium",),
    "ale-py": ("ale-py",),
    "opencv": ("opencv-python", "opencv-python-headless", "opencv-contrib-python",
               "opencv-contrib-python-headless"),
}
NOT_INSTALLED = "not installed"


# --------------------------------------------------------------------------------------------
# Run directory


def default_run_dir(game: str, algo: str, seed: int, now: datetime | None = None) -> Path:
    """Returns `runs/<game>-<algo>-seed<seed>-<YYYYmmdd-HHMMSS>`.

    Characters that do not belong in a directory name (e.g. the `/` of `ALE/Pong-v5`) are
    replaced by `_`, so the run never lands in a nested directory by accident.
    """
    now = datetime.now() if now is None else now
    name = f"{game}-{algo}-seed{seed}-{now:%Y%m%d-%H%M%S}"
    return Path("runs") / re.sub(r"[^A-Za-z0-9_.-]", "_", name)


class RunDirError(ValueError):
    """The run directory cannot be created or written: one line that says what to do."""


def check_run_dir_writable(path: Path) -> None:
    """Checks that a new run can be written at `path`, without creating anything.

    Raises:
        ValueError: (one line, saying what to do) if a component of `path` is a file, the
            nearest existing directory is not writable, or `path` already holds a run.
    """
    path = Path(os.path.abspath(path))
    status = _stat(path)
    if status is not None:
        _check_existing_run_dir(path, status)
        return
    ancestor = path.parent
    while (status := _stat(ancestor)) is None and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if status is None or not _is_dir(status):
        raise ValueError(f"cannot create run directory {path}: {ancestor} is not a directory; "
                         "choose another --logdir")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ValueError(f"cannot create run directory {path}: {ancestor} is not writable; "
                         "choose another --logdir")


def _check_existing_run_dir(path: Path, status: os.stat_result) -> None:
    if not _is_dir(status):
        raise ValueError(f"run directory {path} exists and is not a directory; "
                         "choose another --logdir")
    for name in RUN_FILES:
        if (path / name).exists():
            raise ValueError(f"{path} already holds a run ({name}); continue it with "
                             f"--resume {path} or choose another --logdir")
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"run directory {path} is not writable; choose another --logdir")


def _top_missing_dir(path: Path) -> Path | None:
    """The outermost directory that `path.mkdir(parents=True)` would create, or None."""
    path = Path(os.path.abspath(path))
    top = None
    while _stat(path) is None and path != path.parent:
        top, path = path, path.parent
    return top


def _stat(path: Path) -> os.stat_result | None:
    """The path's status, or None where nothing is there (a dangling link counts as a file)."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        return os.lstat(path) if os.path.islink(path) else None
    except NotADirectoryError:  # a parent is a file: the caller walks up to it
        return None
    except OSError as error:
        raise ValueError(f"cannot use {path} for a run: {error.strerror}; "
                         "choose another --logdir") from None


def _is_dir(status: os.stat_result) -> bool:
    return stat.S_ISDIR(status.st_mode)


# --------------------------------------------------------------------------------------------
# Atomic writes


@contextlib.contextmanager
def open_atomic(path: Path) -> Iterator[IO[bytes]]:
    """Opens a temporary file beside `path` for binary writing; renames it over `path` on success.

    On leaving the block the data is flushed and fsynced, then `os.replace`d over `path`, so
    readers see either the old file or the whole new one. If the block (or the rename) raises,
    the temporary file is removed and `path` is left as it was. Use it to stream large data
    (e.g. `np.save`) without holding it all in memory.
    """
    path = Path(path)
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # umask applies
    try:
        with os.fdopen(fd, "wb") as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    """Makes a rename in `directory` durable (best effort: not every platform allows it)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Writes `data` to `path` atomically (see `open_atomic`)."""
    with open_atomic(path) as file:
        file.write(data)


def write_text_atomic(path: Path, text: str) -> None:
    """Writes `text` (UTF-8) to `path` atomically (see `open_atomic`)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path, obj: Any) -> None:
    """Writes `obj` as indented, key-sorted, strict JSON to `path` atomically.

    NaN and infinities (not valid JSON) are written as null; paths as strings; numpy scalars
    and arrays as their Python values.
    """
    text = json.dumps(_json_safe(obj), indent=2, sort_keys=True, allow_nan=False,
                      default=_json_default)
    write_text_atomic(path, text + "\n")


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(key): _json_safe(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(value) for value in obj]
    if hasattr(obj, "tolist") and callable(obj.tolist):  # numpy scalar or array
        return _json_safe(obj.tolist())
    return obj


def _json_default(obj: Any) -> Any:
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


# --------------------------------------------------------------------------------------------
# Library versions


def library_versions() -> dict[str, str]:
    """Versions of Python and the libraries a run depends on ("not installed" where missing).

    Read from the installed distributions' metadata, so nothing (TensorFlow above all) is
    imported just to ask.
    """
    versions = {"python": platform.python_version()}
    for name, distributions in _DISTRIBUTIONS.items():
        versions[name] = _first_version(distributions)
    return versions


def _first_version(distributions: Sequence[str]) -> str:
    for distribution in distributions:
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return NOT_INSTALLED


# --------------------------------------------------------------------------------------------
# Episode statistics


class EpisodeStats:
    """Episode count and running averages of length and return over the last `window` games.

    `state()`/`load_state()` carry everything as plain JSON-able data, so a run resumed from a
    checkpoint continues the averages (and the episode numbers) exactly.
    """

    def __init__(self, window: int = AVERAGE_WINDOW):
        if window < 1:
            raise ValueError(f"the averaging window must be at least 1 game; got {window}")
        self._window = window
        self._lengths: deque[int] = deque(maxlen=window)
        self._returns: deque[float] = deque(maxlen=window)
        self._episodes = 0

    def add(self, length: int, ret: float) -> None:
        """Records one finished game: its length in agent steps and its (raw) return."""
        self._lengths.append(int(length))
        self._returns.append(float(ret))
        self._episodes += 1

    @property
    def episodes(self) -> int:
        """Games recorded since the run began (including before a resume)."""
        return self._episodes

    @property
    def avg_length(self) -> float:
        """Mean length of the last `window` games (NaN before the first game)."""
        return _mean(self._lengths)

    @property
    def avg_return(self) -> float:
        """Mean return of the last `window` games (NaN before the first game)."""
        return _mean(self._returns)

    def state(self) -> dict[str, Any]:
        return {"window": self._window, "episodes": self._episodes,
                "lengths": list(self._lengths), "returns": list(self._returns)}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restores what `state()` returned.

        Raises:
            ValueError: if the state is inconsistent (it does not come from `state()`).
        """
        window = int(state["window"])
        lengths = [int(x) for x in state["lengths"]]
        returns = [float(x) for x in state["returns"]]
        episodes = int(state["episodes"])
        if window < 1 or len(lengths) != len(returns) or len(lengths) > window \
                or len(lengths) > episodes:
            raise ValueError("inconsistent episode statistics in the checkpoint "
                             f"(window {window}, episodes {episodes}, {len(lengths)} lengths, "
                             f"{len(returns)} returns)")
        self._window = window
        self._lengths = deque(lengths, maxlen=window)
        self._returns = deque(returns, maxlen=window)
        self._episodes = episodes


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else math.nan


# --------------------------------------------------------------------------------------------
# The run directory's files


class RunFiles:
    """The files of one run directory: config, episode and evaluation CSVs, TensorBoard, summary.

    Thread ownership: a RunFiles is owned by the main (sampler-loop) thread; call its methods
    from that thread only. It holds no locks.

    On `resume=True` the directory is reopened: the CSVs are appended to (no second header)
    and the episode numbers and running averages continue from the rows already there, or
    exactly from a checkpoint via `episode_stats.load_state`. Pass `resume_step` (the agent
    step of the checkpoint resumed from) to drop CSV rows logged after it, which a crash
    between checkpoints leaves behind and the resumed run will log again.
    """

    def __init__(self, run_dir: Path, *, resume: bool = False, resume_step: int | None = None):
        """Creates the run directory (or reopens it on resume) and opens its CSVs.

        Raises:
            RunDirError: the directory cannot be created or written (the checks before
                creating it cannot foresee every case, e.g. /proc); a new run's directory
                is removed again.
            ValueError: `run_dir` already holds a run, or on resume is not one.
        """
        self.run_dir = Path(run_dir)
        self._resume = resume
        self._created: Path | None = None  # the outermost directory this object created
        self.episode_stats = EpisodeStats()
        self._writer = None  # TensorBoard writer, created on first use
        self._tf = None  # the tensorflow module, imported with the writer
        self._scalar_metadata = None
        self._episodes_csv: _CsvLog | None = None
        self._evaluations_csv: _CsvLog | None = None
        if resume:
            if not self.run_dir.is_dir():
                raise ValueError(f"cannot resume: {self.run_dir} is not a run directory; "
                                 "check the --resume path")
        else:
            check_run_dir_writable(self.run_dir)
            self._created = _top_missing_dir(self.run_dir)
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._episodes_csv = _CsvLog(self.run_dir / EPISODES_FILE, EPISODE_COLUMNS,
                                         resume=resume, resume_step=resume_step)
            self._evaluations_csv = _CsvLog(self.run_dir / EVALUATIONS_FILE,
                                            EVALUATION_COLUMNS, resume=resume,
                                            resume_step=resume_step)
        except OSError as error:
            self.discard()
            raise self.write_error(error) from None
        _restore_stats(self.episode_stats, self._episodes_csv.rows)

    def write_error(self, error: OSError) -> RunDirError:
        """The one-line error for a failure to create or write the run directory."""
        reason = error.strerror or str(error)
        what_to_do = "check the --resume path" if self._resume else "choose another --logdir"
        return RunDirError(f"cannot write the run directory {self.run_dir}: {reason}; "
                           f"{what_to_do}")

    def discard(self) -> None:
        """Closes the files and, for a new run, removes what it wrote: a run that fails to
        start leaves nothing behind. A resumed run's directory is left as it is."""
        self.close()
        if self._resume:
            return
        if self._created is not None:
            shutil.rmtree(self._created, ignore_errors=True)
            return
        for name in RUN_FILES:  # the directory existed, without a run (checked before)
            with contextlib.suppress(OSError):
                (self.run_dir / name).unlink(missing_ok=True)

    def write_config(self, config_dict: Mapping[str, Any]) -> None:
        """Writes `config.json`: the resolved settings plus `"library_versions"` (atomically)."""
        payload = dict(config_dict)
        payload["library_versions"] = library_versions()
        write_json_atomic(self.run_dir / CONFIG_FILE, payload)

    def log_episode(self, timestep: int, length: int, ret: float, hours: float) -> None:
        """Appends one finished game to `episodes.csv`, with the averages over the last 100.

        Args:
            timestep: agent steps done in the whole run when the game ended.
            length: the game's length in agent steps.
            ret: the game's raw score (not the clipped learning reward).
            hours: wall-clock hours since the run began.
        """
        self.episode_stats.add(length, ret)
        stats = self.episode_stats
        self._episodes_csv.append((stats.episodes, int(timestep), int(length), float(ret),
                                   stats.avg_length, stats.avg_return, _hours(hours)))

    def log_evaluation(self, timestep: int, returns: Sequence[float],
                       hours: float) -> dict[str, Any]:
        """Appends one evaluation (mean and population std of its games' returns).

        Returns:
            The row written, as a dict keyed by the `evaluations.csv` columns.
        Raises:
            ValueError: if `returns` is empty.
        """
        returns = [float(x) for x in returns]
        if not returns:
            raise ValueError("an evaluation needs at least one game's return")
        mean = _mean(returns)
        std = math.sqrt(math.fsum((x - mean) ** 2 for x in returns) / len(returns))
        row = {"timestep": int(timestep), "mean": mean, "std": std,
               "episodes": len(returns), "hours": float(hours)}
        self._evaluations_csv.append((row["timestep"], mean, std, row["episodes"],
                                      _hours(hours)))
        return row

    def log_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
        """Writes TensorBoard scalars (tags like `train/loss`, `eval/mean_return`) at `step`."""
        if self._writer is None:
            self._open_writer()
        tf = self._tf
        with self._writer.as_default():
            for tag, value in scalars.items():
                tf.summary.write(tag, tf.constant(float(value), tf.float32), step=int(step),
                                 metadata=self._scalar_metadata)

    def _open_writer(self) -> None:
        import tensorflow as tf  # only here: the rest of the module runs without it
        self._tf = tf
        self._writer = tf.summary.create_file_writer(os.fspath(self.run_dir))
        # What tensorboard's own tf.summary.scalar writes, without needing the tensorboard
        # package (TensorFlow 2.21 no longer installs it): a float32 tensor tagged for the
        # "scalars" plugin (its ScalarPluginData, version 0, serializes to empty content).
        metadata = tf.compat.v1.SummaryMetadata()
        metadata.plugin_data.plugin_name = "scalars"
        self._scalar_metadata = metadata

    def flush(self) -> None:
        """Pushes buffered TensorBoard events to disk (CSV rows are never buffered)."""
        if self._writer is not None:
            self._writer.flush()

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        """Writes `summary.json` (atomically), replacing any earlier one."""
        write_json_atomic(self.run_dir / SUMMARY_FILE, summary)

    def close(self) -> None:
        """Closes the CSVs and the TensorBoard writer. Calling it again does nothing."""
        for log in (self._episodes_csv, self._evaluations_csv):
            if log is not None:
                log.close()
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> "RunFiles":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def _hours(hours: float) -> str:
    return f"{float(hours):.4f}"


def _restore_stats(stats: EpisodeStats, rows: Sequence[list[str]]) -> None:
    """Rebuilds the episode count and running averages from the rows kept on resume."""
    if not rows:
        return
    column = {name: i for i, name in enumerate(EPISODE_COLUMNS)}
    tail = rows[-AVERAGE_WINDOW:]
    stats.load_state({
        "window": AVERAGE_WINDOW,
        "episodes": int(rows[-1][column["episode"]]),
        "lengths": [int(row[column["length"]]) for row in tail],
        "returns": [float(row[column["return"]]) for row in tail],
    })


class _CsvLog:
    """An append-only CSV whose rows each go out in one unbuffered write.

    Opening with `resume=True` keeps the rows already there (dropping a torn last line and,
    given `resume_step`, rows with a later timestep) and exposes them as `rows`.
    """

    def __init__(self, path: Path, columns: Sequence[str], *, resume: bool,
                 resume_step: int | None):
        self.path = path
        self.columns = tuple(columns)
        self.rows: list[list[str]] = []
        if resume and path.exists():
            self.rows = self._recover(resume_step)
        self._file = open(path, "ab", buffering=0)  # noqa: SIM115 -- closed in close()
        try:
            if os.fstat(self._file.fileno()).st_size == 0:
                self._write_line(self.columns)
        except OSError:
            self._file.close()
            raise

    def append(self, values: Sequence[Any]) -> None:
        self._write_line([_csv_value(v) for v in values])

    def close(self) -> None:
        self._file.close()

    def _write_line(self, fields: Sequence[str]) -> None:
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerow(fields)
        data = buffer.getvalue().encode("utf-8")
        written = self._file.write(data)  # one system call for a row of this size
        while written is not None and written < len(data):  # never seen on a regular file
            data = data[written:]
            written = self._file.write(data)

    def _recover(self, resume_step: int | None) -> list[list[str]]:
        raw = self.path.read_bytes()
        if not raw:
            return []
        text = raw.decode("utf-8")
        lines = text.split("\n")
        complete = lines[:-1]  # the piece after the last newline is empty or a torn row
        if not complete or tuple(complete[0].split(",")) != self.columns:
            raise ValueError(f"cannot resume: {self.path} does not start with the header "
                             f"{','.join(self.columns)}; check the --resume path")
        rows = [row for row in csv.reader(complete[1:]) if row]
        if resume_step is not None:
            timestep = self.columns.index("timestep")
            rows = [row for row in rows if int(row[timestep]) <= resume_step]
        if len(rows) != len(complete) - 1 or lines[-1]:
            kept = io.StringIO()
            writer = csv.writer(kept, lineterminator="\n")
            writer.writerow(self.columns)
            writer.writerows(rows)
            write_text_atomic(self.path, kept.getvalue())
        return rows


def _csv_value(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)  # shortest text that reads back as the same float
    return str(value)


# --------------------------------------------------------------------------------------------
# Progress line (for people; never parsed)


class Progress:
    """The live progress line: step/total, steps/s, ETA, epsilon, recent return, last evaluation.

    On a terminal, a single line redrawn by tqdm. Off a terminal (CI, a cluster log), one
    plain line every `every_seconds`, with steps/s measured over that interval, e.g.

        step 12000/50000000 (0.0%) | 1534 steps/s | ETA 9h02m | eps 0.91 | return -20.3 | eval -21.0

    `update` is cheap when nothing is due, so it may be called every agent step.
    Thread ownership: owned by the main (sampler-loop) thread, like RunFiles.
    """

    REDRAW_SECONDS = 0.5  # terminal redraw period

    def __init__(self, total_steps: int, *, initial_step: int = 0, every_seconds: float = 30.0,
                 stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic):
        if total_steps < 0:
            raise ValueError(f"total steps must be 0 or more; got {total_steps}")
        if not every_seconds > 0:
            raise ValueError(f"the progress period must be positive; got {every_seconds}")
        self._total = total_steps
        self._every = every_seconds
        self._stream = sys.stdout if stream is None else stream
        self._clock = clock
        self._step = initial_step
        self._latest: tuple[float, float | None, float | None] | None = None
        self._shown_step = initial_step  # step of the last line printed (or the start)
        self._shown_time = clock()
        self._bar = self._make_bar(initial_step) if _isatty(self._stream) else None

    def update(self, step: int, *, epsilon: float, recent_return: float | None,
               last_eval: float | None) -> None:
        """Reports the agent step reached; draws or prints only when its period has passed."""
        self._step = step
        self._latest = (epsilon, recent_return, last_eval)
        now = self._clock()
        period = self.REDRAW_SECONDS if self._bar is not None else self._every
        if now - self._shown_time >= period:
            self._show(now)

    def close(self) -> None:
        """Shows the final state (the last step reached) and ends the line."""
        if self._bar is not None:
            self._show(self._clock())
            self._bar.close()
            self._bar = None
        elif self._step != self._shown_step and self._latest is not None:
            self._show(self._clock())

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _make_bar(self, initial_step: int):
        from tqdm import tqdm
        # tqdm's own throttling is off: update() already redraws at most every REDRAW_SECONDS.
        return tqdm(total=self._total, initial=initial_step, file=self._stream, unit="step",
                    unit_scale=True, dynamic_ncols=True, mininterval=0, miniters=1,
                    smoothing=0.1)

    def _show(self, now: float) -> None:
        fields = self._fields()
        if self._bar is not None:
            self._bar.set_postfix_str(fields, refresh=False)
            self._bar.update(self._step - self._bar.n)
        else:
            elapsed = now - self._shown_time
            rate = (self._step - self._shown_step) / elapsed if elapsed > 0 else 0.0
            self._stream.write(f"{self._position()} | {rate:.0f} steps/s | "
                               f"ETA {self._eta(rate)} | {fields}\n")
            self._stream.flush()
        self._shown_step = self._step
        self._shown_time = now

    def _fields(self) -> str:
        if self._latest is None:
            return "eps - | return - | eval -"
        epsilon, recent_return, last_eval = self._latest
        return f"eps {epsilon:.2f} | return {_number(recent_return)} | eval {_number(last_eval)}"

    def _position(self) -> str:
        percent = 100.0 * self._step / self._total if self._total else 100.0
        return f"step {self._step}/{self._total} ({percent:.1f}%)"

    def _eta(self, rate: float) -> str:
        remaining = max(0, self._total - self._step)
        if remaining == 0:
            return _duration(0)
        return _duration(remaining / rate) if rate > 0 else "?"


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _number(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.1f}"


def _duration(seconds: float) -> str:
    """`9h02m` from an hour on, `4m05s` below."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
