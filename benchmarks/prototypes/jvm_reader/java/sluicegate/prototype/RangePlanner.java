package sluicegate.prototype;

/**
 * The driver-side half of a sluicegate query, implemented in Python (the query's own
 * {@code SluicegateStreamReader}) and called through Py4J. Offsets are the JSON that
 * sluicegate's Python stream reader writes into Spark's offset log.
 */
public interface RangePlanner {
    String initialOffset();

    /** The query's row limit per micro-batch (maxRecordsPerTrigger), 0 for none. */
    long defaultMaxRows();

    /** The next end offset after {@code start}, at most {@code maxRows} rows on (0: no limit). */
    String latestOffset(String start, long maxRows);

    /** Trigger.AvailableNow: what exists now is the end. */
    void prepareForTriggerAvailableNow();

    /** The Kafka ranges between two offsets: a JSON list of [topic, partition, from, until]. */
    String planRanges(String start, String end);

    void commit(String end);

    void stop();
}
