// Java's side of bench/bench_read.py: read a whole topic with DefaultLitePullConsumer (assign mode, every queue
// from its min offset) and print how long it took and this JVM's CPU time over that span (from asking for the
// topic's queues to the last message counted). Compiled and run against a kit's client jars by bench_read.py.
//
//   java -cp <kit lib/*>:<classes> LitePullRead NAMESRV TOPIC MESSAGES [PULL_BATCH_SIZE]

import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
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
        consumer.assign(assigned);
        for (MessageQueue mq : assigned) {
            consumer.seekToBegin(mq);
        }
        long count = 0;
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
            for (MessageExt m : messages) {
                bytes += m.getBody().length;
            }
            count += messages.size();
        }
        long elapsed = System.nanoTime() - start;
        long cpu = os.getProcessCpuTime() - cpuStart;
        System.out.printf("READ messages=%d bytes=%d ms=%.1f cpu_ms=%.1f%n", count, bytes, elapsed / 1e6, cpu / 1e6);
        consumer.shutdown();
    }
}
