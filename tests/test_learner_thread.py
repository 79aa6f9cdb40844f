"""The learner thread (the design's trainer thread): epochs, errors re-raised, stopping
without hanging."""

import threading
import time
from typing import Any, Callable

import pytest

from fast_dqn.training_loops import LearnerThread


class Calls:
    """The learner and the draws a `LearnerThread` runs, as plain functions."""

    def __init__(self, update: Callable[[Any, int], None],
                 prepare: Callable[[int, int], Any] = lambda count, buffer: None,
                 updates_per_call: int = 1,
                 undo_draws: Callable[[int], None] = lambda buffer: None):
        self.update, self.undo = update, undo_draws
        self.draw = lambda count, buffer, first_update: prepare(count, buffer)
        self.updates_per_call = updates_per_call
        self.drawn_ahead = True

    def write_back(self, buffer: int, td_errors: Any) -> None:
        pass


class Counts:
    updates = 0


class CountedThread(LearnerThread):
    """A LearnerThread counting into its own `Counts`; `wait` returns the updates the
    thread counted since the last `wait`."""

    def __init__(self, calls: Calls, name: str):
        self.counts = Counts()
        self._seen = 0
        super().__init__(calls, calls, self.counts, name=name)

    def wait(self, abandon_if=None) -> int:
        super().wait(abandon_if)
        made, self._seen = self.counts.updates - self._seen, self.counts.updates
        return made


def learner_thread(update, prepare=lambda count, buffer: None, name: str = "trainer",
                   updates_per_call: int = 1, undo_draws=lambda buffer: None) -> CountedThread:
    return CountedThread(Calls(update, prepare, updates_per_call, undo_draws), name=name)


def test_runs_the_epochs_updates_on_its_own_thread():
    threads = []
    trainer = learner_thread(lambda _, count: threads.append(threading.current_thread().name))
    trainer.start_epoch(5)
    first = trainer.wait()
    trainer.start_epoch(3)
    second = trainer.wait()
    trainer.close()
    assert (first, second) == (5, 3)
    assert threads == ["trainer"] * 8


def test_an_exception_is_re_raised_by_wait_and_stops_the_epoch():
    calls = []

    def update(_, count):
        calls.append(count)
        if len(calls) == 3:
            raise RuntimeError("broken update")

    trainer = learner_thread(update)
    trainer.start_epoch(100)
    with pytest.raises(RuntimeError, match="broken update"):
        trainer.wait()
    assert len(calls) == 3
    assert trainer.failed
    with pytest.raises(RuntimeError, match="broken update"):
        trainer.start_epoch(1)  # the error stays until the run stops
    trainer.close()


# A bound on waits for what a correct trainer does at once: only a failing test waits it out.
GIVE_UP_SECONDS = 60


class LooksAtTheStop:
    """A stop request the test makes, and a gate on the trainer's updates once it is made:
    each later update waits for one look of `UpdateThread.wait` at the request. A `wait`
    that acts on its first look then lets at most two more updates through (the one that
    look let go, and one begun before the abandon was set), whatever the threads' timing;
    one that waited out the epoch would starve the gate and let the rest run ungated."""

    def __init__(self):
        self.requested = threading.Event()
        self.gating = True
        self.starved = False  # an update waited GIVE_UP_SECONDS for a look
        self._looks = threading.Semaphore(0)

    def gate(self) -> None:
        if self.requested.is_set() and self.gating and not self.starved:
            self.starved = not self._looks.acquire(timeout=GIVE_UP_SECONDS)

    def __call__(self) -> bool:
        """`abandon_if`: the stop request, as `wait` polls it."""
        if self.requested.is_set():
            self._looks.release()
            return True
        return False


def test_a_stop_request_abandons_the_epoch_within_moments():
    """Regression: Ctrl-C while the main thread waited for the trainer waited out the epoch."""
    made = []
    stop = LooksAtTheStop()

    def update(_, count):
        stop.gate()
        made.append(count)
        if len(made) == 3:
            stop.requested.set()

    trainer = learner_thread(update)
    trainer.start_epoch(10_000)
    made_count = trainer.wait(abandon_if=stop)
    stop.gating = False
    assert not stop.starved
    assert 3 <= made_count <= 5
    trainer.start_epoch(2)  # the next epoch is not abandoned
    assert trainer.wait() == 2
    trainer.close()


def test_close_is_idempotent_and_joins_the_thread():
    """close() during an epoch of 1,000 s of updates returns with the epoch unfinished and
    the thread gone."""
    made = []
    updating = threading.Event()

    def update(_, count):
        made.append(count)
        updating.set()
        time.sleep(0.001)

    trainer = learner_thread(update, name="trainer-closed-twice")
    trainer.start_epoch(1_000_000)
    assert updating.wait(GIVE_UP_SECONDS)
    trainer.close()
    trainer.close()
    assert 0 < len(made) < 1_000_000
    names = [thread.name for thread in threading.enumerate()]
    assert not [name for name in names if name.startswith("trainer-closed-twice")]


def test_an_epoch_is_cut_into_calls_of_at_most_updates_per_call():
    calls = []
    trainer = learner_thread(lambda _, count: calls.append(count), updates_per_call=4)
    trainer.start_epoch(10)
    first = trainer.wait()
    trainer.start_epoch(8)
    second = trainer.wait()
    trainer.close()
    assert calls == [4, 4, 2, 4, 4]
    assert (first, second) == (10, 8)


