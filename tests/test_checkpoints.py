"""Tests of fast_dqn/checkpoints.py: round trips, no pickles, crash and full-disk safety, and
the manifest's sizes and CRC-32s (checked here against `zlib.crc32` of the bytes on disk).

The networks are stood in for by a fake writer that writes a file at the prefix it is given
(one test uses a real `tf.train.Checkpoint` of one variable), so most of these tests run
without TensorFlow.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import zlib
from pathlib import Path

import numpy as np
import pytest

from fast_dqn import checkpoints
from fast_dqn.checkpoints import (CHECKPOINT, FORMAT_VERSION, MANIFEST, NEW_CHECKPOINT,
                                  OLD_CHECKPOINT, CheckpointError, check_checkpoint_names,
                                  clear_leftovers, latest_checkpoint, network_prefix,
                                  read_manifest, read_replay_into, replay_in, save_checkpoint,
                                  verify_checkpoint)
from fast_dqn.replay_memory import ReplayMemory
from fast_dqn.transitions import acted_transitions
from fast_dqn.run_dir import OpenDirectory, RunDirGone, WriteFailed
from tests.fakes import flip_byte

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


def files_on_disk(checkpoint: Path) -> dict[str, dict]:
    """Every file of a checkpoint but the manifest, with its size and CRC-32 as read here."""
    return {path.relative_to(checkpoint).as_posix():
            {"bytes": os.path.getsize(path), "crc32": f"{zlib.crc32(path.read_bytes()):08x}"}
            for path in sorted(checkpoint.rglob("*")) if path.is_file() and path.name != MANIFEST}


def rewrite_manifest(checkpoint: Path, manifest: dict) -> None:
    """Writes `manifest` with a checksum made as documented: CRC-32 of the other content as
    compact, key-sorted JSON."""
    body = {key: value for key, value in manifest.items() if key != "checksum"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    (checkpoint / MANIFEST).write_text(json.dumps({**body,
                                                   "checksum": f"{zlib.crc32(canonical):08x}"}))


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
    assert verify_checkpoint(checkpoint)["step"] == step
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
    stored = read_manifest(path)
    assert set(stored) == {"format_version", *manifest, "replay_saved", "files", "checksum"}
    assert {key: stored[key] for key in manifest} == manifest
    assert stored["format_version"] == FORMAT_VERSION and stored["replay_saved"] is True
    assert verify_checkpoint(path) == stored
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
    columns, frames = memory.columns, memory.frames.array
    assert read_replay_into(path, memory) is True
    assert memory.columns is columns and memory.frames.array is frames  # in place, no copy
    for name, expected in replay_arrays(9).items():
        np.testing.assert_array_equal(memory.state_dict()[name], expected)
    memory.check_valid()


def test_read_replay_into_without_replay(tmp_path):
    path = save_checkpoint(tmp_path, {"step": 1}, fake_network(b"n"), None)
    memory = ReplayMemory(CAPACITY, np.random.default_rng(0))
    assert read_replay_into(path, memory) is False
    assert not memory.frames.array.any() and memory.size == 0


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
    files = read_manifest(path)["files"]
    assert files == files_on_disk(path)  # TensorFlow's .index and .data-* files
    assert any(name.endswith(".index") for name in files)
    assert verify_checkpoint(path)["files"] == files


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

    def replace(src, dst, **dir_fds):
        renames.append((Path(src).name, Path(dst).name))
        if len(renames) == 2:
            raise OSError(errno.EIO, "simulated crash")
        real_replace(src, dst, **dir_fds)

    monkeypatch.setattr(checkpoints.os, "replace", replace)
    with pytest.raises(WriteFailed, match="simulated crash") as error:
        save(tmp_path, 2)
    assert not error.value.disk_full
    assert error.value.path == tmp_path / CHECKPOINT
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


def first_array() -> str:
    """The name of the first array `save` writes."""
    return next(iter(replay_arrays(0)))


def full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def assert_failed_cleanly(tmp_path: Path, error: pytest.ExceptionInfo, previous: int,
                          file: str) -> None:
    """The save failed as a full disk naming `file` (inside the staging directory), and the
    previous checkpoint is the latest and intact."""
    assert error.type is WriteFailed and error.value.disk_full
    assert error.value.path == tmp_path / NEW_CHECKPOINT / file
    message = str(error.value)
    assert message.startswith(f"cannot write {tmp_path / NEW_CHECKPOINT / file}: ")
    assert "No space left on device" in message and "free some disk space" in message
    assert "\n" not in message
    assert_checkpoint_of(latest_checkpoint(tmp_path), previous)
    assert not (tmp_path / NEW_CHECKPOINT).exists()
    assert not (tmp_path / OLD_CHECKPOINT).exists()


def test_full_disk_while_writing_arrays(tmp_path, monkeypatch):
    save(tmp_path, 1)
    monkeypatch.setattr(checkpoints.np, "save", full_disk)
    with pytest.raises(WriteFailed) as error:
        save(tmp_path, 2)
    assert_failed_cleanly(tmp_path, error, previous=1, file=f"replay/{first_array()}.npy")


def test_full_disk_while_writing_the_manifest(tmp_path, monkeypatch):
    save(tmp_path, 1)
    monkeypatch.setattr(checkpoints.os, "fsync", full_disk)
    with pytest.raises(WriteFailed) as error:
        save(tmp_path, 2)
    monkeypatch.undo()
    assert_failed_cleanly(tmp_path, error, previous=1, file=MANIFEST)


def test_full_disk_while_tensorflow_writes_the_networks(tmp_path):
    """TensorFlow raises its own error type on a full disk (ResourceExhaustedError)."""

    class ResourceExhaustedError(Exception):  # stands in for tf.errors.ResourceExhaustedError
        pass

    def write_network(prefix: str) -> None:
        Path(prefix).parent.mkdir(parents=True)
        Path(prefix + ".data").write_bytes(b"torn")
        raise ResourceExhaustedError("ckpt.data; No space left on device [Op:SaveV2]")

    save(tmp_path, 1)
    with pytest.raises(WriteFailed) as error:
        save(tmp_path, 2, write_network=write_network)
    assert isinstance(error.value.__cause__, ResourceExhaustedError)
    assert_failed_cleanly(tmp_path, error, previous=1, file="network")


def test_full_disk_on_the_first_checkpoint_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoints.np, "save", full_disk)
    with pytest.raises(WriteFailed, match="No space left on device") as error:
        save(tmp_path, 1)
    assert error.value.disk_full
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


def test_format_version_1_is_refused_by_name(tmp_path):
    path = save(tmp_path, 1)
    manifest = json.loads((path / MANIFEST).read_text())
    manifest["format_version"] = 1
    rewrite_manifest(path, manifest)  # a valid checksum: the version alone is refused
    with pytest.raises(CheckpointError) as error:
        read_manifest(path)
    message = str(error.value)
    assert f"format 1, expected {FORMAT_VERSION}" in message and str(path / MANIFEST) in message
    assert "\n" not in message


@pytest.mark.parametrize("text", ["{\"step\": 1", "[1, 2]", ""])
def test_a_corrupt_manifest_is_a_checkpoint_error(tmp_path, text):
    path = save(tmp_path, 1)
    (path / MANIFEST).write_text(text)
    with pytest.raises(CheckpointError, match="manifest|format"):
        read_manifest(path)


# -- sizes and CRC-32s: the manifest and verify_checkpoint ----------------------------------


def test_the_manifest_lists_every_file_with_its_size_and_crc32(tmp_path):
    path = save(tmp_path, 4)
    manifest = read_manifest(path)
    on_disk = files_on_disk(path)
    assert manifest["files"] == on_disk
    assert set(on_disk) == {"network/ckpt.data",
                            *(f"replay/{name}.npy" for name in replay_arrays(0))}
    assert manifest["replay_saved"] is True
    body = {key: value for key, value in manifest.items() if key != "checksum"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    assert manifest["checksum"] == f"{zlib.crc32(canonical):08x}"


def test_the_crc32_kept_while_streaming_matches_the_file_beyond_numpys_buffer(tmp_path,
                                                                              monkeypatch):
    """np.save writes an array larger than its 16 MiB buffer in several pieces; the CRC-32
    kept while streaming must still be that of the whole file."""
    big = np.random.default_rng(3).integers(0, 256, 20_000_000, dtype=np.uint8)
    writes = []
    real_write = checkpoints._ChecksummingWriter.write

    def write(self, data):
        writes.append(memoryview(data).nbytes)
        return real_write(self, data)

    monkeypatch.setattr(checkpoints._ChecksummingWriter, "write", write)
    arrays = {**replay_arrays(1), "big": big}  # beside a memory's files, which a resume reads
    path = save_checkpoint(tmp_path, {"step": 1}, fake_network(b"n"), arrays)
    assert len([size for size in writes if size > 1_000_000]) >= 2  # streamed in pieces
    file = path / "replay" / "big.npy"
    data = file.read_bytes()
    assert read_manifest(path)["files"]["replay/big.npy"] == {
        "bytes": os.path.getsize(file), "crc32": f"{zlib.crc32(data):08x}"}
    verify_checkpoint(path)
    np.testing.assert_array_equal(np.load(file, allow_pickle=False), big)


def test_verify_passes_on_a_fresh_checkpoint(tmp_path):
    path = save(tmp_path, 2)
    manifest = verify_checkpoint(path)
    assert manifest == read_manifest(path) and manifest["step"] == 2
    assert replay_in(path, manifest)


def assert_refused(checkpoint: Path, file: Path, message: str, **kwargs) -> None:
    """verify_checkpoint refuses in one line that names `file` and matches `message`."""
    with pytest.raises(CheckpointError, match=message) as error:
        verify_checkpoint(checkpoint, **kwargs)
    assert str(file) in str(error.value)
    assert "\n" not in str(error.value)


def test_verify_refuses_a_flipped_byte_in_the_replay(tmp_path):
    path = save(tmp_path, 2)
    frames = path / "replay" / "frames.npy"
    size = os.path.getsize(frames)
    flip_byte(frames)
    assert os.path.getsize(frames) == size
    assert_refused(path, frames, "is damaged: CRC-32")
    assert_refused(path, frames, "is damaged: CRC-32", replay_optional=True)


def test_verify_refuses_a_truncated_network_file(tmp_path):
    path = save(tmp_path, 2)
    data = path / "network" / "ckpt.data"
    size = os.path.getsize(data)
    data.write_bytes(data.read_bytes()[:-1])
    assert_refused(path, data, f"holds {size - 1} bytes; the manifest says {size}")


def test_verify_refuses_an_appended_byte(tmp_path):
    path = save(tmp_path, 2)
    rewards = path / "replay" / "rewards.npy"
    size = os.path.getsize(rewards)
    with open(rewards, "ab") as file:
        file.write(b"\0")
    assert_refused(path, rewards, f"holds {size + 1} bytes; the manifest says {size}")


def test_verify_refuses_a_deleted_replay_file(tmp_path):
    path = save(tmp_path, 2)
    actions = path / "replay" / "actions.npy"
    actions.unlink()
    assert_refused(path, actions, "is missing")
    # Only a wholly missing replay memory may be refilled; one missing file is damage.
    assert_refused(path, actions, "is missing", replay_optional=True)


def test_a_deleted_replay_directory_is_refused_unless_optional(tmp_path):
    path = save(tmp_path, 2)
    shutil.rmtree(path / "replay")
    with pytest.raises(CheckpointError, match=r"replay/\w+\.npy is missing") as error:
        verify_checkpoint(path)
    assert str(path / "replay") in str(error.value) and "\n" not in str(error.value)

    manifest = verify_checkpoint(path, replay_optional=True)
    assert manifest["replay_saved"] is True
    assert not replay_in(path, manifest)

    network = path / "network" / "ckpt.data"
    flip_byte(network)  # the other files are still checked
    assert_refused(path, network, "is damaged: CRC-32", replay_optional=True)


def test_read_manifest_refuses_a_hand_edited_manifest(tmp_path):
    path = save(tmp_path, 7)
    manifest = json.loads((path / MANIFEST).read_text())
    manifest["step"] = 8
    (path / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
    with pytest.raises(CheckpointError, match="damaged") as error:
        read_manifest(path)
    assert str(path / MANIFEST) in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(CheckpointError, match="damaged"):
        verify_checkpoint(path)


def test_read_manifest_refuses_an_edited_file_entry(tmp_path):
    path = save(tmp_path, 7)
    manifest = json.loads((path / MANIFEST).read_text())
    manifest["files"]["replay/frames.npy"]["bytes"] += 1
    (path / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="damaged"):
        read_manifest(path)


def test_read_manifest_accepts_another_spelling_of_the_same_content(tmp_path):
    path = save(tmp_path, 7)
    manifest = json.loads((path / MANIFEST).read_text())
    (path / MANIFEST).write_text(json.dumps(manifest))  # other whitespace, same content
    assert read_manifest(path) == manifest


def test_read_manifest_refuses_a_manifest_without_checksum(tmp_path):
    path = save(tmp_path, 7)
    manifest = json.loads((path / MANIFEST).read_text())
    del manifest["checksum"]
    (path / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="damaged") as error:
        read_manifest(path)
    assert str(path / MANIFEST) in str(error.value)


def test_verify_refuses_a_manifest_without_network_files(tmp_path):
    path = save(tmp_path, 7)
    manifest = json.loads((path / MANIFEST).read_text())
    del manifest["files"]["network/ckpt.data"]
    rewrite_manifest(path, manifest)
    read_manifest(path)  # the checksum is right; the content is not
    with pytest.raises(CheckpointError, match="no network files"):
        verify_checkpoint(path)


@pytest.mark.parametrize("name", ["../outside.bin", "network/../../outside.bin"])
def test_verify_refuses_a_file_outside_the_checkpoint(tmp_path, name):
    path = save(tmp_path, 7)
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"x")
    manifest = json.loads((path / MANIFEST).read_text())
    manifest["files"][name] = {"bytes": 1, "crc32": f"{zlib.crc32(b'x'):08x}"}
    rewrite_manifest(path, manifest)
    with pytest.raises(CheckpointError, match="outside"):
        verify_checkpoint(path)


def test_without_arrays_the_manifest_lists_no_replay(tmp_path):
    path = save_checkpoint(tmp_path, {"step": 1}, fake_network(b"n"), None)
    manifest = verify_checkpoint(path)
    assert manifest["replay_saved"] is False
    assert manifest["files"] == files_on_disk(path)
    assert list(manifest["files"]) == ["network/ckpt.data"]
    assert not (path / "replay").exists()
    assert not replay_in(path, manifest)


# -- the run directory's edges: links, leftovers, a moved or deleted directory --------------


def test_a_save_through_the_held_directory_follows_it_when_moved(tmp_path):
    path, moved = tmp_path / "run", tmp_path / "run.moved"
    path.mkdir()
    with OpenDirectory.at(path) as directory:
        save_checkpoint(directory, {"step": 1}, fake_network(b"net1"), replay_arrays(1))
        path.rename(moved)
        save_checkpoint(directory, {"step": 2}, fake_network(b"net2"), replay_arrays(2))
    assert not path.exists()
    assert_checkpoint_of(latest_checkpoint(moved), 2)
    assert sorted(p.name for p in moved.iterdir()) == [CHECKPOINT]


def test_a_save_into_a_deleted_directory_is_run_dir_gone_and_recreates_nothing(tmp_path):
    path = tmp_path / "run"
    path.mkdir()
    with OpenDirectory.at(path) as directory:
        save_checkpoint(directory, {"step": 1}, fake_network(b"net1"), replay_arrays(1))
        shutil.rmtree(path)
        with pytest.raises(RunDirGone, match="was deleted while the run ran"):
            save_checkpoint(directory, {"step": 2}, fake_network(b"net2"), replay_arrays(2))
    assert not path.exists()


def run_and_outside(tmp_path: Path) -> tuple[Path, Path]:
    """An empty run directory, and a directory outside it whose victim.txt ("keep") a link
    planted in the run must not lead a checkpoint's code to."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("keep")
    run = tmp_path / "run"
    run.mkdir()
    return run, outside


