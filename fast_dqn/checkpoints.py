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
(`checkpoint` -> `checkpoint.old`, `checkpoint.tmp` -> `checkpoint`), so a crash at any
moment leaves one complete checkpoint; the manifest is written last, so a directory without
it is incomplete. Everything is made, renamed, removed and read through the run directory
held open (`run_dir.OpenDirectory`), never through a link.

`verify_checkpoint` reads every file back against the manifest before a resume changes
anything. CRC-32 guards against damage, not tampering, at a fraction of a hash's cost on a
7 GB memory (docs/checkpoints.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import zlib
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping

import numpy as np

from fast_dqn.run_dir import (LinkFound, OpenDirectory, RunPath, held, is_temporary,
                              write_failure)
from fast_dqn.transitions import TRANSITION_COLUMNS, Transitions

if TYPE_CHECKING:
    from fast_dqn.replay_memory import ReplayMemory

CHECKPOINT = "checkpoint"
OLD_CHECKPOINT = "checkpoint.old"
NEW_CHECKPOINT = "checkpoint.tmp"
CHECKPOINT_NAMES = (CHECKPOINT, NEW_CHECKPOINT, OLD_CHECKPOINT)
MANIFEST = "manifest.json"
NETWORK = "network"
NETWORK_PREFIX = Path(NETWORK) / "ckpt"
PATH_MAX = os.pathconf("/", "PC_PATH_MAX")  # bytes of a path the system opens, with its NUL
# TensorFlow's files of that prefix in either checkpoint: the longest paths a run opens.
NETWORK_PATHS = tuple(f"{checkpoint}/{NETWORK_PREFIX.as_posix()}{suffix}"
                      for checkpoint in (CHECKPOINT, OLD_CHECKPOINT)
                      for suffix in (".index", ".data-00000-of-00001"))
REPLAY = "replay"
UNSTORED = "unstored_"  # the name prefix of the transitions held apart from the memory
# The replay files every saved memory has and the loader reads (`read_replay_into`).
REPLAY_EXTENT = ("capacity", "cursor", "size")
REPLAY_FILES = tuple(f"{REPLAY}/{name}.npy" for name in (*REPLAY_EXTENT, *TRANSITION_COLUMNS))
FORMAT_VERSION = 2
_CHUNK = 8 * 1024 * 1024  # bytes read at a time when checksumming
# Bytes of device frames copied to or from the host at a time: at most this in host memory.
DEVICE_CHUNK_BYTES = 64 * 1024 * 1024


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used; the message names the file and what is wrong."""


# -- the names of a run's checkpoints ---------------------------------------------------------


def latest_checkpoint(run_dir: RunPath) -> Path | None:
    """The newest complete checkpoint directory of a run, or None (links are not followed:
    a link where a checkpoint belongs is not one)."""
    try:
        with held(run_dir) as directory:
            for name in (CHECKPOINT, OLD_CHECKPOINT):
                if _is_complete(directory, name):
                    return directory.path / name
    except OSError:  # no run directory there
        pass
    return None


def _is_complete(directory: OpenDirectory, name: str) -> bool:
    """Whether `name` is a directory (not a link) holding a manifest (not a link)."""
    if not directory.is_directory(name):
        return False
    try:
        with directory.subdirectory(name) as checkpoint:
            status = checkpoint.lstat(MANIFEST)
    except OSError:
        return False
    return status is not None and stat.S_ISREG(status.st_mode)


def check_checkpoint_names(directory: OpenDirectory) -> None:
    """Refuses, when a run starts, anything but a directory where a checkpoint, its
    temporary or its old directory belongs (a planted link, a file), rather than failing at
    the first checkpoint, hours later (CheckpointError, one line)."""
    for name in CHECKPOINT_NAMES:
        status = directory.lstat(name)
        if status is None or stat.S_ISDIR(status.st_mode):
            continue
        kind = "a symbolic link" if stat.S_ISLNK(status.st_mode) else "not a directory"
        raise CheckpointError(f"{directory.path / name} is {kind}; a run keeps its "
                              "checkpoints in directories of its own and follows no link "
                              "there: remove it, then start the run again")


def clear_leftovers(directory: OpenDirectory) -> None:
    """Removes what a crash left (after `check_checkpoint_names`): a `checkpoint.tmp/`, a
    `checkpoint.old/` beside a complete checkpoint, and the files a killed process was
    writing (`run_dir.is_temporary`: the run's lock keeps out any live writer). Nothing is
    followed while removing.

    Raises:
        WriteFailed: one could not be removed.
    """
    names = [NEW_CHECKPOINT] + ([OLD_CHECKPOINT] if _is_complete(directory, CHECKPOINT) else [])
    names += [name for name in directory.names() if is_temporary(name)]
    for name in names:
        try:
            directory.remove(name)
        except OSError as error:
            raise directory.failure(name, error) from error


def path_too_long(run_dir: Path, names: Iterable[str] = NETWORK_PATHS) -> str | None:
    """Why the system would not open the longest of `names`, paths inside `run_dir`, by its
    path, or None: a path of PATH_MAX bytes or more fails (ENAMETOOLONG), which TensorFlow
    reports as "Failed to find any matching files" for files that are there."""
    name = max(names, key=lambda name: len(os.fsencode(name)))
    length = len(os.fsencode(str(Path(run_dir) / name)))
    if length < PATH_MAX:
        return None
    room = PATH_MAX - 1 - (length - len(os.fsencode(str(run_dir))))
    return (f"the path of {run_dir} is too long for a run: TensorFlow opens {name} in it by a "
            f"path of {length:,} bytes, and the system takes at most {PATH_MAX - 1:,} "
            f"(PATH_MAX), which leaves {room:,} bytes for the run directory's path")


# -- writing ---------------------------------------------------------------------------------


def save_checkpoint(run_dir: RunPath, state: Mapping[str, Any],
                    write_network: Callable[[str], Any] | None,
                    arrays: Mapping[str, np.ndarray] | None) -> Path:
    """Writes a checkpoint atomically and returns its directory.

    Args:
        run_dir: the run directory, held open (a run's) or by its path.
        write_network: writes the networks to a path prefix (TensorFlow's format).
        arrays: named arrays to store as .npy files (the replay memory), or None; an entry
            may hand out its rows a chunk at a time (`FrameStore.saved_rows`).

    Raises:
        WriteFailed: the write failed (e.g. a full disk), naming the file; the previous
            checkpoint is intact. `RunDirGone`: the run directory was deleted.
        TypeError, ValueError: the state is not JSON-able (a bug); nothing is written.
    """
    json.dumps(state)  # a state that is not JSON fails here, before the disk is touched
    if not isinstance(run_dir, OpenDirectory):  # by its path: held for this save only
        try:
            opened = OpenDirectory.at(Path(run_dir))  # which must be there: none is made
        except OSError as error:
            raise write_failure(Path(run_dir) / NEW_CHECKPOINT, error) from error
        with opened:
            return save_checkpoint(opened, state, write_network, arrays)
    directory = run_dir
    try:
        directory.check_present()
        with _new_staging(directory) as staging:
            files = {}
            if write_network is not None:
                files.update(_write_network(write_network, staging))
            if arrays is not None:
                files.update(_write_arrays(staging, arrays))
            _write_manifest(staging, {**state, "replay_saved": arrays is not None,
                                      "files": files})
            _fsync_tree(staging)
        _swap_in(directory)
    except BaseException:
        with contextlib.suppress(OSError, ValueError):
            directory.remove(NEW_CHECKPOINT)
        raise
    return directory.path / CHECKPOINT


def _new_staging(directory: OpenDirectory) -> OpenDirectory:
    """A fresh, empty `checkpoint.tmp/` (whatever was there removed, no link followed),
    held open."""
    try:
        directory.remove(NEW_CHECKPOINT)
        directory.mkdir(NEW_CHECKPOINT)  # never with parents: the run directory must be there
        return directory.subdirectory(NEW_CHECKPOINT)
    except OSError as error:
        raise directory.failure(NEW_CHECKPOINT, error) from error


def _write_network(write_network: Callable[[str], Any],
                   staging: OpenDirectory) -> dict[str, dict]:
    try:
        with staging.for_tensorflow(NETWORK_PREFIX.as_posix()) as prefix:
            write_network(prefix)
        with staging.subdirectory(NETWORK) as network:
            return {f"{NETWORK}/{name}": _file_entry(network, name) for name in network.names()}
    except Exception as error:  # noqa: BLE001
        # TensorFlow reports I/O failures with its own errors (a full disk raises
        # tf.errors.ResourceExhaustedError), which are not OSError.
        raise staging.failure(NETWORK, error) from error


def _write_arrays(staging: OpenDirectory, arrays: Mapping[str, np.ndarray]) -> dict[str, dict]:
    try:
        staging.mkdir(REPLAY)
        replay = staging.subdirectory(REPLAY)
    except OSError as error:
        raise staging.failure(REPLAY, error) from error
    files = {}
    with replay:
        for name, array in arrays.items():
            file_name = f"{name}.npy"
            try:
                fd = replay.open(file_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
                with open(fd, "wb") as file:
                    writer = _ChecksummingWriter(file)
                    if hasattr(array, "chunks"):  # rows streamed from where they live
                        _save_in_chunks(writer, array)
                    else:
                        # np.save streams the array through the checksum: no second copy.
                        np.save(writer, np.asarray(array), allow_pickle=False)
            except OSError as error:
                raise replay.failure(file_name, error) from error
            files[f"{REPLAY}/{file_name}"] = {"bytes": writer.size, "crc32": writer.crc32}
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


def _file_entry(directory: OpenDirectory, name: str) -> dict[str, Any]:
    with _open_file(directory, name) as file:
        size, crc = _checksum(file)
    return {"bytes": size, "crc32": crc}


def _open_file(directory: OpenDirectory, name: str):
    """The regular file `name` of `directory` opened for reading, no link followed.

    Raises:
        LinkFound: it is a link. OSError: it is missing, unreadable or not a regular file.
    """
    fd = directory.open(name, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{directory.path / name} is not a regular file")
    return os.fdopen(fd, "rb")


def _checksum(file) -> tuple[int, str]:
    """Size and CRC-32 of an open file's content, read in chunks."""
    crc, size = 0, 0
    while chunk := file.read(_CHUNK):
        crc = zlib.crc32(chunk, crc)
        size += len(chunk)
    return size, f"{crc:08x}"


def _write_manifest(staging: OpenDirectory, manifest: Mapping[str, Any]) -> None:
    body = {"format_version": FORMAT_VERSION, **manifest}
    text = json.dumps({**body, "checksum": _manifest_checksum(body)}, indent=2, sort_keys=True)
    try:
        fd = staging.open(MANIFEST, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        with open(fd, "w") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
    except OSError as error:
        raise staging.failure(MANIFEST, error) from error


def _manifest_checksum(body: Mapping[str, Any]) -> str:
    """CRC-32 of the manifest's content in one canonical spelling (keys sorted, compact)."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return f"{zlib.crc32(canonical.encode()):08x}"


def _fsync_tree(directory: OpenDirectory) -> None:
    """Makes the files of `directory`, and their names, durable before the swap."""
    for name in directory.names():
        try:
            if directory.is_directory(name):
                with directory.subdirectory(name) as subdirectory:
                    _fsync_tree(subdirectory)
                continue
            fd = directory.open(name, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as error:
            raise directory.failure(name, error) from error
    directory.sync()


def _swap_in(directory: OpenDirectory) -> None:
    """`checkpoint.tmp` becomes `checkpoint`; the checkpoint it replaces is `checkpoint.old`
    until the new one is in place. A `checkpoint` without a manifest (a damaged one) is
    removed instead, so that a complete `checkpoint.old` stays the latest until then."""
    try:
        if _is_complete(directory, CHECKPOINT):
            directory.remove(OLD_CHECKPOINT)
            directory.replace(CHECKPOINT, OLD_CHECKPOINT)
        else:
            directory.remove(CHECKPOINT)
        directory.replace(NEW_CHECKPOINT, CHECKPOINT)
    except OSError as error:
        raise directory.failure(CHECKPOINT, error) from error
    directory.sync()
    with contextlib.suppress(OSError):
        directory.remove(OLD_CHECKPOINT)


# -- reading ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _opened(checkpoint: Path, subdirectory: str | None = None) -> Iterator[OpenDirectory]:
    """The checkpoint's directory (or one inside it) held open, reached from the run
    directory's path without following a link.

    Raises:
        CheckpointError: it is missing, or a link.
    """
    checkpoint = Path(checkpoint)
    path = checkpoint / subdirectory if subdirectory else checkpoint
    try:
        with held(checkpoint.parent) as run_dir, run_dir.subdirectory(checkpoint.name) as top:
            if subdirectory is None:
                yield top
                return
            with top.subdirectory(subdirectory) as inner:
                yield inner
    except LinkFound:
        raise CheckpointError(f"{path} is a symbolic link; a checkpoint follows no link") \
            from None
    except OSError as error:
        raise CheckpointError(f"cannot read {path}: {error.strerror or error}") from None


def read_manifest(checkpoint: Path) -> dict[str, Any]:
    """The checkpoint's manifest, checked against its own checksum.

    Raises:
        CheckpointError: it cannot be read, is a link, is not JSON, has another format
            version, or its content does not match its checksum.
    """
    path = Path(checkpoint) / MANIFEST
    with _opened(checkpoint) as directory:
        try:
            with _open_file(directory, MANIFEST) as file:
                manifest = json.loads(file.read())
        except (OSError, ValueError) as error:
            reason = error.strerror if isinstance(error, LinkFound) else error
            raise CheckpointError(f"cannot read {path}: {reason}") from None
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
    The manifest must list every file the loader reads, and the checkpoint hold nothing
    else: no link, no unlisted file.

    Args:
        replay_optional: a replay memory the manifest lists may be missing as a whole (the
            user asked to refill it); a replay file that is there is still checked.
    Raises:
        CheckpointError: naming the first file that is missing, unlisted, a link, of another
            size, or damaged, or a network file whose path is too long to open.
    """
    checkpoint = Path(checkpoint)
    manifest = read_manifest(checkpoint)
    files = manifest.get("files")
    if not isinstance(files, dict) or not any(name.startswith(f"{NETWORK}/") for name in files):
        raise CheckpointError(f"{checkpoint / MANIFEST} lists no network files")
    too_long = path_too_long(checkpoint.parent, [f"{checkpoint.name}/{name}" for name in files
                                                 if name.startswith(f"{NETWORK}/")])
    if too_long is not None:
        raise CheckpointError(f"{too_long}: move the run directory to a shorter path")
    with _opened(checkpoint) as directory:
        replay_missing = replay_optional and directory.lstat(REPLAY) is None
        if manifest.get("replay_saved") and not replay_missing:
            for name in REPLAY_FILES:
                if name not in files:
                    raise CheckpointError(f"{checkpoint / MANIFEST} does not list {name}, "
                                          "which a resume reads")
        for name, entry in sorted(files.items()):
            if replay_missing and name.startswith(f"{REPLAY}/"):
                continue
            _verify_file(directory, name, entry)
        _refuse_unlisted(directory, files)
    return manifest


def _verify_file(directory: OpenDirectory, name: str, entry: Any) -> None:
    manifest = directory.path / MANIFEST
    if not isinstance(entry, dict) or not isinstance(entry.get("bytes"), int):
        raise CheckpointError(f"{manifest} has a bad entry for {name}")
    parts = PurePosixPath(name).parts
    if (not parts or PurePosixPath(name).is_absolute()
            or any(part in ("", ".", "..") for part in parts)):
        raise CheckpointError(f"{manifest} names a file outside it: {name}")
    path = directory.path / name
    try:
        with _open_beneath(directory, parts) as file:
            size = os.fstat(file.fileno()).st_size
            if size != entry["bytes"]:
                raise CheckpointError(f"{path} holds {size} bytes; the manifest says "
                                      f"{entry['bytes']}")
            _, crc = _checksum(file)
    except LinkFound:
        raise CheckpointError(f"{path} is a symbolic link; a checkpoint follows no link") \
            from None
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing") from None
    except OSError as error:
        raise CheckpointError(f"cannot read {path}: {error.strerror or error}") from None
    if crc != entry.get("crc32"):
        raise CheckpointError(f"{path} is damaged: CRC-32 {crc}, the manifest says "
                              f"{entry.get('crc32')}")


@contextlib.contextmanager
def _open_beneath(directory: OpenDirectory, parts: tuple[str, ...]):
    """The file at `parts` below `directory`, opened without following a link at any step."""
    with contextlib.ExitStack() as stack:
        for part in parts[:-1]:
            directory = stack.enter_context(directory.subdirectory(part))
        yield stack.enter_context(_open_file(directory, parts[-1]))


def _refuse_unlisted(directory: OpenDirectory, files: Mapping[str, Any],
                     prefix: str = "") -> None:
    """Refuses a link, or a file the manifest does not list, anywhere in the checkpoint."""
    for name in directory.names():
        relative = f"{prefix}{name}"
        status = directory.lstat(name)
        if status is None:
            continue
        if stat.S_ISLNK(status.st_mode):
            raise CheckpointError(f"{directory.path / name} is a symbolic link; a checkpoint "
                                  "follows no link")
        if stat.S_ISDIR(status.st_mode):
            with directory.subdirectory(name) as inner:
                _refuse_unlisted(inner, files, f"{relative}/")
        elif relative not in files and relative != MANIFEST:
            raise CheckpointError(f"{directory.path / name} is not in the manifest; a "
                                  "checkpoint holds only the files it lists")


def replay_in(checkpoint: Path, manifest: Mapping[str, Any]) -> bool:
    """Whether the checkpoint holds the replay memory its manifest says was saved."""
    if not manifest.get("replay_saved"):
        return False
    try:
        return stat.S_ISDIR(os.lstat(Path(checkpoint) / REPLAY).st_mode)
    except OSError:
        return False


def network_prefix(checkpoint: Path) -> str:
    return str(Path(checkpoint) / NETWORK_PREFIX)


def read_replay_into(checkpoint: Path, memory: "ReplayMemory") -> bool:
    """Reads a checkpoint's replay memory into `memory`; False if the checkpoint has none.

    Run `verify_checkpoint` first: this checks shapes and sizes, not bytes. Each file is
    read straight into the memory's own array, so a 7 GB memory needs no second copy.

    Raises:
        CheckpointError: a file is missing or a link, its shape or dtype differs, or the
            saved memory had another capacity.
    """
    try:
        os.lstat(Path(checkpoint) / REPLAY)
    except FileNotFoundError:
        return False
    with _opened(checkpoint, REPLAY) as replay:
        extent = {name: _read_scalar(replay, f"{name}.npy") for name in REPLAY_EXTENT}
        if extent["capacity"] != memory.capacity:
            raise CheckpointError(f"checkpoint replay capacity {extent['capacity']} differs "
                                  f"from {memory.capacity}")
        for name, target in memory.restore_targets().items():
            if isinstance(target, np.ndarray):
                rows = _read_npy_into(replay, f"{name}.npy", target)
            else:
                rows = _read_npy_in_chunks(replay, f"{name}.npy", target)
            if rows != extent["size"]:  # the filled slots, or all of them once wrapped
                raise CheckpointError(f"{replay.path / name}.npy holds {rows} rows for a "
                                      f"memory of {extent['size']} transitions")
        try:
            memory.set_extent(cursor=extent["cursor"], size=extent["size"])
        except ValueError as error:
            raise CheckpointError(f"{replay.path}: {error}") from None
    return True


def unstored_arrays(transitions: Transitions) -> dict[str, np.ndarray]:
    """Transitions held apart from the replay memory, as arrays to save beside it."""
    return {UNSTORED + name: column for name, column in transitions._asdict().items()}


def read_unstored(checkpoint: Path, count: int) -> Transitions | None:
    """The `count` transitions a checkpoint holds apart from its replay memory (None for 0).

    Raises:
        CheckpointError: a file is missing, a link or unreadable, or holds another shape or
            dtype.
    """
    if count == 0:
        return None
    columns = {}
    with _opened(checkpoint, REPLAY) as replay:
        for name, (shape, dtype) in TRANSITION_COLUMNS.items():
            file_name = f"{UNSTORED}{name}.npy"
            path = replay.path / file_name
            with _reading(path):
                with _open_file(replay, file_name) as file:
                    column = np.load(file, allow_pickle=False)
            expected = (count, *shape)
            if column.shape != expected or column.dtype != np.dtype(dtype):
                raise CheckpointError(f"{path} holds {column.dtype} {column.shape}; the "
                                      f"manifest counts {np.dtype(dtype)} {expected}")
            columns[name] = column
    return Transitions(**columns)


@contextlib.contextmanager
def _reading(path: Path) -> Iterator[None]:
    """Turns the errors of reading `path` into one CheckpointError naming it."""
    try:
        yield
    except LinkFound:
        raise CheckpointError(f"{path} is a symbolic link; a checkpoint follows no link") \
            from None
    except (OSError, ValueError, TypeError) as error:  # ValueError: not a .npy file
        raise CheckpointError(f"cannot read {path}: {error}") from error


def _read_scalar(replay: OpenDirectory, file_name: str) -> int:
    with _reading(replay.path / file_name):
        with _open_file(replay, file_name) as file:
            return int(np.load(file, allow_pickle=False))


def _read_npy_into(replay: OpenDirectory, file_name: str, target: np.ndarray) -> int:
    """Reads a .npy file into the leading rows of `target`; returns how many rows."""
    path = replay.path / file_name
    if not (target.flags.c_contiguous and target.flags.writeable):
        # reshape(-1) would read into a copy and leave `target` as it was.
        raise ValueError(f"cannot read {file_name} into a non-contiguous or read-only array")
    with _reading(path):
        with _open_file(replay, file_name) as file:
            rows = _read_npy_header(file, path, target.shape, target.dtype)
            _read_exactly(file, path, target[:rows])
            return rows


def _read_npy_in_chunks(replay: OpenDirectory, file_name: str, sink: Any) -> int:
    """Reads a .npy file into the leading rows of a sink that takes them a chunk at a time
    (`put_rows(start, rows)`, `shape`, `dtype`: a frame store on the device); returns how
    many rows."""
    path = replay.path / file_name
    shape, dtype = tuple(sink.shape), np.dtype(sink.dtype)
    with _reading(path):
        with _open_file(replay, file_name) as file:
            rows = _read_npy_header(file, path, shape, dtype)
            step = _rows_per_chunk(shape, dtype)
            buffer = np.empty((min(step, max(rows, 1)), *shape[1:]), dtype)
            for start in range(0, rows, step):
                chunk = buffer[:min(step, rows - start)]
                _read_exactly(file, path, chunk)
                sink.put_rows(start, chunk)
            return rows


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
