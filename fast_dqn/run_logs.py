"""What a run logs as it goes: its CSVs, TensorBoard scalars, config.json and summary.json.

    config.json        every resolved setting plus the library versions
    episodes.csv       episode,timestep,length,return,avg_length,avg_return,hours
    evaluations.csv    timestep,mean,std,episodes,hours
    events.out.tfevents.*   TensorBoard scalars (TensorFlow's own tf.summary)
    summary.json       written when the run ends (also on Ctrl-C)

episodes.csv keeps the original fast-dqn tool's columns, so its analysis scripts still work.
Every CSV row goes out in one write, so a crash never leaves half a row that a resume would
keep. Files are reached through the run directory held open, never through a link.
TensorFlow is imported only with the first TensorBoard scalar, so CSV tests run without it.
"""

from __future__ import annotations

import contextlib
import csv
import fnmatch
import io
import json
import math
import os
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence

from fast_dqn.config import counted
from fast_dqn.run_dir import (CONFIG_FILE, EPISODES_FILE, EVALUATIONS_FILE, SUMMARY_FILE,
                              LinkFound, OpenDirectory, RunPath, WriteFailed, held, json_text,
                              library_versions)

TENSORBOARD_FILES = "events.out.tfevents.*"


class EpisodeRow(NamedTuple):
    """One finished game, as a row of episodes.csv."""

    episode: int  # games finished since the run began
    timestep: int  # agent steps of the whole run when the game ended
    length: int  # agent steps
    ret: float  # the raw game score (not the clipped learning reward)
    avg_length: float  # over the last 100 games
    avg_return: float
    hours: float  # wall-clock hours since the run began


EPISODE_COLUMNS = ("episode", "timestep", "length", "return", "avg_length", "avg_return",
                   "hours")
EVALUATION_COLUMNS = ("timestep", "mean", "std", "episodes", "hours")


