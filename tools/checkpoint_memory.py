#!/usr/bin/env python3
"""Peak host memory of saving, then reading back, a full replay memory's checkpoint, its frames
on the training device as with --replay-device=device (the figure of docs/checkpoints.md).

Each step in a fresh process, its own peak; a second full copy of the frames would show as
about twice their size:

    python tools/checkpoint_memory.py save DIR [--capacity 1000000]
    python tools/checkpoint_memory.py read DIR [--capacity 1000000]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fast_dqn.checkpoints import latest_checkpoint, read_replay_into, save_checkpoint  # noqa: E402
from fast_dqn.device_frames import make_frame_store  # noqa: E402
from fast_dqn.tensorflow_start import configure_device  # noqa: E402
from fast_dqn.replay_memory import ReplayMemory  # noqa: E402
from fast_dqn.transitions import acted_transitions  # noqa: E402

FILL_CHUNK = 10_000  # transitions added at a time, like one sync point's flush


def peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # KiB on Linux


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("save", "read"))
    parser.add_argument("dir", type=Path, help="directory of the checkpoint")
    parser.add_argument("--capacity", type=int, default=1_000_000)
    args = parser.parse_args()
    print(f"frames: {args.capacity * 84 * 84 / 1e9:.2f} GB ({args.capacity:,} transitions)")
    configure_device()
    frames, _ = make_frame_store("device", args.capacity)  # as a run builds it
    memory = ReplayMemory(args.capacity, np.random.default_rng(0), frames=frames)
    figures = {"allocated_gb": peak_gb()}
    start = time.perf_counter()
    if args.step == "save":
        rng = np.random.default_rng(1)
        for _ in range(0, args.capacity, FILL_CHUNK):
            memory.add_many(acted_transitions(
                rng.integers(0, 256, (FILL_CHUNK, 84, 84), dtype=np.uint8),
                rng.integers(0, 6, FILL_CHUNK), rng.integers(-1, 2, FILL_CHUNK),
                rng.random(FILL_CHUNK) < 0.001, rng.random(FILL_CHUNK) < 0.001))
        figures["filled_gb"] = peak_gb()
        args.dir.mkdir(parents=True, exist_ok=True)  # save_checkpoint makes no run directory
        start = time.perf_counter()
        save_checkpoint(args.dir, {"step": args.capacity}, None, memory.state_dict())
    else:
        read_replay_into(latest_checkpoint(args.dir), memory)
    figures[f"{args.step}_seconds"] = time.perf_counter() - start
    if args.step == "read":
        memory.check_valid()
    figures[f"{args.step}_gb"] = peak_gb()
    print(args.step, " ".join(f"{key}={value:.2f}" for key, value in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
