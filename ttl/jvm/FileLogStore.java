package ttl.delta;

import java.io.BufferedOutputStream;
import java.io.File;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.Iterator;
import java.util.List;
import java.util.UUID;

import io.delta.storage.HDFSLogStore;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;

/**
 * Delta's log store for {@code file:} paths, with a listing that costs one directory read.
 *
 * <p>Delta lists {@code _delta_log} from a version on at every snapshot update (several per
 * write). {@code HDFSLogStore} does it with {@code FileSystem.listStatus}, which on the local
 * file system stats every file of the directory: four per commit (the commit, Delta's
 * checksum and Hadoop's two {@code .crc} files), so a log of 30,000 commits took 1.3-1.5 s a
 * listing. This one stats only the names at or after the requested one, which is what
 * {@code listFrom} returns: the same statuses, in the same order. The names come from
 * {@link WatchedNames}, which reads a directory once and then follows its changes (reading
 * the names of a 100,000-commit log took 0.1 s a listing); where it cannot, from a read of
 * the directory.
 *
 * <p>Writes go through Java's own file API. {@code HDFSLogStore} writes a commit through
 * Hadoop's {@code FileContext}, which, without Hadoop's native library (never there in a pip
 * install of PySpark), starts a process for every permission it sets and every link it
 * reads: a {@code chmod} for the temporary file and its {@code .crc}, and a
 * {@code readlink} for each of them and their targets in the rename, 10 processes a file and
 * 20 a batch (its commit and Delta's checksum file), about 4 ms each, on the commit's path.
 * And its rename on a local disk replaces a file that appeared meanwhile (Hadoop checks,
 * then renames). Here a commit is a temporary file hard-linked to its name: one
 * {@code link(2)}, which fails if the name exists, so two writers can never both write a
 * version (of the writers that use this store). Without hard links (some network or FUSE
 * file systems), {@code HDFSLogStore}'s write. An overwrite (Delta's {@code _last_checkpoint}) is an atomic rename, after removing
 * Hadoop's checksum of the old content. Neither writes a Hadoop {@code .crc} beside the
 * file: Hadoop reads a file without one unverified, as it does any file written outside it.
 */
public class FileLogStore extends HDFSLogStore {

    /** The Hadoop setting ({@code spark.hadoop.} in Spark's) that turns the watched listing
     * off ({@code false}): every listing then reads the directory's names. */
    public static final String WATCH_SETTING = "ttl.log.listing.watch";

    public FileLogStore(Configuration hadoopConf) {
        super(hadoopConf);
    }

