"""Throughput of the trainers, measured in one process with the same settings.

Measures the trainer alone (4 x its updates/s is the training-bound limit in agent steps/s),
the serial loop, the fast scheme for each worker count and the W environments alone, on real
emulation with a short random start, then fixed exploration; and the CPU time of an update
and of an agent step's acting, each alone, whose sum for one agent step bounds what the
machine's cores can run (the CPU-work limit). Prints a table and one JSON line
(docs/design.md §6). --trainer-stub-ms/--query-stub-ms replace the network's work alone by
GIL-releasing waits, to see what the host sustains for a GPU of that speed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from typing import Sequence

import numpy as np

from fast_dqn.training_loops import DQN, FastDQN, TrainingLoop, UpdateTimes
from fast_dqn.acting import Actor, GreedyFn
from fast_dqn.atari import game_actions, resolve_game
from fast_dqn.config import (ALGO_FAST_DQN, FRAME_SIZE, HISTORY, VARIANTS, Config,
                             OneLineErrorParser, add_config_flags, add_device_flag,
                             counted, new_run_settings, parse_count, validate)
from fast_dqn.schedule import round_up
from fast_dqn.launch import make_pool
from fast_dqn.loop_interfaces import LoopParts
from fast_dqn.tensorflow_start import configure_device, cpu_bfloat16_note, select_device
from fast_dqn.replay_memory import MinibatchDraws, ReplayMemory, make_replay_memory
from fast_dqn.transitions import SlotBatch, Transitions, minibatch_columns
from fast_dqn.run_logs import NullRunLog
from fast_dqn.env_pools import SERIAL


MODULE_COMMAND = "python -m fast_dqn.benchmark"
ONE_MINUTE_FLAGS = "--steps=1000 --random-steps=500 --trainer-windows=8 --emulation-seconds=1"
EPILOG = (f"Run as {MODULE_COMMAND} or fast-dqn-benchmark (after pip install .). The "
          "defaults take about 3 minutes on 2 cores; about one minute: "
          f"{MODULE_COMMAND} {ONE_MINUTE_FLAGS} (its fast / serial ratio is not the full "
          "run's: docs/throughput.md).")


def program_name(argv0: str) -> str:
    """The command for the usage line: `python -m` leaves the module's file in argv[0]."""
    name = os.path.basename(argv0)
    return MODULE_COMMAND if name in ("benchmark.py", "__main__.py", "") else name


# The trainer's settings the benchmark takes, as run_fast_dqn.py takes them (its parser's
# flags, help and checks): what the measured runs are made of. The benchmark sets the rest
# itself (its steps, replay and schedule, below) or takes them in its own form (--workers).
TRAINER_SETTINGS = ("game", "seed", "target_update", "final_epsilon", "batch_size", "backend",
                    "updates_per_call", "replay_device", "xla",
                    *(variant.field for variant in VARIANTS))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = OneLineErrorParser(prog=program_name(sys.argv[0]),
                                description=__doc__.split("\n\n")[0], epilog=EPILOG)
    add_config_flags(parser, ALGO_FAST_DQN, names=TRAINER_SETTINGS)
    parser.add_argument("--workers", type=int, nargs="+", default=[8],
                        help="worker counts of the fast scheme to measure (default: 8)")
    parser.add_argument("--random-steps", type=parse_count, default=2000,
                        help="uniformly random agent steps before measuring (default: 2000)")
    parser.add_argument("--steps", type=parse_count, default=10_000,
                        help="agent steps measured per configuration (default: 10000)")
    parser.add_argument("--trainer-seconds", type=float, default=1.0,
                        help="length of one window timing the trainer alone, at least one "
                             "call of --updates-per-call updates (default: 1)")
    parser.add_argument("--trainer-windows", type=int, default=24,
                        help="windows timing the trainer alone, half before the loops are "
                             "measured and half after; the limit is the fastest "
                             "(default: 24)")
    parser.add_argument("--emulation-seconds", type=float, default=3.0,
                        help="how long to time the envs alone, and again acting with the "
                             "network's queries, per worker count (default: 3)")
    parser.add_argument("--skip-serial", action="store_true",
                        help="do not measure the serial reference")
    parser.add_argument("--trainer-stub-ms", type=float, default=None,
                        help="simulate the GPU: replace each minibatch update by a wait of X ms")
    parser.add_argument("--query-stub-ms", type=float, default=None,
                        help="simulate the GPU: replace each batched Q query by a wait of Y ms")
    parser.add_argument("--switch-interval-ms", type=float, default=None,
                        help="Python's GIL switch interval during the measurement "
                             "(default: Python's own, 5 ms)")
    add_device_flag(parser)
    args = parser.parse_args(argv)
    if min(args.workers) < 1 or args.steps < 1 or args.random_steps < 0:
        parser.error("--workers and --steps must be at least 1, --random-steps at least 0")
    if (args.trainer_stub_ms is None) != (args.query_stub_ms is None):
        parser.error("--trainer-stub-ms and --query-stub-ms go together")
    if args.switch_interval_ms is not None and not args.switch_interval_ms > 0:
        parser.error("--switch-interval-ms must be positive")
    if args.trainer_windows < 2 or not args.trainer_seconds > 0:
        parser.error("--trainer-windows must be at least 2 (before the loops and after) and "
                     "--trainer-seconds positive")
    return args


