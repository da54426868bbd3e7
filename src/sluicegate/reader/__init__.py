"""The reader side: one module per concern, imported by name (this package imports
nothing, so a light module such as ``protocol`` never pulls in Kafka clients).

- ``protocol``: ``ReaderProtocol``, the reader side of docs/protocol.md, pure;
- ``session``: ``ReaderSession``, the protocol's outcomes applied to a connector reader;
- ``channel``: ``ControlChannel``, the link to the control topics under every host
  (``sluicegate.reader.kafka_channel`` over Kafka, ``memory_channel`` in memory);
- ``host``: ``ReaderHost``, the standalone process (transactional checkpoints);
- ``output``, ``state``, ``watermark``: where records go, the checkpoint record,
  per-split watermarks; ``commands``: ``sluicegate reader``.
"""
