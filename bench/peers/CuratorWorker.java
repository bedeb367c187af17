// CuratorWorker.java - one worker process of `make bench-peers` for Apache Curator's
// InterProcessSemaphoreV2 on ZooKeeper (Debian's libcurator-recipes-java), with the same loop as
// dbt_worker.c: until END, acquire a lease (limit L), count itself in the independent holder
// counter (Redis, spoken to directly in RESP), hold H ms, uncount, return the lease; cycles inside
// [START, END] recorded.
// usage: java CuratorWorker ZK_CONNECT COUNTER_PORT LIMIT HOLD_MS START_MS END_MS OUTFILE
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintWriter;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorWorker {
    static final String COUNT_UP = "local n = redis.call('INCR', KEYS[1]) "
            + "if n > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], n) end return n";

    /** The counter's Redis: just enough RESP for EVAL and DECR, whose replies are integers. */
    static final class Counter {
        final Socket s;
        final OutputStream out;
        final BufferedReader in;

        Counter(int port) throws Exception {
            s = new Socket("127.0.0.1", port);
            s.setTcpNoDelay(true);
            out = s.getOutputStream();
            in = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8));
        }

        String call(String... args) throws Exception {
            StringBuilder b = new StringBuilder("*").append(args.length).append("\r\n");
            for (String a : args) {
                byte[] bytes = a.getBytes(StandardCharsets.UTF_8);
                b.append('$').append(bytes.length).append("\r\n").append(a).append("\r\n");
            }
            out.write(b.toString().getBytes(StandardCharsets.UTF_8));
            out.flush();
            String line = in.readLine();
            if (line == null || line.startsWith("-"))
                throw new Exception("counter: " + line);
            return line;
        }
    }


    public static void main(String[] a) throws Exception {
        String zk = a[0];
        int limit = Integer.parseInt(a[2]);
        double hold = Double.parseDouble(a[3]), start = Double.parseDouble(a[4]), end = Double.parseDouble(a[5]);
        Counter ctr = new Counter(Integer.parseInt(a[1]));
        CuratorFramework client = CuratorFrameworkFactory.newClient(zk, new ExponentialBackoffRetry(100, 5));
        client.start();
        client.blockUntilConnected();
        InterProcessSemaphoreV2 sem = new InterProcessSemaphoreV2(client, "/dbthrottle-peers", limit);
        List<String> waits = new ArrayList<>();
        double held = 0;
        long cycles = 0;
        // Epoch milliseconds with sub-millisecond steps: the wall clock at start, then nanoTime.
        final double base = System.currentTimeMillis() - System.nanoTime() / 1e6;
        for (;;) {
            double t0 = base + System.nanoTime() / 1e6;
            if (t0 >= end)
                break;
            Lease lease = sem.acquire();
            double t1 = base + System.nanoTime() / 1e6;
            ctr.call("EVAL", COUNT_UP, "2", "holders", "most");
            if (hold > 0)
                Thread.sleep((long) hold);
            ctr.call("DECR", "holders");
            double t2 = base + System.nanoTime() / 1e6;
            sem.returnLease(lease);
            if (t0 >= start && t2 <= end) {
                waits.add(String.format(Locale.ROOT, "%.3f", t1 - t0));
                held += t2 - t1;
                cycles++;
            }
        }
        try (PrintWriter w = new PrintWriter(a[6], "UTF-8")) {
            w.printf(Locale.ROOT, "cycles %d%nheld_ms %.3f%n", cycles, held);
            for (String x : waits)
                w.println(x);
        }
        client.close();
        System.exit(0);
    }
}
