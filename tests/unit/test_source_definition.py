"""One definition per source (protocol/definition.py): what counts as the definition, how
differences are named, and the core's part (committed with the state, registrations with
another definition refused for good, a redefinition recorded)."""

from __future__ import annotations

from core_harness import CoreHarness

from sluicegate.coordinator.source_runner import check_definition
from sluicegate.protocol import SOURCE_WIDE, ReaderRegistered, ReaderRegistration, RegistrationRefused
from sluicegate.protocol.definition import DefinitionMismatchError, SourceDefinition
from sluicegate.protocol.messages import SourceRedefined

SEQUENCE = SourceDefinition.of("sequence", {"splits": "8", "records_per_split": "10"})


def test_local_options_are_not_part_of_the_definition() -> None:
    with_secrets = SourceDefinition.of(
        "kafka",
        {
            "topics": "orders",
            "bootstrap_servers": "data-kafka:9092",
            "kafka.sasl.password": "secret",
            "kafka.security.protocol": "SASL_SSL",
        },
    )
    plain = SourceDefinition.of("kafka", {"topics": "orders"})
    assert with_secrets == plain
    assert "secret" not in str(with_secrets.to_json())
    assert SourceDefinition.of("sequence", {"splits": "8", "rate": "4000"}) == SourceDefinition.of(
        "sequence", {"splits": "8"}
    )
    # assignment decides who reads a split, not what is read: readers need not repeat it
    assert SourceDefinition.of("sequence", {"splits": "8", "assigner": "sticky", "assignment_grace_ms": "1"}) == (
        SourceDefinition.of("sequence", {"splits": "8"})
    )
    assert "storage.secret" not in SourceDefinition.of("files", {"path": "/x", "storage.secret": "s"}).options


def test_a_default_given_or_left_out_is_the_same_definition() -> None:
    assert SourceDefinition.of("kafka", {"topics": "orders"}) == SourceDefinition.of(
        "kafka", {"topics": "orders", "starting_offsets": "earliest"}
    )
    assert SourceDefinition.of("kafka", {"topics": "orders"}) != SourceDefinition.of(
        "kafka", {"topics": "orders", "starting_offsets": "latest"}
    )


def test_differences_name_each_option_and_the_connector() -> None:
    committed = SourceDefinition.of("kafka", {"topics": "orders"})
    other_topics = SourceDefinition.of("kafka", {"topics": "orders-copy-1"})
    assert committed.differences(other_topics) == ["option topics: orders (source) vs orders-copy-1 (given)"]
    other_connector = SourceDefinition.of("sequence", {"splits": "8"})
    lines = committed.differences(other_connector)
    assert lines[0] == "connector: kafka (source) vs sequence (given)"
    assert "option splits: (not set) (source) vs 8 (given)" in lines
    assert committed.fingerprint != other_topics.fingerprint
    assert committed.fingerprint == SourceDefinition.from_json(committed.to_json()).fingerprint


def test_the_host_check_refuses_another_definition_and_names_the_way_out() -> None:
    parts = {"definition": SourceDefinition.of("kafka", {"topics": "orders"}).to_json()}
    check_definition("dual", parts, SourceDefinition.of("kafka", {"topics": "orders"}), "this coordinator")
    check_definition("dual", None, SourceDefinition.of("kafka", {"topics": "x"}), "this coordinator")  # new source
    try:
        check_definition("dual", parts, SourceDefinition.of("kafka", {"topics": "orders-copy-1"}), "this coordinator")
    except DefinitionMismatchError as exc:
        assert "option topics: orders (source) vs orders-copy-1 (given)" in exc.problem
        assert "sluicegate source redefine --source dual" in exc.problem
    else:
        raise AssertionError("another definition was accepted")


def test_the_first_coordinator_commits_the_definition_and_a_successor_keeps_it() -> None:
    h = CoreHarness(definition=SEQUENCE)
    assert h.persisted["definition"] == SEQUENCE.to_json()
    h.restart_coordinator()
    assert h.core.definition == SEQUENCE
    assert "definition" not in h.core.state_parts(only_changed=True)  # not written again


def test_a_state_from_before_definitions_gets_the_successors_definition() -> None:
    h = CoreHarness(definition=SEQUENCE)
    h.persisted.pop("definition")
    h.restart_coordinator()
    assert h.persisted["definition"] == SEQUENCE.to_json()


def _register(h: CoreHarness, subtask: int, definition: SourceDefinition | None) -> None:
    registration = ReaderRegistration(
        incarnation=f"inc-{subtask}",
        location=f"host-{subtask}",
        reported_splits=[],
        restored_checkpoint_id=None,
        definition=definition.to_json() if definition is not None else None,
    )
    h.feed(h.envelope(subtask, registration, None))


def test_a_reader_with_another_definition_is_refused_for_good_naming_the_option() -> None:
    h = CoreHarness(definition=SEQUENCE)
    _register(h, 0, SourceDefinition.of("sequence", {"splits": "9", "records_per_split": "10"}))
    [refusal] = [env.body for env in h.last.messages]
    assert isinstance(refusal, RegistrationRefused)
    assert refusal.cause == "definition"
    assert "option splits: 8 (source) vs 9 (given)" in refusal.reason
    assert "subtask 0 at host-0" in refusal.reason
    assert not h.core.slots[0].live
    assert h.core.metrics.counters["registrations_refused_definition"] == 1


def test_a_reader_with_the_same_definition_or_none_registers() -> None:
    h = CoreHarness(definition=SEQUENCE)
    _register(h, 0, SourceDefinition.of("sequence", {"splits": "8", "records_per_split": "10", "rate": "5"}))
    _register(h, 1, None)  # a v4 reader: nothing to compare
    assert h.core.slots[0].live and h.core.slots[1].live
    assert any(isinstance(env.body, ReaderRegistered) for env in h.sent)


def test_a_redefinition_from_the_control_log_is_recorded() -> None:
    h = CoreHarness(definition=SEQUENCE)
    new = SourceDefinition.of("sequence", {"splits": "8", "records_per_split": "20"})
    h.feed(h.envelope(SOURCE_WIDE, SourceRedefined(definition=new.to_json(), previous=SEQUENCE.to_json()), None))
    assert h.core.definition == new
    assert h.persisted["definition"] == new.to_json()
    _register(h, 0, SEQUENCE)  # the old definition is now the other one
    assert isinstance(h.last.messages[0].body, RegistrationRefused)


def test_a_definition_recorded_with_options_that_are_local_now_is_the_same_source() -> None:
    """Sources recorded before fail_on_data_loss and partition_discovery_interval_ms became a
    query's own (a Spark query restarts with another failOnDataLoss, as in Spark)."""
    recorded = {
        "connector": "kafka",
        "options": {"topics": "orders", "fail_on_data_loss": "true", "partition_discovery_interval_ms": "30000"},
    }
    given = SourceDefinition.of("kafka", {"topics": "orders", "fail_on_data_loss": "false"})
    assert SourceDefinition.from_json(recorded).fingerprint == given.fingerprint
    assert "fail_on_data_loss" not in given.options
    other = SourceDefinition.of("kafka", {"topics": "payments"})
    assert SourceDefinition.from_json(recorded).fingerprint != other.fingerprint
