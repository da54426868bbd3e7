package sluicegate.spark.jvm;

import org.apache.spark.sql.execution.streaming.Offset;

/**
 * An offset that is the planner's JSON as it is (Spark compares offsets by their JSON). It
 * extends the offset class of Spark's {@code Source} API, which extends the connector one:
 * the files read path's {@link FileRangeSource} is such a source, and Spark runs a batch of
 * one only for an offset of that class.
 */
final class JsonOffset extends Offset {
    private final String json;

    JsonOffset(String json) {
        this.json = json;
    }

    @Override
    public String json() {
        return json;
    }
}
