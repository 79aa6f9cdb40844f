"""The run directory: where it goes, who may write it, and how its files are written.

A run directory (docs/design.md §4) belongs to one process at a time: `RunDirectory` takes
an exclusive `fcntl.flock` on its `.lock`, so a second trainer there is refused in one line
naming the holder, and the kernel drops the lock however its holder dies. The run writes
through the directory it locked (`OpenDirectory`, a descriptor), never through a link, so a
run whose directory is renamed goes on in the new place and one whose directory is deleted
stops (`RunDirGone`) without recreating it. Whole files are written atomically (temporary
file, fsync, rename); a failed write raises `WriteFailed`, naming the file.
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
import time
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import IO, Any, Iterator, Mapping, Sequence, Union

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
DELETION_SECONDS = 2.0  # how long a vanished file's directory is watched for its deletion


def _not_found(error: BaseException) -> bool:
    """A file or directory the write needed is not there (TensorFlow says NotFound)."""
    return (getattr(error, "errno", None) == errno.ENOENT
            or type(error).__name__ == "NotFoundError")


class RunDirError(ValueError):
    """The run directory cannot be used: one line that says what to do (exit status 2)."""


class WriteFailed(RuntimeError):
    """A file of the run could not be written; the message names the file and the reason."""

    def __init__(self, path: Path, reason: str, disk_full: bool):
        self.path = Path(path)
        self.disk_full = disk_full
        hint = "; free some disk space" if disk_full else ""
        super().__init__(f"cannot write {self.path}: {reason}{hint}")


class RunDirGone(WriteFailed):
    """The run's directory was deleted while the run ran: nothing more can be written."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.disk_full = False
        RuntimeError.__init__(self, f"the run directory {self.path} was deleted while the run "
                                    "ran; the run stops (nothing is written in its place)")


class RunDirMoved(WriteFailed):
    """The run's directory was moved where TensorFlow, which writes by path, cannot follow it
    (only where the system offers no path through a descriptor: see `OpenDirectory`)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.disk_full = False
        RuntimeError.__init__(self, f"the run directory {self.path} was moved while the run "
                                    "ran; the run stops: resume it from its new place")


class LinkFound(OSError):
    """A name inside a run directory is a symbolic link, which a run never follows."""

    def __init__(self, path: Path):
        super().__init__(errno.ELOOP, "it is a symbolic link, and a run follows no link in "
                                      "its directory", str(path))


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
    """`runs/<game>-<algo>-seed<seed>-<YYYYmmdd-HHMMSS>`, with `_` for characters that do
    not belong in a directory name (the `/` of `ALE/Pong-v5` would nest it)."""
    now = datetime.now() if now is None else now
    name = f"{game}-{algo}-seed{seed}-{now:%Y%m%d-%H%M%S}"
    return Path("runs") / re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def check_run_dir_writable(path: Path) -> None:
    """Checks that a new run can be written at `path`, without creating anything.

    Raises:
        RunDirError: `path` lies inside another run's directory, a component is a file, the
            nearest existing directory is not writable, or it holds a run or any other file.
    """
    path = Path(os.path.abspath(path))
    _check_outside_runs(path)
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


def _run_file_in(path: Path) -> str | None:
    """The first of RUN_FILES in `path` (a link counts: it is never followed), or None."""
    return next((name for name in RUN_FILES if os.path.lexists(path / name)), None)


def is_run_dir(path: Path) -> bool:
    """Whether `path` holds a run: its lock and one of its files (not a config.json alone)."""
    return os.path.lexists(path / LOCK_FILE) and _run_file_in(path) is not None


def _check_outside_runs(path: Path) -> None:
    """Refuses a path inside another run's directory (`is_run_dir`), wherever its links lead:
    a run there would add files to that run's checkpoint (which a resume of it then refuses)
    or mix its own with that run's."""
    for parent in Path(os.path.realpath(path)).parents:
        if is_run_dir(parent):
            raise RunDirError(f"{path} is inside the run directory {parent} (it holds "
                              f"{LOCK_FILE} and {_run_file_in(parent)}); a run directory holds "
                              "one run: choose a --logdir outside it")


def _check_existing_run_dir(path: Path, status: os.stat_result) -> None:
    """Refuses an existing `path` that is not a directory, holds a run or any other file (a
    run removes and renames its own names there) but a lone `.lock` (a start cut short), or
    cannot be written."""
    if not _is_dir(status):
        raise RunDirError(f"run directory {path} exists and is not a directory; "
                          "choose another --logdir")
    name = _run_file_in(path)
    if name is not None:
        raise RunDirError(f"{path} already holds a run ({name}); continue it with "
                          f"--resume {path} or choose another --logdir")
    try:
        others = sorted(set(os.listdir(path)) - {LOCK_FILE})
    except OSError as error:
        raise RunDirError(f"cannot use {path} for a run: {error.strerror}; "
                          "choose another --logdir") from None
    if others:
        more = f" and {len(others) - 1} more" if len(others) > 1 else ""
        raise RunDirError(f"{path} is not empty (it holds {others[0]}{more}); a new run takes "
                          "a new or empty directory: choose another --logdir")
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
# A directory reached through a descriptor