@pytest.mark.parametrize("name", [NEW_CHECKPOINT, OLD_CHECKPOINT, CHECKPOINT])
def test_a_link_where_a_checkpoint_belongs_is_refused_at_the_start(tmp_path, name):
    run, outside = run_and_outside(tmp_path)
    (run / name).symlink_to(outside, target_is_directory=True)
    with OpenDirectory.at(run) as directory:
        with pytest.raises(CheckpointError, match=rf"{re.escape(str(run / name))} is a "
                                                  "symbolic link"):
            check_checkpoint_names(directory)
    assert (outside / "victim.txt").read_text() == "keep"


def test_a_file_where_a_checkpoint_belongs_is_refused_at_the_start(tmp_path):
    (tmp_path / NEW_CHECKPOINT).write_text("x")
    with OpenDirectory.at(tmp_path) as directory:
        with pytest.raises(CheckpointError, match="checkpoint.tmp is not a directory"):
            check_checkpoint_names(directory)


def test_leftovers_of_a_crash_are_cleared_without_following_links_inside(tmp_path):
    run, outside = run_and_outside(tmp_path)
    save(run, 1)
    for name in (NEW_CHECKPOINT, OLD_CHECKPOINT):
        (run / name / "network").mkdir(parents=True)
        (run / name / "network" / "linked").symlink_to(outside, target_is_directory=True)
    with OpenDirectory.at(run) as directory:
        check_checkpoint_names(directory)  # plain directories: a crash's, not refused
        clear_leftovers(directory)
    assert sorted(p.name for p in run.iterdir()) == [CHECKPOINT]
    assert (outside / "victim.txt").read_text() == "keep"
    assert_checkpoint_of(latest_checkpoint(run), 1)


