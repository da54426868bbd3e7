package sluicegate.spark.jvm;

/** The planner of a files query: its batches are whole files. */
public interface FilePlanner extends StreamPlanner {
    /**
     * The files the batch {@code (start, end]} reads, as a JSON list of Hadoop file URLs,
     * each read whole ({@code start} is "" for the query's first batch). Fails naming the
     * file when a planned range is not a whole file.
     */
    String planFiles(String start, String end);
}
