package sluicegate.spark.jvm;

/** The planner of a kafka query: its batches are Kafka offset ranges. */
public interface RangePlanner extends StreamPlanner {
    /**
     * How executors read, as JSON: {"consumer": {Kafka consumer settings}, "failOnDataLoss":
     * bool, "includeHeaders": bool, "pollTimeoutMs": long}.
     */
    String readSettings();

    /** The Kafka ranges between two offsets: a JSON list of [topic, partition, from, until]. */
    String planRanges(String start, String end);
}
