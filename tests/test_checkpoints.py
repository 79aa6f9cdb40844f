"""Tests of fast_dqn/checkpoints.py: round trips, no pickles, and crash and full-disk safety.

The networks are stood in for by a fake writer that writes a file at the prefix it is given
(one test uses a real `tf.train.Checkpoint` of one variable), so most of these tests run
without TensorFlow.
"""

from __future__ import annotations

import errno
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from fast_dqn import checkpoints
from fast_dqn.checkpoints import (CHECKPOINT, FORMAT_VERSION, MANIFEST, NEW_CHECKPOINT,
                                  OLD_CHECKPOINT, CheckpointError, latest_checkpoint,
                                  network_prefix, read_manifest, read_replay_into,
                                  save_checkpoint)
from fast_dqn.replay_memory import ReplayMemory, acted_transitions

CAPACITY = 8


def fake_network(payload: bytes):
    """A `write_network` that writes `payload` to PREFIX.data, as TensorFlow writes files."""

    def write(prefix: str) -> None:
        Path(prefix).parent.mkdir(parents=True, exist_ok=True)
        Path(prefix + ".data").write_bytes(payload)

    return write


def read_fake_network(checkpoint: Path) -> bytes:
    return Path(network_prefix(checkpoint) + ".data").read_bytes()


def replay_arrays(fill: int) -> dict[str, np.ndarray]:
    """The saved state of a memory that has not wrapped: 6 transitions whose frames say
    `fill`."""
    memory = ReplayMemory(CAPACITY, np.random.default_rng(0))
    memory.add_many(acted_transitions(
        np.full((6, 84, 84), fill, dtype=np.uint8), np.arange(6),
        np.array([0, 1, -1, 0, 1, 0], dtype=np.float32),
        np.array([0, 0, 1, 0, 0, 0], dtype=bool), np.array([0, 0, 1, 0, 0, 1], dtype=bool)))
    return memory.state_dict()


def read_arrays(checkpoint: Path, like: dict[str, np.ndarray] | None = None
                ) -> dict[str, np.ndarray]:
    """The stored memory, read into a fresh one, as `state_dict()` gives it."""
    memory = ReplayMemory(CAPACITY, np.random.default_rng(0))
    assert read_replay_into(checkpoint, memory)
    return memory.state_dict()


def save(run_dir: Path, step: int, **kwargs) -> Path:
    """A checkpoint whose contents all say `step`."""
    return save_checkpoint(run_dir, {"step": step, "scores": [1.5, -2.0]},
                           kwargs.get("write_network", fake_network(b"net%d" % step)),
                           kwargs.get("arrays", replay_arrays(step)))


def assert_checkpoint_of(checkpoint: Path, step: int) -> None:
    assert read_manifest(checkpoint)["step"] == step
    assert read_fake_network(checkpoint) == b"net%d" % step
    arrays = read_arrays(checkpoint, replay_arrays(0))
    for name, expected in replay_arrays(step).items():
        np.testing.assert_array_equal(arrays[name], expected)


def test_round_trip_of_manifest_network_and_arrays(tmp_path):
    rng = np.random.default_rng(7)
    rng.random(3)
    manifest = {"step": 1234, "updates": 56, "hours": 0.25, "recent_scores": [1.0, 2.5],
                "rng": rng.bit_generator.state, "last_evaluation": None}
    arrays = replay_arrays(3)
    path = save_checkpoint(tmp_path, manifest, fake_network(b"weights"), arrays)

    assert path == tmp_path / CHECKPOINT
    assert latest_checkpoint(tmp_path) == path
    assert read_manifest(path) == {"format_version": FORMAT_VERSION, **manifest}
    assert read_fake_network(path) == b"weights"
    loaded = read_arrays(path, arrays)
    assert sorted(loaded) == sorted(arrays)
    for name, array in arrays.items():
        assert loaded[name].dtype == array.dtype and loaded[name].shape == array.shape
        np.testing.assert_array_equal(loaded[name], array)
    assert int(loaded["cursor"]) == int(loaded["size"]) == 6

    fresh = np.random.default_rng(0)
    fresh.bit_generator.state = read_manifest(path)["rng"]
    np.testing.assert_array_equal(fresh.random(5), rng.random(5))
    assert not (tmp_path / NEW_CHECKPOINT).exists()
    assert not (tmp_path / OLD_CHECKPOINT).exists()


