"""The trainer: the update path from the replay memory to the network, and the background
thread that runs it in the fast scheme (docs/design.md §2).

`UpdatePath` draws minibatches and makes the network's updates: DQN's loop calls
`UpdatePath.update_now` on the main thread. `UpdateThread` runs an epoch's updates in the
background for FastDQN: the main thread hands it a number of updates per epoch and, at the
next sync point, waits until they are done. A call makes k updates (k is at most
`updates_per_call`): the memory is frozen during an epoch, so k minibatches can be drawn at
once and trained in one call, paying the host's per-call cost once. The first exception
raised on the thread is stored and re-raised in the main thread by `wait` (or `check`), so a
failing trainer stops the run instead of hanging it.

Where the memory's frames live decides what a minibatch is (fast_dqn/frame_store.py): on
the host, `prepare` gathers its states into a buffer; on the device, it draws only their
slots and masks and the update gathers the states inside its compiled step. Both draw the
same slots from the same generator, so the updates are the same.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for_futures
from typing import TYPE_CHECKING, Any, Callable, Protocol

from fast_dqn.replay_memory import ReplayMemory
from fast_dqn.transitions import Batch, SlotBatch

if TYPE_CHECKING:
    from fast_dqn.loop_parts import QFunction

_POLL_SECONDS = 0.05  # how often `wait` looks at its abandon condition

_STOP = None  # sentinel that ends the thread


class UpdatePath:
    """The update path: draws minibatches from `memory` into its two buffers and makes the
    network's updates on them (each update is the learning rule, `update_rule.dqn_update`:
    TD targets from the target network, the summed Huber loss, one centred RMSProp step).

    Thread use: `prepare(k, buffer)` and `update(minibatches, k)` may run on two threads at
    once as long as they use different buffers (`UpdateThread`); `update_now` runs alone.
    """

    def __init__(self, memory: ReplayMemory, network: QFunction, batch_size: int,
                 updates_per_call: int = 1):
        self.memory = memory
        self.network = network
        self.batch_size = batch_size
        self.updates_per_call = updates_per_call
        rows = batch_size * updates_per_call
        # Reused, not allocated per call: fresh megabyte-sized arrays cost page faults.
        self._buffers = (memory.frames.minibatch_buffers(rows),
                         memory.frames.minibatch_buffers(rows))
        # The memory's generator state before each buffer's draws, for `discard`.
        self._drawn_from: list[dict | None] = [None, None]

    def prepare(self, count: int, buffer: int) -> Batch | SlotBatch:
        """`count` minibatches drawn from the memory, as its frame store makes them (into
        buffer 0 or 1, where it gathers into buffers)."""
        self._drawn_from[buffer] = self.memory.generator_state()
        return self.memory.sample_many(count, self.batch_size, out=self._buffers[buffer])

    def undo_draws(self, buffer: int) -> None:
        """Takes back the draws of the minibatches in `buffer`, prepared but never trained
        on (the thread's epoch was abandoned after the draws ahead): the memory's generator
        is again where those draws began, so a checkpoint holds the state of the updates
        made, and the run resumed from it draws those minibatches for its next updates."""
        state = self._drawn_from[buffer]
        if state is not None:
            self.memory.restore_generator(state)
            self._drawn_from[buffer] = None

    def update(self, minibatches: Batch | SlotBatch, count: int) -> None:
        """`count` updates, one per minibatch, in one call."""
        self.memory.frames.update(self.network, minibatches, count)

    def update_now(self, count: int = 1) -> None:
        """Draws and makes `count` updates on the calling thread."""
        self.update(self.prepare(count, buffer=0), count)


class UpdateCount(Protocol):
    """Where the updates made are counted (the run's `RunCounters`)."""

    updates: int


class UpdateCalls(Protocol):
    """What `UpdateThread` runs (an `UpdatePath`; the tests' fakes)."""

    updates_per_call: int

    def prepare(self, count: int, buffer: int) -> Any: ...

    def update(self, minibatches: Any, count: int) -> None: ...

    def undo_draws(self, buffer: int) -> None: ...


@dataclasses.dataclass
class UpdateTimes:
    """Where the trainer's two threads spent their time, summed since it started.

    Wall time in the two kinds of call, and the threads' own CPU time (`time.thread_time`):
    the host work of the trainer, most of it under the interpreter lock. A wait that
    releases the lock (a GPU's kernels, the benchmark's simulated ones) costs wall time but
    no CPU time.
    """

    prepare_seconds: float = 0.0
    update_seconds: float = 0.0
    prepare_cpu_seconds: float = 0.0
    update_cpu_seconds: float = 0.0

    @property
    def cpu_seconds(self) -> float:
        return self.prepare_cpu_seconds + self.update_cpu_seconds


class UpdateThread:
    """Runs an epoch's n minibatch updates of an `UpdatePath` on a named background thread.

    The work of one call is split in two: `update_path.prepare(k, buffer)` draws k minibatches
    from the replay memory into buffer 0 or 1 (alternating), and `update_path.update(batches, k)`
    makes the k updates. A second thread prepares the next call while this thread runs the
    current one, so sampling overlaps the network's update (on a GPU, its kernels; in the
    benchmark's stub, its wait); the two threads never use the same buffer at once. The
    calls are prepared one after another in the epoch's order, so the minibatches do not
    depend on timing. A call prepared but never made (the epoch was abandoned) is handed to
    `update_path.undo_draws(buffer)`, so that its draws are taken back: the next update, after a
    resume, draws the minibatch this one would have.

    Ownership: during an epoch only these two threads touch the replay memory (reading) and
    the online network; the main thread touches neither until `wait` returns, and `wait`
    returns only when no preparation is in flight.
    """

    def __init__(self, update_path: UpdateCalls, counters: UpdateCount, name: str = "trainer"):
        if update_path.updates_per_call < 1:
            raise ValueError(f"updates_per_call must be at least 1; got "
                             f"{update_path.updates_per_call}")
        self._update_path = update_path
        self._counters = counters
        self._updates_per_call = update_path.updates_per_call
        self._preparer = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{name}-prepare")
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
        """Blocks until every started epoch is done; re-raises the trainer's exception.

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
        self._preparer.shutdown(wait=True)

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
        counts = [min(self._updates_per_call, updates - done)
                  for done in range(0, updates, self._updates_per_call)]
        ahead: Future | None = None
        ahead_buffer = 0
        try:
            for index, count in enumerate(counts):
                if self._stop.is_set() or self._abandon.is_set():
                    return
                if ahead is None:
                    ahead = self._preparer.submit(self._timed_prepare, count, index % 2)
                batches = ahead.result()
                ahead = None
                if index + 1 < len(counts):
                    ahead_buffer = (index + 1) % 2
                    ahead = self._preparer.submit(self._timed_prepare, counts[index + 1],
                                                  ahead_buffer)
                self._timed_update(batches, count)
                # The run's one count: during an epoch only this thread changes it, and the
                # main thread reads it for the epoch's work only after `wait`.
                self._counters.updates += count
        finally:
            if ahead is not None:
                wait_for_futures([ahead])  # nothing may read the memory after the epoch
                if ahead.exception() is None:
                    self._update_path.undo_draws(ahead_buffer)

    def _timed_prepare(self, count: int, buffer: int) -> Any:
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return self._update_path.prepare(count, buffer)
        finally:
            self.times.prepare_cpu_seconds += time.thread_time() - cpu
            self.times.prepare_seconds += time.perf_counter() - wall

    def _timed_update(self, batches: Any, count: int) -> None:
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            self._update_path.update(batches, count)
        finally:
            self.times.update_cpu_seconds += time.thread_time() - cpu
            self.times.update_seconds += time.perf_counter() - wall
