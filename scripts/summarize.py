#!/usr/bin/env python3
"""Summarizes a sweep: one row per game and setting, human-normalized scores, throughput,
curves; or draws one run.

    python scripts/summarize.py RUNS_DIR [--plot curves.png] [--csv table.csv]
    python scripts/summarize.py RUN_DIR [--plot run.png]

Every directory under RUNS_DIR that holds a `config.json` is a run (directories named
`*.incomplete-*`, which scripts/all_games.sh sets aside, are not); symbolic links to
directories are followed, and a note names the runs reached through one (a run reached by
two paths counts once). Runs are grouped by their `game` and by every setting of their
config that can change what a run learns: runs whose settings differ are never averaged
(a note names the settings that differ, and each row's name says its trainer, variant or
differing settings: "pong (timesteps=2000)"); the seeds, which are what a group's runs
should differ in, are counted once each (five runs of seed 0 are one seed; a note lists
repeated seeds). For each group the table shows the seeds, the
final evaluation (the last row of each run's `evaluations.csv`) as mean +- std across runs,
the best evaluation (the mean across runs of each run's highest evaluation), the
human-normalized score of the final mean (Mnih et al. 2015; see fast_dqn.atari_data), and
throughput from each run's `summary.json`. Below the table: the median and mean
human-normalized score over the groups that have one. A score from a run whose final
evaluation comes before a tenth of the protocol's 50,000,000 steps is marked `*` and left out
of the median and mean: it says nothing about Nature's scores. Runs without evaluations are
listed in a note and left out of the scores, and so are evaluation rows holding inf or nan
(the note says how many and on which lines). The CSVs are read line by line: a damaged line
(a crash's torn last line, bytes written over the file) is skipped, the rows around it are
kept, and one note per file says how many lines it skipped.

RUN_DIR (a directory that holds a `config.json` itself) is one run: below its table row
summarize.py draws one picture of it, five panels against agent steps: the training games'
returns (episodes.csv), the evaluations (evaluations.csv), and the loss, the mean Q and the
steps/s (its TensorBoard events, read without TensorFlow). The picture goes to `--plot PNG`,
or else to `RUN_DIR/run.png`, written through the run directory under its lock: a run
directory belongs to the process that holds it, so while a run holds it (the run is going
on) nothing is written into it and a note says to give `--plot PNG` instead.

Every file is written atomically (a temporary file, then a rename). matplotlib is needed
for the pictures only (requirements-scripts.txt), the `tensorboard` package for the panels
read from the events.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import fnmatch
import io
import json
import math
import os
import statistics
import struct
import sys
from pathlib import Path
from typing import Any, NamedTuple, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# The repository root is put on the path above.
from fast_dqn import atari_data  # noqa: E402
from fast_dqn.config import VARIANTS, Config, counted  # noqa: E402
from fast_dqn.run_dir import (RunDirectory, RunDirError, WriteFailed,  # noqa: E402
                              open_atomic)

FRAMES_PER_STEP = 4
TRAINER_NAMES = {"dqn": "run_dqn.py", "fast_dqn": "run_fast_dqn.py"}
SET_ASIDE_MARK = ".incomplete-"  # scripts/all_games.sh renames unresumable runs so
RUN_PICTURE = "run.png"

# Settings that do not change what a run learns: where it writes and how often, and the
# execution choices that make the same updates (docs/protocol.md, `--xla`, `--replay-device`,
# `--backend`, `--updates-per-call`). The seed is what a group's runs differ in. Every other
# setting of config.json, a new one too, keeps runs apart where it differs.
NOT_SETTINGS = frozenset({"seed", "logdir", "resume", "refill_replay", "checkpoint_every",
                          "checkpoint_replay", "progress_every", "xla", "replay_device",
                          "backend", "updates_per_call", "device", "library_versions"})
# What config.json records about the code, not the run's settings.
_BOOKKEEPING_WORDS = ("commit", "version", "dirty", "tree", "changes")
_SETTING_DEFAULTS = {field.name: field.default for field in dataclasses.fields(Config)}
PROTOCOL_STEPS = Config.timesteps  # 50,000,000 agent steps = 200M frames, both protocols
SHORT_RUN_STEPS = PROTOCOL_STEPS // 10
SHORT_MARK = "*"


class Evaluation(NamedTuple):
    timestep: int  # agent steps
    mean: float  # mean raw game score over the evaluation's episodes
    std: float
    episodes: int
    hours: float


class Run(NamedTuple):
    path: Path
    game: str
    seed: int
    evaluations: tuple[Evaluation, ...]
    summary: Optional[dict[str, Any]]
    algo: str = ""  # "dqn" (run_dqn.py) or "fast_dqn" (run_fast_dqn.py)
    variant: str = ""  # "" for Nature DQN; else e.g. "machado+double+adam" (see variant_of)
    settings: tuple[tuple[str, str], ...] = ()  # what keeps runs apart (see settings_of)


class GameRow(NamedTuple):
    """One line of the table; None where a value is not known."""

    game: str  # the group's name: the game, and what sets it apart ("pong (dueling)")
    seeds: tuple[int, ...]  # each seed once
    runs: int
    finished_runs: int
    evaluated_runs: int
    final_timestep: Optional[int]  # the smallest final evaluation step over the runs
    final_mean: Optional[float]
    final_std: Optional[float]  # across runs (sample std; None for one run)
    best_mean: Optional[float]
    human_normalized: Optional[float]
    steps_per_second: Optional[float]
    updates_per_second: Optional[float]
    wall_hours: Optional[float]
    device: str
    short: bool = False  # final evaluation before SHORT_RUN_STEPS: not comparable to Nature


class UsageError(Exception):
    """Bad input: reported in one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = _Parser(prog="summarize.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs_dir", metavar="RUNS_DIR",
                        help="directory holding run directories, or one run directory")
    parser.add_argument("--plot", metavar="PNG",
                        help="write learning curves to this image (for one run directory: "
                             f"its picture; default RUN_DIR/{RUN_PICTURE})")
    parser.add_argument("--csv", metavar="CSV", help="write the table to this CSV file")
    return parser.parse_args(argv)


