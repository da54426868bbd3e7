package sluicegate.spark.jvm;

import java.io.IOException;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.kafka010.KafkaBatchInputPartition;
import org.apache.spark.sql.kafka010.KafkaBatchReaderFactory$;

/**
 * Reads a {@link KafkaRangesPartition} with Spark's own Kafka partition reader, a range at a
 * time: each range gets Spark's reader as Spark's source would create it (its cached consumer
 * for the topic partition, its handling of offset gaps and data loss, its rows), opened when
 * the range before it is done and closed (its consumer back in the cache) after its last row.
 */
final class KafkaRangesReaderFactory implements PartitionReaderFactory {
    static final KafkaRangesReaderFactory INSTANCE = new KafkaRangesReaderFactory();

    private KafkaRangesReaderFactory() {}

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
        return new RangesReader(((KafkaRangesPartition) partition).ranges());
    }

    private static final class RangesReader implements PartitionReader<InternalRow> {
        private final KafkaBatchInputPartition[] ranges;
        private int next;
        private PartitionReader<InternalRow> current;

        RangesReader(KafkaBatchInputPartition[] ranges) {
            this.ranges = ranges;
        }

        @Override
        public boolean next() throws IOException {
            while (current == null || !current.next()) {
                closeCurrent();
                if (next == ranges.length) {
                    return false;
                }
                current = KafkaBatchReaderFactory$.MODULE$.createReader(ranges[next++]);
            }
            return true;
        }

        @Override
        public InternalRow get() {
            return current.get();
        }

        @Override
        public void close() throws IOException {
            closeCurrent();
        }

        private void closeCurrent() throws IOException {
            if (current != null) {
                PartitionReader<InternalRow> done = current;
                current = null;
                done.close();
            }
        }
    }
}
