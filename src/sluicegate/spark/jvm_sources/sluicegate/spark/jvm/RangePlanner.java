package sluicegate.spark.jvm;

/** The planner of a kafka query: its batches are Kafka offset ranges. */
public interface RangePlanner extends StreamPlanner {
    /**
     * How executors read, as JSON: {"consumer": {Kafka consumer settings}, "failOnDataLoss":
     * bool, "includeHeaders": bool, "pollTimeoutMs": long}.
     */
    String readSettings();

    /**
     * {@code latestOffset}, with the ranges from {@code start} to it: {"end": offset, "ranges":
     * [[topic, partition, from, until], ...]}.
     */
    String latestOffsetAndRanges(String start, long maxRows);

    /** Spark has written {@code end} to its offset log: tell the coordinator (it does not wait). */
    void acknowledge(String end);

    /**
     * The Kafka ranges between two offsets, as in {@code latestOffsetAndRanges}, acknowledging
     * {@code end}.
     */
    String planRanges(String start, String end);
}
