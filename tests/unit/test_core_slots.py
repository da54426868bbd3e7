"""Protocol v3 in the core: slots handed out (SlotRequest), exclusive registrations,
the successor named in a fence, and a source that grows (MaxParallelismRaised)."""

from __future__ import annotations

from core_harness import CoreHarness, body, sequence_source

from sluicegate.protocol import (
    SOURCE_WIDE,
    MaxParallelismRaised,
    ReaderRegistered,
    ReaderRegistration,
    RegistrationRefused,
    SlotGranted,
    SlotRequest,
    SplitsReleased,
)


def request_slot(h: CoreHarness, incarnation: str, name: str | None = None) -> None:
    request = SlotRequest(incarnation=incarnation, location=f"{incarnation}-host", name=name)
    h.feed(h.envelope(SOURCE_WIDE, request, None))


def granted(h: CoreHarness, incarnation: str) -> int | None:
    """The subtask whose partition got the SlotGranted of ``incarnation`` in the last step."""
    for env in h.last.messages:
        if isinstance(env.body, SlotGranted) and env.body.incarnation == incarnation:
            return env.subtask
    return None


def refused(h: CoreHarness) -> list[RegistrationRefused]:
    return [env.body for env in h.last.messages if isinstance(env.body, RegistrationRefused)]


# -- slots handed out ------------------------------------------------------------------


def test_slot_requests_get_distinct_free_slots_then_a_refusal() -> None:
    h = CoreHarness(max_parallelism=3)
    h.register(1)
    got = []
    for inc in ("a", "b"):
        request_slot(h, inc)
        got.append(granted(h, inc))
    assert sorted(g for g in got if g is not None) == [
        0,
        2,
    ]  # subtask 1 is live; a granted slot is held for its requester
    request_slot(h, "c")
    assert granted(h, "c") is None
    [refusal] = refused(h)
    assert refusal.incarnation == "c" and "all 3 slots" in refusal.reason
    assert h.last.messages[0].subtask == 0  # refusals of slot requests go to partition 0
    assert h.counters["slot_requests_refused"] == 1


def test_a_slot_request_sent_again_gets_the_same_slot() -> None:
    h = CoreHarness(max_parallelism=4)
    request_slot(h, "a")
    first = granted(h, "a")
    request_slot(h, "a")
    assert granted(h, "a") == first


def test_an_unused_grant_expires_after_a_session_timeout() -> None:
    h = CoreHarness(max_parallelism=1, session_timeout_ms=5_000)
    request_slot(h, "a")
    assert granted(h, "a") == 0
    request_slot(h, "b")
    assert granted(h, "b") is None
    h.advance(5_001)
    request_slot(h, "b")
    assert granted(h, "b") == 0


def test_a_named_member_gets_its_slot_back_even_while_its_old_attempt_is_live() -> None:
    h = CoreHarness(max_parallelism=4)
    request_slot(h, "x1", name="reader-x")
    slot = granted(h, "x1")
    assert slot is not None
    h.register(slot)
    request_slot(h, "other")
    assert granted(h, "other") != slot
    # the process of reader-x was killed and restarted: same name, the same slot at once
    request_slot(h, "x2", name="reader-x")
    assert granted(h, "x2") == slot


def test_a_granted_slot_is_registered_on_like_any_other_and_state_survives_a_restart() -> None:
    h = CoreHarness(sequence_source(splits=4), max_parallelism=2)
    request_slot(h, "a", name="pod-a")
    slot = granted(h, "a")
    assert slot is not None
    reader = h.register(slot)
    assert reader.attempt == 1 and reader.splits
    h.restart_coordinator()
    assert h.core.slots[slot].name == "pod-a"
    request_slot(h, "a2", name="pod-a")
    assert granted(h, "a2") == slot


def test_a_departed_slot_is_free_again_but_a_failed_one_waits_for_its_reader() -> None:
    h = CoreHarness(max_parallelism=1, session_timeout_ms=1_000, reader_departure_timeout_ms=5_000)
    h.register(0)
    h.advance(1_001)  # session timeout: the attempt failed; its reader may come back
    request_slot(h, "a")
    assert granted(h, "a") is None
    h.advance(5_001)
    request_slot(h, "b")
    assert granted(h, "b") == 0


# -- duplicates --------------------------------------------------------------------------


