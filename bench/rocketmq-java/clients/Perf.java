import com.alibaba.fastjson.JSONObject;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;

/**
 * Perf NAMESRV TOPIC sync|async|batch N [size=100] [batch=100] [warm=2000] [inflight=1000]
 * Send rate of one DefaultMQProducer driven by one thread (the same calls as Produce, without its per-send output):
 * sync = send(msg) in a loop; async = send(msg, callback) with at most `inflight` outstanding; batch = send(list of
 * `batch` messages) in a loop. Bodies are `size` bytes. `warm` messages are sent first (route lookup, topic
 * auto-creation, JIT) and not timed. Prints one JSON line: msgs/s over the timed part.
 */
public class Perf {
    public static void main(String[] args) throws Exception {
        Cli c = new Cli(args, 4, "Perf NAMESRV TOPIC sync|async|batch N [size=100] [batch=100] [warm=2000] [inflight=1000]");
        String topic = c.pos.get(1);
        String mode = c.pos.get(2);
        int n = Integer.parseInt(c.pos.get(3));
        int size = c.getInt("size", 100);
        int batch = c.getInt("batch", 100);
        int warm = c.getInt("warm", 2000);
        int inflight = c.getInt("inflight", 1000);
        DefaultMQProducer p = new DefaultMQProducer(c.get("group", "perf_producer"), c.rpcHook());
        p.setNamesrvAddr(c.pos.get(0));
        p.setSendMsgTimeout(10000);
        p.start();
        byte[] body = new byte[size];
        java.util.Arrays.fill(body, (byte) 'x');
        AtomicInteger failed = new AtomicInteger();
        run(p, topic, mode, warm, body, batch, inflight, failed);
        long t0 = System.nanoTime();
        int sent = run(p, topic, mode, n, body, batch, inflight, failed);
        double secs = (System.nanoTime() - t0) / 1e9;
        JSONObject o = Cli.obj();
        o.put("summary", "Perf");
        o.put("mode", mode);
        o.put("messages", sent);
        o.put("size", size);
        if (mode.equals("batch")) {
            o.put("batch", batch);
        }
        o.put("seconds", Math.round(secs * 1000) / 1000.0);
        o.put("msgsPerSec", Math.round(sent / secs));
        o.put("failed", failed.get());
        Cli.out(o);
        p.shutdown();
        System.exit(failed.get() == 0 ? 0 : 1);
    }

    static int run(DefaultMQProducer p, String topic, String mode, int n, byte[] body, int batch, int inflight,
                   AtomicInteger failed) throws Exception {
        if (mode.equals("sync")) {
            for (int i = 0; i < n; i++) {
                try {
                    if (p.send(new Message(topic, body)).getSendStatus() != SendStatus.SEND_OK) {
                        failed.incrementAndGet();
                    }
                } catch (Exception e) {  // e.g. SYSTEM_BUSY flow control of a loaded broker: count, go on
                    failed.incrementAndGet();
                }
            }
            return n;
        }
        if (mode.equals("batch")) {
            int sent = 0;
            while (sent < n) {
                List<Message> l = new ArrayList<>(batch);
                for (int j = 0; j < batch; j++) {
                    l.add(new Message(topic, body));
                }
                try {
                    if (p.send(l).getSendStatus() != SendStatus.SEND_OK) {
                        failed.incrementAndGet();
                    }
                } catch (Exception e) {
                    failed.addAndGet(batch);
                }
                sent += batch;
            }
            return sent;
        }
        Semaphore window = new Semaphore(inflight);
        for (int i = 0; i < n; i++) {
            window.acquire();
            try {
                p.send(new Message(topic, body), new SendCallback() {
                public void onSuccess(SendResult r) {
                    window.release();
                }

                public void onException(Throwable e) {
                    failed.incrementAndGet();
                    window.release();
                }
                });
            } catch (Exception e) {
                failed.incrementAndGet();
                window.release();
            }
        }
        if (!window.tryAcquire(inflight, 60, TimeUnit.SECONDS)) {
            throw new IllegalStateException("async sends still outstanding after 60 s");
        }
        return n;
    }
}
