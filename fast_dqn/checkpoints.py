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

import errno
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np

if TYPE_CHECKING:
    from fast_dqn.replay_memory import ReplayMemory

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
        CheckpointError: the write failed (e.g. a full disk); the previous checkpoint is intact
            and no `checkpoint.tmp` is left behind.
        TypeError, ValueError: the manifest is not JSON-able or an array holds Python
            objects (a bug, not a condition of the disk); nothing is written.
    """
    run_dir = Path(run_dir)
    staging = run_dir / NEW_CHECKPOINT
    # Serialized before the disk is touched: a manifest that is not JSON fails here.
    manifest_text = json.dumps({"format_version": FORMAT_VERSION, **manifest}, indent=2,
                               sort_keys=True)
    try:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        if write_network is not None:
            _write_network(write_network, staging / NETWORK_PREFIX, run_dir)
        if arrays is not None:
            _write_arrays(staging / REPLAY, arrays)
        _write_manifest(staging / MANIFEST, manifest_text)
        _fsync_tree(staging)
        _swap_in(run_dir, staging)
    except BaseException as error:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(error, CheckpointError):
            raise
        if isinstance(error, OSError):
            raise CheckpointError(_failure_message(run_dir, error)) from error
        raise
    return run_dir / CHECKPOINT


def _failure_message(run_dir: Path, error: BaseException) -> str:
    full = getattr(error, "errno", None) == errno.ENOSPC or "No space left" in str(error)
    hint = "; free some disk space" if full else ""
    return (f"could not write a checkpoint in {run_dir}: {error}{hint}; the previous "
            f"checkpoint, if any, is intact")


def _write_network(write_network: Callable[[str], Any], prefix: Path, run_dir: Path) -> None:
    try:
        write_network(str(prefix))
    except Exception as error:  # noqa: BLE001
        # TensorFlow reports I/O failures with its own errors (a full disk raises
        # tf.errors.ResourceExhaustedError), which are not OSError.
        raise CheckpointError(_failure_message(run_dir, error)) from error


def _write_arrays(directory: Path, arrays: Mapping[str, np.ndarray]) -> None:
    directory.mkdir()
    for name, array in arrays.items():
        # np.save streams the array to the file: no second copy of a 7 GB memory.
        with open(directory / f"{name}.npy", "wb") as file:
            np.save(file, np.asarray(array), allow_pickle=False)


def _write_manifest(path: Path, text: str) -> None:
    with open(path, "w") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())


def _fsync_tree(directory: Path) -> None:
    """Makes the files of `directory`, and their names, durable before the swap."""
    for root, _, files in os.walk(directory):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(root))


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
    """The checkpoint's manifest.

    Raises:
        CheckpointError: it cannot be read, is not JSON, or has another format version.
    """
    path = Path(checkpoint) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise CheckpointError(f"cannot read the checkpoint manifest {path}: {error}") from None
    version = manifest.get("format_version") if isinstance(manifest, dict) else None
    if version != FORMAT_VERSION:
        raise CheckpointError(f"{checkpoint} has checkpoint format {version}, expected "
                              f"{FORMAT_VERSION}")
    return manifest


def network_prefix(checkpoint: Path) -> str:
    return str(Path(checkpoint) / NETWORK_PREFIX)


def read_replay_into(checkpoint: Path, memory: "ReplayMemory") -> bool:
    """Reads a checkpoint's replay memory into `memory`; False if the checkpoint has none.

    Each column's file is read straight into the memory's own array, so restoring a 7 GB
    memory needs no second copy and no mapped pages. A memory saved before it wrapped around
    holds only its filled slots, which fill the leading rows.

    Raises:
        CheckpointError: a file is missing, its shape or dtype differs, or the saved memory
            had another capacity.
    """
    directory = Path(checkpoint) / REPLAY
    if not directory.is_dir():
        return False
    extent = {name: _read_scalar(directory / f"{name}.npy")
              for name in ("capacity", "cursor", "size")}
    if extent["capacity"] != memory.capacity:
        raise CheckpointError(f"checkpoint replay capacity {extent['capacity']} differs from "
                              f"{memory.capacity}")
    for name, column in memory.store._asdict().items():
        rows = _read_npy_into(directory / f"{name}.npy", column)
        if rows != extent["size"]:  # the filled slots, or all of them once wrapped
            raise CheckpointError(f"{directory / name}.npy holds {rows} rows for a memory of "
                                  f"{extent['size']} transitions")
    try:
        memory.set_extent(cursor=extent["cursor"], size=extent["size"])
    except ValueError as error:
        raise CheckpointError(f"{directory}: {error}") from None
    return True


def _read_scalar(path: Path) -> int:
    try:
        return int(np.load(path, allow_pickle=False))
    except (OSError, ValueError, TypeError) as error:
        raise CheckpointError(f"cannot read {path}: {error}") from error


def _read_npy_into(path: Path, target: np.ndarray) -> int:
    """Reads a .npy file into the leading rows of `target`; returns how many rows."""
    if not (target.flags.c_contiguous and target.flags.writeable):
        # reshape(-1) would read into a copy and leave `target` as it was.
        raise ValueError(f"cannot read {path.name} into a non-contiguous or read-only array")
    try:
        with open(path, "rb") as file:
            major, _ = np.lib.format.read_magic(file)
            read_header = (np.lib.format.read_array_header_1_0 if major == 1
                           else np.lib.format.read_array_header_2_0)
            shape, fortran_order, dtype = read_header(file)
            # A leading part is fine: a memory that had not wrapped saves its filled slots.
            fits = (len(shape) == target.ndim >= 1 and shape[1:] == target.shape[1:]
                    and shape[0] <= target.shape[0])
            if not fits or dtype != target.dtype or fortran_order:
                raise CheckpointError(f"{path} holds {dtype} {shape}; expected "
                                      f"{target.dtype} {target.shape}")
            view = memoryview(target[:shape[0]].reshape(-1).view(np.uint8))
            while view.nbytes:
                count = file.readinto(view)
                if not count:
                    raise CheckpointError(f"{path} ends early")
                view = view[count:]
            return shape[0]
    except (OSError, ValueError) as error:  # ValueError: not a .npy header
        raise CheckpointError(f"cannot read {path}: {error}") from error
