"""The run directory: where it goes, who may write it, and how its files are written.

A run directory (docs/design.md §4) belongs to one process at a time. `RunDirectory.create`
(a new run) and `RunDirectory.reopen` (a resume) take an exclusive `fcntl.flock` on its
`.lock` file and hold it until the process ends, so a second trainer on the same directory
(a requeued job, a second `--resume`) is refused in one line that names the holder. The kernel
drops the lock when its holder dies, however it dies, so a killed run never leaves a lock that
a person must clear.

Every whole file is written atomically (temporary file in the same directory, fsync, rename):
readers see the old file or the whole new one. A write that fails (above all a full disk)
raises `WriteFailed`, which names the file; the run then stops with one line (see
`fast_dqn.launch`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import platform
import re
import secrets
import shutil
import socket
import stat
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import IO, Any, Iterator, Mapping, Sequence

CONFIG_FILE = "config.json"
EPISODES_FILE = "episodes.csv"
EVALUATIONS_FILE = "evaluations.csv"
SUMMARY_FILE = "summary.json"
LOCK_FILE = ".lock"
RUN_FILES = (CONFIG_FILE, EPISODES_FILE, EVALUATIONS_FILE, SUMMARY_FILE)  # "a run is here"

# Distribution names to try, first found wins (importlib.metadata never imports the package).
_DISTRIBUTIONS = {
    "numpy": ("numpy",),
    "tensorflow": ("tensorflow", "tensorflow-cpu", "tensorflow-macos", "tf-nightly"),
    "gymnasium": ("gymnasium",),
    "ale-py": ("ale-py",),
    "opencv": ("opencv-python", "opencv-python-headless", "opencv-contrib-python",
               "opencv-contrib-python-headless"),
}
NOT_INSTALLED = "not installed"

_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


class RunDirError(ValueError):
    """The run directory cannot be used: one line that says what to do (exit status 2)."""


class WriteFailed(RuntimeError):
    """A file of the run could not be written; the message names the file and the reason."""

    def __init__(self, path: Path, reason: str, disk_full: bool):
        self.path = Path(path)
        self.disk_full = disk_full
        hint = "; free some disk space" if disk_full else ""
        super().__init__(f"cannot write {self.path}: {reason}{hint}")


def write_failure(path: Path, error: BaseException) -> WriteFailed:
    """The `WriteFailed` for an OSError (or TensorFlow's I/O error, which says the same in
    a long message naming its own temporary files: the disk's reason is kept from it)."""
    code = getattr(error, "errno", None)
    text = str(getattr(error, "strerror", None) or getattr(error, "message", None) or error)
    for candidate in _DISK_FULL_ERRNOS:
        if code == candidate or os.strerror(candidate) in text:
            return WriteFailed(path, os.strerror(candidate), disk_full=True)
    reason = re.sub(r"\{\{[^}]*\}\}\s*", "", text).strip().splitlines()
    return WriteFailed(path, reason[0] if reason else repr(error), disk_full=False)


# --------------------------------------------------------------------------------------------
# Where a run goes


def default_run_dir(game: str, algo: str, seed: int, now: datetime | None = None) -> Path:
    """Returns `runs/<game>-<algo>-seed<seed>-<YYYYmmdd-HHMMSS>`.

    Characters that do not belong in a directory name (e.g. the `/` of `ALE/Pong-v5`) are
    replaced by `_`, so the run never lands in a nested directory by accident.
    """
    now = datetime.now() if now is None else now
    name = f"{game}-{algo}-seed{seed}-{now:%Y%m%d-%H%M%S}"
    return Path("runs") / re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def check_run_dir_writable(path: Path) -> None:
    """Checks that a new run can be written at `path`, without creating anything.

    Raises:
        RunDirError: (one line, saying what to do) if a component of `path` is a file, the
            nearest existing directory is not writable, or `path` already holds a run.
    """
    path = Path(os.path.abspath(path))
    status = _stat(path)
    if status is not None:
        _check_existing_run_dir(path, status)
        return
    ancestor = path.parent
    while (status := _stat(ancestor)) is None and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if status is None or not _is_dir(status):
        raise RunDirError(f"cannot create run directory {path}: {ancestor} is not a directory; "
                          "choose another --logdir")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise RunDirError(f"cannot create run directory {path}: {ancestor} is not writable; "
                          "choose another --logdir")


def _check_existing_run_dir(path: Path, status: os.stat_result) -> None:
    if not _is_dir(status):
        raise RunDirError(f"run directory {path} exists and is not a directory; "
                          "choose another --logdir")
    for name in RUN_FILES:
        if (path / name).exists():
            raise RunDirError(f"{path} already holds a run ({name}); continue it with "
                              f"--resume {path} or choose another --logdir")
    if not os.access(path, os.W_OK | os.X_OK):
        raise RunDirError(f"run directory {path} is not writable; choose another --logdir")


def _top_missing_dir(path: Path) -> Path | None:
    """The outermost directory that `path.mkdir(parents=True)` would create, or None."""
    path = Path(os.path.abspath(path))
    top = None
    while _stat(path) is None and path != path.parent:
        top, path = path, path.parent
    return top


def _stat(path: Path) -> os.stat_result | None:
    """The path's status, or None where nothing is there (a dangling link counts as a file)."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        return os.lstat(path) if os.path.islink(path) else None
    except NotADirectoryError:  # a parent is a file: the caller walks up to it
        return None
    except OSError as error:
        raise RunDirError(f"cannot use {path} for a run: {error.strerror}; "
                          "choose another --logdir") from None


def _is_dir(status: os.stat_result) -> bool:
    return stat.S_ISDIR(status.st_mode)


# --------------------------------------------------------------------------------------------
# One writer per run directory


class RunDirectory:
    """A run directory held by this process: its path, its lock and what it created.

    Use `create` for a new run and `reopen` for a resume; `release` (or the end of the
    process) lets the next writer in. Owned by the main thread.
    """

    def __init__(self, path: Path, lock_fd: int, *, new: bool, created: Path | None = None):
        self.path = path
        self.new = new  # a new run (False: a resumed one)
        self._lock_fd: int | None = lock_fd
        self._created = created  # the outermost directory this process created, if any

    @classmethod
    def create(cls, path: Path) -> "RunDirectory":
        """Creates (or takes an empty) directory for a new run and locks it.

        Raises:
            RunDirError: it cannot be created, another process holds it, or it holds a run.
        """
        path = Path(path)
        if not path.is_dir():
            check_run_dir_writable(path)  # creates nothing
        created = _top_missing_dir(path)
        try:
            path.mkdir(parents=True, exist_ok=True)
            lock_fd = _lock(path)  # before the check below: a live run is named as such
        except OSError as error:
            _remove_created(created)
            raise RunDirError(f"cannot create run directory {path}: {error.strerror or error}; "
                              "choose another --logdir") from None
        except RunDirError:
            _remove_created(created)
            raise
        run_dir = cls(path, lock_fd, new=True, created=created)
        try:
            _check_existing_run_dir(Path(os.path.abspath(path)), os.stat(path))
        except RunDirError:
            run_dir.release()
            raise
        return run_dir

    @classmethod
    def reopen(cls, path: Path) -> "RunDirectory":
        """Locks an existing run directory to continue it.

        Raises:
            RunDirError: it is not a directory, cannot be written, or another process holds it.
        """
        path = Path(path)
        if not path.is_dir():
            raise RunDirError(f"cannot resume: {path} is not a run directory; check the "
                              "--resume path")
        try:
            return cls(path, _lock(path), new=False)
        except OSError as error:
            raise RunDirError(f"cannot resume {path}: {error.strerror or error}; check the "
                              "--resume path") from None

    def discard(self) -> None:
        """Releases the directory and removes what a new run created: a run that fails to
        start leaves nothing behind (a resumed run's directory is left as it is)."""
        if self.new and self._created is not None:
            shutil.rmtree(self._created, ignore_errors=True)
        elif self.new:
            for name in (*RUN_FILES, LOCK_FILE):  # the directory existed, without a run
                with contextlib.suppress(OSError):
                    (self.path / name).unlink(missing_ok=True)
        self.release()

    def release(self) -> None:
        """Drops the lock; calling it again does nothing."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None

    def __enter__(self) -> "RunDirectory":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.release()


def _lock(path: Path) -> int:
    """Takes the run directory's lock and records the holder in it; returns the descriptor.

    Raises:
        RunDirError: another process holds the lock (named in the message).
        OSError: the lock file cannot be opened or written.
    """
    lock_path = path / LOCK_FILE
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_holder(fd)
        os.close(fd)
        raise RunDirError(f"{path} is in use by another process ({holder}); wait for it to "
                          "end or stop it, then try again") from None
    except OSError:
        os.close(fd)
        raise
    try:
        os.ftruncate(fd, 0)
        started = datetime.now().isoformat(timespec="seconds")
        os.pwrite(fd, f"host {socket.gethostname()} pid {os.getpid()} since {started}\n"
                  .encode(), 0)
    except OSError:  # a full disk: the lock is held all the same; the holder is unnamed
        pass
    return fd


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    return text or "host and pid unknown"


def _remove_created(created: Path | None) -> None:
    if created is not None:
        shutil.rmtree(created, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# Disk space


def free_bytes(path: Path) -> int | None:
    """Bytes free for this user on the file system of `path` (None if it cannot be told)."""
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def disk_space_warning(path: Path, needed: int, what: str) -> str | None:
    """A warning line when the disk of `path` has less than `needed` bytes free."""
    free = free_bytes(path)
    if free is None or free >= needed:
        return None
    return (f"warning: {free / 1e9:.1f} GB free on the disk of {path}, but {what} needs about "
            f"{needed / 1e9:.1f} GB")


# --------------------------------------------------------------------------------------------
# Atomic writes


@contextlib.contextmanager
def open_atomic(path: Path) -> Iterator[IO[bytes]]:
    """Opens a temporary file beside `path` for binary writing; renames it over `path` on success.

    On leaving the block the data is flushed and fsynced, then `os.replace`d over `path`, so
    readers see either the old file or the whole new one. If the block (or the rename) raises,
    the temporary file is removed and `path` is left as it was.

    Raises:
        WriteFailed: the file system refused the write (e.g. a full disk).
    """
    path = Path(path)
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # umask applies
        with os.fdopen(fd, "wb") as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
        fsync_dir(path.parent)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        if isinstance(error, OSError):
            raise write_failure(path, error) from error
        raise


def fsync_dir(directory: Path) -> None:
    """Makes a rename in `directory` durable (best effort: not every platform allows it)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Writes `data` to `path` atomically (see `open_atomic`)."""
    with open_atomic(path) as file:
        file.write(data)


def write_text_atomic(path: Path, text: str) -> None:
    """Writes `text` (UTF-8) to `path` atomically (see `open_atomic`)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path, obj: Any) -> None:
    """Writes `obj` as indented, key-sorted, strict JSON to `path` atomically.

    NaN and infinities (not valid JSON) are written as null; paths as strings; numpy scalars
    and arrays as their Python values.
    """
    text = json.dumps(_json_safe(obj), indent=2, sort_keys=True, allow_nan=False,
                      default=_json_default)
    write_text_atomic(path, text + "\n")


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(key): _json_safe(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(value) for value in obj]
    if hasattr(obj, "tolist") and callable(obj.tolist):  # numpy scalar or array
        return _json_safe(obj.tolist())
    return obj


def _json_default(obj: Any) -> Any:
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


# --------------------------------------------------------------------------------------------
# Library versions


def library_versions() -> dict[str, str]:
    """Versions of Python and the libraries a run depends on ("not installed" where missing).

    Read from the installed distributions' metadata, so nothing (TensorFlow above all) is
    imported just to ask.
    """
    versions = {"python": platform.python_version()}
    for name, distributions in _DISTRIBUTIONS.items():
        versions[name] = _first_version(distributions)
    return versions


def _first_version(distributions: Sequence[str]) -> str:
    for distribution in distributions:
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return NOT_INSTALLED
