"""``load_source``: a connector by entry-point name, or as ``package.module:SourceClass``."""

from __future__ import annotations

import pytest

from sluicegate.api import ConfigError
from sluicegate.connectors import load_source
from sluicegate_connectors.sequence import SequenceSource


def test_a_connector_named_module_and_class_is_loaded() -> None:
    source = load_source("sluicegate_connectors.sequence:SequenceSource", {"splits": "3"})
    assert isinstance(source, SequenceSource) and source.options.splits == 3


@pytest.mark.parametrize(
    ("connector", "problem"),
    [
        ("no_such_package.anywhere:Source", "cannot import 'no_such_package.anywhere'"),
        ("sluicegate_connectors.sequence:Missing", "has no 'Missing'"),
        ("sluicegate.connectors:load_source", "does not name a sluicegate Source class"),
        ("no-such-connector", "no connector named 'no-such-connector'"),
    ],
)
def test_a_bad_connector_name_is_a_config_error(connector: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_source(connector, {})
    assert info.value.setting == "connector"
    assert problem in str(info.value)
