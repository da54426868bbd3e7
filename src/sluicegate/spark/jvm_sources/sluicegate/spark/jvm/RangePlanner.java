package sluicegate.spark.jvm;

/** The planner of a kafka query: its batches are Kafka offset ranges. */
public interface RangePlanner extends StreamPlanner {
    /**
     * How executors read, as JSON: {"consumer": {Kafka consumer settings}, "failOnDataLoss":
     * bool, "includeHeaders": bool, "pollTimeoutMs": long}.
     */
    String readSettings();

    /**
     * {@code latestOffset}, with the batch from {@code start} to it as parts, each the ranges
     * one Spark task reads: {"end": offset, "parts": [[[topic, partition, from, until], ...],
     * ...]}.
     */
    String latestOffsetAndParts(String start, long maxRows);

    /** Spark has written {@code end} to its offset log: tell the coordinator (it does not wait). */
    void acknowledge(String end);

    /**
     * The parts of the batch between two offsets, as in {@code latestOffsetAndParts},
     * acknowledging {@code end}.
     */
    String planParts(String start, String end);

    /**
     * Each split's records past {@code consumed} (the offset of the last batch run) up to
     * what the last planning found available, as a JSON list of longs.
     */
    String offsetsBehindLatest(String consumed);
}
