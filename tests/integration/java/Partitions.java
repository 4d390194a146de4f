import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.HexFormat;
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;

/** For each hex key on stdin, the partition the Java producer picks among N (args[0]). */
public class Partitions {
    public static void main(String[] args) throws Exception {
        int n = Integer.parseInt(args[0]);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            byte[] key = HexFormat.of().parseHex(line.trim());
            System.out.println(BuiltInPartitioner.partitionForKey(key, n));
        }
    }
}
