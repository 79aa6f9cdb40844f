"""Bad input: one line on stderr, exit status 2, no traceback, nothing written."""

import dataclasses
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fast_dqn import run_logs
from fast_dqn.run_dir import OpenDirectory, RunDirectory, write_failure
from fast_dqn.config import (ALGO_DQN, ALGO_FAST_DQN, MAX_SEED, Config, flag_name,
                             float_fields)
from fast_dqn.launch import main, prepare_config
from tests.cli_runs import ENV, REPO, SMALL_BATCH
from tests.run_files import LONGEST_NAME, LONGEST_RUN_DIR, path_of_length



BAD_INPUTS = [
    (ALGO_DQN, ["--game=pongg"], "unknown game 'pongg'; did you mean: pong"),
    (ALGO_FAST_DQN, ["--workers=0"], "--workers must be at least 1"),
    (ALGO_FAST_DQN, ["--workers=3"], "--workers (3) must divide --target-update"),
    (ALGO_DQN, ["--timesteps=-1"], "--timesteps must be at least 1"),
    (ALGO_DQN, ["--replay-capacity=0"], "--replay-capacity must be at least 1"),
    (ALGO_DQN, ["--batch-size=0"], "--batch-size must be at least 1"),
    (ALGO_DQN, ["--replay-start=30000", "--replay-capacity=20000"], "must not exceed"),
    (ALGO_DQN, ["--sticky-actions=1.5"], "--sticky-actions must be within [0, 1]"),
    (ALGO_DQN, ["--final-epsilon=2"], "--final-epsilon must be within [0, 1]"),
    (ALGO_DQN, ["--replay-capacity=1000000000000"], "lower --replay-capacity"),
    (ALGO_DQN, ["--resume=/nonexistent/run"], "cannot resume"),
    (ALGO_DQN, ["--resume=/nonexistent/run", "--lr=0.1"],
     "only --timesteps, --refill-replay and --device may be given"),
    (ALGO_FAST_DQN, ["--resume="], "--resume needs the run directory"),
    (ALGO_DQN, ["--resume=  "], "--resume needs the run directory"),
    (ALGO_FAST_DQN, ["--replay-start=0"], "--replay-start (0) must be at least --batch-size"),
    (ALGO_DQN, ["--replay-start=31"], "--replay-start (31) must be at least --batch-size (32)"),
    (ALGO_DQN, ["--replay-capacity=35", "--replay-start=32"],
     "--replay-capacity (35) must hold a minibatch and its frame history: at least 36"),
    (ALGO_FAST_DQN, ["--timesteps=4"], "--timesteps (4) must be at least --workers (8)"),
    # Issue 36: a Gymnasium id whose defaults are another protocol's says so.
    (ALGO_FAST_DQN, ["--game=ALE/Pong-v5"], "--game=ALE/Pong-v5 names Gymnasium's v5 "
                                            "defaults (sticky actions 0.25)"),
    (ALGO_DQN, ["--game=Pong-v4"], "repeat each action a random 2 to 4 frames"),
]


@pytest.mark.parametrize("algo,argv,message", BAD_INPUTS)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, algo, argv, message):
    logdir = tmp_path / "run"
    resuming = any(arg.startswith("--resume") for arg in argv)
    status = main(argv if resuming else argv + [f"--logdir={logdir}"], algo)
    err = capsys.readouterr().err
    assert status == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert not logdir.exists()


