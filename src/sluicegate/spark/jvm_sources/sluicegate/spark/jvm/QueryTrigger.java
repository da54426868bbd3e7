package sluicegate.spark.jvm;

import java.util.List;
import java.util.UUID;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.streaming.runtime.StreamExecution;
import org.apache.spark.sql.execution.streaming.runtime.StreamingQueryWrapper;
import org.apache.spark.sql.streaming.StreamingQuery;
import scala.Option;

/**
 * The trigger of the streaming query being started, for {@code readPath=auto}'s choice of a
 * kafka stream. Spark's source API does not say it; but a source's {@code toMicroBatchStream}
 * runs on its query's own thread, before the first batch, with the query's id among the
 * thread's local properties and the query among the active ones of the session that started it.
 */
final class QueryTrigger {
    private QueryTrigger() {}

    /**
     * The trigger by its class's simple name ({@code AvailableNowTrigger}, {@code
     * OneTimeTrigger}, {@code ProcessingTimeTrigger} ...), or "" where this thread is no
     * query's (an internal API changed, or a caller elsewhere): the choice then takes its
     * default rather than fail.
     */
    static String current() {
        try {
            SparkSession active = (SparkSession) SparkSession.active();
            String id = active.sparkContext().getLocalProperty(StreamExecution.QUERY_ID_KEY());
            if (id == null) {
                return "";
            }
            // the query runs on a clone of the session that started it, whose query manager
            // is a new one: the query is among the started session's (the default one, unless
            // the application made sessions of its own)
            for (Option<SparkSession> session : List.of(Option.apply(active), SparkSession.getDefaultSession())) {
                StreamingQuery query = session.isEmpty() ? null : session.get().streams().get(UUID.fromString(id));
                if (query instanceof StreamingQueryWrapper wrapper) {
                    return wrapper.streamingQuery().trigger().getClass().getSimpleName().replace("$", "");
                }
            }
        } catch (RuntimeException | LinkageError e) {
            // not knowing the trigger is not an error: the choice's default reads the query
        }
        return "";
    }
}
