package sluicegate.spark.jvm;

import org.apache.spark.sql.connector.read.streaming.Offset;

/** An offset that is the planner's JSON as it is (Spark compares offsets by their JSON). */
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
