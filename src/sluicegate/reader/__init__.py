"""The standalone reader host: one subtask of a source, reading the splits its
coordinator assigns over Kafka (docs/protocol.md).

- ``ReaderSession``: the protocol, free of I/O (unit-tested without Kafka);
- ``ReaderHost`` / ``ReaderSettings``: the aiokafka process around it;
- ``reader_command``: the ``sluicegate reader`` command line.
"""

from sluicegate.reader.host import ReaderHost, ReaderSettings
from sluicegate.reader.output import JsonlOutput, KafkaOutput, Output, OutputSpec
from sluicegate.reader.session import CheckpointPlan, Disposition, Phase, ReaderSession
from sluicegate.reader.state import ReaderCheckpoint, StateRecordError
from sluicegate.reader.watermark import AlignmentChange, SplitWatermarks

__all__ = [
    "AlignmentChange",
    "CheckpointPlan",
    "Disposition",
    "JsonlOutput",
    "KafkaOutput",
    "Output",
    "OutputSpec",
    "Phase",
    "ReaderCheckpoint",
    "ReaderHost",
    "ReaderSession",
    "ReaderSettings",
    "SplitWatermarks",
    "StateRecordError",
]
