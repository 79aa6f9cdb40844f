"""Helpers that write or damage a run's files, for the tests of what a run, a resume or
`play` does with them: one definition each, shared by the test files."""

from __future__ import annotations

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