def test_a_fence_by_registration_names_the_successor_but_a_timeout_does_not() -> None:
    h = CoreHarness(max_parallelism=2, session_timeout_ms=1_000)
    h.register(0)
    new = h.register(0, location="host-b")
    fence = body(h.last.messages[0], SplitsReleased)
    assert (fence.reason, fence.successor_incarnation, fence.successor_location) == (
        "fenced",
        new.incarnation,
        "host-b",
    )
    h.advance(1_001)
    timeout = body(h.to(0, SplitsReleased)[-1], SplitsReleased)
    assert timeout.reason == "session-timeout" and timeout.successor_incarnation is None


def test_an_exclusive_registration_is_refused_while_another_incarnation_is_live() -> None:
    h = CoreHarness(sequence_source(splits=4), max_parallelism=1, session_timeout_ms=1_000)
    holder = h.register(0, location="query-1")
    owned = set(holder.splits)
    registration = ReaderRegistration(
        incarnation="query-2", location="query-2", reported_splits=[], restored_checkpoint_id=None, exclusive=True
    )
    h.feed(h.envelope(0, registration, None))
    [refusal] = refused(h)
    assert (refusal.incarnation, refusal.holder_incarnation, refusal.holder_location) == (
        "query-2",
        holder.incarnation,
        "query-1",
    )
    assert holder.live and set(holder.splits) == owned == h.owned(0)  # the first is not disturbed
    assert h.counters["registrations_refused"] == 1
    # once the holder is gone (session timeout), the same exclusive registration is accepted
    h.advance(1_001)
    h.feed(h.envelope(0, registration, None))
    assert any(isinstance(e.body, ReaderRegistered) and e.body.incarnation == "query-2" for e in h.last.messages)


# -- growing a source ------------------------------------------------------------------------


def test_max_parallelism_raised_serves_new_slots_and_survives_a_restart() -> None:
    h = CoreHarness(sequence_source(splits=8), max_parallelism=2)
    h.register(0)
    h.register(1)
    late = h.register(3)
    assert h.last.rejection is not None and not late.live  # subtask 3 does not exist yet
    h.feed(h.envelope(SOURCE_WIDE, MaxParallelismRaised(max_parallelism=4), None))
    assert h.core.config.max_parallelism == 4 and len(h.core.slots) == 4
    reader = h.register(3)
    assert reader.live
    h.restart_coordinator()  # the state, not the configured 2, says 4
    assert h.core.config.max_parallelism == 4
    h.feed(h.envelope(SOURCE_WIDE, MaxParallelismRaised(max_parallelism=3), None))
    assert h.core.config.max_parallelism == 4  # it only grows


def test_only_slot_requests_and_growth_may_be_source_wide() -> None:
    h = CoreHarness(max_parallelism=2)
    registration = ReaderRegistration(incarnation="x", location="", reported_splits=[], restored_checkpoint_id=None)
    effects = h.feed(h.envelope(SOURCE_WIDE, registration, None))
    assert effects.rejection is not None and "must name a subtask" in effects.rejection


def test_an_exclusive_registration_restoring_the_live_attempts_checkpoint_takes_the_subtask_back() -> None:
    """A Spark query restarted before its previous run timed out (Spark destroys the source's
    Python process): its offsets name the attempt that run held, which only it can have."""
    h = CoreHarness(sequence_source(splits=4), max_parallelism=1, session_timeout_ms=60_000)
    holder = h.register(0, location="query-1")
    h.ack(0)
    assert holder.checkpoint is not None and holder.attempt is not None

    def registration(incarnation: str, attempt: int | None, checkpoint_id: int) -> ReaderRegistration:
        return ReaderRegistration(
            incarnation=incarnation,
            location=incarnation,
            reported_splits=[dict(s) for s in holder.checkpoint.splits] if holder.checkpoint else [],
            restored_checkpoint_id=checkpoint_id,
            exclusive=True,
            restored_attempt=attempt,
        )

    # another query, or the query from an older checkpoint than the last acknowledged: refused
    for other in (registration("query-2", holder.attempt + 1, 99), registration("query-1-old", holder.attempt, 0)):
        h.feed(h.envelope(0, other, None))
        assert [r.incarnation for r in refused(h)] == [other.incarnation]
        assert holder.live
    h.feed(h.envelope(0, registration("query-1-again", holder.attempt, holder.checkpoint.checkpoint_id), None))
    assert not refused(h)
    fence = body(h.last.messages[0], SplitsReleased)
    assert (fence.reason, fence.failed_attempt, fence.successor_incarnation) == (
        "fenced",
        holder.attempt,
        "query-1-again",
    )
    assert any(isinstance(e.body, ReaderRegistered) and e.body.incarnation == "query-1-again" for e in h.last.messages)
