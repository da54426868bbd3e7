"""The process helpers moved to the connector test kit (``sluicegate.testing.processes``);
the tests keep importing them from here."""

from sluicegate.testing.processes import *  # noqa: F403
