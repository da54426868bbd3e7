"""The reader protocol tells a fence by a duplicate (another live process registered for
the subtask: stop for good) from a fence by silence (register again), and handles a
refused exclusive registration."""

from __future__ import annotations

from sluicegate.protocol.messages import (
    Body,
    Envelope,
    ReaderRegistered,
    RegistrationRefused,
    SplitsReleased,
    envelope,
)
from sluicegate.reader.protocol import Fenced, Ignored, Phase, ReaderProtocol, Refused, Superseded

SOURCE = "dups"


def to_reader(body: Body, attempt: int | None) -> Envelope:
    return envelope(body, source=SOURCE, subtask=0, attempt=attempt, epoch=1, ts=1)


def active() -> ReaderProtocol:
    protocol = ReaderProtocol(SOURCE, 0, location="host-a:1", reassign_on_recovery=False)
    registration = protocol.begin_registration()
    protocol.on_message(to_reader(ReaderRegistered(incarnation=registration.incarnation, attempt=1), None))
    assert protocol.active
    return protocol


def fence(reason: str, successor: str | None) -> Envelope:
    body = SplitsReleased(
        reason=reason, failed_attempt=1, split_ids=[], successor_incarnation=successor, successor_location="host-b:2"
    )
    return to_reader(body, 1)


def test_a_fence_by_another_incarnation_supersedes_the_reader_for_good() -> None:
    protocol = active()
    outcome = protocol.on_message(fence("fenced", "other"))
    assert isinstance(outcome, Superseded) and outcome.successor_location == "host-b:2"
    assert protocol.phase is Phase.CLOSED
    assert "two readers were started for the same subtask" in outcome.describe(SOURCE, 0)


def test_a_timeout_or_a_fence_without_successor_registers_again() -> None:
    for reason, successor in (("session-timeout", None), ("fenced", None)):
        protocol = active()
        assert isinstance(protocol.on_message(fence(reason, successor)), Fenced)
        assert protocol.phase is Phase.UNREGISTERED


def test_a_refusal_of_our_registration_lets_the_host_retry_and_others_are_ignored() -> None:
    protocol = ReaderProtocol(SOURCE, 0, location="driver", reassign_on_recovery=False)
    registration = protocol.begin_registration(exclusive=True)
    assert registration.exclusive
    other = RegistrationRefused(incarnation="someone-else", reason="held")
    assert isinstance(protocol.on_message(to_reader(other, None)), Ignored)
    ours = RegistrationRefused(
        incarnation=registration.incarnation, reason="held", holder_incarnation="h", holder_location="host-h"
    )
    outcome = protocol.on_message(to_reader(ours, None))
    assert isinstance(outcome, Refused) and outcome.holder_location == "host-h"
    assert protocol.phase is Phase.UNREGISTERED
    assert protocol.begin_registration(exclusive=True).incarnation != registration.incarnation
