"""End-to-end tests of interruption and --resume (docs/design.md §5), with tiny runs.

The entry points run as subprocesses from the repository root, on the CPU (where a seed fixes
a run bit for bit): a first SIGINT/SIGTERM stops a run at the end of its round with a
checkpoint and exit status 130/143; `--resume RUN_DIR` continues it. A run whose signal,
exit status or company of another process is not under test (a single resume, a diverging
run) calls the entry point's main in this process instead, to skip a TensorFlow import. One
test restores a checkpoint in this process and compares every array with the run that wrote
it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from fast_dqn import launch, resume
from fast_dqn.checkpoints import (CHECKPOINT, MANIFEST, latest_checkpoint, network_prefix,
                                  read_manifest, save_checkpoint)
from fast_dqn.config import ALGO_DQN, ALGO_FAST_DQN, CONFIG_VERSION, Config
from fast_dqn.replay_memory import ReplayMemory
from fast_dqn.run_dir import LOCK_FILE

from tests.cli_runs import (FAST, LINE_STOP, REPO, RUN_DQN, RUN_FAST_DQN, SMALL_BATCH, TINY,
                            Finished, assert_no_traceback, interrupt, read_csv, run_bytes,
                            run_cli, run_in_process, snapshot, start, step_of, summary,
                            without_hours)
from tests.run_files import path_of_length, write_stand_in_network


def assert_stopped_where_it_said(result: Finished, run_dir: Path) -> None:
    """A prompt stop, by the run's own records: it announced one stop ("stopping at step
    N: ...") and its checkpoint is at that step N, so it took no step after it saw the
    signal. (A run that hangs instead is killed by `interrupt`'s minute and fails.)"""
    stops = re.findall(r"^stopping at step (\d+): ", result.stdout, flags=re.MULTILINE)
    assert len(stops) == 1, result.stdout[-3000:]
    assert step_of(read_manifest(latest_checkpoint(run_dir))) == int(stops[0])


# -- SIGINT, then --resume --------------------------------------------------------------------

RESUMED_STEPS = 1600


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory) -> tuple[Path, Finished]:
    """A fast run with evaluations, stopped by SIGINT at its first periodic checkpoint: it
    sends the signal itself as it prints that checkpoint's line (tests/line_stop.py), so the
    stop lands there, before RESUMED_STEPS, however loaded the machine is."""
    run_dir = tmp_path_factory.mktemp("sigint") / "run"
    result = start(LINE_STOP, ["INT", "checkpoint at step 800", str(RUN_FAST_DQN), *FAST,
                               SMALL_BATCH, "--evaluate=800", "--eval-episodes=2",
                               "--eval-max-episode-steps=200", "--checkpoint-every=800",
                               "--timesteps=20000", f"--logdir={run_dir}"],
                   run_dir.parent / "run-interrupted").finish(timeout=120)
    return run_dir, result


# A run started under other code: copy b of the interrupted run says so, with a commit id
# that is no commit of this checkout.
OTHER_CODE = {"from_step": 0, "commit": "bf5bf59" + "0" * 33, "tree_changed": False,
              "changed_files": []}


@pytest.fixture(scope="module")
def resumed_twice(interrupted, tmp_path_factory) -> list[tuple[Path, Finished]]:
    """Two copies of the interrupted run, resumed side by side to RESUMED_STEPS; the second
    says it was started under other code (OTHER_CODE)."""
    run_dir, _ = interrupted
    root = tmp_path_factory.mktemp("resumed")
    copies = [root / "a", root / "b"]
    for copy in copies:
        shutil.copytree(run_dir, copy)
    config_b = json.loads((copies[1] / "config.json").read_text())
    (copies[1] / "config.json").write_text(json.dumps({**config_b,
                                                       "code_versions": [OTHER_CODE]}))
    runs = [start(RUN_FAST_DQN, ["--resume", str(copy), f"--timesteps={RESUMED_STEPS}"],
                  root / f"{copy.name}-resume") for copy in copies]
    return [(copy, run.finish(timeout=150)) for copy, run in zip(copies, runs)]


@pytest.mark.slow
def test_sigint_stops_with_a_checkpoint_and_status_130(interrupted):
    run_dir, result = interrupted
    assert result.returncode == 128 + signal.SIGINT, result.stderr[-3000:]
    assert_stopped_where_it_said(result, run_dir)
    assert_no_traceback(result)
    manifest = read_manifest(latest_checkpoint(run_dir))
    assert latest_checkpoint(run_dir) == run_dir / CHECKPOINT
    done = summary(run_dir)
    assert done["finished"] is False
    assert done["stopped_by_signal"] == signal.SIGINT
    # Stopped after the periodic checkpoint at 800: at it (a signal before the next round) or
    # after it.
    assert done["steps"] == step_of(manifest) >= 800
    assert done["updates"] == manifest["counters"]["updates"]


@pytest.mark.slow
def test_resume_finishes_and_continues_the_logs(interrupted, resumed_twice):
    run_dir, _ = interrupted
    before = read_csv(run_dir / "episodes.csv")
    stopped_at = step_of(read_manifest(latest_checkpoint(run_dir)))
    resumed_dir, result = resumed_twice[0]
    assert result.returncode == 0, result.stderr[-3000:]
    assert_no_traceback(result)
    # said before anything else (issue 46: it came after the run directory and the device)
    assert result.stdout.startswith(
        f"resuming from {resumed_dir / CHECKPOINT} at step {stopped_at}\n"), result.stdout
    done = summary(resumed_dir)
    assert done["finished"] is True
    assert done["steps"] >= RESUMED_STEPS
    assert done["stopped_by_signal"] is None

    rows = read_csv(resumed_dir / "episodes.csv")
    assert rows[:len(before)] == before  # nothing before the stop was lost or rewritten
    assert len(rows) > len(before)  # and games went on after it
    assert [int(row["episode"]) for row in rows] == list(range(1, len(rows) + 1))
    timesteps = [int(row["timestep"]) for row in rows]
    assert timesteps == sorted(timesteps)
    assert int(rows[len(before)]["timestep"]) > stopped_at
    hours = [float(row["hours"]) for row in rows]
    assert hours == sorted(hours)  # the clock continues too

    evaluations = [int(row["timestep"]) for row in read_csv(resumed_dir / "evaluations.csv")]
    assert evaluations == [800, 1600]  # every 800 steps, before and after the stop
    config = json.loads((resumed_dir / "config.json").read_text())
    assert config["timesteps"] == RESUMED_STEPS and config["evaluate"] == 800


