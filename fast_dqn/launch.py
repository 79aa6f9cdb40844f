"""Builds a training run from the command line and runs it; the entry points call `main`.

Failures and stopping follow docs/design.md §5.

Bad input is found before anything is written or allocated: it gets one line on stderr and
exit status 2. A run interrupted by SIGINT/SIGTERM exits with 130/143 after writing its
summary; a diverged run exits with 1.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from fast_dqn.agents import DQN, FastDQN, LoopParts, NonFiniteLoss, TrainingLoop, check_resources
from fast_dqn.atari import resolve_game
from fast_dqn.checkpoints import (CheckpointError, latest_checkpoint, network_prefix,
                                  read_manifest, read_replay_into, save_checkpoint)
from fast_dqn.config import (ALGO_DQN, ALGO_FAST_DQN, Config, flag_name, given_settings,
                             make_parser, validate)
from fast_dqn.replay_memory import ReplayMemory
from fast_dqn.run_files import Progress, RunFiles, check_run_dir_writable, default_run_dir
from fast_dqn.samplers import SERIAL, EnvPool, make_env_pool

DESCRIPTIONS = {
    ALGO_DQN: "Nature DQN on Atari, the serial reference procedure (Mnih et al., 2015): "
              "act 4 steps, train 1 minibatch, repeat.",
    ALGO_FAST_DQN: "Nature DQN on Atari, trained by the concurrent and synchronized scheme of "
                   "Daley & Amato (2021): samplers act with the target network while a "
                   "trainer thread updates the online network.",
}


def prepare_config(argv: Sequence[str] | None, algo: str) -> Config:
    """Parses and checks the command line; raises ValueError on bad input."""
    parser = make_parser(algo, DESCRIPTIONS[algo])
    settings = given_settings(parser.parse_args(argv))
    if settings.get("resume"):
        return resumed_config(settings, algo)
    config = Config(**settings)
    validate(config, algo)
    config = config.replace(game=resolve_game(config.game))
    if not config.logdir:
        config = config.replace(logdir=str(default_run_dir(config.game, algo, config.seed)))
    check_resources(config)
    check_run_dir_writable(Path(config.logdir))
    return config


def resumed_config(settings: dict[str, Any], algo: str) -> Config:
    """The settings of the run in --resume RUN_DIR; only --timesteps may change."""
    run_dir = Path(settings.pop("resume"))
    extra = sorted(set(settings) - {"timesteps"})
    if extra:
        raise ValueError(f"only --timesteps may be given with --resume; got "
                         f"{', '.join(flag_name(name) for name in extra)}")
    try:
        saved = json.loads((run_dir / "config.json").read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot resume {run_dir}: no readable config.json ({error})") from None
    if saved.get("algo") != algo:
        raise ValueError(f"{run_dir} was trained by {saved.get('algo')}, not {algo}")
    if latest_checkpoint(run_dir) is None:
        raise ValueError(f"cannot resume {run_dir}: it has no complete checkpoint")
    fields = {field.name for field in dataclasses.fields(Config)}
    config = Config(**{k: v for k, v in saved.items() if k in fields})
    config = config.replace(logdir=str(run_dir), resume=str(run_dir), **settings)
    validate(config, algo)
    check_resources(config)
    return config


def make_pool(config: Config, num_envs: int, backend: str, seed: int,
              max_episode_steps: int | None = None) -> EnvPool:
    """W envs of the run's game; games are cut off at the training cap unless told otherwise."""
    cap = config.max_episode_steps if max_episode_steps is None else max_episode_steps
    return make_env_pool(backend, config.game, num_envs, seed=seed, noop_max=config.noop_max,
                         sticky_actions=config.sticky_actions, max_episode_steps=cap,
                         interp=config.interp)


def eval_backend(config: Config) -> str:
    """ale-py's vector env where it gives the training frames; Python threads otherwise."""
    return "vector" if config.interp == "area" else "threads"


def make_eval_pool(config: Config) -> EnvPool:
    """One env per evaluation game, each cut off after 5 minutes of play by default."""
    return make_pool(config, config.eval_episodes, eval_backend(config), config.seed,
                     max_episode_steps=config.eval_max_episode_steps)


def build_loop(config: Config, algo: str, run_files: RunFiles,
               initial_step: int = 0) -> tuple[TrainingLoop, str]:
    """Wires the parts of a run together; returns the loop and the device line."""
    from fast_dqn.q_network import configure_device, make_q_network  # TensorFlow loads here

    device = configure_device()
    print(device, flush=True)
    if algo == ALGO_FAST_DQN:
        pool = make_pool(config, config.workers, config.backend, config.seed)
    else:
        pool = make_pool(config, 1, SERIAL, config.seed)
    network = make_q_network(config, pool.n_actions)
    seeds = np.random.SeedSequence(config.seed).spawn(2)
    memory = ReplayMemory(config.replay_capacity, np.random.default_rng(seeds[0]))

    def save(loop: TrainingLoop) -> None:
        manifest = {**loop.state(), "episode_stats": run_files.episode_stats.state(),
                    "replay_saved": config.checkpoint_replay}
        arrays = memory.state_dict() if config.checkpoint_replay else None
        save_checkpoint(run_files.run_dir, manifest, network.checkpoint().write, arrays)

    progress = Progress(config.timesteps, initial_step=initial_step,
                        every_seconds=config.progress_every)
    parts = LoopParts(config=config, network=network, memory=memory, pool=pool,
                      make_eval_pool=lambda: make_eval_pool(config), run_log=run_files,
                      rng=np.random.default_rng(seeds[1]), progress=progress,
                      save_checkpoint=save)
    loop_class = FastDQN if algo == ALGO_FAST_DQN else DQN
    return loop_class(parts), device


