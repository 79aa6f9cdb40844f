"""Checkpoints: written whole or not at all, without pickles, and proving themselves.

Layout inside a run directory:

    checkpoint/              the latest complete checkpoint
      manifest.json          the parts' states (counters, generators, averages) and, for every
                             other file, its size and CRC-32; and a CRC-32 of itself
      network/ckpt.*         online and target networks and optimizer slots (TensorFlow)
      replay/<name>.npy      the replay memory's arrays (numpy, allow_pickle=False), and
                             unstored_<column>.npy: transitions acted but held apart from
                             it (an epoch stopped between its last step and its last update)

A new checkpoint is written to `checkpoint.tmp/`, synced, and swapped in by two renames
(`checkpoint` -> `checkpoint.old`, `checkpoint.tmp` -> `checkpoint`) before the old one is
removed, so a crash at any moment leaves one complete checkpoint: `latest_checkpoint` looks
for `checkpoint` first and then `checkpoint.old`. The manifest is written last, so a
directory without it is incomplete.

`verify_checkpoint` reads every file back against the manifest before a resume changes
anything. CRC-32 (zlib) guards against damage, not against tampering: it ran at 6.4 GB/s on
the development machine against 1.9 GB/s for SHA-256, so checking a full 7 GB replay memory
costs about a second on top of reading it (docs/checkpoints.md).
"""

from __future__ import annotations

import json
import os
import shutil
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np

from fast_dqn.run_dir import fsync_dir, write_failure
from fast_dqn.transitions import TRANSITION_COLUMNS, Transitions

if TYPE_CHECKING:
    from fast_dqn.replay_memory import ReplayMemory

CHECKPOINT = "checkpoint"
OLD_CHECKPOINT = "checkpoint.old"
NEW_CHECKPOINT = "checkpoint.tmp"
MANIFEST = "manifest.json"
NETWORK_PREFIX = Path("network") / "ckpt"
REPLAY = "replay"
UNSTORED = "unstored_"  # the name prefix of the transitions held apart from the memory
FORMAT_VERSION = 2
_CHUNK = 8 * 1024 * 1024  # bytes read at a time when checksumming
# Bytes of streamed rows (a frame store on the device) copied to or from the host at a time:
# a checkpoint of a memory on the device never holds more of it in host memory than this.
DEVICE_CHUNK_BYTES = 64 * 1024 * 1024


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used; the message names the file and what is wrong."""


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint directory of a run, or None."""
    for name in (CHECKPOINT, OLD_CHECKPOINT):
        candidate = Path(run_dir) / name
        if (candidate / MANIFEST).is_file():
            return candidate
    return None


def save_checkpoint(run_dir: Path, state: Mapping[str, Any],
                    write_network: Callable[[str], Any] | None,
                    arrays: Mapping[str, np.ndarray] | None) -> Path:
    """Writes a checkpoint atomically and returns its directory.

    Args:
        state: JSON-able state of the run's parts (counters, generators, averages).
        write_network: writes the networks to a path prefix (TensorFlow's checkpoint format).
        arrays: named arrays to store as .npy files (the replay memory), or None; an
            entry may instead hand out its rows a chunk at a time (`chunks`, `shape`,
            `dtype`: `FrameStore.saved_rows`).

    Raises:
        WriteFailed: the write failed (e.g. a full disk), naming the file; the previous
            checkpoint is intact and no `checkpoint.tmp` is left behind.
        TypeError, ValueError: the state is not JSON-able or an array holds Python objects
            (a bug, not a condition of the disk); nothing is written.
    """
    run_dir = Path(run_dir)
    staging = run_dir / NEW_CHECKPOINT
    json.dumps(state)  # a state that is not JSON fails here, before the disk is touched
    try:
        shutil.rmtree(staging, ignore_errors=True)
        _make_dir(staging)
        files = {}
        if write_network is not None:
            files.update(_write_network(write_network, staging))
        if arrays is not None:
            files.update(_write_arrays(staging, arrays))
        _write_manifest(staging / MANIFEST, {**state, "replay_saved": arrays is not None,
                                             "files": files})
        _fsync_tree(staging)
        _swap_in(run_dir, staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return run_dir / CHECKPOINT


def _make_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True)
    except OSError as error:
        raise write_failure(path, error) from error


