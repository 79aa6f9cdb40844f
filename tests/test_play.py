"""Tests of `python -m fast_dqn.play`: a fake run directory, a short game, its video, bad input."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from fast_dqn import play
from fast_dqn.agent import RunToPlay, load_network, load_run
from fast_dqn.config import ALGO_DQN, Config
from fast_dqn.acting import FrameHistory
from fast_dqn.run_dir import OpenDirectory
from fast_dqn.video import VideoRecorder, VideoTarget
from tests.cli_runs import STOP_SECONDS, start, wait_for_line
from tests.fakes import RUN_SEED, flip_byte, write_checkpoint, write_run_dir
from tests.run_files import LONGEST_NAME, LONGEST_RUN_DIR, network_data, path_of_length, truncate

PONG_ACTIONS = 6
SAVED_SEED = 7  # the saved network's seed, so that restored weights differ from fresh ones


def write_fake_checkpoint(checkpoint: Path, manifest: dict | None = None) -> None:
    """A complete checkpoint's marker files without TensorFlow, for the cheap error paths."""
    (checkpoint / "network").mkdir(parents=True)
    (checkpoint / "manifest.json").write_text(json.dumps(manifest or {}))


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[np.ndarray]]:
    """A run directory with a real pong checkpoint; returns it and the saved online weights."""
    from fast_dqn.learner import Learner

    run_dir = write_run_dir(tmp_path_factory.mktemp("run"))
    network = Learner(PONG_ACTIONS, lr=2.5e-4, rho=0.95, epsilon=0.01,
                       seed=SAVED_SEED)
    write_checkpoint(run_dir, 1234, network.checkpoint().write)
    return run_dir, [variable.numpy() for variable in network.online.variables]


BROWSER_CODECS = {"avc1", "h264", "vp90", "vp09"}  # H.264 and VP9 (as read back): browsers play them


def video_fourcc(capture: "cv2.VideoCapture") -> str:
    code = int(capture.get(cv2.CAP_PROP_FOURCC))
    return "".join(chr((code >> shift) & 0xFF) for shift in (0, 8, 16, 24)).lower()


def test_play_prints_scores_and_writes_a_readable_video(trained_run, tmp_path, capsys):
    run_dir, _ = trained_run
    video = tmp_path / "game.mp4"
    status = play.main([str(run_dir), "--episodes", "1", "--video", str(video),
                        "--max-steps", "30", "--seed", "3"])
    out = capsys.readouterr().out
    assert status == 0
    assert "at step 1,234" in out
    assert "game 1/1: score " in out and "(30 steps, cut off)" in out
    assert "; 1 game, epsilon " in out and "mean score over 1 game: " in out
    assert [p.name for p in tmp_path.iterdir()] == ["game.mp4"]  # no temporary file left
    capture = cv2.VideoCapture(str(video))
    try:
        assert capture.get(cv2.CAP_PROP_FRAME_COUNT) == 30  # one screen per agent step
        assert capture.get(cv2.CAP_PROP_FPS) == pytest.approx(15)
        fourcc = video_fourcc(capture)
        ok, frame = capture.read()
    finally:
        capture.release()
    # Regression (issue 36): mp4v, which browsers and notebooks do not play inline
    assert fourcc in BROWSER_CODECS, fourcc
    if fourcc.startswith("vp"):  # no H.264 encoder in this OpenCV: the fallback is named
        assert "video codec: VP9 (vp09), as this OpenCV has no H.264 encoder" in out
    # each Atari pixel as 2x2 (4:2:0 colour keeps one value per 2x2 block)
    assert ok and frame.shape == (420, 320, 3)
    assert frame.std() > 0  # a picture, not a blank frame
    assert f"video: {video} (30 frames, 15 fps, " in out


def test_restores_the_online_weights_that_were_saved(trained_run):
    from fast_dqn.learner import Learner

    run_dir, saved = trained_run
    run = load_run(run_dir)
    network = load_network(run.config, PONG_ACTIONS, run.checkpoint)
    fresh = Learner(PONG_ACTIONS, lr=2.5e-4, rho=0.95, epsilon=0.01,
                     seed=RUN_SEED)
    restored = [variable.numpy() for variable in network.online.variables]
    assert len(restored) == len(saved) == 10
    assert all(np.array_equal(a, b) for a, b in zip(restored, saved))
    assert not np.array_equal(fresh.online.variables[0].numpy(), saved[0])