    /** The local file behind {@code path}, or {@code null} when it is not on a local disk. */
    private static File localFile(Path path, Configuration hadoopConf) throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        if (fs instanceof LocalFileSystem) {
            return ((LocalFileSystem) fs).pathToFile(path);
        }
        if (fs instanceof RawLocalFileSystem) {
            return ((RawLocalFileSystem) fs).pathToFile(path);
        }
        return null;
    }

    @Override
    public void write(Path path, Iterator<String> actions, Boolean overwrite,
                      Configuration hadoopConf) throws IOException {
        File file = localFile(path, hadoopConf);
        if (file == null) {
            super.write(path, actions, overwrite, hadoopConf);
            return;
        }
        List<String> lines = new ArrayList<>();
        actions.forEachRemaining(lines::add);
        java.nio.file.Path target = file.toPath();
        java.nio.file.Path temp = target.resolveSibling(
            "." + file.getName() + "." + UUID.randomUUID() + ".tmp");
        try {
            try (OutputStream out = new BufferedOutputStream(Files.newOutputStream(
                    temp, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE))) {
                for (String line : lines) {
                    out.write((line + "\n").getBytes(StandardCharsets.UTF_8));
                }
            }
            boolean named;
            try {
                named = name(temp, target, overwrite);
            } catch (FileAlreadyExistsException exists) {
                throw new FileAlreadyExistsException(path.toString());  // as HDFSLogStore says
            }
            if (!named) {
                removeQuietly(temp);
                super.write(path, lines.iterator(), overwrite, hadoopConf);
            }
        } finally {
            // Best effort, as HDFSLogStore's clean-up after its rename: once the commit has
            // its name it is written, whatever happens to the temporary name.
            removeQuietly(temp);
        }
    }

    /**
     * Give the written file {@code temp} the name {@code target}: an atomic rename over it
     * with {@code overwrite}, else a hard link, which throws {@code FileAlreadyExistsException}
     * (java.nio's) when the name exists. First, a reader never sees the new content beside
     * an old checksum: Hadoop's {@code .crc} of an overwritten file, or one that a file
     * removed by hand left behind, is removed. {@code false}: the file system has no hard
     * links (nothing named; the caller writes its own way).
     */
    static boolean name(java.nio.file.Path temp, java.nio.file.Path target, boolean overwrite)
            throws IOException {
        Files.deleteIfExists(hadoopChecksum(target));
        if (overwrite) {
            Files.move(temp, target, StandardCopyOption.ATOMIC_MOVE,
                       StandardCopyOption.REPLACE_EXISTING);
            return true;
        }
        try {
            Files.createLink(target, temp);
        } catch (FileAlreadyExistsException exists) {
            throw exists;
        } catch (UnsupportedOperationException | IOException noLinks) {
            return false;
        }
        return true;
    }

    /** Hadoop's checksum file of {@code file} ({@code .NAME.crc} beside it). */
    static java.nio.file.Path hadoopChecksum(java.nio.file.Path file) {
        return file.resolveSibling("." + file.getFileName() + ".crc");
    }

    /** Remove a temporary file if it is there; a failure only leaves it (a hidden name,
     * which neither Delta's listing nor Spark's reads). */
    static void removeQuietly(java.nio.file.Path file) {
        try {
            Files.deleteIfExists(file);
        } catch (IOException ignored) {
            // left behind: harmless
        }
    }

    @Override
    public Iterator<FileStatus> listFrom(Path path, Configuration hadoopConf) throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        File dir;
        if (fs instanceof LocalFileSystem) {
            dir = ((LocalFileSystem) fs).pathToFile(path.getParent());
        } else if (fs instanceof RawLocalFileSystem) {
            dir = ((RawLocalFileSystem) fs).pathToFile(path.getParent());
        } else {
            return super.listFrom(path, hadoopConf);
        }
        String from = path.getName();
        List<String> names = null;
        if (hadoopConf.getBoolean(WATCH_SETTING, true)) {
            WatchedNames watched = WatchedNames.shared();
            if (watched != null) {
                names = watched.namesFrom(dir.toPath(), from);
            }
        }
        if (names == null) {
            String[] all = dir.list();
            if (all == null) {
                // Delta reads FileNotFoundException as "no table here": only for a missing
                // directory, never for one that cannot be read (permissions, no descriptors
                // left).
                if (!dir.exists()) {
                    throw new FileNotFoundException("No such directory: " + path.getParent());
                }
                throw new IOException("Cannot list " + dir + " (permissions, or an I/O error)");
            }
            names = Arrays.asList(all);
        }
        boolean checksummed = fs instanceof LocalFileSystem;
        List<FileStatus> found = new ArrayList<>();
        for (String name : names) {
            if (name.compareTo(from) < 0) {
                continue;
            }
            // LocalFileSystem hides Hadoop's checksum files from a listing; so do we.
            if (checksummed && name.startsWith(".") && name.endsWith(".crc")) {
                continue;
            }
            try {
                // A name as a path of its own, as Hadoop's listStatus makes it, so a colon
                // in it (a copied file's "x.json:Zone.Identifier") is no URI scheme.
                Path file = new Path(path.getParent(), new Path(null, null, name));
                found.add(fs.getFileStatus(file));
            } catch (FileNotFoundException gone) {
                // removed since the directory was read (a log clean-up): as listStatus does
            }
        }
        found.sort(Comparator.comparing(status -> status.getPath().getName()));
        return found.iterator();
    }
}
