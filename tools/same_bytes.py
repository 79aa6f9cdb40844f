#!/usr/bin/env python3
"""Checks that a change "keeps the bytes": fixed-seed tiny runs write the same content.

It trains six tiny fixed-seed CPU runs (`all_runs`: both trainers, stopped and resumed or
not, and the fast one with one update per call and without concurrency) and prints one
SHA-256 digest per run over what is deterministic in it: the CSVs without their wall-clock
`hours` column, every tensor of the checkpoint's networks and every replay array (not the
JSON files or TensorBoard's events, which hold timings). The last line is a JSON object
{run: digest, "files": {run/file: digest}}. Run from the repository root around a change:

    python tools/same_bytes.py --out /tmp/sb-before > before.txt   # the old code
    python tools/same_bytes.py --out /tmp/sb-after --compare before.txt
    python tools/same_bytes.py --digests RUN_DIR [RUN_DIR ...]  # runs made elsewhere (tests)
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import hashlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

REPO = Path(__file__).resolve().parent.parent

# The tiny run every variant starts from: long enough to learn (replay start 1,000), sync the
# target network, evaluate twice and checkpoint twice, short enough to take ~30 s on a CPU.
COMMON_FLAGS = ("--game=pong", "--seed=3", "--xla=off", "--replay-start=1000",
                "--replay-capacity=5000", "--target-update=1000", "--evaluate=2000",
                "--eval-episodes=2", "--eval-max-episode-steps=300",
                "--max-episode-steps=1000", "--checkpoint-every=2000")
FAST, SERIAL = "run_fast_dqn.py", "run_dqn.py"
STOP_AT, FINAL_STEPS = "--timesteps=2000", "--timesteps=4000"

CSV_FILES = ("episodes.csv", "evaluations.csv")
NETWORK_PREFIX = Path("checkpoint") / "network" / "ckpt"
REPLAY_DIR = Path("checkpoint") / "replay"
# On the CPU, where a seed fixes a run bit for bit; TensorFlow's logs kept short.
CPU_ONLY = {"CUDA_VISIBLE_DEVICES": "-1", "TF_CPP_MIN_LOG_LEVEL": "3"}
RUN_HOURS = 2  # a tiny run takes about a minute; longer, it is stuck


def all_runs(extra: Sequence[str] = ()) -> dict[str, list[list[str]]]:
    """The six runs: each one's trainer commands, run in order into its directory ("{logdir}"),
    longest first so that two at a time finish close together. `extra` flags go to every new
    run: a setting that must not change the bytes (e.g. --replay-device=device), compared
    with a baseline made without it."""
    def new(trainer: str, *flags: str, timesteps: str = FINAL_STEPS) -> list[str]:
        fast_only = ["--workers=4"] if trainer == FAST else []
        return [trainer, *COMMON_FLAGS, timesteps, *fast_only, *flags, *extra,
                "--logdir={logdir}"]

    def resumed(trainer: str) -> list[list[str]]:
        return [new(trainer, timesteps=STOP_AT), [trainer, "--resume", "{logdir}", FINAL_STEPS]]

    return {"fast-w4-resumed": resumed(FAST), "serial-resumed": resumed(SERIAL),
            "serial": [new(SERIAL)],
            "fast-w4-concurrent-false": [new(FAST, "--concurrent=false")], "fast-w4": [new(FAST)],
            "fast-w4-updates-per-call-1": [new(FAST, "--updates-per-call=1")]}


def execute_all(runs: dict[str, list[list[str]]], out: Path, jobs: int) -> None:
    """Executes the runs, `jobs` at a time, each one's commands in order on the CPU with their
    output in OUT/NAME-I.out and .err; exits 1 with the stderr tail of a failed command."""
    def execute(name: str) -> float:
        start = time.monotonic()
        for index, command in enumerate(runs[name]):
            argv = [arg.replace("{logdir}", str(out / name)) for arg in command]
            log = out / f"{name}-{index}"
            with open(f"{log}.out", "w") as stdout, open(f"{log}.err", "w") as stderr:
                try:
                    code = subprocess.run([sys.executable, *argv], cwd=REPO, stdout=stdout,
                                          stderr=stderr, stdin=subprocess.DEVNULL,
                                          env={**os.environ, **CPU_ONLY},
                                          timeout=RUN_HOURS * 3600).returncode
                except subprocess.TimeoutExpired:
                    code = f"nothing: killed after {RUN_HOURS} h"
            if code != 0:  # raised in a worker, it reaches the main thread through pool.map
                tail = "\n".join(Path(f"{log}.err").read_text().splitlines()[-30:])
                raise SystemExit(f"error: {name}: `{' '.join(argv)}` exited {code}; stderr "
                                 f"tail:\n{tail}")
        return time.monotonic() - start

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs)
    try:
        for name, seconds in zip(runs, pool.map(execute, runs)):
            print(f"# {name} ran in {seconds:.0f} s", file=sys.stderr)
    finally:
        pool.shutdown(cancel_futures=True)  # after a failure, the runs not started yet


def csv_without_wall_clock(path: Path) -> bytes:
    """The CSV re-serialized without its `hours` column (wall-clock time differs per run)."""
    with open(path, newline="") as file:
        rows = list(csv.reader(file))
    keep = [i for i, column in enumerate(rows[0]) if column != "hours"]
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows([row[i] for i in keep] for row in rows)
    return text.getvalue().encode()


def update_with_array(digest: "hashlib._Hash", name: str, array: np.ndarray) -> None:
    """Feeds one named array (name, dtype, shape, bytes) into a digest, length-framed."""
    for part in (name.encode(), array.dtype.str.encode(), repr(array.shape).encode()):
        digest.update(len(part).to_bytes(8, "little") + part)
    data = np.ascontiguousarray(array).tobytes()
    digest.update(len(data).to_bytes(8, "little"))
    digest.update(data)


def network_digest(prefix: Path) -> str:
    """The digest of every tensor in a TensorFlow checkpoint, in name order."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf  # late: only the hashing needs it, and it takes seconds to load

    reader = tf.train.load_checkpoint(str(prefix))
    dtypes = reader.get_variable_to_dtype_map()
    digest = hashlib.sha256()
    for name in sorted(reader.get_variable_to_shape_map()):
        digest.update(dtypes[name].name.encode())
        value = reader.get_tensor(name)  # a string scalar comes as bytes
        update_with_array(digest, name, np.frombuffer(value, dtype=np.uint8)
                          if isinstance(value, bytes) else np.asarray(value))
    return digest.hexdigest()


