"""What a user installs: the wheel built as releases are (``python -m
sluicegate.devtools.wheel``), installed into a fresh venv outside the checkout, run from
there with nothing of the checkout on any path.

- a Kafka topic into Spark (``format("sluicegate")``, the default read path) and a Parquet
  directory on ``readPath=jvm``, each read whole, in one Spark process of the venv
  (tests/support/installed_wheel_job.py); the jar is the wheel's, its Kafka jars fetched
  from Maven Central into an empty cache;
  (installed with ``[spark]``);
- a standalone reader (``sluicegate reader``, coordinating its source itself) copying a
  topic to Parquet files, exactly once, from a base install (no extra: no pyspark, no
  matplotlib), where Spark and the audit's timeline fail at once naming the pip command.

Both must have read with the native Kafka reader inside the wheel (its module's path is
the venv's; the reader's log says so) and the Spark one with the wheel's jar. Both venvs
are made by the image's install script (docker/install-image.sh), and ``sluicegate
doctor`` run from the ``[spark]`` one reports the venv's native reader and jar.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kafka_data import DataWriter, create_topic
from wheel_install import Installed

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.timeout(900)]

CHECKOUT = Path(__file__).resolve().parents[2]
SUPPORT = Path(__file__).resolve().parents[1] / "support"
PARTITIONS = 3
PER_PARTITION = 2_000
FILES, FILE_ROWS = 4, 1_000


def filled_topic(bootstrap: str, topic: str) -> DataWriter:
    """``topic`` created with PER_PARTITION records in each of its PARTITIONS; its writer
    knows what they are."""
    create_topic(bootstrap, topic, PARTITIONS)
    writer = DataWriter(bootstrap, topic, PARTITIONS)
    writer.produce(PER_PARTITION)
    writer.flush()
    return writer


def test_the_installed_wheel_reads_kafka_and_files_into_spark_with_its_native_reader_and_jar(
    with_spark: Installed, kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    topic = f"{unique_source}-in"
    filled_topic(kafka_bootstrap, topic)
    files = tmp_path / "files"
    files.mkdir()
    for k in range(FILES):
        pq.write_table(pa.table({"id": list(range(k * FILE_ROWS, (k + 1) * FILE_ROWS))}), files / f"{k}.parquet")
    job = tmp_path / "job.py"
    shutil.copy(SUPPORT / "installed_wheel_job.py", job)  # run from outside the checkout
    args = ["--bootstrap", kafka_bootstrap, "--topic", topic, "--files", str(files), "--workdir", str(tmp_path)]
    installed = with_spark
    code, stdout, output = installed.run([str(installed.python), str(job), *args], tmp_path, kafka_bootstrap, 600)
    assert code == 0, output[-6000:]
    result = json.loads(next(line for line in stdout.splitlines() if line.startswith("RESULT "))[7:])
    for module in ("sluicegate", "native"):
        assert Path(result[module]).is_relative_to(installed.venv), f"{module} from {result[module]}, not the venv"
    assert result["kafka_read_path"] == "native", "the default read path of this install"
    assert result["kafka_rows"] == PARTITIONS * PER_PARTITION, output[-4000:]
    assert result["files_rows"] == FILES * FILE_ROWS, output[-4000:]
    jars = result["jars"].split(",")
    assert any(Path(j).is_relative_to(installed.venv) and j.endswith("sluicegate-spark.jar") for j in jars), jars
    assert any(Path(j).is_relative_to(installed.cache) and "kafka-clients" in j for j in jars), (
        f"the Kafka jars fetched into the venv's empty cache: {jars}"
    )
    assert "readPath=jvm, Spark's Parquet reader" in output, output[-4000:]
    assert CHECKOUT.as_posix() not in result["sluicegate"]


def test_a_standalone_reader_of_a_base_install_copies_a_topic_exactly_once_natively(
    base: Installed, kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    topic = f"{unique_source}-in"
    writer = filled_topic(kafka_bootstrap, topic)
    out = tmp_path / "out"
    command = [
        str(base.venv / "bin" / "sluicegate"), "reader", "--source", unique_source, "--subtask", "0",
        "--connector", "kafka", "-o", f"topics={topic}", "-o", "stopping_offsets=latest",
        "-o", "starting_offsets=earliest", "--output", f"parquet:{out}", "--coordinator", "embedded",
        "--max-parallelism", "1",
    ]  # fmt: skip
    code, _, output = base.run(command, tmp_path, kafka_bootstrap, 300)
    assert code == 0, output[-6000:]
    rows = pq.read_table([str(f) for f in sorted(out.rglob("*.parquet"))]).to_pylist()
    copied = sorted((r["key"].decode(), r["value"].decode()) for r in rows)  # each record's content is its own
    assert copied == sorted(writer.expected.values()), f"{len(copied)} rows for {len(writer.expected)} records"
    said = " ".join(output.split())  # the CLI's log lines wrap at the terminal's width
    assert "reading records as Arrow batches on the native read path" in said, output[-4000:]


def test_a_base_install_says_which_extra_spark_and_the_timeline_need(
    base: Installed, kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    code, _, output = base.run([str(base.python), "-c", "import sluicegate.spark"], tmp_path, kafka_bootstrap, 60)
    assert code != 0 and "pip install 'sluicegate[spark]'" in output, output[-2000:]
    timeline = [str(base.venv / "bin" / "sluicegate"), "audit", "--source", unique_source, "--timeline", "t.png"]
    code, _, output = base.run(timeline, tmp_path, kafka_bootstrap, 60)
    said = " ".join(output.split())
    assert code != 0 and "pip install 'sluicegate[plots]'" in said, output[-2000:]


def test_doctor_in_the_installed_venv_reports_its_native_reader_and_jar(
    with_spark: Installed, kafka_bootstrap: str, tmp_path: Path
) -> None:
    installed = with_spark
    code, stdout, output = installed.run(
        [str(installed.venv / "bin" / "sluicegate"), "doctor"], tmp_path, kafka_bootstrap, 120
    )
    assert code == 0, output[-4000:]
    lines = stdout.splitlines()
    assert all(len(line) <= 80 or " " not in line.strip() for line in lines), stdout
    paths = [Path(line.strip()) for line in lines if line.strip().startswith("/")]
    assert any(p.name == "_native.abi3.so" and p.is_relative_to(installed.venv) for p in paths), stdout
    assert any(p.name == "sluicegate-spark.jar" and p.is_relative_to(installed.venv) for p in paths), stdout
    said = " ".join(stdout.split())
    assert "native Kafka reader yes, librdkafka" in said and "JVM read path jar yes" in said, stdout
    assert "kafka native (librdkafka" in said and "ok: this install has its fast paths" in said, stdout
    assert CHECKOUT.as_posix() not in stdout