def test_a_checkpoint_of_another_game_is_bad_input(trained_run, tmp_path, capsys):
    run_dir, _ = trained_run
    other = write_run_dir(tmp_path / "breakout", game="breakout")  # 4 actions, not 6
    shutil.copytree(run_dir / "checkpoint", other / "checkpoint")  # a link would be refused
    assert_bad_input([str(other)], "cannot restore the online network", capsys)


@pytest.mark.parametrize("damage, message", [
    (lambda ckpt: truncate(network_data(ckpt)), "{data} holds {size} bytes; the manifest says"),
    (lambda ckpt: flip_byte(network_data(ckpt)), "{data} is damaged: CRC-32"),
    (lambda ckpt: (ckpt / "network" / "ckpt.index").unlink(), "ckpt.index is missing"),
], ids=["truncated", "flipped-byte", "deleted"])
def test_a_damaged_checkpoint_is_refused_in_one_line_naming_the_file(trained_run, tmp_path,
                                                                     capsys, damage, message):
    """Regression (issue 34): a truncated network file gave `IndexError: Read less bytes than
    requested`, a traceback: play read the checkpoint without the checks a resume makes."""
    run_dir = tmp_path / "run"
    shutil.copytree(trained_run[0], run_dir)
    checkpoint = run_dir / "checkpoint"
    damage(checkpoint)
    data = network_data(checkpoint)
    assert_bad_input([str(run_dir)], message.format(data=data, size=data.stat().st_size),
                     capsys)


def test_a_config_of_another_type_is_refused_in_one_line(tmp_path, capsys):
    write_run_dir(tmp_path, workers="4")  # a hand edit
    write_checkpoint(tmp_path, 5)
    assert_bad_input([str(tmp_path)], f"{tmp_path / 'config.json'}: 'workers' must be an "
                     'integer; got "4"', capsys)


def test_a_run_at_the_longest_path_plays_and_one_byte_longer_is_refused_in_one_line(
        trained_run, tmp_path, capsys):
    """The longest run directory a new run takes is played (TensorFlow reads its networks by
    their paths, checkpoint.old/ the longest); one byte longer, TensorFlow cannot read them,
    and play says why. Regression: "Failed to find any matching files" for files that were
    there, in a run directory of 4,075 characters."""
    run_dir = path_of_length(tmp_path, LONGEST_RUN_DIR)
    run_dir.parent.mkdir(parents=True)
    shutil.copytree(trained_run[0], run_dir)
    (run_dir / "checkpoint").rename(run_dir / "checkpoint.old")  # a crash between the renames
    network = run_dir / "checkpoint.old" / "network"
    # The names TensorFlow gave its files: LONGEST_NAME holds the longer.
    assert sorted(os.listdir(network)) == ["ckpt.data-00000-of-00001", "ckpt.index"]
    run = load_run(run_dir)
    load_network(run.config, PONG_ACTIONS, run.checkpoint)
    longer = run_dir.with_name(run_dir.name + "d")
    run_dir.rename(longer)
    assert_bad_input([str(longer)], f"the path of {longer} is too long for a run: TensorFlow "
                     f"opens {LONGEST_NAME} in it by a path of {LONGEST_RUN_DIR + 49:,} bytes", capsys)
    with pytest.raises(ValueError, match="cannot restore the online network"):
        load_network(run.config, PONG_ACTIONS, longer / "checkpoint.old")


