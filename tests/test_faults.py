"""How runs die, tried on the real entry points (docs/design.md §5): a second writer, a signal
in each phase, a full disk at each file, and damage to each checkpoint file.

A full disk is a real small file system where this machine allows one (a tmpfs, mounted as
root); elsewhere those tests are skipped and say so. TensorBoard's writer goes through
TensorFlow's own file system layer, so only a real full disk can fail it.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import re
import shutil
import signal
import threading
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

from fast_dqn import launch, run_logs
from fast_dqn.checkpoints import (CHECKPOINT, MANIFEST, latest_checkpoint, network_prefix,
                                  read_manifest, verify_checkpoint)
from fast_dqn.config import ALGO_FAST_DQN
from fast_dqn.run_dir import OpenDirectory, write_failure
from tests.cli_runs import (FAST, LINE_STOP, RUN_FAST_DQN, SMALL_BATCH, Finished, Launch,
                            assert_no_traceback, read_csv, run_in_process, snapshot, start,
                            step_of, summary, wait_for, wait_for_holder, wait_for_line)
from tests.fakes import flip_byte
from tests.run_files import network_data, truncate


def signal_and_finish(run: Launch, signum: int, timeout: float = 60):
    """Signals the run and waits for its exit; a run not gone within `timeout` (a hang, not a
    slow stop) is killed and fails the test."""
    signalled = time.monotonic()
    run.process.send_signal(signum)
    return run.finish(timeout, since=signalled)


def main_here(argv: list[str], capsys) -> Finished:
    """The fast trainer's entry point in this process (cli_runs.run_in_process)."""
    return run_in_process(RUN_FAST_DQN, argv, capsys)


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


# -- one writer per run directory --------------------------------------------------------------


@pytest.mark.slow
def test_a_second_writer_is_refused_naming_the_holder_and_a_killed_one_leaves_no_lock(
        tmp_path, capsys):
    run_dir = tmp_path / "run"
    # Far more steps than it can take before the SIGTERM below, however fast its updates.
    # Uncompiled (the resumes below keep the run's --xla): the lock is under test, not the
    # trainer, and XLA's compile (seconds here) starts with learning, after the checkpoint
    # the SIGTERM follows, which waits for the trainer's call in progress.
    first = start(RUN_FAST_DQN, [*FAST, SMALL_BATCH, "--xla=off", "--timesteps=1000000",
                                 "--evaluate=0", "--checkpoint-every=400",
                                 f"--logdir={run_dir}"],
                  tmp_path / "first")
    wait_for(first, run_dir / CHECKPOINT / MANIFEST)
    holder = f"pid {first.process.pid}"
    # The second writers in this process: the holder is another process all the same.
    second_resume = main_here(["--resume", str(run_dir), "--timesteps=30000"], capsys)
    second_new = main_here([*FAST, f"--logdir={run_dir}"], capsys)
    for result in (second_resume, second_new):
        assert result.returncode == 2, result.stderr[-3000:]
        line = one_line(result.stderr)
        assert "is in use by another process" in line and holder in line, line
    assert first.process.poll() is None  # the holder goes on, untouched
    stopped = signal_and_finish(first, signal.SIGTERM)
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr[-3000:]
    stopped_at = step_of(read_manifest(latest_checkpoint(run_dir)))

    # Two resumes at once: one runs, the other is refused, and no row is written twice.
    extend = f"--timesteps={stopped_at + 400}"
    racers = [start(RUN_FAST_DQN, ["--resume", str(run_dir), extend], tmp_path / f"race{i}")
              for i in range(2)]
    results = sorted((racer.finish(timeout=180) for racer in racers),
                     key=lambda result: result.returncode)
    assert [result.returncode for result in results] == [0, 2], results[1].stderr[-3000:]
    assert "is in use by another process" in one_line(results[1].stderr)
    rows = read_csv(run_dir / "episodes.csv")
    assert [int(row["episode"]) for row in rows] == list(range(1, len(rows) + 1))
    evaluations = [row["timestep"] for row in read_csv(run_dir / "evaluations.csv")]
    assert len(evaluations) == len(set(evaluations))

    # A holder killed outright (SIGKILL, a lost node) leaves a lock the kernel has released.
    # It is killed once it holds the lock (its pid in .lock): before TensorFlow's import.
    killed = start(RUN_FAST_DQN, ["--resume", str(run_dir), f"--timesteps={stopped_at + 800}"],
                   tmp_path / "killed")
    wait_for_holder(killed, run_dir)
    killed.process.kill()
    killed.finish(30)
    after = main_here(["--resume", str(run_dir), f"--timesteps={stopped_at + 800}"], capsys)
    assert after.returncode == 0, after.stderr[-3000:]
    assert summary(run_dir)["finished"] is True


