"""A reader as a Python program: ``sluicegate.run_reader(...)``, the CLI's
``sluicegate reader`` with the user's function passed as an object.

    import sluicegate

    def enrich(record: sluicegate.Message) -> sluicegate.Message | None:
        order = record.json()
        if order["amount"] <= 0:
            return None
        return record.replace(value={**order, "vat": round(order["amount"] * 0.2, 2)})

    sluicegate.run_reader(source="orders", connector="kafka", process=enrich, output="kafka:orders-out",
                          options={"topics": "orders", "bootstrap_servers": "localhost:9092"})
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from sluicegate.api.errors import ConfigError
from sluicegate.api.options import unknown_option
from sluicegate.reader.commands import embedded_coordinator, run_with_coordinator, setup_logging
from sluicegate.reader.host import ReaderHost, ReaderSettings
from sluicegate.reader.output import OutputSpec

SETTINGS = frozenset(f.name for f in dataclasses.fields(ReaderSettings))
"""What ``**settings`` may hold."""
KNOWN = SETTINGS | {"process", "output_format", "log_level", "coordinator", "max_parallelism"}
"""Every keyword of ``run_reader``: what an unknown one is compared with."""


def run_reader(
    *,
    source: str,
    connector: str,
    output: str,
    process: Callable[..., Any] | None = None,
    options: Mapping[str, str] | None = None,
    subtask: int | None = None,
    bootstrap_servers: str | None = None,
    output_format: str | None = None,
    log_level: str = "INFO",
    coordinator: str | None = None,
    max_parallelism: int | None = None,
    **settings: Any,
) -> int:
    """Run one reader of ``source`` until its bounded input ends or SIGTERM/SIGINT (a
    graceful stop); returns the exit code of ``sluicegate reader`` (0 done, 1 failed,
    2 bad settings, 3 another process holds the subtask).

    ``subtask`` None takes a free one from the coordinator (``--subtask auto``);
    ``coordinator`` and ``max_parallelism`` are ``--coordinator`` (default: auto, this process
    coordinates the source when nobody does) and ``--max-parallelism``;
    ``bootstrap_servers`` defaults to ``$KAFKA_BOOTSTRAP_SERVERS``; any other keyword is
    a ``ReaderSettings`` field (``checkpoint_interval_ms``, ``on_process_error``, ...).
    Raises ConfigError for a setting that is wrong or unknown (naming the closest known one).
    """
    unknown = sorted(set(settings) - SETTINGS)
    if unknown:
        raise unknown_option(unknown[0], KNOWN, "sluicegate.run_reader")
    try:
        reader_settings = ReaderSettings(
            source=source,
            subtask=subtask,
            connector=connector,
            output=OutputSpec.parse(output, output_format),
            bootstrap_servers=bootstrap_servers or os.environ.get("KAFKA_BOOTSTRAP_SERVERS", ""),
            options=dict(options or {}),
            **settings,
        )
        host = ReaderHost(reader_settings, process=process, words=keywords_for_flags)
        embedded = embedded_coordinator(reader_settings, coordinator, max_parallelism)
    except ConfigError as exc:
        raise in_keywords(exc) from None
    setup_logging(log_level)
    return run_with_coordinator(host, embedded)


_FLAG = re.compile(r"(?<![\w-])--([a-z][a-z0-9-]*)")


def in_keywords(error: ConfigError) -> ConfigError:
    """``error`` as ``run_reader``'s caller names its settings: the reader's checks name the
    command line's flags (``--bootstrap-servers``), the caller gave keywords
    (``bootstrap_servers=``)."""

    return ConfigError(keywords_for_flags(error.setting), keywords_for_flags(error.problem))


def keywords_for_flags(text: str) -> str:
    """``text`` with each command-line flag (``--max-parallelism``) as ``run_reader``'s
    keyword (``max_parallelism``)."""
    return _FLAG.sub(lambda m: m.group(1).replace("-", "_"), text)
