// Java's side of bench/bench_read.py: read a whole topic with DefaultLitePullConsumer (assign mode, every queue
// from offset 0) and print how long it took and this JVM's CPU time over that span (from asking for the
// topic's queues to the last message counted). Compiled and run against a kit's client jars by bench_read.py.
//
//   java -cp <kit lib/*>:<classes> LitePullRead NAMESRV TOPIC MESSAGES [PULL_BATCH_SIZE]

import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

public class LitePullRead {
    public static void main(String[] args) throws Exception {
        String namesrv = args[0];
        String topic = args[1];
        long expected = Long.parseLong(args[2]);
        int batch = args.length > 3 ? Integer.parseInt(args[3]) : 32;
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer("bench_read_" + System.nanoTime());
        consumer.setNamesrvAddr(namesrv);
        consumer.setPullBatchSize(batch);
        consumer.setAutoCommit(false);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.start();
        com.sun.management.OperatingSystemMXBean os =
            (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        long cpuStart = os.getProcessCpuTime();
        long start = System.nanoTime();
        Collection<MessageQueue> queues = consumer.fetchMessageQueues(topic);
        List<MessageQueue> assigned = new ArrayList<>(queues);
        // a new group, CONSUME_FROM_FIRST_OFFSET: every queue from offset 0 (a seekToBegin after assign() raced
        // with the pulls assign() started: in one run 16 messages were handed twice)
        consumer.assign(assigned);
        long count = 0;
        long duplicates = 0;
        Map<String, BitSet> seenOffsets = new HashMap<>();
        long bytes = 0;
        long idleSince = System.nanoTime();
        while (count < expected) {
            List<MessageExt> messages = consumer.poll(1000);
            if (messages.isEmpty()) {
                if (System.nanoTime() - idleSince > 30_000_000_000L) {
                    break;
                }
                continue;
            }
            idleSince = System.nanoTime();
            // one poll is one queue's pull: each offset of a queue is counted once (as a check: none
            // should be handed twice)
            MessageExt first = messages.get(0);
            BitSet seen = seenOffsets.computeIfAbsent(first.getBrokerName() + ":" + first.getQueueId(), k -> new BitSet());
            for (MessageExt m : messages) {
                int offset = (int) m.getQueueOffset();
                if (seen.get(offset)) {
                    duplicates++;
                    continue;
                }
                seen.set(offset);
                bytes += m.getBody().length;
                count++;
            }
        }
        long elapsed = System.nanoTime() - start;
        long cpu = os.getProcessCpuTime() - cpuStart;
        System.out.printf(
            "READ messages=%d bytes=%d ms=%.1f cpu_ms=%.1f duplicates=%d%n", count, bytes, elapsed / 1e6, cpu / 1e6, duplicates);
        consumer.shutdown();
    }
}
