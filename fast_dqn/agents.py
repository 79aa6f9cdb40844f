"""The two training loops: DQN (serial reference) and FastDQN (concurrent, synchronized).

Both solve the same learning problem (DESIGN.md §1). DQN follows Mnih et al. (2015): act one
step with the online network, store it, and train one minibatch every `train_freq` steps.
FastDQN follows Daley & Amato (2021): time is cut into epochs of `target_update` steps; at
each sync point the trainer is drained, the samplers' buffered transitions are flushed into the
replay memory in sampler order and the target network takes the online weights; during an
epoch the samplers act with the frozen target network while a trainer thread runs the
epoch's minibatches on the memory as it stood at the boundary. Neither side reads what the
other writes during an epoch, so the run does not depend on thread timing.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Callable, NamedTuple, Protocol

import numpy as np

from fast_dqn.config import ALGO_FAST_DQN, Config
from fast_dqn.evaluation import epsilon_greedy, evaluate
from fast_dqn.replay_memory import (FRAME_SHAPE, Batch, FrameHistory, ReplayMemory,
                                    SamplerBuffer, check_memory_for, empty_batch)
from fast_dqn.samplers import EnvPool
from fast_dqn.trainer import Trainer


class QFunction(Protocol):
    """What the loops need of a Q-network (the real one, or the benchmark's timed stub)."""

    n_actions: int

    def greedy_actions(self, states: np.ndarray, use_target: bool = True) -> np.ndarray: ...

    def train(self, batch: Batch) -> None: ...

    def train_many(self, batches: Batch, count: int) -> None: ...

    def sync_target(self) -> None: ...

    def take_train_stats(self) -> tuple[float, float, int]: ...


class RunLog(Protocol):
    """What the loops need of the run files (see `fast_dqn.run_files.RunFiles`)."""

    def log_episode(self, timestep: int, length: int, ret: float, hours: float) -> None: ...

    def log_evaluation(self, timestep: int, returns: list[float], hours: float) -> dict: ...

    def log_scalars(self, step: int, scalars: dict[str, float]) -> None: ...


class NonFiniteLoss(RuntimeError):
    """Training diverged: the loss is NaN or infinite."""


def epsilon_at(step: int, config: Config) -> float:
    """Exploration epsilon for the agent step `step`.

    Uniformly random during the replay start, then linear from `initial_epsilon` to
    `final_epsilon` over `exploration_steps` counted from the replay start (as DeepMind's
    original DQN code counts it), then constant.
    """
    if step < config.replay_start:
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
        decayed = np.full(len(steps), config.final_epsilon)
    else:
        fraction = np.minimum(learning_steps / config.exploration_steps, 1.0)
        decayed = config.initial_epsilon + fraction * (config.final_epsilon -
                                                        config.initial_epsilon)
        decayed[learning_steps >= config.exploration_steps] = config.final_epsilon
    return np.where(learning_steps < 0, 1.0, decayed)


def updates_due(step: int, config: Config) -> int:
    """Minibatch updates a run has made by agent step `step` (1 per `train_freq` steps)."""
    return max(0, step - config.replay_start) // config.train_freq


class Transitions(NamedTuple):
    """One round of W transitions; `frames` are the newest frames of the states acted in."""

    frames: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminals: np.ndarray
    episode_ends: np.ndarray


class FinishedGame(NamedTuple):
    env: int
    length: int  # agent steps
    score: float  # raw game score


class Actor:
    """W environments, their frame histories and the running scores of their games.

    Owned by the main thread.
    """

    def __init__(self, pool: EnvPool):
        self.pool = pool
        self.history = FrameHistory(pool.num_envs)
        self._scores = np.zeros(pool.num_envs, dtype=np.float64)
        self._lengths = np.zeros(pool.num_envs, dtype=np.int64)

    @property
    def states(self) -> np.ndarray:
        return self.history.states

    def reset(self, seed: int) -> None:
        self.history.reset(self.pool.reset(seed=seed))
        self._scores[:] = 0
        self._lengths[:] = 0

    def act(self, actions: np.ndarray) -> tuple[Transitions, list[FinishedGame]]:
        frames = self.history.states[:, -1].copy()
        result = self.pool.step(actions)
        self._scores += result.rewards
        self._lengths += 1
        finished = [FinishedGame(int(i), int(self._lengths[i]), float(self._scores[i]))
                    for i in np.flatnonzero(result.game_overs)]
        self._scores[result.game_overs] = 0
        self._lengths[result.game_overs] = 0
        self.history.push(result.frames, result.episode_ends)
        transitions = Transitions(frames, np.asarray(actions), result.rewards,
                                  result.terminals, result.episode_ends)
        return transitions, finished


class StopRequest:
    """Turns the first SIGINT/SIGTERM into a request to stop at the end of the round.

    A second signal raises KeyboardInterrupt at once. Installed only on the main thread.
    """

    def __init__(self):
        self.signal_number: int | None = None
        self._previous: dict[int, object] = {}

    def __bool__(self) -> bool:
        return self.signal_number is not None

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._handle)

    def uninstall(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame) -> None:
        if self.signal_number is not None:
            raise KeyboardInterrupt
        self.signal_number = signum


