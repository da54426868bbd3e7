package sluicegate.spark.jvm;

/**
 * The driver-side half of a query on the JVM read path: the query's own sluicegate stream
 * reader in the driver's Python, called through Py4J. Offsets are the JSON the Python path
 * writes into Spark's offset log, so a checkpoint is the same on either path.
 */
public interface StreamPlanner {
    String initialOffset();

    /** The query's row limit per micro-batch (maxOffsetsPerTrigger), 0 for none. */
    long defaultMaxRows();

    /** The next end offset after {@code start}, at most {@code maxRows} rows on (0: no limit). */
    String latestOffset(String start, long maxRows);

    /** Trigger.AvailableNow: what exists now is the end. */
    void prepareForTriggerAvailableNow();

    void commit(String end);

    void stop();
}
