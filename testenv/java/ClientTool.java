// A small command-line driver of the Apache Kafka Java client, used by offsetgate's end-to-end
// tests (run as a single-file program: java -cp 'libs/*' ClientTool.java MODE ...).
//
//   produce  BOOTSTRAP TOPIC COUNT PREFIX [transactional-id]   (-Dpause.ms: between two sends)
//   consume  BOOTSTRAP TOPIC COUNT TIMEOUT_MS [group]
//
// consume prints one line per record: partition offset leaderEpoch key value
// A system property kafka.NAME sets the client property NAME (-Dkafka.fetch.max.bytes=1024).
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.errors.RebalanceInProgressException;
import org.apache.kafka.common.serialization.*;

public class ClientTool {
    public static void main(String[] a) throws Exception {
        // Printed here: the single-file launcher of Java 17 can fail while trimming the stack
        // trace of an exception that leaves main, hiding it.
        try {
            switch (a[0]) {
                case "produce": produce(a[1], a[2], Integer.parseInt(a[3]), a[4], a.length > 5 ? a[5] : null); break;
                case "consume": consume(a[1], a[2], Integer.parseInt(a[3]), Long.parseLong(a[4]), a.length > 5 ? a[5] : null); break;
                default: throw new IllegalArgumentException("unknown mode " + a[0]);
            }
        } catch (Throwable t) {
            t.printStackTrace();
            System.exit(1);
        }
    }

    static void produce(String bootstrap, String topic, int count, String prefix, String txnId) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("acks", "all");
        p.put("linger.ms", "5");
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        if (txnId != null) p.put("transactional.id", txnId);
        try (KafkaProducer<String, String> pr = new KafkaProducer<>(p)) {
            if (txnId != null) { pr.initTransactions(); pr.beginTransaction(); }
            List<java.util.concurrent.Future<RecordMetadata>> fs = new ArrayList<>();
            // -Dpause.ms makes a steady producer (tests change things under it).
            long pause = Long.getLong("pause.ms", 0L);
            for (int i = 0; i < count; i++) {
                fs.add(pr.send(new ProducerRecord<>(topic, prefix + "-k" + i, prefix + "-v" + i)));
                if (pause > 0) Thread.sleep(pause);
            }
            if (txnId != null) pr.commitTransaction();
            for (var f : fs) f.get();
        }
        System.out.println("produced " + count);
    }

    static void consume(String bootstrap, String topic, int count, long timeoutMs, String group) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.put("auto.offset.reset", "earliest");
        p.put("isolation.level", System.getProperty("isolation.level", "read_committed"));
        // -Dmax.poll.records and -Dpause.ms make a slow consumer (tests move leaders under it).
        String maxPoll = System.getProperty("max.poll.records");
        if (maxPoll != null) p.put("max.poll.records", maxPoll);
        long pause = Long.getLong("pause.ms", 0L);
        for (String k : System.getProperties().stringPropertyNames()) {
            if (k.startsWith("kafka.")) p.put(k.substring("kafka.".length()), System.getProperty(k));
        }
        if (group != null) {
            p.put("group.id", group);
            p.put("enable.auto.commit", "false");
        }
        int got = 0;
        long deadline = System.currentTimeMillis() + timeoutMs;
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            if (group != null) {
                // What a consumer that commits after processing does to process each record
                // once: commit what it processed of the partitions it gives up.
                c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                    public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                        Map<TopicPartition, OffsetAndMetadata> done = new HashMap<>();
                        for (TopicPartition tp : parts) done.put(tp, new OffsetAndMetadata(c.position(tp)));
                        if (!done.isEmpty()) c.commitSync(done);
                    }
                    public void onPartitionsAssigned(Collection<TopicPartition> parts) {}
                });
            } else {
                List<TopicPartition> tps = new ArrayList<>();
                for (PartitionInfo pi : c.partitionsFor(topic)) tps.add(new TopicPartition(topic, pi.partition()));
                c.assign(tps);
                c.seekToBeginning(tps);
            }
            while (got < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    System.out.println(r.partition() + " " + r.offset() + " " + r.leaderEpoch().orElse(-1) + " " + r.key() + " " + r.value());
                    got++;
                }
                if (group != null) {
                    try {
                        c.commitSync();
                    } catch (RebalanceInProgressException e) {
                        // The next poll completes the rebalance; what was processed is
                        // committed by onPartitionsRevoked or by the next commit.
                    }
                }
                if (pause > 0) {
                    try { Thread.sleep(pause); } catch (InterruptedException e) { return; }
                }
            }
        }
        if (got < count) {
            System.err.println("consumed " + got + " of " + count + " before the timeout");
            System.exit(1);
        }
    }
}
