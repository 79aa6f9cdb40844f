"""A run resumed: its config.json and latest checkpoint read back and checked, whether the
saved run has work left, and the checkpoint restored into a loop built for it. Nothing here
writes: a resume that fails leaves the run's files as they were (docs/design.md §5)."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any, Mapping

from fast_dqn import state_fields
from fast_dqn.atari import resolve_game
from fast_dqn.checkpoints import (MANIFEST, CheckpointError, latest_checkpoint, network_prefix,
                                  read_replay_into, read_unstored, replay_in, verify_checkpoint)
from fast_dqn.config import ALGO_DQN, ALGO_FAST_DQN, Config, flag_name, validate
from fast_dqn.counters import RunCounters
from fast_dqn.evaluation import Evaluator
from fast_dqn.run_dir import CONFIG_FILE, is_run_dir
from fast_dqn.schedule import final_step
from fast_dqn.state_fields import StateError
from fast_dqn.training_loops import TrainingLoop, work_done

RESUME_FLAGS = ("timesteps", "refill_replay", "device")  # what may be given beside --resume
CONSOLE_SCRIPTS = {ALGO_FAST_DQN: "fast-dqn", ALGO_DQN: "fast-dqn-serial"}
RUN_SCRIPTS = {ALGO_FAST_DQN: "run_fast_dqn.py", ALGO_DQN: "run_dqn.py"}
# What fast_dqn.cli sets argv[0] to: its PROG and the command.
MODULE_COMMANDS = {ALGO_FAST_DQN: "python -m fast_dqn train", ALGO_DQN: "python -m fast_dqn serial"}


def resume_command(algo: str) -> str:
    """The command that trains with `algo`, in the form this process was started with, as
    `sys.argv[0]` tells it (`python run_fast_dqn.py`, the run script beside the one run;
    `fast-dqn`; `python -m fast_dqn train`), else the run script."""
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else ""
    if argv0 in MODULE_COMMANDS.values():
        return MODULE_COMMANDS[algo]
    if Path(argv0).name in CONSOLE_SCRIPTS.values():
        return CONSOLE_SCRIPTS[algo]
    if Path(argv0).name in RUN_SCRIPTS.values():
        return f"python {shlex.quote(os.path.join(os.path.dirname(argv0), RUN_SCRIPTS[algo]))}"
    return f"python {RUN_SCRIPTS[algo]}"


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
    saved = saved_config(run_dir, algo)
    if saved.get("algo") != algo:
        other = saved.get("algo")
        how = (f": resume it with {resume_command(other)} --resume {shlex.quote(str(run_dir))}"
               if other in RUN_SCRIPTS else "")
        raise ValueError(f"{run_dir} was trained by {other}, not {algo} "
                         f"({resume_command(algo)}){how}")
    try:
        config = Config.from_saved(saved, algo)
    except ValueError as error:  # a hand edit
        raise ValueError(f"cannot resume {run_dir}: {run_dir / CONFIG_FILE}: {error}") from None
    config = config.replace(logdir=str(run_dir), resume=str(run_dir), **settings)
    validate(config, algo)  # what the flags given beside --resume change
    config = config.replace(game=resolve_game(config.game))  # a hand-edited name, too
    return config


def saved_config(run_dir: Path, algo: str) -> dict[str, Any]:
    """A run's config.json as written (settings, algorithm, library versions).

    Raises:
        ValueError: there is none (naming a run directory near it), or it is not a JSON object.
    """
    path = Path(run_dir) / CONFIG_FILE
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        near = _run_dirs_near(Path(run_dir), algo) or f"no readable {CONFIG_FILE} ({error})"
        raise ValueError(f"cannot resume {run_dir}: {near}") from None
    if not isinstance(saved, dict):
        raise ValueError(f"cannot resume {run_dir}: {path} is not a JSON object")
    return saved


def _run_dirs_near(path: Path, algo: str) -> str:
    """For a --resume path that holds no run: what it is and the run directory to give, if
    one is near: above it (its checkpoint folder), below it (a folder of runs) or beside it,
    its name beginning with the path's (a name cut short); else ''."""
    runs = [parent for parent in path.parents if is_run_dir(parent)][:1]
    what = f"it is inside the run directory {runs[0]}" if runs else "no such directory"
    try:
        if not runs and path.is_dir():
            what, runs = "it is a folder of runs, not a run directory", list(path.iterdir())
        elif not runs and path.parent.is_dir():
            runs = [near for near in path.parent.iterdir() if near.name.startswith(path.name)]
    except OSError:  # a folder that cannot be read: nothing is near that can be told
        return ""
    names = [shlex.quote(str(run)) for run in sorted(runs) if is_run_dir(run)]
    if len(names) > 1:
        listed = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        return f"{what}; resume one of these runs: {listed}"
    return f"{what}; resume with {resume_command(algo)} --resume {names[0]}" if names else ""


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
