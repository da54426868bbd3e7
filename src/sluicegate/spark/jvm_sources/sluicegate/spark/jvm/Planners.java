package sluicegate.spark.jvm;

/**
 * Where the driver's Python leaves its {@link PlannerFactory} ({@code register(spark)}, through
 * Py4J): one per JVM, since a JVM has one driver Python.
 */
public final class Planners {
    private static volatile PlannerFactory factory;

    private Planners() {}

    public static void install(PlannerFactory installed) {
        factory = installed;
    }

    /** The installed factory, or null: {@code register(spark)} was not called (or over Spark Connect). */
    static PlannerFactory installed() {
        return factory;
    }

    static PlannerFactory factory() {
        PlannerFactory installed = factory;
        if (installed == null) {
            throw new IllegalStateException(
                    "readPath=jvm needs sluicegate's planner in the driver's Python: call "
                            + "sluicegate.spark.register(spark) in a classic PySpark driver; a Spark Connect "
                            + "session has no driver-side Python for it (readPath=auto or python reads there)");
        }
        return installed;
    }
}
