// Test helper for tests/integration/test_codec_kafka_streams.py: prints the bytes that Kafka's
// own classes (kafka-streams / kafka-clients 4.3.1) produce and read, so the Python codec can be
// compared with them byte for byte. Compiled by the test at run time; not shipped.
//
// Protocol: one case per stdin line, fields separated by TAB; one answer line per case:
//   "ok<TAB>field..." | "null" | "err<TAB>ExceptionClass: message"
// Bytes travel as lowercase hex ("" = empty), "-" stands for null. Header lists are flat
// KEY_HEX<TAB>VALUE_HEX pairs, the key being its UTF-8 bytes.
//
//   varint N | varlong N | uvarint N | uvarlong N        ByteUtils.write*      -> ok HEX
//   readvarint HEX | readvarlong HEX                     ByteUtils.read*       -> ok N CONSUMED
//   ts VALUE TS                                          ValueAndTimestampSerializer -> ok HEX
//   dts HEX                                              ValueAndTimestampDeserializer
//                                                                              -> ok VALUE TS
//   vth VALUE TS [KEY VAL]...                            ValueTimestampHeadersSerializer
//   dvth HEX                                             ValueTimestampHeadersDeserializer
//                                                                  -> ok VALUE TS [KEY VAL]...
//   hdr [KEY VAL]...                                     HeadersSerializer.serialize
//   tsconv HEX                                 TimestampedBytesStore.convertToTimestampedFormat
//   conv HEX                                   HeadersBytesStore.convertToHeaderFormat
//   convplain HEX                              HeadersBytesStore.convertFromPlainToHeaderFormat
//   rawts HEX                                  Utils.rawTimestampedValue

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.common.utils.ByteUtils;
import org.apache.kafka.streams.state.HeadersBytesStore;
import org.apache.kafka.streams.state.TimestampedBytesStore;
import org.apache.kafka.streams.state.ValueAndTimestamp;
import org.apache.kafka.streams.state.ValueTimestampHeaders;
import org.apache.kafka.streams.state.internals.Utils;
import org.apache.kafka.streams.state.internals.ValueAndTimestampSerde;
import org.apache.kafka.streams.state.internals.ValueTimestampHeadersSerde;

public final class StreamsBytes {
    private static final String TOPIC = "codec-test";

    private static final ValueAndTimestampSerde<byte[]> TS_SERDE =
        new ValueAndTimestampSerde<>(Serdes.ByteArray());
    private static final ValueTimestampHeadersSerde<byte[]> VTH_SERDE =
        new ValueTimestampHeadersSerde<>(Serdes.ByteArray());

    public static void main(String[] args) throws Exception {
        Method headersSerialize = Class
            .forName("org.apache.kafka.streams.state.internals.HeadersSerializer")
            .getDeclaredMethod("serialize", Headers.class);
        headersSerialize.setAccessible(true);
        // Print what actually ran, so a report names the exact classes compared.
        System.err.println("classes: " + TS_SERDE.serializer().getClass().getName() + ", "
            + VTH_SERDE.serializer().getClass().getName() + ", "
            + headersSerialize.getDeclaringClass().getName());

        BufferedReader in = new BufferedReader(
            new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, false, "UTF-8");
        String line;
        while ((line = in.readLine()) != null) {
            String[] f = line.split("\t", -1);
            String answer;
            try {
                answer = run(f, headersSerialize);
            } catch (InvocationTargetException e) {
                answer = "err\t" + describe(e.getCause());
            } catch (RuntimeException e) {
                answer = "err\t" + describe(e);
            }
            out.println(answer);
        }
        out.flush();
    }