def test_read_replay_into_fills_the_memorys_own_arrays(tmp_path):
    path = save(tmp_path, 9)
    memory = ReplayMemory(CAPACITY, np.random.default_rng(0))
    columns = memory.store
    assert read_replay_into(path, memory) is True
    assert memory.store is columns  # filled in place, no second copy
    for name, expected in replay_arrays(9).items():
        np.testing.assert_array_equal(memory.state_dict()[name], expected)
    memory.check_valid()


def test_read_replay_into_without_replay(tmp_path):
    path = save_checkpoint(tmp_path, {"step": 1}, fake_network(b"n"), None)
    memory = ReplayMemory(CAPACITY, np.random.default_rng(0))
    assert read_replay_into(path, memory) is False
    assert not memory.store.frames.any() and memory.size == 0


@pytest.mark.parametrize("name, saved, message", [
    ("frames", np.zeros((6, 84, 80), np.uint8), "expected uint8"),
    ("frames", np.zeros((9, 84, 84), np.uint8),
     re.escape("holds uint8 (9, 84, 84); expected uint8 (8, 84, 84)")),
    ("rewards", np.zeros(6, np.float64), "expected float32"),
    ("capacity", np.array(7), "capacity 7 differs from 8"),
    ("cursor", np.array(8), "cursor 8 and size 6 do not fit"),
    ("actions", np.zeros(5, np.uint8), "holds 5 rows for a memory of 6 transitions"),
    ("sampleable", None, "cannot read .*sampleable.npy"),
])
def test_read_replay_into_refuses_a_mismatch(tmp_path, name, saved, message):
    arrays = replay_arrays(2)
    if saved is None:
        del arrays[name]
    else:
        arrays[name] = saved
    path = save(tmp_path, 2, arrays=arrays)
    with pytest.raises(CheckpointError, match=message):
        read_replay_into(path, ReplayMemory(CAPACITY, np.random.default_rng(0)))


def test_read_replay_into_a_torn_file(tmp_path):
    path = save(tmp_path, 2)
    frames = path / checkpoints.REPLAY / "frames.npy"
    frames.write_bytes(frames.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="ends early"):
        read_replay_into(path, ReplayMemory(CAPACITY, np.random.default_rng(0)))
    frames.write_bytes(b"not numpy")
    with pytest.raises(CheckpointError, match="cannot read"):
        read_replay_into(path, ReplayMemory(CAPACITY, np.random.default_rng(0)))


def test_checkpoint_holds_no_pickles(tmp_path):
    path = save(tmp_path, 5)
    manifest = json.loads((path / MANIFEST).read_text())  # plain JSON
    assert manifest["step"] == 5
    files = sorted((path / checkpoints.REPLAY).glob("*.npy"))
    assert files
    for file in files:
        np.load(file, allow_pickle=False)  # raises on a pickled (object) array


def test_object_arrays_are_refused_and_nothing_is_left(tmp_path):
    with pytest.raises(ValueError, match="allow_pickle"):
        save_checkpoint(tmp_path, {"step": 1}, None, {"bad": np.array([{}, []], dtype=object)})
    assert latest_checkpoint(tmp_path) is None
    assert not (tmp_path / NEW_CHECKPOINT).exists()


def test_a_manifest_that_is_not_json_fails_before_writing(tmp_path):
    save(tmp_path, 1)
    with pytest.raises(TypeError):
        save_checkpoint(tmp_path, {"step": object()}, fake_network(b"x"), None)
    assert_checkpoint_of(latest_checkpoint(tmp_path), 1)
    assert not (tmp_path / NEW_CHECKPOINT).exists()