class LoopParts(NamedTuple):
    """Everything a training loop is built from; the entry points wire these up."""

    config: Config
    network: QFunction
    memory: ReplayMemory
    pool: EnvPool
    make_eval_pool: Callable[[], EnvPool] | None
    run_log: RunLog
    rng: np.random.Generator
    progress: object | None = None  # fast_dqn.run_files.Progress
    save_checkpoint: Callable[["TrainingLoop"], None] | None = None


class TrainingLoop:
    """What DQN and FastDQN share: acting, score keeping, evaluation, counters."""

    algo = "dqn"

    def __init__(self, parts: LoopParts):
        self.config = parts.config
        self.network = parts.network
        self.memory = parts.memory
        self.actor = Actor(parts.pool)
        self._env_offsets = np.arange(parts.pool.num_envs)  # env i acts at step + i
        self.run_log = parts.run_log
        self.rng = parts.rng
        self.progress = parts.progress
        self._make_eval_pool = parts.make_eval_pool
        self._save_checkpoint = parts.save_checkpoint
        self.env_seed = self.config.seed
        # Learning pauses after a resume without the replay memory until it is refilled.
        self._refill_until = 0
        self._updates_before_refill = 0
        self._eval_pool: EnvPool | None = None
        # One minibatch buffer, reused: only one thread trains (see train_one_minibatch).
        self._minibatch = empty_batch(self.config.batch_size)
        self.stop = StopRequest()
        self.step = 0
        self.updates = 0
        self.evaluations = 0
        self._evaluated_at = 0  # the step of the last evaluation
        self.last_evaluation: dict | None = None
        self.recent_scores: list[float] = []
        self._started = time.monotonic()
        self._hours_before = 0.0
        self._learning_clock: tuple[float, int, int] | None = None  # time, step, updates
        self.on_learning_start: list[Callable[[], None]] = []  # e.g. a benchmark's clocks

    # -- time and rates -------------------------------------------------------------------

    def hours(self) -> float:
        return self._hours_before + (time.monotonic() - self._started) / 3600.0

    def _mark_learning_start(self) -> None:
        if self._learning_clock is None and self.step >= self.config.replay_start:
            self._learning_clock = (time.monotonic(), self.step, self.updates)
            for callback in self.on_learning_start:
                callback()

    def rates(self) -> tuple[float, float]:
        """Agent steps/s and updates/s since learning started (0 before)."""
        if self._learning_clock is None:
            return 0.0, 0.0
        since, step0, updates0 = self._learning_clock
        elapsed = max(time.monotonic() - since, 1e-9)
        return (self.step - step0) / elapsed, (self.updates - updates0) / elapsed

    # -- acting -----------------------------------------------------------------------------

    def choose_actions(self, use_target: bool) -> np.ndarray:
        """Epsilon-greedy actions for the W envs; env i acts at global step `step + i`."""
        epsilons = epsilons_at(self.step + self._env_offsets, self.config)
        if (epsilons >= 1.0).all():
            greedy = np.zeros(len(epsilons), dtype=np.int64)  # no query while random
        else:
            greedy = self.query_greedy(use_target)
        return epsilon_greedy(greedy, epsilons, self.network.n_actions, self.rng)

    def query_greedy(self, use_target: bool) -> np.ndarray:
        return self.network.greedy_actions(self.actor.states, use_target=use_target)

    def log_games(self, games: list[FinishedGame]) -> None:
        for game in games:
            self.run_log.log_episode(self.step, game.length, game.score, self.hours())
            self.run_log.log_scalars(self.step, {"episode/return": game.score,
                                                 "episode/length": float(game.length)})
            self.recent_scores = (self.recent_scores + [game.score])[-100:]

    # -- bookkeeping at checkpoints of the schedule -------------------------------------------

    def log_training(self) -> None:
        loss, mean_q, count = self.network.take_train_stats()
        if count and not np.isfinite(loss):
            raise NonFiniteLoss(f"training diverged at step {self.step}: the mean loss of the "
                                f"last {count} minibatches is {loss}; try a smaller --lr")
        steps_per_second, updates_per_second = self.rates()
        scalars = {"train/epsilon": epsilon_at(self.step, self.config),
                   "train/steps_per_second": steps_per_second,
                   "train/updates_per_second": updates_per_second}
        if count:
            scalars.update({"train/loss": loss, "train/mean_q": mean_q})
        self.run_log.log_scalars(self.step, scalars)

    def run_evaluation(self) -> None:
        if self._make_eval_pool is None:
            return
        if self._eval_pool is None:
            self._eval_pool = self._make_eval_pool()
        seed = self.config.seed + 1_000_003 * (self.evaluations + 1)
        greedy = lambda states: self.network.greedy_actions(states, use_target=False)  # noqa: E731
        returns = evaluate(self._eval_pool, greedy, epsilon=self.config.eval_epsilon,
                           seed=seed, rng=np.random.default_rng(seed))
        self.evaluations += 1
        self._evaluated_at = self.step
        self.last_evaluation = self.run_log.log_evaluation(self.step, returns, self.hours())
        self.run_log.log_scalars(self.step, {"eval/mean_return": float(np.mean(returns))})

    def update_progress(self) -> None:
        if self.progress is None:
            return
        recent = float(np.mean(self.recent_scores)) if self.recent_scores else None
        last_eval = self.last_evaluation["mean"] if self.last_evaluation else None
        self.progress.update(self.step, epsilon=epsilon_at(self.step, self.config),
                             recent_return=recent, last_eval=last_eval)

    def summary(self, finished: bool, device: str) -> dict:
        steps_per_second, updates_per_second = self.rates()
        return {
            "finished": finished, "algo": self.algo, "game": self.config.game,
            "seed": self.config.seed, "steps": self.step, "updates": self.updates,
            "wall_seconds": self.hours() * 3600.0, "steps_per_second": steps_per_second,
            "updates_per_second": updates_per_second, "evaluations": self.evaluations,
            "last_evaluation": self.last_evaluation, "device": device,
            "stopped_by_signal": self.stop.signal_number,
        }

    def close(self) -> None:
        self.actor.pool.close()
        if self._eval_pool is not None:
            self._eval_pool.close()

    def evaluation_due(self) -> bool:
        """Whether a multiple of the evaluation period has passed since the last evaluation.

        An evaluation skipped by an interruption is made up when the run resumes.
        """
        period = self.config.evaluate
        return period > 0 and self.step // period > self._evaluated_at // period

    def run(self) -> None:
        """Trains until `timesteps` or a stop request, then checkpoints; see `train`."""
        self.stop.install()
        try:
            self.train()
            self.log_training()  # also the last check that the loss is finite
            self.checkpoint()
        finally:
            self.stop.uninstall()

    def train_one_minibatch(self) -> None:
        """One update, on the main thread (DQN, and FastDQN without --concurrent)."""
        self.network.train(self.memory.sample(self.config.batch_size, out=self._minibatch))

    def updates_due(self, step: int) -> int:
        """Minibatch updates the run has made by agent step `step`."""
        if self._refill_until == 0:
            return updates_due(step, self.config)
        return self._updates_before_refill + updates_due(step - self._refill_until, self.config)

    def start_refill(self) -> None:
        """After a resume with an empty memory: act `replay_start` steps before learning."""
        self._refill_until = self.step
        self._updates_before_refill = self.updates

    # -- checkpoints ------------------------------------------------------------------------

    def checkpoint_due(self, previous_step: int) -> bool:
        period = self.config.checkpoint_every
        return period > 0 and self.step // period > previous_step // period

    def checkpoint(self) -> None:
        if self._save_checkpoint is not None:
            self._save_checkpoint(self)

    def state(self) -> dict:
        """The loop's own state as JSON-able data (networks and memory are saved apart)."""
        return {
            "step": self.step, "updates": self.updates, "evaluations": self.evaluations,
            "evaluated_at": self._evaluated_at, "refill_until": self._refill_until,
            "updates_before_refill": self._updates_before_refill,
            "last_evaluation": self.last_evaluation, "recent_scores": self.recent_scores,
            "hours": self.hours(), "rng": self.rng.bit_generator.state,
            "replay_rng": self.memory.rng.bit_generator.state,
        }

    def restore(self, state: dict) -> None:
        """Continues from `state`; environments start fresh games (seeded by the step)."""
        self.step = int(state["step"])
        self.updates = int(state["updates"])
        self.evaluations = int(state["evaluations"])
        self._evaluated_at = int(state["evaluated_at"])
        self._refill_until = int(state["refill_until"])
        self._updates_before_refill = int(state["updates_before_refill"])
        self.last_evaluation = state["last_evaluation"]
        self.recent_scores = [float(score) for score in state["recent_scores"]]
        self._hours_before = float(state["hours"])
        self._started = time.monotonic()
        self.rng.bit_generator.state = state["rng"]
        self.memory.rng.bit_generator.state = state["replay_rng"]
        self.env_seed = self.config.seed + self.step

    def train(self) -> None:
        raise NotImplementedError


