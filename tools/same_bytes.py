#!/usr/bin/env python3
"""Checks that a change "keeps the bytes": fixed-seed tiny runs write the same content.

The script trains six tiny fixed-seed CPU runs with `--xla=off` (the fast trainer with
W = 4 as is, with `--updates-per-call=1`, with `--concurrent=false`; the serial trainer;
and each trainer stopped at 2,000 steps and resumed to 4,000) and prints one SHA-256
digest per run over what is deterministic in it:

- `episodes.csv` and `evaluations.csv` without their wall-clock `hours` column;
- every tensor of the checkpoint's TensorFlow network checkpoint (name, dtype, shape, bytes);
- every replay array `checkpoint/replay/*.npy` (name, dtype, shape, bytes).

Not hashed: manifest.json (its layout changes between versions; its counters are covered by
the CSVs and the arrays), config.json, summary.json and the TensorBoard events (timings).

Use it around a change:

    python tools/same_bytes.py --out /tmp/sb-before --verbose > before.txt   # old code
    python tools/same_bytes.py --out /tmp/sb-after --verbose --compare before.txt

The last line of the output is a JSON object {run: digest, "files": {run/file: digest}};
`--compare FILE` reads that line from a saved output, lists every run and file whose digest
differs (before the JSON line, so the new output can serve as a baseline too) and exits 1
if any does, 0 if all match.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import dataclasses
import hashlib
import io
import json
import os
import sys
import time
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # `python tools/same_bytes.py` puts tools/ first
    sys.path.insert(0, str(REPO))

from tools.entry_point_runs import launch  # noqa: E402

# The tiny run every variant starts from: long enough to learn (replay start 1,000), sync the
# target network, evaluate twice and checkpoint twice, short enough to take ~30 s on a CPU.
COMMON_FLAGS = ("--game=pong", "--seed=3", "--xla=off", "--replay-start=1000",
                "--replay-capacity=5000", "--target-update=1000", "--evaluate=2000",
                "--eval-episodes=2", "--eval-max-episode-steps=300",
                "--max-episode-steps=1000", "--checkpoint-every=2000")
FAST, SERIAL = "run_fast_dqn.py", "run_dqn.py"
STOP_AT, FINAL_STEPS = "--timesteps=2000", "--timesteps=4000"

CSV_FILES = ("episodes.csv", "evaluations.csv")
WALL_CLOCK_COLUMN = "hours"
NETWORK_PREFIX = Path("checkpoint") / "network" / "ckpt"
REPLAY_DIR = Path("checkpoint") / "replay"
# Tensors left out of the network digest. TensorFlow's serialized object graph
# (_CHECKPOINTABLE_OBJECT_GRAPH) is not: it repeated bit for bit across identical runs (at
# d7f640c and 04bdeda), and it records which object each tensor belongs to.
EXCLUDED_TENSORS: frozenset[str] = frozenset()

STDERR_TAIL_LINES = 30
RUN_HOURS = 2  # a tiny run takes about a minute; longer, it is stuck


@dataclasses.dataclass(frozen=True)
class Run:
    """One named run: its commands, executed in order into the same run directory."""

    name: str
    commands: tuple[tuple[str, ...], ...]


class RunFailed(RuntimeError):
    """A run's command exited non-zero; the message holds its stderr tail."""


def fresh_command(trainer: str, extra: Sequence[str] = (),
                  timesteps: str = FINAL_STEPS) -> tuple[str, ...]:
    """A new run's trainer argv (without the interpreter and --logdir)."""
    fast_only = ("--workers=4",) if trainer == FAST else ()
    return (trainer, *COMMON_FLAGS, timesteps, *fast_only, *extra)


def resumed_runs(trainer: str, name: str, extra: Sequence[str] = ()) -> Run:
    """A run stopped at 2,000 steps, then resumed to 4,000 with --resume."""
    first = fresh_command(trainer, extra, timesteps=STOP_AT)
    return Run(name, (first, (trainer, "--resume", "{logdir}", FINAL_STEPS)))