def test_wait_returns_the_updates_made_since_the_last_wait():
    trainer = learner_thread(lambda _, count: None, updates_per_call=3)
    trainer.start_epoch(7)
    assert trainer.wait() == 7
    assert trainer.wait() == 0  # nothing started since
    trainer.start_epoch(2)
    trainer.start_epoch(4)
    assert trainer.wait() == 6
    trainer.close()


def test_the_next_call_is_prepared_while_the_current_one_updates():
    """prepare(k, buffer) runs one call ahead on its own thread, in the epoch's order, into
    alternating buffers; update gets what was prepared for it. An update that has a next
    call waits until that call's preparation has begun: a trainer that prepared only after
    the update would leave it waiting (no clock decides the overlap)."""
    events, changed = [], threading.Condition()
    waited_for = []  # per call with a next one: whether its preparation began meanwhile

    def prepare(count: int, buffer: int) -> tuple[int, int]:
        with changed:
            events.append(("prepare", count, buffer, threading.current_thread().name))
            changed.notify_all()
        return count, buffer

    def kinds(kind: str) -> int:
        return sum(event[0] == kind for event in events)

    def update(prepared: tuple[int, int], count: int) -> None:
        with changed:
            if kinds("update") < 2:  # the first two of the three calls have a next one
                made = kinds("update")
                waited_for.append(changed.wait_for(lambda: kinds("prepare") >= made + 2,
                                                   timeout=GIVE_UP_SECONDS))
            events.append(("update", prepared, count))

    trainer = learner_thread(update, prepare=prepare, updates_per_call=3)
    trainer.start_epoch(7)
    assert trainer.wait() == 7
    trainer.close()
    prepares = [event[1:3] for event in events if event[0] == "prepare"]
    updates = [event[1:] for event in events if event[0] == "update"]
    assert prepares == [(3, 0), (3, 1), (1, 0)]
    assert updates == [((3, 0), 3), ((3, 1), 3), ((1, 0), 1)]
    assert all(event[3].startswith("trainer-draw") for event in events
               if event[0] == "prepare")
    assert waited_for == [True, True]


def test_an_abandoned_epoch_leaves_no_preparation_running():
    """wait() returns only when no preparation is in flight: after it the main thread may
    write the replay memory."""
    running = []

    def prepare(count: int, buffer: int) -> None:
        running.append(1)
        time.sleep(0.01)
        running.pop()

    updating = threading.Event()

    def update(_, count):
        updating.set()
        time.sleep(0.005)

    trainer = learner_thread(update, prepare=prepare)
    trainer.start_epoch(100_000)
    assert updating.wait(GIVE_UP_SECONDS)  # an update under way: at least one is made
    made = trainer.wait(abandon_if=lambda: True)
    assert running == []
    assert 0 < made < 100_000
    trainer.close()


def test_an_exception_in_prepare_is_re_raised_by_wait():
    def prepare(count: int, buffer: int) -> None:
        raise RuntimeError("broken sampling")

    updates = []
    trainer = learner_thread(lambda _, count: updates.append(count), prepare=prepare)
    trainer.start_epoch(5)
    with pytest.raises(RuntimeError, match="broken sampling"):
        trainer.wait()
    assert updates == []
    trainer.close()


def spin_cpu(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_the_trainer_counts_its_threads_cpu_time_apart_from_their_waits():
    """A wait that releases the interpreter lock (a GPU's kernels) is wall time, not CPU."""
    def update(_, count):
        time.sleep(0.02)
        spin_cpu(0.01)

    trainer = learner_thread(update, prepare=lambda count, buffer: spin_cpu(0.005),
                            updates_per_call=2)
    trainer.start_epoch(20)  # 10 calls
    assert trainer.wait() == 20
    trainer.close()
    times = trainer.times
    assert 0.1 <= times.update_cpu_seconds < 0.13  # 10 x 10 ms spun; the sleeps add ~nothing
    assert times.update_seconds >= 0.3  # 10 x (20 ms asleep + 10 ms spun)
    assert 0.05 <= times.draw_cpu_seconds < 0.08
    assert times.draw_seconds >= 0.05
    assert times.cpu_seconds == times.update_cpu_seconds + times.draw_cpu_seconds


def test_a_call_prepared_but_never_made_is_handed_back_to_undo_draws():
    """Regression: an abandoned epoch left the draws of the call prepared ahead in the
    replay memory's generator, so the updates a resume made drew other minibatches than the
    run never stopped."""
    prepared, made, discarded = [], [], []
    stop = LooksAtTheStop()  # the epoch of 100 calls cannot end before the stop is seen

    def prepare(count: int, buffer: int) -> int:
        prepared.append(buffer)
        return buffer

    def update(buffer: int, count: int) -> None:
        stop.gate()
        made.append(buffer)
        stop.requested.set()

    trainer = learner_thread(update, prepare=prepare, updates_per_call=1,
                            undo_draws=discarded.append)
    trainer.start_epoch(100)
    assert trainer.wait(abandon_if=stop) == len(made)
    stop.gating = False
    trainer.close()
    assert not stop.starved and 1 <= len(made) <= 3
    # Every call prepared was either made or discarded, the discarded one last.
    assert prepared == made + discarded and len(discarded) == 1
