package ttl.delta;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;

import org.apache.hadoop.fs.Path;

import org.apache.spark.sql.delta.DeltaLog;
import org.apache.spark.sql.delta.OptimisticTransaction;
import org.apache.spark.sql.delta.Snapshot;
import org.apache.spark.sql.delta.actions.Action;
import org.apache.spark.sql.delta.actions.AddFile;
import org.apache.spark.sql.delta.actions.DeletionVectorDescriptor;
import org.apache.spark.sql.delta.actions.RemoveFile;
import org.apache.spark.sql.delta.commands.DeletionVectorWriter;
import org.apache.spark.sql.delta.deletionvectors.RoaringBitmapArray;
import org.apache.spark.sql.delta.deletionvectors.RoaringBitmapArrayFormat;
import org.apache.spark.sql.delta.storage.dv.DeletionVectorStoreUtils;
import org.apache.spark.sql.delta.storage.dv.HadoopFileSystemDVStore;
import org.apache.spark.sql.delta.util.Utils;

import org.apache.spark.sql.catalyst.expressions.XXH64;
import org.apache.spark.sql.functions;
import org.apache.spark.unsafe.types.UTF8String;

import scala.Option;
import scala.Tuple2;

/**
 * The deletion vectors of ttl's replace and delete by position ({@code
 * ttl/store/positional.py}: a batch's write, a sweep): for each file whose rows it deletes,
 * the file's old vector and the new rows in one vector, written with Delta's own writer, and
 * the actions that give the file its new vector.
 *
 * <p>The same loop driven from Python made some twenty calls into the JVM a file, each a
 * round trip through Py4J (about 0.3 ms): 0.9 s for the hundred files a 100,000-key batch
 * touches in a 10M-key table. Here it is one call, and the rows cross once, as one array
 * (at most {@code positional.MAX_DELETES} of them).
 */
public final class PositionalDeletes {

    private PositionalDeletes() {}

    /**
     * The entries of {@code snapshot}'s files whose path is one of {@code paths} (one a
     * line): one call with one string, where a Java list built from Python costs a round
     * trip a path (0.2 s for the 1,900 names of a sweep that touches 630 files).
     */
    public static List<AddFile> entries(Snapshot snapshot, String paths) {
        List<String> names = Arrays.asList(paths.split("\n"));
        return snapshot.allFiles().where(functions.col("path").isInCollection(names))
            .collectAsList();
    }

    /**
     * Spark's {@code xxhash64} of a file's name (its path's last part, decoded): what the
     * executors' fold gives each stored row, from {@code _metadata.file_name}, to say which
     * file it is in without carrying the path through the shuffle.
     */
    public static long nameHash(String path) throws URISyntaxException {
        UTF8String name = UTF8String.fromString(new Path(new URI(path)).getName());
        return XXH64.hashUnsafeBytes(name.getBaseObject(), name.getBaseOffset(),
            name.numBytes(), 42L);
    }

    /**
     * {@link #delete} of the rows {@code rows[ends[i-1]..ends[i])} of the file of {@code
     * snapshot} whose name hashes to {@code ids[i]} ({@link #nameHash}), the files' entries
     * tracked as read by {@code transaction}. Throws {@link IllegalStateException}, with
     * nothing written, when an id names no file or two, or a file has no row count.
     */
    public static long[] deleteByName(DeltaLog log, OptimisticTransaction transaction,
                                      Snapshot snapshot, long[] ids, long[] rows, int[] ends,
                                      long now, List<Action> actions)
            throws IOException, URISyntaxException {
        List<Long> wanted = new ArrayList<>(ids.length);
        for (long id : ids) {
            wanted.add(id);
        }
        // The filter hashes the log's (encoded) name; the check below, the decoded one:
        // a name whose two differ is missed, and the batch takes Delta's write.
        List<AddFile> found = snapshot.allFiles()
            .where(functions.xxhash64(functions.regexp_extract(functions.col("path"),
                                                               "[^/]*$", 0))
                   .isInCollection(wanted))
            .collectAsList();
        Map<Long, AddFile> byId = new HashMap<>();
        for (AddFile file : found) {
            if (byId.put(nameHash(file.path()), file) != null) {
                throw new IllegalStateException("two files' names hash alike: " + file.path());
            }
        }
        List<AddFile> files = new ArrayList<>(ids.length);
        for (long id : ids) {
            AddFile file = byId.get(id);
            if (file == null) {
                throw new IllegalStateException("no file of version " + snapshot.version()
                    + " has the name hash " + id);
            }
            files.add(file);
        }
        String uncounted = uncounted(files);
        if (uncounted != null) {
            throw new IllegalStateException(uncounted + " has no row count in Delta's snapshot");
        }
        transaction.trackFilesRead(
            scala.jdk.javaapi.CollectionConverters.asScala(files).toSeq());
        return delete(log, transaction, files, rows, ends, now, actions);
    }