def find_run_dirs(root: Path, notes: list[str]) -> list[Path]:
    """Directories under `root` (itself included) that hold a config.json, sorted.

    Symbolic links to directories are followed (runs gathered from scratch disks by links),
    once the tree itself has been walked, and every directory is visited once however many
    paths lead to it: a run is counted once, found in place where it is there, and a link
    cycle ends. A note names the runs reached through a link, and any reached again."""
    visited: dict[tuple[int, int], str] = {}  # (device, inode) -> the path it was found by
    found: list[str] = []
    again: list[str] = []
    links: list[str] = []  # links to directories in the tree, followed after it

    def look_in(top: str, followlinks: bool) -> None:
        for directory, subdirectories, files in os.walk(top, followlinks=followlinks):
            try:
                status = os.stat(directory)
            except OSError:
                subdirectories[:] = []
                continue
            first = visited.setdefault((status.st_dev, status.st_ino), directory)
            if first != directory or SET_ASIDE_MARK in os.path.basename(directory):
                if first != directory and "config.json" in files:
                    again.append(f"{directory} (the run {first})")
                subdirectories[:] = []
            elif "config.json" in files:
                found.append(directory)
                subdirectories[:] = []  # a run's own folders (checkpoint/) hold no runs
            else:
                subdirectories.sort()
                if not followlinks:  # os.walk lists them, and leaves them out
                    links.extend(path for path in (os.path.join(directory, name)
                                                   for name in subdirectories)
                                 if os.path.islink(path))

    look_in(str(root), followlinks=False)
    in_place = len(found)
    for link in links:
        look_in(link, followlinks=True)
    linked = [f"{path} -> {os.path.realpath(path)}" for path in found[in_place:]]
    if linked:
        notes.append(f"{len(linked)} run(s) reached through a symbolic link: "
                     + ", ".join(sorted(linked)))
    if again:
        notes.append(f"counted once: {len(again)} run(s) reached again by another path: "
                     + ", ".join(sorted(again)))
    return sorted(Path(path) for path in found)


