"""The shipped alert rules and dashboard against the real thing (issue 22 item 3).

A real Prometheus (Debian's package) on 127.0.0.1 scrapes a running coordinator, two
reader processes and ``sluicegate audit --follow``, every second, with
docker/prometheus/alerts.yml loaded. While the source runs cleanly every rule evaluates
without error and none is pending or firing, and every expression of the Grafana
dashboard (docker/grafana/sluicegate.json) evaluates on that server. Then an AddSplits
that no coordinator sent is written into the readers topic: the violation alert fires
for the source.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from local_http import free_port, wait_until
from processes import ProcessGroup
from prometheus_server import DASHBOARD, Prometheus, prometheus_server
from test_live_audit import forge
from test_observability import readers_with_metrics

from sluicegate.audit.commands import run_audit

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

READERS = 2
OPTIONS = {
    "splits": "40",
    "records_per_split": "2000",
    "rate": "400",  # per reader: it reads for the whole test
    "release_interval_ms": "500",
    "splits_per_release": "4",
}
SPARK_ONLY = "sluicegate_spark_"
"""Series a Spark query's driver serves; no query runs here."""
NOT_HERE = {"sluicegate_enumerator_events_total"}
"""The enumerator's own counters: the sequence connector counts nothing, it has gauges only."""


def dashboard_expressions(source: str) -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    return [e.replace("$source", source) for e in exprs]  # as Grafana fills in one chosen source


def firing(prometheus: Prometheus, source: str) -> dict[str, str]:
    """sluicegate's alerts pending or firing for ``source`` (or for no source): name -> state."""
    return {
        a["labels"]["alertname"]: a["state"]
        for a in prometheus.alerts()
        if a["labels"]["alertname"].startswith("Sluicegate") and a["labels"].get("source", source) == source
    }


def test_the_alert_rules_and_the_dashboard_on_a_real_prometheus(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path
) -> None:
    source = unique_source
    web_port, audit_port = free_port(), free_port()
    reader_ports = [free_port() for _ in range(READERS)]
    procs.coordinator(source, READERS, OPTIONS, "--web-port", str(web_port))
    readers = readers_with_metrics(procs, source, OPTIONS, reader_ports, tmp_path)
    follow = procs.start("audit-follow", ["audit", "--source", source, "--follow", "--metrics-port", str(audit_port)])
    for reader in readers:
        reader.wait_for_log("registered as attempt 1", timeout_s=90)
    follow.wait_for_log("following", timeout_s=60)
    jobs = {
        "sluicegate-coordinator": [web_port],
        "sluicegate-reader": reader_ports,
        "sluicegate-audit": [audit_port],
    }
    with prometheus_server(tmp_path / "prometheus", jobs) as prometheus:
        wanted = {f"{job}/127.0.0.1:{port}" for job, ports in jobs.items() for port in ports}
        wait_until(
            lambda: all(prometheus.targets_up().get(t) == "up" for t in wanted), 60, "every target scraped and up"
        )
        # a minute's worth of rates needs a few samples; the rules have run many times by then
        wait_until(
            lambda: prometheus.query(f'sum(rate(sluicegate_reader_records_read_total{{source="{source}"}}[1m])) > 0'),
            60,
            "records read, in Prometheus",
        )

        # -- every rule loaded and evaluating, none pending or firing on a clean run
        rules = prometheus.rules()
        assert {r["name"] for r in rules} >= {
            "SluicegateAuditViolation",
            "SluicegateAuditLagging",
            "SluicegateAuditDown",
            "SluicegateSplitUnowned",
            "SluicegateLowWatermarkStuck",
            "SluicegateNoActiveCoordinator",
        }
        assert all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]
        assert firing(prometheus, source) == {}, "an alert on a clean run"

        # -- every dashboard expression evaluates here; every series it names is served
        # (Spark's driver series aside: no query runs in this test)
        exprs = dashboard_expressions(source)
        for expr in exprs:
            prometheus.query(expr)
        served = set(prometheus.api("label/__name__/values"))
        named = {n for e in exprs for n in re.findall(r"\bsluicegate_[a-z_]+", e) if not n.startswith(SPARK_ONLY)}
        assert named - NOT_HERE - served == set(), "the dashboard names series nobody serves here"
        assert prometheus.query(f'sluicegate_low_watermark_ms{{source="{source}"}}'), "no low watermark"

        # -- a forged AddSplits: the violation alert fires for this source
        last = asyncio.run(run_audit(kafka_bootstrap, source))
        assert last.ok, last.violations
        forge(kafka_bootstrap, source, last)
        follow.wait_for_log("VIOLATION", timeout_s=60)
        wait_until(
            lambda: firing(prometheus, source).get("SluicegateAuditViolation") == "firing",
            60,
            "SluicegateAuditViolation firing",
        )
        alerts = firing(prometheus, source)
        assert alerts.keys() == {"SluicegateAuditViolation"}, alerts
