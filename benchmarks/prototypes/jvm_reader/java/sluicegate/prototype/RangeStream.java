package sluicegate.prototype;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.kafka010.KafkaBatchInputPartition;
import org.apache.spark.sql.kafka010.KafkaBatchReaderFactory$;
import org.apache.spark.sql.kafka010.KafkaOffsetRange;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import scala.Option;

/**
 * The micro-batch stream: offsets and ranges from the Python planner, one Spark
 * {@code KafkaBatchInputPartition} per planned range, read by Spark's own
 * {@code KafkaBatchReaderFactory} (its cached consumers, its row conversion).
 */
final class RangeStream implements MicroBatchStream, SupportsTriggerAvailableNow {
    private static final long POLL_TIMEOUT_MS = 120_000;

    private final RangePlanner planner;
    private final Map<String, Object> executorKafkaParams;

    RangeStream(CaseInsensitiveStringMap options) {
        this.planner = PlannerRegistry.get(options.get("planner"));
        this.executorKafkaParams = executorKafkaParams(options);
    }

    /** As Spark's KafkaSourceProvider gives its executors: the user's kafka.* settings, bytes, no commits. */
    private static Map<String, Object> executorKafkaParams(CaseInsensitiveStringMap options) {
        Map<String, Object> params = new HashMap<>();
        for (Map.Entry<String, String> option : options.entrySet()) {
            if (option.getKey().startsWith("kafka.")) {
                params.put(option.getKey().substring("kafka.".length()), option.getValue());
            }
        }
        params.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        params.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        params.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
        params.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        params.put(ConsumerConfig.GROUP_ID_CONFIG, "sluicegate-jvm-prototype-executor");
        params.putIfAbsent(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        return params;
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
        return new JsonOffset(planner.latestOffset(start.json(), maxRows));
    }

    @Override
    public void prepareForTriggerAvailableNow() {
        planner.prepareForTriggerAvailableNow();
    }

    @Override
    public Offset latestOffset() {
        throw new UnsupportedOperationException("latestOffset(start, limit) is the one Spark calls");
    }

    @Override
    public InputPartition[] planInputPartitions(Offset start, Offset end) {
        List<InputPartition> partitions = new ArrayList<>();
        for (RangeJson.Range range : RangeJson.parse(planner.planRanges(start.json(), end.json()))) {
            KafkaOffsetRange offsets = KafkaOffsetRange.apply(
                    new TopicPartition(range.topic(), range.partition()), range.from(), range.until(), Option.empty());
            partitions.add(KafkaBatchInputPartition.apply(offsets, executorKafkaParams, POLL_TIMEOUT_MS, true, false));
        }
        return partitions.toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return KafkaBatchReaderFactory$.MODULE$;
    }

    @Override
    public Offset deserializeOffset(String json) {
        return new JsonOffset(json);
    }

    @Override
    public void commit(Offset end) {
        planner.commit(end.json());
    }

    @Override
    public void stop() {
        planner.stop();
    }
}
