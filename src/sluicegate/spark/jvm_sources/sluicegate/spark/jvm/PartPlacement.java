package sluicegate.spark.jvm;

import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.common.TopicPartition;

/**
 * The executor each part of a batch prefers on a cluster, so that a subtask's part runs where
 * its cached consumers are, batch after batch: the one Spark's own Kafka source would give the
 * part's first topic partition (its hash over Spark's sorted executor list), or, when an
 * earlier part of the batch has that one, the next free one. Spark's source lets two topic
 * partitions share an executor; with a task per part, two parts on one executor would run one
 * after the other (or wait out {@code spark.locality.wait}) while another executor idles.
 * More parts than executors: the rest share, by hash. No executors (local mode): no preference.
 */
final class PartPlacement {
    private PartPlacement() {}

    /** An executor (Spark's location string) or null for each part, in order. */
    static List<String> executors(List<List<ReadSettings.Range>> parts, String[] executors) {
        List<String> places = new ArrayList<>();
        boolean[] taken = new boolean[executors.length];
        int free = executors.length;
        for (List<ReadSettings.Range> part : parts) {
            if (executors.length == 0 || part.isEmpty()) {
                places.add(null);
                continue;
            }
            ReadSettings.Range first = part.get(0);
            int index = Math.floorMod(new TopicPartition(first.topic(), first.partition()).hashCode(), executors.length);
            if (free > 0) {
                while (taken[index]) {
                    index = (index + 1) % executors.length;
                }
                taken[index] = true;
                free--;
            }
            places.add(executors[index]);
        }
        return places;
    }
}
