"""A missing extra fails at its first use naming the pip command; a pyspark outside the
tested versions fails at import naming them (sluicegate/extras.py)."""

from __future__ import annotations

import sys
import types

import pytest

from sluicegate.extras import MissingExtra, require, require_pyspark


def test_a_missing_module_names_its_extra_and_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    with pytest.raises(MissingExtra) as info:
        require("plots", "matplotlib", "sluicegate audit --timeline")
    assert "sluicegate audit --timeline needs matplotlib" in str(info.value)
    assert "pip install 'sluicegate[plots]'" in str(info.value)


def test_no_pyspark_names_the_spark_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyspark", None)
    with pytest.raises(MissingExtra, match=r"pip install 'sluicegate\[spark\]'"):
        require_pyspark()


@pytest.mark.parametrize(
    ("version", "supported"),
    [("4.3.0", True), ("4.3.2.dev0", True), ("4.2.1", False), ("4.4.0", False), ("3.5.3", False)],
)
def test_pyspark_is_accepted_in_the_tested_versions_only(
    monkeypatch: pytest.MonkeyPatch, version: str, supported: bool
) -> None:
    fake = types.ModuleType("pyspark")
    fake.__version__ = version  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pyspark", fake)
    if supported:
        assert require_pyspark() is fake
        return
    with pytest.raises(ImportError) as info:
        require_pyspark()
    assert f"pyspark {version} is not supported" in str(info.value) and ">=4.3,<4.4" in str(info.value)