class RunLogs:
    """The logs of one run directory, opened by `open`; owned by the main thread."""

    def __init__(self, run_dir: RunPath):
        """`run_dir`: the run directory held open (a run's), or its path (opened when first
        used)."""
        self._directory = run_dir if isinstance(run_dir, OpenDirectory) else None
        self._path = Path(run_dir.path if isinstance(run_dir, OpenDirectory) else run_dir)
        self._writer = None  # TensorBoard writer, created on first use
        self._tf = None  # the tensorflow module, imported with the writer
        self._scalar_metadata = None
        self._episodes_csv: _CsvLog | None = None
        self._evaluations_csv: _CsvLog | None = None

    def open(self, *, kept_rows: tuple[int, int] | None = None) -> None:
        """Opens the CSVs to append to them (writing their headers if they are new).

        Args:
            kept_rows: on a resume, the games and evaluations the checkpoint counted: the
                rows after them (logged after the checkpoint; the resumed run logs them
                again) and a torn last line are dropped. Run `check_logs_match` first.
        Raises:
            WriteFailed: a file cannot be written.
        """
        episodes, evaluations = kept_rows if kept_rows is not None else (None, None)
        self._episodes_csv = _CsvLog(self.directory, EPISODES_FILE, EPISODE_COLUMNS,
                                     kept_rows=episodes)
        self._evaluations_csv = _CsvLog(self.directory, EVALUATIONS_FILE, EVALUATION_COLUMNS,
                                        kept_rows=evaluations)

    @property
    def directory(self) -> OpenDirectory:
        """The run directory, held open (`WriteFailed` if one given by path is not there)."""
        if self._directory is None:
            try:
                self._directory = OpenDirectory.at(self._path)
            except OSError as error:
                raise WriteFailed(self._path, error.strerror or str(error),
                                  disk_full=False) from None
        return self._directory

    @property
    def run_dir(self) -> Path:
        """Where the run directory is now (it may have been moved while the run ran)."""
        return self._path if self._directory is None else self._directory.where()

    def write_config(self, config_dict: Mapping[str, Any]) -> None:
        """Writes `config.json`: the resolved settings plus `"library_versions"` (atomically)."""
        payload = dict(config_dict)
        payload["library_versions"] = library_versions()
        self.directory.write_bytes_atomic(CONFIG_FILE, json_text(payload).encode())

    def config_value(self, key: str) -> Any:
        """The value of `key` in `config.json` as written, or None (`WriteFailed` if it
        cannot be read, ValueError if it is not JSON)."""
        return self._saved_config().get(key)

    def add_to_config(self, entries: Mapping[str, Any]) -> None:
        """Sets `entries` in `config.json`, atomically, leaving the rest as written (what a
        run finds out once built, a resume's --timesteps); raises as `config_value`."""
        saved = self._saved_config()
        if any(saved.get(key) != value for key, value in entries.items()):
            self.directory.write_bytes_atomic(CONFIG_FILE,
                                              json_text({**saved, **entries}).encode())

    def _saved_config(self) -> dict[str, Any]:
        try:
            saved = json.loads(self.directory.read_bytes(CONFIG_FILE))
        except OSError as error:
            raise self.directory.failure(CONFIG_FILE, error) from error
        if not isinstance(saved, dict):
            raise ValueError(f"{CONFIG_FILE} is not a JSON object")
        return saved

    def log_episode(self, row: EpisodeRow) -> None:
        """Appends one finished game to `episodes.csv`."""
        self._episodes_csv.append((row.episode, int(row.timestep), int(row.length),
                                   float(row.ret), float(row.avg_length),
                                   float(row.avg_return), _hours(row.hours)))

    def log_evaluation(self, timestep: int, returns: Sequence[float],
                       hours: float) -> dict[str, Any]:
        """Appends one evaluation (mean and population std of its games' returns); returns
        the row as a dict keyed by the columns (ValueError for no returns)."""
        returns = [float(x) for x in returns]
        if not returns:
            raise ValueError("an evaluation needs at least one game's return")
        mean = math.fsum(returns) / len(returns)
        std = math.sqrt(math.fsum((x - mean) ** 2 for x in returns) / len(returns))
        row = {"timestep": int(timestep), "mean": mean, "std": std,
               "episodes": len(returns), "hours": float(hours)}
        self._evaluations_csv.append((row["timestep"], mean, std, row["episodes"],
                                      _hours(hours)))
        return row

    def log_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
        """Writes TensorBoard scalars (tags like `train/loss`, `eval/mean_return`) at `step`."""
        try:
            if self._writer is None:
                self._open_writer()
            tf = self._tf
            with self.directory.for_tensorflow(), self._writer.as_default():
                for tag, value in scalars.items():
                    tf.summary.write(tag, tf.constant(float(value), tf.float32),
                                     step=int(step), metadata=self._scalar_metadata)
        except Exception as error:  # noqa: BLE001 -- TensorFlow's errors are not OSError
            raise self._tensorboard_failure(error) from error

    def _open_writer(self) -> None:
        import tensorflow as tf  # only here: the rest of the module runs without it
        self._tf = tf
        with self.directory.for_tensorflow() as logdir:
            self._writer = tf.summary.create_file_writer(logdir)
        # What tensorboard's tf.summary.scalar writes, without the tensorboard package
        # (TensorFlow no longer installs it): a float32 tensor tagged for "scalars".
        metadata = tf.compat.v1.SummaryMetadata()
        metadata.plugin_data.plugin_name = "scalars"
        self._scalar_metadata = metadata

    def flush(self) -> None:
        """Pushes buffered TensorBoard events to disk (CSV rows are never buffered)."""
        if self._writer is None:
            return
        try:
            with self.directory.for_tensorflow():
                self._writer.flush()
        except Exception as error:  # noqa: BLE001 -- TensorFlow's errors are not OSError
            raise self._tensorboard_failure(error) from error

    def _tensorboard_failure(self, error: Exception) -> Exception:
        if isinstance(error, WriteFailed):
            return error  # the directory was moved or deleted
        if self._tf is not None and not isinstance(error, (self._tf.errors.OpError, OSError)):
            return error  # a bug, not the disk: keep its traceback
        directory = self.directory
        with contextlib.suppress(OSError):
            files = sorted((name for name in directory.names()
                            if fnmatch.fnmatch(name, TENSORBOARD_FILES)),
                           key=lambda name: getattr(directory.lstat(name), "st_mtime", 0))
            if files:
                return directory.failure(files[-1], error)
        return directory.failure(TENSORBOARD_FILES, error)

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        """Writes `summary.json` (atomically), replacing any earlier one."""
        self.directory.write_bytes_atomic(SUMMARY_FILE, json_text(summary).encode())

    def close(self) -> None:
        """Closes the CSVs and the TensorBoard writer (again: nothing); `WriteFailed` if the
        last TensorBoard events could not be written."""
        for log in (self._episodes_csv, self._evaluations_csv):
            if log is not None:
                log.close()
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                with self.directory.for_tensorflow():
                    writer.close()
            except Exception as error:  # noqa: BLE001 -- TensorFlow's errors are not OSError
                raise self._tensorboard_failure(error) from error


class NullRunLog:
    """A run log that keeps nothing (the benchmark's runs)."""

    def log_episode(self, row) -> None:
        pass

    def flush(self) -> None:
        pass

    def log_evaluation(self, timestep: int, returns: list[float], hours: float) -> dict:
        return {}

    def log_scalars(self, step: int, scalars: dict[str, float]) -> None:
        pass


