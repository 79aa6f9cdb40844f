#!/usr/bin/env python3
"""Summarizes a sweep: one row per game, human-normalized scores, throughput, curves.

    python scripts/summarize.py RUNS_DIR [--plot curves.png] [--csv table.csv]

Every directory under RUNS_DIR that holds a `config.json` is a run (directories named
`*.incomplete-*`, which scripts/all_games.sh sets aside, are not). Runs are grouped by the
`game` of their config; for each game the table shows the seeds, the final evaluation
(the last row of each run's `evaluations.csv`) as mean +- std across seeds, the best
evaluation (the mean across seeds of each run's highest evaluation), the human-normalized
score of the final mean (Mnih et al. 2015; see fast_dqn.atari_data), and throughput from
each run's `summary.json`. Below the table: the median and mean human-normalized score over
the games that have one. Runs without evaluations are listed in a note and left out of the
scores, and so are evaluation rows holding inf or nan (the note says how many and on which
lines). matplotlib is needed for --plot only (requirements-scripts.txt).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
import sys
from pathlib import Path
from typing import Any, NamedTuple, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fast_dqn import atari_data  # noqa: E402  (the repository root is put on the path above)

FRAMES_PER_STEP = 4
TRAINER_NAMES = {"dqn": "run_dqn.py", "fast_dqn": "run_fast_dqn.py"}
SET_ASIDE_MARK = ".incomplete-"  # scripts/all_games.sh renames unresumable runs so


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
    variant: str = ""  # "" for Nature DQN; else e.g. "machado+double" (see variant_of)


class GameRow(NamedTuple):
    """One line of the table; None where a value is not known."""

    game: str
    seeds: tuple[int, ...]
    runs: int
    finished_runs: int
    evaluated_runs: int
    final_timestep: Optional[int]  # the smallest final evaluation step over the seeds
    final_mean: Optional[float]
    final_std: Optional[float]  # across seeds (sample std; None for one seed)
    best_mean: Optional[float]
    human_normalized: Optional[float]
    steps_per_second: Optional[float]
    updates_per_second: Optional[float]
    wall_hours: Optional[float]
    device: str


class UsageError(Exception):
    """Bad input: reported in one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = _Parser(prog="summarize.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs_dir", metavar="RUNS_DIR", help="directory holding run directories")
    parser.add_argument("--plot", metavar="PNG", help="write learning curves to this image")
    parser.add_argument("--csv", metavar="CSV", help="write the table to this CSV file")
    return parser.parse_args(argv)


def find_run_dirs(root: Path) -> list[Path]:
    """Directories under `root` (itself included) that hold a config.json, sorted."""
    found = []
    for directory, subdirectories, files in os.walk(root):
        if SET_ASIDE_MARK in os.path.basename(directory):
            subdirectories[:] = []
            continue
        if "config.json" in files:
            found.append(Path(directory))
            subdirectories[:] = []  # a run's own folders (checkpoint/) hold no runs
        else:
            subdirectories.sort()
    return sorted(found)


def read_evaluations(path: Path, left_out: Optional[list[str]] = None
                     ) -> tuple[Evaluation, ...]:
    """The rows of an evaluations.csv (empty if the file is missing). A row holding inf or nan
    is left out (a mean that is not a number has no place in a mean over seeds); where it
    was ("line 3 (step 2000)") is appended to `left_out`.

    Raises:
      ValueError: the file is there but its rows cannot be read.
    """
    if not path.is_file():
        return ()
    with path.open(newline="") as stream:
        reader = csv.DictReader(stream)
        rows = [(reader.line_num, row) for row in reader]
    evaluations = []
    try:
        for line, row in rows:
            values = [float(row[name]) for name in ("timestep", "mean", "std", "episodes", "hours")]
            if not all(math.isfinite(value) for value in values):
                if left_out is not None:
                    left_out.append(f"line {line} (step {row['timestep'].strip()})")
                continue
            timestep, mean, std, episodes, hours = values
            evaluations.append(Evaluation(int(timestep), mean, std, int(episodes), hours))
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{path}: unreadable row ({error})") from None
    return tuple(sorted(evaluations, key=lambda e: e.timestep))


