"""Bad input: one line on stderr, exit status 2, no traceback, nothing written."""

import subprocess
import sys
from pathlib import Path

import pytest

from fast_dqn.config import ALGO_DQN, ALGO_FAST_DQN
from fast_dqn.launch import main

REPO = Path(__file__).resolve().parents[1]


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
    (ALGO_DQN, ["--resume=/nonexistent/run", "--lr=0.1"], "only --timesteps may be given"),
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
    (["--concurrent=maybe"], "expected true/false"),
    (["--backend=gpu"], "invalid choice"),
    (["--timesteps=ten"], "invalid int value"),
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


@pytest.mark.parametrize("script", ["run_dqn.py", "run_fast_dqn.py"])
def test_help_shows_nature_defaults(script):
    result = subprocess.run([sys.executable, script, "--help"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    help_text = " ".join(result.stdout.split())
    assert "--target-update TARGET_UPDATE agent steps between target-network updates " \
           "(default: 10000)" in help_text
    assert ("--workers" in result.stdout) == (script == "run_fast_dqn.py")
