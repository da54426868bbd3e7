package sluicegate.spark.jvm;

import java.util.EnumSet;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** A kafka query on the JVM read path: micro-batches only (a batch query fails naming the option). */
final class KafkaRangeTable implements SupportsRead {
    private final StructType schema;

    KafkaRangeTable(StructType schema) {
        this.schema = schema;
    }

    @Override
    public String name() {
        return "sluicegate(readPath=jvm)";
    }

    @Override
    @SuppressWarnings("deprecation") // Spark's own KafkaTable implements it too
    public StructType schema() {
        return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
        return EnumSet.of(TableCapability.MICRO_BATCH_READ, TableCapability.BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
        String optionsJson = JvmReadPath.json(options);
        return () -> new Scan() {
            @Override
            public StructType readSchema() {
                return schema;
            }

            @Override
            public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
                return new KafkaRangeStream(Planners.factory().createRangePlanner(optionsJson));
            }

            @Override
            public Batch toBatch() {
                throw JvmReadPath.batchRefused();
            }
        };
    }
}
