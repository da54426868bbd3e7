package sluicegate.spark.jvm;

import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.kafka010.KafkaBatchInputPartition;

/**
 * One Spark task of a kafka query on the JVM read path: the Kafka ranges of one planned part
 * (a subtask's share of the batch, cut further by {@code minPartitions}), read one after
 * another. Spark's own source runs a task per topic partition; a task per part is what the
 * other read paths run, and at 8 or 64 partitions on a few cores it saves Spark most of its
 * per-task cost (scheduling, launching, the task's result) at every micro-batch.
 */
record KafkaRangesPartition(KafkaBatchInputPartition[] ranges) implements InputPartition {}