def trainer_settings(args: argparse.Namespace) -> dict:
    """The trainer's settings given on the command line (TRAINER_SETTINGS), with their
    protocol's preset and optimizer's learning rate as a new run gets them."""
    given = {name: getattr(args, name) for name in TRAINER_SETTINGS
             if getattr(args, name) is not None}
    return new_run_settings(given)


def bench_replay_device(args: argparse.Namespace) -> str:
    """--replay-device; "auto" on a simulated GPU is what it is on a real one with room for
    the frames: the device."""
    replay_device = args.replay_device or Config.replay_device
    if replay_device == "auto" and args.trainer_stub_ms is not None:
        return "device"
    return replay_device


def make_memory(config: Config, capacity: int, rng: np.random.Generator) -> ReplayMemory:
    """A replay memory with its frames where the run's --replay-device puts them, its pages
    already in memory (see `touch_pages`)."""
    from fast_dqn.device_frames import make_frame_store
    frames, _ = make_frame_store(config.replay_device, capacity)
    memory = make_replay_memory(config.replace(replay_capacity=capacity), rng, frames)
    touch_pages(memory)
    return memory


def touch_pages(memory: ReplayMemory) -> None:
    """Writes zeros over every array of an empty memory, the device frames too, as a run's
    first pass over its ring does: a 50M-step run touches its pages in its first 2% of
    steps, and without this every measured flush would pay first-touch faults
    (docs/throughput.md)."""
    for column in memory.columns:
        column.fill(0)
    chunk = np.zeros((min(memory.capacity, 10_000), FRAME_SIZE, FRAME_SIZE), np.uint8)
    for start in range(0, memory.capacity, len(chunk)):
        memory.frames.put_rows(start, chunk[:memory.capacity - start])


def bench_config(args: argparse.Namespace, num_envs: int, concurrent: bool = True) -> Config:
    """The measured run's settings: the trainer's settings given (TRAINER_SETTINGS), and the
    benchmark's steps, replay and fixed exploration. Raises ValueError as `validate` does."""
    random_steps = round_up(args.random_steps, num_envs)
    settings = trainer_settings(args)
    config = Config(**{
        **settings, "game": resolve_game(settings.get("game", Config.game)),
        "timesteps": random_steps + args.steps, "replay_start": random_steps,
        "replay_capacity": max(random_steps + args.steps, 10_000), "exploration_steps": 0,
        "evaluate": 0, "workers": num_envs, "concurrent": concurrent, "checkpoint_every": 0,
        "replay_device": bench_replay_device(args)})
    validate(config, ALGO_FAST_DQN)
    return config