def read_log(path: Path, columns: Sequence[str], notes: list[str], *,
             finite: bool = False) -> list[tuple[int, list[float]]]:
    """The rows of one of a run's CSV logs (episodes.csv, evaluations.csv; none if it is
    missing): each row's line number and its values in `columns`, found by the header's
    names. The file is read line by line, so that damage stays in its lines: a line that
    is not whole (a crash's torn last line, without its newline) or not a row of numbers
    (bytes written over the file), and with `finite` one holding inf or nan, is skipped,
    and one note names the file and how many it skipped. A file whose first line does not
    name the columns is left out with a note."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as error:
        notes.append(f"{path}: left out, unreadable ({error.strerror or error})")
        return []
    lines = data.split(b"\n")
    torn = lines.pop().strip() != b""  # the piece after the last newline: empty or torn
    if not lines:
        if torn:
            notes.append(f"{path}: left out, it holds no whole line")
        return []
    header = [name.strip() for name in lines[0].decode("utf-8", "replace").split(",")]
    if not set(columns) <= set(header):
        notes.append(f"{path}: left out, its first line is not a header naming "
                     f"{', '.join(columns)}")
        return []
    where = [header.index(name) for name in columns]
    rows, skipped = [], int(torn)
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            fields = line.decode("utf-8").split(",")
            if len(fields) != len(header):
                raise ValueError("not a row of the header's columns")
            values = [float(fields[i]) for i in where]
        except ValueError:  # UnicodeDecodeError too
            skipped += 1
            continue
        if finite and not all(math.isfinite(value) for value in values):
            skipped += 1
            continue
        rows.append((number, values))
    if skipped:
        notes.append(f"{path}: skipped {skipped} damaged row(s) (not a whole row of numbers"
                     f"{', or holding inf or nan' if finite else ''}); kept the other "
                     f"{len(rows)}")
    return rows


def read_evaluations(path: Path, notes: list[str]) -> tuple[Evaluation, ...]:
    """The evaluations of an evaluations.csv (read_log). A row holding inf or nan is left
    out (a mean that is not a number has no place in a mean over seeds), with a note
    saying where it was ("line 3 (step 2000)")."""
    evaluations, left_out = [], []
    for line, values in read_log(path, ("timestep", "mean", "std", "episodes", "hours"),
                                 notes):
        timestep, mean, std, episodes, hours = values
        if not all(math.isfinite(value) for value in values):
            step = int(timestep) if math.isfinite(timestep) else timestep
            left_out.append(f"line {line} (step {step})")
            continue
        evaluations.append(Evaluation(int(timestep), mean, std, int(episodes), hours))
    if left_out:
        notes.append(f"{path}: {len(left_out)} row(s) holding inf or nan left out of the "
                     f"scores: {', '.join(left_out)}")
    return tuple(sorted(evaluations, key=lambda e: e.timestep))


def read_run(path: Path, notes: list[str]) -> Optional[Run]:
    """The run in `path`, or None (with a note) where its config cannot be read."""
    try:
        config = json.loads((path / "config.json").read_text())
        game, seed = str(config["game"]), int(config["seed"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        notes.append(f"left out {path}: config.json without a readable game and seed ({error})")
        return None
    evaluations = read_evaluations(path / "evaluations.csv", notes)
    summary = None
    if (path / "summary.json").is_file():
        try:
            summary = json.loads((path / "summary.json").read_text())
        except (OSError, ValueError) as error:
            notes.append(f"{path}: summary.json unreadable ({error})")
    return Run(path, game, seed, evaluations, summary if isinstance(summary, dict) else None,
               str(config.get("algo", "")), variant_of(config), settings_of(config))


def variant_of(config: dict[str, Any]) -> str:
    """How a run departs from Nature DQN: the short names of its variants (fast_dqn.config's
    VARIANTS, in their order: "machado+double+adam"), "" for none."""
    names = (variant.short_name(config.get(variant.field, variant.nature))
             for variant in VARIANTS)
    return "+".join(name for name in names if name is not None)


def _number(summary: Optional[dict[str, Any]], key: str) -> Optional[float]:
    value = summary.get(key) if summary else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None



def settings_of(config: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The settings of a run that keep it apart from others (see NOT_SETTINGS), with the
    defaults filled in where an older config.json lacks a setting, as (name, JSON value)."""
    merged = {**_SETTING_DEFAULTS, **config}
    return tuple(sorted((name, json.dumps(value, sort_keys=True))
                        for name, value in merged.items()
                        if name not in NOT_SETTINGS and not _bookkeeping(name, value)))


def _bookkeeping(name: str, value: Any) -> bool:
    return isinstance(value, dict) or any(word in name.lower() for word in _BOOKKEEPING_WORDS)


def _mean(values: Sequence[Optional[float]]) -> Optional[float]:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def normalized(game: str, score: Optional[float]) -> Optional[float]:
    """Human-normalized score in percent, or None for no score or a game without references."""
    if score is None:
        return None
    try:
        return atari_data.human_normalized_score(game, score)
    except ValueError:
        return None


