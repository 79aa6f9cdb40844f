"""A run resumed: its config.json and latest checkpoint read back and checked, whether the
saved run has work left, and the checkpoint restored into a loop built for it. Nothing here
writes: a resume that fails leaves the run's files as they were (docs/design.md §5)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

from fast_dqn import state_fields
from fast_dqn.atari import resolve_game
from fast_dqn.checkpoints import (MANIFEST, CheckpointError, latest_checkpoint, network_prefix,
                                  read_replay_into, read_unstored, replay_in, verify_checkpoint)
from fast_dqn.config import ALGO_FAST_DQN, Config, flag_name, validate
from fast_dqn.counters import RunCounters
from fast_dqn.evaluation import Evaluator
from fast_dqn.run_dir import CONFIG_FILE
from fast_dqn.schedule import final_step
from fast_dqn.state_fields import StateError
from fast_dqn.training_loops import TrainingLoop, work_done

RESUME_FLAGS = ("timesteps", "refill_replay", "device")  # what may be given beside --resume


def resumed_config(settings: dict[str, Any], algo: str) -> Config:
    """The settings of the run in --resume RUN_DIR; only --timesteps may change them (and
    --device, which is not a setting of the run)."""
    if not settings["resume"].strip():
        raise ValueError("--resume needs the run directory to continue; got an empty path")
    run_dir = Path(os.path.expanduser(settings.pop("resume")))
    extra = sorted(set(settings) - set(RESUME_FLAGS))
    if extra:
        raise ValueError("only --timesteps, --refill-replay and --device may be given with "
                         f"--resume; got {', '.join(flag_name(name) for name in extra)}")
    saved = saved_config(run_dir)
    if saved.get("algo") != algo:
        raise ValueError(f"{run_dir} was trained by {saved.get('algo')}, not {algo}")
    try:
        config = Config.from_saved(saved, algo)
    except ValueError as error:  # a hand edit
        raise ValueError(f"cannot resume {run_dir}: {run_dir / CONFIG_FILE}: {error}") from None
    config = config.replace(logdir=str(run_dir), resume=str(run_dir), **settings)
    validate(config, algo)  # what the flags given beside --resume change
    config = config.replace(game=resolve_game(config.game))  # a hand-edited name, too
    return config


def saved_config(run_dir: Path) -> dict[str, Any]:
    """A run's config.json as written (settings, algorithm, library versions).

    Raises:
        ValueError: there is none, or it is not a JSON object.
    """
    path = Path(run_dir) / CONFIG_FILE
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot resume {run_dir}: no readable {CONFIG_FILE} ({error})") \
            from None
    if not isinstance(saved, dict):
        raise ValueError(f"cannot resume {run_dir}: {path} is not a JSON object")
    return saved


def saved_run_finished(config: Config, state: Mapping[str, Any], replay_restored: bool) -> bool:
    """`work_done` for the state a checkpoint holds (its manifest), without building the run;
    without its replay memory a run owes no updates or transitions any more (its refill
    starts learning afresh).

    Raises:
        StateError: a part's state is missing a key or holds a value out of range.
    """
    counters = RunCounters(config)
    counters.restore(state_fields.section(state, "counters"))
    if not replay_restored:
        counters.start_refill()
    evaluator = Evaluator(config, None, None)  # restored to be asked, never run
    evaluator.restore(state_fields.section(state, "evaluator"), counters.step)
    unstored = replay_restored and unstored_count(state) > 0
    return work_done(config, counters, evaluator, unstored)


def unstored_count(state: Mapping[str, Any]) -> int:
    """How many transitions a checkpoint holds apart from its memory."""
    return state_fields.integer(state, "unstored_transitions", 0)


def checkpoint_step(manifest: dict) -> int:
    """The agent step a (verified) manifest was saved at."""
    return state_fields.integer(state_fields.section(manifest, "counters"), "step")


def verified_checkpoint(config: Config, algo: str) -> tuple[Path, dict]:
    """The run's latest checkpoint, every file read back against its manifest, and the
    manifest; the run must not end before the checkpoint's step.

    Raises:
        CheckpointError, ValueError: one line naming the file or the setting at fault.
    """
    run_dir = Path(config.logdir)
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise ValueError(f"cannot resume {run_dir}: it has no complete checkpoint")
    manifest = verify_checkpoint(checkpoint, replay_optional=config.refill_replay)
    try:
        step = checkpoint_step(manifest)
    except StateError as error:
        raise CheckpointError(f"{checkpoint / MANIFEST}: {error}") from None
    num_envs = config.workers if algo == ALGO_FAST_DQN else 1
    if final_step(config, num_envs) < step:
        raise ValueError(f"{run_dir} is at step {step} and --timesteps is {config.timesteps}; "
                         f"a resume only extends a run: give --timesteps above {step}")
    return checkpoint, manifest


def checkpoint_finished(config: Config, checkpoint: Path, manifest: dict) -> bool:
    """Whether a verified checkpoint holds all the work of `config.timesteps`.

    Raises:
        CheckpointError: the manifest's state is incomplete or out of range.
    """
    try:
        return saved_run_finished(config, manifest, replay_in(checkpoint, manifest))
    except StateError as error:
        raise CheckpointError(f"{checkpoint / MANIFEST}: {error}") from None


def restore_loop(loop: TrainingLoop, checkpoint: Path, manifest: Mapping[str, Any]) -> bool:
    """Restores a built loop from a verified checkpoint: networks, replay arrays, the loop's
    state, the transitions held apart (or a refill without a saved memory), then a check of
    the memory's invariants. Only memory is changed. Returns whether the replay was saved.

    Raises:
        CheckpointError: a file or a value does not fit this run, or the memory read back
            breaks an invariant.
    """
    try:
        loop.learner.restore(network_prefix(checkpoint))
    except ValueError as error:
        raise CheckpointError(str(error)) from None
    replay_restored = replay_in(checkpoint, manifest)
    unstored = None
    if replay_restored:
        read_replay_into(checkpoint, loop.memory)
        unstored = read_unstored(checkpoint, unstored_count(manifest))
    try:
        loop.restore(manifest)
        if replay_restored:
            loop.hold_unstored(unstored)
    except StateError as error:
        raise CheckpointError(f"{Path(checkpoint) / MANIFEST}: {error}") from None
    if not replay_restored:  # the updates an epoch still owed go with the memory they sampled
        loop.counters.start_refill()
    try:
        loop.memory.check_valid()
    except ValueError as error:
        raise CheckpointError(f"{checkpoint}: {error}") from None
    return replay_restored
