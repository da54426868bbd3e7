package sluicegate.spark.jvm;

import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

/**
 * The parts of the batch {@code latestOffset} planned last, for Spark's calls of
 * {@code planInputPartitions}: Spark makes one while it plans the micro-batch and another
 * when a {@code foreachBatch} sink runs it, and a call into the driver's Python there costs
 * the micro-batch ~1-4 ms (the Python thread waits for the interpreter). The first of those
 * calls comes after Spark has written the end offset to its offset log, so it is when the
 * coordinator may hear of it: the acknowledgement goes on a thread of its own, and the
 * query's thread does not wait for it (the next {@code latestOffset} does, in Python). A
 * batch this stream did not plan (the last one of a query that restarts) is asked for.
 */
final class PlannedBatches {
    private final RangePlanner planner;
    private final ExecutorService acknowledgements = Executors.newSingleThreadExecutor(runnable -> {
        Thread thread = new Thread(runnable, "sluicegate-acknowledge");
        thread.setDaemon(true);
        return thread;
    });
    private String start;
    private ReadSettings.Planned planned;
    private String acknowledgedEnd;

    PlannedBatches(RangePlanner planner) {
        this.planner = planner;
    }

    synchronized void planned(String start, ReadSettings.Planned planned) {
        this.start = start;
        this.planned = planned;
    }

    synchronized List<List<ReadSettings.Range>> parts(String start, String end) {
        if (planned == null || !start.equals(this.start) || !end.equals(planned.end())) {
            return ReadSettings.parts(planner.planParts(start, end));
        }
        if (!end.equals(acknowledgedEnd)) {
            acknowledgedEnd = end;
            inBackground(() -> planner.acknowledge(end));
        }
        return planned.parts();
    }

    /**
     * Spark's {@code commit(end)}, a batch after the batch ran: nothing to tell the coordinator
     * when this stream acknowledged {@code end} already (the batch it planned last); else (the
     * first batch after a restart) the planner's {@code commit}, not waited for either.
     */
    synchronized void commit(String end) {
        if (!end.equals(acknowledgedEnd)) {
            inBackground(() -> planner.commit(end));
        }
    }

    private void inBackground(Runnable call) {
        acknowledgements.execute(() -> {
            try {
                call.run();
            } catch (RuntimeException e) {
                // Not lost: the next latestOffset acknowledges its start and plans nothing
                // until the coordinator has it (and raises whatever stops the query).
            }
        });
    }

    void stop() {
        acknowledgements.shutdown();
    }
}
