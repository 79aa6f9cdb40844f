"""The schedule: pure functions of the agent step and the settings (docs/design.md §1, §2):
epsilon, the updates due, the target syncs, and the fast scheme's epochs and sync points.
The loops ask these rather than re-derive them; the run's own counts are in `counters`."""

from __future__ import annotations

import numpy as np

from fast_dqn.config import Config


def learning_started(step: int, config: Config) -> bool:
    """Whether agent step `step` is past the random start: epsilon decays and minibatch
    updates are due from here on."""
    return step >= config.replay_start


def epsilon_at(step: int, config: Config) -> float:
    """Exploration epsilon at agent step `step`: 1 before the replay start, then linear to
    `final_epsilon` over `exploration_steps` counted from the replay start (as DeepMind's
    DQN code counts them)."""
    if not learning_started(step, config):
        return 1.0
    learning_steps = step - config.replay_start
    if config.exploration_steps == 0 or learning_steps >= config.exploration_steps:
        return config.final_epsilon
    fraction = learning_steps / config.exploration_steps
    return config.initial_epsilon + fraction * (config.final_epsilon - config.initial_epsilon)


def epsilons_at(steps: np.ndarray, config: Config) -> np.ndarray:
    """`epsilon_at` for many steps at once, with the same float64 arithmetic."""
    learning_steps = steps - config.replay_start
    if config.exploration_steps == 0:
        epsilons = np.full(len(steps), config.final_epsilon)
    else:
        fraction = learning_steps / config.exploration_steps
        epsilons = config.initial_epsilon + fraction * (config.final_epsilon -
                                                        config.initial_epsilon)
        # The acting loop asks once per round, for W steps that are rarely on either side
        # of the decay: the masked writes are made only when some are.
        if learning_steps.max() >= config.exploration_steps:
            epsilons[learning_steps >= config.exploration_steps] = config.final_epsilon
    if learning_steps.min() < 0:
        epsilons[learning_steps < 0] = 1.0
    return epsilons


def final_epsilon_step(config: Config) -> int:
    """The first agent step from which epsilon stays at `final_epsilon`."""
    return config.replay_start + config.exploration_steps


def updates_due(step: int, config: Config) -> int:
    """Minibatch updates a run has made by agent step `step` (1 per `train_freq` steps)."""
    return max(0, step - config.replay_start) // config.train_freq


# Prioritized replay's importance-sampling exponent, linear over the run's updates from its
# first to its last (Schaul et al. 2016; dqn_zoo's prioritized agent anneals it so).
IMPORTANCE_EXPONENT_START, IMPORTANCE_EXPONENT_END = 0.4, 1.0


def importance_exponent_at(update: int, config: Config) -> float:
    """The importance-sampling exponent of the `update`-th minibatch update (from 0)."""
    total = updates_due(config.timesteps, config)
    done = min(1.0, update / max(1, total - 1))
    return IMPORTANCE_EXPONENT_START + (IMPORTANCE_EXPONENT_END - IMPORTANCE_EXPONENT_START) * done


def target_sync_due(step: int, config: Config) -> bool:
    """Whether the target network takes the online weights on reaching `step`: every
    `target_update` agent steps counted from the replay start."""
    learning_steps = step - config.replay_start
    return learning_steps > 0 and learning_steps % config.target_update == 0


def next_target_sync(step: int, config: Config) -> int:
    """The first step after `step` (which is past the replay start) at which the target is
    synced."""
    done_periods = (step - config.replay_start) // config.target_update
    return config.replay_start + (done_periods + 1) * config.target_update


def final_step(config: Config, num_envs: int) -> int:
    """The agent step a run of `timesteps` ends at, stepping `num_envs` envs per round: the
    fast trainer's last round may end past --timesteps."""
    return round_up(config.timesteps, num_envs)


def epoch_end(step: int, learning_from: int, config: Config, num_envs: int) -> int:
    """The agent step at which the fast scheme's epoch that starts at `step` ends (a sync
    point): before the replay start every `target_update` steps and at the replay start;
    then at the target syncs; at `learning_from` too, where a refill (after a resume without
    the replay memory) ends, so that no epoch with updates starts before it; and at the
    run's last round in any case. The periodic sync points stay where they are, and with them
    the evaluations and checkpoints."""
    if step < config.replay_start:
        end = min(step + config.target_update, config.replay_start)
    else:
        end = next_target_sync(step, config)
    if step < learning_from:
        end = min(end, learning_from)
    return min(end, final_step(config, num_envs))


def steps_at_sync_points(period: int, config: Config, count: int,
                         at_last_step: bool = True) -> list[int]:
    """The first `count` steps at which the fast scheme acts on a period (an evaluation; a
    checkpoint, which the last step has anyway: `at_last_step=False`): the first sync point
    at or after each multiple of it. They are the multiples themselves where `period` and
    the replay start are multiples of `target_update`."""
    found: list[int] = []
    step, last = 0, final_step(config, config.workers)
    while period > 0 and len(found) < count and step < last:
        end = epoch_end(step, config.replay_start, config, config.workers)
        if (end < last or at_last_step) and period_passed(period, step, end):
            found.append(end)
        step = end
    return found


def period_passed(period: int, previous_step: int, step: int) -> bool:
    """Whether a multiple of `period` (0 = never) lies in (previous_step, step]."""
    return period > 0 and step // period > previous_step // period


def round_up(value: int, multiple: int) -> int:
    """The smallest multiple of `multiple` at or above `value` (steps taken in rounds of W)."""
    return -(-value // multiple) * multiple
