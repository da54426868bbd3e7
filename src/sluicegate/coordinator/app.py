"""The module `faust -A sluicegate.coordinator.app worker` loads: the coordinator app
configured from SLUICEGATE_* variables (see CoordinatorSettings.from_env). The
topics must exist: `sluicegate topics apply`, or one `sluicegate coordinator` run."""

from __future__ import annotations

from sluicegate.coordinator.faust_app import build_app
from sluicegate.coordinator.settings import CoordinatorSettings

app = build_app(CoordinatorSettings.from_env())