def simulated_device(args: argparse.Namespace):
    """The GPU that --trainer-stub-ms/--query-stub-ms describe (a `SimulatedDevice`), or
    None for the real network."""
    if args.trainer_stub_ms is None:
        return None
    from fast_dqn.simulated_gpu import SimulatedDevice, SimulatedGpu
    return SimulatedDevice(SimulatedGpu(update_ms=args.trainer_stub_ms,
                                        query_ms=args.query_stub_ms))


def make_bench_learner(args: argparse.Namespace, n_actions: int, config: Config,
                       memory: ReplayMemory):
    """The run's learner, on the simulated GPU where the arguments ask for one; and that
    simulated device (None for the real network)."""
    from fast_dqn.learner import make_learner
    from fast_dqn.simulated_gpu import make_simulated_learner
    device = simulated_device(args)
    frames = memory.frames.device_frames
    if device is None:
        return make_learner(config, n_actions, frames), None
    return make_simulated_learner(config, n_actions, device, frames), device


def zero_slots(rows: int) -> SlotBatch:
    """`rows` minibatch rows that all gather slot 0, with the memory's own types."""
    slots = np.zeros((rows, HISTORY), np.int32)
    mask = np.ones((rows, HISTORY), np.uint8)
    return SlotBatch(state_slots=slots, state_mask=mask, next_slots=slots, next_mask=mask,
                     **minibatch_columns(rows))


def warm_up(learner, memory: ReplayMemory, num_envs: int, batch_size: int,
            updates_per_call: int) -> None:
    """Traces the learner's functions so that no compilation falls in a measured window."""
    for count in sorted({1, updates_per_call}):
        learner.update(memory.frames.gather(zero_slots(batch_size * count)), count)
    states = np.zeros((max(num_envs, 1), HISTORY, FRAME_SIZE, FRAME_SIZE), np.uint8)
    learner.greedy_actions(states, use_target=True)
    learner.greedy_actions(states, use_target=False)
    learner.take_train_stats(0)


class LearningWindow:
    """What the loop's own clocks say between the replay start and the end of the run: the
    main thread's and the process's CPU time, the trainer's and the simulated GPU's sums."""

    def __init__(self, loop: TrainingLoop, device=None):
        self._loop = loop
        self._device = device  # the simulated GPU, if any
        self._started: tuple | None = None
        loop.counters.on_learning_start.append(self.start)

    def _readings(self) -> tuple[float, UpdateTimes, float, float]:
        thread = getattr(self._loop, "learner_thread", None)
        times = dataclasses.replace(thread.times) if thread is not None else UpdateTimes()
        simulated = 0.0 if self._device is None else self._device.simulated_seconds
        return time.thread_time(), times, simulated, time.process_time()

    def start(self) -> None:
        self._started = self._readings()

    def end(self) -> tuple[float, UpdateTimes, float, float]:
        """The acting loop's CPU seconds, the trainer's times, the simulated GPU's seconds
        and the process's CPU seconds since the start; call it on the main thread."""
        cpu, times, simulated, process = self._readings()
        cpu0, times0, simulated0, process0 = self._started
        return (cpu - cpu0,
                UpdateTimes(*(now - then for now, then in zip(dataclasses.astuple(times),
                                                                 dataclasses.astuple(times0)))),
                simulated - simulated0, process - process0)


def host_ceiling(round_cpu_us: float, update_cpu_us: float, num_envs: int,
                 steps_per_update: int) -> float:
    """The agent steps/s that the host's CPU work allows with unlimited cores and an
    infinitely fast GPU: one interpreter runs it all, W steps per round and 4 per update."""
    per_step_us = round_cpu_us / num_envs + update_cpu_us / steps_per_update
    return 1e6 / per_step_us


