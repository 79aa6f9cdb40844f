"""Tests of fast_dqn.run_dir: where a run goes, its lock, disk space and atomic writes."""

from __future__ import annotations

import errno
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from datetime import datetime
from pathlib import Path

import pytest

from fast_dqn import run_dir as run_dir_module
from fast_dqn.run_dir import (LOCK_FILE, OpenDirectory, RunDirectory, RunDirError, RunDirGone,
                              RunDirMoved, WriteFailed, check_run_dir_writable, default_run_dir,
                              disk_space_warning, free_bytes, json_text, library_versions,
                              open_atomic,
                              write_failure)
from tests.cli_runs import REPO


def write_atomic(path: Path, data: bytes) -> None:
    with open_atomic(path) as file:
        file.write(data)


# Takes the lock of a run directory in another process: argv = create|reopen, path and, to
# keep the lock, seconds to sleep. Exit status 3 (and the message on stdout) when refused.
LOCK_SCRIPT = """
import sys, time
from pathlib import Path
from fast_dqn.run_dir import RunDirectory, RunDirError
how, path = sys.argv[1], Path(sys.argv[2])
try:
    run_dir = getattr(RunDirectory, how)(path)
except RunDirError as error:
    print(error, flush=True)
    sys.exit(3)
print("locked", flush=True)
if len(sys.argv) > 3:
    time.sleep(float(sys.argv[3]))
run_dir.release()
"""


