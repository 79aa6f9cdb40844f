"""The evaluation protocol of Nature DQN (Mnih et al. 2015, Methods, "Evaluation procedure"):
full games at epsilon 0.05 with the online network, each cut off after 5 minutes of play
(18,000 frames = 4,500 agent steps)."""

from __future__ import annotations

import csv
import errno
import json
import os
from pathlib import Path

import cv2
import numpy as np
import pytest

from fast_dqn.training_loops import DQN
from fast_dqn.config import Config
from fast_dqn.loop_interfaces import LoopParts
from fast_dqn.evaluation import Evaluated, Evaluator, evaluate
from fast_dqn.env_pools import PoolStopped
from fast_dqn.launch import make_eval_pool
from fast_dqn.replay_memory import ReplayMemory
from fast_dqn.run_dir import OpenDirectory, WriteFailed
from tests.cli_runs import VIDEO_EVAL_CAP
from tests.fakes import FakeRunLog, RecordingNetwork, ScriptedPool, Tape


def test_each_env_plays_exactly_one_whole_game_through_its_lives():
    lengths = [2, 7, 12]  # life losses every 3 steps do not end a game
    pool = ScriptedPool(lengths)
    queried: list[np.ndarray] = []

    def greedy(states: np.ndarray) -> np.ndarray:
        queried.append(states[:, -1, 0, 0].copy())  # which envs were asked about
        return np.zeros(len(states), dtype=np.int64)

    scores = evaluate(pool, greedy, epsilon=0.0, seed=0, rng=np.random.default_rng(0))
    # env i scores i + 1 per step for the length of its one game, nothing after it
    assert scores == [1 * 2, 2 * 7, 3 * 12]
    assert len(pool.actions) == max(lengths)
    # a finished game is not queried again
    assert [len(envs) for envs in queried] == [3] * 2 + [2] * 5 + [1] * 5
    assert list(queried[-1]) == [2]


def test_epsilon_replaces_the_greedy_action_at_the_given_rate():
    pool = ScriptedPool([4000] * 8, n_actions=4)
    greedy_action = 3
    evaluate(pool, lambda states: np.full(len(states), greedy_action), epsilon=0.05, seed=0,
             rng=np.random.default_rng(1))
    actions = np.concatenate(pool.actions)
    # with probability 0.05 a uniform action, which is the greedy one a quarter of the time
    off_greedy = np.mean(actions != greedy_action)
    assert off_greedy == pytest.approx(0.05 * 3 / 4, abs=0.006)
    assert set(np.unique(actions)) == {0, 1, 2, 3}


def test_a_run_evaluates_with_the_online_network_at_its_eval_epsilon(monkeypatch):
    config = Config(eval_episodes=3, eval_epsilon=0.05, seed=5)
    tape = Tape()
    network = RecordingNetwork(tape)
    network.n_actions = 4  # the scripted pools'
    pools = []

    def make_pool(should_stop) -> ScriptedPool:
        pools.append(ScriptedPool([5, 6, 9]))
        return pools[-1]

    seen = {}

    def recording_evaluate(pool, greedy, *, epsilon, seed, rng, should_stop=None,
                           recorder=None):
        seen["epsilon"] = epsilon
        return evaluate(pool, greedy, epsilon=epsilon, seed=seed, rng=rng)

    monkeypatch.setattr("fast_dqn.evaluation.evaluate", recording_evaluate)
    parts = LoopParts(config=config, learner=network, memory=ReplayMemory(100, np.random.default_rng(0)),
                      pool=ScriptedPool([10]), make_eval_pool=make_pool, run_log=FakeRunLog(),
                      rng=np.random.default_rng(0))
    loop = DQN(parts)
    loop.run_evaluation()
    assert seen["epsilon"] == 0.05
    queries = [use_target for _, kind, use_target, *_ in tape.events if kind == "query"]
    assert queries and not any(queries)  # the online network only
    assert [kind for _, kind, *_ in tape.events if kind != "query"] == []  # no train, no sync
    timestep, returns = loop.run_log.evaluations[0]
    assert returns == [1 * 5, 2 * 6, 3 * 9]
    assert len(pools) == 1 and len(pools[0].actions) == 9


