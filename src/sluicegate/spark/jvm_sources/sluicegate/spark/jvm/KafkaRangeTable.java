package sluicegate.spark.jvm;

import java.util.EnumSet;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A kafka query on the JVM read path: its micro-batches. With {@code readPath=jvm} given, a
 * batch query fails naming the option; under {@code readPath=auto} a batch query is the
 * Python path's, and a stream's trigger decides as the query starts (read_path_choice.py):
 * the JVM path reads it, or the Python data source's stream does ({@link PythonFallback}).
 */
final class KafkaRangeTable implements SupportsRead {
    private final StructType schema;
    private final PythonFallback python;

    KafkaRangeTable(StructType schema, PythonFallback python) {
        this.schema = schema;
        this.python = python;
    }

    @Override
    public String name() {
        return python.present() ? "sluicegate(readPath=auto)" : "sluicegate(readPath=jvm)";
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
        return () -> new ChosenScan(options);
    }

    /** One query's scan: the JVM path's stream, or the Python data source's scan it hands on to. */
    private final class ChosenScan implements Scan {
        private final CaseInsensitiveStringMap options;
        private Scan pythonScan;
        private boolean onJvm;

        ChosenScan(CaseInsensitiveStringMap options) {
            this.options = options;
        }

        @Override
        public StructType readSchema() {
            return schema;
        }

        @Override
        public String description() {
            return onJvm || !python.present() ? "sluicegate(readPath=jvm)" : pythonScan().description();
        }

        @Override
        public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
            if (python.present() && !JvmReadPath.jvmAtStart(options)) {
                return pythonScan().toMicroBatchStream(checkpointLocation);
            }
            onJvm = true;
            String optionsJson = JvmReadPath.json(JvmReadPath.onJvm(options));
            return new KafkaRangeStream(Planners.factory().createRangePlanner(optionsJson));
        }

        @Override
        public Batch toBatch() {
            return python.batch(options);
        }

        @Override
        public CustomMetric[] supportedCustomMetrics() {
            return onJvm || !python.present() ? new CustomMetric[0] : pythonScan().supportedCustomMetrics();
        }

        @Override
        public CustomTaskMetric[] reportDriverMetrics() {
            return onJvm || !python.present() ? new CustomTaskMetric[0] : pythonScan().reportDriverMetrics();
        }

        private Scan pythonScan() {
            if (pythonScan == null) {
                pythonScan = python.scanBuilder(options).build();
            }
            return pythonScan;
        }
    }
}
