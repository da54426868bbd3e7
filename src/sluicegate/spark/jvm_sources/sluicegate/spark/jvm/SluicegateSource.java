package sluicegate.spark.jvm;

import java.util.Map;
import org.apache.spark.sql.SQLContext;
import org.apache.spark.sql.catalyst.util.CaseInsensitiveMap;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.execution.streaming.Source;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.sources.StreamSourceProvider;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import scala.Option;
import scala.Tuple2;
import scala.jdk.javaapi.CollectionConverters;

/**
 * {@code format("sluicegate")} when sluicegate's jar is on the session's classpath ({@code
 * spark.jars}: {@code sluicegate.spark.jvm_read_path_jars()}). A query the JVM read path reads
 * ({@code readPath=jvm}, or {@code readPath=auto}'s choice: {@link JvmReadPath#chosen}) is read
 * here: sluicegate's planning (in the driver's Python, through a {@link StreamPlanner}) with
 * Spark's own readers on the executors: its Kafka partition readers for the kafka
 * connector ({@link KafkaRangeTable}), its Parquet reader for the files connector ({@link
 * FileRangeSource}, through Spark's {@code StreamSourceProvider} API). Every other query goes
 * to the Python data source, which {@code register(spark)} registers under {@link
 * #PYTHON_NAME} ({@code datasource.PYTHON_FORMAT}), unchanged: this class only forwards to it.
 */
public final class SluicegateSource implements TableProvider, StreamSourceProvider, DataSourceRegister {
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

    // -- the table API: every query starts here ---------------------------------------------

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        if (JvmReadPath.chosen(options) == JvmReadPath.Path.PYTHON) {
            return python.inferSchema(options);
        }
        return JvmReadPath.check(JvmReadPath.onJvm(options), null).schema();
    }

    @Override
    public Transform[] inferPartitioning(CaseInsensitiveStringMap options) {
        return JvmReadPath.chosen(options) == JvmReadPath.Path.PYTHON
                ? python.inferPartitioning(options)
                : new Transform[0];
    }

    @Override
    public boolean supportsExternalMetadata() {
        return true;
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        JvmReadPath.Path path = JvmReadPath.chosen(properties);
        if (path == JvmReadPath.Path.PYTHON) {
            return python.getTable(schema, partitioning, properties);
        }
        boolean given = JvmReadPath.given(properties);
        JvmReadPath.Checked checked = JvmReadPath.check(JvmReadPath.onJvm(properties), schema);
        PythonFallback fallback =
                given ? PythonFallback.none() : PythonFallback.of(python.getTable(schema, partitioning, properties));
        if (checked.files()) {
            return new FileRangeTable(checked.schema(), fallback);
        }
        if (!checked.schema().equals(schema)) {
            if (!given) {
                return python.getTable(schema, partitioning, properties); // a schema of the user's own
            }
            // a schema of the user's own would be silently ignored by Spark's readers
            throw new IllegalArgumentException(
                    "readPath=jvm reads Spark's Kafka schema " + checked.schema().simpleString()
                            + ": leave .schema(...) out (or give that one), got " + schema.simpleString());
        }
        return new KafkaRangeTable(checked.schema(), fallback);
    }

    // -- the Source API: files queries on the JVM read path ---------------------------------

    /**
     * Spark asks every {@code StreamSourceProvider} for its schema when it loads a stream, also
     * when the table above reads it: a query that is not a files query on the JVM read path
     * gets an empty one here, which Spark does not use, rather than a second check (and for a
     * Python query a Python worker) for nothing.
     */
    @Override
    public Tuple2<String, StructType> sourceSchema(
            SQLContext sqlContext, Option<StructType> schema, String providerName, scala.collection.immutable.Map<String, String> parameters) {
        Map<String, String> options = given(parameters);
        if (JvmReadPath.chosen(options) != JvmReadPath.Path.JVM) {
            return new Tuple2<>(NAME, new StructType());
        }
        return new Tuple2<>(NAME, JvmReadPath.check(JvmReadPath.onJvm(options), schema.getOrElse(() -> null)).schema());
    }

    @Override
    public Source createSource(
            SQLContext sqlContext,
            String metadataPath,
            Option<StructType> schema,
            String providerName,
            scala.collection.immutable.Map<String, String> parameters) {
        Map<String, String> options = JvmReadPath.onJvm(given(parameters));
        JvmReadPath.Checked checked = JvmReadPath.check(options, schema.getOrElse(() -> null));
        if (!checked.files()) {
            throw new IllegalStateException("Spark asked for the Source of a query that its table reads: " + options);
        }
        FilePlanner planner = Planners.factory().createFilePlanner(JvmReadPath.json(options), checked.schema().json());
        return new FileRangeSource((SparkSession) sqlContext.sparkSession(), planner, checked.schema());
    }

    private static Map<String, String> given(scala.collection.immutable.Map<String, String> parameters) {
        // Spark hands the options over case-insensitive; the original names read better in errors
        scala.collection.immutable.Map<String, String> original =
                parameters instanceof CaseInsensitiveMap<String> insensitive ? insensitive.originalMap() : parameters;
        return CollectionConverters.asJava(original);
    }
}
