"""The video of play and of a run's evaluations: the raw RGB screen as an MP4, written whole
or not at all.

The screen is recorded at 15 fps (real time at frame skip 4 on the 60 Hz Atari), each pixel
as 2x2, since H.264 and VP9 keep colour at half resolution (4:2:0) and would smear the
screen's one-pixel details; the codec is the first this OpenCV really writes (H.264, which
browsers play inline, then VP9, then MPEG-4 part 2). Into a run directory it writes only under
the directory's lock: the run's own for its evaluations; play's is refused while a run holds
it. The file is renamed into place only when read back whole: OpenCV drops the file system's
errors.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator, NamedTuple

import cv2
import numpy as np

from fast_dqn.config import FRAME_SKIP
from fast_dqn.run_dir import (OpenDirectory, RunDirectory, RunDirError, WriteFailed,
                              free_bytes, temporary_name, write_failure)

ATARI_HZ = 60  # emulator frames per second of the real console
VIDEO_FPS = ATARI_HZ // FRAME_SKIP  # 15: one screen per agent step plays in real time
VIDEO_SUFFIX = ".mp4"  # OpenCV picks the container by the file name's suffix
VIDEO_SCALE = 2  # each Atari pixel as 2x2: 4:2:0 chroma then keeps every pixel's colour
ATARI_VIDEO_SIZE = (210 * VIDEO_SCALE, 160 * VIDEO_SCALE)  # (height, width) of every game's
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


class VideoTarget(NamedTuple):
    """Where the video goes: a name in a directory held open."""

    directory: OpenDirectory
    name: str

    @property
    def path(self) -> Path:
        return self.directory.path / self.name


def open_video_target(video: Path | object | None, run_dir: Path, step: int | None,
                      stack: contextlib.ExitStack) -> VideoTarget | None:
    """Opens the video's directory for the rest of `stack`: for `--video` alone
    (`DEFAULT_VIDEO`) the run directory, locked, the name saying the checkpoint's `step`;
    else the given path's directory.

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
    return VideoTarget(held.directory, "play.mp4" if step is None else f"play-step{step}.mp4")


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


class VideoRecorder:
    """Writes RGB screens, each pixel as VIDEO_SCALE x VIDEO_SCALE, to an MP4 atomically, in
    the first codec of `VIDEO_CODECS` this OpenCV writes.

    Frames go to a temporary file beside the target, made here (never through a link) and
    written by OpenCV through the directory held open; leaving the `with` block normally
    reads it back and renames it over the target, leaving it by an exception (or with a
    file that does not hold every frame) removes it, so the target is never half-written.
    """

    def __init__(self, target: VideoTarget, screen_size: tuple[int, int]):
        """`screen_size` is (height, width) of the RGB screens, as numpy shapes them.

        Raises:
            ValueError: this OpenCV writes no codec.
            WriteFailed: the file cannot be made.
        """
        self.target = target
        self.path = target.path
        self.frames = 0
        self.frame_size = (screen_size[0] * VIDEO_SCALE, screen_size[1] * VIDEO_SCALE)
        self.codec = video_codec(self.frame_size)
        directory = target.directory
        self._temp = temporary_name(Path(target.name).stem, VIDEO_SUFFIX)
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
                                           cv2.VideoWriter_fourcc(*self.codec.fourcc),
                                           VIDEO_FPS, (width, height))
        except OSError as error:
            self._discard()
            raise write_failure(self.path, error) from None
        except BaseException:
            self._discard()
            raise
        if not self._writer.isOpened():
            self._discard()
            raise WriteFailed(self.path, f"OpenCV cannot open a {self.codec.fourcc} writer "
                              "there", disk_full=False)

    def write(self, screen_rgb: np.ndarray) -> None:
        frame = cv2.cvtColor(screen_rgb, cv2.COLOR_RGB2BGR)
        self._writer.write(cv2.resize(frame, None, fx=VIDEO_SCALE, fy=VIDEO_SCALE,
                                      interpolation=cv2.INTER_NEAREST))
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
