"""Every integer and port setting is checked by one rule with one wording (api/options.py):
the coordinator's, the reader's and the Spark source's settings say the same things."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluicegate.api.errors import ConfigError
from sluicegate.api.options import checked_int, checked_port
from sluicegate.coordinator.config import CoordinatorConfig
from sluicegate.coordinator.settings import CoordinatorSettings, SourceSettings
from sluicegate.kafka.replication_options import cli_replication
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


_ONE_SOURCE = '[[source]]\nsource = "x1"\nconnector = "sequence"\nmax_parallelism = 2\n'


def test_the_replication_of_control_topics_from_a_file_the_environment_and_the_flags(tmp_path: Path) -> None:
    config = tmp_path / "sources.toml"
    config.write_text("replication_factor = 3\nmin_insync_replicas = 2\n" + _ONE_SOURCE)
    policy = CoordinatorSettings.from_toml(config, "127.0.0.1:9092").replication
    assert (policy.factor, policy.min_insync, policy.allow_unreplicated) == (3, 2, False)
    assert CoordinatorSettings.from_toml(config, "b:1", replication=None).replication.factor == 3
    flags = cli_replication(None, 1, True, policy)  # a flag overrides what the file said, the rest stays
    assert (flags.factor, flags.min_insync, flags.allow_unreplicated) == (3, 1, True)

    env = {
        "KAFKA_BOOTSTRAP_SERVERS": "b:1",
        "SLUICEGATE_SOURCE": "x1",
        "SLUICEGATE_CONNECTOR": "sequence",
        "SLUICEGATE_MAX_PARALLELISM": "2",
        "SLUICEGATE_REPLICATION_FACTOR": "1",
        "SLUICEGATE_ALLOW_UNREPLICATED_TOPICS": "yes",
    }
    policy = CoordinatorSettings.from_env(env).replication
    assert (policy.factor, policy.min_insync, policy.allow_unreplicated) == (1, None, True)
    assert CoordinatorSettings.from_env({**env, "SLUICEGATE_REPLICATION_FACTOR": ""}).replication.factor is None


def test_bad_replication_settings_fail_at_start_naming_them_as_written(tmp_path: Path) -> None:
    config = tmp_path / "sources.toml"
    config.write_text("replication_factor = 2\nmin_insync_replicas = 3\n" + _ONE_SOURCE)
    with pytest.raises(ConfigError, match=r"min_insync_replicas.*above the replication factor 2"):
        CoordinatorSettings.from_toml(config, "b:1")
    config.write_text("replication_factr = 3\n" + _ONE_SOURCE)
    with pytest.raises(ConfigError, match=r"'replication_factr'.*did you mean 'replication_factor'"):
        CoordinatorSettings.from_toml(config, "b:1")
    config.write_text('allow_unreplicated_topics = "maybe"\n' + _ONE_SOURCE)
    with pytest.raises(ConfigError, match=r"allow_unreplicated_topics.*true or false"):
        CoordinatorSettings.from_toml(config, "b:1")
    with pytest.raises(ConfigError, match=r"SLUICEGATE_REPLICATION_FACTOR.*integer"):
        CoordinatorSettings.from_env(
            {"KAFKA_BOOTSTRAP_SERVERS": "b:1", "SLUICEGATE_REPLICATION_FACTOR": "three", "SLUICEGATE_SOURCE": "x"}
        )
    with pytest.raises(ConfigError, match=r"--replication-factor.*>= 1"):
        cli_replication(0, None, False)
