package ttl.delta;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Comparator;
import java.util.Iterator;
import java.util.List;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.regex.Pattern;
import java.util.stream.Collectors;

import io.delta.storage.S3SingleDriverLogStore;
import io.delta.storage.internal.S3LogStoreUtil;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.FileStatus;
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
 * on, its default). Overwrites (Delta overwrites only files it may, such as
 * {@code _last_checkpoint}) are plain PUTs. A log is listed from a version on with S3's
 * {@code start-after}, not from the directory's first file; reads and other listings are
 * {@code S3SingleDriverLogStore}'s.
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

    static final String LOG_DIRECTORY = "_delta_log";

    /** What Delta lists a log from: a version's name or its prefix ({@code 00..042.}). */
    static final Pattern VERSION_PREFIX = Pattern.compile("[0-9]{20}");

    /** The file systems (scheme and bucket) seen refusing a second conditional PUT. */
    private static final Set<URI> HONOURED = ConcurrentHashMap.newKeySet();

    /** Whether {@link #listFrom} lists a log from a key ({@link #FAST_LIST_FROM}, default on). */
    private final boolean listsFromAKey;

    public S3ConditionalLogStore(Configuration hadoopConf) {
        super(wholeDirectoryListings(hadoopConf));
        this.listsFromAKey = hadoopConf.getBoolean(FAST_LIST_FROM, true);
    }

    /**
     * The configuration for {@code S3SingleDriverLogStore}, with its own fast listing off:
     * Delta 4.4's asks S3 for every key under the directory's name without a trailing
     * {@code /} or a delimiter, so a listing of a table's directory (VACUUM's, which goes
     * through the log store) would get its log's files and its sibling tables' files
     * ({@code <table>_lease/...}) as if they were its own. {@link #listFrom} lists from a key
     * itself, for the log's versions only.
     */
    static Configuration wholeDirectoryListings(Configuration hadoopConf) {
        Configuration copy = new Configuration(hadoopConf);
        copy.setBoolean(FAST_LIST_FROM, false);
        return copy;
    }

    /**
     * The log's files from a version on: by default {@code S3SingleDriverLogStore} lists the
     * whole {@code _delta_log} directory (every commit file the log's retention keeps, a
     * thousand keys a request) at each snapshot update; this asks S3 for the keys after the
     * one before the version ({@code start-after}) and keeps the directory's own files.
     * Anything else (a listing of a table's directory, a file system that is not S3A, an
     * explicit {@link #FAST_LIST_FROM} of false) is listed the whole-directory way.
     */
    @Override
    public Iterator<FileStatus> listFrom(Path path, Configuration hadoopConf) throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        Path from = fs.makeQualified(path);
        Path dir = from.getParent();
        if (!listsFromAKey || dir == null || !LOG_DIRECTORY.equals(dir.getName())
                || !VERSION_PREFIX.matcher(from.getName()).lookingAt()) {
            return super.listFrom(path, hadoopConf);
        }
        FileStatus[] listed;
        try {
            listed = S3LogStoreUtil.s3ListFromArray(fs, from, dir);
        } catch (UnsupportedOperationException e) {  // not S3A (Delta's fast path needs it)
            return super.listFrom(path, hadoopConf);
        }
        String dirPath = dir.toUri().getPath();
        String fromName = from.getName();
        List<FileStatus> own = Arrays.stream(listed)
                .filter(s -> dirPath.equals(s.getPath().getParent().toUri().getPath()))
                .filter(s -> s.getPath().getName().compareTo(fromName) >= 0)
                .sorted(Comparator.comparing(s -> s.getPath().getName()))
                .collect(Collectors.toList());
        if (own.isEmpty() && !fs.exists(dir)) {  // as a listing of a missing directory
            throw new FileNotFoundException("No such file or directory: " + dir);
        }
        return own.iterator();
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
