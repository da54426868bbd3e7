package sluicegate.prototype;

import java.util.concurrent.ConcurrentHashMap;

/** Where the Python driver leaves its planner for the source to find by name (option "planner"). */
public final class PlannerRegistry {
    private static final ConcurrentHashMap<String, RangePlanner> PLANNERS = new ConcurrentHashMap<>();

    private PlannerRegistry() {}

    public static void put(String name, RangePlanner planner) {
        PLANNERS.put(name, planner);
    }

    public static RangePlanner get(String name) {
        RangePlanner planner = PLANNERS.get(name);
        if (planner == null) {
            throw new IllegalArgumentException("no planner registered as " + name);
        }
        return planner;
    }

    public static void remove(String name) {
        PLANNERS.remove(name);
    }
}
