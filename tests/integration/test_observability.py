"""Metrics and the audit's pictures over real processes and real Kafka: a coordinator and
two reader processes with ``--metrics-port``; their /metrics are scraped while they read,
then the finished run is drawn and questioned with ``sluicegate audit``."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from local_http import coordinator_metrics, free_port, http_get, source_snapshot, wait_until
from processes import Proc, ProcessGroup

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

READERS = 2
OPTIONS = {
    "splits": "8",
    "records_per_split": "1500",
    "rate": "600",  # per reader: the run lasts ~10 s, long enough to scrape it while it reads
    "release_interval_ms": "300",
    "splits_per_release": "2",
}


def sample(text: str, metric: str, /, **labels: str) -> float | None:
    """The value of one series in a Prometheus text exposition (None: absent)."""
    for line in text.splitlines():
        m = re.match(rf"^{re.escape(metric)}\{{(.*)\}} (\S+)$", line)
        if m and all(f'{k}="{v}"' in m.group(1) for k, v in labels.items()):
            return float(m.group(2))
    return None


def readers_with_metrics(
    group: ProcessGroup, source: str, options: dict[str, str], ports: list[int], out_dir: Path
) -> list[Proc]:
    """One reader process per port, subtask k serving /metrics on ``ports[k]``, checkpointing
    every 300 ms, writing to ``out_dir/out-k.jsonl``."""
    return [
        group.reader(
            source,
            k,
            options,
            out_dir / f"out-{k}.jsonl",
            "--checkpoint-interval-ms",
            "300",
            "--metrics-port",
            str(port),
        )
        for k, port in enumerate(ports)
    ]


def scrape(port: int) -> str:
    status, ctype, body = http_get(port, "/metrics")
    assert status == 200 and ctype.startswith("text/plain"), (status, ctype)
    return body.decode()


def test_reader_and_coordinator_metrics_then_the_audit_timeline(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    source = unique_source
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    web_port = free_port()
    metric_ports = [free_port() for _ in range(READERS)]
    try:
        group.coordinator(source, READERS, OPTIONS, "--web-port", str(web_port))
        readers = readers_with_metrics(group, source, OPTIONS, metric_ports, tmp_path)
        for reader in readers:
            reader.wait_for_log("registered as attempt 1", timeout_s=60)
        started = time.monotonic()

        # -- each reader: splits owned as the coordinator assigned them, records moving,
        # checkpoint latencies observed, records left to the splits' ends known
        for k, port in enumerate(metric_ports):
            labels = {"source": source, "subtask": str(k)}

            def agreed(k: int = k, port: int = port, labels: dict[str, str] = labels) -> str | None:
                owned = len(source_snapshot(web_port, source)["subtasks"][k]["owned_splits"])
                text = scrape(port)
                got = sample(text, "sluicegate_reader_splits_owned", **labels)
                return text if got == owned and owned > 0 else None

            first = wait_until(agreed, 30, f"subtask {k}: splits owned as the coordinator assigned them")
            assert first is not None
            read_before = sample(first, "sluicegate_reader_records_read_total", **labels)
            assert read_before is not None

            def moved(port: int = port, before: float = read_before, labels: dict[str, str] = labels) -> str | None:
                text = scrape(port)
                grew = (sample(text, "sluicegate_reader_records_read_total", **labels) or 0) > before
                timed = (sample(text, "sluicegate_reader_checkpoint_seconds_count", **labels) or 0) > 0
                return text if grew and timed else None

            later = wait_until(moved, 30, f"subtask {k}: records read grow and a checkpoint latency is observed")
            assert later is not None
            print(f"subtask {k}: metrics checked {time.monotonic() - started:.1f} s after the readers registered")
            assert (sample(later, "sluicegate_reader_records_to_end", **labels) or 0) > 0, later
            assert sample(later, "sluicegate_reader_registered", **labels) == 1.0
            assert sample(later, "sluicegate_reader_fenced_total", **labels) == 0.0

        # -- the coordinator: the enumerator's own gauge, apart from the coordinator's counters
        coordinator = coordinator_metrics(web_port, source)
        released = sample(coordinator, "sluicegate_enumerator_gauge", source=source, name="splits_released")
        assert released is not None and released >= 2, coordinator
        assert sample(coordinator, "sluicegate_coordinator_events_total", source=source, event="splits_assigned")

        for reader in readers:
            assert reader.wait(90) == 0, group.describe()

        # -- the audit's questions over the finished run
        png = tmp_path / "timeline.png"
        drawn = group.run("audit-timeline", ["audit", "--source", source, "--timeline", str(png)])
        assert drawn.returncode == 0, drawn.tail()
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        history = group.run("audit-split", ["audit", "--source", source, "--split", "seq-00000"])
        assert history.returncode == 0, history.tail()
        assert "finished" in history.log() and "acknowledged positions" in history.log(), history.log()
        assert re.search(r'"position":\d+', history.log()), history.log()
        at = group.run("audit-at", ["audit", "--source", source, "--at", "3"])
        assert at.returncode == 0, at.tail()
        assert "ownership at 3" in at.log() and "seq-0000" in at.log(), at.log()
        unknown = group.run("audit-unknown", ["audit", "--source", source, "--split", "nope"])
        assert unknown.returncode == 2 and "never appears" in unknown.log(), unknown.log()
    finally:
        group.stop_all()
