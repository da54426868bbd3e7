"""sluicegate: FLIP-27 split coordination over Kafka.

``sluicegate.run_reader`` runs a standalone reader with your function
(reader/program.py); ``sluicegate.Message`` is the record a per-record function gets
and returns (reader/records.py); ``sluicegate.BatchState`` what a stateful batch
function gets beside each batch (reader/processing.py); ``sluicegate.Sink`` the base of
an output of your own (reader/output.py). They are imported on first use, so that
``import sluicegate`` stays light.
"""

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "run_reader":
        from sluicegate.reader.program import run_reader

        return run_reader
    if name == "Message":
        from sluicegate.reader.records import Message

        return Message
    if name == "BatchState":
        from sluicegate.reader.processing import BatchState

        return BatchState
    if name == "Sink":
        from sluicegate.reader.output import Sink

        return Sink
    raise AttributeError(f"module 'sluicegate' has no attribute {name!r}")