def check_logs_match(run_dir: RunPath, step: int, episodes: int, evaluations: int) -> None:
    """Checks that the CSVs hold what a checkpoint at `step` counted, before a resume
    changes them: games 1..episodes up to that step, and `evaluations` evaluations, more
    only at the step itself (an evaluation owed by a stop is logged at the checkpoint's
    step after a resume, and a crash may follow). ValueError names the file and the fault.
    """
    run_path = run_dir.path if isinstance(run_dir, OpenDirectory) else Path(run_dir)
    numbers, timesteps = [], []
    try:
        with held(run_dir) as directory:
            numbers = [int(row[0]) for row in _logged_rows(directory, EPISODES_FILE,
                                                           EPISODE_COLUMNS, step)]
            timesteps = [int(row[0]) for row in _logged_rows(directory, EVALUATIONS_FILE,
                                                             EVALUATION_COLUMNS, step)]
    except FileNotFoundError:  # no directory: no rows
        pass
    except OSError as error:
        raise ValueError(f"cannot read {run_path}: {error.strerror or error}") from None
    if numbers != list(range(1, len(numbers) + 1)) or len(numbers) != episodes:
        raise ValueError(f"{run_path / EPISODES_FILE} holds {counted(len(numbers), 'game')} "
                         f"up to step {step} (numbered {_span(numbers)}); the checkpoint counts "
                         f"{episodes}")
    path = run_path / EVALUATIONS_FILE
    up_to = len(timesteps)
    before = sum(timestep < step for timestep in timesteps)
    if up_to < evaluations:
        raise ValueError(f"{path} holds {up_to} evaluations up to step {step}; the "
                         f"checkpoint counts {evaluations}")
    if before > evaluations:
        raise ValueError(f"{path} holds {before} evaluations before step {step}; the "
                         f"checkpoint counts {evaluations}")


def _span(numbers: list[int]) -> str:
    return f"{numbers[0]}..{numbers[-1]}" if numbers else "none"


def _logged_rows(directory: OpenDirectory, name: str, columns: Sequence[str],
                 step: int) -> list[list[str]]:
    """The complete rows of a CSV log with a timestep up to `step` (read only)."""
    if directory.lstat(name) is None:
        return []
    rows = _read_rows(directory, name, columns)
    timestep = columns.index("timestep")
    return [row for row in rows if int(row[timestep]) <= step]


def _read_rows(directory: OpenDirectory, name: str, columns: Sequence[str]) -> list[list[str]]:
    """The complete rows of a CSV log, a torn last line left out; ValueError for a link or a
    file that is not such a log."""
    path = directory.path / name
    try:
        text = directory.read_bytes(name).decode("utf-8")
    except LinkFound as error:
        raise ValueError(f"cannot read {path}: {error.strerror}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"cannot read {path}: {error}") from None
    lines = text.split("\n")[:-1]  # the piece after the last newline is empty or torn
    if not lines and not text:
        return []
    if not lines or tuple(lines[0].split(",")) != tuple(columns):
        raise ValueError(f"{path} does not start with the header {','.join(columns)}")
    rows = [row for row in csv.reader(lines[1:]) if row]
    timestep = columns.index("timestep")
    for number, row in enumerate(rows, start=2):
        if len(row) != len(columns) or not row[timestep].isdigit():
            raise ValueError(f"{path} line {number} is not a row of {len(columns)} columns")
    return rows


class _CsvLog:
    """An append-only CSV whose rows each go out in one unbuffered write; with `kept_rows`,
    the rows after the first `kept_rows` (and a torn last line) are dropped atomically."""

    def __init__(self, directory: OpenDirectory, name: str, columns: Sequence[str], *,
                 kept_rows: int | None):
        self._directory = directory
        self._name = name
        self.path = directory.path / name
        self.columns = tuple(columns)
        try:
            if kept_rows is not None and directory.lstat(name) is not None:
                self._keep_first_rows(kept_rows)
            fd = directory.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK)
            self._file = open(fd, "ab", buffering=0)  # noqa: SIM115 -- closed in close()
        except OSError as error:
            raise directory.failure(name, error) from error
        try:
            if os.fstat(self._file.fileno()).st_size == 0:
                self._write_line(self.columns)
        except WriteFailed:
            self._file.close()
            raise

    def append(self, values: Sequence[Any]) -> None:
        # A row written to a deleted directory's file would be lost without a word.
        self._directory.check_present()
        self._write_line([_csv_value(v) for v in values])

    def close(self) -> None:
        self._file.close()

    def _write_line(self, fields: Sequence[str]) -> None:
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerow(fields)
        data = buffer.getvalue().encode("utf-8")
        try:
            written = self._file.write(data)  # one system call for a row of this size
            while written is not None and written < len(data):  # never seen on a regular file
                data = data[written:]
                written = self._file.write(data)
        except OSError as error:
            raise self._directory.failure(self._name, error) from error

    def _keep_first_rows(self, count: int) -> None:
        raw = self._directory.read_bytes(self._name)
        kept = _read_rows(self._directory, self._name, self.columns)[:count]
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(self.columns)
        writer.writerows(kept)
        if text.getvalue().encode("utf-8") != raw:
            self._directory.write_bytes_atomic(self._name, text.getvalue().encode("utf-8"))


def _hours(hours: float) -> str:
    return f"{float(hours):.4f}"


def _csv_value(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)  # shortest text that reads back as the same float
    return str(value)