def _write_network(write_network: Callable[[str], Any], staging: Path) -> dict[str, dict]:
    prefix = staging / NETWORK_PREFIX
    try:
        write_network(str(prefix))
    except Exception as error:  # noqa: BLE001
        # TensorFlow reports I/O failures with its own errors (a full disk raises
        # tf.errors.ResourceExhaustedError), which are not OSError.
        raise write_failure(prefix.parent, error) from error
    return {_relative(path, staging): _file_entry(path)
            for path in sorted(prefix.parent.iterdir())}


def _write_arrays(staging: Path, arrays: Mapping[str, np.ndarray]) -> dict[str, dict]:
    directory = staging / REPLAY
    _make_dir(directory)
    files = {}
    for name, array in arrays.items():
        path = directory / f"{name}.npy"
        try:
            with open(path, "wb") as file:
                writer = _ChecksummingWriter(file)
                if hasattr(array, "chunks"):  # rows streamed from where they live
                    _save_in_chunks(writer, array)
                else:
                    # np.save streams the array through the checksum: no second copy.
                    np.save(writer, np.asarray(array), allow_pickle=False)
        except OSError as error:
            raise write_failure(path, error) from error
        files[_relative(path, staging)] = {"bytes": writer.size, "crc32": writer.crc32}
    return files


def _save_in_chunks(writer: "_ChecksummingWriter", rows: Any) -> None:
    """The bytes `np.save` writes for the array, from a source that hands out its rows a
    chunk at a time (`chunks(rows_per_chunk)`, `shape`, `dtype`)."""
    np.lib.format.write_array_header_1_0(writer, {
        "descr": np.lib.format.dtype_to_descr(rows.dtype), "fortran_order": False,
        "shape": tuple(rows.shape)})
    for chunk in rows.chunks(_rows_per_chunk(rows.shape, rows.dtype)):
        writer.write(memoryview(np.ascontiguousarray(chunk)).cast("B"))