def lock_in_subprocess(how: str, path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LOCK_SCRIPT, how, str(path)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def holder_pattern(pid: int) -> str:
    """What the refusal says of a holder: this machine's name and `pid`."""
    return (rf"is in use by another process \(host {re.escape(socket.gethostname())} "
            rf"pid {pid} since \d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d\); wait for it to end")


# ---------------------------------------------------------------------------- where a run goes


def test_default_run_dir_names_game_algo_seed_and_time():
    path = default_run_dir("pong", "fast_dqn", 3, now=datetime(2024, 5, 6, 7, 8, 9))
    assert path == Path("runs/pong-fast_dqn-seed3-20240506-070809")


def test_default_run_dir_keeps_gym_ids_in_one_directory():
    path = default_run_dir("ALE/Pong-v5", "dqn", 0, now=datetime(2024, 1, 1))
    assert path == Path("runs/ALE_Pong-v5-dqn-seed0-20240101-000000")


def test_check_run_dir_accepts_new_nested_dir_and_creates_nothing(tmp_path):
    check_run_dir_writable(tmp_path / "a" / "b" / "run")
    assert list(tmp_path.iterdir()) == []


def test_check_run_dir_rejects_file_as_parent_and_creates_nothing(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunDirError, match="not a directory.*--logdir"):
        check_run_dir_writable(tmp_path / "file" / "sub" / "run")
    with pytest.raises(RunDirError, match="not a directory"):
        check_run_dir_writable(tmp_path / "file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_check_run_dir_rejects_existing_run_and_touches_nothing(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    check_run_dir_writable(run_dir)  # an empty directory is fine
    (run_dir / "config.json").write_text("{}")
    with pytest.raises(RunDirError, match="already holds a run.*--resume.*--logdir"):
        check_run_dir_writable(run_dir)
    assert [p.name for p in run_dir.iterdir()] == ["config.json"]
    assert (run_dir / "config.json").read_text() == "{}"


def tree(directory: Path) -> dict[str, bytes | None]:
    """Every path below `directory`, hidden ones too, with a file's bytes (None: a directory)."""
    return {str(path.relative_to(directory)): None if path.is_dir() else path.read_bytes()
            for path in sorted(directory.rglob("*"))}


def a_run(path: Path) -> Path:
    """A run directory with its files and a checkpoint directory, as a run leaves it."""
    (path / "checkpoint" / "network").mkdir(parents=True)
    (path / "checkpoint" / "manifest.json").write_text("{}")
    (path / "config.json").write_text('{"seed": 0}')
    (path / LOCK_FILE).write_text("host h pid 1 since 2026-01-01T00:00:00\n")
    return path


@pytest.mark.parametrize("inside", ["run/checkpoint/inner", "run/inner", "run/checkpoint",
                                    "run/checkpoint/network/a/b", "via-link/inner"])
@pytest.mark.parametrize("how", ["check", "create"])
def test_a_path_inside_a_run_is_refused_and_nothing_is_written(tmp_path, inside, how):
    """Regression: --logdir=RUN/checkpoint/inner was taken, and a resume or play of RUN then
    refused its checkpoint (".lock is not in the manifest")."""
    run = a_run(tmp_path / "run")
    (tmp_path / "via-link").symlink_to(run / "checkpoint")  # the link is resolved
    before = tree(run)
    path = tmp_path / inside
    check = check_run_dir_writable if how == "check" else RunDirectory.create
    with pytest.raises(RunDirError) as error:
        check(path)
    assert str(error.value) == (f"{path} is inside the run directory {run} (it holds .lock "
                                "and config.json); a run directory holds one run: choose a "
                                "--logdir outside it")
    assert tree(run) == before


def test_a_config_json_of_a_project_above_its_runs_makes_no_run(tmp_path):
    """A run's directory holds its lock beside its files: a project whose root holds a
    config.json of its own keeps its runs under it."""
    (tmp_path / "config.json").write_text('{"model": "mine"}')
    path = tmp_path / "runs" / "pong"
    with RunDirectory.create(path) as run_dir:
        assert run_dir.new and [p.name for p in path.iterdir()] == [LOCK_FILE]


@pytest.mark.parametrize("how", ["check", "create"])
def test_a_directory_that_is_not_empty_is_refused_and_left_alone(tmp_path, how):
    """A new run takes a new or empty directory: a run renames and removes its own names
    there (checkpoint/, checkpoint.old/, .lock), so files of its user's have no place in it."""
    path = tmp_path / "mine"
    (path / "checkpoint").mkdir(parents=True)  # another program's checkpoints
    (path / "checkpoint" / "model.pt").write_text("weights")
    (path / "notes.txt").write_text("mine")
    before = tree(path)
    check = check_run_dir_writable if how == "check" else RunDirectory.create
    with pytest.raises(RunDirError) as error:
        check(path)
    assert str(error.value) == (f"{path} is not empty (it holds checkpoint and 1 more); a new "
                                "run takes a new or empty directory: choose another --logdir")
    assert tree(path) == before


def test_a_directory_holding_only_a_lock_takes_a_new_run(tmp_path):
    """A run stopped between taking its lock and writing config.json left only `.lock`."""
    path = tmp_path / "run"
    path.mkdir()
    (path / LOCK_FILE).write_text("host h pid 1 since 2026-01-01T00:00:00\n")
    check_run_dir_writable(path)
    with RunDirectory.create(path) as run_dir:
        assert run_dir.new and [p.name for p in path.iterdir()] == [LOCK_FILE]


def test_check_run_dir_rejects_unwritable_parent(tmp_path, monkeypatch):
    # Root may write anywhere, so the kernel's answer is stubbed for the locked directory.
    parent = tmp_path / "locked"
    parent.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode:
                        False if Path(path) == parent else real_access(path, mode))
    with pytest.raises(RunDirError, match="not writable"):
        check_run_dir_writable(parent / "run")
    assert list(parent.iterdir()) == []


# ---------------------------------------------------------------------------- one writer per run


def test_create_locks_a_new_nested_directory_and_names_the_holder(tmp_path):
    path = tmp_path / "a" / "b" / "run"
    run_dir = RunDirectory.create(path)
    try:
        assert run_dir.path == path and run_dir.new
        assert [p.name for p in path.iterdir()] == [LOCK_FILE]
        text = (path / LOCK_FILE).read_text()
        assert re.fullmatch(rf"host {re.escape(socket.gethostname())} pid {os.getpid()} since "
                            r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\n", text), text
    finally:
        run_dir.release()
    run_dir.release()  # a second release does nothing


@pytest.mark.slow  # starts python processes that take the lock
def test_a_second_process_is_refused_until_the_lock_is_released(tmp_path):
    path = tmp_path / "run"
    run_dir = RunDirectory.create(path)
    for how in ("reopen", "create"):
        result = lock_in_subprocess(how, path)
        assert result.returncode == 3, result.stderr
        assert re.search(f"{re.escape(str(path))} {holder_pattern(os.getpid())}",
                         result.stdout), result.stdout
    run_dir.release()
    result = lock_in_subprocess("reopen", path)
    assert (result.returncode, result.stdout) == (0, "locked\n"), result.stderr


def test_a_second_lock_in_this_process_is_refused_too(tmp_path):
    # flock belongs to the open file description: a second open conflicts even here.
    with RunDirectory.create(tmp_path / "run"):
        with pytest.raises(RunDirError, match=holder_pattern(os.getpid())):
            RunDirectory.reopen(tmp_path / "run")
    RunDirectory.reopen(tmp_path / "run").release()  # `with` released it


@pytest.mark.slow  # starts a python process that holds the lock
def test_the_lock_of_a_killed_process_is_free_again(tmp_path):
    path = tmp_path / "run"
    path.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", LOCK_SCRIPT, "reopen", str(path), "60"],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline() == "locked\n", holder.stderr.read()
        with pytest.raises(RunDirError, match=holder_pattern(holder.pid)):
            RunDirectory.reopen(path)
        os.kill(holder.pid, signal.SIGKILL)
        assert holder.wait(timeout=30) == -signal.SIGKILL
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        holder.stdout.close()
        holder.stderr.close()
    with RunDirectory.reopen(path) as run_dir:  # nobody had to remove the lock file
        assert not run_dir.new
        assert f" pid {os.getpid()} since " in (path / LOCK_FILE).read_text()


def test_create_refuses_a_directory_that_holds_a_run(tmp_path):
    path = tmp_path / "run"
    path.mkdir()
    (path / "config.json").write_text('{"seed": 0}')
    with pytest.raises(RunDirError, match=r"already holds a run \(config\.json\).*--resume"):
        RunDirectory.create(path)
    assert (path / "config.json").read_text() == '{"seed": 0}'
    RunDirectory.reopen(path).release()  # the refusal released the lock it took


@pytest.mark.slow  # starts python processes that take the lock
def test_create_on_a_live_runs_directory_names_the_holder(tmp_path):
    path = tmp_path / "run"
    with RunDirectory.create(path):
        (path / "config.json").write_text("{}")
        result = lock_in_subprocess("create", path)
        assert result.returncode == 3, result.stderr
        assert re.search(holder_pattern(os.getpid()), result.stdout), result.stdout
        assert "already holds a run" not in result.stdout
    result = lock_in_subprocess("create", path)  # the run ended: now it is just a run
    assert result.returncode == 3 and "already holds a run" in result.stdout, result.stdout


def test_resume_needs_an_existing_directory(tmp_path):
    with pytest.raises(RunDirError, match="cannot resume"):
        RunDirectory.reopen(tmp_path / "missing")
    assert not (tmp_path / "missing").exists()


def test_discard_removes_the_new_nested_directories(tmp_path):
    (tmp_path / "kept").mkdir()
    run_dir = RunDirectory.create(tmp_path / "a" / "b" / "run")
    (run_dir.path / "config.json").write_text("{}")
    (run_dir.path / "episodes.csv").write_text("episode\n")
    run_dir.discard()
    assert [p.name for p in tmp_path.iterdir()] == ["kept"]
    RunDirectory.create(tmp_path / "a" / "b" / "run").release()  # and the lock is free


def test_discard_in_an_existing_directory_removes_only_the_runs_files(tmp_path):
    path = tmp_path / "run"
    path.mkdir()
    run_dir = RunDirectory.create(path)
    for name in ("config.json", "episodes.csv", "evaluations.csv", "summary.json"):
        (path / name).write_text("x")
    (path / "notes.txt").write_text("mine")  # not the run's: put there while it started
    run_dir.discard()
    assert [p.name for p in path.iterdir()] == ["notes.txt"]
    assert (path / "notes.txt").read_text() == "mine"


def test_discard_of_a_resumed_run_leaves_its_directory(tmp_path):
    path = tmp_path / "run"
    RunDirectory.create(path).release()
    (path / "config.json").write_text("{}")
    RunDirectory.reopen(path).discard()
    assert sorted(p.name for p in path.iterdir()) == [LOCK_FILE, "config.json"]
    RunDirectory.reopen(path).release()


# ---------------------------------------------------------------------------- disk space


def test_disk_space_warning_only_when_short(tmp_path):
    free = shutil.disk_usage(tmp_path).free
    assert free_bytes(tmp_path) == pytest.approx(free, abs=1e8)
    assert free_bytes(tmp_path / "missing" / "dir") is None
    assert disk_space_warning(tmp_path, free // 2, "the replay memory") is None
    needed = free + 10**12  # a terabyte more than there is
    line = disk_space_warning(tmp_path, needed, "the replay memory")
    match = re.fullmatch(rf"warning: (\d+\.\d) GB free on the disk of {re.escape(str(tmp_path))}"
                         rf", but the replay memory needs about (\d+\.\d) GB", line)
    assert match, line
    assert float(match[1]) == pytest.approx(free / 1e9, abs=0.15)
    assert float(match[2]) == pytest.approx(needed / 1e9, abs=0.05)


def test_disk_space_warning_at_the_edge_of_a_real_small_disk(tiny_disk):
    if tiny_disk is None:
        pytest.skip("a tmpfs cannot be mounted here")
    free = shutil.disk_usage(tiny_disk).free
    assert free == 64 * 1024
    assert disk_space_warning(tiny_disk, free, "x") is None
    assert disk_space_warning(tiny_disk, free + 1, "x") == (
        f"warning: 0.0 GB free on the disk of {tiny_disk}, but x needs about 0.0 GB")


# ---------------------------------------------------------------------------- atomic writes


def test_atomic_write_replaces_content_and_leaves_no_temp_files(tmp_path):
    target = tmp_path / "summary.json"
    write_atomic(target, json_text({"a": 1}).encode())
    write_atomic(target, json_text({"a": 2, "b": [1.5, None]}).encode())
    assert json.loads(target.read_text()) == {"a": 2, "b": [1.5, None]}
    write_atomic(tmp_path / "notes.txt", b"hello\n")
    assert (tmp_path / "notes.txt").read_text() == "hello\n"
    write_atomic(tmp_path / "raw", b"\x00\x01")
    assert (tmp_path / "raw").read_bytes() == b"\x00\x01"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "raw", "summary.json"]


def test_failed_atomic_write_keeps_previous_file(tmp_path, monkeypatch):
    target = tmp_path / "config.json"
    write_atomic(target, json_text({"version": 1}).encode())

    def broken_replace(src, dst, **dir_fds):
        raise OSError("disk fell off")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(WriteFailed, match=f"cannot write {re.escape(str(target))}: disk fell off$"
                       ) as failure:
        write_atomic(target, json_text({"version": 2}).encode())
    assert not failure.value.disk_full and failure.value.path == target
    assert json.loads(target.read_text()) == {"version": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]


def test_an_error_in_the_block_keeps_previous_file_and_is_not_a_write_failure(tmp_path):
    target = tmp_path / "data"
    write_atomic(target, b"old")
    with pytest.raises(KeyError):
        with open_atomic(target) as file:
            file.write(b"new")
            raise KeyError("a bug")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["data"]


def test_open_atomic_on_a_full_disk_is_write_failed_and_keeps_previous_file(
        tmp_path, tiny_disk, fill_disk, monkeypatch):
    # Where the tmpfs mounts (as root; it does on the development machine) the disk really is
    # full; elsewhere os.fsync is made to answer ENOSPC as a full disk does.
    directory = tiny_disk if tiny_disk is not None else tmp_path / "disk"
    target = directory / "config.json"
    write_atomic(target, json_text({"version": 1}).encode())
    if tiny_disk is not None:
        fill_disk(tiny_disk)
        assert shutil.disk_usage(tiny_disk).free < 4096
    else:
        def fsync_disk_full(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        monkeypatch.setattr(os, "fsync", fsync_disk_full)
    with pytest.raises(WriteFailed) as failure:
        with open_atomic(target) as file:
            file.write(b"x" * 20_000)
    assert failure.value.disk_full and failure.value.path == target
    assert str(failure.value) == (f"cannot write {target}: No space left on device; "
                                  "free some disk space")
    assert json.loads(target.read_text()) == {"version": 1}
    assert sorted(p.name for p in directory.iterdir() if p.name != "filler") == ["config.json"]


def test_write_failure_tells_a_full_disk_from_other_errors(tmp_path):
    path = tmp_path / "f"
    assert write_failure(path, OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))).disk_full
    assert write_failure(path, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))).disk_full
    denied = write_failure(path, PermissionError(errno.EACCES, os.strerror(errno.EACCES)))
    assert not denied.disk_full
    assert str(denied) == f"cannot write {path}: Permission denied"
    # TensorFlow's I/O errors carry no errno, only the text.
    tf_like = RuntimeError("{{function_node __wrapped}} /x/.tmp: No space left on device")
    assert write_failure(path, tf_like).disk_full


