package sluicegate.prototype;

import java.util.ArrayList;
import java.util.List;

/** The planner's range list, [[topic, partition, from, until], ...], read with Jackson (in Spark's jars). */
final class RangeJson {
    record Range(String topic, int partition, long from, long until) {}

    private RangeJson() {}

    static List<Range> parse(String json) {
        try {
            com.fasterxml.jackson.databind.JsonNode root = new com.fasterxml.jackson.databind.ObjectMapper().readTree(json);
            List<Range> ranges = new ArrayList<>();
            for (com.fasterxml.jackson.databind.JsonNode item : root) {
                ranges.add(new Range(item.get(0).asText(), item.get(1).asInt(), item.get(2).asLong(), item.get(3).asLong()));
            }
            return ranges;
        } catch (java.io.IOException e) {
            throw new IllegalArgumentException("the planner's ranges are not JSON: " + json, e);
        }
    }
}