def summarize_game(game: str, runs: Sequence[Run]) -> GameRow:
    evaluated = [run for run in runs if run.evaluations]
    finals = [run.evaluations[-1].mean for run in evaluated]
    final_mean = statistics.fmean(finals) if finals else None
    final_std = statistics.stdev(finals) if len(finals) > 1 else None
    best_mean = _mean([max(e.mean for e in run.evaluations) for run in evaluated])
    wall = _mean([_number(run.summary, "wall_seconds") for run in runs])
    devices = sorted({str(run.summary["device"]) for run in runs
                      if run.summary and run.summary.get("device")})
    final_timestep = min((run.evaluations[-1].timestep for run in evaluated), default=None)
    return GameRow(
        game=game,
        seeds=tuple(sorted({run.seed for run in runs})),
        runs=len(runs),
        finished_runs=sum(1 for run in runs if run.summary and run.summary.get("finished") is True),
        evaluated_runs=len(evaluated),
        final_timestep=final_timestep,
        final_mean=final_mean,
        final_std=final_std,
        best_mean=best_mean,
        human_normalized=normalized(runs[0].game, final_mean),
        steps_per_second=_mean([_number(run.summary, "steps_per_second") for run in runs]),
        updates_per_second=_mean([_number(run.summary, "updates_per_second") for run in runs]),
        wall_hours=None if wall is None else wall / 3600.0,
        device=",".join(devices),
        short=final_timestep is not None and final_timestep < SHORT_RUN_STEPS,
    )


def group_by_game(runs: Sequence[Run], notes: list[str]) -> dict[str, list[Run]]:
    """Runs by game and settings: only runs whose settings are the same are averaged.

    A group is named by its game, its trainer where both trainers ran ("pong (fast_dqn)"),
    its variant ("pong (machado+double)") and, where two groups of a game would still have
    one name, the settings in which they differ ("pong (timesteps=2000)"). A note names the
    settings that differ between a game's groups, and the seeds found in more than one run
    of a group.
    """
    both_trainers = len({run.algo for run in runs}) > 1
    by_game: dict[str, dict[tuple, list[Run]]] = {}
    for run in runs:
        by_game.setdefault(run.game, {}).setdefault(run.settings, []).append(run)
    groups: dict[str, list[Run]] = {}
    for game, by_settings in by_game.items():
        if len(by_settings) > 1:
            notes.append(f"{game}: {len(by_settings)} groups of runs with different settings, "
                         "each averaged on its own; they differ in "
                         + ", ".join(_differing(list(by_settings))))
        named: dict[str, list[tuple]] = {}
        for settings, group in by_settings.items():
            run = group[0]
            labels = ([run.algo] if both_trainers else []) + ([run.variant] if run.variant
                                                              else [])
            named.setdefault(", ".join(labels), []).append(settings)
        for label, same_name in named.items():
            differing = _differing(same_name) if len(same_name) > 1 else []
            for settings in same_name:
                values = dict(settings)
                parts = ([label] if label else []) + [f"{name}={_plain(values.get(name))}"
                                                      for name in differing]
                key = f"{game} ({', '.join(parts)})" if parts else game
                groups[key] = by_settings[settings]
    for key, group in groups.items():
        seeds = [run.seed for run in group]
        for seed in sorted({s for s in seeds if seeds.count(s) > 1}):
            paths = ", ".join(str(r.path) for r in group if r.seed == seed)
            notes.append(f"{key}: seed {seed} appears in more than one run ({paths}); "
                         "it is counted as one seed")
    return dict(sorted(groups.items()))


def _differing(settings: Sequence[tuple[tuple[str, str], ...]]) -> list[str]:
    """The names of the settings whose values are not the same in all of `settings`."""
    names = sorted({name for one in settings for name, _ in one})
    return [name for name in names if len({dict(one).get(name) for one in settings}) > 1]


def _plain(value: Optional[str]) -> str:
    """A setting's JSON value as it reads in a row's name: 2000, 0.25, true, machado."""
    if value is None:
        return "-"
    decoded = json.loads(value)
    return decoded if isinstance(decoded, str) else value


def _fmt(value: Optional[float], digits: int = 1) -> str:
    """`value` with thousands separators; a value that rounds to zero is "0.0", never
    "-0.0"."""
    if value is None:
        return "-"
    text = f"{value:,.{digits}f}"
    if text.startswith("-") and not text.strip("-0.,"):
        text = text[1:]
    return text