def test_files_a_killed_process_was_writing_are_cleared_and_nothing_else(tmp_path):
    """Regression: a SIGKILL during an atomic write (summary.json, an evaluation's video)
    left its hidden temporary file in the run directory for good."""
    save(tmp_path, 1)
    leftovers = [".summary.json.4242.0badc0de.tmp", ".eval-step400.31772.a327c343.tmp.mp4"]
    kept = [".notes.tmp", "summary.json.1.abcdef01.tmp", ".x.12.ABCDEF01.tmp", "play.mp4"]
    for name in leftovers + kept:
        (tmp_path / name).write_text("x")
    with OpenDirectory.at(tmp_path) as directory:
        clear_leftovers(directory)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([CHECKPOINT, *kept])


def test_an_old_checkpoint_that_is_the_latest_is_kept(tmp_path):
    save(tmp_path, 1)
    os.replace(tmp_path / CHECKPOINT, tmp_path / OLD_CHECKPOINT)  # a crash between renames
    with OpenDirectory.at(tmp_path) as directory:
        clear_leftovers(directory)
    assert_checkpoint_of(latest_checkpoint(tmp_path), 1)


def test_a_link_planted_at_the_staging_name_during_a_run_is_removed_not_followed(tmp_path):
    run, outside = run_and_outside(tmp_path)
    save(run, 1)
    (run / NEW_CHECKPOINT).symlink_to(outside, target_is_directory=True)
    (run / OLD_CHECKPOINT).symlink_to(outside, target_is_directory=True)
    save(run, 2)
    assert sorted(p.name for p in outside.iterdir()) == ["victim.txt"]
    assert (outside / "victim.txt").read_text() == "keep"
    assert_checkpoint_of(latest_checkpoint(run), 2)