def measure_loop(args: argparse.Namespace, config: Config, fast: bool) -> dict:
    """Steps/s of one loop, and where the host's time goes (docs/design.md §6): wall and CPU
    time per update (the trainer's two threads) and per round (the acting loop)."""
    num_envs = config.workers if fast else 1
    pool = make_pool(config, num_envs, config.backend if fast else SERIAL, config.seed)
    memory = make_memory(config, config.replay_capacity, np.random.default_rng(config.seed))
    learner, device = make_bench_learner(args, pool.n_actions, config, memory)
    warm_up(learner, memory, num_envs, config.batch_size, config.updates_per_call)
    parts = LoopParts(config=config, learner=learner, memory=memory, pool=pool,
                      make_eval_pool=None, run_log=NullRunLog(),
                      rng=np.random.default_rng(config.seed + 1))
    loop: TrainingLoop = FastDQN(parts) if fast else DQN(parts)
    window = LearningWindow(loop, device)  # the random start is not measured
    try:
        loop.act_and_learn()
        acting_cpu, times, simulated, process_cpu = window.end()
        steps_per_second, updates_per_second = loop.counters.rates()
        measured_steps = config.timesteps - config.replay_start
    finally:
        loop.close()
    wall = measured_steps / steps_per_second
    updates = max(loop.counters.updates, 1)
    rounds = measured_steps / num_envs
    result = {"steps_per_second": steps_per_second, "updates_per_second": updates_per_second,
              # the share of the machine's cores that the run kept busy
              "cpu_busy": process_cpu / (wall * (os.cpu_count() or 1))}
    if fast:
        result.update({
            "trainer_busy": times.update_seconds / wall,
            "update_ms": 1000.0 * (times.draw_seconds + times.update_seconds) / updates,
            "update_cpu_us": 1e6 * times.cpu_seconds / updates,
            "round_wall_us": 1e6 * wall / rounds,
            "round_cpu_us": 1e6 * acting_cpu / rounds})
    if args.trainer_stub_ms is not None and fast:
        result["simulated_busy"] = simulated / wall
        result["update_host_us"] = 1000.0 * result["update_ms"] - 1000.0 * args.trainer_stub_ms
        result["host_ceiling_steps_per_second"] = host_ceiling(
            result["round_cpu_us"], result["update_cpu_us"], num_envs, config.train_freq)
    return result


def measure_acting(config: Config, seconds: float, greedy: GreedyFn) -> tuple[float, float]:
    """The W envs and their frame stacks alone, in one pool, for `seconds` twice: their agent
    steps/s with random actions (no query), the most any trainer can reach on this machine,
    whatever the GPU; then the process's CPU microseconds per agent step acting as the fast
    scheme acts, one batched query (`greedy`) of the W states a round at the final epsilon:
    the CPU work of acting, without the replay's writes."""
    pool = make_pool(config, config.workers, config.backend, config.seed)
    actor, rng = Actor(pool), np.random.default_rng(config.seed)

    def timed(epsilon: float) -> tuple[float, float]:
        """Steps/s and CPU microseconds per step of rounds at `epsilon` (1: no query)."""
        rounds, start, cpu_start = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - start < seconds:
            actor.play_round(greedy, epsilon, rng)
            rounds += 1
        cpu, wall = time.process_time() - cpu_start, time.perf_counter() - start
        steps = rounds * pool.num_envs
        return steps / wall, 1e6 * cpu / steps

    try:
        actor.reset(config.seed)
        for _ in range(10):  # past the resets' no-ops
            actor.play_round(greedy, 1.0, rng)
        emulation_steps_per_second, _ = timed(1.0)
        _, acting_cpu_us = timed(config.final_epsilon)
        return emulation_steps_per_second, acting_cpu_us
    finally:
        pool.close()


def cpu_work_limit(acting_cpu_us: float, update_cpu_us: float, steps_per_update: int) -> float:
    """The agent steps/s that the machine's cores can run if the scheme kept every core busy
    with no overhead: the cores' CPU seconds per second over the CPU time of one agent step,
    its acting and its share of an update, each measured alone."""
    return (os.cpu_count() or 1) * 1e6 / (acting_cpu_us + update_cpu_us / steps_per_update)