def all_runs(extra: Sequence[str] = ()) -> list[Run]:
    """The six runs, longest first so that two at a time finish close together; `extra`
    flags go to every new run (a setting that must not change the bytes, e.g.
    --replay-device=device, compared with a baseline made without it)."""
    extra = tuple(extra)
    return [
        resumed_runs(FAST, "fast-w4-resumed", extra),
        resumed_runs(SERIAL, "serial-resumed", extra),
        Run("serial", (fresh_command(SERIAL, extra),)),
        Run("fast-w4-concurrent-false", (fresh_command(FAST, ("--concurrent=false", *extra)),)),
        Run("fast-w4", (fresh_command(FAST, extra),)),
        Run("fast-w4-updates-per-call-1",
            (fresh_command(FAST, ("--updates-per-call=1", *extra)),)),
    ]


def command_argv(command: Sequence[str], logdir: Path) -> list[str]:
    """The trainer's argv of one command (after the interpreter), with --logdir for a new
    run."""
    if "{logdir}" in command:
        return [str(logdir) if arg == "{logdir}" else arg for arg in command]
    return [*command, f"--logdir={logdir}"]


def execute(run: Run, repo: Path, out: Path) -> float:
    """Executes a run's commands in order; returns its seconds. Raises RunFailed."""
    start = time.monotonic()
    for index, command in enumerate(run.commands):
        argv = command_argv(command, out / run.name)
        launched = launch(argv[0], argv[1:], out / f"{run.name}-{index}", repo=repo)
        code = launched.finish(timeout=RUN_HOURS * 3600).returncode
        if code != 0:
            raise RunFailed(f"{run.name}: `{' '.join(argv)}` exited {code}; stderr tail:\n"
                            + launched.stderr_tail(STDERR_TAIL_LINES))
    return time.monotonic() - start


def execute_all(runs: Sequence[Run], repo: Path, out: Path, jobs: int) -> None:
    """Executes the runs `jobs` at a time; exits 1 with the stderr tail of a failed run."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(execute, run, repo, out): run for run in runs}
        for future in concurrent.futures.as_completed(futures):
            try:
                seconds = future.result()
            except RunFailed as error:
                print(f"error: {error}", file=sys.stderr)
                for other in futures:
                    other.cancel()  # the ones not started yet; running ones finish
                sys.exit(1)
            print(f"# {futures[future].name} ran in {seconds:.0f} s", file=sys.stderr)


def csv_without_wall_clock(path: Path) -> bytes:
    """The CSV re-serialized without its `hours` column (wall-clock time differs per run)."""
    with open(path, newline="") as file:
        rows = list(csv.reader(file))
    keep = [i for i, column in enumerate(rows[0]) if column != WALL_CLOCK_COLUMN]
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerows([row[i] for i in keep] for row in rows)
    return text.getvalue().encode()


def update_with_array(digest: "hashlib._Hash", name: str, array: np.ndarray) -> None:
    """Feeds one named array (name, dtype, shape, bytes) into a digest, length-framed."""
    for part in (name.encode(), array.dtype.str.encode(), repr(array.shape).encode()):
        digest.update(len(part).to_bytes(8, "little") + part)
    data = np.ascontiguousarray(array).tobytes()
    digest.update(len(data).to_bytes(8, "little"))
    digest.update(data)


def as_array(value: object) -> np.ndarray:
    """A checkpoint tensor as an array; TensorFlow returns string scalars as bytes."""
    if isinstance(value, bytes):
        return np.frombuffer(value, dtype=np.uint8)
    return np.asarray(value)


def network_digest(prefix: Path) -> str:
    """The digest of every tensor in a TensorFlow checkpoint, in name order."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf  # late: only the hashing needs it, and it takes seconds to load

    reader = tf.train.load_checkpoint(str(prefix))
    dtypes = reader.get_variable_to_dtype_map()
    digest = hashlib.sha256()
    for name in sorted(reader.get_variable_to_shape_map()):
        if name in EXCLUDED_TENSORS:
            continue
        digest.update(dtypes[name].name.encode())
        update_with_array(digest, name, as_array(reader.get_tensor(name)))
    return digest.hexdigest()


