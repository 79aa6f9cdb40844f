"""Fixtures shared by the test files."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Callable, Iterator

import pytest

from tests.script_runs import FAKE_LEARNER


def pytest_configure(config) -> None:
    """Gives the test process Ctrl-C as a terminal has it, and an 80-column terminal, whatever
    the caller's. A runner started as a background job of a non-interactive shell (`pytest &`
    in a script) has SIGINT ignored; the processes the tests start inherit that, and bash
    cannot trap a signal ignored on entry, so the sweep's Ctrl-C test hung though the script
    was right. argparse wraps --help at $COLUMNS, which the processes inherit too; a test of
    another width sets its own."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ["COLUMNS"] = "80"
    os.environ.pop("LINES", None)


@pytest.fixture(scope="session")
def cpu_device() -> str:
    """TensorFlow's device set up as a run sets it (deterministic ops on the CPU), once for
    the session; its line names the device. Test files that build networks use it with
    `pytestmark = pytest.mark.usefixtures("cpu_device")`."""
    from fast_dqn.tensorflow_start import configure_device

    line = configure_device()
    assert "CPU" in line or "GPU" in line
    return line


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Callable[[int], Path | None]]:
    """Mounts real small disks: `small_disk(kilobytes)` is a new tmpfs of that size under
    tmp_path, or None where none can be mounted (it needs root and `mount`). Each is
    unmounted after the test."""
    mounted: list[Path] = []

    def mount(kilobytes: int) -> Path | None:
        disk = tmp_path / f"disk{len(mounted)}"
        disk.mkdir()
        if not shutil.which("mount"):
            return None
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kilobytes}k", "tmpfs",
                                 str(disk)], capture_output=True)
        if result.returncode != 0:
            return None
        mounted.append(disk)
        return disk

    yield mount
    for disk in mounted:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path, leave_bytes: int = 0) -> Path:
    """Writes a filler file on `disk` until at most `leave_bytes` are free (with 0: until the
    file system refuses with ENOSPC); returns the filler."""
    filler = disk / "filler"
    chunk = b"\0" * (1 << 20)
    with open(filler, "ab", buffering=0) as file:
        with contextlib.suppress(OSError):
            while shutil.disk_usage(disk).free > leave_bytes + len(chunk):
                file.write(chunk)
            while shutil.disk_usage(disk).free > leave_bytes:
                file.write(b"\0" * 4096)
    return filler


@pytest.fixture
def fill_disk() -> Callable[..., Path]:
    """`fill_disk(disk, leave_bytes=0)`: see `fill`."""
    return fill


# -- Fixtures more than one test file used to define for itself (issue 35 item 7) ----------


@pytest.fixture
def tiny_disk(small_disk):
    """A real 64 KiB tmpfs, or None where none can be mounted (see `small_disk`)."""
    return small_disk(64)


@pytest.fixture
def fake_learner(tmp_path) -> Path:
    """tests/script_runs.py's FAKE_LEARNER as an executable file, for the tests of
    scripts/learning_check.sh (test_scripts.py, test_variants.py)."""
    path = tmp_path / "fake-learner"
    path.write_text(FAKE_LEARNER)
    path.chmod(0o755)
    return path


@pytest.fixture(scope="session")
def video_run(tmp_path_factory) -> Path:
    """A real tiny run of the serial trainer with --video-every (tests/cli_runs.VIDEO_RUN),
    trained in this process: its directory, for the tests of its evaluation's video
    (test_evaluation.py) and of loading its agent (test_play.py)."""
    from fast_dqn import launch
    from fast_dqn.config import ALGO_DQN
    from tests.cli_runs import VIDEO_RUN

    run_dir = tmp_path_factory.mktemp("video-run") / "run"
    assert launch.main([*VIDEO_RUN, f"--logdir={run_dir}"], ALGO_DQN) == 0
    return run_dir
