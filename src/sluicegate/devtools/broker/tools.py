"""Kafka's own command-line tools (``kafka-configs.sh``, ``kafka-consumer-groups.sh``,
...) run from the project's jars, for tests that check what an operator's tools see.

The scripts of a Kafka tarball are ``java -cp 'libs/*' <main class>``; so is this. The
classes of ``kafka_2.13`` (ConfigCommand, ...) come with the broker's jars; those of
``kafka-tools`` (ConsumerGroupCommand, ...) are resolved on first use next to them.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from sluicegate.devtools.broker.local import (
    KAFKA_VERSION,
    QUICK_JIT_OPTION,
    Echo,
    artifacts_dir,
    ensure_kafka_artifacts,
    stderr_echo,
)
from sluicegate.devtools.broker.maven import resolve_jars

__all__ = ["CONFIG_COMMAND", "CONSUMER_GROUP_COMMAND", "run_kafka_tool"]

#: kafka-configs.sh
CONFIG_COMMAND = "kafka.admin.ConfigCommand"
#: kafka-consumer-groups.sh (in kafka-tools since Kafka 3.7)
CONSUMER_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
_IN_KAFKA_TOOLS = ("org.apache.kafka.tools.",)


def _tools_classpath(echo: Echo) -> str:
    libs = resolve_jars(
        artifacts_dir().with_name(f"kafka-tools-{KAFKA_VERSION}"),
        [("org.apache.kafka", "kafka-tools", KAFKA_VERSION)],
        project="kafka-tools-runtime",
        version=KAFKA_VERSION,
        label=f"the Apache Kafka {KAFKA_VERSION} tools",
        echo=echo,
    )
    return f"{libs}/*"


def run_kafka_tool(
    main_class: str, args: Sequence[str], *, timeout_s: float = 120.0, echo: Echo = stderr_echo
) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's tools with ``args``; its exit code, stdout and stderr."""
    classpath = [f"{ensure_kafka_artifacts(echo)}/*"]
    if main_class.startswith(_IN_KAFKA_TOOLS):
        classpath.insert(0, _tools_classpath(echo))
    command = ["java", QUICK_JIT_OPTION, "-cp", ":".join(classpath), main_class, *args]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=timeout_s, check=False, stdin=subprocess.DEVNULL
    )