def read_run(path: Path, notes: list[str]) -> Optional[Run]:
    """The run in `path`, or None (with a note) where its config cannot be read."""
    try:
        config = json.loads((path / "config.json").read_text())
        game, seed = str(config["game"]), int(config["seed"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        notes.append(f"left out {path}: config.json without a readable game and seed ({error})")
        return None
    left_out: list[str] = []
    try:
        evaluations = read_evaluations(path / "evaluations.csv", left_out)
    except ValueError as error:
        notes.append(f"{path}: evaluations left out: {error}")
        evaluations = ()
    if left_out:
        notes.append(f"{path / 'evaluations.csv'}: {len(left_out)} row(s) holding inf or nan "
                     f"left out of the scores: {', '.join(left_out)}")
    summary = None
    if (path / "summary.json").is_file():
        try:
            summary = json.loads((path / "summary.json").read_text())
        except (OSError, ValueError) as error:
            notes.append(f"{path}: summary.json unreadable ({error})")
    return Run(path, game, seed, evaluations, summary if isinstance(summary, dict) else None,
               str(config.get("algo", "")), variant_of(config))


def variant_of(config: dict[str, Any]) -> str:
    """How a run departs from Nature DQN: its protocol, Double DQN, dueling ("" for none)."""
    parts = []
    if config.get("protocol", "nature") != "nature":
        parts.append(str(config["protocol"]))
    parts += [name for name in ("double", "dueling") if config.get(name) is True]
    return "+".join(parts)


def _number(summary: Optional[dict[str, Any]], key: str) -> Optional[float]:
    value = summary.get(key) if summary else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


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
    return GameRow(
        game=game,
        seeds=tuple(sorted(run.seed for run in runs)),
        runs=len(runs),
        finished_runs=sum(1 for run in runs if run.summary and run.summary.get("finished") is True),
        evaluated_runs=len(evaluated),
        final_timestep=min((run.evaluations[-1].timestep for run in evaluated), default=None),
        final_mean=final_mean,
        final_std=final_std,
        best_mean=best_mean,
        human_normalized=normalized(runs[0].game, final_mean),
        steps_per_second=_mean([_number(run.summary, "steps_per_second") for run in runs]),
        updates_per_second=_mean([_number(run.summary, "updates_per_second") for run in runs]),
        wall_hours=None if wall is None else wall / 3600.0,
        device=",".join(devices),
    )


def group_by_game(runs: Sequence[Run], notes: list[str]) -> dict[str, list[Run]]:
    """Runs by game; by game and trainer ("pong (fast_dqn)") where both trainers ran, and by
    variant ("pong (machado+double)"), so that only seeds of one setting are averaged."""
    both_trainers = len({run.algo for run in runs}) > 1
    games: dict[str, list[Run]] = {}
    for run in runs:
        labels = ([run.algo] if both_trainers else []) + ([run.variant] if run.variant else [])
        key = f"{run.game} ({', '.join(labels)})" if labels else run.game
        games.setdefault(key, []).append(run)
    for game, game_runs in games.items():
        seeds = [run.seed for run in game_runs]
        for seed in sorted({s for s in seeds if seeds.count(s) > 1}):
            paths = ", ".join(str(r.path) for r in game_runs if r.seed == seed)
            notes.append(f"{game}: seed {seed} appears in more than one run ({paths})")
    return dict(sorted(games.items()))


def _fmt(value: Optional[float], digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _shorten(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def format_table(rows: Sequence[GameRow]) -> str:
    header = ("game", "seeds", "done", "final step", "final mean", "+- std", "best",
              "human %", "steps/s", "updates/s", "hours", "device")
    lines = []
    for row in rows:
        lines.append((
            row.game,
            ",".join(str(s) for s in row.seeds),
            f"{row.finished_runs}/{row.runs}",
            "-" if row.final_timestep is None else f"{row.final_timestep:,}",
            _fmt(row.final_mean),
            _fmt(row.final_std),
            _fmt(row.best_mean),
            _fmt(row.human_normalized),
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
    scores = [row.human_normalized for row in rows if row.human_normalized is not None]
    if not scores:
        return ["human-normalized score: no game has an evaluation and Nature reference scores"]
    return [f"human-normalized score over {len(scores)} game(s): "
            f"median {statistics.median(scores):,.1f}%, mean {statistics.fmean(scores):,.1f}%"]


def coverage_notes(runs: Sequence[Run], rows: Sequence[GameRow]) -> list[str]:
    notes = []
    unevaluated = [run for run in runs if not run.evaluations]
    if unevaluated:
        notes.append(f"{len(unevaluated)} run(s) without evaluations, left out of the scores:")
        notes.extend(f"  {run.game} seed {run.seed}: {run.path}" for run in unevaluated)
    unknown = [row.game for row in rows
               if row.final_mean is not None and row.human_normalized is None]
    if unknown:
        notes.append("no Nature reference scores, left out of the normalized score: "
                     + ", ".join(unknown))
    return notes


CSV_COLUMNS = ("game", "seeds", "runs", "finished_runs", "evaluated_runs", "final_timestep",
               "final_mean", "final_std", "best_mean", "human_normalized", "steps_per_second",
               "updates_per_second", "wall_hours", "device")


def write_csv(rows: Sequence[GameRow], path: Path) -> None:
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(CSV_COLUMNS)
        for row in rows:
            values = row._asdict()
            values["seeds"] = " ".join(str(s) for s in row.seeds)
            writer.writerow(["" if values[c] is None else values[c] for c in CSV_COLUMNS])
    temporary.replace(path)


def curve(runs: Sequence[Run]) -> tuple[list[float], list[float], list[float], list[float]]:
    """Frames (millions) and the mean, min and max over seeds at each evaluation step."""
    by_step: dict[int, list[float]] = {}
    for run in runs:
        for evaluation in run.evaluations:
            by_step.setdefault(evaluation.timestep, []).append(evaluation.mean)
    steps = sorted(by_step)
    frames = [step * FRAMES_PER_STEP / 1e6 for step in steps]
    return (frames, [statistics.fmean(by_step[s]) for s in steps],
            [min(by_step[s]) for s in steps], [max(by_step[s]) for s in steps])


def plot_curves(games: dict[str, list[Run]], rows: dict[str, GameRow], path: Path) -> bool:
    """One panel per game with evaluations: mean over seeds, min-max band, one line per
    trainer and variant where several ran, and the random agent's score dashed. False if
    none."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: dict[str, list[str]] = {}  # game -> its table rows (one per trainer, variant)
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
            if runs[0].variant:
                label += f" ({runs[0].variant})"
            axis.fill_between(frames, low, high, alpha=0.25, linewidth=0)
            axis.plot(frames, mean, linewidth=1.5, label=label,
                      marker="." if len(frames) < 20 else None)
        if game in atari_data.NATURE_GAMES:
            axis.axhline(atari_data.reference_scores(game).random, color="gray",
                         linestyle="--", linewidth=1, label="random agent")
        if len(keys) > 1:
            axis.legend(fontsize=7)
        details = [f"{rows[key].human_normalized:,.0f}%" for key in keys
                   if rows[key].human_normalized is not None]
        seeds = max(len(games[key]) for key in keys)
        details.append(f"{seeds} seed" + ("s" if seeds != 1 else ""))
        axis.set_title(f"{game} ({', '.join(details)})", fontsize=9)
        axis.tick_params(labelsize=7)
        axis.grid(alpha=0.3)
    for axis in axes[-1]:
        axis.set_xlabel("frames (millions)", fontsize=8)
    for axis in axes[:, 0]:
        axis.set_ylabel("evaluation return", fontsize=8)
    # Two short lines, so that the title fits a figure of one or two panels too.
    figure.suptitle("Evaluation return over frames\n(mean over seeds, band from min to max; "
                    "titles: human-normalized final score, seeds)", fontsize=9)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return True


def _check_output(path: Optional[str], flag: str) -> Optional[Path]:
    if path is None:
        return None
    output = Path(path)
    if not output.parent.is_dir():
        raise UsageError(f"{flag}: directory {output.parent} does not exist")
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
        runs = [run for run in (read_run(d, notes) for d in find_run_dirs(root)) if run]
        if not runs:
            raise UsageError(f"no runs (directories with config.json) under {root}")
    except UsageError as error:
        print(f"summarize.py: error: {error}", file=sys.stderr)
        return 2

    games = group_by_game(runs, notes)
    rows = {game: summarize_game(game, game_runs) for game, game_runs in games.items()}
    print(f"{len(runs)} run(s) of {len({run.game for run in runs})} game(s) under {root}")
    print(format_table(list(rows.values())))
    print()
    for line in aggregate_lines(list(rows.values())) + coverage_notes(runs, list(rows.values())):
        print(line)
    for note in notes:
        print(f"note: {note}")

    if csv_path is not None:
        write_csv(list(rows.values()), csv_path)
        print(f"wrote {csv_path}")
    if plot_path is not None:
        try:
            drawn = plot_curves(games, rows, plot_path)
        except ImportError:
            print("summarize.py: error: --plot needs matplotlib "
                  "(pip install -r requirements-scripts.txt)", file=sys.stderr)
            return 1
        print(f"wrote {plot_path}" if drawn else f"no evaluations to plot; {plot_path} not written")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # the output went into a pipe that closed early (`| head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