def test_a_save_after_a_damaged_checkpoint_keeps_the_old_one_until_the_swap(tmp_path,
                                                                            monkeypatch):
    save(tmp_path, 1)
    os.replace(tmp_path / CHECKPOINT, tmp_path / OLD_CHECKPOINT)
    (tmp_path / CHECKPOINT / "network").mkdir(parents=True)  # no manifest: not a checkpoint
    real_replace = os.replace

    def crash_at_the_swap(src, dst, **kwargs):
        raise OSError(errno.EIO, "simulated crash")

    monkeypatch.setattr(checkpoints.os, "replace", crash_at_the_swap)
    with pytest.raises(WriteFailed, match="simulated crash"):
        save(tmp_path, 2)
    monkeypatch.setattr(checkpoints.os, "replace", real_replace)
    assert latest_checkpoint(tmp_path) == tmp_path / OLD_CHECKPOINT
    assert_checkpoint_of(latest_checkpoint(tmp_path), 1)


def test_verify_refuses_a_manifest_that_leaves_out_a_file_the_loader_reads(tmp_path):
    path = save(tmp_path, 7)
    manifest = json.loads((path / MANIFEST).read_text())
    del manifest["files"]["replay/cursor.npy"]
    rewrite_manifest(path, manifest)
    with pytest.raises(CheckpointError, match=r"does not list replay/cursor\.npy, which a "
                                              "resume reads"):
        verify_checkpoint(path)