# -- a signal in each phase ------------------------------------------------------------------------


def sigterm_at_line(args: list[str], tmp_path: Path, line: str, stop_line: str) -> Finished:
    """Starts a fast run that sends itself SIGTERM as it prints `line` (a phase it enters;
    tests/line_stop.py), so that the signal lands in that phase however loaded the machine
    is, and checks that it exits with 143 without a traceback, its stop line (what the stop
    cuts short) starting with `stop_line`. That the stop was prompt is for the caller to
    check by the run's records (rows, updates); a run not gone within a minute of the line
    hangs, and fails."""
    run = start(LINE_STOP, ["TERM", re.escape(line), str(RUN_FAST_DQN), *args],
                tmp_path / "first")
    deadline = time.monotonic() + 300  # for TensorFlow's import and the steps to the line
    while line not in run.stdout() and run.process.poll() is None:
        if time.monotonic() > deadline:
            run.process.kill()
            run.finish(10)
            pytest.fail(f"{line!r} did not appear within 300 s")
        time.sleep(0.05)
    result = run.finish(timeout=60)  # once the line is out: the signal came with it
    assert result.returncode == 128 + signal.SIGTERM, result.stderr[-3000:]
    assert_no_traceback(result)
    stops = [text for text in result.stdout.splitlines() if text.startswith("stopping at")]
    assert len(stops) == 1 and stops[0].startswith(stop_line), result.stdout[-3000:]
    return result


@pytest.mark.slow
def test_sigterm_during_an_evaluation_stops_at_once_and_the_evaluation_is_redone(tmp_path,
                                                                                 capsys):
    """The stop must not wait for the evaluation's games: the run signals itself as the
    evaluation starts, and a stop that waited would log it."""
    run_dir = tmp_path / "run"
    args = [*FAST, "--timesteps=600", "--evaluate=400", "--eval-episodes=2",
            "--eval-max-episode-steps=200", "--checkpoint-every=0", f"--logdir={run_dir}"]
    # The phase line comes as the evaluation starts (at the first sync point, 400).
    sigterm_at_line(args, tmp_path, "evaluation at step 400",
                    "stopping at step 400: dropping the evaluation under way")
    assert step_of(read_manifest(latest_checkpoint(run_dir))) == 400
    # Cut short, not waited for: neither logged nor counted.
    assert read_csv(run_dir / "evaluations.csv") == []
    assert summary(run_dir)["evaluations"] == 0

    resumed = main_here(["--resume", str(run_dir)], capsys)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    evaluations = read_csv(run_dir / "evaluations.csv")
    assert [(row["timestep"], row["episodes"]) for row in evaluations] == [("400", "2")]


@pytest.mark.slow
def test_sigterm_during_a_trainer_epoch_stops_at_once(tmp_path):
    """An epoch of 200 updates takes far longer than the acting; the stop abandons it."""
    run_dir = tmp_path / "run"
    args = [*FAST, "--timesteps=20000", "--target-update=800", "--evaluate=0",
            "--checkpoint-every=0", f"--logdir={run_dir}"]
    # Once the epoch's 800 steps are acted, the loop waits for the trainer's 200 updates.
    sigterm_at_line(args, tmp_path, "waiting for the learner at step 1200",
                    "stopping at step 1200: finishing the learner's update call")
    done = summary(run_dir)
    # Abandoned, not waited for: inside the first epoch of learning (steps 400-1200).
    assert 0 < done["updates"] < 200
    assert verify_checkpoint(latest_checkpoint(run_dir))



