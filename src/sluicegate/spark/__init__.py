"""Spark as sluicegate's data plane: a PySpark streaming data source
(``spark.readStream.format("sluicegate")``) whose partitions are the reader subtasks
of a source, and the main windowed job on top of it.

``sluicegate.spark.offsets`` is pure; ``driver`` speaks the protocol over Kafka;
``datasource`` is the PySpark data source; ``job`` the windowed-count job.
"""

from sluicegate.spark.datasource import FORMAT, SluicegateDataSource, SparkSourceConfig, register, source_schema

__all__ = ["FORMAT", "SluicegateDataSource", "SparkSourceConfig", "register", "source_schema"]