def checkout_commit() -> str:
    """The commit of the checkout these tests run from, as git says it."""
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout.strip()


@pytest.mark.slow
def test_config_json_records_the_code_of_the_start_and_of_a_resume_under_other_code(
        interrupted, resumed_twice):
    """Issue 36: config.json records the commit the run ran; a resume under another commit
    goes on and adds it (with the step it took over at) to the list."""
    run_dir, _ = interrupted
    stopped_at = step_of(read_manifest(latest_checkpoint(run_dir)))
    started = json.loads((run_dir / "config.json").read_text())["code_versions"]
    assert len(started) == 1
    assert started[0]["from_step"] == 0 and started[0]["commit"] == checkout_commit()
    assert isinstance(started[0]["tree_changed"], bool)

    (dir_a, result_a), (dir_b, result_b) = resumed_twice
    assert result_b.returncode == 0, result_b.stderr[-3000:]
    versions = json.loads((dir_b / "config.json").read_text())["code_versions"]
    assert versions[0] == OTHER_CODE
    assert len(versions) == 2
    assert versions[1]["from_step"] == stopped_at
    assert versions[1]["commit"] == checkout_commit()
    # The same code as at the start: a clean tree adds nothing; a changed one cannot be
    # compared, and is added.
    same = json.loads((dir_a / "config.json").read_text())["code_versions"]
    assert same[0] == started[0]
    assert len(same) == (2 if started[0]["tree_changed"] else 1)


@pytest.mark.slow
def test_two_resumes_of_one_checkpoint_are_identical(resumed_twice):
    (dir_a, result_a), (dir_b, result_b) = resumed_twice
    assert result_a.returncode == result_b.returncode == 0, result_b.stderr[-3000:]
    for name in ("episodes.csv", "evaluations.csv"):
        rows_a, rows_b = read_csv(dir_a / name), read_csv(dir_b / name)
        assert rows_a, name
        assert without_hours(rows_a) == without_hours(rows_b), name
    summary_a, summary_b = summary(dir_a), summary(dir_b)
    for key in ("steps", "updates", "evaluations"):
        assert summary_a[key] == summary_b[key], key
    assert summary_a["last_evaluation"]["mean"] == summary_b["last_evaluation"]["mean"]
    manifest_a = read_manifest(dir_a / CHECKPOINT)
    manifest_b = read_manifest(dir_b / CHECKPOINT)
    for key in ("step", "updates", "games", "refill_until", "learning_steps"):
        assert manifest_a["counters"][key] == manifest_b["counters"][key], key
    for key in ("rng", "replay_rng", "files"):
        assert manifest_a[key] == manifest_b[key], key
    last_a, last_b = (manifest["evaluator"].pop("last_evaluation")
                      for manifest in (manifest_a, manifest_b))
    assert manifest_a["evaluator"] == manifest_b["evaluator"]
    assert without_hours([last_a]) == without_hours([last_b])  # hours: the wall clock


@pytest.mark.slow
@pytest.mark.parametrize("script, trainer_flags", [(RUN_FAST_DQN, FAST), (RUN_DQN, TINY)],
                         ids=["fast", "serial"])