    /** The files' paths as Delta's log has them, one a line (one call, not one a file). */
    public static String paths(List<AddFile> files) {
        StringBuilder out = new StringBuilder();
        for (AddFile file : files) {
            if (out.length() > 0) {
                out.append('\n');
            }
            out.append(file.path());
        }
        return out.toString();
    }

    /**
     * The path of the first of {@code files} without a row count in its statistics (an entry
     * with a deletion vector needs one), or {@code null}.
     */
    public static String uncounted(List<AddFile> files) {
        for (AddFile file : files) {
            if (!file.numPhysicalRecords().isDefined()) {
                return file.path();
            }
        }
        return null;
    }

    /**
     * Deletes, in {@code transaction}, the rows {@code rows[ends[i-1]..ends[i])} of
     * {@code files.get(i)} (physical row indexes): adds to {@code actions} each such file's
     * entry with its new vector and the removal of its old entry, or only the removal when no
     * row is left; a file whose rows were all deleted already stays as it is. The vectors go
     * to one new vector file. Returns how many rows it deleted that were not deleted before,
     * and how many files it removed whole.
     */
    public static long[] delete(DeltaLog log, OptimisticTransaction transaction,
                              List<AddFile> files, long[] rows, int[] ends, long now,
                              List<Action> actions) throws IOException {
        HadoopFileSystemDVStore store = new HadoopFileSystemDVStore(log.newDeltaHadoopConf());
        String prefix = Utils.getRandomPrefix(Utils.getRandomPrefixLength(transaction.metadata()));
        Tuple2<DeletionVectorStoreUtils.Writer, UUID> created = DeletionVectorWriter.createWriter(
            store, store.pathWithFileSystem(log.dataPath()), prefix);
        DeletionVectorStoreUtils.Writer writer = created._1();
        long deleted = 0;
        long removed = 0;
        try {
            int start = 0;
            for (int i = 0; i < files.size(); i++) {
                AddFile file = files.get(i);
                DeletionVectorDescriptor old = file.deletionVector();
                RoaringBitmapArray bitmap = old != null ? store.read(old, log.dataPath())
                                                        : new RoaringBitmapArray();
                long before = bitmap.cardinality();
                for (int j = start; j < ends[i]; j++) {
                    bitmap.add(rows[j]);
                }
                start = ends[i];
                long cardinality = bitmap.cardinality();
                if (cardinality == before) {
                    continue;  // its rows were deleted already: the file stays as it is
                }
                deleted += cardinality - before;
                if ((Long) file.numPhysicalRecords().get() == cardinality) {
                    actions.add(file.removeWithTimestamp(now, true));  // no row left
                    removed++;
                    continue;
                }
                DeletionVectorStoreUtils.DVRangeDescriptor written =
                    writer.write(bitmap.serializeAsByteArray(RoaringBitmapArrayFormat.Portable()));
                DeletionVectorDescriptor vector = DeletionVectorDescriptor.onDiskWithRelativePath(
                    created._2(), prefix, written.length(), cardinality,
                    Option.apply((Object) written.offset()), Option.empty());
                Tuple2<AddFile, RemoveFile> pair = file.removeRows(vector, true, true);
                actions.add(pair._1());
                actions.add(pair._2());
            }
        } finally {
            writer.close();
        }
        return new long[] {deleted, removed};
    }
}