def assert_bad_input(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        play.main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err.startswith("play: error: ") and err.count("\n") == 1, err
    assert message in err


@pytest.mark.parametrize("extra, message", [
    (["--episodes", "0"], "--episodes must be at least 1"),
    (["--epsilon", "1.5"], "--epsilon must be within [0, 1]"),
    (["--epsilon", "-0.1"], "--epsilon must be within [0, 1]"),
    (["--epsilon", "nan"], "--epsilon must be within [0, 1]"),
    (["--max-steps", "0"], "--max-steps must be at least 1"),
    (["--video", "/nonexistent-dir/out.mp4"], "does not exist"),
    (["--video", "{tmp}"], "is a directory"),
    (["--video", "{tmp}/out.avi"], "must name an .mp4 file"),
])
def test_bad_options_exit_2_with_one_line(tmp_path, capsys, extra, message):
    run_dir = write_run_dir(tmp_path / "run")
    write_fake_checkpoint(run_dir / "checkpoint")
    argv = [str(run_dir)] + [arg.format(tmp=tmp_path) for arg in extra]
    assert_bad_input(argv, message, capsys)
    assert not list(tmp_path.glob("*.mp4")) and not list(tmp_path.glob(".*"))


def test_bad_run_directories_exit_2_with_one_line(tmp_path, capsys):
    assert_bad_input([str(tmp_path / "missing")], "no run directory", capsys)
    assert_bad_input([str(tmp_path)], "config.json: not found", capsys)
    write_run_dir(tmp_path)
    assert_bad_input([str(tmp_path)], "has no complete checkpoint", capsys)
    (tmp_path / "checkpoint" / "network").mkdir(parents=True)  # no manifest: incomplete
    assert_bad_input([str(tmp_path)], "has no complete checkpoint", capsys)
    (tmp_path / "config.json").write_text("{not json")
    assert_bad_input([str(tmp_path)], "cannot read", capsys)


@pytest.mark.parametrize("complete, expected", [
    (("checkpoint",), "checkpoint"),
    (("checkpoint", "checkpoint.old"), "checkpoint"),
    (("checkpoint.old",), "checkpoint.old"),  # a crash between the two renames
])
def test_load_run_finds_the_latest_complete_checkpoint(tmp_path, complete, expected):
    run_dir = write_run_dir(tmp_path / "run")
    steps = {"checkpoint": 5, "checkpoint.old": 4}
    for name in complete:
        (tmp_path / name).mkdir()  # a checkpoint is written into a directory that exists
        write_checkpoint(tmp_path / name, steps[name])
        (tmp_path / name / "checkpoint").rename(run_dir / name)
    (run_dir / "checkpoint" / "network").mkdir(parents=True, exist_ok=True)  # else incomplete
    run = load_run(run_dir)
    assert run.checkpoint == run_dir / expected
    assert (run.config.game, run.algo, run.step) == ("pong", ALGO_DQN, steps[expected])


def test_load_run_resolves_another_spelling_of_the_game_and_refuses_an_unknown_one(tmp_path,
                                                                                   capsys):
    write_run_dir(tmp_path, game="ALE/Pong-v5")  # a hand-edited config.json
    write_checkpoint(tmp_path, 5)
    assert load_run(tmp_path).config.game == "pong"
    write_run_dir(tmp_path, game="pongg")
    assert_bad_input([str(tmp_path)], "unknown game 'pongg'", capsys)


@pytest.mark.slow  # starts `python -m fast_dqn.play`
def test_command_line_bad_input_has_no_traceback(tmp_path):
    result = subprocess.run([sys.executable, "-m", "fast_dqn.play", str(tmp_path / "none")],
                            capture_output=True, text=True, cwd=Path(__file__).parents[1],
                            timeout=120)
    assert result.returncode == 2
    assert result.stderr.startswith("play: error: no run directory")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_play_games_feeds_padded_states_and_chains_games():
    """Without a network: a recording greedy function sees the training loop's states."""
    pool = play.make_pool(Config(game="pong", noop_max=0), seed=1, max_steps=5)
    seen: list[np.ndarray] = []

    def greedy(states: np.ndarray) -> np.ndarray:
        seen.append(states.copy())
        return np.zeros(len(states), dtype=np.int64)

    results = play.play_games(pool, greedy, epsilon=0.0, rng=np.random.default_rng(0), games=2,
                              seed=1)
    pool.close()
    assert results == [play.GameResult(0.0, 5, True)] * 2
    assert len(seen) == 10
    for game_start in (seen[0], seen[5]):  # each game starts from one frame and zero padding
        assert not game_start[0, :-1].any() and game_start[0, -1].any()
    assert seen[4][0, 0].any()  # four frames into a game the stack is full
    expected = FrameHistory(1).reset(seen[0][0, -1][None])
    np.testing.assert_array_equal(seen[0], expected)


def test_video_recorder_leaves_nothing_behind_when_interrupted(tmp_path):
    path = tmp_path / "game.mp4"
    with OpenDirectory.at(tmp_path) as directory, pytest.raises(KeyboardInterrupt):
        with VideoRecorder(VideoTarget(directory, path.name), (210, 160)) as recorder:
            recorder.write(np.zeros((210, 160, 3), dtype=np.uint8))
            assert [p.suffix for p in tmp_path.iterdir()] == [".mp4"]  # the temporary file
            raise KeyboardInterrupt
    assert not list(tmp_path.iterdir())


def test_a_video_that_does_not_fit_on_its_disk_is_one_line_and_leaves_nothing(
        trained_run, tmp_path, small_disk, capsys):
    """Regression: on a full disk OpenCV drops the write errors, and play said `video: ...`
    and exited 0 over a file no player opens ("moov atom not found"). The same game is
    written first where it fits, then onto a real disk with room for half of it."""
    games = [str(trained_run[0]), "--max-steps", "60", "--seed", "3"]
    whole = tmp_path / "whole.mp4"
    assert play.main([*games, "--video", str(whole)]) == 0
    disk = small_disk(max(1, whole.stat().st_size // 2 // 1024))
    if disk is None:
        pytest.skip("a full disk needs a tmpfs mount (root)")
    assert shutil.disk_usage(disk).total < whole.stat().st_size
    capsys.readouterr()
    video = disk / "game.mp4"
    status = play.main([*games, "--video", str(video)])
    out, err = capsys.readouterr()
    assert status == 2, out + err
    assert err.splitlines()[-1] == (f"play: error: cannot write {video}: No space left on "
                                    "device; free some disk space"), err
    assert "Traceback" not in err and "video: " not in out
    assert not list(disk.iterdir())  # nor the temporary file


def test_a_video_whose_sync_fails_is_one_line_and_leaves_nothing(trained_run, tmp_path,
                                                                 monkeypatch, capsys):
    """The file system refuses the video's fsync (as a full network disk may): one line,
    not a traceback, and no file."""
    def refuse(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fsync", refuse)
    video = tmp_path / "game.mp4"
    status = play.main([str(trained_run[0]), "--max-steps", "5", "--video", str(video)])
    err = capsys.readouterr().err
    assert status == 2
    assert err.splitlines()[-1] == (f"play: error: cannot write {video}: "
                                    f"{os.strerror(errno.EIO)}"), err
    assert not list(tmp_path.iterdir())


@pytest.mark.slow  # starts `python -m fast_dqn.play`
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_stop_signal_during_the_video_exits_in_one_line_and_leaves_nothing(trained_run,
                                                                            tmp_path, signum):
    """Regression: play took only SIGINT, and SIGTERM (a scheduler) or SIGHUP (a closed
    terminal) killed it with its temporary video left in the run directory for good."""
    run_dir = tmp_path / "run"
    shutil.copytree(trained_run[0], run_dir)
    before = {path.name for path in run_dir.iterdir()}
    run = start("-m", ["fast_dqn.play", str(run_dir), "--video", "--episodes", "5",
                       "--max-steps", "100000"], tmp_path / "play")
    wait_for_line(run, "5 games")  # the network is loaded: the games and the video go on
    assert list(run_dir.glob(".play-step1234.*.tmp.mp4"))
    signalled = time.monotonic()
    run.process.send_signal(signum)
    result = run.finish(timeout=STOP_SECONDS, since=signalled)
    assert result.returncode == 128 + signum, result.stderr
    assert result.stderr.splitlines()[-1] == (f"play: stopped by {signum.name}; no video "
                                              "written"), result.stderr
    assert "Traceback" not in result.stderr and "mean score" not in result.stdout
    assert {path.name for path in run_dir.iterdir()} == before | {".lock"}


def test_video_alone_goes_into_the_run_directory_not_the_current_one(trained_run, tmp_path,
                                                                      monkeypatch, capsys):
    """Regression (issue 36): the video landed in the current directory (an untracked
    pong.mp4 in the checkout)."""
    run_dir = tmp_path / "run"
    shutil.copytree(trained_run[0], run_dir)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert play.main([str(run_dir), "--video", "--max-steps", "5"]) == 0
    video = run_dir / "play-step1234.mp4"  # the checkpoint's step, 1,234
    assert f"video: {video} (5 frames" in capsys.readouterr().out
    assert not list(elsewhere.iterdir())
    capture = cv2.VideoCapture(str(video))
    try:
        assert capture.get(cv2.CAP_PROP_FRAME_COUNT) == 5
    finally:
        capture.release()
    assert not [p for p in run_dir.iterdir() if ".tmp" in p.name]


def test_video_alone_is_refused_while_a_run_holds_the_directory(tmp_path, capsys):
    """A run directory belongs to the process that holds it: play does not write into a
    run's directory while the run (here, a lock held as a live run holds it) goes on."""
    run_dir = write_run_dir(tmp_path / "run")
    write_checkpoint(run_dir, 5)
    holder = "host otherhost pid 4242 since 2026-01-01T00:00:00"
    fd = os.open(run_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, holder.encode())
        assert_bad_input([str(run_dir), "--video"], f"cannot write the video into {run_dir}: "
                         f"{run_dir} is in use by another process ({holder})", capsys)
    finally:
        os.close(fd)
    assert not list(run_dir.glob("*.mp4")) and not list(run_dir.glob(".*.mp4"))


def test_a_training_run_with_video_every_and_no_codec_is_refused_before_it_starts(
        tmp_path, monkeypatch, capsys):
    """Regression (review of issue 44): a run given --video-every on an OpenCV that writes
    none of the codecs trained until its first recorded evaluation (250,000 steps with the
    defaults), then died with a traceback and no checkpoint. It is refused in one line, with
    exit status 2, before its run directory is made."""
    from fast_dqn import launch
    from tests.cli_runs import TINY

    # The video module launch calls into (another test may have imported fast_dqn afresh);
    # its probe's answer is cached, so the cache is emptied before and after.
    probe = launch.video_codec
    monkeypatch.setitem(probe.__wrapped__.__globals__, "VIDEO_CODECS", ())
    probe.cache_clear()
    run_dir = tmp_path / "run"
    try:
        status = launch.main([*TINY, "--timesteps=600", "--evaluate=300", "--eval-episodes=1",
                              "--eval-max-episode-steps=50", "--batch-size=4",
                              "--video-every=1", "--xla=off", f"--logdir={run_dir}"], ALGO_DQN)
    finally:
        probe.cache_clear()  # later tests probe the real codecs again
    err = capsys.readouterr().err
    assert status == 2, err
    assert "--video-every: this OpenCV writes none of the video codecs" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not run_dir.exists()


@pytest.mark.parametrize("step, replay_start, warned", [
    (0, 50_000, True), (50_000, 50_000, True), (50_001, 50_000, False), (1_234, 1_000, False),
    (None, 50_000, False),
])
def test_a_checkpoint_from_before_the_replay_start_gets_a_warning(step, replay_start, warned):
    """The first minibatch update comes at the step after --replay-start steps: a checkpoint
    at or before it holds the network as it was made."""
    run = RunToPlay(Config(replay_start=replay_start), ALGO_DQN, Path("checkpoint"), step)
    warning = play.untrained_warning(run)
    assert (warning is not None) == warned
    if warned:
        assert warning == (f"warning: the checkpoint is at step {step:,}, not past the replay "
                           f"start ({replay_start:,} random steps): its network has not been "
                           "trained")


def test_playing_an_untrained_checkpoint_warns_in_one_line(trained_run, capsys):
    """Regression (issue 36): a step-0 checkpoint played without a word. The fixture's
    checkpoint is at step 1,234, before the default replay start (50,000)."""
    assert play.main([str(trained_run[0]), "--max-steps", "3"]) == 0
    err = capsys.readouterr().err
    assert "warning: the checkpoint is at step 1,234, not past the replay start (50,000" in err
    assert err.count("\n") == 1


MAKE_GAMES = """
from fast_dqn import benchmark, play
from fast_dqn.config import Config
play.make_pool(Config(game="pong"), seed=0, max_steps=10).close()
print("actions", benchmark.game_actions(Config(game="breakout")))
"""


@pytest.mark.slow
def test_play_and_the_benchmark_make_their_games_without_the_ale_banner():
    """Regression (issue 36): play and the benchmark printed the ALE's banner ("A.L.E:
    Arcade Learning Environment ...", "[Powered by Stella]"), which the trainer does not. In a
    fresh process: the ALE prints it for an emulator made while its log level is Info."""
    done = subprocess.run([sys.executable, "-c", MAKE_GAMES], capture_output=True, text=True,
                          cwd=Path(__file__).parents[1], timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "actions 4"
    for stream in (done.stdout, done.stderr):
        assert "A.L.E" not in stream and "Stella" not in stream, stream


# -- fast_dqn.load: a trained run's agent from Python ------------------------------------------

BREAKOUT_ACTIONS = 4  # its minimal action set: NOOP, FIRE, RIGHT, LEFT


@pytest.mark.slow  # a real tiny run (conftest's video_run)
def test_load_acts_greedily_as_the_checkpoints_network_and_explores_at_epsilon(video_run):
    """The loaded agent's greedy actions are the argmax of Q computed apart from it: the
    checkpoint's online weights read into a freshly built network; at epsilon 0.05 about
    0.05 * 3/4 of the actions differ from them (a random action is the greedy one a quarter
    of the time), the same ones for the same seed."""
    import random

    import tensorflow as tf

    import fast_dqn
    from fast_dqn.checkpoints import network_prefix
    from fast_dqn.networks import build_nature_cnn

    states = np.random.default_rng(0).integers(0, 256, (64, 4, 84, 84), dtype=np.uint8)
    fresh = build_nature_cnn(BREAKOUT_ACTIONS, "online", random.Random(12345))
    initial = [variable.numpy() for variable in fresh.variables]
    status = tf.train.Checkpoint(online=fresh).read(network_prefix(video_run / "checkpoint"))
    status.expect_partial()
    assert not np.array_equal(fresh.variables[0].numpy(), initial[0])  # the weights were read
    expected = np.argmax(fresh(states, training=False).numpy(), axis=1)

    agent = fast_dqn.load(video_run, seed=5)
    assert agent.n_actions == BREAKOUT_ACTIONS and agent.run.step == 600
    np.testing.assert_array_equal(agent.act(states), expected)
    explored = np.concatenate([agent.act(states, epsilon=0.05) for _ in range(100)])
    assert np.mean(explored != np.tile(expected, 100)) == pytest.approx(0.05 * 3 / 4, abs=0.01)
    again = fast_dqn.load(video_run, seed=5)
    again.act(states)  # the same draws as above, in the same order
    np.testing.assert_array_equal(
        np.concatenate([again.act(states, epsilon=0.05) for _ in range(100)]), explored)
    with pytest.raises(ValueError, match=r"^states must be a uint8 array of shape "
                                         r"\(B, 4, 84, 84\); got float64 \(4, 84, 84\)$"):
        agent.act(np.zeros((4, 84, 84)))


def test_load_refuses_a_bad_run_directory_in_one_line(tmp_path):
    import fast_dqn

    not_a_run = tmp_path / "empty"
    not_a_run.mkdir()
    no_checkpoint = write_run_dir(tmp_path / "fresh")
    for run_dir, message in [(tmp_path / "missing", f"no run directory {tmp_path / 'missing'}"),
                             (not_a_run, f"cannot read {not_a_run / 'config.json'}: not found"),
                             (no_checkpoint, f"{no_checkpoint} has no complete checkpoint")]:
        with pytest.raises(ValueError) as error:
            fast_dqn.load(str(run_dir))
        assert str(error.value).startswith(message) and "\n" not in str(error.value)