def test_two_resumes_with_n_step_returns_and_priorities_are_identical(tmp_path, script,
                                                                      trainer_flags):
    """A checkpoint of a run with --n-step=3 --prioritized (at its end, step 800), resumed
    twice side by side to 1,600: the same rows, weights, replay arrays and priorities."""
    run_dir = tmp_path / "run"
    first = run_cli(script, [*trainer_flags, SMALL_BATCH, "--n-step=3", "--prioritized=true",
                             "--evaluate=400", "--eval-episodes=2",
                             "--eval-max-episode-steps=100", "--timesteps=800",
                             f"--logdir={run_dir}"], tmp_path / "first", timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    copies = [tmp_path / "a", tmp_path / "b"]
    for copy in copies:
        shutil.copytree(run_dir, copy)
    runs = [start(script, ["--resume", str(copy), "--timesteps=1600"], tmp_path / copy.name)
            for copy in copies]
    for run in runs:
        result = run.finish(timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
    digests = run_bytes(*copies)
    assert "checkpoint/replay/priorities.npy" in digests[0]
    assert digests[0] == digests[1]
    manifests = [read_manifest(copy / CHECKPOINT) for copy in copies]
    assert manifests[0]["counters"]["step"] == 1600
    for key in ("rng", "replay_rng", "replay_max_priority"):
        assert manifests[0][key] == manifests[1][key], key


def break_a_reward(checkpoint: Path) -> None:
    path = checkpoint / "replay" / "rewards.npy"
    rewards = np.load(path)
    rewards[0] = 5.0  # the memory stores rewards clipped to their sign
    np.save(path, rewards)


def damage_the_network(checkpoint: Path) -> None:
    Path(network_prefix(checkpoint) + ".index").write_bytes(b"damaged")


@pytest.mark.parametrize("damage, message", [
    (break_a_reward, "rewards.npy is damaged: CRC-32"),
    (damage_the_network, "ckpt.index holds 7 bytes; the manifest says"),
], ids=["replay", "network"])
@pytest.mark.slow
def test_a_damaged_checkpoint_is_refused_in_one_line(interrupted, tmp_path, capsys, damage,
                                                     message):
    """Every file is read back against the manifest's sizes and checksums before a resume
    changes anything; a damaged one is refused with status 2, naming the file (in this
    process: a traceback would be an exception here)."""
    run_dir, _ = interrupted
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    damage(latest_checkpoint(copy))
    status = launch.main(["--resume", str(copy), "--timesteps=3000"], ALGO_FAST_DQN)
    err = capsys.readouterr().err
    assert status == 2, err[-3000:]
    assert len(err.splitlines()) == 1, err[-3000:]
    assert message in err
    assert step_of(read_manifest(latest_checkpoint(copy))) < 3000  # it did not go on


@pytest.mark.slow
def test_serial_run_stops_and_resumes(tmp_path, capsys):
    run_dir = tmp_path / "run"
    result = interrupt(RUN_DQN, [*TINY, SMALL_BATCH, "--evaluate=0", "--checkpoint-every=600"],
                       run_dir, signal.SIGINT)
    assert result.returncode == 128 + signal.SIGINT, result.stderr[-3000:]
    assert_stopped_where_it_said(result, run_dir)
    assert_no_traceback(result)
    stopped = read_manifest(latest_checkpoint(run_dir))
    assert step_of(stopped) >= 600 and summary(run_dir)["finished"] is False

    # In this process: the resume's work and files are under test, not its process.
    resumed = run_in_process(RUN_DQN, ["--resume", str(run_dir), "--timesteps=1200"], capsys)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    done = summary(run_dir)
    assert done["finished"] is True and done["steps"] == 1200
    assert done["updates"] == (1200 - 400) // 4  # the serial loop never loses an update
    rows = read_csv(run_dir / "episodes.csv")
    assert [int(row["episode"]) for row in rows] == list(range(1, len(rows) + 1))
    timesteps = [int(row["timestep"]) for row in rows]
    assert timesteps == sorted(timesteps) and timesteps[-1] > step_of(stopped)


# -- SIGTERM, and a checkpoint without the replay memory ---------------------------------------


@pytest.mark.slow
def test_sigterm_gives_143_and_a_resume_without_replay_refills(tmp_path, capsys):
    run_dir = tmp_path / "run"
    result = interrupt(RUN_FAST_DQN, [*FAST, SMALL_BATCH, "--evaluate=0",
                                      "--checkpoint-every=400", "--checkpoint-replay=false"],
                       run_dir, signal.SIGTERM)
    assert result.returncode == 128 + signal.SIGTERM, result.stderr[-3000:]
    assert_stopped_where_it_said(result, run_dir)
    assert_no_traceback(result)
    assert summary(run_dir)["stopped_by_signal"] == signal.SIGTERM
    checkpoint = latest_checkpoint(run_dir)
    assert not (checkpoint / "replay").exists()
    stopped = read_manifest(checkpoint)

    resumed = run_in_process(RUN_FAST_DQN, ["--resume", str(run_dir), "--timesteps=1200"],
                             capsys)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_no_traceback(resumed)
    warnings = [line for line in resumed.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "holds no replay memory" in warnings[0]
    done = summary(run_dir)
    assert done["finished"] is True and done["steps"] >= 1200
    # Learning paused while the memory refilled (replay start = 400 steps), then went on.
    refilled = step_of(stopped) + 400
    assert done["updates"] == stopped["counters"]["updates"] + max(0, 1200 - refilled) // 4


# -- bad --resume command lines -----------------------------------------------------------------


@pytest.fixture
def saved_run(tmp_path) -> Path:
    """A run directory with config.json and a (fake) checkpoint of a fast_dqn run."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    config = Config(game="breakout", timesteps=1000, logdir=str(run_dir))
    (run_dir / "config.json").write_text(json.dumps({"algo": ALGO_FAST_DQN,
                                                     **dataclasses.asdict(config)}))
    save_checkpoint(run_dir, {"counters": {"step": 500}}, write_stand_in_network, None)
    return run_dir


def edit_manifest(run_dir: Path) -> None:
    """Changes a value by hand, without the manifest's checksum."""
    path = run_dir / CHECKPOINT / MANIFEST
    manifest = json.loads(path.read_text())
    manifest["counters"]["step"] = 499
    path.write_text(json.dumps(manifest))


def corrupt_manifest(run_dir: Path, text: str) -> None:
    (run_dir / CHECKPOINT / MANIFEST).write_text(text)


@pytest.mark.parametrize("script, args, prepare, message", [
    (RUN_FAST_DQN, ["--seed=3"], None,
     "only --timesteps, --refill-replay and --device may be given with --resume; got --seed"),
    (RUN_FAST_DQN, ["--timesteps=9", "--workers=2", "--lr=0.1"], None,
     "only --timesteps, --refill-replay and --device may be given with --resume; got --lr, "
     "--workers"),
    (RUN_FAST_DQN, ["--timesteps=-1"], None, "--timesteps must be at least 1"),
    (RUN_FAST_DQN, ["--timesteps=400"], None,
     "is at step 500 and --timesteps is 400; a resume only extends a run"),
    (RUN_FAST_DQN, ["--timesteps=500"], None, "manifest.json: 'updates' is missing"),
    (RUN_DQN, [], None, "was trained by fast_dqn, not dqn"),
    (RUN_FAST_DQN, [], lambda d: shutil.rmtree(d / CHECKPOINT), "has no complete checkpoint"),
    (RUN_FAST_DQN, [], lambda d: (d / "config.json").unlink(), "no readable config.json"),
    (RUN_FAST_DQN, [], lambda d: corrupt_manifest(d, '{"format_version": 99, "step": 5}'),
     "checkpoint format 99, expected 2"),
    (RUN_FAST_DQN, [], lambda d: corrupt_manifest(d, '{"step": '), "manifest"),
    (RUN_FAST_DQN, [], edit_manifest, "manifest.json is damaged"),
], ids=["other-flag", "other-flags", "bad-timesteps", "fewer-timesteps", "state-incomplete",
        "wrong-entry-point", "no-checkpoint", "no-config", "format-version", "torn-manifest",
        "edited-manifest"])
def test_bad_resume_is_one_line_with_status_2(saved_run, capsys, script, args, prepare,
                                              message):
    """In this process (the entry points' own refusals are test_cli's): each refusal comes
    before TensorFlow is needed."""
    if prepare is not None:
        prepare(saved_run)
    before = snapshot(saved_run)
    status = launch.main(["--resume", str(saved_run), *args],
                         ALGO_DQN if script == RUN_DQN else ALGO_FAST_DQN)
    err = capsys.readouterr().err
    assert status == 2, err[-3000:]
    assert len(err.splitlines()) == 1, err[-3000:]
    assert message in err
    assert snapshot(saved_run) == before  # nothing written


def every_path(directory: Path) -> list[str]:
    """Every path below `directory`, hidden ones (the lock) too."""
    return [str(path.relative_to(directory)) for path in sorted(directory.rglob("*"))]


@pytest.fixture
def runs_folder(saved_run) -> Path:
    """A folder of runs holding `saved_run` under a default name, with its lock, as a run
    leaves it."""
    run_dir = saved_run.parent / "runs" / "pong-fast_dqn-seed0-20250101-120000"
    run_dir.parent.mkdir()
    saved_run.rename(run_dir)
    (run_dir / LOCK_FILE).touch()
    return run_dir.parent


@pytest.mark.parametrize("given, what", [
    ("runs", "it is a folder of runs, not a run directory"),
    (f"runs/pong-fast_dqn-seed0-20250101-120000/{CHECKPOINT}",
     "it is inside the run directory runs/pong-fast_dqn-seed0-20250101-120000"),
    ("runs/pong-fast", "no such directory"),
], ids=["folder-of-runs", "checkpoint-folder", "name-cut-short"])
def test_a_resume_of_a_path_near_a_run_names_the_run_directory(runs_folder, capsys,
                                                              monkeypatch, given, what):
    """Regression (issue 46): --resume of the folder of runs, of a run's checkpoint folder
    or of a run's name cut short said "no readable config.json" and no more."""
    monkeypatch.chdir(runs_folder.parent)
    monkeypatch.setattr("sys.argv", ["/venv/bin/fast-dqn"])
    before = snapshot(runs_folder)
    status = launch.main(["--resume", given], ALGO_FAST_DQN)
    err = capsys.readouterr().err
    assert status == 2 and len(err.splitlines()) == 1, err
    assert err == (f"fast-dqn: error: cannot resume {given}: {what}; resume with fast-dqn "
                   "--resume runs/pong-fast_dqn-seed0-20250101-120000\n")
    assert snapshot(runs_folder) == before


def test_a_resume_of_a_folder_of_several_runs_names_them(runs_folder, capsys):
    for name in ("pong-fast_dqn-seed1-20250101-130000", "notes", "pong-dqn-seed0-2025",
                 "space_invaders-fast_dqn-seed0"):
        shutil.copytree(runs_folder / "pong-fast_dqn-seed0-20250101-120000", runs_folder / name)
    (runs_folder / "notes" / LOCK_FILE).unlink()  # a copy of a run's files is no run
    assert launch.main(["--resume", str(runs_folder)], ALGO_FAST_DQN) == 2
    err = capsys.readouterr().err
    assert err.endswith(f"cannot resume {runs_folder}: it is a folder of runs, not a run "
                        f"directory; resume one of these runs: {runs_folder}/pong-dqn-seed0-2025, "
                        f"{runs_folder}/pong-fast_dqn-seed0-20250101-120000, "
                        f"{runs_folder}/pong-fast_dqn-seed1-20250101-130000 and 1 more\n"), err


@pytest.mark.parametrize("argv0, called, command", [
    ("/venv/bin/fast-dqn-serial", "fast-dqn-serial", "fast-dqn"),
    ("python -m fast_dqn serial", "python -m fast_dqn serial", "python -m fast_dqn train"),
    ("/repo/run_dqn.py", "python /repo/run_dqn.py", "python /repo/run_fast_dqn.py"),
])
def test_a_resume_by_the_other_trainer_names_the_command_that_resumes_it(
        saved_run, capsys, monkeypatch, argv0, called, command):
    """Regression (issue 46): the serial trainer said "was trained by fast_dqn, not dqn" and
    named no command; the command is named as the user called the entry point."""
    monkeypatch.setattr("sys.argv", [argv0])
    assert launch.main(["--resume", str(saved_run)], ALGO_DQN) == 2
    err = capsys.readouterr().err
    assert err.endswith(f"{saved_run} was trained by fast_dqn, not dqn ({called}): resume it "
                        f"with {command} --resume {saved_run}\n"), err


@pytest.mark.parametrize("inside", [f"{CHECKPOINT}/inner", "inner"])
def test_a_new_run_inside_a_run_is_refused_and_the_run_still_resumes(saved_run, capsys,
                                                                      inside):
    """Regression: --logdir=RUN/checkpoint/inner was taken, and then --resume RUN (and play)
    refused RUN's checkpoint: ".../checkpoint/inner/.lock is not in the manifest"."""
    launch.main(["--resume", str(saved_run)], ALGO_FAST_DQN)  # takes the lock, as runs do
    resumed_before = capsys.readouterr().err  # this stand-in's state is where it stops
    assert "manifest.json: 'updates' is missing" in resumed_before
    before, paths = snapshot(saved_run), every_path(saved_run)
    status = launch.main([*FAST, "--timesteps=400", f"--logdir={saved_run / inside}"],
                         ALGO_FAST_DQN)
    err = capsys.readouterr().err
    assert status == 2 and len(err.splitlines()) == 1, err[-3000:]
    assert f"{saved_run / inside} is inside the run directory {saved_run} (it holds .lock " \
        "and config.json)" in err
    assert snapshot(saved_run) == before and every_path(saved_run) == paths
    launch.main(["--resume", str(saved_run)], ALGO_FAST_DQN)
    assert capsys.readouterr().err == resumed_before


def test_a_run_whose_path_is_too_long_to_resume_is_refused_saying_so(tmp_path, capsys,
                                                                     monkeypatch):
    """Regression: a run directory of 4,075 characters (trained: it writes through
    /proc/self/fd) failed to resume with TensorFlow's "Failed to find any matching files",
    for network files that were there: their paths passed PATH_MAX."""
    run_dir = path_of_length(tmp_path, 4075)
    run_dir.parent.mkdir(parents=True)
    run_dir.mkdir()
    config = Config(game="breakout", timesteps=1000, logdir=str(run_dir))
    (run_dir / "config.json").write_text(json.dumps({"algo": ALGO_FAST_DQN,
                                                     **config.saved_settings()}))
    save_checkpoint(run_dir, {"counters": {"step": 500}}, write_stand_in_network, None)
    monkeypatch.chdir(run_dir)  # the test reads the files by their short relative paths
    before = snapshot(Path("."))
    status = launch.main(["--resume", str(run_dir)], ALGO_FAST_DQN)
    err = capsys.readouterr().err
    assert status == 2 and len(err.splitlines()) == 1, err[-3000:]
    assert f"the path of {run_dir} is too long for a run: TensorFlow opens " \
        "checkpoint/network/ckpt.index in it by a path of 4,105 bytes" in err
    assert err.endswith("move the run directory to a shorter path\n")
    assert snapshot(Path(".")) == before


def test_resume_of_a_directory_that_is_not_a_run(tmp_path, capsys):
    status = launch.main(["--resume", str(tmp_path / "missing")], ALGO_FAST_DQN)
    err = capsys.readouterr().err
    assert status == 2
    assert len(err.splitlines()) == 1
    assert "cannot resume" in err
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize("key, value, wanted", [
    ("workers", "4", 'an integer; got "4"'),
    ("workers", None, "an integer; got null"),
    ("workers", True, "an integer; got true"),
    ("lr", "x", 'a number; got "x"'),
    ("game", 5, "a string; got 5"),
    ("double", "yes", 'true or false; got "yes"'),
])
def test_a_hand_edited_config_of_another_type_is_one_line_with_status_2(saved_run, capsys, key,
                                                                         value, wanted):
    """Regression (issue 34): TypeError or AttributeError tracebacks (exit 1), and "yes"
    taken as true. In this process: nothing here loads TensorFlow."""
    path = saved_run / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), key: value}))
    before = snapshot(saved_run)
    status = launch.main(["--resume", str(saved_run)], ALGO_FAST_DQN)
    err = capsys.readouterr().err
    assert status == 2 and len(err.splitlines()) == 1, err
    assert f"cannot resume {saved_run}: {path}: {key!r} must be {wanted}" in err
    assert snapshot(saved_run) == before and not (saved_run / ".lock").exists()