def test_verify_refuses_a_file_the_manifest_does_not_list(tmp_path):
    path = save(tmp_path, 7)
    (path / "replay" / "extra.npy").write_bytes(b"x")
    with pytest.raises(CheckpointError, match=r"replay/extra\.npy is not in the manifest"):
        verify_checkpoint(path)


@pytest.mark.parametrize("name", ["replay/cursor.npy", "network/ckpt.data", "replay"])
def test_verify_refuses_a_link_inside_the_checkpoint_with_the_same_bytes(tmp_path, name):
    path = save(tmp_path, 7)
    outside = tmp_path / "outside"
    shutil.move(path / name, outside)  # the same bytes, so only the link is wrong
    (path / name).symlink_to(outside)
    with pytest.raises(CheckpointError, match="is a symbolic link; a checkpoint follows no link"):
        verify_checkpoint(path)


def test_the_readers_open_no_link(tmp_path):
    path = save(tmp_path, 7)
    outside = tmp_path / "outside.npy"
    shutil.move(path / "replay" / "size.npy", outside)
    (path / "replay" / "size.npy").symlink_to(outside)
    with pytest.raises(CheckpointError, match=r"replay/size\.npy is a symbolic link"):
        read_replay_into(path, ReplayMemory(CAPACITY, np.random.default_rng(0)))
    (path / MANIFEST).rename(tmp_path / "manifest.json")
    (path / MANIFEST).symlink_to(tmp_path / "manifest.json")
    with pytest.raises(CheckpointError, match="manifest.json: it is a symbolic link"):
        read_manifest(path)


def test_a_linked_checkpoint_directory_is_not_a_checkpoint(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    save(elsewhere, 1)
    run = tmp_path / "run"
    run.mkdir()
    (run / CHECKPOINT).symlink_to(elsewhere / CHECKPOINT, target_is_directory=True)
    assert latest_checkpoint(run) is None
    with pytest.raises(CheckpointError, match="is a symbolic link"):
        verify_checkpoint(run / CHECKPOINT)
