package ttl.delta;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.StandardOpenOption;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathFilter;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.UnsupportedFileSystemException;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;
import org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager;
import org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager;

/**
 * Spark's checkpoint file manager, with the atomic write of a file on a local disk done
 * through Java's own file API.
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
 * file without one unverified).
 *
 * <p>Every other path gets the manager Spark would have chosen without this setting (which,
 * once set, Spark applies to every path): the {@code FileContext}-based one, or, for a file
 * system without a {@code FileContext} binding, the {@code FileSystem}-based one. A local
 * file system without hard links keeps Spark's rename.
 */
public class LocalCheckpointFileManager implements CheckpointFileManager {

    private final CheckpointFileManager delegate;

    public LocalCheckpointFileManager(Path path, Configuration hadoopConf) {
        RawLocalFileSystem local = null;
        try {
            FileSystem fs = path.getFileSystem(hadoopConf);
            if (fs instanceof LocalFileSystem) {
                local = (RawLocalFileSystem) ((LocalFileSystem) fs).getRaw();
            } else if (fs instanceof RawLocalFileSystem) {
                local = (RawLocalFileSystem) fs;
            }
        } catch (IOException e) {
            local = null;  // Spark's own manager then reports what is wrong with the path
        }
        CheckpointFileManager chosen;
        try {
            chosen = local != null ? new LocalRenames(path, hadoopConf, local)
                                   : new FileContextBasedCheckpointFileManager(path, hadoopConf);
        } catch (Exception e) {  // Scala declares none; Spark falls back on this one
            if (!(e instanceof UnsupportedFileSystemException)) {
                throw LocalCheckpointFileManager.<RuntimeException>rethrow(e);
            }
            chosen = new FileSystemBasedCheckpointFileManager(path, hadoopConf);
        }
        this.delegate = chosen;
    }

    /** Throw {@code e} as it is: Scala declares no checked exceptions, and Spark's and
     * Delta's callers catch the I/O exceptions themselves (an existing name included). */
    @SuppressWarnings("unchecked")
    static <E extends Throwable> RuntimeException rethrow(Throwable e) throws E {
        throw (E) e;
    }

    @Override
    public CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible) {
        return delegate.createAtomic(path, overwriteIfPossible);
    }

    @Override
    public FSDataInputStream open(Path path) {
        return delegate.open(path);
    }

    @Override
    public FileStatus[] list(Path path, PathFilter filter) {
        return delegate.list(path, filter);
    }

    @Override
    public FileStatus[] list(Path path) {
        return delegate.list(path);
    }

    @Override
    public void mkdirs(Path path) {
        delegate.mkdirs(path);
    }

    @Override
    public boolean exists(Path path) {
        return delegate.exists(path);
    }

    @Override
    public void delete(Path path) {
        delegate.delete(path);
    }

    @Override
    public boolean isLocal() {
        return delegate.isLocal();
    }

    @Override
    public Path createCheckpointDirectory() {
        return delegate.createCheckpointDirectory();
    }

    @Override
    public void close() {
        delegate.close();
    }

    /** Spark's {@code FileContext}-based manager, with a local file's write and rename done
     * through Java's file API. */
    static final class LocalRenames extends FileContextBasedCheckpointFileManager {

        private final RawLocalFileSystem local;

        LocalRenames(Path path, Configuration hadoopConf, RawLocalFileSystem local) {
            super(path, hadoopConf);
            this.local = local;
        }

        private java.nio.file.Path file(Path path) {
            return local.pathToFile(path).toPath();
        }

        @Override
        public FSDataOutputStream createTempFile(Path path) {
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
            java.nio.file.Path src = file(srcPath);
            java.nio.file.Path dst = file(dstPath);
            try {
                if (!FileLogStore.name(src, dst, overwriteIfPossible)) {
                    super.renameTempFile(srcPath, dstPath, overwriteIfPossible);
                    return;
                }
            } catch (java.nio.file.FileAlreadyExistsException exists) {
                FileLogStore.removeQuietly(src);  // Spark's caller leaves it; nothing reads it
                throw LocalCheckpointFileManager.<RuntimeException>rethrow(
                    new FileAlreadyExistsException(dstPath + " already exists"));
            } catch (IOException e) {
                throw LocalCheckpointFileManager.<RuntimeException>rethrow(e);
            }
            FileLogStore.removeQuietly(src);  // written: never fail it for the temporary name
        }
    }
}
