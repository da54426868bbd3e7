"""What executors read, told to the driver's metrics endpoint (the ``metricsPort`` option).

Executors run no HTTP server of their own: Python workers come and go and share a host,
so Prometheus could not find them. Instead each task that finishes reading its ranges
POSTs one small ``ReadReport`` (rows, Arrow bytes and seconds per split) to the driver's
``/reads``, and the driver's ``ReadTally`` adds them up for its ``/metrics``. A report
that cannot be sent is dropped with one log line: metrics never fail a task.

Per-split series are bounded: the tally keeps the ``MAX_SPLIT_SERIES`` splits reported
most recently (a ``files`` source has one split per file); per-subtask totals count every
split.
"""

from __future__ import annotations

import logging
import socket
import urllib.request
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import orjson

log = logging.getLogger("sluicegate.spark")

REPORT_PATH = "/reads"
REPORT_TIMEOUT_S = 2.0
MAX_SPLIT_SERIES = 1_000


@dataclass(frozen=True)
class SplitRead:
    split_id: str
    rows: int
    bytes: int
    """Arrow bytes of the batches handed to Spark."""


@dataclass(frozen=True)
class ReadReport:
    source: str
    subtask: int
    seconds: float
    """Wall time from the task's first read to its last batch handed over."""
    splits: tuple[SplitRead, ...]

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "source": self.source,
                "subtask": self.subtask,
                "seconds": self.seconds,
                "splits": [[s.split_id, s.rows, s.bytes] for s in self.splits],
            }
        )

    @classmethod
    def from_json(cls, raw: bytes) -> ReadReport:
        """ValueError for anything that is not a report."""
        try:
            data = orjson.loads(raw)
            splits = tuple(SplitRead(str(sid), int(rows), int(size)) for sid, rows, size in data["splits"])
            return cls(str(data["source"]), int(data["subtask"]), float(data["seconds"]), splits)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a read report: {exc}") from None


@dataclass
class SplitFigures:
    subtask: int
    rows: int = 0
    bytes: int = 0


@dataclass
class SubtaskReads:
    rows: int = 0
    bytes: int = 0
    seconds: float = 0.0
    tasks: int = 0


@dataclass
class ReadTally:
    """The driver's sum of its executors' reports (only the driver's loop touches it)."""

    source: str
    max_split_series: int = MAX_SPLIT_SERIES
    subtasks: dict[int, SubtaskReads] = field(default_factory=dict)
    splits: OrderedDict[str, SplitFigures] = field(default_factory=OrderedDict)
    """Most recently reported last."""
    refused: int = 0
    """Reports that were not reports, or of another source."""

    def add(self, report: ReadReport) -> None:
        if report.source != self.source:
            self.refused += 1
            return
        sub = self.subtasks.setdefault(report.subtask, SubtaskReads())
        sub.tasks += 1
        sub.seconds += report.seconds
        for read in report.splits:
            sub.rows += read.rows
            sub.bytes += read.bytes
            figures = self.splits.pop(read.split_id, None) or SplitFigures(report.subtask)
            figures.subtask = report.subtask  # a split may have moved to another subtask
            figures.rows += read.rows
            figures.bytes += read.bytes
            self.splits[read.split_id] = figures
        while len(self.splits) > self.max_split_series:
            self.splits.popitem(last=False)

    def add_raw(self, raw: bytes) -> bool:
        try:
            self.add(ReadReport.from_json(raw))
        except ValueError:
            self.refused += 1
            return False
        return True


def report_url(host: str, port: int) -> str:
    return f"http://{f'[{host}]' if ':' in host else host}:{port}{REPORT_PATH}"


def driver_host(bootstrap_servers: str) -> str:
    """The driver's address as its executors see it: the local address of the route to the
    first Kafka bootstrap server (executors reach that network too). No packet is sent."""
    first = bootstrap_servers.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    host = host.strip("[]") or first
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((host, int(port or 9092)))
            local: str = probe.getsockname()[0]
            return local
    except (OSError, ValueError):
        return socket.gethostname()


_warned = False


def send_report(url: str, report: ReadReport) -> None:
    """POST ``report`` to the driver; a failure is logged once per process and dropped."""
    global _warned
    request = urllib.request.Request(
        url, data=report.to_json(), method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=REPORT_TIMEOUT_S) as response:
            response.read()
    except OSError as exc:
        if not _warned:
            _warned = True
            log.warning("could not send read figures to the driver at %s: %s (metrics only; reads go on)", url, exc)


def counted(batches: Any, reads: list[SplitRead], split_id: str) -> Any:
    """Yield ``batches`` unchanged, adding their rows and bytes to ``reads`` at the end."""
    rows = size = 0
    for batch in batches:
        rows += batch.num_rows
        size += batch.nbytes
        yield batch
    reads.append(SplitRead(split_id, rows, size))
