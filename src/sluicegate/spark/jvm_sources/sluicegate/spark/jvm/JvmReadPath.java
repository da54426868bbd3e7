package sluicegate.spark.jvm;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.spark.sql.kafka010.KafkaRecordToRowConverter$;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** Whether a query asks for the JVM read path, and the checks of its options before it gets it. */
final class JvmReadPath {
    static final String OPTION = "readPath";
    static final String JVM = "jvm";
    private static final ObjectMapper JSON = new ObjectMapper();

    private JvmReadPath() {}

    static boolean requested(CaseInsensitiveStringMap options) {
        return JVM.equalsIgnoreCase(options.getOrDefault(OPTION, "").trim());
    }

    /**
     * The query's schema (Spark's Kafka source's) once the Python side has checked its
     * options as the Python path checks them: an unknown or misspelled option, or one the
     * JVM path cannot honour, fails naming it.
     */
    static StructType checkedSchema(CaseInsensitiveStringMap options) {
        JsonNode checked;
        try {
            checked = JSON.readTree(Planners.factory().check(json(options)));
        } catch (JsonProcessingException e) {
            throw new IllegalStateException("the planner's check is not JSON", e);
        }
        if (checked.has("error")) {
            throw new IllegalArgumentException(checked.get("error").asText());
        }
        return KafkaRecordToRowConverter$.MODULE$.kafkaSchema(checked.get("includeHeaders").asBoolean());
    }

    static String json(CaseInsensitiveStringMap options) {
        try {
            return JSON.writeValueAsString(options.asCaseSensitiveMap());
        } catch (JsonProcessingException e) {
            throw new IllegalStateException("the query's options cannot be written as JSON", e);
        }
    }
}
