"""What a run logs as it goes: its CSVs, TensorBoard scalars, config.json and summary.json.

    config.json        every resolved setting plus the library versions
    episodes.csv       episode,timestep,length,return,avg_length,avg_return,hours
    evaluations.csv    timestep,mean,std,episodes,hours
    events.out.tfevents.*   TensorBoard scalars (TensorFlow's own tf.summary)
    summary.json       written when the run ends (also on Ctrl-C)

The columns of episodes.csv are the ones the original fast-dqn tool printed, so old analysis
scripts keep working. Every CSV row goes out in one write, so a crash never leaves half a row
that a resume would keep; whole files are written atomically (`fast_dqn.run_dir`). A failed
write raises `WriteFailed`, naming the file.

TensorFlow is imported only when the first TensorBoard scalar is logged, so this module (and
the tests of everything that writes CSVs) loads without it.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence

from fast_dqn.run_dir import (CONFIG_FILE, EPISODES_FILE, EVALUATIONS_FILE, SUMMARY_FILE,
                              WriteFailed, library_versions, write_failure, write_json_atomic,
                              write_text_atomic)

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
    """The logs of one run directory. Nothing is opened or written until `open`.

    Thread ownership: owned by the main (sampler-loop) thread; call its methods from that
    thread only.
    """

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
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
        self._episodes_csv = _CsvLog(self.run_dir / EPISODES_FILE, EPISODE_COLUMNS,
                                     kept_rows=episodes)
        self._evaluations_csv = _CsvLog(self.run_dir / EVALUATIONS_FILE, EVALUATION_COLUMNS,
                                        kept_rows=evaluations)

    def write_config(self, config_dict: Mapping[str, Any]) -> None:
        """Writes `config.json`: the resolved settings plus `"library_versions"` (atomically)."""
        payload = dict(config_dict)
        payload["library_versions"] = library_versions()
        write_json_atomic(self.run_dir / CONFIG_FILE, payload)

    def add_to_config(self, entries: Mapping[str, Any]) -> None:
        """Sets `entries` in `config.json`, atomically, leaving the rest as written: what a run
        finds out once built (whether XLA compiles on its device), a resume's --timesteps."""
        path = self.run_dir / CONFIG_FILE
        saved = json.loads(path.read_text())
        if any(saved.get(key) != value for key, value in entries.items()):
            write_json_atomic(path, {**saved, **entries})

    def log_episode(self, row: EpisodeRow) -> None:
        """Appends one finished game to `episodes.csv`."""
        self._episodes_csv.append((row.episode, int(row.timestep), int(row.length),
                                   float(row.ret), float(row.avg_length),
                                   float(row.avg_return), _hours(row.hours)))

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
            with self._writer.as_default():
                for tag, value in scalars.items():
                    tf.summary.write(tag, tf.constant(float(value), tf.float32),
                                     step=int(step), metadata=self._scalar_metadata)
        except Exception as error:  # noqa: BLE001 -- TensorFlow's errors are not OSError
            raise self._tensorboard_failure(error) from error

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
        if self._writer is None:
            return
        try:
            self._writer.flush()
        except Exception as error:  # noqa: BLE001 -- TensorFlow's errors are not OSError
            raise self._tensorboard_failure(error) from error

    def _tensorboard_failure(self, error: Exception) -> Exception:
        if self._tf is not None and not isinstance(error, (self._tf.errors.OpError, OSError)):
            return error  # a bug, not the disk: keep its traceback
        files = sorted(self.run_dir.glob(TENSORBOARD_FILES), key=os.path.getmtime)
        path = files[-1] if files else self.run_dir / TENSORBOARD_FILES
        return write_failure(path, error)

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        """Writes `summary.json` (atomically), replacing any earlier one."""
        write_json_atomic(self.run_dir / SUMMARY_FILE, summary)

    def close(self) -> None:
        """Closes the CSVs and the TensorBoard writer. Calling it again does nothing.

        Raises:
            WriteFailed: the last TensorBoard events could not be written.
        """
        for log in (self._episodes_csv, self._evaluations_csv):
            if log is not None:
                log.close()
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
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


def check_logs_match(run_dir: Path, step: int, episodes: int, evaluations: int) -> None:
    """Checks that the CSVs hold what a checkpoint at `step` counted, before a resume
    changes them: games 1..episodes up to that step, and `evaluations` evaluations, of which
    only those logged at the step itself may be followed by more (an evaluation owed by a
    stop is played after the resume at the checkpoint's own step, then a crash may come
    before the next checkpoint).

    Raises:
        ValueError: naming the file and what differs.
    """
    numbers = [int(row[0]) for row in _logged_rows(run_dir / EPISODES_FILE, EPISODE_COLUMNS,
                                                   step)]
    if numbers != list(range(1, len(numbers) + 1)) or len(numbers) != episodes:
        raise ValueError(f"{run_dir / EPISODES_FILE} holds {len(numbers)} games up to step "
                         f"{step} (numbered {_span(numbers)}); the checkpoint counts "
                         f"{episodes}")
    path = run_dir / EVALUATIONS_FILE
    timesteps = [int(row[0]) for row in _logged_rows(path, EVALUATION_COLUMNS, step)]
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


def _logged_rows(path: Path, columns: Sequence[str], step: int) -> list[list[str]]:
    """The complete rows of a CSV log with a timestep up to `step` (read only)."""
    if not path.exists():
        return []
    rows = _read_rows(path, columns)
    timestep = columns.index("timestep")
    return [row for row in rows if int(row[timestep]) <= step]


def _read_rows(path: Path, columns: Sequence[str]) -> list[list[str]]:
    """The complete rows of a CSV log; a torn last line (a crash mid-write) is left out.

    Raises:
        ValueError: the file is not such a log (wrong header, a row that does not parse).
    """
    try:
        text = path.read_bytes().decode("utf-8")
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
    """An append-only CSV whose rows each go out in one unbuffered write.

    Opening with `kept_rows` keeps the first rows already there (dropping the rest and a
    torn last line) and rewrites the file atomically if anything was dropped.
    """

    def __init__(self, path: Path, columns: Sequence[str], *, kept_rows: int | None):
        self.path = path
        self.columns = tuple(columns)
        try:
            if kept_rows is not None and path.exists():
                self._keep_first_rows(kept_rows)
            self._file = open(path, "ab", buffering=0)  # noqa: SIM115 -- closed in close()
        except OSError as error:
            raise write_failure(path, error) from error
        try:
            if os.fstat(self._file.fileno()).st_size == 0:
                self._write_line(self.columns)
        except WriteFailed:
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
        try:
            written = self._file.write(data)  # one system call for a row of this size
            while written is not None and written < len(data):  # never seen on a regular file
                data = data[written:]
                written = self._file.write(data)
        except OSError as error:
            raise write_failure(self.path, error) from error

    def _keep_first_rows(self, count: int) -> None:
        raw = self.path.read_bytes()
        kept = _read_rows(self.path, self.columns)[:count]
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(self.columns)
        writer.writerows(kept)
        if text.getvalue().encode("utf-8") != raw:
            write_text_atomic(self.path, text.getvalue())


def _hours(hours: float) -> str:
    return f"{float(hours):.4f}"


def _csv_value(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)  # shortest text that reads back as the same float
    return str(value)
