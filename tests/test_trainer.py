"""The background trainer thread: epochs, errors re-raised, stopping without hanging."""

import threading
import time

import pytest

from fast_dqn.trainer import Trainer


def test_runs_the_epochs_updates_on_its_own_thread():
    threads = []
    trainer = Trainer(lambda count: threads.append(threading.current_thread().name))
    trainer.start_epoch(5)
    trainer.wait()
    trainer.start_epoch(3)
    trainer.wait()
    trainer.close()
    assert trainer.completed == 8
    assert threads == ["trainer"] * 8


def test_an_exception_is_re_raised_by_wait_and_stops_the_epoch():
    calls = []

    def update(count):
        calls.append(count)
        if len(calls) == 3:
            raise RuntimeError("broken update")

    trainer = Trainer(update)
    trainer.start_epoch(100)
    with pytest.raises(RuntimeError, match="broken update"):
        trainer.wait()
    assert len(calls) == 3
    assert trainer.failed
    with pytest.raises(RuntimeError, match="broken update"):
        trainer.start_epoch(1)  # the error stays until the run stops
    trainer.close()


def test_a_stop_request_abandons_the_epoch_within_moments():
    """Regression: Ctrl-C while the main thread waited for the trainer waited out the epoch."""
    trainer = Trainer(lambda count: time.sleep(0.01))
    trainer.start_epoch(10_000)  # 100 s of updates
    requested = time.monotonic() + 0.2
    started = time.monotonic()
    trainer.wait(abandon_if=lambda: time.monotonic() > requested)
    assert time.monotonic() - started < 2.0
    assert 0 < trainer.completed < 10_000
    trainer.start_epoch(2)  # the next epoch is not abandoned
    trainer.wait()
    trainer.close()


def test_close_is_idempotent_and_joins_the_thread():
    trainer = Trainer(lambda count: time.sleep(0.001))
    trainer.start_epoch(1_000_000)
    trainer.close()
    trainer.close()
    assert trainer.completed < 1_000_000


def test_an_epoch_is_cut_into_calls_of_at_most_updates_per_call():
    calls = []
    trainer = Trainer(calls.append, updates_per_call=4)
    trainer.start_epoch(10)
    trainer.wait()
    trainer.start_epoch(8)
    trainer.wait()
    trainer.close()
    assert calls == [4, 4, 2, 4, 4]
    assert trainer.completed == 18


def test_updates_per_call_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        Trainer(lambda count: None, updates_per_call=0)


def test_wait_returns_the_updates_made_since_the_last_wait():
    trainer = Trainer(lambda count: None, updates_per_call=3)
    trainer.start_epoch(7)
    assert trainer.wait() == 7
    assert trainer.wait() == 0  # nothing started since
    trainer.start_epoch(2)
    trainer.start_epoch(4)
    assert trainer.wait() == 6
    trainer.close()