def test_without_arrays_there_is_no_replay(tmp_path):
    path = save_checkpoint(tmp_path, {"step": 1}, fake_network(b"n"), None)
    assert read_replay_into(path, ReplayMemory(CAPACITY, np.random.default_rng(0))) is False


def test_real_tensorflow_network_round_trip(tmp_path):
    import tensorflow as tf
    variable = tf.Variable([[1.0, 2.0], [3.0, 4.0]])
    path = save_checkpoint(tmp_path, {"step": 1}, tf.train.Checkpoint(v=variable).write, None)
    restored = tf.Variable(tf.zeros([2, 2]))
    tf.train.Checkpoint(v=restored).read(network_prefix(path)).assert_consumed()
    np.testing.assert_array_equal(restored.numpy(), variable.numpy())


def test_a_newer_checkpoint_replaces_the_older(tmp_path):
    save(tmp_path, 1)
    save(tmp_path, 2)
    assert latest_checkpoint(tmp_path) == tmp_path / CHECKPOINT
    assert_checkpoint_of(tmp_path / CHECKPOINT, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT]


def test_no_checkpoint(tmp_path):
    assert latest_checkpoint(tmp_path) is None
    assert latest_checkpoint(tmp_path / "missing") is None


# -- crashes at every stage of a save --------------------------------------------------------


def test_crash_between_the_two_renames_leaves_the_old_checkpoint(tmp_path, monkeypatch):
    save(tmp_path, 1)
    real_replace = os.replace
    renames = []

    def replace(src, dst):
        renames.append((Path(src).name, Path(dst).name))
        if len(renames) == 2:
            raise OSError(errno.EIO, "simulated crash")
        real_replace(src, dst)

    monkeypatch.setattr(checkpoints.os, "replace", replace)
    with pytest.raises(CheckpointError, match="simulated crash"):
        save(tmp_path, 2)
    assert renames == [(CHECKPOINT, OLD_CHECKPOINT), (NEW_CHECKPOINT, CHECKPOINT)]
    assert latest_checkpoint(tmp_path) == tmp_path / OLD_CHECKPOINT
    assert_checkpoint_of(latest_checkpoint(tmp_path), 1)

    monkeypatch.setattr(checkpoints.os, "replace", real_replace)
    save(tmp_path, 3)  # the next save recovers from the state the crash left
    assert latest_checkpoint(tmp_path) == tmp_path / CHECKPOINT
    assert_checkpoint_of(tmp_path / CHECKPOINT, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT]


def test_half_written_staging_directory_is_ignored_and_replaced(tmp_path):
    save(tmp_path, 1)
    staging = tmp_path / NEW_CHECKPOINT
    (staging / "replay").mkdir(parents=True)
    (staging / "replay" / "frames.npy").write_bytes(b"\x93NUMPY torn")  # no manifest yet
    assert_checkpoint_of(latest_checkpoint(tmp_path), 1)

    save(tmp_path, 2)
    assert_checkpoint_of(latest_checkpoint(tmp_path), 2)
    assert not staging.exists()


def test_only_the_old_checkpoint_left(tmp_path):
    save(tmp_path, 1)
    os.replace(tmp_path / CHECKPOINT, tmp_path / OLD_CHECKPOINT)  # crash after rename 1
    assert latest_checkpoint(tmp_path) == tmp_path / OLD_CHECKPOINT
    assert_checkpoint_of(latest_checkpoint(tmp_path), 1)


