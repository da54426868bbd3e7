"""A stop signal delivered to a process and its group (``timeout`` sends it so) is one
graceful stop; the user's second signal, later, stops at once."""

from __future__ import annotations

from sluicegate.reader.stop_signals import AGAIN_AFTER_S, StopRequest, StopSignals


def test_the_first_signal_is_a_graceful_stop_and_its_copy_at_the_same_moment_changes_nothing() -> None:
    signals = StopSignals()
    assert signals.seen(100.0) is StopRequest.GRACEFUL
    assert signals.seen(100.0001) is StopRequest.SAME
    assert signals.seen(100.0 + AGAIN_AFTER_S / 2) is StopRequest.SAME


def test_a_signal_a_second_later_stops_at_once() -> None:
    signals = StopSignals()
    signals.seen(100.0)
    signals.seen(100.0001)
    assert signals.seen(100.0 + AGAIN_AFTER_S) is StopRequest.AT_ONCE
    assert signals.seen(250.0) is StopRequest.AT_ONCE


def test_it_is_stopping_from_the_first_signal_on() -> None:
    signals = StopSignals()
    assert not signals.stopping
    signals.seen(1.0)
    assert signals.stopping