@pytest.mark.parametrize("edit, wanted", [
    ({"timesteps": 10**30}, "'timesteps' must be at most 9223372036854775807"),
    ({"timesteps": -5}, "'timesteps' must be at least 1; got -5"),
    ({"lr": 0.0}, "'lr' must be positive; got 0.0"),
    ({"workers": 3}, "'workers' (3) must divide 'target_update' (10000)"),
    ({"seed": None}, "'seed' is missing"),
    ({"double": None}, "'double' is missing"),
], ids=["timesteps-1e30", "timesteps-negative", "lr-zero", "workers-divisor", "seed-deleted",
        "double-deleted"])
def test_a_hand_edited_config_a_flag_would_refuse_is_one_line_naming_the_key(saved_run, capsys,
                                                                              edit, wanted):
    """Regression: "timesteps": 10**30 trained (ETA 2e23 days); -5 was refused as
    "--timesteps", a flag this resume was not given; a deleted setting took its default.
    (None deletes the key.)"""
    path = saved_run / "config.json"
    saved = {**json.loads(path.read_text()), "config_version": CONFIG_VERSION,  # as runs write
             **edit}
    path.write_text(json.dumps({key: value for key, value in saved.items()
                                if value is not None}))
    before = snapshot(saved_run)
    status = launch.main(["--resume", str(saved_run)], ALGO_FAST_DQN)
    err = capsys.readouterr().err
    assert status == 2 and len(err.splitlines()) == 1, err
    assert f"cannot resume {saved_run}: {path}: {wanted}" in err
    assert snapshot(saved_run) == before and not (saved_run / ".lock").exists()


