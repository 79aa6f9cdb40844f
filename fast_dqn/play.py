"""Watch a trained agent: full games with a run's latest checkpoint, optionally on video.

    python -m fast_dqn.play RUN_DIR [--episodes N] [--epsilon 0.05] [--video [OUT.mp4]]
                                    [--seed S] [--max-steps N]

The games are played as the Nature evaluation plays them (Mnih et al., 2015): the online
network at epsilon 0.05, full games one after another in a pool of one env, acted as the
training loops act (`acting.Actor`) with the run's own settings; each raw score and the mean
are printed.

`--video` records the games' screens (`fast_dqn.video`: real time, H.264 where this OpenCV
has it, into the run directory only while no run holds it, renamed into place only whole).

A stop signal ends play at its next step (exit 128 + the signal; the video removed). Bad
input, and a checkpoint that fails `--resume`'s checks, get one line and exit status 2.
The network is loaded as `fast_dqn.load` loads it, into an `agent.Agent`.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import statistics
import sys
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

import numpy as np

from fast_dqn.agent import EVAL_EPSILON, Agent, RunToPlay, load_run, one_line
from fast_dqn.atari import GameSettings, make_atari_env
from fast_dqn.config import Config, OneLineErrorParser, add_device_flag, counted
from fast_dqn.acting import Actor, GreedyFn
from fast_dqn.tensorflow_start import select_device
from fast_dqn.run_dir import WriteFailed
from fast_dqn.env_pools import SerialEnvPool
from fast_dqn.stop_request import StopRequest
from fast_dqn.video import (DEFAULT_VIDEO, VIDEO_FPS, VideoRecorder, VideoTarget,
                            check_video_path, open_video_target)

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
    parser.add_argument("--video", type=Path, nargs="?", const=DEFAULT_VIDEO, default=None,
                        metavar="OUT.mp4",
                        help=f"write an MP4 of the RGB screen ({VIDEO_FPS} fps = real time; "
                        "H.264 where this OpenCV has it); without a path: "
                        "RUN_DIR/play-step<STEP>.mp4, only while no run holds RUN_DIR")
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
    if isinstance(args.video, Path):
        check_video_path(args.video)


# --------------------------------------------------------------------------------------------
# Environment


def make_pool(config: Config, *, seed: int, max_steps: int) -> SerialEnvPool:
    """The run's Nature pipeline (its no-ops, sticky actions, interpolation) in one env, a
    pool of one as the serial trainer's, its env seeded `seed`."""
    settings = GameSettings.of_run(config, max_steps)
    return SerialEnvPool(lambda i: make_atari_env(settings, seed=seed + i), 1)


# --------------------------------------------------------------------------------------------
# Playing


def play_games(pool: SerialEnvPool, greedy: GreedyFn, *, epsilon: float,
               rng: np.random.Generator, games: int, seed: int,
               recorder: VideoRecorder | None = None,
               on_game: Callable[[int, GameResult], None] | None = None,
               stop: StopRequest | None = None) -> list[GameResult]:
    """Plays `games` full games (all lives), one after another in the pool's one env, from a
    reset seeded `seed`, epsilon-greedy on `greedy` (Mnih et al. 2015 evaluate at 0.05).

    The acting is the training loop's (`Actor.play_round`: its frame stacks, its padding
    rule, its draws from `rng`), so the network sees the states it was trained on.
    `on_game(index, result)` is called as each game ends. The video gets each game's first
    screen and the screen after every step but its last (the env has reset by then, and the
    last screen is gone). A request to `stop` raises KeyboardInterrupt at the next step, as
    a second signal would at once.
    """
    actor = Actor(pool)
    actor.reset(seed=seed)
    results: list[GameResult] = []
    while len(results) < games:  # one env: a round ends one game at most
        if stop:
            raise KeyboardInterrupt
        if recorder is not None:
            recorder.write(pool.first_screen())
        for game in actor.play_round(greedy, epsilon, rng):
            results.append(GameResult(game.score, game.length, game.cut_off))
            if on_game is not None:
                on_game(len(results) - 1, results[-1])
    return results