class TrainerAlone:
    """The trainer alone on a memory of random frames: minibatch updates/s, timed in windows.

    The windows are spread before and after the loops. Its figures are the fastest window
    and the least CPU time per update of any window: other work on the host slows some
    windows and never speeds one up, so these are the trainer's pace when least disturbed,
    what a limit asks for (docs/throughput.md).
    """

    def __init__(self, args: argparse.Namespace, config: Config, n_actions: int):
        rng = np.random.default_rng(config.seed)
        memory = make_memory(config, 10_000, rng)
        count = memory.capacity
        memory.add_many(Transitions(
            frames=rng.integers(0, 256, (count, FRAME_SIZE, FRAME_SIZE), dtype=np.uint8),
            actions=rng.integers(0, n_actions, count),
            rewards=rng.normal(size=count).astype(np.float32),
            terminals=rng.random(count) < 0.01, episode_ends=rng.random(count) < 0.01,
            sampleable=np.ones(count, dtype=bool)))
        self._learner, _ = make_bench_learner(args, n_actions, config, memory)
        self._per_call = config.updates_per_call
        self._draws = MinibatchDraws(memory, config.batch_size, self._per_call)
        for _ in range(3):  # compile and warm up
            self._update()
        self._learner.take_train_stats(0)
        self.windows: list[float] = []
        self.cpu_us_windows: list[float] = []  # the process's CPU time per update

    def _update(self) -> None:
        minibatches = self._draws.draw(self._per_call, buffer=0)
        self._draws.write_back(0, self._learner.update(minibatches, self._per_call))

    def measure(self, seconds: float) -> float:
        """Updates/s over one window of about `seconds`; kept in `windows`."""
        updates, start, cpu_start = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - start < seconds:
            self._update()
            updates += self._per_call
        self._learner.take_train_stats(0)  # waits for the device to finish
        self.windows.append(updates / (time.perf_counter() - start))
        self.cpu_us_windows.append(1e6 * (time.process_time() - cpu_start) / updates)
        return self.windows[-1]

    def greedy_actions(self, states: np.ndarray) -> np.ndarray:
        """The acting queries, on this trainer's network (its target)."""
        return self._learner.greedy_actions(states, use_target=True)

    @property
    def best(self) -> float:
        """The fastest window's updates/s."""
        return max(self.windows)

    @property
    def least_cpu_us(self) -> float:
        """The least CPU time per update of any window, in microseconds."""
        return min(self.cpu_us_windows)

    def drift(self, windows_before: int) -> float:
        """How far the fastest window before the loops and the fastest after are apart, as
        a share of the faster: what moved the machine for minutes at a time."""
        before, after = max(self.windows[:windows_before]), max(self.windows[windows_before:])
        return abs(before - after) / max(before, after)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        configs = {w: bench_config(args, w) for w in args.workers}
        serial_config = None if args.skip_serial else bench_config(args, 1)
        select_device(args.device)  # before anything imports TensorFlow
    except ValueError as error:
        print(f"benchmark: error: {error}", file=sys.stderr)
        return 2
    simulated = args.trainer_stub_ms is not None
    if args.switch_interval_ms is not None:
        sys.setswitchinterval(args.switch_interval_ms / 1000.0)
    device = configure_device()
    print(f"simulated GPU ({args.trainer_stub_ms} ms per update, {args.query_stub_ms} ms per "
          "query); the host side on this machine" if simulated else device, flush=True)
    first = configs[args.workers[0]]
    if (first.precision == "bfloat16" and not simulated and "on CPU" in device
            and (note := cpu_bfloat16_note())):
        print(note, flush=True)  # and measured anyway
    rows: list[tuple[str, float, str]] = []
    trainer_alone = TrainerAlone(args, first, game_actions(first))
    windows_before = (args.trainer_windows + 1) // 2
    for _ in range(windows_before):
        trainer_alone.measure(args.trainer_seconds)
    print(f"trainer alone: {trainer_alone.best:.1f} updates/s (the fastest of "
          f"{counted(windows_before, 'window')}; more after the loops)", flush=True)
    result: dict = {"game": first.game, "simulated": simulated,
                    **dispatch_figures(first, game_actions(first))}
    serial = None
    if serial_config is not None:
        serial = measure_loop(args, serial_config, fast=False)["steps_per_second"]
        rows.append(("serial reference", serial, ""))
        print(f"serial: {serial:.0f} steps/s", flush=True)
        result["serial_steps_per_second"] = serial
    fast_results = {}
    for num_envs, config in configs.items():
        measured = measure_loop(args, config, fast=True)
        measured["emulation_steps_per_second"], measured["acting_cpu_us"] = measure_acting(
            config, args.emulation_seconds, trainer_alone.greedy_actions)
        fast_results[num_envs] = measured
        note = fast_note(measured)
        rows.append((f"fast, {num_envs} workers", measured["steps_per_second"], note))
        print(f"fast W={num_envs}: {measured['steps_per_second']:.0f} steps/s, {note}", flush=True)
    for _ in range(args.trainer_windows - windows_before):
        trainer_alone.measure(args.trainer_seconds)
    trainer_ups = trainer_alone.best
    limit = 4 * trainer_ups
    rows.insert(0, ("training limit", limit, "4 agent steps per update of the trainer alone"))
    update_cpu_us = trainer_alone.least_cpu_us
    for measured in fast_results.values():
        measured["cpu_work_limit"] = cpu_work_limit(measured["acting_cpu_us"], update_cpu_us,
                                                    first.train_freq)
    drift = trainer_alone.drift(windows_before)
    print(f"trainer alone: {trainer_ups:.1f} updates/s (the fastest of "
          f"{counted(len(trainer_alone.windows), 'window')}; the fastest before the loops and "
          f"after them {drift:.1%} apart; the windows' median "
          f"{np.median(trainer_alone.windows):.1f})", flush=True)
    warn_of_drift(drift)
    result.update({"trainer_updates_per_second": trainer_ups,
                   "trainer_updates_per_second_windows": trainer_alone.windows,
                   "trainer_update_cpu_us_windows": trainer_alone.cpu_us_windows,
                   "trainer_drift": drift,
                   "training_limit_steps_per_second": limit})
    best_workers = max(fast_results, key=lambda w: fast_results[w]["steps_per_second"])
    best = fast_results[best_workers]
    rows.insert(1, ("CPU-work limit", best["cpu_work_limit"],
                    f"{os.cpu_count() or 1} cores / CPU per agent step, each part alone: "
                    f"acting {best['acting_cpu_us']:.0f} us (W={best_workers}) + update "
                    f"{update_cpu_us:.0f} us / {first.train_freq}"))
    result.update({
        "workers": best_workers, "fast_steps_per_second": best["steps_per_second"],
        "fast_over_limit": best["steps_per_second"] / limit,
        "trainer_alone_update_cpu_us": update_cpu_us,
        "cpu_work_limit_steps_per_second": best["cpu_work_limit"],
        "fast_over_cpu_work_limit": best["steps_per_second"] / best["cpu_work_limit"],
        "fast_by_workers": by_workers(fast_results, "steps_per_second"),
        "updates_per_call": first.updates_per_call, "xla": first.xla,
        "replay_device": first.replay_device,
        **{variant.field: getattr(first, variant.field) for variant in VARIANTS},
        "switch_interval_ms": 1000.0 * sys.getswitchinterval(),
        "emulation_steps_per_second_by_workers": by_workers(fast_results,
                                                            "emulation_steps_per_second"),
    })
    for key in ("update_ms", "update_cpu_us", "round_cpu_us", "round_wall_us", "cpu_busy",
                "acting_cpu_us"):
        result[key] = best[key]
        result[f"{key}_by_workers"] = by_workers(fast_results, key)
    if serial:
        result["fast_over_serial"] = best["steps_per_second"] / serial
    if simulated:
        result.update(simulated_figures(args, first, fast_results, best))
    print_table(rows, serial, limit, best["cpu_work_limit"])
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0


