package sluicegate.spark.jvm;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.Map;
import org.apache.spark.sql.kafka010.KafkaRecordToRowConverter$;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** Whether a query asks for the JVM read path, and the checks of its options before it gets it. */
final class JvmReadPath {
    static final String OPTION = "readPath";
    static final String JVM = "jvm";
    private static final ObjectMapper JSON = new ObjectMapper();

    /** What a checked query reads: {@code kafka} ranges or {@code files}, into rows of {@code schema}. */
    record Checked(boolean files, StructType schema) {}

    private JvmReadPath() {}

    static boolean requested(Map<String, String> options) {
        return JVM.equalsIgnoreCase(new CaseInsensitiveStringMap(options).getOrDefault(OPTION, "").trim());
    }

    /**
     * What the query reads and into which schema, once the Python side has checked its
     * options (and {@code userSchema}, null for none) as the Python path checks them: an
     * unknown or misspelled option, or one the JVM path cannot honour, fails naming it. A
     * kafka query's schema is Spark's Kafka source's; a files query's is the user's or the
     * one the connector infers from the first file.
     */
    static Checked check(Map<String, String> options, StructType userSchema) {
        JsonNode checked = tree(Planners.factory().check(json(options), userSchema == null ? "" : userSchema.json()));
        if (checked.has("error")) {
            throw new IllegalArgumentException(checked.get("error").asText());
        }
        if ("files".equals(checked.get("read").asText())) {
            return new Checked(true, (StructType) DataType.fromJson(checked.get("schema").asText()));
        }
        boolean headers = checked.get("includeHeaders").asBoolean();
        return new Checked(false, KafkaRecordToRowConverter$.MODULE$.kafkaSchema(headers));
    }

    /** What a batch query (spark.read) with readPath=jvm gets, from either table. */
    static UnsupportedOperationException batchRefused() {
        return new UnsupportedOperationException(
                "readPath=jvm reads streams (spark.readStream): a batch query reads with the other read paths, "
                        + "leave readPath out");
    }

    static String json(Map<String, String> options) {
        Map<String, String> given =
                options instanceof CaseInsensitiveStringMap insensitive ? insensitive.asCaseSensitiveMap() : options;
        try {
            return JSON.writeValueAsString(given);
        } catch (JsonProcessingException e) {
            throw new IllegalStateException("the query's options cannot be written as JSON", e);
        }
    }

    static JsonNode tree(String json) {
        try {
            return JSON.readTree(json);
        } catch (JsonProcessingException e) {
            throw new IllegalStateException("the planner's answer is not JSON: " + json, e);
        }
    }
}
