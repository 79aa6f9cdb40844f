"""Watch a trained agent: full games with a run's latest checkpoint, optionally on video.

    python -m fast_dqn.play RUN_DIR [--episodes N] [--epsilon 0.05] [--video [OUT.mp4]]
                                    [--seed S] [--max-steps N]

The games are played as the Nature evaluation plays them (Mnih et al., 2015): the online
network at epsilon 0.05, full games one after another in a pool of one env, acted as the
training loops act (`acting.Actor`) with the run's own settings; each raw score and the mean
are printed.

`--video` records the raw RGB screen at 15 fps (real time at frame skip 4 on the 60 Hz
Atari), each pixel as 2x2, since H.264 and VP9 keep colour at half resolution (4:2:0) and
would smear the screen's one-pixel details; the codec is the first this OpenCV really writes
(H.264, which browsers play inline, then VP9, then MPEG-4 part 2). Into the run directory it
writes under the directory's lock, refused while a training run holds it. The file is
renamed into place only when read back whole: OpenCV drops the file system's errors.

A stop signal ends play at its next step (exit 128 + the signal; the video removed). Bad
input, and a checkpoint that fails `--resume`'s checks, get one line and exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import json
import math
import os
import secrets
import signal
import statistics
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, NamedTuple, Sequence

import cv2
import numpy as np

from fast_dqn.atari import AtariEnv, GameSettings, make_atari_env, resolve_game
from fast_dqn.checkpoints import (MANIFEST, CheckpointError, latest_checkpoint, network_prefix,
                                  verify_checkpoint)
from fast_dqn.config import FRAME_SKIP, Config, OneLineErrorParser, add_device_flag
from fast_dqn.acting import Actor, GreedyFn
from fast_dqn.tensorflow_start import configure_device, select_device
from fast_dqn.run_dir import (CONFIG_FILE, OpenDirectory, RunDirectory, RunDirError,
                              WriteFailed, free_bytes, write_failure)
from fast_dqn.env_pools import SerialEnvPool
from fast_dqn.stop_request import StopRequest

if TYPE_CHECKING:  # the network module imports TensorFlow: only after the cheap checks
    from fast_dqn.learner import Learner

EVAL_EPSILON = 0.05  # Mnih et al. (2015): the evaluation policy's epsilon
ATARI_HZ = 60  # emulator frames per second of the real console
VIDEO_FPS = ATARI_HZ // FRAME_SKIP  # 15: one screen per agent step plays in real time
VIDEO_SUFFIX = ".mp4"  # OpenCV picks the container by the file name's suffix
VIDEO_SCALE = 2  # each Atari pixel as 2x2: 4:2:0 chroma then keeps every pixel's colour
DEFAULT_VIDEO = object()  # `--video` without a path: into the run directory
# FFmpeg writes files in chunks of this size: one that did not fit left less free than this
FFMPEG_WRITE_BYTES = 32 * 1024


class VideoCodec(NamedTuple):
    fourcc: str
    name: str
    plays_in_browsers: str  # "" where browsers and notebooks play it inline; else a caveat


# Tried in this order; the first one OpenCV really writes wins (pip's OpenCV wheels carry no
# H.264 encoder, a build on a system FFmpeg with libx264 or OpenH264 may).
VIDEO_CODECS = (
    VideoCodec("avc1", "H.264", ""),
    VideoCodec("H264", "H.264", ""),
    VideoCodec("vp09", "VP9", "Chrome, Edge and Firefox play VP9 in MP4 inline, Safari and "
               "some notebooks may not"),
    VideoCodec("mp4v", "MPEG-4 part 2", "browsers and notebooks do not play it inline (a "
               "desktop player does)"),
)

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
        ValueError: no such directory, no readable config.json (or a setting missing from
            it, or one a flag would refuse), an unknown game, no complete checkpoint, or a
            damaged one (the message names the file).
    """
    if not run_dir.is_dir():
        raise ValueError(f"no run directory {run_dir}")
    saved = _read_json(run_dir / CONFIG_FILE)
    if not isinstance(saved, dict) or "game" not in saved:
        raise ValueError(f"{run_dir / CONFIG_FILE} does not name a game; is it a run's config?")
    try:
        config = Config.from_saved(saved, str(saved.get("algo")))
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


def make_pool(config: Config, *, seed: int, max_steps: int) -> SerialEnvPool:
    """The run's Nature pipeline (its no-ops, sticky actions, interpolation) in one env, a
    pool of one as the serial trainer's, its env seeded `seed`."""
    settings = GameSettings.of_run(config, max_steps)
    return SerialEnvPool(lambda i: make_atari_env(settings, seed=seed + i), 1)


def screen_of(pool: SerialEnvPool) -> np.ndarray:
    """The raw RGB screen of the pool's one env, for the video."""
    return pool.run_in_envs(_screen_rgb)[0]


def _screen_rgb(index: int, env: AtariEnv) -> np.ndarray:
    return env.screen_rgb()


