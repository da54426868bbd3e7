package sluicegate.spark.jvm;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.kafka010.KafkaRecordToRowConverter$;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** Which read path a query takes, and the checks of its options before the JVM path reads it. */
final class JvmReadPath {
    static final String OPTION = "readPath";
    static final String JVM = "jvm";
    static final String AUTO = "auto";
    private static final ObjectMapper JSON = new ObjectMapper();

    /** What a checked query reads: {@code kafka} ranges or {@code files}, into rows of {@code schema}. */
    record Checked(boolean files, StructType schema) {}

    private JvmReadPath() {}

    /** Which source reads a query: the JVM read path, the Python one, or one its trigger picks. */
    enum Path {
        JVM,
        PYTHON,
        BY_TRIGGER
    }

    /**
     * The read path of a query of these options: {@code readPath} where given; for {@code
     * auto} (the default) the driver's choice (read_path_choice.py), which is the Python path
     * where this session has no planner (register(spark) not called, Spark Connect).
     */
    static Path chosen(Map<String, String> options) {
        if (given(options)) {
            return Path.JVM;
        }
        String named = new CaseInsensitiveStringMap(options).getOrDefault(OPTION, AUTO).trim();
        PlannerFactory factory = Planners.installed();
        if (!AUTO.equalsIgnoreCase(named) || factory == null) {
            return Path.PYTHON;
        }
        return switch (tree(factory.choose(json(options), null)).get("path").asText()) {
            case JVM -> Path.JVM;
            case "trigger" -> Path.BY_TRIGGER;
            default -> Path.PYTHON;
        };
    }

    /** Whether the query gave {@code readPath=jvm} itself (not {@code auto}'s choice). */
    static boolean given(Map<String, String> options) {
        return JVM.equalsIgnoreCase(new CaseInsensitiveStringMap(options).getOrDefault(OPTION, "").trim());
    }

    /** A {@link Path#BY_TRIGGER} stream's choice as its query starts: whether the JVM path reads it. */
    static boolean jvmAtStart(Map<String, String> options) {
        String chosen = Planners.factory().choose(json(options), QueryTrigger.current());
        return JVM.equals(tree(chosen).get("path").asText());
    }

    /** The options with {@code readPath=jvm}, as the planner of a query the JVM path reads takes them. */
    static Map<String, String> onJvm(Map<String, String> options) {
        Map<String, String> given =
                options instanceof CaseInsensitiveStringMap insensitive ? insensitive.asCaseSensitiveMap() : options;
        Map<String, String> jvm = new HashMap<>();
        given.forEach((key, value) -> {
            if (!OPTION.equalsIgnoreCase(key)) {
                jvm.put(key, value);
            }
        });
        jvm.put(OPTION, JVM);
        return jvm;
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
