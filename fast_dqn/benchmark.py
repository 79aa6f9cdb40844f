"""Throughput of the trainers, measured in one process with the same settings.

    python -m fast_dqn.benchmark [--workers 8 [16 ...]] [--trainer-stub-ms X --query-stub-ms Y]

Measures (a) the trainer alone (minibatch updates/s; 4 x that is the training-bound limit in
agent steps/s), (b) the serial reference loop, (c) the fast scheme for each worker count, and
(d) the W environments alone (the emulation-bound limit of this machine),
all on real Atari emulation with a short random start and then fixed exploration (epsilon =
--final-epsilon). Prints a table and one JSON line with the ratios (docs/design.md §6).

With --trainer-stub-ms/--query-stub-ms the network work alone (the minibatch update and the
batched Q query) is replaced by GIL-releasing waits of that length, to see what the CPU side
sustains for a GPU of that speed; everything else (emulation, replay sampling on the trainer
thread, flushes) runs for real.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Sequence

import numpy as np

from fast_dqn.agents import DQN, FastDQN, TrainingLoop
from fast_dqn.atari import resolve_game
from fast_dqn.config import ALGO_FAST_DQN, XLA_MODES, Config, OneLineErrorParser, validate
from fast_dqn.counters import round_up
from fast_dqn.launch import make_pool
from fast_dqn.loop_parts import LoopParts
from fast_dqn.replay_memory import Batch, ReplayMemory, Transitions, empty_batch
from fast_dqn.samplers import SERIAL


class NullRunLog:
    """Discards what a benchmark run would log."""

    def log_episode(self, row) -> None:
        pass

    def flush(self) -> None:
        pass

    def log_evaluation(self, timestep: int, returns: list[float], hours: float) -> dict:
        return {}

    def log_scalars(self, step: int, scalars: dict[str, float]) -> None:
        pass


class StubQNetwork:
    """Stands in for the Q-network with timed waits that release the GIL.

    `update` waits `train_ms`, `greedy_actions` waits `query_ms` and returns action 0; the
    time spent in updates is summed so that the trainer's busy fraction can be reported.
    """

    def __init__(self, n_actions: int, train_ms: float, query_ms: float):
        self.n_actions = n_actions
        self._train_seconds = train_ms / 1000.0
        self._query_seconds = query_ms / 1000.0
        self._updates = 0

    def greedy_actions(self, states: np.ndarray, use_target: bool = True) -> np.ndarray:
        time.sleep(self._query_seconds)
        return np.zeros(len(states), dtype=np.int64)

    def update(self, batch: Batch) -> None:
        time.sleep(self._train_seconds)
        self._updates += 1

    def update_many(self, batches: Batch, count: int) -> None:
        time.sleep(count * self._train_seconds)
        self._updates += count

    def sync_target(self) -> None:
        pass

    def take_train_stats(self) -> tuple[float, float, int]:
        updates, self._updates = self._updates, 0
        return 0.0, 0.0, updates


class BusyClock:
    """Sums the time spent inside a wrapped callable (on whichever thread calls it)."""

    def __init__(self):
        self.seconds = 0.0
        self._lock = threading.Lock()

    def wrap(self, fn):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                with self._lock:
                    self.seconds += time.perf_counter() - start
        return timed


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = OneLineErrorParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", default="pong")
    parser.add_argument("--workers", type=int, nargs="+", default=[8],
                        help="worker counts of the fast scheme to measure (default: 8)")
    parser.add_argument("--backend", choices=("vector", "threads"), default="vector")
    parser.add_argument("--random-steps", type=int, default=2000,
                        help="uniformly random agent steps before measuring (default: 2000)")
    parser.add_argument("--steps", type=int, default=10_000,
                        help="agent steps measured per configuration (default: 10000)")
    parser.add_argument("--target-update", type=int, default=10_000,
                        help="epoch length in agent steps (default: 10000, the Nature value)")
    parser.add_argument("--trainer-seconds", type=float, default=10.0,
                        help="how long to time the trainer alone (default: 10)")
    parser.add_argument("--emulation-seconds", type=float, default=3.0,
                        help="how long to time the envs alone per worker count (default: 3)")
    parser.add_argument("--final-epsilon", type=float, default=0.1)
    parser.add_argument("--skip-serial", action="store_true",
                        help="do not measure the serial reference")
    parser.add_argument("--trainer-stub-ms", type=float, default=None,
                        help="simulate the GPU: replace each minibatch update by a wait of X ms")
    parser.add_argument("--query-stub-ms", type=float, default=None,
                        help="simulate the GPU: replace each batched Q query by a wait of Y ms")
    parser.add_argument("--updates-per-call", type=int, default=Config.updates_per_call,
                        help="minibatch updates per trainer call in the fast scheme "
                             f"(default: {Config.updates_per_call})")
    parser.add_argument("--switch-interval-ms", type=float, default=None,
                        help="Python's GIL switch interval during the measurement "
                             "(default: Python's own, 5 ms)")
    parser.add_argument("--xla", choices=XLA_MODES, default=Config.xla,
                        help=f"XLA for the update, as run_fast_dqn.py's --xla (default: "
                             f"{Config.xla})")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if min(args.workers) < 1 or args.steps < 1 or args.random_steps < 0:
        parser.error("--workers and --steps must be at least 1, --random-steps at least 0")
    if (args.trainer_stub_ms is None) != (args.query_stub_ms is None):
        parser.error("--trainer-stub-ms and --query-stub-ms go together")
    if args.switch_interval_ms is not None and not args.switch_interval_ms > 0:
        parser.error("--switch-interval-ms must be positive")
    if args.updates_per_call < 1:
        parser.error("--updates-per-call must be at least 1")
    return args


def bench_config(args: argparse.Namespace, workers: int, concurrent: bool = True) -> Config:
    random_steps = round_up(args.random_steps, workers)
    config = Config(
        game=resolve_game(args.game), seed=args.seed, timesteps=random_steps + args.steps,
        replay_start=random_steps, replay_capacity=max(random_steps + args.steps, 10_000),
        exploration_steps=0, final_epsilon=args.final_epsilon, evaluate=0,
        target_update=args.target_update, workers=workers, concurrent=concurrent,
        backend=args.backend, checkpoint_every=0, updates_per_call=args.updates_per_call,
        xla=args.xla)
    validate(config, ALGO_FAST_DQN)
    return config


def make_network(args: argparse.Namespace, n_actions: int, config: Config):
    if args.trainer_stub_ms is not None:
        return StubQNetwork(n_actions, args.trainer_stub_ms, args.query_stub_ms)
    from fast_dqn.q_network import make_q_network
    return make_q_network(config, n_actions)


def warm_up(network, num_envs: int, batch_size: int, updates_per_call: int) -> None:
    """Traces the network's functions so that no compilation falls in a measured window."""
    states = np.zeros((batch_size, 4, 84, 84), dtype=np.uint8)
    network.update(Batch(states, np.zeros(batch_size, np.int32), np.zeros(batch_size, np.float32),
                         states, np.zeros(batch_size, bool)))
    if updates_per_call > 1:
        rows = batch_size * updates_per_call
        stacked = np.zeros((rows, 4, 84, 84), dtype=np.uint8)
        network.update_many(Batch(stacked, np.zeros(rows, np.int32), np.zeros(rows, np.float32),
                                  stacked, np.zeros(rows, bool)), updates_per_call)
    network.greedy_actions(states[:num_envs], use_target=True)
    network.greedy_actions(states[:num_envs], use_target=False)
    network.take_train_stats()