def test_both_checkpoints_left_prefers_the_new_one(tmp_path):
    save(tmp_path, 1)
    os.replace(tmp_path / CHECKPOINT, tmp_path / OLD_CHECKPOINT)
    save(tmp_path, 2)  # renames only the new one into place, then removes the old
    assert_checkpoint_of(latest_checkpoint(tmp_path), 2)
    save(tmp_path, 3)
    (tmp_path / OLD_CHECKPOINT).mkdir()  # e.g. a crash before the old one was removed
    assert latest_checkpoint(tmp_path) == tmp_path / CHECKPOINT


def test_a_directory_without_manifest_is_not_a_checkpoint(tmp_path):
    save(tmp_path, 1)
    os.replace(tmp_path / CHECKPOINT, tmp_path / OLD_CHECKPOINT)
    (tmp_path / CHECKPOINT / "network").mkdir(parents=True)
    assert latest_checkpoint(tmp_path) == tmp_path / OLD_CHECKPOINT


# -- a full disk ---------------------------------------------------------------------------


def full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def assert_failed_cleanly(tmp_path: Path, error: pytest.ExceptionInfo, previous: int) -> None:
    message = str(error.value)
    assert "could not write a checkpoint" in message
    assert "No space left on device" in message and "free some disk space" in message
    assert "\n" not in message
    assert_checkpoint_of(latest_checkpoint(tmp_path), previous)
    assert not (tmp_path / NEW_CHECKPOINT).exists()
    assert not (tmp_path / OLD_CHECKPOINT).exists()


def test_full_disk_while_writing_arrays(tmp_path, monkeypatch):
    save(tmp_path, 1)
    monkeypatch.setattr(checkpoints.np, "save", full_disk)
    with pytest.raises(CheckpointError) as error:
        save(tmp_path, 2)
    assert_failed_cleanly(tmp_path, error, previous=1)


def test_full_disk_while_writing_the_manifest(tmp_path, monkeypatch):
    save(tmp_path, 1)
    monkeypatch.setattr(checkpoints.os, "fsync", full_disk)
    with pytest.raises(CheckpointError) as error:
        save(tmp_path, 2)
    monkeypatch.undo()
    assert_failed_cleanly(tmp_path, error, previous=1)


def test_full_disk_while_tensorflow_writes_the_networks(tmp_path):
    """TensorFlow raises its own error type on a full disk (ResourceExhaustedError)."""

    class ResourceExhaustedError(Exception):  # stands in for tf.errors.ResourceExhaustedError
        pass

    def write_network(prefix: str) -> None:
        Path(prefix).parent.mkdir(parents=True)
        Path(prefix + ".data").write_bytes(b"torn")
        raise ResourceExhaustedError("ckpt.data; No space left on device [Op:SaveV2]")

    save(tmp_path, 1)
    with pytest.raises(CheckpointError) as error:
        save(tmp_path, 2, write_network=write_network)
    assert isinstance(error.value.__cause__, ResourceExhaustedError)
    assert_failed_cleanly(tmp_path, error, previous=1)


def test_full_disk_on_the_first_checkpoint_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoints.np, "save", full_disk)
    with pytest.raises(CheckpointError, match="No space left on device"):
        save(tmp_path, 1)
    assert latest_checkpoint(tmp_path) is None
    assert list(tmp_path.iterdir()) == []


# -- reading -----------------------------------------------------------------------------


def test_wrong_format_version_is_refused(tmp_path):
    path = save(tmp_path, 1)
    manifest = json.loads((path / MANIFEST).read_text())
    manifest["format_version"] = FORMAT_VERSION + 1
    (path / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=f"format {FORMAT_VERSION + 1}, expected "
                                              f"{FORMAT_VERSION}"):
        read_manifest(path)
    del manifest["format_version"]
    (path / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="format None"):
        read_manifest(path)


@pytest.mark.parametrize("text", ["{\"step\": 1", "[1, 2]", ""])
def test_a_corrupt_manifest_is_a_checkpoint_error(tmp_path, text):
    path = save(tmp_path, 1)
    (path / MANIFEST).write_text(text)
    with pytest.raises(CheckpointError, match="manifest|format"):
        read_manifest(path)