def warn_of_drift(drift: float) -> None:
    """Says on stderr when the trainer alone's fastest windows before and after the loops
    disagree by more than 5%."""
    if drift > 0.05:
        print(f"warning: the trainer alone's fastest windows before and after the loops are "
              f"{drift:.0%} apart, more than 5%: something else ran on this machine for "
              "minutes, and the limits and the ratios to them are uncertain; measure again on "
              "an idle machine", file=sys.stderr, flush=True)


def dispatch_figures(config: Config, n_actions: int) -> dict[str, dict[str, int]]:
    """What the host dispatches per update and per query of the run's network (the real
    one, also where the GPU is simulated): framework ops one by one without XLA, one
    compiled launch with it (`learner.dispatched_ops`); printed in one line."""
    from fast_dqn.learner import dispatched_ops, make_learner
    learner = make_learner(config.replace(xla="off"), n_actions)
    update, query = dispatched_ops(learner, config.batch_size, config.workers)
    figures = {"dispatch_per_update": {"xla_off": sum(update.values()), "xla_on": 1},
               "dispatch_per_query": {"xla_off": sum(query.values()), "xla_on": 1}}
    print(f"dispatched per update: {figures['dispatch_per_update']['xla_off']} framework ops "
          f"without XLA, 1 compiled launch with it; per query of {config.workers} states: "
          f"{figures['dispatch_per_query']['xla_off']} and 1", flush=True)
    return figures


