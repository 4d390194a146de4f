package ttl.delta;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Iterator;

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
 * overwrites only files it may, such as {@code _last_checkpoint}) are plain PUTs.
 */
public class S3ConditionalLogStore extends S3SingleDriverLogStore {

    /** Hadoop's create option: fail when the file exists (S3A: {@code If-None-Match: *}). */
    static final String CREATE_IF_ABSENT = "fs.option.create.conditional.overwrite";

    public S3ConditionalLogStore(Configuration hadoopConf) {
        super(hadoopConf);
    }

    @Override
    public void write(
            Path path,
            Iterator<String> actions,
            Boolean overwrite,
            Configuration hadoopConf) throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        Path resolved = fs.makeQualified(path);
        FSDataOutputStream out;
        try {
            if (overwrite) {
                out = fs.create(resolved, true);
            } else {
                FSDataOutputStreamBuilder<?, ?> builder = fs.createFile(resolved);
                builder.overwrite(false);
                builder.must(CREATE_IF_ABSENT, true);
                out = builder.build();
            }
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
