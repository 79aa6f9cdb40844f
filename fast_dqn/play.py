"""Watch a trained agent: full games with a run's latest checkpoint, optionally on video.

    python -m fast_dqn.play RUN_DIR [--episodes N] [--epsilon 0.05] [--video out.mp4]
                                    [--seed S] [--max-steps N]

The games are played as the Nature evaluation plays them (Mnih et al., 2015): the online
network, epsilon-greedy with epsilon = 0.05, full games (all lives) through the same
single-env Atari pipeline and state padding rule the agent was trained on, with the run's
own settings from `RUN_DIR/config.json`. Each game's raw (unclipped) score and the mean are
printed. `--video` records the raw 210x160 RGB screen, one screen per agent step, as an MP4 at
15 fps, which is real time at frame skip 4 on the 60 Hz Atari; the file is written beside its
destination under a temporary name and renamed into place when complete.

Bad input (no run directory, config or checkpoint, a count or probability out of range, a
video path that cannot be written) is reported in one line on stderr with exit status 2. So
is a damaged checkpoint: before it is read, every file its manifest lists is checked against
the manifest's size and CRC-32, as `--resume` checks it (a replay memory that is missing as a
whole is let pass: playing does not read it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import secrets
import statistics
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Sequence

import cv2
import numpy as np

from fast_dqn.atari import AtariEnv, GameSettings, make_atari_env, resolve_game
from fast_dqn.checkpoints import (MANIFEST, CheckpointError, latest_checkpoint, network_prefix,
                                  verify_checkpoint)
from fast_dqn.config import FRAME_SKIP, Config, OneLineErrorParser, add_device_flag
from fast_dqn.acting import FrameHistory, epsilon_greedy
from fast_dqn.evaluation import GreedyFn
from fast_dqn.quiet_tensorflow import select_device
from fast_dqn.run_dir import CONFIG_FILE

if TYPE_CHECKING:  # the network module imports TensorFlow: only after the cheap checks
    from fast_dqn.q_network import QNetwork

EVAL_EPSILON = 0.05  # Mnih et al. (2015): the evaluation policy's epsilon
ATARI_HZ = 60  # emulator frames per second of the real console
VIDEO_FPS = ATARI_HZ // FRAME_SKIP  # 15: one screen per agent step plays in real time
VIDEO_FOURCC = "mp4v"
VIDEO_SUFFIX = ".mp4"  # OpenCV picks the container by the file name's suffix

Policy = Callable[[np.ndarray], int]


class RunToPlay(NamedTuple):
    """What `RUN_DIR` provides: the run's settings and its latest complete checkpoint."""

    config: Config
    algo: str  # which trainer wrote it ("dqn" or "fast_dqn"); the network is the same
    checkpoint: Path  # the checkpoint directory (`checkpoint/` or `checkpoint.old/`)
    step: int | None  # agent step at which it was written, if its manifest says


class GameResult(NamedTuple):
    """One full game (all lives)."""

    score: float  # raw game score, summed unclipped rewards
    steps: int  # agent steps (4 frames each)
    cut_off: bool  # ended by the episode cap rather than by the game


# --------------------------------------------------------------------------------------------
# Command line and run directory


def build_parser() -> OneLineErrorParser:
    parser = OneLineErrorParser(
        prog="play", description="Plays full Atari games with a trained run's online network "
        "(epsilon-greedy, Nature evaluation protocol) and prints the scores.")
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR",
                        help="run directory with config.json and a checkpoint")
    parser.add_argument("--episodes", type=int, default=1,
                        help="full games (all lives) to play (default: 1)")
    parser.add_argument("--epsilon", type=float, default=EVAL_EPSILON,
                        help="probability of a random action (default: 0.05, the Nature "
                        "evaluation value)")
    parser.add_argument("--video", type=Path, default=None, metavar="OUT.mp4",
                        help=f"write an MP4 of the RGB screen ({VIDEO_FPS} fps = real time)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the games' no-ops and the exploration (default: the "
                        "run's seed)")
    parser.add_argument("--max-steps", type=int, default=None,
                        help="agent steps after which a game is cut off (default: the run's "
                        "max_episode_steps)")
    add_device_flag(parser)
    return parser


def check_args(args: argparse.Namespace) -> None:
    """Raises ValueError with a one-line message for options out of range."""
    if args.episodes < 1:
        raise ValueError(f"--episodes must be at least 1; got {args.episodes}")
    if not 0.0 <= args.epsilon <= 1.0:  # also rejects nan
        raise ValueError(f"--epsilon must be within [0, 1]; got {args.epsilon}")
    if args.seed is not None and args.seed < 0:
        raise ValueError(f"--seed must be 0 or more; got {args.seed}")
    if args.max_steps is not None and args.max_steps < 1:
        raise ValueError(f"--max-steps must be at least 1; got {args.max_steps}")
    if args.video is not None:
        check_video_path(args.video)