class DQN(TrainingLoop):
    """The Nature-DQN reference: act one step, train one minibatch every `train_freq` steps."""

    algo = "dqn"

    def train(self) -> None:
        config = self.config
        self.actor.reset(seed=self.env_seed)
        if self.evaluation_due():
            self.run_evaluation()
        last_log = time.monotonic()
        while self.step < config.timesteps and not self.stop:
            actions = self.choose_actions(use_target=False)
            transitions, games = self.actor.act(actions)
            self.memory.add(transitions.frames[0], int(transitions.actions[0]),
                            float(transitions.rewards[0]), bool(transitions.terminals[0]),
                            bool(transitions.episode_ends[0]))
            self.step += 1
            self.log_games(games)
            self._mark_learning_start()
            while self.updates < self.updates_due(self.step):
                self.train_one_minibatch()
                self.updates += 1
            self._after_step(previous_step=self.step - 1)
            if time.monotonic() - last_log > 0.5:
                self.update_progress()
                last_log = time.monotonic()
        self.update_progress()

    def _after_step(self, previous_step: int) -> None:
        config = self.config
        learning = self.step - config.replay_start
        synced = learning > 0 and learning % config.target_update == 0
        if synced:
            self.network.sync_target()
            self.log_training()
        if self.evaluation_due():
            self.run_evaluation()
        if self.checkpoint_due(previous_step) and self.step < config.timesteps:
            if not synced:
                self.log_training()  # the NaN guard runs before every checkpoint
            self.checkpoint()


