"""The background trainer thread of the fast scheme (docs/design.md §2).

The main thread hands it a number of minibatch updates per epoch and, at the next sync point,
waits until they are done. The first exception raised on the trainer thread is stored and
re-raised in the main thread by `wait` (or `check`), so a failing trainer stops the run
instead of hanging it.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for_futures
from typing import Any, Callable

_POLL_SECONDS = 0.05  # how often `wait` looks at its abandon condition

_STOP = None  # sentinel that ends the thread


def _nothing_to_prepare(count: int, slot: int) -> None:
    return None


def _nothing_to_discard(slot: int) -> None:
    return None


@dataclasses.dataclass
class TrainerTimes:
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


class Trainer:
    """Runs an epoch's n minibatch updates on a named background thread.

    The work of one call is split in two: `prepare(k, slot)` draws k minibatches from the
    replay memory into buffer `slot` (0 or 1, alternating), and `update(batches, k)` makes
    the k updates. A second thread prepares the next call while the trainer thread runs the
    current one, so sampling overlaps the network's update (on a GPU, its kernels; in the
    benchmark's stub, its wait); the two threads never use the same buffer at once. The
    calls are prepared one after another in the epoch's order, so the minibatches do not
    depend on timing. A call prepared but never made (the epoch was abandoned) is handed to
    `discard(slot)`, so that its draws can be taken back: the next update, after a resume,
    draws the minibatch this one would have. k is at most `updates_per_call`: the replay memory is frozen during an
    epoch, so k minibatches can be drawn and trained at once, paying the per-call host cost
    once for k updates.

    Ownership: during an epoch only these two threads touch the replay memory (reading) and
    the online network; the main thread touches neither until `wait` returns, and `wait`
    returns only when no preparation is in flight.
    """

    def __init__(self, update: Callable[[Any, int], None],
                 prepare: Callable[[int, int], Any] = _nothing_to_prepare,
                 name: str = "trainer", updates_per_call: int = 1,
                 discard: Callable[[int], None] = _nothing_to_discard):
        if updates_per_call < 1:
            raise ValueError(f"updates_per_call must be at least 1; got {updates_per_call}")
        self._update = update
        self._prepare = prepare
        self._discard = discard
        self._updates_per_call = updates_per_call
        self._preparer = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{name}-prepare")
        self._work: queue.Queue[int | None] = queue.Queue()
        self._done = threading.Semaphore(0)
        self._stop = threading.Event()
        self._abandon = threading.Event()  # ends the running epoch early
        self._error: BaseException | None = None
        self._pending = 0
        self._completed = 0  # updates done; written by the trainer thread, read after `wait`
        self._collected = 0  # the part of `_completed` that `wait` has returned
        self.times = TrainerTimes()  # each field written by one thread only
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def start_epoch(self, updates: int) -> None:
        self.check()
        self._abandon.clear()
        self._pending += 1
        self._work.put(updates)

    def wait(self, abandon_if: Callable[[], bool] | None = None) -> int:
        """Blocks until every started epoch is done and returns the updates made since the
        last `wait`; re-raises the trainer's exception.

        If `abandon_if()` becomes true while waiting (a stop was requested), the running
        epoch ends after its current update, and only the updates made are counted.
        """
        while self._pending:
            if self._done.acquire(timeout=_POLL_SECONDS):
                self._pending -= 1
            elif abandon_if is not None and abandon_if():
                self._abandon.set()
        self.check()
        collected = self._completed - self._collected
        self._collected = self._completed
        return collected

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
        ahead_slot = 0
        try:
            for index, count in enumerate(counts):
                if self._stop.is_set() or self._abandon.is_set():
                    return
                if ahead is None:
                    ahead = self._preparer.submit(self._timed_prepare, count, index % 2)
                batches = ahead.result()
                ahead = None
                if index + 1 < len(counts):
                    ahead_slot = (index + 1) % 2
                    ahead = self._preparer.submit(self._timed_prepare, counts[index + 1],
                                                  ahead_slot)
                self._timed_update(batches, count)
                self._completed += count
        finally:
            if ahead is not None:
                wait_for_futures([ahead])  # nothing may read the memory after the epoch
                if ahead.exception() is None:
                    self._discard(ahead_slot)

    def _timed_prepare(self, count: int, slot: int) -> Any:
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return self._prepare(count, slot)
        finally:
            self.times.prepare_cpu_seconds += time.thread_time() - cpu
            self.times.prepare_seconds += time.perf_counter() - wall

    def _timed_update(self, batches: Any, count: int) -> None:
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            self._update(batches, count)
        finally:
            self.times.update_cpu_seconds += time.thread_time() - cpu
            self.times.update_seconds += time.perf_counter() - wall
