package sluicegate.spark.jvm;

/** The driver's Python side of the JVM read path (sluicegate/spark/jvm_planner.py). */
public interface PlannerFactory {
    /**
     * The options (a JSON object of them as given) and the query's own schema (Spark's JSON
     * form, "" for none) checked as the Python path checks them: {"error": why the JVM read
     * path cannot read such a query, naming the option}; or {"read": "kafka",
     * "includeHeaders": whether its rows have Spark's headers column}; or {"read": "files",
     * "schema": the rows' schema in Spark's JSON form}.
     */
    String check(String optionsJson, String schemaJson);

    /**
     * {@code readPath=auto}'s choice for a stream of these options (sluicegate's
     * read_path_choice.py): {"path": "jvm" | "python" | "trigger", "why": ...}, where "trigger"
     * asks again once the query's {@code trigger} is known (Spark's trigger by its class's
     * name, "" when unknown; null before the query starts).
     */
    String choose(String optionsJson, String trigger);

    /** The planner of one kafka query (one per {@code MicroBatchStream}: one per query run). */
    RangePlanner createRangePlanner(String optionsJson);

    /** The planner of one files query, whose rows have {@code schemaJson} (Spark's JSON form). */
    FilePlanner createFilePlanner(String optionsJson, String schemaJson);
}