def test_the_runs_evaluation_pool_cuts_games_off_at_the_evaluation_cap():
    """The pool a run evaluates with (fast_dqn.launch.make_eval_pool) stops each game at
    --eval-max-episode-steps, not at the 27,000-step training cap. A Pong player that never
    moves loses its game after about 800 steps, so a cap of 60 cuts every game."""
    config = Config(game="pong", eval_episodes=2, eval_max_episode_steps=60, seed=3)
    pool = make_eval_pool(config, should_stop=lambda: False)
    rounds = [0]

    def greedy(states: np.ndarray) -> np.ndarray:
        rounds[0] += 1
        return np.zeros(len(states), dtype=np.int64)  # NOOP

    try:
        scores = evaluate(pool, greedy, epsilon=0.0, seed=3, rng=np.random.default_rng(0))
    finally:
        pool.close()
    assert rounds[0] == 60
    assert len(scores) == 2 and all(-21 < score <= 0 for score in scores)


def test_a_stop_request_cuts_an_evaluation_short_and_it_is_not_counted():
    """A stop must not wait for 30 games of up to 4,500 steps: `evaluate` looks at the
    request before every step, and an evaluation cut short is neither logged nor counted."""
    pool = ScriptedPool([4500, 4500])
    asked = []

    def stop_after_10_steps() -> bool:
        asked.append(len(pool.actions))
        return len(pool.actions) >= 10

    greedy = lambda states: np.zeros(len(states), dtype=np.int64)  # noqa: E731
    with pytest.raises(PoolStopped):
        evaluate(pool, greedy, epsilon=0.05, seed=0, rng=np.random.default_rng(0),
                 should_stop=stop_after_10_steps)
    assert len(pool.actions) == 10

    log, pools = FakeRunLog(), []
    evaluator = Evaluator(Config(eval_episodes=2),
                          lambda should_stop: pools.append(ScriptedPool([4500, 4500])) or pools[-1],
                          log)
    evaluator.run(250_000, greedy, hours=1.0, should_stop=lambda: True)
    assert (evaluator.count, evaluator.evaluated_at, log.evaluations) == (0, 0, [])
    assert pools == []  # 30 games take seconds to build and reset: not for a stopping run
    assert evaluator.due(250_000)  # played again, whole, after a resume


def test_an_evaluation_whose_pool_is_stopped_while_made_is_not_counted():
    """`make_pool` (a `GroupedPool`) raises PoolStopped when the request comes between two
    groups of envs; the evaluation is then cut short like one stopped during its games."""
    stopping = [False]
    asked = []

    def make_pool(should_stop):
        stopping[0] = True  # the signal comes while the first group is made
        asked.append(should_stop())
        raise PoolStopped("stopped between two groups of environments")

    log = FakeRunLog()
    evaluator = Evaluator(Config(eval_episodes=256), make_pool, log)
    greedy = lambda states: np.zeros(len(states), dtype=np.int64)  # noqa: E731
    evaluator.run(250_000, greedy, hours=1.0, should_stop=lambda: stopping[0])
    assert asked == [True]  # the pool asks the running evaluation's request
    assert (evaluator.count, log.evaluations) == (0, [])
    assert evaluator.due(250_000)


def test_an_evaluations_line_gives_its_step_mean_min_max_and_time():
    """The line a run prints for each evaluation (issue 36: none was printed)."""
    line = Evaluated(6000, [-21.0, -19.0, -20.0], 14.26).line()
    assert line == ("evaluation at step 6000: mean -20.0 over 3 games (min -21.0, max -19.0), "
                    "14.3 s")


# -- the video of an evaluation's first game (--video-every) -----------------------------------

class ScreenSteps:
    """Stands in for a VideoRecorder: the step each screen written shows (ScriptedPool's
    `first_screen` paints env 0's step into its pixels)."""

    def __init__(self):
        self.steps: list[int] = []

    def write(self, screen: np.ndarray) -> None:
        self.steps.append(int(screen[0, 0, 0]))


@pytest.mark.parametrize("lengths", [[5, 9, 3], [9, 2]], ids=["others-longer", "first-longest"])
def test_the_video_gets_the_first_game_alone_one_screen_per_step(lengths):
    """As play records a game: its first screen and the screen after each step but its last,
    whether the other games end before or after it."""
    recorder = ScreenSteps()
    evaluate(ScriptedPool(lengths), lambda states: np.zeros(len(states), dtype=np.int64),
             epsilon=0.0, seed=0, rng=np.random.default_rng(0), recorder=recorder)
    assert recorder.steps == list(range(lengths[0]))


def video_frames(path: Path) -> int:
    capture = cv2.VideoCapture(str(path))
    try:
        return int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
    finally:
        capture.release()


