"""The connector test kit on ``sequence``: its splits are released over time
(``release_interval_ms``), so every scenario also sees splits discovered while running."""

from __future__ import annotations

from collections.abc import Hashable

from sluicegate.testing import ConnectorTestKit, KitEnv

SPLITS = 6
RECORDS_PER_SPLIT = 30


class TestSequenceKit(ConnectorTestKit):
    connector = "sequence"
    random_schedules = 20

    def source_options(self, env: KitEnv) -> dict[str, str]:
        return {
            "splits": str(SPLITS),
            "records_per_split": str(RECORDS_PER_SPLIT),
            "release_interval_ms": "500",
            "splits_per_release": "2",
            "assignment_grace_ms": "1000",
        }

    def write_data(self, env: KitEnv, batch: int) -> list[Hashable]:
        # The data is the options': split k holds k*R .. (k+1)*R-1. Splits released after
        # the start are the "new data" of batch >= 1, already counted in batch 0.
        return list(range(SPLITS * RECORDS_PER_SPLIT)) if batch == 0 else []

    def alignment_options(self, env: KitEnv) -> dict[str, str]:
        # split k's event times start k seconds later: the early splits run ahead
        return {"split_time_offset_ms": "1000", "event_interval_ms": "100", "release_interval_ms": "0"}

    def real_run_options(self, env: KitEnv) -> dict[str, str]:
        return {"rate": "40"}  # records per second per reader: the run lasts a few seconds
