package sluicegate.spark.jvm;

import java.util.Map;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code format("sluicegate")} when sluicegate's jar is on the session's classpath ({@code
 * spark.jars}: {@code sluicegate.spark.jvm_read_path_jars()}). A query with {@code readPath=jvm}
 * is read here: sluicegate's planning (in the driver's Python, through a {@link RangePlanner})
 * with Spark's own Kafka partition readers on the executors. Every other query goes to the
 * Python data source, which {@code register(spark)} registers under {@link #PYTHON_NAME}
 * ({@code datasource.PYTHON_FORMAT}), unchanged: this class only forwards to it.
 */
public final class SluicegateSource implements TableProvider, DataSourceRegister {
    public static final String NAME = "sluicegate";
    public static final String PYTHON_NAME = "sluicegate_python";

    private final PythonDataSourceV2 python = new PythonDataSourceV2();

    public SluicegateSource() {
        python.setShortName(PYTHON_NAME);
    }

    @Override
    public String shortName() {
        return NAME;
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        if (!JvmReadPath.requested(options)) {
            return python.inferSchema(options);
        }
        return JvmReadPath.checkedSchema(options);
    }

    @Override
    public Transform[] inferPartitioning(CaseInsensitiveStringMap options) {
        return JvmReadPath.requested(options) ? new Transform[0] : python.inferPartitioning(options);
    }

    @Override
    public boolean supportsExternalMetadata() {
        return true;
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        CaseInsensitiveStringMap options = new CaseInsensitiveStringMap(properties);
        if (!JvmReadPath.requested(options)) {
            return python.getTable(schema, partitioning, properties);
        }
        StructType kafka = JvmReadPath.checkedSchema(options);
        if (!kafka.equals(schema)) {
            // a schema of the user's own would be silently ignored by Spark's readers
            throw new IllegalArgumentException(
                    "readPath=jvm reads Spark's Kafka schema " + kafka.simpleString()
                            + ": leave .schema(...) out (or give that one), got " + schema.simpleString());
        }
        return new KafkaRangeTable(kafka);
    }
}
