"""Audit of a source's history: replay its control topics, rebuild split ownership,
check the invariants of docs/protocol.md and name the first record that breaks one."""

from sluicegate.audit.invariants import (
    AuditResult,
    AuditSummary,
    OwnershipModel,
    SubtaskSummary,
    audit_records,
)
from sluicegate.audit.replay import (
    Location,
    Ordering,
    Replay,
    ReplayRecord,
    SkippedRecord,
    Violation,
    ViolationKind,
    replay,
    topic_names,
)

__all__ = [
    "AuditResult",
    "AuditSummary",
    "Location",
    "Ordering",
    "OwnershipModel",
    "Replay",
    "ReplayRecord",
    "SkippedRecord",
    "SubtaskSummary",
    "Violation",
    "ViolationKind",
    "audit_records",
    "replay",
    "topic_names",
]
