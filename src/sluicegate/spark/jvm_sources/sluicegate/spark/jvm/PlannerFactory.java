package sluicegate.spark.jvm;

/** The driver's Python side of the JVM read path (sluicegate/spark/jvm_planner.py). */
public interface PlannerFactory {
    /**
     * The options (a JSON object of them as given) checked as the Python path checks them:
     * {"error": why the JVM read path cannot read such a query, naming the option} or
     * {"includeHeaders": whether its rows have Spark's headers column}.
     */
    String check(String optionsJson);

    /** The planner of one query (one per {@code MicroBatchStream}: one per query run). */
    RangePlanner create(String optionsJson);
}
