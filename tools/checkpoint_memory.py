#!/usr/bin/env python3
"""Peak host memory of saving and reading a full replay memory's checkpoint.

    python tools/checkpoint_memory.py --out /tmp/ckpt [--capacity 1000000] [--replay-device device]

Fills a replay memory of --capacity random transitions (its frames on the training device
with --replay-device=device, in NumPy with host), saves its checkpoint arrays as a run does,
and then, in a fresh process, reads them back into an empty memory of the same kind. Each
step prints the process's peak resident memory (ru_maxrss) beside the size of the frames:
saving or reading that held a second full copy of the frames would show it as about twice
their size. On a CPU the device store itself is host memory; on a GPU only the chunks are.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FILL_CHUNK = 10_000  # transitions added at a time, like one sync point's flush


def peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # KiB on Linux


def make_memory(capacity: int, replay_device: str):
    """The memory a run builds with --replay-capacity and --replay-device."""
    from fast_dqn.device_frames import make_frame_store
    from fast_dqn.tensorflow_start import configure_device
    from fast_dqn.replay_memory import ReplayMemory

    configure_device()
    frames, _ = make_frame_store(replay_device, capacity)
    return ReplayMemory(capacity, np.random.default_rng(0), frames=frames)


def save(out: Path, capacity: int, replay_device: str) -> dict:
    from fast_dqn.checkpoints import save_checkpoint
    from fast_dqn.transitions import acted_transitions

    memory = make_memory(capacity, replay_device)
    after_allocation = peak_gb()
    rng = np.random.default_rng(1)
    for _ in range(0, capacity, FILL_CHUNK):
        memory.add_many(acted_transitions(
            rng.integers(0, 256, (FILL_CHUNK, 84, 84), dtype=np.uint8),
            rng.integers(0, 6, FILL_CHUNK), rng.integers(-1, 2, FILL_CHUNK),
            rng.random(FILL_CHUNK) < 0.001, rng.random(FILL_CHUNK) < 0.001))
    filled = peak_gb()
    out.mkdir(parents=True, exist_ok=True)  # save_checkpoint makes no run directory
    start = time.perf_counter()
    save_checkpoint(out, {"step": capacity}, None, memory.state_dict())
    return {"allocated_gb": after_allocation, "filled_gb": filled, "saved_gb": peak_gb(),
            "save_seconds": time.perf_counter() - start}


def read(out: Path, capacity: int, replay_device: str) -> dict:
    from fast_dqn.checkpoints import latest_checkpoint, read_replay_into

    memory = make_memory(capacity, replay_device)
    allocated = peak_gb()
    start = time.perf_counter()
    read_replay_into(latest_checkpoint(out), memory)
    seconds = time.perf_counter() - start
    memory.check_valid()
    return {"allocated_gb": allocated, "read_gb": peak_gb(), "read_seconds": seconds,
            "size": memory.size}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for the checkpoint")
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--replay-device", choices=("device", "host"), default="device")
    parser.add_argument("--step", choices=("save", "read"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:  # one step in this process, its figures as JSON on the last line
        step = save if args.step == "save" else read
        print(json.dumps(step(args.out, args.capacity, args.replay_device)))
        return 0
    frames_gb = args.capacity * 84 * 84 / 1e9
    print(f"frames: {frames_gb:.2f} GB ({args.capacity:,} transitions, "
          f"--replay-device={args.replay_device})")
    for step in ("save", "read"):  # each in a fresh process: its own peak
        output = subprocess.run([sys.executable, __file__, "--out", str(args.out), "--capacity",
                                 str(args.capacity), "--replay-device", args.replay_device,
                                 "--step", step], check=True, capture_output=True, text=True)
        figures = json.loads(output.stdout.strip().splitlines()[-1])
        print(step, " ".join(f"{key}={value:.2f}" if isinstance(value, float) else
                             f"{key}={value}" for key, value in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
