package ttl.delta;

import java.io.IOException;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.Iterator;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;

import io.delta.storage.S3SingleDriverLogStore;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Delta's log store for S3 with commits that exclude every other driver: a commit is a PUT
 * with {@code If-None-Match: *}, which S3 (since 2024) and compatible servers refuse with 412
 * when the version's file already exists, whoever wrote it.
 *
 * <p>Delta's {@code S3SingleDriverLogStore} checks for the file and then writes it, under a
 * lock that lives in one JVM: two drivers can both find version N absent and both write it,
 * the second overwriting the first. Here the store itself decides, atomically, so the loser
 * gets the {@code FileAlreadyExistsException} Delta turns into a retry of its transaction.
 * It needs Hadoop's S3A with conditional create (3.4.2 and later: the
 * {@code fs.option.create.conditional.overwrite} option, {@code fs.s3a.create.conditional.enabled}
 * on, its default). Reads and listings are {@code S3SingleDriverLogStore}'s; overwrites (Delta
 * overwrites only files it may, such as {@code _last_checkpoint}) are plain PUTs. Listings
 * start after a key (S3's {@code start-after}), not at the directory's first file.
 *
 * <p>A server that ignores {@code If-None-Match} (some S3-compatible ones) would make every
 * commit a blind PUT, worse than Delta's default; nothing in the answer to one PUT tells.
 * So before its first commit to a bucket a JVM proves the server honours it: it writes a
 * probe object under the log twice, and refuses to commit (an {@code IOException} naming
 * the bucket and the remedy) unless the second PUT is refused.
 */
public class S3ConditionalLogStore extends S3SingleDriverLogStore {

    /** Hadoop's create option: fail when the file exists (S3A: {@code If-None-Match: *}). */
    static final String CREATE_IF_ABSENT = "fs.option.create.conditional.overwrite";

    /** Delta's Hadoop setting: list the log from a key on (S3A's {@code start-after}). */
    static final String FAST_LIST_FROM = "delta.enableFastS3AListFrom";

    /** The file systems (scheme and bucket) seen refusing a second conditional PUT. */
    private static final Set<URI> HONOURED = ConcurrentHashMap.newKeySet();

    public S3ConditionalLogStore(Configuration hadoopConf) {
        super(listingFromAKey(hadoopConf));
    }

    /**
     * The Hadoop configuration {@code S3SingleDriverLogStore} reads its listing mode from,
     * with {@link #FAST_LIST_FROM} on unless the settings choose it: by default that store
     * lists the whole {@code _delta_log} directory (every commit file the log's retention
     * keeps, a thousand keys a request) at each snapshot update, where S3's
     * {@code start-after} lists only the files from the version asked for on.
     */
    static Configuration listingFromAKey(Configuration hadoopConf) {
        if (hadoopConf.get(FAST_LIST_FROM) != null) {
            return hadoopConf;
        }
        Configuration copy = new Configuration(hadoopConf);
        copy.setBoolean(FAST_LIST_FROM, true);
        return copy;
    }

    @Override
    public void write(
            Path path,
            Iterator<String> actions,
            Boolean overwrite,
            Configuration hadoopConf) throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        Path resolved = fs.makeQualified(path);
        if (!overwrite) {
            requireConditionalWrites(fs, resolved);
        }
        FSDataOutputStream out;
        try {
            out = overwrite ? fs.create(resolved, true) : createIfAbsent(fs, resolved);
        } catch (org.apache.hadoop.fs.FileAlreadyExistsException e) {
            throw new java.nio.file.FileAlreadyExistsException(resolved.toString());
        }
        try {
            while (actions.hasNext()) {
                out.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
            }
            out.close();  // the PUT: its condition is decided here
        } catch (IOException e) {
            if (!overwrite && preconditionFailed(e)) {
                throw new java.nio.file.FileAlreadyExistsException(resolved.toString());
            }
            throw e;
        }
    }

    /** A new file that S3 creates only if absent (the PUT, at close, has the condition). */
    static FSDataOutputStream createIfAbsent(FileSystem fs, Path path) throws IOException {
        FSDataOutputStreamBuilder<?, ?> builder = fs.createFile(path);
        builder.overwrite(false);
        builder.must(CREATE_IF_ABSENT, true);
        return builder.build();
    }

    /**
     * Refuse (an {@code IOException}) unless the server behind {@code fs} refuses a second
     * PUT with {@code If-None-Match: *} of one key: once per bucket and JVM, with a probe
     * object beside the log file (Delta lists only names that start with a version).
     */
    static void requireConditionalWrites(FileSystem fs, Path logFile) throws IOException {
        URI bucket = fs.getUri();
        if (HONOURED.contains(bucket)) {
            return;
        }
        Path probe = new Path(logFile.getParent(), ".ttl-if-none-match-" + UUID.randomUUID());
        try {
            try {
                createIfAbsent(fs, probe).close();
            } catch (IOException e) {
                throw new IOException("a PUT with If-None-Match: * to S3 at " + bucket
                        + " failed (" + e + "); it may have failed for another reason (access, "
                        + "throttling), but ttl.delta.S3ConditionalLogStore needs conditional "
                        + "writes: S3A's fs.s3a.create.conditional.enabled must be true, and "
                        + "where the server does not support them, use "
                        + "io.delta.storage.S3DynamoDBLogStore for spark.delta.logStore."
                        + bucket.getScheme() + ".impl (docs/operations.md#object-storage)", e);
            }
            boolean refused = false;
            try {
                createIfAbsent(fs, probe).close();
            } catch (IOException e) {
                if (!preconditionFailed(e)) {
                    throw e;
                }
                refused = true;
            }
            if (!refused) {
                throw new IOException("S3 at " + bucket + " accepted a second PUT of " + probe
                        + " with If-None-Match: *: it ignores conditional writes, so "
                        + "ttl.delta.S3ConditionalLogStore cannot keep a second driver from "
                        + "committing the same table version there; refusing to commit. Use a "
                        + "server that honours them (AWS S3 does), or "
                        + "io.delta.storage.S3DynamoDBLogStore for spark.delta.logStore."
                        + bucket.getScheme() + ".impl (docs/operations.md#object-storage)");
            }
            HONOURED.add(bucket);
        } finally {
            try {
                fs.delete(probe, false);
            } catch (IOException e) {
                // a probe left behind is a small object Delta never reads
            }
        }
    }

    /** Whether S3 refused the PUT because the object exists (412, in S3A's exceptions). */
    static boolean preconditionFailed(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            String name = t.getClass().getName();
            String message = String.valueOf(t.getMessage());
            if (name.endsWith("FileAlreadyExistsException")
                    || name.endsWith("RemoteFileChangedException")
                    || message.contains("PreconditionFailed")
                    || message.contains("Precondition Failed")) {
                return true;
            }
        }
        return false;
    }

    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
        return false;
    }
}