    private static String run(String[] f, Method headersSerialize) throws Exception {
        switch (f[0]) {
            case "varint": {
                ByteBuffer b = ByteBuffer.allocate(5);
                ByteUtils.writeVarint(Integer.parseInt(f[1]), b);
                return bytesAnswer(written(b));
            }
            case "varlong": {
                ByteBuffer b = ByteBuffer.allocate(10);
                ByteUtils.writeVarlong(Long.parseLong(f[1]), b);
                return bytesAnswer(written(b));
            }
            case "uvarint": {
                ByteBuffer b = ByteBuffer.allocate(5);
                ByteUtils.writeUnsignedVarint(Integer.parseUnsignedInt(f[1]), b);
                return bytesAnswer(written(b));
            }
            case "uvarlong": {
                ByteBuffer b = ByteBuffer.allocate(10);
                ByteUtils.writeUnsignedVarlong(Long.parseUnsignedLong(f[1]), b);
                return bytesAnswer(written(b));
            }
            case "readvarint": {
                ByteBuffer b = ByteBuffer.wrap(unhex(f[1]));
                int v = ByteUtils.readVarint(b);
                return ok(Integer.toString(v), Integer.toString(b.position()));
            }
            case "readvarlong": {
                ByteBuffer b = ByteBuffer.wrap(unhex(f[1]));
                long v = ByteUtils.readVarlong(b);
                return ok(Long.toString(v), Integer.toString(b.position()));
            }
            case "ts": {
                ValueAndTimestamp<byte[]> vt = ValueAndTimestamp.make(unhex(f[1]),
                    Long.parseLong(f[2]));
                return bytesAnswer(TS_SERDE.serializer().serialize(TOPIC, vt));
            }
            case "dts": {
                ValueAndTimestamp<byte[]> vt =
                    TS_SERDE.deserializer().deserialize(TOPIC, unhex(f[1]));
                if (vt == null) {
                    return "null";
                }
                return ok(hex(vt.value()), Long.toString(vt.timestamp()));
            }
            case "vth": {
                ValueTimestampHeaders<byte[]> vth = ValueTimestampHeaders.make(unhex(f[1]),
                    Long.parseLong(f[2]), headers(f, 3));
                return bytesAnswer(VTH_SERDE.serializer().serialize(TOPIC, vth));
            }
            case "dvth": {
                ValueTimestampHeaders<byte[]> vth =
                    VTH_SERDE.deserializer().deserialize(TOPIC, unhex(f[1]));
                if (vth == null) {
                    return "null";
                }
                List<String> fields = new ArrayList<>();
                fields.add(hex(vth.value()));
                fields.add(Long.toString(vth.timestamp()));
                for (Header h : vth.headers()) {
                    fields.add(hex(h.key().getBytes(StandardCharsets.UTF_8)));
                    fields.add(hex(h.value()));
                }
                return ok(fields.toArray(new String[0]));
            }
            case "hdr":
                return bytesAnswer((byte[]) headersSerialize.invoke(null, headers(f, 1)));
            case "tsconv":
                return bytesAnswer(TimestampedBytesStore.convertToTimestampedFormat(unhex(f[1])));
            case "conv":
                return bytesAnswer(HeadersBytesStore.convertToHeaderFormat(unhex(f[1])));
            case "convplain":
                return bytesAnswer(
                    HeadersBytesStore.convertFromPlainToHeaderFormat(unhex(f[1])));
            case "rawts":
                return bytesAnswer(Utils.rawTimestampedValue(unhex(f[1])));
            default:
                throw new IllegalArgumentException("unknown command " + f[0]);
        }
    }

    private static Headers headers(String[] f, int from) {
        if ((f.length - from) % 2 != 0) {
            throw new IllegalArgumentException("header fields must come in pairs");
        }
        RecordHeaders headers = new RecordHeaders();
        for (int i = from; i < f.length; i += 2) {
            headers.add(new String(unhex(f[i]), StandardCharsets.UTF_8), unhex(f[i + 1]));
        }
        return headers;
    }

    private static String bytesAnswer(byte[] bytes) {
        return bytes == null ? "null" : ok(hex(bytes));
    }

    private static String ok(String... fields) {
        return "ok\t" + String.join("\t", fields);
    }

    private static String describe(Throwable t) {
        return t.getClass().getName() + ": " + String.valueOf(t.getMessage()).replace('\n', ' ');
    }

    private static byte[] written(ByteBuffer b) {
        byte[] out = new byte[b.position()];
        b.flip();
        b.get(out);
        return out;
    }

    private static byte[] unhex(String s) {
        if (s.equals("-")) {
            return null;
        }
        byte[] out = new byte[s.length() / 2];
        for (int i = 0; i < out.length; i++) {
            out[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        }
        return out;
    }

    private static String hex(byte[] bytes) {
        if (bytes == null) {
            return "-";
        }
        StringBuilder sb = new StringBuilder(bytes.length * 2);
        for (byte x : bytes) {
            sb.append(String.format("%02x", x & 0xff));
        }
        return sb.toString();
    }
}