def npy_digest(path: Path) -> str:
    """The digest of one .npy array (its file name, dtype, shape and bytes)."""
    digest = hashlib.sha256()
    update_with_array(digest, path.name, np.load(path, allow_pickle=False))
    return digest.hexdigest()


def file_digests(run_dir: Path) -> dict[str, str]:
    """The digest of each hashed file of a run, keyed by its path in the run directory."""
    digests = {name: hashlib.sha256(csv_without_wall_clock(run_dir / name)).hexdigest()
               for name in CSV_FILES}
    digests[NETWORK_PREFIX.as_posix()] = network_digest(run_dir / NETWORK_PREFIX)
    for path in sorted((run_dir / REPLAY_DIR).glob("*.npy")):
        digests[(REPLAY_DIR / path.name).as_posix()] = npy_digest(path)
    return digests


def run_digest(files: Mapping[str, str]) -> str:
    """One digest over a run's file digests, in file order."""
    lines = "".join(f"{name} {digest}\n" for name, digest in sorted(files.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def differences(old: Mapping[str, object], new: Mapping[str, object]) -> list[str]:
    """Every run and file whose digest differs or is present on one side only."""
    lines = []
    for key in sorted(set(old) | set(new)):
        if key == "files":
            continue
        if old.get(key) != new.get(key):
            lines.append(f"differs: {key}")
    old_files, new_files = old.get("files", {}), new.get("files", {})
    assert isinstance(old_files, dict) and isinstance(new_files, dict)
    for key in sorted(set(old_files) | set(new_files)):
        if key not in old_files or key not in new_files:
            side = "baseline" if key not in old_files else "this run"
            lines.append(f"differs: {key} (missing in {side})")
        elif old_files[key] != new_files[key]:
            lines.append(f"differs: {key}")
    return lines


def last_line_json(path: Path) -> dict[str, object]:
    """The JSON object on the last non-empty line of a saved output."""
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    if not lines:
        sys.exit(f"error: {path} is empty")
    return json.loads(lines[-1])


def check_out_dir(out: Path) -> None:
    """Refuses an --out directory that holds anything (runs must start from nothing)."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        sys.exit(f"error: --out {out} exists and is not an empty directory")
    out.mkdir(parents=True, exist_ok=True)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True,
                        help="directory for the runs (must not exist or be empty)")
    parser.add_argument("--repo", type=Path, default=REPO,
                        help="repository root whose trainers run (default: this script's)")
    parser.add_argument("--verbose", action="store_true", help="also print per-file digests")
    parser.add_argument("--compare", type=Path, metavar="FILE",
                        help="saved output to compare with (exit 1 on any difference)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (default: 2)")
    parser.add_argument("--flag", action="append", default=[], metavar="FLAG",
                        help="a trainer flag given to every new run (repeatable), e.g. "
                             "--flag=--replay-device=device")
    return parser.parse_args(argv)


def report(runs: Iterable[Run], out: Path, verbose: bool) -> dict[str, object]:
    """Prints each run's digest (and its files' with verbose); returns the JSON summary."""
    summary: dict[str, object] = {}
    files: dict[str, str] = {}
    for run in sorted(runs, key=lambda r: r.name):
        digests = file_digests(out / run.name)
        summary[run.name] = run_digest(digests)
        print(f"{run.name} {summary[run.name]}")
        for name, digest in digests.items():
            files[f"{run.name}/{name}"] = digest
            if verbose:
                print(f"{run.name}/{name} {digest}")
    summary["files"] = files
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    baseline = last_line_json(args.compare) if args.compare else None  # fail before running
    out = args.out.resolve()
    check_out_dir(out)
    runs = all_runs(args.flag)
    start = time.monotonic()
    execute_all(runs, args.repo.resolve(), out, args.jobs)
    print(f"# all runs in {time.monotonic() - start:.0f} s", file=sys.stderr)
    summary = report(runs, out, args.verbose)
    status = 0
    if baseline is not None:
        diffs = differences(baseline, summary)
        print("\n".join(diffs) if diffs else f"same bytes as {args.compare}")
        status = 1 if diffs else 0
    print(json.dumps(summary, sort_keys=True))
    return status


if __name__ == "__main__":
    sys.exit(main())
