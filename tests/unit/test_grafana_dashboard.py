"""docker/grafana/sluicegate.json only charts series sluicegate exports: a renamed metric
must not leave an empty panel behind."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUFFIXES = ("_total", "_bucket", "_count", "_sum")


def exported_names() -> str:
    return "\n".join(p.read_text() for p in (ROOT / "src" / "sluicegate").rglob("*.py"))


def test_every_dashboard_query_names_an_exported_metric() -> None:
    dashboard = json.loads((ROOT / "docker" / "grafana" / "sluicegate.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    assert len(exprs) >= 10
    source = exported_names()
    names = {name for expr in exprs for name in re.findall(r"\bsluicegate_[a-z_]+", expr)}
    missing = []
    for name in sorted(names):
        base = next((name.removesuffix(s) for s in SUFFIXES if name.endswith(s)), name)
        # collectors name their families either whole or after a prefix (f"sluicegate_reader_{name}")
        short = base
        for prefix in ("sluicegate_reader_", "sluicegate_spark_", "sluicegate_audit_"):
            short = short.removeprefix(prefix)
        if f'"{base}"' not in source and f'"{short}"' not in source:
            missing.append(name)
    assert not missing, f"the dashboard queries series nothing exports: {missing}"
