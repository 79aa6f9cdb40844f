"""The two training loops: DQN (serial reference) and FastDQN (concurrent, synchronized).

Both solve the same problem (docs/design.md §1). DQN follows Mnih et al. (2015): act one step
with the online network, store it, one minibatch update every `train_freq` steps. FastDQN
follows Daley & Amato (2021): during an epoch of `target_update` steps the samplers act with
the frozen target network while a learner thread makes the epoch's updates on the memory as
it stood at the epoch's start; at each sync point the transitions are flushed and the target
synced (docs/design.md §2). Both run the same sync-point sequence (`at_sync_point`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for_futures
from typing import Any, Callable, ContextManager, Mapping, Protocol

import numpy as np

from fast_dqn import state_fields
from fast_dqn.acting import Actor, EpsilonGreedy, Exploration, FinishedGame
from fast_dqn.config import ALGO_FAST_DQN, Config, counted
from fast_dqn.counters import RunCounters
from fast_dqn.schedule import (epoch_end, epsilon_at, importance_exponent_at, learning_started,
                               period_passed, round_up, target_sync_due)
from fast_dqn.evaluation import Evaluator
from fast_dqn.loop_interfaces import Learner, LoopParts
from fast_dqn.replay_memory import MinibatchDraws
from fast_dqn.transitions import Transitions, concatenate
from fast_dqn.run_logs import EpisodeRow
from fast_dqn.state_fields import StateError
from fast_dqn.staging import SamplerStaging, StagingArea
from fast_dqn.stop_request import StopRequest, checkpoint_estimate, stop_line


_PROGRESS_SECONDS = 0.5  # how often the loops hand the progress line their counters


class NonFiniteLoss(RuntimeError):
    """Training diverged: the loss is NaN or infinite."""


def check_loss_finite(loss: float, count: int, step: int) -> None:
    """The NaN guard, where the losses are read at a sync point (`log_training`): stops a
    diverged run before it logs or saves anything more."""
    if count and not np.isfinite(loss):
        raise NonFiniteLoss(f"training diverged at step {step}: the mean loss of the last "
                            f"{count} minibatches is {loss}; try a smaller --lr")


_POLL_SECONDS = 0.05  # how often `wait` looks at its abandon condition

_STOP = None  # sentinel that ends the thread


class UpdateCount(Protocol):
    """Where the updates made are counted (the run's `RunCounters`)."""

    updates: int


class Draws(Protocol):
    """Where `LearnerThread` draws its minibatches (`MinibatchDraws`; the tests' fakes)."""

    updates_per_call: int
    drawn_ahead: bool  # whether a call may be drawn while the one before it updates

    def draw(self, count: int, buffer: int, first_update: int) -> Any: ...

    def write_back(self, buffer: int, td_errors: Any) -> None: ...

    def undo(self, buffer: int) -> None: ...


@dataclasses.dataclass
class UpdateTimes:
    """The learner's two threads' wall and CPU time (`time.thread_time`: the host work, most
    of it under the interpreter lock) in each kind of call, summed since they started."""

    draw_seconds: float = 0.0
    update_seconds: float = 0.0
    draw_cpu_seconds: float = 0.0
    update_cpu_seconds: float = 0.0

    @property
    def cpu_seconds(self) -> float:
        return self.draw_cpu_seconds + self.update_cpu_seconds


class LearnerThread:
    """Runs an epoch's minibatch updates on a named background thread, the learner thread of
    docs/design.md §2; the main thread starts an epoch and waits for it at the sync point.

    A second thread draws the next call's minibatches (`draws.draw`, into buffer 0 or 1 by
    turns) while this one runs the current call's updates, so sampling overlaps the update;
    the calls are drawn in the epoch's order, so the minibatches do not depend on timing. A
    call drawn but never made (an abandoned epoch) is undone (`draws.undo`), so a resumed
    run draws the minibatches this one would have. The first exception on either thread is
    re-raised on the main thread by `wait` (or `check`): a failing learner stops the run
    instead of hanging it.

    Ownership: during an epoch only these two threads touch the replay memory (reading) and
    the online network; `wait` returns only when no draw is in flight.
    """

    def __init__(self, learner: Learner, draws: Draws, counters: UpdateCount,
                 name: str = "learner"):
        self._learner = learner
        self._draws = draws
        self._counters = counters
        self._updates_per_call = draws.updates_per_call
        self._drawer = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{name}-draw")
        self._work: queue.Queue[int | None] = queue.Queue()
        self._done = threading.Semaphore(0)
        self._stop = threading.Event()
        self._abandon = threading.Event()  # ends the running epoch early
        self._error: BaseException | None = None
        self._pending = 0
        self.times = UpdateTimes()  # each field written by one thread only
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def start_epoch(self, updates: int) -> None:
        self.check()
        self._abandon.clear()
        self._pending += 1
        self._work.put(updates)

    def wait(self, abandon_if: Callable[[], bool] | None = None) -> None:
        """Blocks until every started epoch is done; re-raises the learner's exception.

        If `abandon_if()` becomes true while waiting (a stop was requested), the running
        epoch ends after its current update; the updates made are those counted.
        """
        while self._pending:
            if self._done.acquire(timeout=_POLL_SECONDS):
                self._pending -= 1
            elif abandon_if is not None and abandon_if():
                self._abandon.set()
        self.check()

    def check(self) -> None:
        if self._error is not None:
            raise self._error

    @property
    def failed(self) -> bool:
        return self._error is not None

    def close(self) -> None:
        """Stops the thread, abandoning unfinished updates; safe to call twice."""
        self._stop.set()
        self._work.put(_STOP)
        self._thread.join()
        self._drawer.shutdown(wait=True)

    def _run(self) -> None:
        while True:
            updates = self._work.get()
            if updates is _STOP:
                return
            try:
                self._run_epoch(updates)
            except BaseException as error:  # noqa: BLE001 - re-raised on the main thread
                if self._error is None:
                    self._error = error
            finally:
                self._done.release()

    def _run_epoch(self, updates: int) -> None:
        per_call = self._updates_per_call
        counts = [min(per_call, updates - done) for done in range(0, updates, per_call)]
        first = self._counters.updates  # only this thread changes it during the epoch
        ahead: Future | None = None
        ahead_buffer = 0
        try:
            for index, count in enumerate(counts):
                if self._stop.is_set() or self._abandon.is_set():
                    return
                if ahead is None:
                    ahead = self._drawer.submit(self._timed_draw, count, index % 2,
                                                first + index * per_call)
                batches = ahead.result()
                ahead = None
                if self._draws.drawn_ahead and index + 1 < len(counts):
                    ahead_buffer = (index + 1) % 2
                    ahead = self._drawer.submit(self._timed_draw, counts[index + 1],
                                                ahead_buffer, first + (index + 1) * per_call)
                self._timed_update(batches, count, index % 2)
                # The run's one count: during an epoch only this thread changes it, and the
                # main thread reads it for the epoch's work only after `wait`.
                self._counters.updates += count
        finally:
            if ahead is not None:
                wait_for_futures([ahead])  # nothing may read the memory after the epoch
                if ahead.exception() is None:
                    self._draws.undo(ahead_buffer)

    def _timed_draw(self, count: int, buffer: int, first_update: int) -> Any:
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return self._draws.draw(count, buffer, first_update)
        finally:
            self.times.draw_cpu_seconds += time.thread_time() - cpu
            self.times.draw_seconds += time.perf_counter() - wall

    def _timed_update(self, batches: Any, count: int, buffer: int) -> None:
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            self._draws.write_back(buffer, self._learner.update(batches, count))
        finally:
            self.times.update_cpu_seconds += time.thread_time() - cpu
            self.times.update_seconds += time.perf_counter() - wall


class TrainingLoop:
    """What DQN and FastDQN share: acting, score keeping and the sync-point sequence."""

    algo = "dqn"
    one_query = True  # a round's greedy actions from one batched query (else per sampler)

    def __init__(self, parts: LoopParts):
        self.config = parts.config
        self.learner = parts.learner
        self.memory = parts.memory
        self.actor = Actor(parts.pool)
        self.run_log = parts.run_log
        self.rng = parts.rng  # the epsilon-greedy draws'; a checkpoint saves its state
        self.epsilon_greedy = EpsilonGreedy(self.config, parts.pool.num_envs,
                                            self.learner.n_actions, self.rng)
        self.progress = parts.progress
        self._save_checkpoint = parts.save_checkpoint
        self.counters = RunCounters(self.config)
        if self.progress is not None:  # the line shows the rates every report shows
            self.progress.rates = self.counters.rates
        self.evaluator = Evaluator(self.config, parts.make_eval_pool, parts.run_log)
        self.env_seed = self.config.seed
        self.draws = MinibatchDraws(
            self.memory, self.config.batch_size, self.config.updates_per_call,
            importance_exponent=lambda update: importance_exponent_at(update, self.config))
        self.stop = StopRequest() if parts.stop is None else parts.stop
        self._progress_shown_at = time.monotonic()
        self._updates_logged = 0  # the updates whose losses the logs hold
        # The latest checkpoint's `_checkpoint_position`.
        self._saved: tuple[int, int, int] | None = None
        # The last checkpoint this process wrote: its seconds and the transitions it held
        # (what a stop's line estimates the next write from).
        self._last_write: tuple[float, int] | None = None
        # What a stop would cut short, for its line.
        self._updates_running = False
        self._evaluating = False
        self._stop_announced = False
        # Stopped (or resumed) inside one of FastDQN's epochs: an evaluation owed then waits
        # for the epoch's sync point, where an uninterrupted run makes it.
        self._between_sync_points = False

    # -- stopping ---------------------------------------------------------------------------

    def stop_requested(self, step: int | None = None) -> bool:
        """Whether a stop was requested (SIGINT/SIGTERM/SIGHUP); the first time it is seen,
        the run says what it does before it exits (`stop_line`), at `step` if the loop stops
        there rather than at the current step."""
        if not self.stop:
            return False
        if not self._stop_announced:
            self._stop_announced = True
            self._say(self.stop_line(step))
        return True

    def stop_line(self, step: int | None = None) -> str:
        """What a stop taken now does before the process exits (`stop_request.stop_line`)."""
        step = self.counters.step if step is None else step
        checkpoint = None
        if self._save_checkpoint is not None:
            if self._saved == self._checkpoint_position() and not self._updates_running:
                checkpoint = f"its checkpoint at step {self.counters.step} is written"
            else:
                checkpoint = checkpoint_estimate(self._last_write, self._transitions_to_save(step),
                                                 self.config.checkpoint_replay)
        return stop_line(step, updates_running=self._updates_running,
                         evaluating=self._evaluating, checkpoint=checkpoint)

    def _transitions_to_save(self, step: int) -> int:
        """The transitions a checkpoint taken once the loop stops at `step` holds."""
        return len(self.memory)

    def _say(self, line: str) -> None:
        """A line that stays, through the progress line (above it on a terminal)."""
        if self.progress is not None:
            self.progress.message(line)

    def _stop_or_tick(self) -> bool:
        """What a wait asks again and again (the learner's epoch, an evaluation's steps):
        whether to stop; meanwhile the progress line shows how long it has waited and the
        updates the learner makes."""
        self.update_progress_now_and_then()
        return self.stop_requested()

    # -- acting -----------------------------------------------------------------------------

    def choose_actions(self, use_target: bool) -> np.ndarray:
        """Epsilon-greedy actions for the W envs; env i acts at global step `step + i`."""
        greedy = self.greedy_of_target if use_target else self.greedy_of_online
        return self.actor.actions(self.epsilon_greedy.draw(self.counters.step), greedy,
                                  one_query=self.one_query)

    def greedy_of_target(self, states: np.ndarray) -> np.ndarray:
        """The target network's greedy actions (the fast trainer's samplers act on it)."""
        return self.learner.greedy_actions(states, use_target=True)

    def greedy_of_online(self, states: np.ndarray) -> np.ndarray:
        """The online network's greedy actions (the serial loop and evaluations)."""
        return self.learner.greedy_actions(states, use_target=False)

    def log_games(self, games: list[FinishedGame]) -> None:
        step, stats = self.counters.step, self.counters.games
        for game in games:
            stats.add(game.length, game.score)
            self.run_log.log_episode(EpisodeRow(
                episode=stats.episodes, timestep=step, length=game.length, ret=game.score,
                avg_length=stats.avg_length, avg_return=stats.avg_return,
                hours=self.counters.hours()))
            self.run_log.log_scalars(step, {"episode/return": game.score,
                                            "episode/length": float(game.length)})

    def update_inline_until(self, updates: int, stoppable: bool = False,
                            per_call: int = 1) -> None:
        """Minibatch updates on the main thread (DQN, and FastDQN without --concurrent) until
        the run has made `updates`, in calls of `per_call`; with `stoppable`, or until a stop
        is requested. Priorities are written back after each call, so with prioritized
        replay the calls must be the ones the run would have made."""
        while self.counters.updates < updates and not (stoppable and self.stop_requested()):
            count = min(per_call, updates - self.counters.updates)
            minibatches = self.draws.draw(count, buffer=0, first_update=self.counters.updates)
            self.draws.write_back(0, self.learner.update(minibatches, count))
            self.counters.updates += count
            self.update_progress_now_and_then()  # a resume's made-up updates take minutes

    def start_acting(self) -> None:
        """Fresh games in every env unless no step is left, then the evaluation due, if any
        (one owed inside an epoch waits for its sync point, as in an uninterrupted run).

        A resumed run's open episode is closed here, not when the checkpoint is read, so a
        run resumed only to finish its final work leaves the memory as it was saved."""
        if self.counters.step < self.config.timesteps:
            self.memory.close_open_episode()
            self.actor.reset(seed=self.env_seed)
        if self.evaluator.due(self.counters.step) and not self._between_sync_points:
            self.run_evaluation()

    # -- the sync-point sequence -----------------------------------------------------------------

    def at_sync_point(self, previous_step: int, sync_target: bool) -> None:
        """What the schedule asks for once the agent has gone from `previous_step` to the
        current step, in one order for both loops (docs/design.md §2): the target sync, the
        training scalars after the NaN guard, an evaluation, a checkpoint (after the guard,
        so a diverged network is never saved). DQN calls it after every step, FastDQN at
        each epoch's end, after the learner thread is drained and the buffers flushed."""
        # Training scalars exist once the last step taken was a learning step.
        self._between_sync_points = False  # first: a stop in what follows resumes here
        learned = learning_started(self.counters.step - 1, self.config)
        logged = False
        if sync_target:
            self.learner.sync_target()
            if learned:
                self.log_training()
                logged = True
        if self.evaluator.due(self.counters.step):
            self.run_evaluation()
        if self.checkpoint_due(previous_step) and self.counters.step < self.config.timesteps:
            if learned and not logged:
                self.log_training()
            self.checkpoint()

    def log_training(self, write: bool = True) -> None:
        """Training scalars over the updates since the last call, after the NaN guard; with
        `write` false, the guard alone (the window's sums are dropped)."""
        count = self.counters.updates - self._updates_logged
        loss, mean_q = self.learner.take_train_stats(count)
        self._updates_logged = self.counters.updates
        step = self.counters.step
        check_loss_finite(loss, count, step)
        if not write:
            return
        steps_per_second, updates_per_second = self.counters.rates()
        scalars = {"train/epsilon": epsilon_at(step, self.config),
                   "train/steps_per_second": steps_per_second,
                   "train/updates_per_second": updates_per_second}
        if count:
            scalars.update({"train/loss": loss, "train/mean_q": mean_q})
        self.run_log.log_scalars(step, scalars)

    def run_evaluation(self) -> None:
        """The evaluation due now; a stop request cuts it short (it is played again, whole,
        after a resume)."""
        self._evaluating = True
        try:
            games = counted(self.config.eval_episodes, "game")
            with self._paused("evaluation", f"evaluating {games}"):
                evaluated = self.evaluator.run(self.counters.step, self.greedy_of_online,
                                               self.counters.hours(),
                                               should_stop=self._stop_or_tick)
        finally:
            self._evaluating = False
        if evaluated is not None:
            self._say(evaluated.line())

    def checkpoint_due(self, previous_step: int) -> bool:
        return period_passed(self.config.checkpoint_every, previous_step, self.counters.step)

    def checkpoint(self) -> None:
        """Saves the run, unless it was saved at this step already (a stop right after a
        periodic checkpoint must not write a 7 GB memory twice). An evaluation owed after a
        resume is logged at the checkpoint's own step: it is saved again then, to count it."""
        if self._save_checkpoint is None or self._saved == self._checkpoint_position():
            return
        with self._paused("checkpoint", "writing checkpoint", lasting=True):
            started = time.monotonic()
            self.run_log.flush()  # the events up to the checkpoint are on disk with it
            self._save_checkpoint(self.state(), self.unstored_transitions())
            self._last_write = (time.monotonic() - started, len(self.memory))
        self._saved = self._checkpoint_position()

    def _checkpoint_position(self) -> tuple[int, int, int]:
        """What tells two checkpoints of the run apart: its step, its evaluations and its
        updates (a resumed run may make the updates an epoch still owed at its step)."""
        return self.counters.step, self.evaluator.count, self.counters.updates

    def unstored_transitions(self) -> Transitions | None:
        """Transitions acted but not in the memory, which a checkpoint holds apart (FastDQN's,
        stopped between an epoch's last step and its last update), or None."""
        return None

    def finished(self) -> bool:
        """Whether the run has done all the work of its --timesteps (`work_done`)."""
        return work_done(self.config, self.counters, self.evaluator,
                         self.unstored_transitions() is not None)

    @property
    def saved_at(self) -> int | None:
        """The agent step of the latest checkpoint (written or resumed from), if any."""
        return None if self._saved is None else self._saved[0]

    def _paused(self, kind: str, label: str, lasting: bool = False) -> ContextManager[None]:
        """Time that the progress line leaves out of the rate and counts in the ETA, and
        names (`label`) while it lasts."""
        if self.progress is None:
            return contextlib.nullcontext()
        self.update_progress()  # the pause is announced at the step reached
        return self.progress.paused(kind, label, lasting=lasting)

    def update_progress(self) -> None:
        self._progress_shown_at = time.monotonic()
        if self.progress is None:
            return
        counters = self.counters
        step = counters.step
        self.progress.update(step, updates=counters.updates,
                             updates_due=counters.updates_due(step),
                             learning_from=counters.learning_from(),
                             epsilon=epsilon_at(step, self.config),
                             recent_return=counters.recent_mean_score(),
                             last_eval=self.evaluator.last_mean())

    def update_progress_now_and_then(self) -> None:
        if time.monotonic() - self._progress_shown_at > _PROGRESS_SECONDS:
            self.update_progress()

    # -- running, saving, restoring ----------------------------------------------------------------

    def run(self) -> None:
        """Acts and learns until `timesteps` or a stop request, then checkpoints."""
        installed_here = self.stop.install()
        try:
            self.update_progress()  # the progress line's clocks start here
            self.act_and_learn()
            self.stop_requested()  # a stop not seen by the loop is announced all the same
            # The last NaN guard before the checkpoint. A stopped run's partial window is not
            # written: its resume writes that window's value at the next sync point, so a
            # step never holds two (docs/design.md §4).
            self.log_training(write=self.finished()
                              and self.counters.updates > self._updates_logged)
            self.checkpoint()
        finally:
            if installed_here:
                self.stop.uninstall()

    def act_and_learn(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.actor.pool.close()
        self.evaluator.close()

    def state(self) -> dict:
        """The loop's own state as JSON-able data (networks and memory are saved apart)."""
        unstored = self.unstored_transitions()
        state = {"counters": self.counters.state(), "evaluator": self.evaluator.state(),
                 "rng": self.rng.bit_generator.state,
                 "replay_rng": self.memory.generator_state(),
                 "unstored_transitions": 0 if unstored is None else len(unstored.frames),
                 "between_sync_points": self._between_sync_points}
        if self.memory.priorities is not None:  # the priorities are replay arrays
            state["replay_max_priority"] = self.memory.priorities.max_seen
        return state

    def restore(self, state: Mapping[str, Any]) -> None:
        """Continues from `state`; environments start fresh games (seeded by the step).

        Raises:
            StateError: a part's state is missing a key or holds a value out of range.
        """
        rng_state = state_fields.generator_state(state, "rng")
        replay_rng_state = state_fields.generator_state(state, "replay_rng")
        if self.memory.priorities is not None:
            self.memory.priorities.max_seen = state_fields.number(state, "replay_max_priority",
                                                                 low=0.0)
        self.counters.restore(state_fields.section(state, "counters"))
        self.evaluator.restore(state_fields.section(state, "evaluator"), self.counters.step)
        self.rng.bit_generator.state = rng_state
        self.memory.restore_generator(replay_rng_state)
        self._between_sync_points = state_fields.boolean(state, "between_sync_points")
        self.env_seed = self.config.seed + self.counters.step
        self._updates_logged = self.counters.updates  # the network's sums start at zero
        self._saved = self._checkpoint_position()

    def hold_unstored(self, transitions: Transitions | None) -> None:
        """Takes back transitions a checkpoint held apart from the memory (only FastDQN
        makes any).

        Raises:
            StateError: this loop holds none.
        """
        if transitions is not None:
            raise StateError(f"{self.algo} holds no transitions apart from its memory")


def work_done(config: Config, counters: RunCounters, evaluator: Evaluator,
              transitions_unstored: bool) -> bool:
    """Whether a run has done all that its --timesteps asks: every agent step, the updates
    due by its last step, the evaluation due there, and every transition stored. What is
    left then is its final checkpoint and summary.json, which the run writes next; so a
    checkpoint of which this holds is a finished run's."""
    step = counters.step
    return (step >= config.timesteps and counters.updates >= counters.updates_due(step)
            and not evaluator.due(step) and not transitions_unstored)


class DQN(TrainingLoop):
    """The Nature-DQN reference: act one step, one minibatch update every `train_freq` steps."""

    algo = "dqn"

    def act_and_learn(self) -> None:
        config, counters = self.config, self.counters
        self.start_acting()
        while counters.step < config.timesteps and not self.stop_requested():
            transitions, games = self.actor.act(self.choose_actions(use_target=False))
            self.memory.add_many(transitions)
            counters.step += 1
            self.log_games(games)
            counters.mark_learning_start()
            self.update_inline_until(counters.updates_due(counters.step))
            self.at_sync_point(counters.step - 1,
                               sync_target=target_sync_due(counters.step, config))
            self.update_progress_now_and_then()
        self.update_progress()


class FastDQN(TrainingLoop):
    """The concurrent, synchronized scheme of Daley & Amato (2021)."""

    algo = ALGO_FAST_DQN

    def __init__(self, parts: LoopParts):
        super().__init__(parts)
        self.one_query = self.config.synchronize
        num_envs = self.actor.pool.num_envs
        self.buffers = [SamplerStaging(self.config.n_step) for _ in range(num_envs)]
        self.learner_thread: LearnerThread | None = None
        if self.config.concurrent:
            self.learner_thread = LearnerThread(self.learner, self.draws, self.counters)
        rounds = round_up(self.config.target_update, num_envs) // num_envs
        self._staging = StagingArea(rounds, num_envs)
        self._acted: Transitions | None = None  # the last round's, staged in the next one
        # An epoch's transitions kept out of the memory while its updates are owed.
        self._unstored: Transitions | None = None
        self._epoch_start = 0  # the step the running epoch began at (its rows not stored yet)

    def unstored_transitions(self) -> Transitions | None:
        return self._unstored

    def hold_unstored(self, transitions: Transitions | None) -> None:
        self._unstored = transitions

    def _transitions_to_save(self, step: int) -> int:
        """The memory's, and those acted since the epoch began (flushed into it, or held
        apart, when the loop stops)."""
        pending = max(0, step - self._epoch_start)
        return min(self.memory.capacity, len(self.memory) + pending)

    def next_boundary(self) -> int:
        """The agent step at which the current epoch ends (a sync point)."""
        counters = self.counters
        return epoch_end(counters.step, counters.learning_from(), self.config,
                         self.actor.pool.num_envs)

    def act_and_learn(self) -> None:
        counters = self.counters
        self._epoch_start = counters.step  # a resumed run's rows are all stored
        self.finish_epoch_cut_short()
        if not self.stop_requested():  # else nothing acts: no fresh games, no evaluation owed
            self.start_acting()
        try:
            while counters.step < self.config.timesteps and not self.stop_requested():
                previous_step = counters.step
                end = self.next_boundary()
                self._run_epoch(end)
                if self.stop_requested() and not self._epoch_done(end):
                    self._cut_epoch_short(end)
                    break  # the target stays frozen until the epoch is done
                self._flush_buffers()
                self.at_sync_point(previous_step, sync_target=True)
                self.update_progress()
            self.update_progress()
        finally:
            if self.learner_thread is not None:
                self.learner_thread.close()

    def _epoch_done(self, end: int) -> bool:
        """Whether the epoch ending at `end` has taken all its steps and made all its updates."""
        counters = self.counters
        return counters.step >= end and counters.updates >= counters.updates_due(end)

    def _cut_epoch_short(self, end: int) -> None:
        """A stop before the epoch at `end` was done. A stop while acting stores what was
        acted. Once the steps are all taken, the transitions are held apart (and saved so),
        since the updates still owed sample the memory as it stood at the epoch's start; a
        resume makes them first (`finish_epoch_cut_short`)."""
        if self.counters.step < end:
            self._flush_buffers()
            return
        pieces = self._take_buffers()
        self._unstored = concatenate(pieces) if pieces else None
        self._staging.clear()

    def finish_epoch_cut_short(self) -> None:
        """After a resume from a stop between an epoch's last step and its last update: the
        rest of its updates (before any acting), then its transitions into the memory and
        the sync point, as an uninterrupted run makes them (so the same bytes). A stop
        request ends them between two calls; the checkpoint then holds the updates made."""
        if self._unstored is None:
            return
        counters = self.counters
        due = counters.updates_due(counters.step)
        # The learner thread makes whole calls from the epoch's start: the rest are calls of
        # updates_per_call too (without the thread, of one update each).
        per_call = self.draws.updates_per_call if self.learner_thread is not None else 1
        if self.progress is not None:  # no step moves meanwhile: the line says why
            self.progress.phase("finishing the stopped epoch's updates", "finishing updates",
                                lasting=True)
        self.update_inline_until(due, stoppable=True, per_call=per_call)
        if self.progress is not None:
            self.progress.end_phase()
        if counters.updates < due:
            return
        self.memory.add_in_order([self._unstored])
        self._unstored = None
        self.at_sync_point(counters.step - 1, sync_target=True)

    def _run_epoch(self, end: int) -> None:
        """Acts until `end` while the epoch's updates run on the memory as it stands."""
        counters = self.counters
        counters.mark_learning_start()
        epoch_updates = counters.updates_due(end) - counters.updates
        self._epoch_start = counters.step
        self._between_sync_points = True
        in_background = self.learner_thread is not None and epoch_updates > 0
        if in_background:
            self.learner_thread.start_epoch(epoch_updates)
            self._updates_running = True
        self._staging.clear()
        exploration = self._next_round(counters.step, end)
        while exploration is not None:
            exploration = self._act_round(exploration, end)
            if self.learner_thread is None:  # the epoch's updates due by now
                self.update_inline_until(min(counters.updates_due(counters.step),
                                             counters.updates_due(end)))
            self.update_progress_now_and_then()
        self._stage_acted()
        self.update_progress()  # the epoch's last step, before the wait for the learner
        if in_background:
            if self.progress is not None:
                self.progress.phase("waiting for the learner", "waiting for learner")
            # On a stop request the rest of the epoch's updates are abandoned.
            try:
                self.learner_thread.wait(abandon_if=self._stop_or_tick)
            finally:
                self._updates_running = False
            if self.progress is not None:
                self.progress.end_phase()

    def _next_round(self, step: int, end: int) -> Exploration | None:
        """The draws of the round to take at `step`, or None where the epoch's acting stops
        there: at its end, on a stop request, or once the learner has failed. The draws are
        made only for a round that is then taken, so the generator's state (a checkpoint
        holds it) counts exactly the rounds taken."""
        updates_failed = self.learner_thread is not None and self.learner_thread.failed
        if step >= end or self.stop_requested(step) or updates_failed:
            return None
        return self.epsilon_greedy.draw(step)

    def _act_round(self, exploration: Exploration, end: int) -> Exploration | None:
        """One round with `exploration`'s draws; returns the next round's. While the envs
        step, the loop stages the last round's transitions and draws the next round's."""
        counters, num_envs = self.counters, self.actor.pool.num_envs
        self.actor.send(self.actor.actions(exploration, self.greedy_of_target,
                                           one_query=self.one_query))
        self._stage_acted()
        exploration = self._next_round(counters.step + num_envs, end)
        self._acted, games = self.actor.receive()
        counters.step += num_envs
        self.log_games(games)
        return exploration

    def _stage_acted(self) -> None:
        """The last round's transitions, not staged yet, into the staging area."""
        if self._acted is not None:
            self._staging.append(self._acted)
            self._acted = None

    def _flush_buffers(self) -> None:
        """The epoch's transitions into the memory, sampler by sampler, from the staging area."""
        self.memory.add_in_order(self._take_buffers())
        self._staging.clear()
        self._epoch_start = self.counters.step

    def _take_buffers(self) -> list[Transitions]:
        """The epoch's transitions as the pieces a flush stores, in sampler order (views of
        the staging area, valid until it is cleared)."""
        pieces = []
        for env, buffer in enumerate(self.buffers):
            buffer.extend(self._staging.env_rows(env))
            pieces.extend(buffer.take())
        return pieces