@pytest.mark.slow
def test_a_crash_in_native_code_leaves_a_thread_dump_on_stderr(tmp_path):
    """A segfault at a stop once ended a CI run with status -11 and an empty stderr."""
    run = start(RUN_FAST_DQN, [*FAST, "--timesteps=20000", "--evaluate=0",
                               "--checkpoint-every=0", f"--logdir={tmp_path / 'run'}"],
                tmp_path / "crashed")
    # The end of the first epoch of learning: the main thread waits for the trainer's.
    wait_for_line(run, "waiting for the learner at step 800")
    result = signal_and_finish(run, signal.SIGSEGV)
    assert result.returncode == -signal.SIGSEGV
    assert "Fatal Python error: Segmentation fault" in result.stderr, result.stderr[-3000:]
    # At least one thread's stack, frame by frame. No more can be asked: faulthandler reads the
    # other threads' frames while they run, and a CI run's dump ended at "File ???" inside
    # another thread's stack, with no "Current thread" and no main thread's stack.
    assert re.search(r"(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):\n"
                     r"  File ", result.stderr), result.stderr[-3000:]

# -- a full disk at each file ------------------------------------------------------------------------


def mounted(small_disk, megabytes: int) -> Path:
    """A real tmpfs of `megabytes` (conftest.py); the test is skipped, and says so, where
    none can be mounted."""
    disk = small_disk(megabytes * 1024)
    if disk is None:
        pytest.skip("a small real disk needs a tmpfs mount (root)")
    return disk


def assert_disk_full_line(result, run_dir: Path, file_pattern: str, warned: bool = False) -> int:
    """The one line a full disk ends in (after the start's warning, if `warned`); returns the
    step of the checkpoint it names."""
    assert result.returncode == 1, result.stderr[-3000:]
    stderr = result.stderr
    if warned:
        warning, stderr = stderr.split("\n", 1)
        assert re.fullmatch(r"warning: [\d.]+ GB free on the disk of .+, but a checkpoint "
                            r"needs about [\d.]+ GB", warning), warning
    line = one_line(stderr)
    assert re.search(f"cannot write {re.escape(str(run_dir))}/{file_pattern}: No space left "
                     "on device; free some disk space", line), line
    checkpoint = latest_checkpoint(run_dir)
    step = step_of(verify_checkpoint(checkpoint))
    assert f"the last checkpoint (step {step}) in {run_dir / CHECKPOINT} is intact" in line
    return step


@pytest.mark.slow
def test_a_full_disk_at_a_checkpoint_is_one_line_and_the_run_resumes(tmp_path, small_disk,
                                                                     fill_disk, capsys):
    """A real small disk, filled to 2 MB after the first checkpoint: rows and events still
    fit, the next checkpoint (about 30 MB) does not. 80 MB is less than a checkpoint of this
    run may take (a 35 MB memory and the networks), so the run warns at its start."""
    disk = mounted(small_disk, 80)
    run_dir = disk / "run"
    run = start(RUN_FAST_DQN, [*FAST, SMALL_BATCH, "--timesteps=20000", "--evaluate=0",
                               "--checkpoint-every=800", f"--logdir={run_dir}"],
                tmp_path / "full")
    wait_for(run, run_dir / CHECKPOINT / MANIFEST)
    filler = fill_disk(disk, leave_bytes=2 << 20)
    result = run.finish(timeout=120)
    step = assert_disk_full_line(result, run_dir, r"checkpoint\.tmp/\S+", warned=True)
    assert not (run_dir / "checkpoint.tmp").exists()

    filler.unlink()
    resumed = main_here(["--resume", str(run_dir), f"--timesteps={step + 400}"], capsys)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = read_csv(run_dir / "episodes.csv")
    assert [int(row["episode"]) for row in rows] == list(range(1, len(rows) + 1))


