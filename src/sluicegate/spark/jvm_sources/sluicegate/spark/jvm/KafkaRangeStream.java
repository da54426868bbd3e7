package sluicegate.spark.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.SparkContext;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.ReportsSourceMetrics;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.kafka010.KafkaBatchInputPartition;
import org.apache.spark.sql.kafka010.KafkaOffsetRange;
import org.apache.spark.sql.kafka010.KafkaSource$;
import scala.Option;

/**
 * The micro-batches of a query on the JVM read path: offsets and parts from the planner (the
 * same coordinator, acknowledgements and offset log as the Python path), a Spark task per
 * planned part, whose ranges Spark's own Kafka partition reader reads one after another (its
 * cached consumers, its handling of offset gaps and data loss, its row conversion:
 * {@link KafkaRangesReaderFactory}). No Python worker runs on the executors. Its progress
 * has the source metrics of Spark's Kafka source ({@link #metrics}).
 */
final class KafkaRangeStream implements MicroBatchStream, SupportsTriggerAvailableNow, ReportsSourceMetrics {
    private final RangePlanner planner;
    private final ReadSettings settings;
    private final PlannedBatches batches;

    KafkaRangeStream(RangePlanner planner) {
        this.planner = planner;
        this.settings = ReadSettings.parse(planner.readSettings());
        this.batches = new PlannedBatches(planner);
    }

    @Override
    public Offset initialOffset() {
        return new JsonOffset(planner.initialOffset());
    }

    @Override
    public ReadLimit getDefaultReadLimit() {
        long maxRows = planner.defaultMaxRows();
        return maxRows > 0 ? ReadLimit.maxRows(maxRows) : ReadLimit.allAvailable();
    }

    @Override
    public Offset latestOffset(Offset start, ReadLimit limit) {
        long maxRows = limit instanceof ReadMaxRows rows ? rows.maxRows() : 0;
        ReadSettings.Planned planned = ReadSettings.Planned.parse(planner.latestOffsetAndParts(start.json(), maxRows));
        batches.planned(start.json(), planned);
        return new JsonOffset(planned.end());
    }

    @Override
    public Offset latestOffset() {
        throw new UnsupportedOperationException("Spark calls latestOffset(start, limit) on this stream");
    }

    @Override
    public void prepareForTriggerAvailableNow() {
        planner.prepareForTriggerAvailableNow();
    }

    @Override
    public InputPartition[] planInputPartitions(Offset start, Offset end) {
        List<List<ReadSettings.Range>> parts = batches.parts(start.json(), end.json());
        String[] executors = KafkaSource$.MODULE$.getSortedExecutorList(SparkContext.getOrCreate());
        List<String> places = PartPlacement.executors(parts, executors);
        List<InputPartition> partitions = new ArrayList<>();
        for (int i = 0; i < parts.size(); i++) {
            KafkaBatchInputPartition[] ranges =
                    parts.get(i).stream().map(this::sparkRange).toArray(KafkaBatchInputPartition[]::new);
            String place = places.get(i);
            partitions.add(new KafkaRangesPartition(ranges, place == null ? new String[0] : new String[] {place}));
        }
        return partitions.toArray(new InputPartition[0]);
    }

    /** A range as Spark's Kafka source plans one, for Spark's partition reader. */
    private KafkaBatchInputPartition sparkRange(ReadSettings.Range range) {
        KafkaOffsetRange offsets = KafkaOffsetRange.apply(
                new TopicPartition(range.topic(), range.partition()), range.from(), range.until(), Option.empty());
        return KafkaBatchInputPartition.apply(
                offsets, settings.consumer, settings.pollTimeoutMs, settings.failOnDataLoss, settings.includeHeaders);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return KafkaRangesReaderFactory.INSTANCE;
    }

    @Override
    public Offset deserializeOffset(String json) {
        return new JsonOffset(json);
    }

    @Override
    public void commit(Offset end) {
        batches.commit(end.json());
    }

    /**
     * {@code minOffsetsBehindLatest}, {@code maxOffsetsBehindLatest} and {@code
     * avgOffsetsBehindLatest} over the query's splits, as Spark's Kafka source reports them
     * (KafkaMicroBatchStream.metrics): none before a batch ran or while no split is known.
     */
    @Override
    public Map<String, String> metrics(Optional<Offset> latestConsumedOffset) {
        if (latestConsumedOffset.isEmpty()) {
            return Collections.emptyMap();
        }
        JsonNode behind = JvmReadPath.tree(planner.offsetsBehindLatest(latestConsumedOffset.get().json()));
        if (behind.isEmpty()) {
            return Collections.emptyMap();
        }
        long min = Long.MAX_VALUE;
        long max = Long.MIN_VALUE;
        long sum = 0;
        for (JsonNode split : behind) {
            long records = split.asLong();
            min = Math.min(min, records);
            max = Math.max(max, records);
            sum += records;
        }
        return Map.of(
                "minOffsetsBehindLatest", Long.toString(min),
                "maxOffsetsBehindLatest", Long.toString(max),
                "avgOffsetsBehindLatest", Double.toString((double) sum / behind.size()));
    }

    @Override
    public void stop() {
        batches.stop();
        planner.stop();
    }
}
