"""The frame store in its two places (fast_dqn/frame_store.py), on the CPU: rows written
around the ring as a naive loop writes them, the same minibatches and updates with the frames
on the device (--replay-device=device) as on the host, checkpoints with the same bytes, and
the choice that --replay-device=auto makes."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from fast_dqn import checkpoints
from fast_dqn.checkpoints import latest_checkpoint, read_replay_into, save_checkpoint
from fast_dqn.config import Config
from fast_dqn.device_frames import (DEVICE_HEADROOM_BYTES, DeviceFrames, choose_replay_device,
                                    frames_bytes)
from fast_dqn.frame_store import HostFrames
from fast_dqn.learner import gather_states, make_learner
from fast_dqn.replay_memory import ReplayMemory
from fast_dqn.transitions import (Batch, SlotBatch, Transitions, acted_transitions,
                                  zero_transitions)

from tests.fakes import naive_n_step, naive_transitions, random_stream

MEMORY_CAPACITY = 64

pytestmark = pytest.mark.usefixtures("cpu_device")  # deterministic ops, as in a run


def with_random_transitions(memory: ReplayMemory, seed: int = 3,
                            count: int = 150) -> ReplayMemory:
    """Random transitions in chunks of 20 (a flush each): the memory wraps around twice and
    many slots are invalid (episode ends, the overwritten oldest), so sampling rejects some."""
    rng = np.random.default_rng(seed)
    rows = acted_transitions(rng.integers(0, 256, (count, 84, 84), dtype=np.uint8),
                             rng.integers(0, 6, count), rng.normal(size=count),
                             rng.random(count) < 0.1, rng.random(count) < 0.3)
    for start in range(0, count, 20):
        memory.add_many(Transitions(*(column[start:start + 20] for column in rows)))
    return memory


@pytest.mark.parametrize("store_class", [HostFrames, DeviceFrames])
def test_a_write_goes_around_the_end_of_the_ring(store_class):
    store = store_class(10)
    frames = np.stack([np.full((84, 84), value, np.uint8) for value in range(1, 7)])
    store.write(7, frames)
    expected = np.zeros((10, 84, 84), np.uint8)
    for offset, value in enumerate(range(1, 7)):  # slots 7, 8, 9, 0, 1, 2
        expected[(7 + offset) % 10] = value
    np.testing.assert_array_equal(store.rows(0, 10), expected)
    store.put_rows(3, frames[:2])
    expected[3:5] = frames[:2]
    np.testing.assert_array_equal(store.rows(0, 10), expected)


@pytest.mark.parametrize("store", ["host", "device"])
@pytest.mark.parametrize("n", [1, 3, 5])
@pytest.mark.parametrize("capacity, transitions, seed", [
    (1000, 300, 0),  # no wrap
    (64, 300, 1),  # wraps several times, cursor mid-way
    (37, 37, 4),  # exactly full
])
def test_n_step_returns_and_discounts_are_the_naive_references(store, n, capacity,
                                                               transitions, seed):
    """Episodes ending in lost lives (terminals) or cut off, rewards clipped, a memory that
    wraps: each slot the memory lets be drawn, and its return, discount and bootstrap state,
    are what a naive reference works out step by step (tests/fakes.py: naive_n_step)."""
    from fast_dqn.learner import gathered_batch
    stream = random_stream(np.random.default_rng(seed), transitions)
    expected = naive_n_step(naive_transitions(stream), n, 0.9, capacity)
    frames = DeviceFrames(capacity) if store == "device" else None
    memory = ReplayMemory(capacity, np.random.default_rng(seed), frames=frames, discount=0.9,
                          n_step=n)
    for step in stream.steps:
        memory.add_many(acted_transitions(step.frame[None], np.array([step.action]),
                                          np.array([step.reward]), np.array([step.terminal]),
                                          np.array([step.episode_end])))
    valid = np.flatnonzero(memory.valid(np.arange(capacity)))
    assert set(valid.tolist()) == {t % capacity for t in expected}
    assert any(e.discount == 0 for e in expected.values()) and any(
        e.discount > 0 for e in expected.values()), "the stream should have both kinds"
    order = sorted(expected)
    batch = memory.batch(np.array([t % capacity for t in order]))
    if store == "device":
        batch = Batch(*(np.asarray(column) for column in gathered_batch(frames.variable, batch)))
    for row, t in enumerate(order):
        assert batch.returns[row] == pytest.approx(expected[t].returns, abs=1e-6), t  # float32
        assert batch.discounts[row] == pytest.approx(expected[t].discount, rel=1e-6), t
        if expected[t].next_state is not None:
            np.testing.assert_array_equal(batch.next_states[row], expected[t].next_state,
                                          err_msg=f"next state {t}")


def host_and_device(seed: int = 7) -> tuple[ReplayMemory, ReplayMemory]:
    host = with_random_transitions(ReplayMemory(MEMORY_CAPACITY, np.random.default_rng(seed)))
    device = with_random_transitions(ReplayMemory(MEMORY_CAPACITY, np.random.default_rng(seed),
                                                  frames=DeviceFrames(MEMORY_CAPACITY)))
    return host, device


def test_slots_gathered_on_the_device_are_the_host_minibatches():
    host, device = host_and_device()
    for _ in range(3):
        batches = host.batch(host.many_indices(3, 16))
        slots = device.batch(device.many_indices(3, 16))
        assert isinstance(batches, Batch) and isinstance(slots, SlotBatch)
        frames = device.frames.variable
        np.testing.assert_array_equal(
            gather_states(frames, slots.state_slots, slots.state_mask).numpy(), batches.states)
        np.testing.assert_array_equal(
            gather_states(frames, slots.next_slots, slots.next_mask).numpy(),
            batches.next_states)
        for name in ("actions", "returns", "discounts", "weights"):
            np.testing.assert_array_equal(getattr(slots, name), getattr(batches, name))
            assert getattr(slots, name).dtype == getattr(batches, name).dtype
    assert host.rng.random() == device.rng.random()  # the same draws were made


@pytest.mark.parametrize("xla", ["on", "off"])
@pytest.mark.parametrize("count", [1, 4])
def test_updates_from_device_slots_equal_updates_from_host_minibatches(xla, count):
    config = Config(xla=xla, seed=5)
    host, device = host_and_device()
    config = config.replace(prioritized=count > 1)  # then the updates return TD errors
    on_host = make_learner(config, 6)
    on_device = make_learner(config, 6, device.frames.device_frames)
    for _ in range(2):
        from_host = on_host.update(host.batch(host.many_indices(count, 32)), count)
        from_device = on_device.update(device.batch(device.many_indices(count, 32)), count)
        assert (from_host is None) == (from_device is None) == (count == 1)
        if count > 1:
            np.testing.assert_array_equal(from_host.numpy(), from_device.numpy())
    for a, b in zip(on_host.optimizer.variables + on_host.online.variables,
                    on_device.optimizer.variables + on_device.online.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.name)  # bit for bit
    assert on_host.take_train_stats(2 * count) == on_device.take_train_stats(2 * count)


def test_a_device_memory_saves_the_host_bytes_in_chunks_and_reads_them_back(tmp_path,
                                                                            monkeypatch):
    # 7 rows of 7,056 bytes at a time: the 64 rows go to and from the disk in 10 chunks.
    monkeypatch.setattr(checkpoints, "DEVICE_CHUNK_BYTES", 7 * 84 * 84)
    host, device = host_and_device()
    for name in ("host", "device"):
        (tmp_path / name).mkdir()  # save_checkpoint makes no run directory
    save_checkpoint(tmp_path / "host", {"step": 1}, None, host.state_dict())
    save_checkpoint(tmp_path / "device", {"step": 1}, None, device.state_dict())
    for name in ("frames", "actions", "rewards", "terminals", "episode_ends", "sampleable",
                 "cursor", "size", "capacity"):
        path = f"checkpoint/replay/{name}.npy"
        assert (tmp_path / "device" / path).read_bytes() == (tmp_path / "host" / path).read_bytes()

    restored = ReplayMemory(MEMORY_CAPACITY, np.random.default_rng(0),
                            frames=DeviceFrames(MEMORY_CAPACITY))
    assert read_replay_into(latest_checkpoint(tmp_path / "device"), restored)
    np.testing.assert_array_equal(restored.frames.rows(0, MEMORY_CAPACITY), host.frames.array)
    assert (restored.cursor, restored.size) == (host.cursor, host.size)
    restored.check_valid()


def test_a_checkpoint_of_a_memory_that_has_not_wrapped_fills_the_leading_rows(tmp_path):
    host = with_random_transitions(ReplayMemory(MEMORY_CAPACITY, np.random.default_rng(0)),
                                   count=40)
    save_checkpoint(tmp_path, {"step": 1}, None, host.state_dict())
    restored = ReplayMemory(MEMORY_CAPACITY, np.random.default_rng(0),
                            frames=DeviceFrames(MEMORY_CAPACITY))
    assert read_replay_into(latest_checkpoint(tmp_path), restored)
    np.testing.assert_array_equal(restored.frames.rows(0, 40), host.frames.array[:40])
    assert not restored.frames.rows(40, MEMORY_CAPACITY).any()
    assert restored.size == 40


GB = 10**9


@pytest.mark.parametrize("setting,has_gpu,free,on_device,says", [
    ("host", True, 100 * GB, False, "on the host"),
    ("device", False, None, True, "on the device"),
    ("auto", False, None, False, "on the host"),
    ("auto", True, None, False, "free memory is unknown"),
    # 1M frames of 84 x 84 are 7.06 GB; the device keeps 2 GiB free beside them
    ("auto", True, 9 * GB, False, "they need 7.1 GB, the GPU has 9.0 GB free"),
    ("auto", True, 10 * GB, True, "on the GPU (7.1 GB of 10.0 GB free)"),
])
def test_auto_puts_the_frames_on_a_gpu_with_room_for_them(setting, has_gpu, free, on_device,
                                                          says):
    assert frames_bytes(1_000_000) == 1_000_000 * 84 * 84
    assert DEVICE_HEADROOM_BYTES == 2 * 1024**3
    chosen, line = choose_replay_device(setting, 1_000_000, has_gpu, free)
    assert chosen is on_device
    assert says in line


def test_no_room_on_the_device_is_one_line_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    import tensorflow as tf

    from fast_dqn import device_frames
    from fast_dqn.config import ALGO_FAST_DQN
    from fast_dqn.launch import main

    def out_of_memory(capacity: int):
        raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")

    monkeypatch.setattr(device_frames, "DeviceFrames", out_of_memory)
    run_dir = tmp_path / "run"
    status = main(["--game=pong", "--replay-capacity=5000", "--replay-start=400",
                   "--replay-device=device", f"--logdir={run_dir}"], ALGO_FAST_DQN)
    assert status == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no room for the replay memory's frames (0.0 GB)" in err[0]
    assert "--replay-device=host" in err[0]
    assert not run_dir.exists()


def test_frames_written_are_the_devices_own_once_the_write_returns():
    """A flush lends its frames to TensorFlow (aligned, as the staging buffers are), and
    reuses those arrays at the next sync point: the write must be done with them."""
    frames = DeviceFrames(8)
    source = zero_transitions(5).frames
    assert source.ctypes.data % 64 == 0  # lent, not copied
    source[...] = np.arange(1, 6, dtype=np.uint8)[:, None, None]
    frames.write(6, source)  # around the end of the ring: slots 6, 7, 0, 1, 2
    source[...] = 99
    rows = frames.rows(0, 8)
    assert rows[[6, 7, 0, 1, 2], 40, 40].tolist() == [1, 2, 3, 4, 5]
    assert not rows[3:6].any()


def test_padded_frames_gather_zero_from_a_store_whose_every_slot_is_written():
    """No slot of a full store is zero here, so a padded frame can only come out zero if
    the gather takes it from the store's own zero row, whatever slot the mask covers."""
    frames = DeviceFrames(6)
    frames.write(0, np.full((6, 84, 84), 200, np.uint8))
    frames.write(4, np.full((3, 84, 84), 7, np.uint8))  # slots 4, 5, 0: around the end
    slots = tf.constant([[5, 0, 1, 2], [3, 4, 5, 0]], tf.int32)
    mask = tf.constant([[0, 1, 1, 1], [0, 0, 1, 1]], tf.uint8)  # as `SlotBatch` holds it
    states = gather_states(frames.variable, slots, mask).numpy()
    expected_first_pixels = [[0, 7, 200, 200], [0, 0, 7, 7]]  # worked out by hand
    assert states[:, :, 0, 0].tolist() == expected_first_pixels
    assert (states == states[:, :, :1, :1]).all()  # each frame uniform
    assert not frames.variable.numpy()[6].any()  # the zero row never written