# --------------------------------------------------------------------------------------------
# Entry point


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status (bad input exits 2 via the parser)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as held:  # the video's directory (and the run's lock)
        stop = StopRequest()
        stop.install()  # before TensorFlow loads, so that a signal during the start counts
        held.callback(stop.uninstall)
        try:
            check_args(args)
            run = load_run(args.run_dir)
            select_device(args.device)  # before the network's module imports TensorFlow
            target = open_video_target(args.video, args.run_dir, run.step, held)
        except ValueError as error:
            parser.error(one_line(error))
        try:
            results, recorder = _play_run(run, args, target, parser, stop)
        except KeyboardInterrupt:  # the recorder was left by the exception: no video written
            signum = stop.signal_number or signal.SIGINT
            print(f"play: stopped by {signal.Signals(signum).name}"
                  + ("; no video written" if target else ""), file=sys.stderr)
            return 128 + signum
        except WriteFailed as error:  # the video (removed): not a matter for --help
            print(f"play: error: {error}", file=sys.stderr)
            return 2
    _print_summary(results, recorder)
    return 0


def untrained_warning(run: RunToPlay) -> str | None:
    """A warning line for a checkpoint written before the run's first minibatch update."""
    if run.step is None or run.step > run.config.replay_start:
        return None
    return (f"warning: the checkpoint is at step {run.step:,}, not past the replay start "
            f"({run.config.replay_start:,} random steps): its network has not been trained")


def _play_run(run: RunToPlay, args: argparse.Namespace, target: VideoTarget | None,
              parser: OneLineErrorParser, stop: StopRequest
              ) -> tuple[list[GameResult], VideoRecorder | None]:
    """Sets up the env, the video and the network, then plays; the video is renamed into
    place only when every game has been played."""
    seed = run.config.seed if args.seed is None else args.seed
    max_steps = run.config.max_episode_steps if args.max_steps is None else args.max_steps
    with contextlib.ExitStack() as stack:
        try:
            pool = make_pool(run.config, seed=seed, max_steps=max_steps)
            stack.callback(pool.close)
            recorder = (None if target is None else
                        stack.enter_context(VideoRecorder(target, pool.first_screen().shape[:2])))
            agent = Agent(run, seed)
        except ValueError as error:
            parser.error(one_line(error))
        print(agent.device, flush=True)
        _print_header(run, args, seed, max_steps)
        if recorder is not None and recorder.codec.plays_in_browsers:
            print(f"video codec: {recorder.codec.name} ({recorder.codec.fourcc}), as this "
                  f"OpenCV has no H.264 encoder: {recorder.codec.plays_in_browsers}",
                  flush=True)
        results = play_games(pool, agent.greedy, epsilon=args.epsilon, rng=agent.rng,
                             games=args.episodes, seed=seed, recorder=recorder,
                             on_game=lambda i, r: _print_game(i, args.episodes, r), stop=stop)
    return results, recorder


def _print_header(run: RunToPlay, args: argparse.Namespace, seed: int, max_steps: int) -> None:
    step = "" if run.step is None else f" at step {run.step:,}"
    print(f"{run.config.game} ({run.algo}): {run.checkpoint}{step}; "
          f"{counted(args.episodes, 'game')}, epsilon {args.epsilon:g}, seed {seed}, "
          f"cap {max_steps:,} steps", flush=True)
    warning = untrained_warning(run)
    if warning is not None:
        print(warning, file=sys.stderr, flush=True)


def _print_game(index: int, games: int, result: GameResult) -> None:
    cut = ", cut off" if result.cut_off else ""
    print(f"game {index + 1}/{games}: score {result.score:g} ({result.steps:,} steps{cut})",
          flush=True)


def _print_summary(results: Sequence[GameResult], recorder: VideoRecorder | None) -> None:
    scores = [result.score for result in results]
    spread = f" (std {statistics.pstdev(scores):g})" if len(scores) > 1 else ""
    print(f"mean score over {counted(len(scores), 'game')}: "
          f"{statistics.fmean(scores):g}{spread}")
    if recorder is not None:
        height, width = recorder.frame_size
        print(f"video: {recorder.path} ({recorder.frames:,} frames, {VIDEO_FPS} fps, "
              f"{recorder.codec.name}, {width}x{height})")


if __name__ == "__main__":
    sys.exit(main())