def file_digests(run_dir: Path) -> dict[str, str]:
    """The digest of each hashed file of a run, keyed by its path in the run directory;
    exits 2 with one line if the run lacks one."""
    for path in [*CSV_FILES, f"{NETWORK_PREFIX}.index"]:
        if not (run_dir / path).is_file():
            refuse(f"{run_dir} has no {path}: not a run with a checkpoint")
    digests = {name: hashlib.sha256(csv_without_wall_clock(run_dir / name)).hexdigest()
               for name in CSV_FILES}
    digests[NETWORK_PREFIX.as_posix()] = network_digest(run_dir / NETWORK_PREFIX)
    for path in sorted((run_dir / REPLAY_DIR).glob("*.npy")):
        digest = hashlib.sha256()  # over its file name, dtype, shape and bytes
        update_with_array(digest, path.name, np.load(path, allow_pickle=False))
        digests[(REPLAY_DIR / path.name).as_posix()] = digest.hexdigest()
    return digests


def differences(old: Mapping[str, object], new: Mapping[str, object]) -> list[str]:
    """Every run and file whose digest differs or is present on one side only."""
    def flat(summary: Mapping[str, object]) -> dict[str, object]:
        return {**{k: v for k, v in summary.items() if k != "files"}, **summary["files"]}

    old, new = flat(old), flat(new)
    return [f"differs: {key}" + ("" if key in old and key in new else
                                 f" (missing in {'this run' if key in old else 'baseline'})")
            for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key)]


def refuse(message: str) -> None:
    """Bad input: one line on stderr, exit status 2."""
    print(f"same_bytes.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def last_line_json(path: Path) -> dict[str, object]:
    """The JSON summary on the last non-empty line of a saved output."""
    try:
        summary = json.loads([line for line in path.read_text().splitlines() if line.strip()][-1])
        if not isinstance(summary["files"], dict):
            raise TypeError("its 'files' is not an object")
    except (OSError, IndexError, ValueError, TypeError, KeyError) as error:
        refuse(f"--compare {path}: its last line is not this script's JSON summary ({error!r})")
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path,
                        help="directory for the runs (must not exist or be empty)")
    parser.add_argument("--digests", type=Path, nargs="+", metavar="RUN_DIR",
                        help="train nothing: print the file digests of these runs")
    parser.add_argument("--compare", type=Path, metavar="FILE",
                        help="saved output to compare with (exit 1 on any difference)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (default: 2)")
    parser.add_argument("--flag", action="append", default=[], metavar="FLAG",
                        help="a trainer flag given to every new run (repeatable), e.g. "
                             "--flag=--replay-device=device")
    args = parser.parse_args(argv)
    if (args.out is None) == (args.digests is None):
        refuse("give --out (to train the runs) or --digests RUN_DIR... (not both)")
    if args.digests:
        print(json.dumps({str(run_dir): file_digests(run_dir) for run_dir in args.digests}))
        return 0
    baseline = last_line_json(args.compare) if args.compare else None  # fail before running
    out = args.out.resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        refuse(f"--out {out} exists and is not an empty directory")
    out.mkdir(parents=True, exist_ok=True)
    runs = all_runs(args.flag)
    start = time.monotonic()
    execute_all(runs, out, args.jobs)
    print(f"# all runs in {time.monotonic() - start:.0f} s", file=sys.stderr)
    summary: dict[str, object] = {"files": {}}
    for run in sorted(runs):  # each run's digest, over its files' digests in file order
        files = file_digests(out / run)
        lines = "".join(f"{name} {digest}\n" for name, digest in sorted(files.items()))
        summary[run] = hashlib.sha256(lines.encode()).hexdigest()
        print(f"{run} {summary[run]}")
        summary["files"].update((f"{run}/{name}", digest) for name, digest in files.items())
    diffs = differences(baseline, summary) if baseline is not None else []
    if baseline is not None:
        print("\n".join(diffs) if diffs else f"same bytes as {args.compare}")
    print(json.dumps(summary, sort_keys=True))
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