def load_network(config: Config, n_actions: int, checkpoint: Path) -> "Learner":
    """Builds the run's Q-network and restores its online weights from `checkpoint`.

    Raises:
        ValueError: the checkpoint is unreadable or does not fit the network (e.g. another
            game's action count).
    """
    from fast_dqn.learner import make_learner

    network = make_learner(config, n_actions)
    network.restore_online(network_prefix(checkpoint))
    return network


class VideoTarget(NamedTuple):
    """Where the video goes: a name in a directory held open."""

    directory: OpenDirectory
    name: str

    @property
    def path(self) -> Path:
        return self.directory.path / self.name


def default_video_name(step: int | None) -> str:
    return "play.mp4" if step is None else f"play-step{step}.mp4"


def open_video_target(video: Path | object | None, run: RunToPlay, run_dir: Path,
                      stack: contextlib.ExitStack) -> VideoTarget | None:
    """Opens the video's directory for the rest of `stack`: the run directory, locked, for
    `--video` alone (see the module docstring), else the given path's directory.

    Raises:
        ValueError: another process holds the run directory, or it cannot be written (one
            line that says what to do).
    """
    if video is None:
        return None
    if isinstance(video, Path):
        try:
            directory = stack.enter_context(OpenDirectory.at(video.parent))
        except OSError as error:
            raise ValueError(f"cannot write --video {video}: {error.strerror or error}"
                             ) from None
        return VideoTarget(directory, video.name)
    where = f"cannot write the video into {run_dir}"
    if not os.access(run_dir, os.W_OK | os.X_OK):
        raise ValueError(f"{where}: it is not writable; give --video PATH")
    try:
        held = stack.enter_context(RunDirectory.reopen(run_dir))
    except RunDirError as error:
        raise ValueError(f"{where}: {error}, or give --video PATH") from None
    return VideoTarget(held.directory, default_video_name(run.step))


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """fd 2 pointed at the null device for the block: FFmpeg and OpenCV print a few lines of
    their own for every codec that a probe finds missing."""
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


@functools.lru_cache(maxsize=None)
def video_codec(frame_size: tuple[int, int]) -> VideoCodec:
    """The first of `VIDEO_CODECS` that this OpenCV writes at `frame_size` (height, width):
    a probe writes two frames to a temporary file and must read a frame back.

    Raises:
        ValueError: OpenCV writes none of them.
    """
    height, width = frame_size
    frame = np.zeros((height, width, 3), np.uint8)
    frame[: height // 2] = 255  # not a blank frame: some encoders treat one specially
    with tempfile.TemporaryDirectory(prefix="fast_dqn-video-probe-") as probe_dir:
        for codec in VIDEO_CODECS:
            probe = os.path.join(probe_dir, f"{codec.fourcc}{VIDEO_SUFFIX}")
            if _writes(probe, codec, frame):
                return codec
    raise ValueError("this OpenCV writes none of the video codecs "
                     f"{', '.join(codec.fourcc for codec in VIDEO_CODECS)}")


def _writes(path: str, codec: VideoCodec, frame: np.ndarray) -> bool:
    height, width = frame.shape[:2]
    with _quiet_stderr():
        writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*codec.fourcc), VIDEO_FPS,
                                 (width, height))
        try:
            if not writer.isOpened():
                return False
            writer.write(frame)
            writer.write(frame)
        finally:
            writer.release()
        capture = cv2.VideoCapture(path)
        try:
            ok, read = capture.read()
        finally:
            capture.release()
    return bool(ok) and read is not None and read.shape == frame.shape


def video_frame_size(screen_size: tuple[int, int]) -> tuple[int, int]:
    """(height, width) of the video's frames for screens of `screen_size`."""
    return screen_size[0] * VIDEO_SCALE, screen_size[1] * VIDEO_SCALE


