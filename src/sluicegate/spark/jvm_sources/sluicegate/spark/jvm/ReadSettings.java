package sluicegate.spark.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/** What the planner says in JSON: how executors read, and the ranges of a micro-batch. */
final class ReadSettings {
    record Range(String topic, int partition, long from, long until) {}

    final Map<String, Object> consumer;
    final boolean failOnDataLoss;
    final boolean includeHeaders;
    final long pollTimeoutMs;

    private ReadSettings(Map<String, Object> consumer, boolean failOnDataLoss, boolean includeHeaders, long pollTimeoutMs) {
        this.consumer = consumer;
        this.failOnDataLoss = failOnDataLoss;
        this.includeHeaders = includeHeaders;
        this.pollTimeoutMs = pollTimeoutMs;
    }

    static ReadSettings parse(String json) {
        JsonNode root = JvmReadPath.tree(json);
        Map<String, Object> consumer = new HashMap<>();
        for (Map.Entry<String, JsonNode> setting : root.get("consumer").properties()) {
            consumer.put(setting.getKey(), setting.getValue().asText());
        }
        return new ReadSettings(
                consumer,
                root.get("failOnDataLoss").asBoolean(),
                root.get("includeHeaders").asBoolean(),
                root.get("pollTimeoutMs").asLong());
    }

    /**
     * A batch's end offset (the planner's JSON text: Spark tells offsets apart by their text)
     * and its ranges, as {@code latestOffsetAndRanges} gives them.
     */
    record Planned(String end, List<Range> ranges) {
        static Planned parse(String json) {
            JsonNode root = JvmReadPath.tree(json);
            return new Planned(root.get("end").asText(), ReadSettings.ranges(root.get("ranges")));
        }
    }

    static List<Range> ranges(String json) {
        return ranges(JvmReadPath.tree(json));
    }

    private static List<Range> ranges(JsonNode list) {
        List<Range> ranges = new ArrayList<>();
        for (JsonNode item : list) {
            ranges.add(new Range(item.get(0).asText(), item.get(1).asInt(), item.get(2).asLong(), item.get(3).asLong()));
        }
        return ranges;
    }
}