def check_video_path(path: Path) -> None:
    """Raises ValueError unless an MP4 can be created at `path`.

    Checked up front because OpenCV reports a file it cannot open only by `isOpened()` and
    by warnings on stderr.
    """
    if path.is_dir():
        raise ValueError(f"--video {path} is a directory; name a file in it")
    if path.suffix.lower() != VIDEO_SUFFIX:
        raise ValueError(f"--video must name an {VIDEO_SUFFIX} file; got {str(path)!r}")
    parent = path.parent
    if not parent.is_dir():
        raise ValueError(f"cannot write --video {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"cannot write --video {path}: directory {parent} is not writable")


def load_run(run_dir: Path) -> RunToPlay:
    """Reads the run's settings, finds its latest complete checkpoint and verifies it.

    Raises:
        ValueError: no such directory, no readable config.json (or a setting of another
            type in it), an unknown game, no complete checkpoint, or a damaged one (the
            message names the file).
    """
    if not run_dir.is_dir():
        raise ValueError(f"no run directory {run_dir}")
    saved = _read_json(run_dir / CONFIG_FILE)
    if not isinstance(saved, dict) or "game" not in saved:
        raise ValueError(f"{run_dir / CONFIG_FILE} does not name a game; is it a run's config?")
    try:
        config = Config.from_saved(saved)
    except ValueError as error:  # a hand edit
        raise ValueError(f"{run_dir / CONFIG_FILE}: {error}") from None
    config = config.replace(game=resolve_game(config.game))  # a hand-edited name, too
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise ValueError(f"{run_dir} has no complete checkpoint (looked for "
                         f"checkpoint/{MANIFEST} and checkpoint.old/{MANIFEST})")
    try:
        manifest = verify_checkpoint(checkpoint, replay_optional=True)
    except CheckpointError as error:
        raise ValueError(str(error)) from None
    counters = manifest.get("counters")
    step = counters.get("step") if isinstance(counters, dict) else None
    return RunToPlay(config, str(saved.get("algo", "?")), checkpoint,
                     step if isinstance(step, int) else None)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:  # JSONDecodeError and UnicodeDecodeError included
        reason = "not found" if isinstance(error, FileNotFoundError) else _one_line(error)
        raise ValueError(f"cannot read {path}: {reason}") from None


def _one_line(error: BaseException | str) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


# --------------------------------------------------------------------------------------------
# Environment, network, video


def make_env(config: Config, *, seed: int, max_steps: int) -> AtariEnv:
    """The run's single-env Nature pipeline (its no-ops, sticky actions, interpolation)."""
    return make_atari_env(GameSettings.of_run(config, max_steps), seed=seed)


def load_network(config: Config, n_actions: int, checkpoint: Path) -> "QNetwork":
    """Builds the run's Q-network and restores its online weights from `checkpoint`.

    Raises:
        ValueError: the checkpoint is unreadable or does not fit the network (e.g. another
            game's action count).
    """
    from fast_dqn.q_network import make_q_network

    network = make_q_network(config, n_actions)
    network.restore_online(network_prefix(checkpoint))
    return network


class VideoRecorder:
    """Writes RGB screens to an MP4 (fourcc mp4v) atomically.

    Frames go to a temporary file beside `path`; leaving the `with` block normally renames it
    over `path`, leaving it by an exception removes it, so `path` is never half-written.
    """

    def __init__(self, path: Path, frame_size: tuple[int, int], fps: float = VIDEO_FPS):
        """`frame_size` is (height, width) of the RGB screens, as numpy shapes them."""
        self.path = path
        self.frames = 0
        self._temp = path.with_name(f".{path.stem}.{os.getpid()}.{secrets.token_hex(4)}"
                                    f".tmp{VIDEO_SUFFIX}")
        height, width = frame_size
        fourcc = cv2.VideoWriter_fourcc(*VIDEO_FOURCC)
        self._writer = cv2.VideoWriter(str(self._temp), fourcc, fps, (width, height))
        if not self._writer.isOpened():
            self._discard()
            raise ValueError(f"cannot write --video {path}: OpenCV cannot open an "
                             f"{VIDEO_FOURCC} writer there")

    def write(self, screen_rgb: np.ndarray) -> None:
        self._writer.write(cv2.cvtColor(screen_rgb, cv2.COLOR_RGB2BGR))
        self.frames += 1

    def __enter__(self) -> "VideoRecorder":
        return self

    def __exit__(self, exc_type: Any, *exc_info: Any) -> None:
        if exc_type is None:
            self._commit()
        else:
            self._discard()

    def _commit(self) -> None:
        self._writer.release()
        try:
            with open(self._temp, "rb") as file:
                os.fsync(file.fileno())
            os.replace(self._temp, self.path)
        except BaseException:
            self._discard()
            raise

    def _discard(self) -> None:
        self._writer.release()
        with contextlib.suppress(OSError):
            os.unlink(self._temp)


# --------------------------------------------------------------------------------------------
# Playing


def epsilon_greedy_policy(greedy: GreedyFn, *, epsilon: float, n_actions: int,
                          rng: np.random.Generator) -> Policy:
    """The evaluation policy: a uniformly random action with probability epsilon, else greedy.

    Mnih et al. (2015) evaluate with epsilon = 0.05.
    """
    def act(states: np.ndarray) -> int:
        return int(epsilon_greedy(greedy(states), epsilon, n_actions, rng)[0])
    return act


def play_games(env: AtariEnv, policy: Policy, *, games: int, seed: int,
               recorder: VideoRecorder | None = None,
               on_game: Callable[[int, GameResult], None] | None = None) -> list[GameResult]:
    """Plays `games` full games (all lives) from a reset seeded `seed`.

    The states are stacked by `FrameHistory` with the training loop's padding rule, so the
    network sees the states it was trained on. `on_game(index, result)` is called as each
    game ends.
    """
    history = FrameHistory(1)
    history.reset(env.reset(seed=seed)[None])
    results: list[GameResult] = []
    for index in range(games):
        results.append(play_game(env, history, policy, recorder))
        if on_game is not None:
            on_game(index, results[-1])
    return results


def play_game(env: AtariEnv, history: FrameHistory, policy: Policy,
              recorder: VideoRecorder | None) -> GameResult:
    """Plays one game on from the env's current start; returns at game over.

    At game over the env has already reset itself and `history` holds the next game's first
    frame, so calls chain. The video gets the game's first screen and the screen after every
    step but the last (the env has reset by then, and the last screen is gone).
    """
    score, steps = 0.0, 0
    while True:
        if recorder is not None:
            recorder.write(env.screen_rgb())
        step = env.step(policy(history.states))
        score += step.reward
        steps += 1
        ended = np.array([step.terminal or step.truncated])
        history.push(step.frame[None], after_episode_end=ended)
        if step.game_over:
            return GameResult(score, steps, step.truncated)


# --------------------------------------------------------------------------------------------
# Entry point


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status (bad input exits 2 via the parser)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_args(args)
        run = load_run(args.run_dir)
        select_device(args.device)  # before the network's module imports TensorFlow
    except ValueError as error:
        parser.error(_one_line(error))
    try:
        results, recorder = _play_run(run, args, parser)
    except KeyboardInterrupt:  # the recorder was left by the exception: no video was written
        print("play: interrupted" + ("; no video written" if args.video else ""),
              file=sys.stderr)
        return 130
    _print_summary(results, recorder)
    return 0


def _play_run(run: RunToPlay, args: argparse.Namespace, parser: OneLineErrorParser
              ) -> tuple[list[GameResult], VideoRecorder | None]:
    """Sets up the env, the video and the network, then plays; the video is renamed into
    place only when every game has been played."""
    seed = run.config.seed if args.seed is None else args.seed
    max_steps = run.config.max_episode_steps if args.max_steps is None else args.max_steps
    with contextlib.ExitStack() as stack:
        try:
            env = make_env(run.config, seed=seed, max_steps=max_steps)
            stack.callback(env.close)
            recorder = _open_recorder(args.video, env, stack)
            policy = _load_policy(run, env, args.epsilon, seed)
        except ValueError as error:
            parser.error(_one_line(error))
        _print_header(run, args, seed, max_steps)
        results = play_games(env, policy, games=args.episodes, seed=seed, recorder=recorder,
                             on_game=lambda i, r: _print_game(i, args.episodes, r))
    return results, recorder


def _open_recorder(path: Path | None, env: AtariEnv,
                   stack: contextlib.ExitStack) -> VideoRecorder | None:
    if path is None:
        return None
    height, width = env.screen_rgb().shape[:2]
    return stack.enter_context(VideoRecorder(path, (height, width)))


def _load_policy(run: RunToPlay, env: AtariEnv, epsilon: float, seed: int) -> Policy:
    from fast_dqn.q_network import configure_device

    print(configure_device(activity="playing"), flush=True)
    network = load_network(run.config, env.n_actions, run.checkpoint)
    return epsilon_greedy_policy(lambda states: network.greedy_actions(states, use_target=False),
                                 epsilon=epsilon, n_actions=env.n_actions,
                                 rng=np.random.default_rng(seed))


def _print_header(run: RunToPlay, args: argparse.Namespace, seed: int, max_steps: int) -> None:
    step = "" if run.step is None else f" at step {run.step:,}"
    print(f"{run.config.game} ({run.algo}): {run.checkpoint}{step}; {args.episodes} game(s), "
          f"epsilon {args.epsilon:g}, seed {seed}, cap {max_steps:,} steps", flush=True)


def _print_game(index: int, games: int, result: GameResult) -> None:
    cut = ", cut off" if result.cut_off else ""
    print(f"game {index + 1}/{games}: score {result.score:g} ({result.steps:,} steps{cut})",
          flush=True)


def _print_summary(results: Sequence[GameResult], recorder: VideoRecorder | None) -> None:
    scores = [result.score for result in results]
    spread = statistics.pstdev(scores) if len(scores) > 1 else math.nan
    print(f"mean score over {len(scores)} game(s): {statistics.fmean(scores):g}"
          + ("" if math.isnan(spread) else f" (std {spread:g})"))
    if recorder is not None:
        print(f"video: {recorder.path} ({recorder.frames:,} frames, {VIDEO_FPS} fps)")


if __name__ == "__main__":
    sys.exit(main())