def measure_loop(args: argparse.Namespace, config: Config, fast: bool) -> dict:
    """Steps/s of one loop, and where the host's time goes (docs/design.md §6).

    Host cost per update: the trainer's time in sampling and training calls beyond the
    stub's wait (simulated runs only). Host cost per round: the acting loop's wall time
    beyond the emulators' step, the Q query and the wait for the trainer at sync points.
    """
    num_envs = config.workers if fast else 1
    pool = make_pool(config, num_envs, config.backend if fast else SERIAL, config.seed)
    network = make_network(args, pool.n_actions, config)
    warm_up(network, num_envs, config.batch_size, config.updates_per_call)
    trainer_clock, step_clock, query_clock, wait_clock = (BusyClock() for _ in range(4))
    network.update = trainer_clock.wrap(network.update)
    network.update_many = trainer_clock.wrap(network.update_many)
    network.greedy_actions = query_clock.wrap(network.greedy_actions)
    pool.step = step_clock.wrap(pool.step)
    memory = ReplayMemory(config.replay_capacity, np.random.default_rng(config.seed))
    memory.sample = trainer_clock.wrap(memory.sample)
    memory.sample_many = trainer_clock.wrap(memory.sample_many)
    parts = LoopParts(config=config, network=network, memory=memory, pool=pool,
                      make_eval_pool=None, run_log=NullRunLog(),
                      rng=np.random.default_rng(config.seed + 1))
    loop: TrainingLoop = FastDQN(parts) if fast else DQN(parts)
    if getattr(loop, "trainer", None) is not None:
        loop.trainer.wait = wait_clock.wrap(loop.trainer.wait)
    clocks = (trainer_clock, step_clock, query_clock, wait_clock)
    # the random start is not measured: every clock restarts where learning starts
    loop.counters.on_learning_start.append(lambda: [setattr(c, "seconds", 0.0) for c in clocks])
    try:
        loop.act_and_learn()
        steps_per_second, updates_per_second = loop.counters.rates()
        measured_steps = config.timesteps - config.replay_start
    finally:
        loop.close()
    wall = measured_steps / steps_per_second
    updates = max(loop.counters.updates, 1)
    rounds = measured_steps / num_envs
    result = {"steps_per_second": steps_per_second, "updates_per_second": updates_per_second,
              "trainer_busy": trainer_clock.seconds / wall,
              "update_ms": 1000.0 * trainer_clock.seconds / updates}
    if fast:
        acting = wall - step_clock.seconds - query_clock.seconds - wait_clock.seconds
        result["round_host_us"] = 1e6 * acting / rounds
        result["round_step_us"] = 1e6 * step_clock.seconds / rounds
    if args.trainer_stub_ms is not None:
        stub = updates * args.trainer_stub_ms / 1000.0
        result["update_host_us"] = 1e6 * (trainer_clock.seconds - stub) / updates
    return result