@pytest.mark.slow
def test_a_full_disk_at_a_csv_row_is_one_line_naming_it(tmp_path, capsys, monkeypatch):
    """Injected: on a real disk a row often still fits in the file's last page, so which
    write fails first is not up to the test. Here the CSVs' file objects refuse every write
    with ENOSPC once the first checkpoint is on disk."""
    run_dir = tmp_path / "run"
    full = threading.Event()

    class FillingFile(io.FileIO):
        def write(self, data):
            if full.is_set():
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return super().write(data)

    monkeypatch.setattr(run_logs, "open", lambda path, mode, buffering=0: FillingFile(path, mode),
                        raising=False)

    def fill_after_the_first_checkpoint() -> None:
        while not (run_dir / CHECKPOINT / MANIFEST).exists() and not done.is_set():
            time.sleep(0.05)
        full.set()

    done = threading.Event()
    watcher = threading.Thread(target=fill_after_the_first_checkpoint, daemon=True)
    watcher.start()
    try:
        status = launch.main([*FAST, SMALL_BATCH, "--timesteps=20000", "--evaluate=0",
                              "--checkpoint-every=400", f"--logdir={run_dir}"], ALGO_FAST_DQN)
    finally:
        done.set()
        watcher.join()
    err = capsys.readouterr().err

    class Result:  # what assert_disk_full_line reads of a finished process
        returncode, stderr = status, err

    assert_disk_full_line(Result, run_dir, r"episodes\.csv")


def test_a_full_disk_before_the_start_is_one_line_and_leaves_nothing(small_disk, fill_disk,
                                                                     capsys):
    disk = mounted(small_disk, 1)
    fill_disk(disk)
    run_dir = disk / "run"
    status = launch.main([*FAST, f"--logdir={run_dir}"], ALGO_FAST_DQN)  # in this process
    err = capsys.readouterr().err
    assert status == 2, err[-3000:]
    line = one_line(err)
    assert f"cannot write {run_dir / 'config.json'}: No space left on device" in line
    assert not run_dir.exists()


def test_tensorboard_on_a_full_disk_names_its_file(small_disk, fill_disk):
    disk = mounted(small_disk, 1)
    logs = run_logs.RunLogs(disk)
    logs.log_scalars(0, {"train/loss": 1.0})
    logs.flush()
    fill_disk(disk)
    with pytest.raises(run_logs.WriteFailed) as failure:
        for step in range(1, 200):
            logs.log_scalars(step, {f"train/value{i}": float(i) for i in range(50)})
        logs.flush()
    assert failure.value.disk_full
    assert re.fullmatch(r"cannot write .*/events\.out\.tfevents\.[^ ]+: No space left on "
                        r"device; free some disk space", str(failure.value)), str(failure.value)
    with contextlib.suppress(run_logs.WriteFailed):
        logs.close()


@pytest.mark.slow
def test_a_failed_summary_is_one_line_naming_the_checkpoint(tmp_path, capsys, monkeypatch):
    real = OpenDirectory.write_bytes_atomic  # how the run writes its whole files

    def summary_disk_full(directory, name, data):
        if name == "summary.json":
            raise write_failure(directory.path / name,
                                OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
        real(directory, name, data)

    monkeypatch.setattr(OpenDirectory, "write_bytes_atomic", summary_disk_full)
    run_dir = tmp_path / "run"
    status = launch.main([*FAST, SMALL_BATCH, "--timesteps=800", "--evaluate=0",
                          "--checkpoint-every=0", f"--logdir={run_dir}"], ALGO_FAST_DQN)
    err = capsys.readouterr().err
    assert status == 1
    line = one_line(err)
    assert f"cannot write {run_dir / 'summary.json'}: No space left on device" in line
    assert "the last checkpoint (step 800)" in line


# -- damage to each checkpoint file ----------------------------------------------------------------


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory) -> Path:
    """A fast run with evaluations, stopped by SIGTERM after two periodic checkpoints."""
    run_dir = tmp_path_factory.mktemp("damage") / "run"
    run = start(RUN_FAST_DQN, [*FAST, SMALL_BATCH, "--timesteps=20000", "--evaluate=400",
                               "--eval-episodes=2", "--eval-max-episode-steps=200",
                               "--checkpoint-every=400", f"--logdir={run_dir}"],
                run_dir.parent / "run")
    wait_for(run, run_dir / "evaluations.csv")
    while len(read_csv(run_dir / "evaluations.csv")) < 2 and run.process.poll() is None:
        time.sleep(0.1)
    result = signal_and_finish(run, signal.SIGTERM)
    assert result.returncode == 128 + signal.SIGTERM, result.stderr[-3000:]
    return run_dir


