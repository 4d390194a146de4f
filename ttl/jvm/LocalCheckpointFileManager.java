package ttl.delta;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager;

/**
 * Spark's checkpoint file manager (Spark's default, {@code FileContext}-based), with the
 * atomic write of a file on a local disk done through Java's own file API.
 *
 * <p>Spark writes a streaming query's offsets and commits through it, and Delta each
 * version's checksum file: three small files a batch, each written to a temporary file and
 * renamed. Without Hadoop's native library (never there in a pip install of PySpark),
 * Hadoop's local file system starts a process for every permission it sets and every link
 * it reads: a {@code chmod} for the temporary file and its {@code .crc}, a {@code readlink}
 * for each of them and their targets in the rename, 10 processes a file, about 4 ms each on
 * the batch's path. Here the temporary file is written by Java and given its name by a hard
 * link ({@code link(2)}: fails if the name exists, as the rename without overwrite must) or,
 * to overwrite, an atomic rename; no Hadoop {@code .crc} is written beside it (Hadoop reads a
 * file without one unverified). Other file systems, and a local one without hard links, keep
 * Spark's code.
 */
public class LocalCheckpointFileManager extends FileContextBasedCheckpointFileManager {

    /** The local file system of the directory, or {@code null} when it is not local. */
    private final RawLocalFileSystem local;

    public LocalCheckpointFileManager(Path path, Configuration hadoopConf) {
        super(path, hadoopConf);
        RawLocalFileSystem raw = null;
        try {
            FileSystem fs = path.getFileSystem(hadoopConf);
            if (fs instanceof LocalFileSystem) {
                raw = (RawLocalFileSystem) ((LocalFileSystem) fs).getRaw();
            } else if (fs instanceof RawLocalFileSystem) {
                raw = (RawLocalFileSystem) fs;
            }
        } catch (IOException e) {
            raw = null;  // Spark's own code then reports what is wrong with the path
        }
        this.local = raw;
    }

    private java.nio.file.Path file(Path path) {
        return local.pathToFile(path).toPath();
    }

    /** Throw {@code e} as it is: Scala declares no checked exceptions, and Spark's and
     * Delta's callers catch the I/O exceptions themselves (an existing name included). */
    @SuppressWarnings("unchecked")
    private static <E extends Throwable> RuntimeException rethrow(Throwable e) throws E {
        throw (E) e;
    }

    @Override
    public FSDataOutputStream createTempFile(Path path) {
        if (local == null) {
            return super.createTempFile(path);
        }
        try {
            return new FSDataOutputStream(Files.newOutputStream(file(path),
                StandardOpenOption.CREATE, StandardOpenOption.TRUNCATE_EXISTING,
                StandardOpenOption.WRITE), null);
        } catch (IOException e) {
            throw LocalCheckpointFileManager.<RuntimeException>rethrow(e);
        }
    }

    @Override
    public void renameTempFile(Path srcPath, Path dstPath, boolean overwriteIfPossible) {
        if (local == null) {
            super.renameTempFile(srcPath, dstPath, overwriteIfPossible);
            return;
        }
        java.nio.file.Path src = file(srcPath);
        java.nio.file.Path dst = file(dstPath);
        try {
            if (overwriteIfPossible) {
                // First: a reader never sees the new content beside the old one's checksum.
                Files.deleteIfExists(dst.resolveSibling("." + dst.getFileName() + ".crc"));
                Files.move(src, dst, StandardCopyOption.ATOMIC_MOVE,
                           StandardCopyOption.REPLACE_EXISTING);
                return;
            }
            try {
                Files.createLink(dst, src);
            } catch (java.nio.file.FileAlreadyExistsException exists) {
                Files.deleteIfExists(src);  // Spark's caller leaves it, and nothing reads it
                throw LocalCheckpointFileManager.<RuntimeException>rethrow(
                    new FileAlreadyExistsException(dstPath + " already exists"));
            } catch (UnsupportedOperationException | IOException noLinks) {
                super.renameTempFile(srcPath, dstPath, false);
                return;
            }
            Files.delete(src);
        } catch (IOException e) {
            throw LocalCheckpointFileManager.<RuntimeException>rethrow(e);
        }
    }
}
