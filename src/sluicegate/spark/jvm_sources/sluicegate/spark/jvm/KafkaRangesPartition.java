package sluicegate.spark.jvm;

import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.kafka010.KafkaBatchInputPartition;

/**
 * One Spark task of a kafka query on the JVM read path: the Kafka ranges of one planned part
 * (a subtask's share of the batch, cut further by {@code minPartitions}), read one after
 * another. Spark's own source runs a task per topic partition; a task per part is what the
 * other read paths run, and at 64 partitions on a few cores it saves Spark most of its
 * per-task cost (scheduling, launching, the task's result) at every micro-batch.
 *
 * <p>On a cluster the task prefers an executor of its own ({@link PartPlacement}), so that a
 * subtask's part runs where its cached consumers are, batch after batch ({@code locations} is
 * empty where Spark knows no executors, as in local mode).
 */
record KafkaRangesPartition(KafkaBatchInputPartition[] ranges, String[] locations) implements InputPartition {
    @Override
    public String[] preferredLocations() {
        return locations;
    }
}
