package sluicegate.spark.jvm;

import java.util.EnumSet;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A files query on the JVM read path, as Spark's table API sees it: a table it cannot read
 * micro-batches from, so that Spark reads the stream through {@link SluicegateSource}'s
 * {@code StreamSourceProvider} side instead ({@link FileRangeSource}). That API makes each
 * batch a plan of Spark's own Parquet reader, which Spark's optimizer prunes to the columns
 * the query uses; the table API's micro-batch scans are built unpruned. A batch query
 * (spark.read) is the Python path's under {@code readPath=auto} ({@link PythonFallback}), and
 * fails naming the option where {@code readPath=jvm} was given, as on the kafka side.
 */
final class FileRangeTable implements SupportsRead {
    private final StructType schema;
    private final PythonFallback python;

    FileRangeTable(StructType schema, PythonFallback python) {
        this.schema = schema;
        this.python = python;
    }

    @Override
    public String name() {
        return "sluicegate(readPath=jvm, files)";
    }

    @Override
    @SuppressWarnings("deprecation") // Spark's own tables implement it too
    public StructType schema() {
        return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
        return EnumSet.of(TableCapability.BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
        // only a batch query gets here: Spark reads the stream through the Source API
        return python.scanBuilder(options);
    }
}