def _rows_per_chunk(shape: tuple[int, ...], dtype: np.dtype) -> int:
    row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * np.dtype(dtype).itemsize
    return max(1, DEVICE_CHUNK_BYTES // max(row_bytes, 1))


class _ChecksummingWriter:
    """A write-only file object that passes the bytes on and keeps their CRC-32 and count."""

    def __init__(self, file):
        self._file = file
        self._crc = 0
        self.size = 0

    def write(self, data) -> int:
        self._crc = zlib.crc32(data, self._crc)
        self.size += memoryview(data).nbytes
        return self._file.write(data)

    @property
    def crc32(self) -> str:
        return f"{self._crc:08x}"


def _relative(path: Path, staging: Path) -> str:
    return path.relative_to(staging).as_posix()


def _file_entry(path: Path) -> dict[str, Any]:
    size, crc = _checksum(path)
    return {"bytes": size, "crc32": crc}


def _checksum(path: Path) -> tuple[int, str]:
    """Size and CRC-32 of a file, read in chunks."""
    crc, size = 0, 0
    with open(path, "rb") as file:
        while chunk := file.read(_CHUNK):
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
    return size, f"{crc:08x}"


def _write_manifest(path: Path, manifest: Mapping[str, Any]) -> None:
    body = {"format_version": FORMAT_VERSION, **manifest}
    text = json.dumps({**body, "checksum": _manifest_checksum(body)}, indent=2, sort_keys=True)
    try:
        with open(path, "w") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
    except OSError as error:
        raise write_failure(path, error) from error


def _manifest_checksum(body: Mapping[str, Any]) -> str:
    """CRC-32 of the manifest's content in one canonical spelling (keys sorted, compact)."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return f"{zlib.crc32(canonical.encode()):08x}"


def _fsync_tree(directory: Path) -> None:
    """Makes the files of `directory`, and their names, durable before the swap."""
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            try:
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as error:
                raise write_failure(Path(path), error) from error
        fsync_dir(Path(root))


def _swap_in(run_dir: Path, staging: Path) -> None:
    current, old = run_dir / CHECKPOINT, run_dir / OLD_CHECKPOINT
    try:
        if current.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(current, old)
        os.replace(staging, current)
    except OSError as error:
        raise write_failure(current, error) from error
    fsync_dir(run_dir)
    shutil.rmtree(old, ignore_errors=True)


def read_manifest(checkpoint: Path) -> dict[str, Any]:
    """The checkpoint's manifest, checked against its own checksum.

    Raises:
        CheckpointError: it cannot be read, is not JSON, has another format version, or its
            content does not match its checksum.
    """
    path = Path(checkpoint) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise CheckpointError(f"cannot read {path}: {error}") from None
    if not isinstance(manifest, dict):
        raise CheckpointError(f"{path} is not a checkpoint manifest")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(f"{path} has checkpoint format {version!r}, expected "
                              f"{FORMAT_VERSION} (written by another version of fast_dqn)")
    body = {key: value for key, value in manifest.items() if key != "checksum"}
    if manifest.get("checksum") != _manifest_checksum(body):
        raise CheckpointError(f"{path} is damaged: its content does not match its checksum")
    return manifest


def verify_checkpoint(checkpoint: Path, *, replay_optional: bool = False) -> dict[str, Any]:
    """Reads every file of a checkpoint back against its manifest; returns the manifest.

    Args:
        replay_optional: a replay memory the manifest lists may be missing as a whole (the
            user asked to refill it); a replay file that is there is still checked.
    Raises:
        CheckpointError: naming the first file that is missing, of another size, or damaged.
    """
    checkpoint = Path(checkpoint)
    manifest = read_manifest(checkpoint)
    files = manifest.get("files")
    if not isinstance(files, dict) or not any(name.startswith("network/") for name in files):
        raise CheckpointError(f"{checkpoint / MANIFEST} lists no network files")
    replay_missing = replay_optional and not (checkpoint / REPLAY).exists()
    for name, entry in sorted(files.items()):
        if replay_missing and name.startswith(f"{REPLAY}/"):
            continue
        _verify_file(checkpoint, name, entry)
    return manifest


def _verify_file(checkpoint: Path, name: str, entry: Any) -> None:
    path = checkpoint / name
    if not isinstance(entry, dict) or not isinstance(entry.get("bytes"), int):
        raise CheckpointError(f"{checkpoint / MANIFEST} has a bad entry for {name}")
    if checkpoint.resolve() not in path.resolve().parents:
        raise CheckpointError(f"{checkpoint / MANIFEST} names a file outside it: {name}")
    try:
        size = path.stat().st_size
    except OSError:
        raise CheckpointError(f"{path} is missing") from None
    if size != entry["bytes"]:
        raise CheckpointError(f"{path} holds {size} bytes; the manifest says {entry['bytes']}")
    try:
        _, crc = _checksum(path)
    except OSError as error:
        raise CheckpointError(f"cannot read {path}: {error.strerror or error}") from None
    if crc != entry.get("crc32"):
        raise CheckpointError(f"{path} is damaged: CRC-32 {crc}, the manifest says "
                              f"{entry.get('crc32')}")


def replay_in(checkpoint: Path, manifest: Mapping[str, Any]) -> bool:
    """Whether the checkpoint holds the replay memory its manifest says was saved."""
    return bool(manifest.get("replay_saved")) and (Path(checkpoint) / REPLAY).is_dir()


def network_prefix(checkpoint: Path) -> str:
    return str(Path(checkpoint) / NETWORK_PREFIX)


def read_replay_into(checkpoint: Path, memory: "ReplayMemory") -> bool:
    """Reads a checkpoint's replay memory into `memory`; False if the checkpoint has none.

    Run `verify_checkpoint` first: this reader checks shapes and sizes, not the bytes.

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
    for name, target in memory.restore_targets().items():
        if isinstance(target, np.ndarray):
            rows = _read_npy_into(directory / f"{name}.npy", target)
        else:
            rows = _read_npy_in_chunks(directory / f"{name}.npy", target)
        if rows != extent["size"]:  # the filled slots, or all of them once wrapped
            raise CheckpointError(f"{directory / name}.npy holds {rows} rows for a memory of "
                                  f"{extent['size']} transitions")
    try:
        memory.set_extent(cursor=extent["cursor"], size=extent["size"])
    except ValueError as error:
        raise CheckpointError(f"{directory}: {error}") from None
    return True


def unstored_arrays(transitions: Transitions) -> dict[str, np.ndarray]:
    """Transitions held apart from the replay memory, as arrays to save beside it."""
    return {UNSTORED + name: column for name, column in transitions._asdict().items()}


def read_unstored(checkpoint: Path, count: int) -> Transitions | None:
    """The `count` transitions a checkpoint holds apart from its replay memory (None for 0).

    Raises:
        CheckpointError: a file is missing or unreadable, or holds another shape or dtype.
    """
    if count == 0:
        return None
    columns = {}
    for name, (shape, dtype) in TRANSITION_COLUMNS.items():
        path = Path(checkpoint) / REPLAY / f"{UNSTORED}{name}.npy"
        try:
            column = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as error:
            raise CheckpointError(f"cannot read {path}: {error}") from None
        expected = (count, *shape)
        if column.shape != expected or column.dtype != np.dtype(dtype):
            raise CheckpointError(f"{path} holds {column.dtype} {column.shape}; the manifest "
                                  f"counts {np.dtype(dtype)} {expected}")
        columns[name] = column
    return Transitions(**columns)


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
            rows = _read_npy_header(file, path, target.shape, target.dtype)
            _read_exactly(file, path, target[:rows])
            return rows
    except (OSError, ValueError) as error:  # ValueError: not a .npy header
        raise CheckpointError(f"cannot read {path}: {error}") from error


def _read_npy_in_chunks(path: Path, sink: Any) -> int:
    """Reads a .npy file into the leading rows of a sink that takes them a chunk at a time
    (`put_rows(start, rows)`, `shape`, `dtype`: a frame store on the device); returns how
    many rows."""
    shape, dtype = tuple(sink.shape), np.dtype(sink.dtype)
    try:
        with open(path, "rb") as file:
            rows = _read_npy_header(file, path, shape, dtype)
            step = _rows_per_chunk(shape, dtype)
            buffer = np.empty((min(step, max(rows, 1)), *shape[1:]), dtype)
            for start in range(0, rows, step):
                chunk = buffer[:min(step, rows - start)]
                _read_exactly(file, path, chunk)
                sink.put_rows(start, chunk)
            return rows
    except (OSError, ValueError) as error:
        raise CheckpointError(f"cannot read {path}: {error}") from error


def _read_npy_header(file, path: Path, shape: tuple[int, ...], dtype: np.dtype) -> int:
    """Checks a .npy header against the array it must fill (a leading part of `shape` will
    do: a memory that had not wrapped saves its filled slots); returns its rows."""
    major, _ = np.lib.format.read_magic(file)
    read_header = (np.lib.format.read_array_header_1_0 if major == 1
                   else np.lib.format.read_array_header_2_0)
    saved_shape, fortran_order, saved_dtype = read_header(file)
    fits = (len(saved_shape) == len(shape) >= 1 and saved_shape[1:] == tuple(shape[1:])
            and saved_shape[0] <= shape[0])
    if not fits or saved_dtype != dtype or fortran_order:
        raise CheckpointError(f"{path} holds {saved_dtype} {saved_shape}; expected "
                              f"{np.dtype(dtype)} {tuple(shape)}")
    return saved_shape[0]


def _read_exactly(file, path: Path, target: np.ndarray) -> None:
    """Fills the contiguous array `target` from the file, or raises if the file ends."""
    view = memoryview(target.reshape(-1).view(np.uint8))
    while view.nbytes:
        count = file.readinto(view)
        if not count:
            raise CheckpointError(f"{path} ends early")
        view = view[count:]
