"""Helpers that write or damage a run's files, for the tests of what a run, a resume or
`play` does with them: one definition each, shared by the test files."""

from __future__ import annotations

import os
from pathlib import Path

from fast_dqn.checkpoints import network_prefix


def write_stand_in_network(prefix: str) -> None:
    """A network file that is not TensorFlow's (a `write_network` for `save_checkpoint`), for
    the paths that only find and verify a checkpoint."""
    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    Path(prefix + ".index").write_bytes(b"a stand-in for the network")


def network_data(checkpoint: Path) -> Path:
    """The checkpoint's file of network tensors (TensorFlow's ckpt.data-*)."""
    return next(Path(network_prefix(checkpoint)).parent.glob("ckpt.data-*"))


def truncate(path: Path) -> None:
    """Cuts the file to half its length, as a write cut short would leave it."""
    path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])


# The longest path inside a run directory that a run opens by name: TensorFlow reads its
# networks by path, and a resume falls back to checkpoint.old/ (test_resume checks the name
# against a real checkpoint's). A run directory's path leaves room for it within PATH_MAX.
LONGEST_NAME = "checkpoint.old/network/ckpt.data-00000-of-00001"
LONGEST_RUN_DIR = os.pathconf("/", "PC_PATH_MAX") - 1 - len("/" + LONGEST_NAME)


def path_of_length(base: Path, length: int) -> Path:
    """A path below the absolute `base` of exactly `length` bytes, in names of at most 200
    characters (a name may have 255); nothing is created."""
    path = str(base)
    while len(path) < length:
        left = length - len(path) - 1  # after the "/"
        path += "/" + "d" * (left if left <= 200 else min(200, left - 2))  # none empty
    assert len(os.fsencode(path)) == length, (base, length)
    return Path(path)
