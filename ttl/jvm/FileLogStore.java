package ttl.delta;

import java.io.File;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.Iterator;
import java.util.List;

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
 * listing. This one reads the directory's names and stats only those at or after the
 * requested one, which is what {@code listFrom} returns: the same statuses, in the same
 * order, for a few milliseconds. Writes are {@code HDFSLogStore}'s, unchanged.
 */
public class FileLogStore extends HDFSLogStore {

    public FileLogStore(Configuration hadoopConf) {
        super(hadoopConf);
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
        String[] names = dir.list();
        if (names == null) {
            // Delta reads FileNotFoundException as "no table here": only for a missing
            // directory, never for one that cannot be read (permissions, no descriptors left).
            if (!dir.exists()) {
                throw new FileNotFoundException("No such directory: " + path.getParent());
            }
            throw new IOException("Cannot list " + dir + " (permissions, or an I/O error)");
        }
        String from = path.getName();
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
