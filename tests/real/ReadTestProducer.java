// Fills a topic as a Java application does (DefaultMQProducer of the kit's own client), for the reader's
// real-tier tests (test_reader.py) to read back. Compiled and run by test_reader.py with the kit's jars:
//
//   java -cp KIT/lib/*:CLASSES ReadTestProducer NAMESRV TOPIC COUNT PREFIX
//
// Message i: body "PREFIX-i" ("batched-PREFIX-i" for i < BATCHED; every 7th, i % 7 == 3, padded past 4 KiB,
// which the Java client compresses with zlib when sent alone), tags Tag0..Tag2 by i % 3, keys "k-i j-i", user
// properties row=i and origin=java. Messages 0..BATCHED-1 go in batches of 10 (MessageBatch: one request,
// stored one message at a time), the others one send each. One
// JSON line per message: its index and what the broker answered (msgId, offsetMsgId, brokerName, queue id,
// queue offset), split per message for a batch (an inner batch's one id and offset id repeated for each).
import com.alibaba.fastjson.JSON;
import java.nio.charset.StandardCharsets;
import java.util.*;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;

public class ReadTestProducer {
    static final int BATCHED = 40;
    static final int SYSTEM_BUSY = 2; // RemotingSysResponseCode.SYSTEM_BUSY (its package differs between 4.x and 5.x)

    static byte[] body(String prefix, int i) {
        StringBuilder b = new StringBuilder((i < BATCHED ? "batched-" : "") + prefix + "-" + i);
        if (i % 7 == 3) {
            while (b.length() < 5000) b.append(" padding-").append(i);
        }
        return b.toString().getBytes(StandardCharsets.UTF_8);
    }

    static Message message(String topic, String prefix, int i) {
        Message m = new Message(topic, "Tag" + (i % 3), "k-" + i + " j-" + i, body(prefix, i));
        m.putUserProperty("row", Integer.toString(i));
        m.putUserProperty("origin", "java");
        return m;
    }

    static void print(int first, SendResult r, int n) {
        if (r.getSendStatus() != SendStatus.SEND_OK) throw new IllegalStateException("send " + first + ": " + r);
        String[] ids = r.getMsgId().split(","), offsetIds = r.getOffsetMsgId().split(",");
        // a 5.x BatchCQ topic stores a batch as one inner-batch record: one id and one offset id for the batch
        boolean inner = n > 1 && ids.length == 1 && offsetIds.length == 1;
        if (!inner && (ids.length != n || offsetIds.length != n)) throw new IllegalStateException("batch of " + n + ": " + r);
        for (int j = 0; j < n; j++) {
            Map<String, Object> o = new LinkedHashMap<>();
            o.put("row", first + j);
            o.put("msgId", ids[inner ? 0 : j]);
            o.put("offsetMsgId", offsetIds[inner ? 0 : j]);
            o.put("broker", r.getMessageQueue().getBrokerName());
            o.put("queue", r.getMessageQueue().getQueueId());
            o.put("offset", r.getQueueOffset() + j);
            System.out.println(JSON.toJSONString(o));
        }
    }

    // A broker in flow control (SYSTEM_BUSY, code 2: "[TIMEOUT_CLEAN_QUEUE]broker busy" on a loaded machine) stored
    // nothing: the send is made again, up to 20 times, as an application would (the client retries other codes only).
    static <T> T busyRetried(java.util.concurrent.Callable<T> send) throws Exception {
        for (int attempt = 1; ; attempt++) {
            try {
                return send.call();
            } catch (MQBrokerException e) {
                if (e.getResponseCode() != SYSTEM_BUSY || attempt == 20) throw e;
                Thread.sleep(100L * attempt);
            }
        }
    }

    public static void main(String[] args) throws Exception {
        String namesrv = args[0], topic = args[1], prefix = args[3];
        int count = Integer.parseInt(args[2]);
        DefaultMQProducer p = new DefaultMQProducer("spark_rocketmq_read_test_" + System.nanoTime());
        p.setNamesrvAddr(namesrv);
        p.setSendMsgTimeout(15000);
        p.start();
        try {
            int i = 0;
            for (; i + 10 <= Math.min(BATCHED, count); i += 10) {
                List<Message> batch = new ArrayList<>();
                for (int j = i; j < i + 10; j++) batch.add(message(topic, prefix, j));
                print(i, busyRetried(() -> p.send(batch)), 10);
            }
            for (; i < count; i++) {
                Message m = message(topic, prefix, i);
                print(i, busyRetried(() -> p.send(m)), 1);
            }
        } finally {
            p.shutdown();
        }
    }
}