def by_workers(results: dict[int, dict], key: str) -> dict[str, float]:
    return {str(num_envs): measured[key] for num_envs, measured in results.items()}


def fast_note(measured: dict) -> str:
    note = (f"emulation alone {measured['emulation_steps_per_second']:.0f} steps/s, "
            f"cores busy {measured['cpu_busy']:.0%} (process CPU time / (wall time x "
            f"{os.cpu_count() or 1} cores)), "
            f"trainer busy {measured['trainer_busy']:.0%}, "
            f"{measured['update_ms']:.2f} ms per update ({measured['update_cpu_us']:.0f} us "
            f"CPU), {measured['round_wall_us']:.0f} us per round "
            f"({measured['round_cpu_us']:.0f} us CPU)")
    if "host_ceiling_steps_per_second" in measured:
        note += f", host ceiling {measured['host_ceiling_steps_per_second']:.0f} steps/s"
    return note


def simulated_figures(args: argparse.Namespace, config: Config, fast_results: dict[int, dict],
                      best: dict) -> dict:
    """The simulated GPU's limit and how near the fast scheme came to it."""
    gpu_limit = config.train_freq * 1000.0 / args.trainer_stub_ms
    return {
        "trainer_stub_ms": args.trainer_stub_ms, "query_stub_ms": args.query_stub_ms,
        "sim_steps_per_second": best["steps_per_second"],
        "sim_trainer_busy": best["trainer_busy"],
        "sim_gpu_busy": best["simulated_busy"],
        # time.sleep overshoots on a busy machine: the real cost per update
        "sim_update_ms": best["update_ms"],
        "sim_fraction_of_gpu_limit": best["steps_per_second"] / gpu_limit,
        "gpu_limit_steps_per_second": gpu_limit,
        # what this machine can reach at all: the GPU's limit, or its emulators' when they
        # are slower
        "sim_fraction_of_attainable": max(
            m["steps_per_second"] / min(gpu_limit, m["emulation_steps_per_second"])
            for m in fast_results.values()),
        "update_host_us": best["update_host_us"],
        "update_host_us_by_workers": by_workers(fast_results, "update_host_us"),
        # the most of all worker counts: the host's work per step shrinks as W grows
        "host_ceiling_steps_per_second": max(m["host_ceiling_steps_per_second"]
                                             for m in fast_results.values()),
        "host_ceiling_steps_per_second_by_workers": by_workers(
            fast_results, "host_ceiling_steps_per_second"),
    }


def print_table(rows: list[tuple[str, float, str]], serial: float | None, limit: float,
                cpu_limit: float) -> None:
    """Each row's steps/s and its ratios to the serial reference, the training limit and
    the CPU-work limit."""
    print(f"\n{'configuration':<22}{'steps/s':>10}{'x serial':>10}{'x limit':>10}"
          f"{'x CPU work':>12}  note")
    for name, steps_per_second, note in rows:
        over_serial = f"{steps_per_second / serial:.2f}" if serial else "-"
        print(f"{name:<22}{steps_per_second:>10.0f}{over_serial:>10}"
              f"{steps_per_second / limit:>10.2f}{steps_per_second / cpu_limit:>12.2f}  {note}")


if __name__ == "__main__":
    sys.exit(main())
