package sluicegate.spark.jvm;

/** The driver's Python side of the JVM read path (sluicegate/spark/jvm_planner.py). */
public interface PlannerFactory {
    /**
     * Why the JVM read path cannot read a query of these options (a JSON object of the
     * options as given), or "" when it can. A bad option's error names it.
     */
    String refusal(String optionsJson);

    /** The planner of one query (one per {@code MicroBatchStream}: one per query run). */
    RangePlanner create(String optionsJson);
}
