"""The module `faust -A sluicegate.coordinator.app worker` loads: the coordinator app
configured from SLUICEGATE_* variables (see CoordinatorSettings.from_env). Like
`sluicegate coordinator`, it creates the missing control topics and the app's
leadership topic first; a bad setting stops it with a message naming the setting."""

from __future__ import annotations

import asyncio
import sys

from sluicegate.api.errors import ConfigError, SourceError
from sluicegate.coordinator.faust_app import build_app, check_sources, prepare_topics
from sluicegate.coordinator.settings import CoordinatorSettings
from sluicegate.kafka.topics import TopicApplyError
from sluicegate.protocol.definition import DefinitionMismatchError


def _prepared_settings() -> CoordinatorSettings:
    try:
        settings = CoordinatorSettings.from_env()
    except ConfigError as exc:
        print(f"sluicegate coordinator app: {exc}", file=sys.stderr)
        sys.exit(2)
    # A loop of its own: Faust's worker sets up the process's event loop afterwards.
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(prepare_topics(settings))
        loop.run_until_complete(check_sources(settings))
    except TopicApplyError as exc:
        sys.exit(f"sluicegate coordinator app: {exc}")
    except DefinitionMismatchError as exc:
        print(f"sluicegate coordinator app: {exc.problem}", file=sys.stderr)
        sys.exit(2)
    except SourceError as exc:
        print(f"sluicegate coordinator app: {exc}", file=sys.stderr)
        sys.exit(2)
    finally:
        loop.close()
    return settings


app = build_app(_prepared_settings())