def measure_emulation(config: Config, seconds: float) -> float:
    """Agent steps/s of the W envs alone, stepped with random actions: the most any
    trainer can reach on this machine, whatever the GPU."""
    pool = make_pool(config, config.workers, config.backend, config.seed)
    rng = np.random.default_rng(config.seed)
    try:
        pool.reset(seed=config.seed)
        for _ in range(10):  # past the resets' no-ops
            pool.step(rng.integers(0, pool.n_actions, pool.num_envs))
        rounds, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            pool.step(rng.integers(0, pool.n_actions, pool.num_envs))
            rounds += 1
        return rounds * pool.num_envs / (time.perf_counter() - start)
    finally:
        pool.close()


def measure_trainer(args: argparse.Namespace, config: Config) -> float:
    """Minibatch updates/s of the trainer alone on a memory of random frames."""
    rng = np.random.default_rng(config.seed)
    memory = ReplayMemory(10_000, rng)
    count = memory.capacity
    memory.add_many(Transitions(frames=rng.integers(0, 256, (count, 84, 84), dtype=np.uint8),
                                actions=rng.integers(0, 6, count),
                                rewards=rng.normal(size=count).astype(np.float32),
                                terminals=rng.random(count) < 0.01,
                                episode_ends=rng.random(count) < 0.01,
                                sampleable=np.ones(count, dtype=bool)))
    network = make_network(args, 6, config)
    per_call = config.updates_per_call
    minibatches = empty_batch(config.batch_size * per_call)
    for _ in range(3):  # compile and warm up
        network.update_many(memory.sample_many(per_call, config.batch_size, minibatches),
                            per_call)
    network.take_train_stats()
    updates, start = 0, time.perf_counter()
    while time.perf_counter() - start < args.trainer_seconds:
        network.update_many(memory.sample_many(per_call, config.batch_size, minibatches),
                            per_call)
        updates += per_call
    network.take_train_stats()  # waits for the device to finish
    return updates / (time.perf_counter() - start)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        configs = {w: bench_config(args, w) for w in args.workers}
    except ValueError as error:
        print(f"benchmark: error: {error}", file=sys.stderr)
        return 2
    simulated = args.trainer_stub_ms is not None
    if args.switch_interval_ms is not None:
        sys.setswitchinterval(args.switch_interval_ms / 1000.0)
    if not simulated:
        from fast_dqn.q_network import configure_device
        print(configure_device(), flush=True)
    first = configs[args.workers[0]]
    rows: list[tuple[str, float, str]] = []
    trainer_ups = measure_trainer(args, first)
    limit = 4 * trainer_ups
    rows.append(("trainer alone", limit, f"{trainer_ups:.1f} updates/s"))
    print(f"trainer alone: {trainer_ups:.1f} updates/s -> limit {limit:.0f} steps/s", flush=True)
    result: dict = {"game": first.game, "simulated": simulated,
                    "trainer_updates_per_second": trainer_ups,
                    "training_limit_steps_per_second": limit}
    serial = None
    if not args.skip_serial:
        serial = measure_loop(args, bench_config(args, 1), fast=False)["steps_per_second"]
        rows.append(("serial reference", serial, ""))
        print(f"serial: {serial:.0f} steps/s", flush=True)
        result["serial_steps_per_second"] = serial
    fast_results = {}
    for workers, config in configs.items():
        measured = measure_loop(args, config, fast=True)
        measured["emulation_steps_per_second"] = measure_emulation(config,
                                                                   args.emulation_seconds)
        fast_results[workers] = measured
        note = (f"emulation alone {measured['emulation_steps_per_second']:.0f} steps/s, "
                f"trainer busy {measured['trainer_busy']:.0%}, "
                f"{measured['update_ms']:.2f} ms per update, "
                f"acting host {measured['round_host_us']:.0f} us per round")
        if simulated:
            note += f", trainer host {measured['update_host_us']:.0f} us per update"
        rows.append((f"fast, {workers} workers", measured["steps_per_second"], note))
        print(f"fast W={workers}: {measured['steps_per_second']:.0f} steps/s, {note}", flush=True)
    best_workers = max(fast_results, key=lambda w: fast_results[w]["steps_per_second"])
    best = fast_results[best_workers]
    result.update({
        "workers": best_workers, "fast_steps_per_second": best["steps_per_second"],
        "fast_over_limit": best["steps_per_second"] / limit,
        "fast_by_workers": {str(w): m["steps_per_second"] for w, m in fast_results.items()},
        "updates_per_call": args.updates_per_call, "xla": args.xla,
        "switch_interval_ms": 1000.0 * sys.getswitchinterval(),
        "round_host_us_by_workers": {str(w): m["round_host_us"]
                                     for w, m in fast_results.items()},
        "emulation_steps_per_second_by_workers": {str(w): m["emulation_steps_per_second"]
                                                  for w, m in fast_results.items()},
    })
    if serial:
        result["fast_over_serial"] = best["steps_per_second"] / serial
    if simulated:
        gpu_limit = first.train_freq * 1000.0 / args.trainer_stub_ms
        result.update({"trainer_stub_ms": args.trainer_stub_ms,
                       "query_stub_ms": args.query_stub_ms,
                       "sim_steps_per_second": best["steps_per_second"],
                       "sim_trainer_busy": best["trainer_busy"],
                       # time.sleep overshoots on a busy machine: the real cost per update
                       "sim_update_ms": best["update_ms"],
                       "sim_fraction_of_gpu_limit": best["steps_per_second"] / gpu_limit,
                       "gpu_limit_steps_per_second": gpu_limit,
                       # what this machine can reach at all: the GPU's limit, or its
                       # emulators' when they are slower
                       "sim_fraction_of_attainable": max(
                           m["steps_per_second"]
                           / min(gpu_limit, m["emulation_steps_per_second"])
                           for m in fast_results.values()),
                       "update_host_us": best["update_host_us"],
                       "round_host_us": best["round_host_us"],
                       "update_host_us_by_workers": {str(w): m["update_host_us"]
                                                     for w, m in fast_results.items()}})
    print_table(rows, serial, limit)
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0


def print_table(rows: list[tuple[str, float, str]], serial: float | None, limit: float) -> None:
    print(f"\n{'configuration':<22}{'steps/s':>10}{'x serial':>10}{'x limit':>10}  note")
    for name, steps_per_second, note in rows:
        over_serial = f"{steps_per_second / serial:.2f}" if serial else "-"
        print(f"{name:<22}{steps_per_second:>10.0f}{over_serial:>10}"
              f"{steps_per_second / limit:>10.2f}  {note}")


if __name__ == "__main__":
    sys.exit(main())