def test_a_setting_added_since_an_older_config_json_takes_its_default(saved_run, capsys):
    """A config.json without "config_version" is of version 1, written before --double and
    the other settings of config.SETTINGS_ADDED_AFTER[1] existed: its run resumes."""
    path = saved_run / "config.json"
    saved = json.loads(path.read_text())
    assert "config_version" not in saved  # the fixture writes version 1, as older runs did
    path.write_text(json.dumps({key: value for key, value in saved.items()
                                if key != "double"}))
    assert launch.main(["--resume", str(saved_run)], ALGO_FAST_DQN) == 2
    assert "manifest.json: 'updates' is missing" in capsys.readouterr().err  # past config.json


def test_refill_replay_is_a_resume_flag_not_a_saved_setting(tmp_path, capsys):
    """Regression (issue 34): config.json kept --refill-replay, so after its replay memory
    was deleted a run that had once been given the flag refilled at every resume, where the
    same run without it was refused. Here config.json holds it, as such a run's does."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    config = Config(game="breakout", timesteps=1000, logdir=str(run_dir), refill_replay=True)
    (run_dir / "config.json").write_text(json.dumps({"algo": ALGO_FAST_DQN,
                                                     **dataclasses.asdict(config)}))
    save_checkpoint(run_dir, {"counters": {"step": 500}}, write_stand_in_network,
                    ReplayMemory(8, np.random.default_rng(0)).state_dict())
    shutil.rmtree(run_dir / CHECKPOINT / "replay")
    assert launch.main(["--resume", str(run_dir)], ALGO_FAST_DQN) == 2
    err = capsys.readouterr().err
    assert re.search(f"{re.escape(str(run_dir / CHECKPOINT / 'replay'))}/\\w+\\.npy is missing",
                     err), err
    # Given again, the flag lets the checkpoint pass without its memory, to the next check
    # (this stand-in checkpoint has no counters to resume from).
    assert launch.main(["--resume", str(run_dir), "--refill-replay"], ALGO_FAST_DQN) == 2
    assert "manifest.json: 'updates' is missing" in capsys.readouterr().err


# -- divergence ---------------------------------------------------------------------------------


def network_is_finite(checkpoint: Path) -> bool:
    import tensorflow as tf
    reader = tf.train.load_checkpoint(network_prefix(checkpoint))
    for name in reader.get_variable_to_shape_map():
        value = np.asarray(reader.get_tensor(name))
        if np.issubdtype(value.dtype, np.floating) and not np.isfinite(value).all():
            return False
    return True


@pytest.mark.parametrize("script, args", [
    # Fast: the loss is checked at every sync point, and checkpoints are taken only there.
    (RUN_FAST_DQN, [*FAST, "--checkpoint-every=400"]),
    # Serial: the loss is checked at target updates (learning starts at step 100; checks at
    # steps 300, 500, ...), checkpoints fall between them (steps 100, 200, 300, ...).
    (RUN_DQN, [*TINY, "--replay-start=100", "--target-update=200", "--checkpoint-every=100"]),
], ids=["fast", "serial"])
@pytest.mark.slow
def test_divergence_stops_with_status_1_and_a_good_checkpoint(tmp_path, capsys, script, args):
    """In this process: the status main returns is the one the run script exits with."""
    run_dir = tmp_path / "run"
    result = run_in_process(script, [*args, SMALL_BATCH, "--evaluate=0", "--lr=1e30",
                                     "--timesteps=2000", f"--logdir={run_dir}"], capsys)
    assert result.returncode == 1, result.stderr[-3000:]
    assert_no_traceback(result)
    match = re.search(r"error: training diverged at step (\d+): .*--lr", result.stderr)
    assert match, result.stderr[-3000:]
    diverged_at = int(match.group(1))
    assert summary(run_dir)["finished"] is False
    checkpoint = latest_checkpoint(run_dir)
    assert checkpoint is not None  # the flags put a checkpoint before the first loss check
    assert step_of(read_manifest(checkpoint)) <= diverged_at
    assert network_is_finite(checkpoint), "the last checkpoint holds the diverged network"


# -- exact restore, in this process ------------------------------------------------------------


def stop_when(loop, step: int, updates: int, done: threading.Event) -> threading.Thread:
    """Sends this process SIGINT (as Ctrl-C would) once `loop` has passed `step` and its
    trainer has made `updates` minibatch updates since the last target sync."""
    per_epoch = loop.config.target_update // loop.config.train_freq
    made = [0]  # the trainer's updates, counted as it makes them
    update = loop.learner.update

    def counted_update(batches, count: int):
        td_errors = update(batches, count)
        made[0] += count
        return td_errors

    loop.learner.update = counted_update

    def watch() -> None:
        while not done.is_set():
            if loop.counters.step >= step and made[0] % per_epoch >= updates:
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.01)

    thread = threading.Thread(target=watch, name="stopper", daemon=True)
    thread.start()
    return thread


def variables(values) -> list[np.ndarray]:
    return [np.array(v.numpy()) for v in values]


def assert_all_equal(actual: list[np.ndarray], expected: list[np.ndarray], what: str) -> None:
    assert len(actual) == len(expected), what
    for i, (a, e) in enumerate(zip(actual, expected)):
        np.testing.assert_array_equal(a, e, err_msg=f"{what} #{i}")


@pytest.mark.slow
def test_resume_restores_every_piece_of_state_exactly(tmp_path):
    from fast_dqn import launch
    from fast_dqn.run_logs import RunLogs

    run_dir = tmp_path / "run"
    # Calls of 4 updates, so that the stop lands while the target lags: with the default 64
    # an epoch of 100 updates is two calls, and 4 runs out of 4 stopped with the target
    # equal to the online network.
    argv = [*FAST, "--evaluate=400", "--eval-episodes=2", "--eval-max-episode-steps=200",
            "--checkpoint-every=0", "--timesteps=20000", "--updates-per-call=4",
            f"--logdir={run_dir}"]
    config = launch.prepare_config(argv, ALGO_FAST_DQN)
    previous = signal.signal(signal.SIGINT, lambda *_: None)  # a late signal does no harm
    done = threading.Event()
    try:
        run_dir.mkdir()
        run_log = RunLogs(run_dir)
        run_log.write_config({"algo": ALGO_FAST_DQN, **dataclasses.asdict(config)})
        run_log.open()
        loop, device = launch.build_loop(config, ALGO_FAST_DQN, run_log)
        # Mid-epoch (the first epoch of learning is steps 400-800): the target lags.
        stopper = stop_when(loop, step=600, updates=5, done=done)
        try:
            status = launch.run(loop, run_log, device)
        finally:
            done.set()
            stopper.join()
        games = loop.counters.games.state()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert status == 128 + signal.SIGINT
    original = loop
    assert original.counters.updates > 0 and original.evaluator.count >= 1

    resumed_config = launch.prepare_config(["--resume", str(run_dir)], ALGO_FAST_DQN)
    checkpoint, manifest = resume.verified_checkpoint(resumed_config, ALGO_FAST_DQN)
    restored, _ = launch.build_loop(resumed_config, ALGO_FAST_DQN, RunLogs(run_dir))
    try:
        launch.resume(restored, manifest, checkpoint)
    finally:
        restored.close()
    assert restored.counters.games.state() == games

    # Networks and every optimizer variable (slots and the iteration count).
    net, net2 = original.learner, restored.learner
    online, target = variables(net.online.variables), variables(net.target.variables)
    assert any((o != t).any() for o, t in zip(online, target)), "test needs target != online"
    assert_all_equal(variables(net2.online.variables), online, "online")
    assert_all_equal(variables(net2.target.variables), target, "target")
    assert_all_equal(variables(net2.optimizer.variables), variables(net.optimizer.variables),
                     "optimizer")
    assert int(net2.optimizer.iterations.numpy()) == original.counters.updates

    # Counters, averages and both random generators (the loop's and the replay memory's).
    state, state2 = original.state(), restored.state()
    for clock in ("hours", "learning_seconds"):  # the clocks go on from the stop
        assert state2["counters"].pop(clock) >= manifest["counters"][clock] > 0
        del state["counters"][clock]
    assert state2 == state
    assert (restored.counters.step, restored.counters.updates) == \
        (original.counters.step, original.counters.updates)
    assert restored.rng.random(4).tolist() == original.rng.random(4).tolist()
    assert restored.memory.rng.random(4).tolist() == original.memory.rng.random(4).tolist()

    # The replay memory (the resumed run ends the newest episode where it stood).
    original.memory.close_open_episode()
    memory, memory2 = original.memory.state_dict(), restored.memory.state_dict()
    assert sorted(memory2) == sorted(memory)
    assert int(memory["size"]) > 0
    for name in memory:
        np.testing.assert_array_equal(memory2[name], memory[name], err_msg=name)


def test_an_evaluation_skipped_by_a_stop_is_made_up_at_the_sync_point_of_an_uninterrupted_run(
        monkeypatch):
    """Regressions: a stop between an evaluation period's end and the next sync point lost
    that evaluation for good; then its resume made it at once, at the stopped step (270),
    where an uninterrupted run makes it at the sync point (300), with other weights."""
    import numpy as np

    from fast_dqn.training_loops import FastDQN
    from fast_dqn.loop_interfaces import LoopParts
    from fast_dqn.config import Config
    from fast_dqn.replay_memory import ReplayMemory
    from tests.synthetic_env import CorridorPool
    from tests.fakes import FakeRunLog, RecordingNetwork, Tape

    # Sync points every 100 steps; evaluations at the first one at or after each multiple of
    # 250: 300 and 500.
    config = Config(timesteps=600, replay_start=100, target_update=100, evaluate=250,
                    replay_capacity=2000, workers=2, exploration_steps=100, eval_episodes=2)

    def make_loop(pool):
        return FastDQN(LoopParts(
            config=config, learner=RecordingNetwork(Tape()),
            memory=ReplayMemory(config.replay_capacity, np.random.default_rng(0)), pool=pool,
            make_eval_pool=lambda should_stop: CorridorPool(2), run_log=FakeRunLog(),
            rng=np.random.default_rng(1)))

    def evaluated_at(loop) -> list[int]:
        return [timestep for timestep, _ in loop.run_log.evaluations]

    def stopping_pool(at_step: int):
        class StoppingPool(CorridorPool):
            def send(self, actions):  # the signal comes while this round steps
                super().send(actions)
                if loop.counters.step >= at_step:
                    loop.stop.signal_number = 2  # as the SIGINT handler does
        return StoppingPool(2)

    uninterrupted = make_loop(CorridorPool(2))
    uninterrupted.act_and_learn()
    assert evaluated_at(uninterrupted) == [300, 500]

    loop = first = make_loop(stopping_pool(268))
    first.act_and_learn()
    assert first.counters.step == 270 and evaluated_at(first) == []

    second = make_loop(CorridorPool(2))
    second.restore(first.state())
    second.act_and_learn()
    assert evaluated_at(second) == [300, 500]
    # Resumed twice, the second time from a stop inside the epoch after the stop.
    loop = again = make_loop(stopping_pool(284))
    again.restore(first.state())
    again.act_and_learn()
    assert again.counters.step == 286 and evaluated_at(again) == []
    third = make_loop(CorridorPool(2))
    third.restore(again.state())
    third.act_and_learn()
    assert evaluated_at(third) == [300, 500]

    # A stop during the evaluation at 300 (the sync point): its resume makes it at once.
    # Stopped right after it, a checkpoint at the resumed step is written all the same, so
    # that it counts that evaluation.
    at_300 = make_loop(CorridorPool(2))
    at_300.evaluator.run = _stop_instead(at_300)
    at_300.act_and_learn()
    assert at_300.counters.step == 300 and evaluated_at(at_300) == []
    saved = []
    fourth = make_loop(CorridorPool(2))
    fourth._save_checkpoint = lambda state, unstored: saved.append(state["counters"]["step"])
    fourth.restore(at_300.state())
    fourth.evaluator.run = _then_stop(fourth.evaluator.run, fourth)
    fourth.run()
    assert evaluated_at(fourth) == [300]
    assert saved == [300]

    # Regression: that evaluation made the run forget its checkpoint, so a full disk at the
    # checkpoint after it said "no checkpoint had been written yet" (seen on a real small
    # disk after a resume), though the one resumed from was intact.
    from fast_dqn import launch
    from fast_dqn.run_dir import WriteFailed

    def disk_full(state, unstored):
        raise WriteFailed(Path("run/checkpoint.tmp/replay/frames.npy"),
                          "No space left on device", disk_full=True)

    fifth = make_loop(CorridorPool(2))
    fifth._save_checkpoint = disk_full
    fifth.restore(at_300.state())
    fifth.evaluator.run = _then_stop(fifth.evaluator.run, fifth)
    with pytest.raises(WriteFailed) as error:
        fifth.run()
    assert evaluated_at(fifth) == [300]
    line = launch.write_failed_line(error.value, fifth, Path("run"))
    assert "the last checkpoint (step 300) in run/checkpoint is intact" in line, line
    # the command that resumes it, as the run was started (issue 46: only "--resume run")
    monkeypatch.setattr("sys.argv", ["/venv/bin/fast-dqn"])
    line = launch.write_failed_line(error.value, fifth, Path("run"))
    assert line.endswith("is intact: resume with fast-dqn --resume run"), line


def _stop_instead(loop):
    """An evaluation cut short by a stop (as by a SIGINT while its games play)."""
    def run(*args, **kwargs):
        loop.stop.signal_number = 2
        return None

    return run


def _then_stop(run_evaluation, loop):
    """An evaluation after which the run is asked to stop (as by a SIGTERM right then)."""
    def run(*args, **kwargs):
        run_evaluation(*args, **kwargs)
        loop.stop.signal_number = 15

    return run


def test_a_refill_after_a_resume_without_replay_survives_the_next_resume():
    """Regression: the refill offset was not checkpointed, so a second resume trained the
    minibatches the refill had skipped all at once."""
    import numpy as np

    from fast_dqn.training_loops import DQN
    from fast_dqn.loop_interfaces import LoopParts
    from fast_dqn.config import Config
    from fast_dqn.replay_memory import ReplayMemory
    from tests.synthetic_env import CorridorPool
    from tests.fakes import FakeRunLog, RecordingNetwork, Tape

    config = Config(timesteps=400, replay_start=50, target_update=50, evaluate=0,
                    replay_capacity=1000, exploration_steps=50)

    def make_loop():
        return DQN(LoopParts(
            config=config, learner=RecordingNetwork(Tape()),
            memory=ReplayMemory(config.replay_capacity, np.random.default_rng(0)),
            pool=CorridorPool(1), make_eval_pool=None, run_log=FakeRunLog(),
            rng=np.random.default_rng(1)))

    first = make_loop()
    first.config = config.replace(timesteps=200)
    first.act_and_learn()
    second = make_loop()
    second.restore(first.state())
    second.counters.start_refill()  # as launch.resume does without a saved replay memory
    second.config = config.replace(timesteps=300)
    second.act_and_learn()
    third = make_loop()
    third.restore(second.state())
    third.act_and_learn()
    # 150 learning steps before the refill, 50 refill steps without updates, 150 after.
    assert first.counters.updates == (200 - 50) // 4
    assert third.counters.updates == first.counters.updates + (400 - 200 - 50) // 4


def cut_short_loop(timesteps: int, tape, stop=None, network=None, save_checkpoint=None):
    """A tiny FastDQN on the corridor env whose epochs are 100 steps (25 updates) long."""
    from fast_dqn.training_loops import FastDQN
    from fast_dqn.loop_interfaces import LoopParts
    from fast_dqn.replay_memory import ReplayMemory
    from tests.synthetic_env import CorridorPool
    from tests.fakes import FakeRunLog, RecordingNetwork

    # One update per learner call: a stop between calls ends the made-up updates after any.
    config = Config(timesteps=timesteps, replay_start=100, target_update=100, evaluate=0,
                    replay_capacity=2000, workers=2, exploration_steps=100, updates_per_call=1)
    return FastDQN(LoopParts(
        config=config, learner=network or RecordingNetwork(tape),
        memory=ReplayMemory(config.replay_capacity, np.random.default_rng(0)),
        pool=CorridorPool(2), make_eval_pool=None, run_log=FakeRunLog(),
        rng=np.random.default_rng(1), save_checkpoint=save_checkpoint, stop=stop))


def stopped_before_its_last_updates():
    """A run stopped at step 300 (a sync point) with the epoch's last 5 updates not made, as
    its checkpoint holds it: the memory, the state, and the epoch's transitions held apart.
    The learner's 45th update waits for the samplers to reach step 300 and for the stop to
    be taken, so the stop falls between the epoch's last step and its last update."""
    import time

    from fast_dqn.stop_request import StopRequest
    from tests.fakes import RecordingNetwork, Tape

    stop = StopRequest()
    saved = []

    class StopsInTheFinalWindow(RecordingNetwork):
        def update(self, minibatches, count):
            super().update(minibatches, count)
            if self.online_version == (300 - 100) // 4 - 5:
                while first.counters.step < 300:
                    time.sleep(0.002)
                stop.signal_number = 2  # as the SIGINT handler sets it
                while not first.learner_thread._abandon.is_set():
                    time.sleep(0.002)

    def save(state, unstored):
        saved.append(({name: np.array(array) for name, array in
                       first.memory.state_dict().items()}, state, unstored))

    first = cut_short_loop(400, Tape(), stop, StopsInTheFinalWindow(Tape()), save)
    first.run()
    memory, state, unstored = saved[-1]
    assert state["counters"]["step"] == 300
    assert state["counters"]["updates"] == (300 - 100) // 4 - 5
    assert unstored is not None  # the epoch 200-300, with the pieces' context rows
    return memory, state, unstored