def resign(checkpoint: Path, change) -> None:
    """Edits the manifest and writes a checksum that fits the edit, as the documented rule
    says: CRC-32 of the content without "checksum", keys sorted, compact separators. Only
    then do the values' own checks come into play."""
    path = checkpoint / MANIFEST
    manifest = json.loads(path.read_text())
    change(manifest)
    body = {key: value for key, value in manifest.items() if key != "checksum"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    manifest["checksum"] = f"{zlib.crc32(canonical):08x}"
    path.write_text(json.dumps(manifest))


def drop_a_game(run_dir: Path) -> None:
    lines = (run_dir / "episodes.csv").read_text().splitlines(keepends=True)
    (run_dir / "episodes.csv").write_text("".join(lines[:2] + lines[3:]))


DAMAGE = {
    # name: (what is done to (run_dir, checkpoint), what the one line says)
    "replay-byte": (lambda run, ckpt: flip_byte(ckpt / "replay" / "frames.npy"),
                    r"replay/frames\.npy is damaged: CRC-32"),
    "network-truncated": (lambda run, ckpt: truncate(network_data(ckpt)),
                          r"network/ckpt\.data-\S+ holds \d+ bytes; the manifest says"),
    "network-index-byte": (lambda run, ckpt: flip_byte(Path(network_prefix(ckpt) + ".index")),
                           r"ckpt\.index is damaged"),
    "replay-deleted": (lambda run, ckpt: shutil.rmtree(ckpt / "replay"),
                       r"replay/\w+\.npy is missing"),
    "manifest-edited": (lambda run, ckpt: flip_byte(ckpt / MANIFEST, fraction=0.3),
                        r"manifest\.json (is damaged|cannot|is not)|cannot read .*manifest"),
    "manifest-no-step": (lambda run, ckpt: resign(ckpt, lambda m: m["counters"].pop("step")),
                         r"manifest\.json: 'step' is missing"),
    "manifest-no-rng": (lambda run, ckpt: resign(ckpt, lambda m: m.pop("rng")),
                        r"manifest\.json: 'rng' is missing"),
    "manifest-step-text": (lambda run, ckpt: resign(ckpt, lambda m: m["counters"].update(
        step="abc")), r"manifest\.json: 'step' must be an integer; got 'abc'"),
    "manifest-step-negative": (lambda run, ckpt: resign(ckpt, lambda m: m["counters"].update(
        step=-500)), r"manifest\.json: 'step' must be at least 0; got -500"),
    "csv-row-missing": (lambda run, ckpt: drop_a_game(run),
                        r"episodes\.csv holds \d+ games up to step \d+ \(numbered 1\.\.\d+\); "
                        r"the checkpoint counts \d+"),
}


@pytest.mark.slow
def test_each_kind_of_damage_is_refused_in_one_line_and_nothing_is_changed(stopped_run,
                                                                            tmp_path, capsys):
    """In this process (TensorFlow loads once): every case, one after another."""
    failures = []
    for name, (damage, pattern) in DAMAGE.items():
        copy = tmp_path / name
        shutil.copytree(stopped_run, copy)
        damage(copy, latest_checkpoint(copy))
        before = snapshot(copy)
        status = launch.main(["--resume", str(copy)], ALGO_FAST_DQN)
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        if status != 2 or len(lines) != 1 or not re.search(pattern, lines[0]):
            failures.append(f"{name}: status {status}, stderr {err[-500:]!r}")
        elif snapshot(copy) != before:
            failures.append(f"{name}: the run directory was changed")
    assert not failures, "\n".join(failures)


@pytest.mark.slow
def test_a_missing_replay_memory_is_refilled_only_when_asked(stopped_run, tmp_path, capsys):
    copy = tmp_path / "run"
    shutil.copytree(stopped_run, copy)
    shutil.rmtree(latest_checkpoint(copy) / "replay")
    step = step_of(read_manifest(latest_checkpoint(copy)))
    result = main_here(["--resume", str(copy), f"--timesteps={step + 400}",
                        "--refill-replay=true"], capsys)
    assert result.returncode == 0, result.stderr[-3000:]
    warning = one_line(result.stderr)
    assert warning.startswith("warning: the checkpoint holds no replay memory"), warning
    done = summary(copy)
    assert done["finished"] is True and done["steps"] == step + 400


# -- resume only extends; summary.json keeps the whole run -------------------------------------------


@pytest.mark.slow
def test_a_resume_keeps_the_config_and_the_whole_runs_figures(stopped_run, tmp_path, capsys):
    copy = tmp_path / "run"
    shutil.copytree(stopped_run, copy)
    config_before = json.loads((copy / "config.json").read_text())
    step = step_of(read_manifest(latest_checkpoint(copy)))
    result = main_here(["--resume", str(copy), f"--timesteps={step + 400}"], capsys)
    assert result.returncode == 0, result.stderr[-3000:]
    config_after = json.loads((copy / "config.json").read_text())
    assert config_after == {**config_before, "timesteps": step + 400}
    done = summary(copy)
    assert done["steps"] == step + 400 and done["steps_per_second"] > 0
    # The whole run's updates over its learning time: the first process's count as well.
    assert done["updates"] == (step + 400 - 400) // 4
    assert np.isclose(done["updates_per_second"] * 4, done["steps_per_second"], rtol=0.2)


@pytest.mark.slow
def test_a_signal_while_a_resume_reads_its_checkpoint_changes_nothing(stopped_run, tmp_path,
                                                                      capsys, monkeypatch):
    """Reading a 7 GB checkpoint takes a while; a SIGTERM then ends the resume at once, with
    the checkpoint still the latest and the CSVs untouched."""
    copy = tmp_path / "run"
    shutil.copytree(stopped_run, copy)
    before = snapshot(copy)
    real_resume = launch.resume

    def resume_signalled_midway(*args):
        os.kill(os.getpid(), signal.SIGTERM)  # as a scheduler would, during the read
        real_resume(*args)

    monkeypatch.setattr(launch, "resume", resume_signalled_midway)
    status = launch.main(["--resume", str(copy), "--timesteps=30000"], ALGO_FAST_DQN)
    assert status == 128 + signal.SIGTERM
    assert one_line(capsys.readouterr().err) == ("stopped before the resumed run began; "
                                                 "nothing was changed")
    assert snapshot(copy) == before


# -- the run directory's edges: a planted link, leftovers, a moved or deleted directory ---------


def test_a_planted_lock_link_is_refused_in_one_line_and_its_target_is_untouched(tmp_path,
                                                                               capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("someone else's file\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / ".lock").symlink_to(victim)
    status = launch.main([*FAST, "--timesteps=800", f"--logdir={run_dir}"], ALGO_FAST_DQN)
    err = capsys.readouterr().err
    assert status == 2, err[-3000:]
    assert f"{run_dir / '.lock'} is a symbolic link" in one_line(err)
    assert victim.read_text() == "someone else's file\n"
    assert sorted(path.name for path in run_dir.iterdir()) == [".lock"]


def resume_extending(copy: Path, capsys, steps: int = 400) -> Finished:
    """Resumes a copy of the stopped run for `steps` more steps (a run of seconds), in this
    process."""
    step = step_of(read_manifest(latest_checkpoint(copy)))
    return main_here(["--resume", str(copy), f"--timesteps={step + steps}"], capsys)


@pytest.mark.slow
def test_a_linked_episodes_csv_is_refused_on_resume_and_not_appended_to(stopped_run,
                                                                        tmp_path, capsys):
    copy = tmp_path / "run"
    shutil.copytree(stopped_run, copy)
    outside = tmp_path / "outside.csv"
    (copy / "episodes.csv").rename(outside)
    (copy / "episodes.csv").symlink_to(outside)
    before, outside_before = snapshot(copy), outside.read_bytes()
    result = resume_extending(copy, capsys)
    assert result.returncode == 2, result.stderr[-3000:]
    assert f"{copy / 'episodes.csv'}: it is a symbolic link" in one_line(result.stderr)
    assert outside.read_bytes() == outside_before
    assert snapshot(copy) == before


@pytest.mark.parametrize("name", ["checkpoint.tmp", "checkpoint.old"])
@pytest.mark.slow
def test_a_planted_checkpoint_link_is_refused_at_the_start(stopped_run, tmp_path, name,
                                                           capsys):
    copy = tmp_path / "run"
    shutil.copytree(stopped_run, copy)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("keep")
    (copy / name).symlink_to(outside, target_is_directory=True)
    before = snapshot(copy)
    result = resume_extending(copy, capsys)
    assert result.returncode == 2, result.stderr[-3000:]
    assert f"{copy / name} is a symbolic link" in one_line(result.stderr)
    assert "training on" not in result.stdout  # refused before anything was built
    assert sorted(path.name for path in outside.iterdir()) == ["victim.txt"]
    assert snapshot(copy) == before


@pytest.mark.slow
def test_a_manifest_that_leaves_out_a_linked_replay_file_is_refused(stopped_run, tmp_path,
                                                                      capsys):
    copy = tmp_path / "run"
    shutil.copytree(stopped_run, copy)
    checkpoint = latest_checkpoint(copy)
    outside = tmp_path / "cursor.npy"
    (checkpoint / "replay" / "cursor.npy").rename(outside)
    (checkpoint / "replay" / "cursor.npy").symlink_to(outside)
    resign(checkpoint, lambda manifest: manifest["files"].pop("replay/cursor.npy"))
    before = snapshot(copy)
    result = resume_extending(copy, capsys)
    assert result.returncode == 2, result.stderr[-3000:]
    assert re.search(r"manifest\.json does not list replay/cursor\.npy",
                     one_line(result.stderr)), result.stderr
    assert snapshot(copy) == before


def start_run_to_move(tmp_path: Path, run_dir: Path, timesteps: int) -> Launch:
    """A run with a checkpoint every 400 steps, off a terminal: it prints "checkpoint at
    step N" as each starts; waits for the first."""
    run = start(RUN_FAST_DQN, [*FAST, SMALL_BATCH, f"--timesteps={timesteps}", "--evaluate=400",
                               "--eval-episodes=2", "--eval-max-episode-steps=200",
                               "--checkpoint-every=400", f"--logdir={run_dir}"],
                tmp_path / "moved-run")
    wait_for_line(run, "checkpoint at step")
    return run


@pytest.mark.slow
def test_a_run_whose_directory_is_renamed_finishes_whole_in_its_new_place(tmp_path, capsys):
    run_dir, moved = tmp_path / "run", tmp_path / "run.moved"
    run = start_run_to_move(tmp_path, run_dir, timesteps=800)
    run_dir.rename(moved)  # while its first checkpoint is being written
    result = run.finish(timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_no_traceback(result)
    assert not run_dir.exists()
    assert f"files in {moved}" in result.stdout
    done = summary(moved)
    assert done["finished"] is True and done["steps"] == 800
    manifest = verify_checkpoint(latest_checkpoint(moved))
    assert step_of(manifest) == 800
    run_logs.check_logs_match(moved, 800, manifest["counters"]["games"]["episodes"],
                              manifest["evaluator"]["evaluations"])
    assert [int(row["timestep"]) for row in read_csv(moved / "evaluations.csv")] == [400, 800]
    assert len(list(moved.glob("events.out.tfevents.*"))) == 1
    assert sorted(path.name for path in moved.iterdir() if path.name.startswith("checkpoint")) \
        == ["checkpoint"]
    again = main_here(["--resume", str(moved)], capsys)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"{moved} is finished" in again.stdout


@pytest.mark.slow
def test_a_run_whose_directory_is_deleted_stops_in_one_line_and_recreates_nothing(tmp_path):
    run_dir = tmp_path / "run"
    run = start_run_to_move(tmp_path, run_dir, timesteps=1600)
    deadline = time.monotonic() + 30
    while run_dir.exists():  # as `rm -rf`: the run may add a file while it is removed
        shutil.rmtree(run_dir, ignore_errors=True)
        assert time.monotonic() < deadline, "the run directory could not be removed"
    result = run.finish(timeout=120)
    assert result.returncode == 1, result.stderr[-3000:]
    line = one_line(result.stderr)
    assert line == (f"error: the run directory {run_dir} was deleted while the run ran; the "
                    "run stops (nothing is written in its place)"), line
    # Its last line says it stopped, not "done:" (issue 36).
    last = result.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"stopped at step \d+ of 1600 by the error above; no files: the run "
                        r"directory was deleted", last), last
    assert not run_dir.exists()