_NO_LINKS = os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_PROC_FD = Path("/proc/self/fd")  # Linux: a path through a descriptor, wherever it points


class OpenDirectory:
    """A directory held open by a descriptor: names inside it are opened, made, renamed and
    removed relative to it (the `dir_fd` forms of the `os` calls), wherever it is moved, and
    no link inside it is followed. TensorFlow, which opens files by name, gets
    `/proc/self/fd/N/...` (`for_tensorflow`). `path` is the path it was opened by, for
    messages; `where()` is where it is now.
    """

    def __init__(self, fd: int, path: Path, parent: "OpenDirectory | None" = None):
        self._fd: int | None = fd
        self.path = Path(path)
        self._parent = parent

    @classmethod
    def at(cls, path: Path) -> "OpenDirectory":
        """Opens the directory at `path` (links in `path` itself are the caller's to choose).

        Raises:
            OSError: there is no directory there.
        """
        return cls(os.open(path, _OPEN_DIRECTORY), Path(path))

    @property
    def fd(self) -> int:
        if self._fd is None:
            raise ValueError(f"{self.path} was closed")
        return self._fd

    def close(self) -> None:
        """Closes the descriptor; calling it again does nothing."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> "OpenDirectory":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    # -- what is in it

    def lstat(self, name: str) -> os.stat_result | None:
        """The status of `name` itself (a link is not followed), or None if nothing is there."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def is_directory(self, name: str) -> bool:
        """Whether `name` is a directory (not a link to one)."""
        status = self.lstat(name)
        return status is not None and stat.S_ISDIR(status.st_mode)

    def names(self) -> list[str]:
        return sorted(os.listdir(self.fd))

    def open(self, name: str, flags: int, mode: int = 0o666) -> int:
        """`os.open` of `name` in this directory without following a link.

        Raises:
            LinkFound: `name` is a symbolic link.
            OSError: as `os.open`.
        """
        try:
            return os.open(name, flags | _NO_LINKS, mode, dir_fd=self.fd)
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                status = self.lstat(name)
                if status is not None and stat.S_ISLNK(status.st_mode):
                    raise LinkFound(self.path / name) from None
            raise

    def read_bytes(self, name: str) -> bytes:
        """The bytes of the regular file `name` (not through a link).

        Raises:
            LinkFound: it is a link. OSError: it is missing, or not a regular file.
        """
        with os.fdopen(self.open(name, os.O_RDONLY | os.O_NONBLOCK), "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                raise OSError(errno.EINVAL, "it is not a regular file", str(self.path / name))
            return file.read()

    def subdirectory(self, name: str) -> "OpenDirectory":
        """Opens the directory `name` inside this one (not through a link)."""
        return OpenDirectory(self.open(name, _OPEN_DIRECTORY), self.path / name, parent=self)

    def mkdir(self, name: str) -> None:
        os.mkdir(name, dir_fd=self.fd)

    def replace(self, source: str, target: str) -> None:
        """Renames `source` to `target` in this directory (a link is renamed, not followed)."""
        os.replace(source, target, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def remove(self, name: str) -> None:
        """Removes `name`, a whole tree if it is a directory, without following any link (a
        link is removed itself, its target left alone); nothing there is fine."""
        status = self.lstat(name)
        if status is None:
            return
        if stat.S_ISDIR(status.st_mode):
            shutil.rmtree(name, dir_fd=self.fd)  # fd-based: follows no link inside
        else:
            os.unlink(name, dir_fd=self.fd)

    def sync(self) -> None:
        """Makes the renames in this directory durable (best effort)."""
        with contextlib.suppress(OSError):
            os.fsync(self.fd)

    # -- where it is

    def gone(self) -> bool:
        """Whether this directory, or one it was opened from, has been deleted."""
        directory: OpenDirectory | None = self
        while directory is not None:
            with contextlib.suppress(OSError):
                if directory._fd is not None and os.fstat(directory._fd).st_nlink == 0:
                    return True
            directory = directory._parent
        return False

    def _gone_within(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(0.05)
            if self.gone():
                return True
        return False

    def top(self) -> "OpenDirectory":
        return self if self._parent is None else self._parent.top()

    def check_present(self) -> None:
        """Raises `RunDirGone` if the run's directory has been deleted."""
        if self.gone():
            raise RunDirGone(self.top().path)

    def failure(self, name: str, error: BaseException) -> WriteFailed:
        """The one-line error for a failed write of `name` in this directory. A file of the
        run that vanished under the write is a deletion of the run directory under way
        (`rm -r` removes the files first): it is given a moment to show as one."""
        if self.gone() or (_not_found(error) and self._gone_within(DELETION_SECONDS)):
            return RunDirGone(self.top().path)
        if isinstance(error, WriteFailed):
            return error
        return write_failure(self.path / name, error)

    def in_place(self) -> bool:
        """Whether `path` still names this directory."""
        try:
            return os.path.samestat(os.stat(self.path), os.fstat(self.fd))
        except OSError:
            return False

    def where(self) -> Path:
        """Where the directory is now: `path`, unless it was moved since it was opened."""
        if self._fd is None or self.in_place():
            return self.path
        with contextlib.suppress(OSError):
            now = os.readlink(_PROC_FD / str(self._fd))
            if now.startswith("/") and not now.endswith(" (deleted)"):
                return Path(now)
        return self.path

    def _path_through_fd(self) -> str | None:
        through = _PROC_FD / str(self.fd)
        return str(through) if os.path.isdir(through) else None

    @contextlib.contextmanager
    def for_tensorflow(self, name: str = "") -> Iterator[str]:
        """A path by which TensorFlow reaches `name` in this directory: through the
        descriptor where the system allows, else its path, checked to name this directory
        before and after the block (`RunDirGone`, `RunDirMoved` if not)."""
        through = self._path_through_fd()
        if through is not None:
            yield os.path.join(through, name) if name else through
            return
        self._check_in_place()
        yield str(self.path / name) if name else str(self.path)
        self._check_in_place()

    def _check_in_place(self) -> None:
        self.check_present()
        if not self.in_place():
            raise RunDirMoved(self.top().path)

    # -- whole files, atomically

    @contextlib.contextmanager
    def open_atomic(self, name: str) -> Iterator[IO[bytes]]:
        """`open_atomic` for `name` in this directory (`WriteFailed`, `RunDirGone`)."""
        temp = temporary_name(name)
        try:
            self.check_present()
            fd = self.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # umask applies
            with os.fdopen(fd, "wb") as file:
                yield file
                file.flush()
                os.fsync(file.fileno())
            self.replace(temp, name)  # a link at `name` is replaced, not followed
            self.sync()
        except BaseException as error:
            with contextlib.suppress(OSError, ValueError):
                os.unlink(temp, dir_fd=self.fd)
            if isinstance(error, OSError):
                raise self.failure(name, error) from error
            raise

    def write_bytes_atomic(self, name: str, data: bytes) -> None:
        with self.open_atomic(name) as file:
            file.write(data)


RunPath = Union[Path, OpenDirectory]  # a run directory: by its path, or held open


@contextlib.contextmanager
def held(directory: RunPath) -> Iterator[OpenDirectory]:
    """The directory as an `OpenDirectory`: itself, or opened at its path for the block."""
    if isinstance(directory, OpenDirectory):
        yield directory
        return
    with OpenDirectory.at(Path(directory)) as opened:
        yield opened


# --------------------------------------------------------------------------------------------
# One writer per run directory


class RunDirectory:
    """A run directory held by this process (`create` for a new run, `reopen` for a resume):
    its lock, what it created, and `directory`, held open, through which its files are
    written. Owned by the main thread."""

    def __init__(self, directory: OpenDirectory, lock_fd: int, *, new: bool,
                 created: Path | None = None):
        self.path = directory.path
        self.directory = directory
        self.new = new  # a new run (False: a resumed one)
        self._lock_fd: int | None = lock_fd
        self._created = created  # the outermost directory this process created, if any

    @classmethod
    def create(cls, path: Path) -> "RunDirectory":
        """Creates (or takes an empty) directory for a new run and locks it.

        Raises:
            RunDirError: it cannot be created, lies inside another run's directory, another
                process holds it, it holds a run or other files, or its lock file is a link.
        """
        path = Path(path)
        if _run_file_in(path) is None:  # a run's directory is refused once locked (below)
            check_run_dir_writable(path)  # creates nothing
        created = _top_missing_dir(path)
        directory = None
        try:
            path.mkdir(parents=True, exist_ok=True)  # the run's own path, before the run has it
            directory = OpenDirectory.at(path)
            lock_fd = _lock(directory)  # before the check below: a live run is named as such
        except (OSError, RunDirError) as error:
            _remove_created(created, directory)
            if directory is not None:
                directory.close()
            if isinstance(error, RunDirError):
                raise
            raise RunDirError(f"cannot create run directory {path}: {error.strerror or error}; "
                              "choose another --logdir") from None
        run_dir = cls(directory, lock_fd, new=True, created=created)
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
            RunDirError: it is not a directory, cannot be written, another process holds it,
                or its lock file is a link.
        """
        path = Path(path)
        if not path.is_dir():
            raise RunDirError(f"cannot resume: {path} is not a run directory; check the "
                              "--resume path")
        try:
            directory = OpenDirectory.at(path)
        except OSError as error:
            raise RunDirError(f"cannot resume {path}: {error.strerror or error}; check the "
                              "--resume path") from None
        try:
            return cls(directory, _lock(directory), new=False)
        except OSError as error:
            directory.close()
            raise RunDirError(f"cannot resume {path}: {error.strerror or error}; check the "
                              "--resume path") from None
        except RunDirError:
            directory.close()
            raise

    def where(self) -> Path:
        """Where the run directory is now (it may have been moved while the run ran)."""
        return self.directory.where()

    def discard(self) -> None:
        """Releases the directory and removes what a new run created: a run that fails to
        start leaves nothing behind (a resumed run's directory is left as it is)."""
        if self.new and self._created is not None:
            _remove_created(self._created, self.directory)
        elif self.new:
            for name in (*RUN_FILES, LOCK_FILE):  # the directory existed, empty
                with contextlib.suppress(OSError, ValueError):
                    os.unlink(name, dir_fd=self.directory.fd)
        self.release()

    def release(self) -> None:
        """Drops the lock; calling it again does nothing."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None
        self.directory.close()

    def __enter__(self) -> "RunDirectory":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.release()


def _lock(directory: OpenDirectory) -> int:
    """Takes the run directory's lock and records the holder in it; returns the descriptor.

    Raises:
        RunDirError: another process holds the lock (named), or the lock file is a link, not
            a plain file, or a hard link (refused before anything is written to it).
        OSError: the lock file cannot be opened or written.
    """
    lock_path = directory.path / LOCK_FILE
    try:
        fd = directory.open(LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK, 0o644)
    except LinkFound:
        raise RunDirError(f"{lock_path} is a symbolic link; a run follows no link in its "
                          "directory: remove it, then try again") from None
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode) or status.st_nlink != 1:
        os.close(fd)
        kind = "not a plain file" if not stat.S_ISREG(status.st_mode) else "a hard link"
        raise RunDirError(f"{lock_path} is {kind}; a run's lock is a file of its own: "
                          "remove it, then try again")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_holder(fd)
        os.close(fd)
        raise RunDirError(f"{directory.path} is in use by another process ({holder}); wait "
                          "for it to end or stop it, then try again") from None
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


def _remove_created(created: Path | None, directory: OpenDirectory | None) -> None:
    """Removes the directories a failed start created, unless the run's directory is no
    longer at its path (moved in the meantime: then what is there is not ours)."""
    if created is None or (directory is not None and not directory.in_place()):
        return
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
    """A temporary file beside `path`, fsynced and renamed over it when the block ends, so
    readers see the old file or the whole new one; if the block raises, `path` is left as
    it was. A link at `path` is replaced, never followed (`WriteFailed` on a refused write).
    """
    path = Path(path)
    try:
        parent = OpenDirectory.at(path.parent)
    except OSError as error:
        raise write_failure(path, error) from error
    with parent, parent.open_atomic(path.name) as file:
        yield file


# What `temporary_name` makes: a hidden name, the process id, 8 hex digits, ".tmp" and the
# final name's suffix if kept.
_TEMPORARY = re.compile(r"\..+\.[0-9]+\.[0-9a-f]{8}\.tmp(\.[A-Za-z0-9]+)?")


def temporary_name(name: str, suffix: str = "") -> str:
    """The hidden name a file is written under before it is renamed to `name` (plus `suffix`
    where a library picks the format by it), unique to this process and call."""
    return f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp{suffix}"


def is_temporary(name: str) -> bool:
    """Whether `name` is one `temporary_name` makes: in a locked run directory, what a
    killed process left (`checkpoints.clear_leftovers` removes it)."""
    return _TEMPORARY.fullmatch(name) is not None


def json_text(obj: Any) -> str:
    """`obj` as indented, key-sorted, strict JSON: NaN and infinities as null, paths as
    strings, numpy values as Python ones."""
    return json.dumps(_json_safe(obj), indent=2, sort_keys=True, allow_nan=False,
                      default=_json_default) + "\n"


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
    """Versions of Python and the libraries a run depends on ("not installed" where missing),
    from their metadata, so that nothing (TensorFlow above all) is imported to ask."""
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
