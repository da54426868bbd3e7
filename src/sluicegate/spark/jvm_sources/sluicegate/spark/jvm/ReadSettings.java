package sluicegate.spark.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/** What the planner says in JSON: how executors read, and the parts of a micro-batch. */
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
     * and its parts, each the ranges one Spark task reads, as {@code latestOffsetAndParts}
     * gives them.
     */
    record Planned(String end, List<List<Range>> parts) {
        static Planned parse(String json) {
            JsonNode root = JvmReadPath.tree(json);
            return new Planned(root.get("end").asText(), ReadSettings.parts(root.get("parts")));
        }
    }

    static List<List<Range>> parts(String json) {
        return parts(JvmReadPath.tree(json));
    }

    private static List<List<Range>> parts(JsonNode list) {
        List<List<Range>> parts = new ArrayList<>();
        for (JsonNode part : list) {
            List<Range> ranges = new ArrayList<>();
            for (JsonNode item : part) {
                ranges.add(new Range(item.get(0).asText(), item.get(1).asInt(), item.get(2).asLong(), item.get(3).asLong()));
            }
            parts.add(ranges);
        }
        return parts;
    }
}
