"""Checkpoints: written whole or not at all, and without pickles.

Layout inside a run directory:

    checkpoint/              the latest complete checkpoint
      manifest.json          counters, random generator states, running averages (JSON)
      network/ckpt.*         online and target networks and optimizer slots (TensorFlow)
      replay/<name>.npy      the replay memory's arrays (numpy, allow_pickle=False)

A new checkpoint is written to `checkpoint.tmp/`, synced, and swapped in by two renames
(`checkpoint` -> `checkpoint.old`, `checkpoint.tmp` -> `checkpoint`) before the old one is
removed, so a crash at any moment leaves one complete checkpoint: `latest_checkpoint` looks
for `checkpoint` first and then `checkpoint.old`. The manifest is written last, so a
directory without it is incomplete.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

CHECKPOINT = "checkpoint"
OLD_CHECKPOINT = "checkpoint.old"
NEW_CHECKPOINT = "checkpoint.tmp"
MANIFEST = "manifest.json"
NETWORK_PREFIX = Path("network") / "ckpt"
REPLAY = "replay"
FORMAT_VERSION = 1


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or read; the message says which and why."""


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint directory of a run, or None."""
    for name in (CHECKPOINT, OLD_CHECKPOINT):
        candidate = Path(run_dir) / name
        if (candidate / MANIFEST).is_file():
            return candidate
    return None


def save_checkpoint(run_dir: Path, manifest: Mapping[str, Any],
                    write_network: Callable[[str], Any] | None,
                    arrays: Mapping[str, np.ndarray] | None) -> Path:
    """Writes a checkpoint atomically and returns its directory.

    Args:
        manifest: JSON-able state (counters, generator states, averages).
        write_network: writes the networks to a path prefix (TensorFlow's checkpoint format).
        arrays: named arrays to store as .npy files (the replay memory), or None.

    Raises:
        CheckpointError: the write failed (e.g. a full disk); the previous checkpoint is intact.
    """
    run_dir = Path(run_dir)
    staging = run_dir / NEW_CHECKPOINT
    try:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        if write_network is not None:
            write_network(str(staging / NETWORK_PREFIX))
        if arrays is not None:
            _write_arrays(staging / REPLAY, arrays)
        _write_manifest(staging / MANIFEST, {"format_version": FORMAT_VERSION, **manifest})
        _fsync_tree(staging)
        _swap_in(run_dir, staging)
    except OSError as error:
        shutil.rmtree(staging, ignore_errors=True)
        raise CheckpointError(f"could not write a checkpoint in {run_dir}: {error}; the "
                              f"previous checkpoint is intact") from error
    return run_dir / CHECKPOINT


def _write_arrays(directory: Path, arrays: Mapping[str, np.ndarray]) -> None:
    directory.mkdir()
    for name, array in arrays.items():
        # np.save streams the array to the file: no second copy of a 7 GB memory.
        with open(directory / f"{name}.npy", "wb") as file:
            np.save(file, np.asarray(array), allow_pickle=False)


def _write_manifest(path: Path, manifest: Mapping[str, Any]) -> None:
    with open(path, "w") as file:
        json.dump(manifest, file, indent=2, sort_keys=True)
        file.flush()
        os.fsync(file.fileno())


def _fsync_tree(directory: Path) -> None:
    for root, _, files in os.walk(directory):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _swap_in(run_dir: Path, staging: Path) -> None:
    current, old = run_dir / CHECKPOINT, run_dir / OLD_CHECKPOINT
    if current.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(current, old)
    os.replace(staging, current)
    _fsync_dir(run_dir)
    shutil.rmtree(old, ignore_errors=True)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_manifest(checkpoint: Path) -> dict[str, Any]:
    with open(Path(checkpoint) / MANIFEST) as file:
        manifest = json.load(file)
    if manifest.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{checkpoint} has checkpoint format "
                              f"{manifest.get('format_version')}, expected {FORMAT_VERSION}")
    return manifest


def network_prefix(checkpoint: Path) -> str:
    return str(Path(checkpoint) / NETWORK_PREFIX)


def read_arrays(checkpoint: Path) -> dict[str, np.ndarray] | None:
    """The stored arrays, memory-mapped (copied only where they are loaded into), or None."""
    directory = Path(checkpoint) / REPLAY
    if not directory.is_dir():
        return None
    return {path.stem: np.load(path, mmap_mode="r", allow_pickle=False)
            for path in sorted(directory.glob("*.npy"))}


def generator_state(rng: np.random.Generator) -> dict[str, Any]:
    return rng.bit_generator.state


def restore_generator(rng: np.random.Generator, state: Mapping[str, Any]) -> None:
    rng.bit_generator.state = dict(state)