@pytest.mark.parametrize("argv,message", [
    (["--no-such-flag"], "unrecognized arguments"),
    (["--work=4"], "unrecognized arguments: --work=4"),  # no abbreviations of --workers
    (["--time=100"], "unrecognized arguments: --time=100"),
    (["--concurrent=maybe"], "expected true/false"),
    (["--backend=gpu"], "invalid choice"),
    (["--timesteps=ten"], "--timesteps: expected a whole number"),
])
def test_argparse_errors_are_one_line_and_exit_2(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        main(argv, ALGO_FAST_DQN)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_unwritable_logdir(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    status = main([f"--logdir={blocker / 'run'}"], ALGO_DQN)
    assert status == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert blocker.read_text() == "not a directory"


def test_existing_run_is_not_overwritten(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text("{}")
    assert main([f"--logdir={run_dir}"], ALGO_DQN) == 2
    assert "--resume" in capsys.readouterr().err
    assert (run_dir / "config.json").read_text() == "{}"


@pytest.mark.slow
@pytest.mark.parametrize("script", ["run_dqn.py", "run_fast_dqn.py"])
def test_entry_point_prints_no_traceback(tmp_path, script):
    result = subprocess.run(
        [sys.executable, script, "--game=nosuchgame", f"--logdir={tmp_path / 'run'}"],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") == 0
    assert "unknown game" in result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
@pytest.mark.parametrize("script", ["run_dqn.py", "run_fast_dqn.py"])
def test_help_shows_nature_defaults(script):
    result = subprocess.run([sys.executable, script, "--help"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    help_text = " ".join(result.stdout.split())
    assert "--target-update TARGET_UPDATE agent steps between target-network updates " \
           "(default: 10000)" in help_text
    assert ("--workers" in result.stdout) == (script == "run_fast_dqn.py")


# Issue 10, "A new user's first hour": each of these ended in a traceback (or, for the seed,
# in ale-py's pybind11 TypeError) instead of one line and exit status 2.
@pytest.mark.parametrize("script,flags,message", [
    ("run_fast_dqn.py", ["--seed=4294967296"], f"--seed must be within [0, {MAX_SEED}]"),
    ("run_dqn.py", ["--seed=18446744073709551616"], f"--seed must be within [0, {MAX_SEED}]"),
    ("run_fast_dqn.py", ["--lr=inf"], "--lr must be a finite number; got inf"),
    ("run_dqn.py", ["--progress-every=inf"], "--progress-every must be a finite number"),
    ("run_fast_dqn.py", ["--logdir=/proc/fast_dqn_run"],
     "run directory /proc/fast_dqn_run"),  # creating it fails although /proc looks writable
])
@pytest.mark.slow
def test_entry_point_bad_input_is_one_line(tmp_path, script, flags, message):
    given = any(flag.startswith("--logdir") for flag in flags)
    logdir = [] if given else [f"--logdir={tmp_path / 'run'}"]
    result = subprocess.run([sys.executable, script, *flags, *logdir], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert message in result.stderr
    assert not (tmp_path / "run").exists()
    assert not Path("/proc/fast_dqn_run").exists()


@pytest.mark.parametrize("value", ["inf", "-inf", "nan"])
@pytest.mark.parametrize("name", float_fields())
def test_non_finite_float_settings_are_refused(tmp_path, capsys, name, value):
    logdir = tmp_path / "run"
    status = main([f"{flag_name(name)}={value}", f"--logdir={logdir}"], ALGO_DQN)
    err = capsys.readouterr().err
    assert status == 2
    assert f"{flag_name(name)} must be a finite number" in err
    assert len(err.strip().splitlines()) == 1
    assert not logdir.exists()


def test_every_float_setting_is_checked_for_finiteness():
    assert {"lr", "rmsprop_epsilon", "discount", "progress_every",
            "sticky_actions"} <= set(float_fields())


@pytest.mark.slow
@pytest.mark.parametrize("algo", [ALGO_FAST_DQN, ALGO_DQN])
def test_largest_seed_runs_with_evaluations(tmp_path, algo):
    """Env seeds (seed + i) and evaluation seeds beyond ale-py's int range are folded into it."""
    logdir = tmp_path / "run"
    argv = [f"--seed={MAX_SEED}", "--game=pong", "--timesteps=200", "--replay-start=100",
            "--replay-capacity=1000", "--target-update=100", "--evaluate=100",
            "--eval-episodes=2", "--eval-max-episode-steps=20", "--checkpoint-every=0",
            "--checkpoint-replay=false", f"--logdir={logdir}"]
    if algo == ALGO_FAST_DQN:
        argv.append("--workers=2")  # its vector env's seeds: MAX_SEED and MAX_SEED + 1
    assert main(argv, algo) == 0
    summary = json.loads((logdir / "summary.json").read_text())
    assert summary["finished"] and summary["seed"] == MAX_SEED and summary["evaluations"] == 2


def _disk_full(directory, name, *args, **kwargs):
    """`OpenDirectory.write_bytes_atomic` on a full disk: how the run writes config.json."""
    raise write_failure(directory.path / name, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))


def test_failed_write_of_a_new_run_leaves_nothing_behind(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(OpenDirectory, "write_bytes_atomic", _disk_full)  # config.json
    logdir = tmp_path / "new" / "nested" / "run"
    assert main([f"--logdir={logdir}"], ALGO_DQN) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert f"cannot write {logdir / 'config.json'}: No space left on device" in err
    assert list(tmp_path.iterdir()) == []  # the directories it created are gone too


def test_logdir_with_a_tilde_is_the_home_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    config = prepare_config(["--logdir=~/runs/x"], ALGO_FAST_DQN)
    assert config.logdir == str(tmp_path / "runs" / "x")
    assert not (tmp_path / "runs").exists() and not Path("~").exists()


def test_failed_write_into_an_existing_directory_keeps_the_directory(tmp_path, capsys,
                                                                      monkeypatch):
    monkeypatch.setattr(OpenDirectory, "write_bytes_atomic", _disk_full)
    logdir = tmp_path / "run"
    logdir.mkdir()
    assert main([f"--logdir={logdir}"], ALGO_FAST_DQN) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert logdir.is_dir() and list(logdir.iterdir()) == []


def test_a_logdir_that_holds_other_files_is_refused_and_left_alone(tmp_path, capsys):
    """A new run takes a new or empty directory, as RunDirectory.create says. Regression: a
    run there replaced another program's `checkpoint/` (model.pt and all) at its first save."""
    logdir = tmp_path / "results"
    (logdir / "checkpoint").mkdir(parents=True)
    (logdir / "checkpoint" / "model.pt").write_text("weights")
    assert main([*SMOKE, f"--logdir={logdir}"], ALGO_DQN) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert f"{logdir} is not empty (it holds checkpoint); a new run takes a new or empty " \
        "directory: choose another --logdir" in err
    assert [str(path.relative_to(logdir)) for path in sorted(logdir.rglob("*"))] == [
        "checkpoint", "checkpoint/model.pt"]
    assert (logdir / "checkpoint" / "model.pt").read_text() == "weights"


def test_a_logdir_too_long_for_its_checkpoint_files_is_refused(tmp_path, capsys):
    """Regression: a run directory of 4,075 characters trained (it writes through
    /proc/self/fd), and its resume and play then failed with TensorFlow's "Failed to find any
    matching files" (ENAMETOOLONG: the path of a network file passed PATH_MAX)."""
    too_long = path_of_length(tmp_path, LONGEST_RUN_DIR + 1)
    assert main([*SMOKE, f"--logdir={too_long}"], ALGO_DQN) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert (f"TensorFlow opens {LONGEST_NAME} in it by a path of {LONGEST_RUN_DIR + 49:,} bytes, "
            f"and the system takes at most {LONGEST_RUN_DIR + 48:,} (PATH_MAX), which leaves "
            f"{LONGEST_RUN_DIR:,} bytes for the run directory's path; choose a shorter "
            "--logdir") in err
    assert list(tmp_path.iterdir()) == []
    longest = path_of_length(tmp_path, LONGEST_RUN_DIR)  # the longest that is taken
    assert prepare_config([*SMOKE, f"--logdir={longest}"], ALGO_DQN).logdir == str(longest)
    RunDirectory.create(longest).discard()
    assert list(tmp_path.iterdir()) == []


def test_failed_creation_of_the_csvs_is_one_line(tmp_path, capsys, monkeypatch):
    def refuse(path, *args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

    monkeypatch.setattr(run_logs, "open", refuse, raising=False)  # the CSVs' open
    logdir = tmp_path / "run"
    assert main([f"--logdir={logdir}"], ALGO_DQN) == 2
    err = capsys.readouterr().err
    assert f"cannot write {logdir / 'episodes.csv'}: Permission denied" in err
    assert len(err.strip().splitlines()) == 1
    assert not logdir.exists()


@pytest.mark.slow
def test_quiet_start_first_line_is_the_projects(tmp_path):
    """TensorFlow's C++ start-up lines (absl, oneDNN, cuInit) are held back on a healthy start."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("FAST_DQN_TF_LOGS", "TF_CPP_MIN_LOG_LEVEL")}
    result = subprocess.run(
        [sys.executable, "run_dqn.py", *SMOKE, SMALL_BATCH, f"--logdir={tmp_path / 'run'}"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        timeout=300)
    assert result.returncode == 0, result.stdout
    lines = result.stdout.splitlines()
    assert lines[0] == f"run directory: {tmp_path / 'run'}"
    assert lines[1].startswith("training on ")
    for noise in ("cuInit", "E0000", "I0000", "absl::InitializeLog", "oneDNN", "cuda drivers"):
        assert not any(noise in line for line in lines), (noise, result.stdout)


def test_a_resume_resolves_a_hand_edited_game_name(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    settings = {**dataclasses.asdict(Config(game="Pong")), "algo": ALGO_FAST_DQN}
    (run_dir / "config.json").write_text(json.dumps(settings))
    config = prepare_config([f"--resume={run_dir}"], ALGO_FAST_DQN)
    assert config.game == "pong"


@pytest.mark.parametrize("argv, line", [
    ([], None),
    (["--protocol=machado"], "protocol machado"),
    (["--protocol=machado", "--noop-max=30", "--double=true"],
     "protocol machado; changed by flags: --noop-max=30; Double DQN target"),
    (["--sticky-actions=0.25", "--dueling=true"],
     "changed by flags: --sticky-actions=0.25; dueling network"),
])
def test_a_run_says_in_one_line_how_it_departs_from_nature_dqn(argv, line, tmp_path):
    from fast_dqn.launch import variant_line
    assert variant_line(prepare_config([*argv, f"--logdir={tmp_path / 'run'}"],
                                       ALGO_DQN)) == line


# -- issue 34: --refill-replay, stdout that cannot be written, many workers --------------------

# The smallest serial run that trains: its first line is "run directory: ...", its second
# (after TensorFlow's import, seconds later) the device line. Tests add SMALL_BATCH where the
# run's length is not what they rely on (a pipe closed while it trains needs it to train).
SMOKE = ["--game=pong", "--timesteps=300", "--replay-start=100", "--replay-capacity=1000",
         "--evaluate=0"]


def test_refill_replay_on_a_new_run_is_refused(tmp_path, capsys):
    """--refill-replay has meaning only beside --resume (its help and docs/checkpoints.md say
    so); a new run given it used to run and save it in config.json for every resume."""
    logdir = tmp_path / "run"
    assert main([*SMOKE, "--refill-replay", f"--logdir={logdir}"], ALGO_DQN) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "--refill-replay only has meaning with --resume" in err
    assert not logdir.exists()


def start_smoke_run(logdir: Path, stdout, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "run_dqn.py", *SMOKE, *extra, f"--logdir={logdir}"],
                            cwd=REPO, env=ENV, stdout=stdout, stderr=subprocess.PIPE, text=True)


def assert_the_directory_takes_a_new_run(logdir: Path) -> None:
    """In this process (TensorFlow is imported once): the directory is under test here,
    not the process."""
    assert main([*SMOKE, SMALL_BATCH, f"--logdir={logdir}"], ALGO_DQN) == 0
    assert json.loads((logdir / "summary.json").read_text())["finished"] is True


@pytest.mark.slow
def test_a_pipe_closed_at_the_start_is_one_line_and_the_same_run_can_start_again(tmp_path):
    """`python run_dqn.py ... | head -1`: head reads the first line and exits. Regression
    (issue 34): a BrokenPipeError traceback at the device line, and a directory with .lock
    and config.json only, which no new run or resume would take."""
    logdir = tmp_path / "run"
    process = start_smoke_run(logdir, subprocess.PIPE)
    first = process.stdout.readline()
    process.stdout.close()
    err = process.stderr.read()
    status = process.wait(timeout=300)
    assert first == f"run directory: {logdir}\n"
    assert status == 2, err[-3000:]
    assert err.splitlines() == ["run_dqn.py: error: cannot write to standard output: Broken "
                                "pipe; stopped before the run began"], err[-3000:]
    assert not logdir.exists()  # discarded as a run that failed to start
    assert_the_directory_takes_a_new_run(logdir)


@pytest.mark.slow
def test_a_full_stdout_at_the_start_is_one_line_and_the_directory_can_be_used(tmp_path):
    """`python run_dqn.py ... >/dev/full`. Regression (issue 34): an OSError traceback at
    the "run directory:" line. A directory made beforehand is kept, empty."""
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    logdir = tmp_path / "run"
    logdir.mkdir()
    with open("/dev/full", "w") as full:
        process = start_smoke_run(logdir, full)
        err = process.stderr.read()
        status = process.wait(timeout=300)
    assert status == 2, err[-3000:]
    assert err.splitlines() == ["run_dqn.py: error: cannot write to standard output: No "
                                "space left on device; stopped before the run began"], err
    assert list(logdir.iterdir()) == []
    assert_the_directory_takes_a_new_run(logdir)


@pytest.mark.slow
def test_a_pipe_closed_while_the_run_trains_leaves_the_run_to_finish(tmp_path):
    """Once the run trains, a line that cannot be shown is not shown (as on a hung-up
    terminal) and the run finishes, exit 0, with nothing on stderr about the pipe: what
    issue 34 decided for output lost mid-run, which the progress line already did. (Only
    the last assertion, on config.json, failed before the fix.)"""
    logdir = tmp_path / "run"
    process = start_smoke_run(logdir, subprocess.PIPE, "--progress-every=0.05")
    for line in process.stdout:
        if line.startswith("step "):  # a progress line: the run trains
            break
    process.stdout.close()
    err = process.stderr.read()
    status = process.wait(timeout=300)
    assert status == 0, err[-3000:]
    assert "Traceback" not in err and "Exception ignored" not in err, err[-3000:]
    assert json.loads((logdir / "summary.json").read_text())["finished"] is True
    saved = json.loads((logdir / "config.json").read_text())
    assert "refill_replay" not in saved and "resume" not in saved  # resume-only settings


MANY_WORKERS = ["--game=pong", "--target-update=1000", "--replay-start=1000",
                "--replay-capacity=5000", "--timesteps=2000"]


def test_many_workers_are_announced_before_they_are_made(tmp_path, capsys, monkeypatch):
    """Regression (issue 34): --workers=1000 sat silent for minutes while its environments
    were made. The pool is not made here: the stand-in stops the run when it is asked."""
    from fast_dqn import launch

    asked = []

    def make_pool(config, num_envs, *args, **kwargs):
        asked.append((num_envs, capsys.readouterr().out))
        raise ValueError("not made in this test")

    monkeypatch.setattr(launch, "make_pool", make_pool)
    logdir = tmp_path / "run"
    assert main([*MANY_WORKERS, "--workers=1000", f"--logdir={logdir}"], ALGO_FAST_DQN) == 2
    [(num_envs, out)] = asked
    assert num_envs == 1000
    assert out.splitlines()[-1] == "making 1000 environments of pong (this takes a while) ..."
    assert not logdir.exists()


def test_workers_beyond_what_memory_holds_are_refused_before_anything_is_made(tmp_path,
                                                                             monkeypatch):
    """On a machine with 4 GB available: 500 environments fit (they take about 0.6 GB at
    1.2 MB each, measured), 2,000 (2.4 GB, beside 2 GB of headroom) do not."""
    from fast_dqn import launch

    monkeypatch.setattr(launch, "available_memory_bytes", lambda: 4 * 10**9)
    flags = ["--game=pong", "--target-update=10000", "--replay-start=10000",
             "--replay-capacity=20000", f"--logdir={tmp_path / 'run'}"]
    assert prepare_config([*flags, "--workers=500"], ALGO_FAST_DQN).workers == 500
    with pytest.raises(ValueError, match=r"^--workers=2000 environments need about .*; "
                                         r"lower --workers$"):
        prepare_config([*flags, "--workers=2000"], ALGO_FAST_DQN)
    assert not (tmp_path / "run").exists()