@pytest.mark.parametrize("video_every, recorded", [
    (0, []), (1, [100, 200, 300, 400]), (2, [200, 400]), (3, [300]),
])
def test_every_nth_evaluation_records_its_first_game_into_the_run_directory(
        tmp_path, video_every, recorded):
    log = FakeRunLog()
    lines = []
    with OpenDirectory.at(tmp_path) as log.directory:
        evaluator = Evaluator(Config(eval_episodes=2, video_every=video_every),
                              lambda should_stop: ScriptedPool([7, 3]), log)
        for step in (100, 200, 300, 400):
            lines.append(evaluator.run(step, lambda s: np.zeros(len(s), np.int64), 0.0).line())
    videos = [tmp_path / f"eval-step{step}.mp4" for step in recorded]
    assert sorted(tmp_path.iterdir()) == sorted(videos)  # nor a temporary file
    assert [video_frames(video) for video in videos] == [7] * len(videos)  # the first game's
    # each recorded evaluation's line names its video
    assert [line.partition("; video ")[2] for line in lines] == [
        str(tmp_path / f"eval-step{step}.mp4") if step in recorded else ""
        for step in (100, 200, 300, 400)]


def test_a_stop_during_a_recorded_evaluation_leaves_no_file(tmp_path):
    """Regression guard: the video of an evaluation cut short is removed, temporary file and
    all (the evaluation is played again, whole, after a resume)."""
    pool = ScriptedPool([4500, 4500])
    seen: list[list[str]] = []

    def stop_after_10_steps() -> bool:
        seen.append(sorted(os.listdir(tmp_path)))
        return len(pool.actions) >= 10

    log = FakeRunLog()
    with OpenDirectory.at(tmp_path) as log.directory:
        evaluator = Evaluator(Config(eval_episodes=2, video_every=1), lambda stop: pool, log)
        result = evaluator.run(250_000, lambda s: np.zeros(len(s), np.int64), 1.0,
                               should_stop=stop_after_10_steps)
    assert result is None and len(pool.actions) == 10 and log.evaluations == []
    assert any(name.endswith(".tmp.mp4") for name in seen[-1])  # it was being written
    assert not list(tmp_path.iterdir())


def test_a_video_that_cannot_be_made_is_a_write_failure_and_the_evaluation_not_counted(
        tmp_path, monkeypatch):
    """A run reports a file it cannot write in one line, with the checkpoint to resume from
    (launch.write_failed_line): the video's file is such a file (play's too)."""
    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    log = FakeRunLog()
    with OpenDirectory.at(tmp_path) as log.directory:
        monkeypatch.setattr(log.directory, "open", no_space)
        evaluator = Evaluator(Config(eval_episodes=2, video_every=1),
                              lambda should_stop: ScriptedPool([7, 3]), log)
        with pytest.raises(WriteFailed) as error:
            evaluator.run(100, lambda s: np.zeros(len(s), np.int64), 0.0)
    assert str(error.value) == (f"cannot write {tmp_path / 'eval-step100.mp4'}: No space left "
                                "on device; free some disk space")
    assert (evaluator.count, log.evaluations) == (0, []) and not list(tmp_path.iterdir())


@pytest.mark.slow  # a real tiny run (conftest's video_run)
def test_a_run_with_video_every_records_the_first_game_of_every_nth_evaluation(video_run):
    """--video-every=2 with evaluations at steps 300 and 600: the second is recorded, into the
    run directory, and its first game (cut off at the evaluation cap) reads back whole."""
    assert json.loads((video_run / "config.json").read_text())["video_every"] == 2
    with open(video_run / "evaluations.csv") as file:
        assert [int(row["timestep"]) for row in csv.DictReader(file)] == [300, 600]
    assert sorted(path.name for path in video_run.iterdir() if "mp4" in path.name) == [
        "eval-step600.mp4"]
    capture = cv2.VideoCapture(str(video_run / "eval-step600.mp4"))
    try:
        frames = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
        ok, frame = capture.read()
    finally:
        capture.release()
    assert frames == VIDEO_EVAL_CAP
    assert ok and frame.shape == (420, 320, 3) and frame.std() > 0  # 2x2 per Atari pixel


def test_an_evaluation_of_one_game_says_one_game():
    """Regression (issue 46): a run with --eval-episodes=1 said "over 1 games"."""
    line = Evaluated(6000, [-21.0], 14.26).line()
    assert line == "evaluation at step 6000: mean -21.0 over 1 game (min -21.0, max -21.0), 14.3 s"