def main(argv: Sequence[str] | None, algo: str) -> int:
    try:
        config = prepare_config(argv, algo)
        checkpoint = latest_checkpoint(Path(config.logdir)) if config.resume else None
        manifest = read_manifest(checkpoint) if checkpoint is not None else None
        resume_step = manifest["step"] if manifest else None
        run_files = open_run_files(config, algo, resume_step)
    except (ValueError, CheckpointError) as error:
        print(f"{Path(sys.argv[0]).name}: error: {error}", file=sys.stderr)
        return 2
    run_dir = run_files.run_dir
    with run_files:
        print(f"run directory: {run_dir}", flush=True)
        loop, device = build_loop(config, algo, run_files, initial_step=resume_step or 0)
        if manifest is not None:
            try:
                resume(loop, run_files, manifest, checkpoint)
            except CheckpointError as error:
                loop.close()
                print(f"error: cannot resume {run_dir}: {error}", file=sys.stderr)
                return 2
        return run(loop, run_files, device)


def open_run_files(config: Config, algo: str, resume_step: int | None) -> RunFiles:
    """Creates (or reopens) the run directory and writes its config.json.

    Raises:
        ValueError: the directory cannot be used (RunDirError where creating or writing it
            failed; a new run's directory is then removed again, so nothing is left behind).
    """
    run_files = RunFiles(Path(config.logdir), resume=bool(config.resume),
                         resume_step=resume_step)
    try:
        run_files.write_config({"algo": algo, **dataclasses.asdict(config)})
    except OSError as error:
        run_files.discard()
        raise run_files.write_error(error) from None
    return run_files


def resume(loop: TrainingLoop, run_files: RunFiles, manifest: dict, checkpoint: Path) -> None:
    """Everything a resumed run restores from its checkpoint, in this order: networks and
    optimizer slots; the replay memory's arrays; counters and random generators; then the
    memory's open episode closed (or, without a saved memory, a refill started from the
    restored counters); the episode averages; and last a check of the memory's invariants.

    Raises:
        CheckpointError: a file is missing or does not fit this run, or the memory read
            back breaks an invariant.
    """
    try:
        loop.network.restore(network_prefix(checkpoint))
    except ValueError as error:
        raise CheckpointError(str(error)) from None
    replay_restored = read_replay_into(checkpoint, loop.memory)
    loop.restore(manifest)
    if replay_restored:
        loop.memory.close_open_episode()  # the resumed run starts fresh games
    else:
        print("warning: the checkpoint holds no replay memory (--checkpoint-replay=false); "
              "the resumed run refills it from scratch", file=sys.stderr)
        loop.counters.start_refill()
    run_files.episode_stats.load_state(manifest["episode_stats"])
    try:
        loop.memory.check_valid()
    except ValueError as error:
        raise CheckpointError(f"{checkpoint}: {error}") from None
    print(f"resumed from {checkpoint} at step {loop.counters.step}", flush=True)


def run_summary(loop: TrainingLoop, finished: bool, device: str) -> dict:
    """What summary.json says about a run, however it ended."""
    counters, evaluator = loop.counters, loop.evaluator
    steps_per_second, updates_per_second = counters.rates()
    return {
        "finished": finished, "algo": loop.algo, "game": loop.config.game,
        "seed": loop.config.seed, "steps": counters.step, "updates": counters.updates,
        "wall_seconds": counters.hours() * 3600.0, "steps_per_second": steps_per_second,
        "updates_per_second": updates_per_second, "evaluations": evaluator.count,
        "last_evaluation": evaluator.last, "device": device,
        "stopped_by_signal": loop.stop.signal_number,
    }


def run(loop: TrainingLoop, run_files: RunFiles, device: str) -> int:
    """Runs the loop; the summary is written however it ends."""
    status = 1
    try:
        loop.run()
        status = 128 + loop.stop.signal_number if loop.stop else 0
    except (NonFiniteLoss, CheckpointError) as error:
        print(f"error: {error}", file=sys.stderr)
    except KeyboardInterrupt:
        print("interrupted twice: stopping at once", file=sys.stderr)
        status = 128 + signal.SIGINT
    finally:
        finished = status == 0 and loop.counters.step >= loop.config.timesteps
        run_files.write_summary(run_summary(loop, finished=finished, device=device))
        if loop.progress is not None:
            loop.progress.close()
        loop.close()
    steps_per_second, _ = loop.counters.rates()
    print(f"done: {loop.counters.step} steps, {steps_per_second:.0f} steps/s after the replay "
          f"start, {loop.counters.updates} updates; files in {run_files.run_dir}", flush=True)
    return status