class FastDQN(TrainingLoop):
    """The concurrent, synchronized scheme of Daley & Amato (2021)."""

    algo = ALGO_FAST_DQN

    def __init__(self, parts: LoopParts):
        super().__init__(parts)
        num_envs = self.actor.pool.num_envs
        self.buffers = [SamplerBuffer() for _ in range(num_envs)]
        self.trainer: Trainer | None = None
        if self.config.concurrent:
            self.trainer = Trainer(self.train_minibatches, name="trainer",
                                   updates_per_call=self.config.updates_per_call)
            # One buffer for the most minibatches a call draws, reused (see ReplayMemory.batch)
            self._minibatches = empty_batch(self.config.batch_size * self.config.updates_per_call)
        rounds = -(-self.config.target_update // num_envs)
        self._staging = _StagingArea(rounds, num_envs)

    def train_minibatches(self, count: int) -> None:
        """`count` updates in one call, on the trainer thread, from the frozen memory."""
        rows = count * self.config.batch_size
        out = Batch(*(array[:rows] for array in self._minibatches))
        batches = self.memory.sample_many(count, self.config.batch_size, out=out)
        self.network.train_many(batches, count)

    def query_greedy(self, use_target: bool) -> np.ndarray:
        if self.config.synchronize:
            return super().query_greedy(use_target)
        states = self.actor.states  # each sampler queries the network alone

        def query_one(env: int) -> int:
            return int(self.network.greedy_actions(states[env:env + 1], use_target)[0])

        return np.array(self.actor.pool.run_in_samplers(query_one), dtype=np.int64)

    def next_boundary(self) -> int:
        """The agent step at which the current epoch ends (a sync point)."""
        config = self.config
        if self.step < config.replay_start:
            # The random phase needs no trainer; flushing it in epochs bounds the staging area.
            end = min(self.step + config.target_update, config.replay_start)
        else:
            done_epochs = (self.step - config.replay_start) // config.target_update
            end = config.replay_start + (done_epochs + 1) * config.target_update
        return min(end, _round_up(config.timesteps, self.actor.pool.num_envs))

    def train(self) -> None:
        config = self.config
        self.actor.reset(seed=self.env_seed)
        if self.evaluation_due():
            self.run_evaluation()
        try:
            while self.step < config.timesteps and not self.stop:
                previous_step = self.step
                self._run_epoch(self.next_boundary())
                self._sync_point(previous_step)
            self.update_progress()
        finally:
            if self.trainer is not None:
                self.trainer.close()

    def _run_epoch(self, end: int) -> None:
        """Acts until `end` while the epoch's minibatches run on the memory as it stands."""
        self._mark_learning_start()
        epoch_updates = self.updates_due(end) - self.updates
        if self.trainer is not None and epoch_updates > 0:
            self._completed_at_epoch_start = self.trainer.completed
            self.trainer.start_epoch(epoch_updates)
        inline_target = self.updates
        self._staging.clear()
        last_progress = time.monotonic()
        while self.step < end and not self.stop:
            self._staging.append(self._act_round())
            if self.trainer is None:
                inline_target = self._train_inline(inline_target, end)
            elif self.trainer.failed:
                break
            if time.monotonic() - last_progress > 0.5:
                self.update_progress()
                last_progress = time.monotonic()
        self._finish_training(epoch_updates)

    def _act_round(self) -> Transitions:
        actions = self.choose_actions(use_target=True)
        transitions, games = self.actor.act(actions)
        self.step += self.actor.pool.num_envs
        self.log_games(games)
        return transitions

    def _train_inline(self, done: int, end: int) -> int:
        """Without --concurrent: the minibatches due by now, on this thread."""
        due = min(self.updates_due(self.step), self.updates_due(end))
        while done < due:
            self.train_one_minibatch()
            done += 1
        self.updates = max(self.updates, done)
        return done

    def _finish_training(self, epoch_updates: int) -> None:
        if self.trainer is None or epoch_updates <= 0:
            return
        # On a stop request the rest of the epoch's minibatches are abandoned.
        self.trainer.wait(abandon_if=lambda: bool(self.stop))
        self.updates += self.trainer.completed - self._completed_at_epoch_start

    def _sync_point(self, previous_step: int) -> None:
        """Trainer drained (above) -> samplers' buffers flushed in sampler order -> target."""
        self._flush_buffers()
        if self.stop:
            return  # interrupted mid-epoch: the target stays frozen until the boundary
        self.network.sync_target()
        if self.step > self.config.replay_start:
            self.log_training()
        if self.evaluation_due():
            self.run_evaluation()
        if self.checkpoint_due(previous_step) and self.step < self.config.timesteps:
            self.checkpoint()
        self.update_progress()

    def _flush_buffers(self) -> None:
        columns = self._staging.columns()
        for env, buffer in enumerate(self.buffers):
            buffer.extend(*(column[:, env] for column in columns))
            flushed = buffer.take()
            if flushed is not None:
                self.memory.add_many(*flushed)
        self._staging.clear()


class _StagingArea:
    """Preallocated (rounds, W, ...) arrays for one epoch's transitions."""

    def __init__(self, rounds: int, num_envs: int):
        self.frames = np.zeros((rounds, num_envs, *FRAME_SHAPE), dtype=np.uint8)
        self.actions = np.zeros((rounds, num_envs), dtype=np.int64)
        self.rewards = np.zeros((rounds, num_envs), dtype=np.float32)
        self.terminals = np.zeros((rounds, num_envs), dtype=bool)
        self.episode_ends = np.zeros((rounds, num_envs), dtype=bool)
        self.count = 0

    def clear(self) -> None:
        self.count = 0

    def append(self, transitions: Transitions) -> None:
        row = self.count
        self.frames[row] = transitions.frames
        self.actions[row] = transitions.actions
        self.rewards[row] = transitions.rewards
        self.terminals[row] = transitions.terminals
        self.episode_ends[row] = transitions.episode_ends
        self.count += 1

    def columns(self) -> tuple[np.ndarray, ...]:
        rows = slice(0, self.count)
        return (self.frames[rows], self.actions[rows], self.rewards[rows],
                self.terminals[rows], self.episode_ends[rows])


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def check_resources(config: Config) -> None:
    """Checks that cost nothing to undo, run before anything is written or allocated."""
    check_memory_for(config.replay_capacity)
