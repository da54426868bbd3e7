"""The connector test kit: what a connector author needs to test a sluicegate connector.

- ``ConnectorTestKit`` (kit.py): subclass it, say how to build the source and write test
  data, and pytest runs the kit's scenarios (failures, restarts, FLIP-537 recovery,
  discovery, the bounded end, alignment) with exactly-once checks;
- ``MemoryRun`` (memory_run.py): a connector end to end in one process, no Kafka;
- ``CoreHarness`` (core_harness.py): the coordinator core alone, with simulated readers;
- ``kafka_fixture``: the ``kafka_bootstrap`` pytest fixture (a real broker for the
  session), for ``pytest_plugins = ["sluicegate.testing.kafka_fixture"]``;
- ``processes``: reader and coordinator processes for real runs.

docs/connectors.md ("Testing a connector") shows how to use it.
"""

from sluicegate.testing.checks import assert_exactly_once, exactly_once_problems
from sluicegate.testing.kit import ConnectorTestKit, KitEnv
from sluicegate.testing.memory_run import MemoryRun, RunConfig

__all__ = ["ConnectorTestKit", "KitEnv", "MemoryRun", "RunConfig", "assert_exactly_once", "exactly_once_problems"]
