"""Spark's file source options read with Spark's meaning (issue 19 item 5): a file stream
query from Spark's guide, with its format moved to ``option("format", ...)`` and
``format("sluicegate")``, means the same; what cannot mean the same is refused by name."""

from __future__ import annotations

from typing import Any

import pytest

from sluicegate.api.errors import ConfigError
from sluicegate.spark.file_options import schema_ddl
from sluicegate.spark.options import SparkSourceOptions
from sluicegate_connectors.files import FileOptions
from sluicegate_connectors.files.schema import parse_ddl

PATH = "/data/landing"
DDL = "`id` bigint, `name` string"


def config(schema: str | None = DDL, **options: str) -> SparkSourceOptions:
    return SparkSourceOptions.from_options(
        {"kafka.bootstrap.servers": "127.0.0.1:9092", "path": PATH, **options}, schema_ddl=schema
    )


def refused(**options: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        config(**options)
    return info.value


def test_load_path_reads_the_files_connector_with_sparks_defaults() -> None:
    c = config()
    assert c.connector == "files"
    assert c.options == {
        "path": PATH,
        "format": "parquet",  # spark.sql.sources.default
        "schema": DDL,
        "order": "modified",  # oldest first, as Spark's file source
        "glob": "*",  # the files directly under path (recursiveFileLookup is false)
        "discovery_interval_ms": "1000",  # a stream reads the files that come, as Spark's does
    }
    assert c.source.startswith("files-") and c.source == config().source, "the derived part of its own name"
    assert not c.source_named, "a query that names no source reads one of its own"
    assert c.max_splits_per_trigger is None
    options = FileOptions.parse(c.options)
    assert options.schema_ddl == DDL and options.order == "modified"


@pytest.mark.parametrize(
    ("spark", "ours"),
    [
        ({"format": "json"}, {"format": "jsonl"}),
        ({"format": "CSV"}, {"format": "csv", "csv_header": "false"}),
        (
            {"format": "csv", "header": "true", "sep": ";", "nullValue": "NA", "quote": "'"},
            {"format": "csv", "csv_header": "true", "csv_delimiter": ";", "csv_null_value": "NA", "csv_quote": "'"},
        ),
        ({"latestFirst": "true"}, {"order": "latest_first"}),
        ({"recursiveFileLookup": "true", "pathGlobFilter": "*.parquet"}, {"glob": "**/*.parquet"}),
        ({"pathGlobFilter": "part-*"}, {"glob": "part-*"}),
        ({"maxFileAge": "2h"}, {"max_file_age_ms": "7200000"}),
        ({"ignoreCorruptFiles": "true"}, {"on_bad_file": "skip"}),
        ({"cleanSource": "off", "fileNameOnly": "false", "mergeSchema": "false"}, {}),
    ],
)
def test_sparks_file_options_mean_what_they_mean_to_spark(spark: dict[str, str], ours: dict[str, str]) -> None:
    options = config(**spark).options
    assert {k: options[k] for k in ours} == ours
    FileOptions.parse(options)  # the connector reads them


def test_max_files_per_trigger_limits_the_splits_of_a_batch() -> None:
    assert config(maxFilesPerTrigger="20").max_splits_per_trigger == 20
    assert refused(maxFilesPerTrigger="0").setting == "maxFilesPerTrigger"


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"cleanSource": "archive", "sourceArchiveDir": "/old"}, "cleanSource"),
        ({"sourceArchiveDir": "/old"}, "sourceArchiveDir"),
        ({"fileNameOnly": "true"}, "fileNameOnly"),
        ({"maxBytesPerTrigger": "1g"}, "maxBytesPerTrigger"),
        ({"modifiedAfter": "2026-01-01T00:00:00"}, "modifiedAfter"),
        ({"mergeSchema": "true"}, "mergeSchema"),
        ({"format": "orc"}, "format"),
        ({"format": "csv", "multiLine": "true"}, "multiLine"),
        ({"pathGlobFilter": "a/*.csv"}, "pathGlobFilter"),
        ({"latestFirst": "yes"}, "latestFirst"),
        ({"option.path": "/elsewhere"}, "path"),
    ],
)
def test_what_cannot_mean_here_what_it_means_to_spark_is_refused_by_name(options: dict[str, str], named: str) -> None:
    assert refused(**options).setting == named


def test_sparks_file_options_need_the_path_named_sparks_way() -> None:
    with pytest.raises(ConfigError) as info:
        SparkSourceOptions.from_options({"connector": "files", "option.path": PATH, "maxFilesPerTrigger": "5"})
    assert info.value.setting == "maxFilesPerTrigger" and "load(path)" in info.value.problem
    with pytest.raises(ConfigError) as info:
        SparkSourceOptions.from_options({"subscribe": "orders", "path": PATH})
    assert info.value.setting == "path" and "kafka" in info.value.problem


def test_a_sparks_schema_becomes_the_connectors_ddl() -> None:
    from pyspark.sql.types import (
        DateType,
        DecimalType,
        DoubleType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    struct: Any = StructType(
        [
            StructField("id", LongType()),
            StructField("price", DecimalType(10, 2)),
            StructField("score", DoubleType()),
            StructField("name", StringType()),
            StructField("day", DateType()),
            StructField("ts", TimestampType()),
        ]
    )
    arrow = parse_ddl(schema_ddl(struct))
    assert [str(t) for t in arrow.types] == [
        "int64",
        "decimal128(10, 2)",
        "double",
        "string",
        "date32[day]",
        "timestamp[us, tz=UTC]",
    ]
    assert arrow.names == ["id", "price", "score", "name", "day", "ts"]
