"""Every integer and port setting is checked by one rule with one wording (api/options.py):
the coordinator's, the reader's and the Spark source's settings say the same things."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluicegate.api.errors import ConfigError
from sluicegate.api.options import checked_int, checked_port
from sluicegate.coordinator.config import CoordinatorConfig
from sluicegate.coordinator.settings import CoordinatorSettings, SourceSettings
from sluicegate.reader.timing import CLI_NAMES, ReaderTiming
from sluicegate.spark.options import SparkSourceOptions


def _problem(call: object) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        call()  # type: ignore[operator]
    return info.value


def test_one_wording_for_bounds_types_and_ports() -> None:
    assert checked_int("n", 5, 1) == 5 and checked_port("p", 0) == 0
    assert _problem(lambda: checked_int("n", 0, 1)).problem == "must be >= 1, got 0"
    assert _problem(lambda: checked_int("n", 9, 1, 8)).problem == "must be between 1 and 8, got 9"
    assert _problem(lambda: checked_int("n", True, 1)).problem == "must be an integer, got True"
    assert (
        _problem(lambda: checked_port("p", 70_000)).problem == "must be a TCP port (1..65535) or 0 for off, got 70000"
    )


def test_the_hosts_use_it_naming_the_setting_as_the_user_wrote_it() -> None:
    coordinator = _problem(lambda: CoordinatorConfig(source="s", max_parallelism=0))
    reader = _problem(lambda: ReaderTiming(heartbeat_interval_ms=5).check(CLI_NAMES))
    spark = _problem(lambda: SparkSourceOptions.from_options({"source": "s", "parallelism": "0"}))
    port = _problem(
        lambda: SparkSourceOptions.from_options({"source": "s", "parallelism": "1", "metricsPort": "70000"})
    )
    assert (coordinator.setting, coordinator.problem) == ("max_parallelism", "must be between 1 and 100000, got 0")
    assert (reader.setting, reader.problem) == ("--heartbeat-interval-ms", "must be >= 10, got 5")
    assert (spark.setting, spark.problem) == ("parallelism", "must be >= 1, got 0")
    assert port.setting == "metricsPort" and "TCP port" in port.problem


def test_a_misspelled_source_setting_fails_naming_it_and_the_closest_known_one(tmp_path: Path) -> None:
    config = tmp_path / "sources.toml"
    config.write_text(
        'webport = 1\n[[source]]\nsource = "x1"\nconnector = "sequence"\nmax_parallelism = 2\nsesion_timeout_ms = 5\n'
    )
    with pytest.raises(ConfigError, match=r"source\[0\]\.sesion_timeout_ms.*did you mean 'session_timeout_ms'"):
        CoordinatorSettings.from_toml(config, "127.0.0.1:9092")
    config.write_text('webport = 1\n[[source]]\nsource = "x1"\nconnector = "sequence"\nmax_parallelism = 2\n')
    with pytest.raises(ConfigError, match=r"'webport'.*did you mean 'web_port'"):
        CoordinatorSettings.from_toml(config, "127.0.0.1:9092")
    with pytest.raises(ConfigError, match=r"check_connector"):  # not a setting of a file
        SourceSettings.from_mapping(
            {"source": "x1", "connector": "sequence", "max_parallelism": 2, "check_connector": False}, "source[0]"
        )
