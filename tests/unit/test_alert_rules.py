"""The shipped Prometheus configuration and alert rules (docker/prometheus/) checked by
Prometheus' own ``promtool``: they load, and each alert fires on the series it is for and
stays quiet on normal ones (tests/promtool/alerts_test.yml)."""

from __future__ import annotations

import subprocess

from prometheus_server import ALERT_RULES, RULE_TESTS, SHIPPED_CONFIG, binary


def promtool(*args: str) -> str:
    done = subprocess.run([binary("promtool"), *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_rules_and_the_shipped_configuration_load() -> None:
    assert "SUCCESS: 6 rules found" in promtool("check", "rules", str(ALERT_RULES))
    assert "SUCCESS" in promtool("check", "config", str(SHIPPED_CONFIG))


def test_each_alert_fires_on_what_it_is_for_and_not_otherwise() -> None:
    out = promtool("test", "rules", str(RULE_TESTS))
    assert "SUCCESS" in out and "FAILED" not in out
