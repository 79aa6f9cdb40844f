"""A trained run's agent: its settings and latest checkpoint (`load_run`), and its online
network acting on batches of states (`Agent`). `fast_dqn.load` and the play command load a
run through this module.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from fast_dqn.acting import GreedyFn, draw_exploration
from fast_dqn.atari import game_actions, resolve_game
from fast_dqn.checkpoints import (MANIFEST, CheckpointError, latest_checkpoint, network_prefix,
                                  verify_checkpoint)
from fast_dqn.config import Config
from fast_dqn.run_dir import CONFIG_FILE
from fast_dqn.tensorflow_start import configure_device
from fast_dqn.transitions import STATE_SHAPE

if TYPE_CHECKING:  # the network module imports TensorFlow: only once a network is built
    from fast_dqn.learner import Learner

EVAL_EPSILON = 0.05  # Mnih et al. (2015): the evaluation policy's epsilon


class RunToPlay(NamedTuple):
    """What `RUN_DIR` provides: the run's settings and its latest complete checkpoint."""

    config: Config
    algo: str  # which trainer wrote it ("dqn" or "fast_dqn"); the network is the same
    checkpoint: Path  # the checkpoint directory (`checkpoint/` or `checkpoint.old/`)
    step: int | None  # agent step at which it was written, if its manifest says


def load_run(run_dir: Path) -> RunToPlay:
    """Reads the run's settings, finds its latest complete checkpoint and verifies it.

    Raises:
        ValueError: no such directory, no readable config.json (or a setting missing from
            it, or one a flag would refuse), an unknown game, no complete checkpoint, or a
            damaged one (the message names the file).
    """
    if not run_dir.is_dir():
        raise ValueError(f"no run directory {run_dir}")
    saved = _read_json(run_dir / CONFIG_FILE)
    if not isinstance(saved, dict) or "game" not in saved:
        raise ValueError(f"{run_dir / CONFIG_FILE} does not name a game; is it a run's config?")
    try:
        config = Config.from_saved(saved, str(saved.get("algo")))
    except ValueError as error:  # a hand edit
        raise ValueError(f"{run_dir / CONFIG_FILE}: {error}") from None
    config = config.replace(game=resolve_game(config.game))  # a hand-edited name, too
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise ValueError(f"{run_dir} has no complete checkpoint (looked for "
                         f"checkpoint/{MANIFEST} and checkpoint.old/{MANIFEST})")
    try:
        manifest = verify_checkpoint(checkpoint, replay_optional=True)
    except CheckpointError as error:
        raise ValueError(str(error)) from None
    counters = manifest.get("counters")
    step = counters.get("step") if isinstance(counters, dict) else None
    return RunToPlay(config, str(saved.get("algo", "?")), checkpoint,
                     step if isinstance(step, int) else None)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:  # JSONDecodeError and UnicodeDecodeError included
        reason = "not found" if isinstance(error, FileNotFoundError) else one_line(error)
        raise ValueError(f"cannot read {path}: {reason}") from None


def one_line(error: BaseException | str) -> str:
    """The first line of an error's message (its type's name if it has none)."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def load_network(config: Config, n_actions: int, checkpoint: Path) -> "Learner":
    """Builds the run's Q-network and restores its online weights from `checkpoint`.

    Raises:
        ValueError: the checkpoint is unreadable or does not fit the network (e.g. another
            game's action count).
    """
    from fast_dqn.learner import make_learner

    network = make_learner(config, n_actions)
    network.restore_online(network_prefix(checkpoint))
    return network


class Agent:
    """A run's online network, restored from its checkpoint, acting on batches of states as
    the trainers' networks take them: (B, 4, 84, 84) uint8, 4 frames of 84x84, oldest first.
    `greedy` gives the argmax actions, `act` the epsilon-greedy ones drawn from `rng`."""

    def __init__(self, run: RunToPlay, seed: int | None = None):
        """Configures TensorFlow as play does (`device` says where it computes), builds the
        network and restores it; `rng` is seeded `seed` (default: the run's seed).

        Raises:
            ValueError: the checkpoint does not fit the run's network.
        """
        self.run = run
        self.device = configure_device(activity="playing")
        self.n_actions = game_actions(run.config)
        network = load_network(run.config, self.n_actions, run.checkpoint)
        self.greedy: GreedyFn = functools.partial(network.greedy_actions, use_target=False)
        self.rng = np.random.default_rng(run.config.seed if seed is None else seed)

    def act(self, states: np.ndarray, epsilon: float = 0.0) -> np.ndarray:
        """The (B,) actions for `states`: each greedy, or with probability `epsilon` (Nature
        evaluates at EVAL_EPSILON, 0.05) uniformly random, drawn as the loops draw them.

        Raises:
            ValueError: `states` are not (B, 4, 84, 84) uint8, or `epsilon` is not in [0, 1].
        """
        states = np.asarray(states)
        if states.dtype != np.uint8 or states.shape[1:] != STATE_SHAPE:
            raise ValueError("states must be a uint8 array of shape (B, %d, %d, %d)" % STATE_SHAPE
                             + f"; got {states.dtype} {states.shape}")
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be within [0, 1]; got {epsilon}")
        exploration = draw_exploration(epsilon, len(states), self.n_actions, self.rng)
        return exploration.actions(np.zeros(len(states), np.int64) if exploration.all_random
                                   else self.greedy(states))