class VideoRecorder:
    """Writes RGB screens, each pixel as VIDEO_SCALE x VIDEO_SCALE, to an MP4 atomically.

    Frames go to a temporary file beside the target, made here (never through a link) and
    written by OpenCV through the directory held open; leaving the `with` block normally
    reads it back and renames it over the target, leaving it by an exception (or with a
    file that does not hold every frame) removes it, so the target is never half-written.
    """

    def __init__(self, target: VideoTarget, screen_size: tuple[int, int], codec: VideoCodec,
                 fps: float = VIDEO_FPS):
        """`screen_size` is (height, width) of the RGB screens, as numpy shapes them."""
        self.target = target
        self.path = target.path
        self.codec = codec
        self.frames = 0
        self.frame_size = video_frame_size(screen_size)
        directory = target.directory
        self._temp = (f".{Path(target.name).stem}.{os.getpid()}.{secrets.token_hex(4)}"
                      f".tmp{VIDEO_SUFFIX}")
        self._fd: int | None = None
        self._writer: Any = None
        self._through = contextlib.ExitStack()
        try:
            self._fd = directory.open(self._temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            # OpenCV opens files by name: it gets one through the descriptor, as TensorFlow
            # does for the run's own checkpoints.
            self._temp_path = self._through.enter_context(directory.for_tensorflow(self._temp))
            height, width = self.frame_size
            self._writer = cv2.VideoWriter(self._temp_path,
                                           cv2.VideoWriter_fourcc(*codec.fourcc), fps,
                                           (width, height))
        except OSError as error:
            self._discard()
            raise ValueError(f"cannot write --video {self.path}: {error.strerror or error}"
                             ) from None
        except BaseException:
            self._discard()
            raise
        if not self._writer.isOpened():
            self._discard()
            raise ValueError(f"cannot write --video {self.path}: OpenCV cannot open a "
                             f"{codec.fourcc} writer there")

    def write(self, screen_rgb: np.ndarray) -> None:
        frame = cv2.cvtColor(screen_rgb, cv2.COLOR_RGB2BGR)
        if VIDEO_SCALE != 1:
            frame = cv2.resize(frame, None, fx=VIDEO_SCALE, fy=VIDEO_SCALE,
                               interpolation=cv2.INTER_NEAREST)
        self._writer.write(frame)
        self.frames += 1

    def __enter__(self) -> "VideoRecorder":
        return self

    def __exit__(self, exc_type: Any, *exc_info: Any) -> None:
        if exc_type is None:
            self._commit()
        else:
            self._discard()

    def _commit(self) -> None:
        directory = self.target.directory
        try:
            self._writer.release()
            self._check_frames_read_back()
            os.fsync(self._fd)  # the file OpenCV wrote by name is the one made here
            os.close(self._fd)
            self._fd = None
            self._through.close()  # where there is no path through the descriptor: still here?
            directory.replace(self._temp, self.target.name)  # a link there is replaced
            directory.sync()
        except OSError as error:  # e.g. a full disk at the fsync
            self._discard()
            raise write_failure(self.path, error) from None
        except BaseException:
            self._discard()
            raise

    def _check_frames_read_back(self) -> None:
        """Raises WriteFailed unless the temporary file holds every frame written: OpenCV
        drops the file system's errors, and a full disk leaves a file without its index."""
        with _quiet_stderr():  # FFmpeg's own lines on a broken file
            capture = cv2.VideoCapture(self._temp_path)
            try:
                frames = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))  # 0 if it cannot open it
            finally:
                capture.release()
        if frames == self.frames:
            return
        free = free_bytes(Path(self._temp_path).parent)
        if free is not None and free < FFMPEG_WRITE_BYTES:
            raise WriteFailed(self.path, os.strerror(errno.ENOSPC), disk_full=True)
        raise WriteFailed(self.path, f"only {frames:,} of its {self.frames:,} frames can be "
                          f"read back ({self.codec.fourcc}, written by OpenCV)", disk_full=False)

    def _discard(self) -> None:
        if self._writer is not None:
            self._writer.release()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        with contextlib.suppress(Exception):
            self._through.close()
        with contextlib.suppress(OSError, ValueError):
            os.unlink(self._temp, dir_fd=self.target.directory.fd)


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
            recorder.write(screen_of(pool))
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
            target = open_video_target(args.video, run, args.run_dir, held)
        except ValueError as error:
            parser.error(_one_line(error))
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
            recorder = _open_recorder(target, pool, stack)
            greedy = _load_greedy(run, pool.n_actions)
        except ValueError as error:
            parser.error(_one_line(error))
        _print_header(run, args, seed, max_steps)
        if recorder is not None and recorder.codec.plays_in_browsers:
            print(f"video codec: {recorder.codec.name} ({recorder.codec.fourcc}), as this "
                  f"OpenCV has no H.264 encoder: {recorder.codec.plays_in_browsers}",
                  flush=True)
        results = play_games(pool, greedy, epsilon=args.epsilon,
                             rng=np.random.default_rng(seed), games=args.episodes, seed=seed,
                             recorder=recorder,
                             on_game=lambda i, r: _print_game(i, args.episodes, r), stop=stop)
    return results, recorder


def _open_recorder(target: VideoTarget | None, pool: SerialEnvPool,
                   stack: contextlib.ExitStack) -> VideoRecorder | None:
    if target is None:
        return None
    screen_size = screen_of(pool).shape[:2]
    codec = video_codec(video_frame_size(screen_size))
    return stack.enter_context(VideoRecorder(target, screen_size, codec))


def _load_greedy(run: RunToPlay, n_actions: int) -> GreedyFn:
    """The greedy actions of the run's online network."""

    print(configure_device(activity="playing"), flush=True)
    network = load_network(run.config, n_actions, run.checkpoint)
    return functools.partial(network.greedy_actions, use_target=False)


def _print_header(run: RunToPlay, args: argparse.Namespace, seed: int, max_steps: int) -> None:
    step = "" if run.step is None else f" at step {run.step:,}"
    print(f"{run.config.game} ({run.algo}): {run.checkpoint}{step}; {args.episodes} game(s), "
          f"epsilon {args.epsilon:g}, seed {seed}, cap {max_steps:,} steps", flush=True)
    warning = untrained_warning(run)
    if warning is not None:
        print(warning, file=sys.stderr, flush=True)


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
        height, width = recorder.frame_size
        print(f"video: {recorder.path} ({recorder.frames:,} frames, {VIDEO_FPS} fps, "
              f"{recorder.codec.name}, {width}x{height})")


if __name__ == "__main__":
    sys.exit(main())