def resumed(timesteps: int, saved, tape, stop=None, network=None, save_checkpoint=None):
    from tests.fakes import fill_memory
    memory_state, state, unstored = saved
    loop = cut_short_loop(timesteps, tape, stop, network, save_checkpoint)
    fill_memory(loop.memory, memory_state)
    loop.restore(state)
    loop.hold_unstored(unstored)
    return loop


def stopping_after_two_updates(tape, stop):
    """A recording network that requests `stop` once it has made two updates, as a SIGINT
    taken then would."""
    from tests.fakes import RecordingNetwork

    class StoppedAfterTwoUpdates(RecordingNetwork):
        def update(self, minibatches, count):
            super().update(minibatches, count)
            if self.online_version == 2:
                stop.signal_number = 2  # as the SIGINT handler sets it

    return StoppedAfterTwoUpdates(tape)


def test_a_stop_between_an_epochs_last_step_and_its_last_update_is_made_up_on_resume():
    """Regression: a stop that came while the trainer finished an epoch whose steps were all
    taken left the boundary's target sync undone for good (the resumed run went straight to
    the next boundary). Now the resumed run first makes the epoch's missing updates, then
    the sync, before it acts."""
    from tests.fakes import Tape

    tape = Tape()
    second = resumed(400, stopped_before_its_last_updates(), tape)
    second.act_and_learn()
    events = [event[1] for event in tape.main_thread()]
    assert events[:6] == ["train"] * 5 + ["sync"]  # before the first query of the samplers
    assert second.counters.updates == (400 - 100) // 4


