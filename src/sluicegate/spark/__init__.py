"""Spark as sluicegate's data plane: a PySpark streaming data source
(``spark.readStream.format("sluicegate")``) whose partitions are the reader subtasks
of a source, and the main windowed job on top of it.

``offsets`` is pure (offsets and planning); ``planner`` is ``latestOffset``;
``driver`` speaks the protocol (a ReaderProtocol per subtask over a control
channel); ``options`` parses the source's options; ``datasource`` is the PySpark
data source; ``job`` the windowed-count job.

It needs the ``spark`` extra (``pip install 'sluicegate[spark]'``): importing any of it
without a supported pyspark fails at once, saying so (sluicegate.extras).
"""

from sluicegate.extras import require_pyspark

require_pyspark()

from sluicegate.spark.datasource import FORMAT, SluicegateDataSource, register, source_schema  # noqa: E402
from sluicegate.spark.jvm_classpath import jvm_read_path_jars  # noqa: E402
from sluicegate.spark.options import SparkSourceOptions  # noqa: E402

__all__ = ["FORMAT", "SluicegateDataSource", "SparkSourceOptions", "jvm_read_path_jars", "register", "source_schema"]
