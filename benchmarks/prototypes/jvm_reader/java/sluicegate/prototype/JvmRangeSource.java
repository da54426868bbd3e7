package sluicegate.prototype;

import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.kafka010.KafkaRecordToRowConverter$;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * format("sluicegate.prototype.JvmRangeSource"): sluicegate's planning (in Python, through
 * a {@link RangePlanner}) with Spark's own Kafka partition readers on the executors. The
 * schema is Spark's Kafka source's, without headers.
 */
public final class JvmRangeSource implements TableProvider, DataSourceRegister {
    @Override
    public String shortName() {
        return "sluicegate-jvm-prototype";
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return KafkaRecordToRowConverter$.MODULE$.kafkaSchema(false);
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new RangeTable(schema);
    }

    private static final class RangeTable implements SupportsRead {
        private final StructType schema;

        RangeTable(StructType schema) {
            this.schema = schema;
        }

        @Override
        public String name() {
            return "sluicegate-jvm-prototype";
        }

        @Override
        public StructType schema() {
            return schema;
        }

        @Override
        public Set<TableCapability> capabilities() {
            return EnumSet.of(TableCapability.MICRO_BATCH_READ);
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            return () -> new Scan() {
                @Override
                public StructType readSchema() {
                    return schema;
                }

                @Override
                public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
                    return new RangeStream(options);
                }
            };
        }
    }
}
