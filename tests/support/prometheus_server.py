"""A real Prometheus server (Debian's ``prometheus`` package, which ``make test`` installs)
on 127.0.0.1 for a test: it scrapes the given jobs every second, evaluates the shipped
alert rules every second, and answers PromQL over its HTTP API."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from local_http import free_port, http_get, wait_until

ROOT = Path(__file__).resolve().parents[2]
ALERT_RULES = ROOT / "docker" / "prometheus" / "alerts.yml"
DASHBOARD = ROOT / "docker" / "grafana" / "sluicegate.json"
SHIPPED_CONFIG = ROOT / "docker" / "prometheus" / "prometheus.yml"
RULE_TESTS = ROOT / "tests" / "promtool" / "alerts_test.yml"


def binary(name: str) -> str:
    """The path of ``prometheus`` or ``promtool``; the test is skipped, saying how to get it,
    where neither PATH has it nor apt could install it (``make prometheus`` says which)."""
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed: `make prometheus` installs Debian's prometheus package")
    return path


class Prometheus:
    def __init__(self, port: int) -> None:
        self.port = port

    def api(self, path: str, **params: str) -> Any:
        """``data`` of a successful answer of /api/v1/PATH (AssertionError otherwise)."""
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            answer = json.loads(exc.read())
        assert answer.get("status") == "success", f"{path} {params}: {answer}"
        return answer["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector ``expr`` evaluates to now (an expression that fails to parse or
        to evaluate fails the test with Prometheus' own message)."""
        data = self.api("query", query=expr)
        result: list[dict[str, Any]] = data["result"]
        return result

    def targets_up(self) -> dict[str, str]:
        """Each active target's ``job/instance`` and its health (up, down, unknown)."""
        active = self.api("targets")["activeTargets"]
        return {f"{t['labels']['job']}/{t['labels']['instance']}": t["health"] for t in active}

    def alerts(self) -> list[dict[str, Any]]:
        """Alerts pending or firing now, with their labels and state."""
        alerts: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return alerts

    def rules(self) -> list[dict[str, Any]]:
        return [rule for group in self.api("rules")["groups"] for rule in group["rules"]]


@contextmanager
def prometheus_server(work_dir: Path, jobs: Mapping[str, Sequence[int]]) -> Iterator[Prometheus]:
    """Prometheus scraping ``jobs`` (job name -> ports on 127.0.0.1) with the shipped
    alert rules; stopped (and its data removed with ``work_dir``) at the end."""
    work_dir.mkdir(parents=True, exist_ok=True)
    scrape = [
        {"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{port}" for port in ports]}]}
        for job, ports in jobs.items()
    ]
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(ALERT_RULES)],
        "scrape_configs": scrape,
    }
    config_path = work_dir / "prometheus.yml"
    config_path.write_text(json.dumps(config))  # JSON is YAML
    port = free_port()
    log = (work_dir / "prometheus.log").open("ab")
    proc = subprocess.Popen(
        [
            binary("prometheus"),
            f"--config.file={config_path}",
            f"--storage.tsdb.path={work_dir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    try:
        wait_until(lambda: proc.poll() is not None or http_get(port, "/-/ready")[0] == 200, 60, "Prometheus ready")
        assert proc.poll() is None, (work_dir / "prometheus.log").read_text()[-3000:]
        yield Prometheus(port)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