def _shorten(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def format_table(rows: Sequence[GameRow]) -> str:
    header = ("game", "seeds", "done", "final step", "final mean", "+- std", "best",
              "human %", "steps/s", "updates/s", "hours", "device")
    lines = []
    for row in rows:
        human = _fmt(row.human_normalized)
        if row.short and row.human_normalized is not None:
            human += SHORT_MARK
        lines.append((
            row.game,
            ",".join(str(s) for s in row.seeds),
            f"{row.finished_runs}/{row.runs}",
            "-" if row.final_timestep is None else f"{row.final_timestep:,}",
            _fmt(row.final_mean),
            _fmt(row.final_std),
            _fmt(row.best_mean),
            human,
            _fmt(row.steps_per_second, 0),
            _fmt(row.updates_per_second, 0),
            _fmt(row.wall_hours, 2),
            _shorten(row.device) or "-",
        ))
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    left = {0, 1, 11}  # text columns; numbers are right-aligned

    def join(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i in left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([join(header), join(["-" * w for w in widths])] + [join(cells) for cells in lines])


def aggregate_lines(rows: Sequence[GameRow]) -> list[str]:
    scores = [row.human_normalized for row in rows
              if row.human_normalized is not None and not row.short]
    short = [row.game for row in rows if row.human_normalized is not None and row.short]
    lines = []
    if scores:
        lines.append(f"human-normalized score over {counted(len(scores), 'game')}: "
                     f"median {_fmt(statistics.median(scores))}%, "
                     f"mean {_fmt(statistics.fmean(scores))}%")
    elif not short:
        why = ("no run has an evaluation" if all(row.final_mean is None for row in rows)
               else "no game with an evaluation has Nature reference scores")
        lines.append(f"human-normalized score: none, since {why}")
    else:
        lines.append("human-normalized score: none over the games: every score is from a "
                     "short run (*)")
    if short:
        lines.append(f"{SHORT_MARK} short run: the final evaluation comes before step "
                     f"{SHORT_RUN_STEPS:,}, a tenth of the protocol's {PROTOCOL_STEPS:,} "
                     "steps; its human-normalized score is not comparable to Nature's and is "
                     f"left out of the median and mean: {', '.join(short)}")
    return lines


def coverage_notes(runs: Sequence[Run], rows: Sequence[GameRow]) -> list[str]:
    notes = []
    unevaluated = [run for run in runs if not run.evaluations]
    if unevaluated:
        notes.append(f"{counted(len(unevaluated), 'run')} without an evaluation, left out of the "
                     "human-normalized score:")
        notes.extend(f"  {run.game} seed {run.seed}: {run.path}" for run in unevaluated)
    unknown = [row.game for row in rows
               if row.final_mean is not None and row.human_normalized is None]
    if unknown:
        notes.append("no Nature reference scores, left out of the normalized score: "
                     + ", ".join(unknown))
    return notes


CSV_COLUMNS = ("game", "seeds", "runs", "finished_runs", "evaluated_runs", "final_timestep",
               "final_mean", "final_std", "best_mean", "human_normalized", "steps_per_second",
               "updates_per_second", "wall_hours", "device", "short")


def write_csv(rows: Sequence[GameRow], path: Path) -> None:
    lines = []
    for row in rows:
        values = row._asdict()
        values["seeds"] = " ".join(str(s) for s in row.seeds)
        values["short"] = "true" if row.short else "false"
        lines.append(["" if values[c] is None else values[c] for c in CSV_COLUMNS])
    with open_atomic(path) as stream:
        text = _csv_text([list(CSV_COLUMNS)] + lines)
        stream.write(text.encode("utf-8"))


def _csv_text(rows: Sequence[Sequence[Any]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue()


def curve(runs: Sequence[Run]) -> tuple[list[float], list[float], list[float], list[float]]:
    """Frames (millions) and the mean, min and max over runs at each evaluation step."""
    by_step: dict[int, list[float]] = {}
    for run in runs:
        for evaluation in run.evaluations:
            by_step.setdefault(evaluation.timestep, []).append(evaluation.mean)
    steps = sorted(by_step)
    frames = [step * FRAMES_PER_STEP / 1e6 for step in steps]
    return (frames, [statistics.fmean(by_step[s]) for s in steps],
            [min(by_step[s]) for s in steps], [max(by_step[s]) for s in steps])


def seeds_text(runs: Sequence[Run]) -> str:
    """"3 seeds", "1 seed", or "1 seed, 5 runs" where a seed ran more than once."""
    seeds, count = len({run.seed for run in runs}), len(runs)
    text = counted(seeds, "seed")
    return text if count == seeds else f"{text}, {count} runs"


def _pyplot():
    """matplotlib's pyplot on the Agg backend (no display needed).

    Raises:
        ImportError: matplotlib is not installed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_figure(figure: Any, path: Path) -> None:
    """Writes `figure` as a PNG to `path` atomically (a link at `path` is replaced).

    Raises:
        WriteFailed: the file system refused the write.
    """
    with open_atomic(path) as stream:
        figure.savefig(stream, format="png", dpi=100)


def plot_curves(games: dict[str, list[Run]], rows: dict[str, GameRow], path: Path) -> bool:
    """One panel per game with evaluations: mean over runs, min-max band, one line per
    trainer, variant or setting where several ran, and the random agent's score dashed.
    False if none."""
    plt = _pyplot()
    panels: dict[str, list[str]] = {}  # game -> its table rows (one per group of settings)
    for key, runs in games.items():
        if any(run.evaluations for run in runs):
            panels.setdefault(runs[0].game, []).append(key)
    if not panels:
        return False
    columns = min(7, math.ceil(math.sqrt(len(panels))))
    lines = math.ceil(len(panels) / columns)
    # at least 6.5 inches wide, so that the two-line title fits above a single panel
    width = max(3.2 * columns, 6.5)
    figure, axes = plt.subplots(lines, columns, figsize=(width, 2.6 * lines),
                                squeeze=False, layout="constrained")
    for axis in axes.flat[len(panels):]:
        axis.set_visible(False)
    for axis, (game, keys) in zip(axes.flat, panels.items()):
        for key in keys:
            runs = [run for run in games[key] if run.evaluations]
            frames, mean, low, high = curve(runs)
            label = TRAINER_NAMES.get(runs[0].algo, runs[0].algo)
            setting = key[len(game):].strip().strip("()")
            if setting:
                label += f" ({setting})"
            axis.fill_between(frames, low, high, alpha=0.25, linewidth=0)
            axis.plot(frames, mean, linewidth=1.5, label=label,
                      marker="." if len(frames) < 20 else None)
        if game in atari_data.NATURE_GAMES:
            axis.axhline(atari_data.reference_scores(game).random, color="gray",
                         linestyle="--", linewidth=1, label="random agent")
        if len(keys) > 1:
            axis.legend(fontsize=7)
        details = [f"{_fmt(rows[key].human_normalized, 0)}%"
                   + (SHORT_MARK if rows[key].short else "") for key in keys
                   if rows[key].human_normalized is not None]
        details.append(seeds_text(max((games[key] for key in keys), key=len)))
        axis.set_title(f"{game} ({', '.join(details)})", fontsize=9)
        axis.tick_params(labelsize=7)
        axis.grid(alpha=0.3)
    for axis in axes[-1]:
        axis.set_xlabel("frames (millions)", fontsize=8)
    for axis in axes[:, 0]:
        axis.set_ylabel("evaluation return", fontsize=8)
    # Two short lines, so that the title fits a figure of one or two panels too.
    figure.suptitle("Evaluation return over frames\n(mean over runs, band from min to max; "
                    "titles: human-normalized final score, seeds)", fontsize=9)
    try:
        save_figure(figure, path)
    finally:
        plt.close(figure)
    return True


# ---------------------------------------------------------------------------- one run

RUN_PANELS = ("training return", "evaluation return", "loss", "mean Q", "steps/s")
TENSORBOARD_FILES = "events.out.tfevents.*"
_TENSOR_FORMATS = {1: "<f", 2: "<d"}  # TensorFlow's DT_FLOAT and DT_DOUBLE, little-endian


class Games(NamedTuple):
    """The columns of a run's episodes.csv that the picture draws."""

    steps: list[int]
    returns: list[float]
    avg_returns: list[float]  # over the last 100 games


def read_games(path: Path, notes: list[str]) -> Games:
    """The finished games of episodes.csv (read_log; rows holding inf or nan skipped too)."""
    games = Games([], [], [])
    for _, (step, score, average) in read_log(
            path, ("timestep", "return", "avg_return"), notes, finite=True):
        games.steps.append(int(step))
        games.returns.append(score)
        games.avg_returns.append(average)
    return games


def read_scalars(run_dir: Path, notes: list[str]) -> dict[str, list[tuple[int, float]]]:
    """The TensorBoard scalars of a run, tag -> [(step, value)] by step, read from its
    events files without TensorFlow (tensorboard's protocol buffers, if installed). Where
    a step was logged twice (a resumed run logs again what came after its checkpoint), the
    later value counts."""
    try:
        names = sorted(name for name in os.listdir(run_dir)
                       if fnmatch.fnmatch(name, TENSORBOARD_FILES))
    except OSError:
        return {}
    if not names:
        return {}
    try:
        from tensorboard.compat.proto import event_pb2
    except ImportError:
        notes.append("the loss, mean Q and steps/s panels need the tensorboard package "
                     "(pip install -r requirements-scripts.txt)")
        return {}
    by_tag: dict[str, dict[int, float]] = {}
    for name in names:  # the names begin with the time they were made: oldest first
        try:
            for record in _records(run_dir / name):
                event = event_pb2.Event.FromString(record)
                for value in event.summary.value:
                    number = _scalar(value)
                    if number is not None and math.isfinite(number):
                        by_tag.setdefault(value.tag, {})[int(event.step)] = number
        except Exception as error:  # noqa: BLE001 -- a damaged file: protobuf's DecodeError
            notes.append(f"{run_dir / name}: left out, unreadable ({error})")
    return {tag: sorted(values.items()) for tag, values in by_tag.items()}


def _records(path: Path) -> list[bytes]:
    """The records of a TFRecord file: each is a little-endian 8-byte length, a 4-byte
    checksum of it, the data and a 4-byte checksum of the data. A record cut short (one
    being written) ends the list."""
    data = path.read_bytes()
    records, position = [], 0
    while position + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, position)
        start = position + 12
        end = start + length
        if end + 4 > len(data):
            break
        records.append(data[start:end])
        position = end + 4
    return records


def _scalar(value: Any) -> Optional[float]:
    """The number of one summary value: a TensorFlow 2 scalar tensor, or a TF 1 simple_value."""
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind != "tensor":
        return None
    tensor = value.tensor
    form = _TENSOR_FORMATS.get(tensor.dtype)
    if form is None:
        return None
    if tensor.tensor_content:
        size = struct.calcsize(form)
        if len(tensor.tensor_content) != size:
            return None
        return float(struct.unpack(form, tensor.tensor_content)[0])
    listed = tensor.float_val if tensor.dtype == 1 else tensor.double_val
    return float(listed[0]) if len(listed) == 1 else None


def run_figure(run: Run, games: Games, scalars: dict[str, list[tuple[int, float]]]) -> Any:
    """The picture of one run: RUN_PANELS, one above the other, against agent steps."""
    plt = _pyplot()
    figure, axes = plt.subplots(len(RUN_PANELS), 1, figsize=(8, 11), sharex=True,
                                layout="constrained")
    for axis, title in zip(axes, RUN_PANELS):
        axis.set_title(title, fontsize=10, loc="left")
        axis.grid(alpha=0.3)
        axis.tick_params(labelsize=8)
    reference = (atari_data.reference_scores(run.game)
                 if run.game in atari_data.NATURE_GAMES else None)
    returns, evaluations, loss, mean_q, speed = axes
    if games.steps:
        returns.scatter(games.steps, games.returns, s=4, alpha=0.35, linewidths=0,
                        label="one game")
        returns.plot(games.steps, games.avg_returns, linewidth=1.5,
                     label="mean of the last 100 games")
    if run.evaluations:
        evaluations.errorbar([e.timestep for e in run.evaluations],
                             [e.mean for e in run.evaluations],
                             yerr=[e.std for e in run.evaluations], marker="o", markersize=4,
                             capsize=3, linewidth=1.5,
                             label=f"mean +- std of {counted(run.evaluations[-1].episodes, 'game')}")
    for axis, has in ((returns, bool(games.steps)), (evaluations, bool(run.evaluations))):
        if has and reference is not None:
            axis.axhline(reference.random, color="gray", linestyle="--", linewidth=1,
                         label="random agent")
    _line(loss, scalars.get("train/loss"), "mean Huber loss per update since the last log")
    _line(mean_q, scalars.get("train/mean_q"), "mean Q of the minibatches' actions")
    _line(speed, scalars.get("train/steps_per_second"), "trained agent steps/s since the "
          "replay start, to each log (done: gives it to the end)")
    settings = dict(run.settings)
    replay_start = json.loads(settings.get("replay_start", "0"))
    why_empty = {returns: "no finished game yet", evaluations: "no evaluation yet",
                 loss: "no training logged yet (or no TensorBoard events)",
                 mean_q: "no training logged yet (or no TensorBoard events)",
                 speed: "no rate logged yet"}
    for axis in axes:
        if axis.has_data():
            axis.axvline(replay_start, color="gray", linestyle=":", linewidth=1,
                         label="replay start")
            axis.legend(fontsize=7, loc="best")
        else:
            axis.text(0.5, 0.5, why_empty[axis], transform=axis.transAxes, ha="center",
                      va="center", fontsize=9, color="gray")
    axes[-1].set_xlabel("agent steps", fontsize=9)
    figure.suptitle(run_title(run), fontsize=10)
    return figure


def _line(axis: Any, points: Optional[list[tuple[int, float]]], label: str) -> None:
    if points:
        axis.plot([step for step, _ in points], [value for _, value in points],
                  linewidth=1.2, label=label, marker="." if len(points) < 30 else None)


def run_title(run: Run) -> str:
    trainer = TRAINER_NAMES.get(run.algo, run.algo or "trainer unknown")
    variant = f" ({run.variant})" if run.variant else ""
    summary = run.summary or {}
    steps = summary.get("steps")
    if summary.get("finished") is True:
        state = f"finished at {steps:,} steps" if isinstance(steps, int) else "finished"
    elif isinstance(steps, int):
        state = f"stopped at {steps:,} steps"
    else:
        state = "running, or stopped without a summary"
    return f"{run.path.name}\n{run.game}, {trainer}{variant}, seed {run.seed}: {state}"


def draw_one_run(run: Run, plot_path: Optional[Path]) -> int:
    """Draws the picture of `run` to `plot_path`, or into its directory unless another
    process holds it; prints where it went, or why not. Returns the exit status."""
    notes: list[str] = []
    try:
        plt = _pyplot()
    except ImportError:
        if plot_path is not None:
            print("summarize.py: error: --plot needs matplotlib "
                  "(pip install -r requirements-scripts.txt)", file=sys.stderr)
            return 1
        print("note: no picture of the run: it needs matplotlib "
              "(pip install -r requirements-scripts.txt)")
        return 0
    figure = run_figure(run, read_games(run.path / "episodes.csv", notes),
                        read_scalars(run.path, notes))
    try:
        for note in notes:
            print(f"note: {note}")
        if plot_path is not None:
            save_figure(figure, plot_path)
            print(f"wrote {plot_path}")
            return 0
        return _save_into_run(figure, run.path)
    except WriteFailed as error:
        print(f"summarize.py: error: {error}", file=sys.stderr)
        return 1
    finally:
        plt.close(figure)


def _save_into_run(figure: Any, run_dir: Path) -> int:
    """Writes the picture as RUN_PICTURE through the run directory, under its lock."""
    elsewhere = "give --plot PNG to draw it elsewhere"
    if not os.access(run_dir, os.W_OK | os.X_OK):
        print(f"note: no picture written: {run_dir} is not writable; {elsewhere}")
        return 0
    try:
        held = RunDirectory.reopen(run_dir)
    except RunDirError as error:
        print(f"note: no picture written into {run_dir}: {error}; a run directory belongs "
              f"to the process that holds it: {elsewhere}")
        return 0
    with held:
        with held.directory.open_atomic(RUN_PICTURE) as stream:
            figure.savefig(stream, format="png", dpi=100)
    print(f"wrote {run_dir / RUN_PICTURE}")
    return 0


# ---------------------------------------------------------------------------- entry point


def _check_output(path: Optional[str], flag: str) -> Optional[Path]:
    if path is None:
        return None
    output = Path(path)
    if not output.parent.is_dir():
        raise UsageError(f"{flag}: directory {output.parent} does not exist")
    if output.is_dir():
        raise UsageError(f"{flag}: {output} is a directory; name a file in it")
    return output


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        root = Path(args.runs_dir)
        if not root.is_dir():
            raise UsageError(f"{root} is not a directory")
        plot_path = _check_output(args.plot, "--plot")
        csv_path = _check_output(args.csv, "--csv")
        notes: list[str] = []
        runs = [run for run in (read_run(d, notes) for d in find_run_dirs(root, notes))
                if run]
        if not runs:
            raise UsageError(f"no runs (directories with config.json) under {root}")
    except UsageError as error:
        print(f"summarize.py: error: {error}", file=sys.stderr)
        return 2

    one_run = (root / "config.json").is_file()
    games = group_by_game(runs, notes)
    rows = {game: summarize_game(game, game_runs) for game, game_runs in games.items()}
    print(f"{counted(len(runs), 'run')} of {counted(len({run.game for run in runs}), 'game')} "
          f"under {root}"
          if not one_run else f"the run {root}")
    print(format_table(list(rows.values())))
    print()
    for line in aggregate_lines(list(rows.values())) + coverage_notes(runs, list(rows.values())):
        print(line)
    for note in notes:
        print(f"note: {note}")

    try:
        if csv_path is not None:
            write_csv(list(rows.values()), csv_path)
            print(f"wrote {csv_path}")
    except WriteFailed as error:
        print(f"summarize.py: error: {error}", file=sys.stderr)
        return 1
    if one_run:
        return draw_one_run(runs[0], plot_path)
    if plot_path is not None:
        try:
            drawn = plot_curves(games, rows, plot_path)
        except ImportError:
            print("summarize.py: error: --plot needs matplotlib "
                  "(pip install -r requirements-scripts.txt)", file=sys.stderr)
            return 1
        except WriteFailed as error:
            print(f"summarize.py: error: {error}", file=sys.stderr)
            return 1
        print(f"wrote {plot_path}" if drawn else f"no evaluations to plot; {plot_path} not written")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # the output went into a pipe that closed early (`| head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
