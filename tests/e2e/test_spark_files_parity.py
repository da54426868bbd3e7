"""The same file query through Spark's own file source and through sluicegate, only the
format name changed (issue 19 items 3, 5 and 6): the directory's format moves to
``option("format", ...)``, everything else (``.schema(...)``, ``load(path)``, Spark's
file and CSV options) is written as for Spark, and nothing else is started: the query
coordinates its source itself.

Three directories of the same rows: Parquet (five files, and a file in a subdirectory, a
``_SUCCESS`` marker and a hidden file that neither side reads), CSV without a header, with
``;`` and ``NA`` for null (Spark's default ``header=false``: the first row is data), and
JSON Lines. The Parquet directory is read as a stream (``Trigger.AvailableNow`` into a
memory sink, ``maxFilesPerTrigger=2``: no batch larger than two files, on both sides) and
by a recursive batch query (``spark.read``); the CSV and JSON ones by batch queries (the
same executor read as a stream's). Schema and rows must be the same. The default read path
of the stream (``readPath=auto``) is the JVM one where its jar is in the session (sluicegate's
planning, Spark's own Parquet reader): the stream is then read a third time with
``readPath=python``, so that both paths give Spark's rows.

Spark runs in a subprocess (this file as a script), as in test_spark_kafka_parity.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from jvm_read_path import require_jvm_read_path
from processes import run_script

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(420), pytest.mark.spark]

SCHEMA = "id BIGINT, name STRING, amount DOUBLE"
FILES = 5
ROWS = 200


def rows_of(file: int) -> list[dict[str, Any]]:
    first = file * ROWS
    return [
        {"id": i, "name": f"n{i}" if i % 7 else None, "amount": None if i % 11 == 0 else i / 4}
        for i in range(first, first + ROWS)
    ]


def write_directories(root: Path) -> dict[str, Path]:
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64())])
    parquet, csv, jsonl = root / "parquet", root / "csv", root / "json"
    for directory in (parquet, parquet / "sub", csv, jsonl):
        directory.mkdir(parents=True)
    for f in range(FILES):
        rows = rows_of(f)
        pq.write_table(pa.Table.from_pylist(rows, schema), parquet / f"part-{f}.parquet")
        lines = [f"{r['id']};{r['name'] or 'NA'};{'NA' if r['amount'] is None else r['amount']}" for r in rows]
        (csv / f"part-{f}.csv").write_text("\n".join(lines) + "\n")
        (jsonl / f"part-{f}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pq.write_table(pa.Table.from_pylist(rows_of(FILES), schema), parquet / "sub" / "deeper.parquet")
    (parquet / "_SUCCESS").write_bytes(b"")
    pq.write_table(pa.Table.from_pylist(rows_of(FILES + 1), schema), parquet / ".in-progress.parquet")
    return {"parquet": parquet, "csv": csv, "json": jsonl}


def test_the_same_file_query_gives_the_same_rows_through_sparks_source_and_sluicegate(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    dirs = write_directories(tmp_path / "data")
    cases = {
        "parquet_stream": {"mode": "stream", "format": "parquet", "path": str(dirs["parquet"]),
                           "options": {"maxFilesPerTrigger": "2"}},
        "csv_batch": {"mode": "batch", "format": "csv", "path": str(dirs["csv"]),
                      "options": {"sep": ";", "nullValue": "NA"}},
        "json_batch": {"mode": "batch", "format": "json", "path": str(dirs["json"]), "options": {}},
        "parquet_batch": {"mode": "batch", "format": "parquet", "path": str(dirs["parquet"]),
                          "options": {"recursiveFileLookup": "true"}},
    }  # fmt: skip
    out = tmp_path / "results.json"
    log = tmp_path / "spark.log"
    args = ["--cases", json.dumps(cases), "--out", str(out), "--work", str(tmp_path)]
    returncode = run_script(__file__, args, log, kafka_bootstrap, timeout_s=380)
    assert returncode == 0, log.read_text()[-6000:]
    results = json.loads(out.read_text())
    expected = sorted(json.dumps(r, separators=(",", ":")) for f in range(FILES) for r in rows_of(f))
    for case, sides in results.items():
        spark_side = sides["spark"]
        for side, ours in sides.items():  # sluicegate, and for the stream sluicegate-python
            assert ours["schema"] == spark_side["schema"], (case, side)
            assert sorted(ours["rows"]) == sorted(spark_side["rows"]), (case, side)
        if case != "parquet_batch":
            assert len(spark_side["rows"]) == FILES * ROWS, f"{case}: five files, the first rows too (no header)"
    assert len(results["parquet_batch"]["spark"]["rows"]) == (FILES + 1) * ROWS, "the subdirectory's file too"
    assert sorted(_canonical(r) for r in results["json_batch"]["sluicegate"]["rows"]) == expected
    stream = results["parquet_stream"]
    assert stream["spark"]["batches"] == [2 * ROWS, 2 * ROWS, ROWS], stream["spark"]["batches"]
    # ours as many files a batch at most (a batch may hold fewer while the files are handed out)
    for side in (s for s in stream if s != "spark"):
        assert len(stream[side]["batches"]) >= 3 and max(stream[side]["batches"]) <= 2 * ROWS, (side, stream[side])
    spark_log = log.read_text()
    assert "this process coordinates it now" in spark_log, "the query coordinated its source itself"
    require_jvm_read_path()
    assert "readPath=auto chose jvm" in spark_log, "the default read path of a Parquet stream with the jar"
    assert PYTHON_SIDE in stream, "the stream was read on readPath=python too (its rows compared above)"


def _canonical(row: str) -> str:
    data = json.loads(row)
    return json.dumps({k: data.get(k) for k in ("id", "name", "amount")}, separators=(",", ":"))


# -- the Spark side (this file run as a script) -----------------------------------------

PYTHON_SIDE = "sluicegate-python"
"""A stream is read a third time with ``readPath=python`` when the JVM path's jar is built
(the default side then reads on the JVM path)."""


def run_cases(cases: dict[str, dict[str, Any]], work: Path) -> dict[str, Any]:
    from sluicegate.spark.datasource import register
    from sluicegate.spark.file_options import derived_source_name
    from sluicegate.spark.job import spark_session
    from sluicegate.spark.jvm_classpath import built

    spark = spark_session("sluicegate-files-parity", quiet=True)
    register(spark)
    results: dict[str, Any] = {}
    for case, spec in cases.items():
        results[case] = {}
        stream = spec["mode"] == "stream"
        for side in ("spark", "sluicegate", *((PYTHON_SIDE,) if stream and built() else ())):
            reader = (spark.readStream if stream else spark.read).schema(SCHEMA)
            if side == "spark":
                reader = reader.format(spec["format"])
            else:
                reader = reader.format("sluicegate").option("format", spec["format"])
            if side == PYTHON_SIDE:  # a source of its own: it plans splits within files
                reader = reader.option("readPath", "python").option("source", derived_source_name(spec["path"]) + "-py")
            for key, value in spec["options"].items():
                reader = reader.option(key, value)
            frame = reader.load(spec["path"])
            if not stream:
                rows = frame.selectExpr("to_json(struct(*)) AS row").collect()
                results[case][side] = {"schema": frame.schema.json(), "rows": [r.row for r in rows]}
                continue
            name = f"{case}_{side}".replace("-", "_")
            query = (
                frame.writeStream.format("memory")
                .queryName(name)
                .option("checkpointLocation", str(work / "checkpoints" / name))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination(240)
            rows = spark.sql(f"SELECT to_json(struct(*)) AS row FROM {name}").collect()
            batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
            results[case][side] = {"schema": frame.schema.json(), "rows": [r.row for r in rows], "batches": batches}
            print(f"{case} {side}: {len(rows)} rows in batches {batches}", flush=True)
    spark.stop()
    return results


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    results = run_cases(json.loads(args.cases), Path(args.work))
    Path(args.out).write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
