"""The first SIGINT/SIGTERM asks the run to stop; a second one, later, stops it at once."""

import os
import signal
import time

import pytest

from fast_dqn.stop_request import SAME_REQUEST_SECONDS, StopRequest


@pytest.fixture
def stop():
    request = StopRequest()
    assert request.install()
    yield request
    request.uninstall()


def send(signum: int) -> None:
    os.kill(os.getpid(), signum)
    time.sleep(0.01)  # Python runs the handler at its next check, on this thread


def test_the_first_signal_is_a_request_not_an_exception(stop):
    assert not stop
    send(signal.SIGTERM)
    assert stop and stop.signal_number == signal.SIGTERM


def test_a_signal_delivered_with_the_first_is_the_same_request(stop):
    # As `timeout -s INT 10h python run_fast_dqn.py ...` delivers it: to the run, then to its
    # process group, which holds the run again.
    send(signal.SIGINT)
    send(signal.SIGINT)
    assert stop.signal_number == signal.SIGINT


def test_a_later_second_signal_stops_at_once(stop):
    send(signal.SIGINT)
    time.sleep(SAME_REQUEST_SECONDS + 0.1)
    with pytest.raises(KeyboardInterrupt):
        send(signal.SIGINT)


def test_sighup_is_a_request_unless_it_was_ignored():
    """A closed terminal stops the run like SIGTERM; under nohup (SIGHUP ignored) it does not."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        ignored = StopRequest()
        ignored.install()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        ignored.uninstall()
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        request = StopRequest()
        request.install()
        try:
            send(signal.SIGHUP)
            assert request.signal_number == signal.SIGHUP
        finally:
            request.uninstall()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_a_process_that_only_exits_ignores_later_stop_signals():
    """Regression (the soak): a SIGINT while a finished run's interpreter shut down killed it
    with status -2 instead of its own 0. The run scripts ignore stop signals once it is over."""
    previous = {signum: signal.getsignal(signum)
                for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        request = StopRequest()
        request.install()
        request.uninstall(ignore_later=True)
        assert all(signal.getsignal(signum) is signal.SIG_IGN for signum in previous)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
