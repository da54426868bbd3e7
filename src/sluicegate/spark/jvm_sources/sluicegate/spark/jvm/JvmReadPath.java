package sluicegate.spark.jvm;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
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
     * The options, checked by the Python side as the Python path checks them (an unknown or
     * misspelled option fails naming it), and what the JVM path cannot read refused.
     */
    static void check(CaseInsensitiveStringMap options) {
        String refusal = Planners.factory().refusal(json(options));
        if (!refusal.isEmpty()) {
            throw new IllegalArgumentException(refusal);
        }
    }

    static String json(CaseInsensitiveStringMap options) {
        try {
            return JSON.writeValueAsString(options.asCaseSensitiveMap());
        } catch (JsonProcessingException e) {
            throw new IllegalStateException("the query's options cannot be written as JSON", e);
        }
    }
}
