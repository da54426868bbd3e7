package sluicegate.spark.jvm;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * What a table of the JVM read path hands to the Python data source's table under {@code
 * readPath=auto}: a batch query (spark.read; the JVM path reads streams), and a kafka stream
 * whose trigger chose the Python path. Without it ({@code readPath=jvm} given) a batch query
 * fails naming the option.
 */
final class PythonFallback {
    private final Table python;

    private PythonFallback(Table python) {
        this.python = python;
    }

    static PythonFallback of(Table python) {
        return new PythonFallback(python);
    }

    static PythonFallback none() {
        return new PythonFallback(null);
    }

    boolean present() {
        return python != null;
    }

    ScanBuilder scanBuilder(CaseInsensitiveStringMap options) {
        if (python == null) {
            throw JvmReadPath.batchRefused();
        }
        return ((SupportsRead) python).newScanBuilder(options);
    }

    Batch batch(CaseInsensitiveStringMap options) {
        return scanBuilder(options).build().toBatch();
    }
}