def test_a_stop_during_the_made_up_updates_ends_them_and_the_next_resume_finishes_them():
    """Regression: the updates a resumed run makes up before it acts (above) did not look at
    the stop request, so a Ctrl-C waited for all of them (up to 2,500: a minute or two on a
    CPU, seen on a README run). Now the request ends them between two calls, nothing acts,
    the target stays frozen, and a resume of the same checkpoint ends as if never stopped."""
    from fast_dqn.stop_request import StopRequest
    from tests.fakes import RecordingNetwork, Tape

    saved = stopped_before_its_last_updates()
    stop = StopRequest()
    tape = Tape()
    network = stopping_after_two_updates(tape, stop)
    checkpoints = []
    stopped = resumed(400, saved, tape, stop, network,
                      save_checkpoint=lambda state, unstored: checkpoints.append(
                          (stopped.memory.state_dict(), state, unstored)))
    stopped.run()
    assert [event[1] for event in tape.main_thread()] == ["train", "train"]
    assert stopped.counters.updates == (300 - 100) // 4 - 3
    assert network.target_version == 0 and stopped.counters.step == 300
    # The stop's checkpoint holds the two updates made; the three owed stay owed.
    assert len(checkpoints) == 1
    assert checkpoints[0][1]["counters"]["updates"] == (300 - 100) // 4 - 3

    never_stopped_tape, again_tape = Tape(), Tape()
    never_stopped = resumed(400, saved, never_stopped_tape)
    never_stopped.act_and_learn()
    restored_network = RecordingNetwork(again_tape)
    restored_network.online_version = 2  # as the stop's checkpoint holds it
    again = resumed(400, checkpoints[0], again_tape, network=restored_network)
    again.act_and_learn()
    made_up = [event[1] for event in never_stopped_tape.main_thread()]
    assert made_up[:6] == ["train"] * 5 + ["sync"]
    # Two of the five made before the stop, the other three after the second resume, and
    # from there the same run.
    assert again_tape.main_thread() == never_stopped_tape.main_thread()[2:]
    assert again.counters.updates == never_stopped.counters.updates
    for name, array in never_stopped.memory.state_dict().items():
        np.testing.assert_array_equal(again.memory.state_dict()[name], array, err_msg=name)


def test_a_stopped_and_resumed_run_writes_one_training_value_per_step():
    """Regression (issue 46): the stopped process wrote its partial window's train/loss at
    the stopped step, and the resumed one wrote the rest of that window at the same step,
    so TensorBoard held two values there (0.01178 and 0.00399 on a README run)."""
    from fast_dqn.stop_request import StopRequest
    from tests.fakes import Tape

    stop = StopRequest()
    checkpoints = []
    stopped = resumed(400, stopped_before_its_last_updates(), Tape(), stop,
                      stopping_after_two_updates(Tape(), stop),
                      save_checkpoint=lambda state, unstored: checkpoints.append(
                          (stopped.memory.state_dict(), state, unstored)))
    stopped.run()
    finished = resumed(400, checkpoints[-1], Tape())
    finished.run()
    assert finished.finished()
    steps = [step for loop in (stopped, finished) for step, scalars in loop.run_log.scalars
             if "train/loss" in scalars]
    assert 300 in steps  # the window the stop cut short, written once, by the resumed run
    assert len(steps) == len(set(steps)), steps
    every_step = [step for loop in (stopped, finished) for step, _ in loop.run_log.scalars
                  if "train/epsilon" in _]
    assert len(every_step) == len(set(every_step)), every_step