def test_json_is_strict(tmp_path):
    target = tmp_path / "s.json"
    text = json_text({"nan": math.nan, "inf": math.inf, "path": Path("x/y")})
    write_atomic(target, text.encode())
    assert json.loads(target.read_text()) == {"nan": None, "inf": None, "path": "x/y"}


# ---------------------------------------------------------------------------- library versions


def test_library_versions_names_every_library():
    versions = library_versions()
    assert set(versions) == {"python", "numpy", "tensorflow", "gymnasium", "ale-py", "opencv"}
    assert all(isinstance(v, str) and v for v in versions.values())
    assert versions["python"] == ".".join(map(str, sys.version_info[:3]))


@pytest.mark.slow  # starts a python process
def test_module_imports_without_tensorflow():
    code = ("import sys, tempfile, pathlib, fast_dqn.run_dir as r;"
            "d = pathlib.Path(tempfile.mkdtemp()) / 'run';"
            "run = r.RunDirectory.create(d); run.directory.write_bytes_atomic('x.json', b'{}');"
            "r.library_versions(); run.discard();"
            "assert 'tensorflow' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=60)


# ---------------------------------------------------------------------------- links and moves


@pytest.mark.parametrize("how", ["create", "reopen"])
def test_a_planted_lock_link_is_refused_and_its_target_left_alone(tmp_path, how):
    victim = tmp_path / "victim.txt"
    victim.write_text("not the run's\n")
    path = tmp_path / "run"
    path.mkdir()
    (path / LOCK_FILE).symlink_to(victim)
    with pytest.raises(RunDirError, match=rf"{re.escape(str(path / LOCK_FILE))} is a symbolic "
                                          "link; a run follows no link"):
        getattr(RunDirectory, how)(path)
    assert victim.read_text() == "not the run's\n"
    assert (path / LOCK_FILE).is_symlink()


def test_a_lock_file_with_a_second_name_elsewhere_is_refused(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("not the run's\n")
    path = tmp_path / "run"
    path.mkdir()
    os.link(victim, path / LOCK_FILE)
    with pytest.raises(RunDirError, match="is a hard link"):
        RunDirectory.reopen(path)
    assert victim.read_text() == "not the run's\n"


def test_writes_go_to_the_locked_directory_after_it_is_moved(tmp_path):
    path, moved = tmp_path / "run", tmp_path / "run.moved"
    with RunDirectory.create(path) as run_dir:
        path.rename(moved)
        run_dir.directory.write_bytes_atomic("summary.json", b"{}\n")
        assert run_dir.where() == moved
        assert run_dir.path == path  # the path it was opened by, for messages
    assert (moved / "summary.json").read_bytes() == b"{}\n"
    assert not path.exists()


def test_a_write_after_the_directory_is_deleted_is_run_dir_gone_and_recreates_nothing(
        tmp_path):
    path = tmp_path / "run"
    with RunDirectory.create(path) as run_dir:
        shutil.rmtree(path)
        with pytest.raises(RunDirGone, match=rf"the run directory {re.escape(str(path))} was "
                                             "deleted while the run ran"):
            run_dir.directory.write_bytes_atomic("summary.json", b"{}\n")
    assert not path.exists()


def test_an_atomic_write_replaces_a_link_and_leaves_its_target_alone(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("not the run's\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "summary.json").symlink_to(victim)
    write_atomic(tmp_path / "run" / "summary.json", b"{}\n")
    assert victim.read_text() == "not the run's\n"
    assert not (tmp_path / "run" / "summary.json").is_symlink()
    assert (tmp_path / "run" / "summary.json").read_text() == "{}\n"


def test_tensorflow_is_given_a_path_that_follows_the_directory(tmp_path):
    path, moved = tmp_path / "run", tmp_path / "run.moved"
    path.mkdir()
    with OpenDirectory.at(path) as directory:
        path.rename(moved)
        with directory.for_tensorflow("events") as events:
            Path(events).write_text("x")  # as TensorFlow would open it: by name
    assert (moved / "events").read_text() == "x"
    assert not path.exists()


def test_without_a_path_through_the_descriptor_a_move_stops_tensorflow_writes(tmp_path,
                                                                               monkeypatch):
    """Where the system has no /proc/self/fd, TensorFlow gets the path, checked before and
    after it writes."""
    monkeypatch.setattr(run_dir_module, "_PROC_FD", tmp_path / "no-proc")
    path = tmp_path / "run"
    path.mkdir()
    with OpenDirectory.at(path) as directory:
        with directory.for_tensorflow("events") as events:
            assert events == str(path / "events")
        with pytest.raises(RunDirMoved, match="was moved while the run ran"):
            with directory.for_tensorflow("events") as events:
                path.rename(tmp_path / "run.moved")  # while TensorFlow writes
    assert not path.exists()


def test_a_file_that_vanishes_while_the_run_directory_is_deleted_is_that_deletion(tmp_path):
    """Regression: under load, `rm -r RUN` had removed the checkpoint's files but not yet the
    run directory when TensorFlow's save failed with NotFound, and the run stopped with
    "cannot write .../checkpoint.tmp/network: ... No such file or directory" instead of
    saying its directory was deleted."""
    path = tmp_path / "run"
    (path / "checkpoint.tmp").mkdir(parents=True)
    with OpenDirectory.at(path) as directory, directory.subdirectory("checkpoint.tmp") as staging:
        deleting = threading.Timer(0.3, shutil.rmtree, args=(path,))
        deleting.start()  # the deletion ends after the write has failed
        vanished = FileNotFoundError(errno.ENOENT, "No such file or directory")
        try:
            failure = staging.failure("network", vanished)
        finally:
            deleting.join()
    assert isinstance(failure, RunDirGone)


def test_a_file_that_vanishes_while_its_directory_stays_is_a_write_failure(tmp_path,
                                                                           monkeypatch):
    monkeypatch.setattr(run_dir_module, "DELETION_SECONDS", 0.2)
    path = tmp_path / "run"
    path.mkdir()
    with OpenDirectory.at(path) as directory:
        failure = directory.failure("network", FileNotFoundError(errno.ENOENT, "gone"))
    assert not isinstance(failure, RunDirGone)
    assert str(failure).startswith(f"cannot write {path / 'network'}: ")
