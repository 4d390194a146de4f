package ttl.delta;

import java.io.IOException;
import java.nio.file.FileSystems;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardWatchEventKinds;
import java.nio.file.WatchEvent;
import java.nio.file.WatchKey;
import java.nio.file.WatchService;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The names in local directories, read once and then kept current from the kernel's change
 * notifications, so that listing a long Delta log costs what changed since the last listing,
 * not a read of every name in it.
 *
 * <p>Delta lists {@code _delta_log} at every snapshot update, six times a batch; reading the
 * names of a log of 100,000 commits (200,000 files) took about 0.1 s, a listing. Here a
 * directory is read once, when first listed; after that Linux's inotify (Java's
 * {@code WatchService}) reports every name created, removed or renamed in it, by any process
 * on the host.
 *
 * <p>Exact, not a cache that can be stale: before a listing is answered, a <i>fence</i> makes
 * sure every notification of a change that completed before the listing began has been
 * received. A file is created and removed in a directory watched by the same inotify
 * instance; the kernel queues one instance's events in the order the changes happen, and
 * Java's poller hands them on in that order, so once the fence's own event has arrived, so
 * have all earlier ones. If notifications were lost (the kernel's queue, or a key's list of
 * 512, overflowed), the directory is read again; a fence that does not arrive within two
 * seconds, a directory that was removed or replaced, or any error, and the caller reads the
 * directory itself.
 *
 * <p>Only where inotify sees every change: the local file systems named in {@link #LOCAL}
 * (not NFS, SMB or FUSE, whose other hosts' changes it never reports), and only on Linux
 * (elsewhere Java's watch service polls, and is not used). At most {@link #MAX_DIRECTORIES}
 * directories are watched, the least recently listed given up first.
 */
public final class WatchedNames {

    /** File system types on which inotify reports every change of the host's processes. */
    static final Set<String> LOCAL = Set.of(
        "ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "zfs", "f2fs", "overlay");
    static final int MAX_DIRECTORIES = 32;
    private static final long FENCE_TIMEOUT_MS = 2_000;

    private static WatchedNames shared;
    private static boolean unavailable;

    /** Full reads of a directory's names, for tests to see that the watch answered. */
    private static final AtomicLong READS = new AtomicLong();

    /** How many times a watched directory's names were read in full, in this JVM. */
    public static long reads() {
        return READS.get();
    }

    private final WatchService service;
    private final Path fenceDirectory;
    private final WatchKey fenceKey;
    private long fences;
    /** By the directory's file key (device and inode), least recently listed first. */
    private final LinkedHashMap<Object, Directory> directories =
        new LinkedHashMap<>(16, 0.75f, true);
    /** Directories found on a file system inotify does not fully see. */
    private final Set<Object> unwatchable = new HashSet<>();

    private WatchedNames(WatchService service, Path fenceDirectory, WatchKey fenceKey) {
        this.service = service;
        this.fenceDirectory = fenceDirectory;
        this.fenceKey = fenceKey;
    }

    /** The JVM's one instance (one inotify instance, one poller thread), or {@code null}
     * where watching is not possible here (not Linux, no inotify instance left, a temporary
     * directory on a file system not in {@link #LOCAL}). */
    static synchronized WatchedNames shared() {
        if (shared != null || unavailable) {
            return shared;
        }
        try {
            WatchService service = FileSystems.getDefault().newWatchService();
            if (!service.getClass().getName().equals("sun.nio.fs.LinuxWatchService")) {
                service.close();  // a polling service would report changes seconds late
                unavailable = true;
                return null;
            }
            Path fences = Files.createTempDirectory("ttl-log-fence-");
            fences.toFile().deleteOnExit();
            if (!LOCAL.contains(Files.getFileStore(fences).type())) {
                service.close();
                unavailable = true;
                return null;
            }
            WatchKey key = fences.register(service, StandardWatchEventKinds.ENTRY_CREATE);
            shared = new WatchedNames(service, fences, key);
        } catch (IOException | RuntimeException e) {
            unavailable = true;
        }
        return shared;
    }

    /**
     * The names in {@code dir} that sort at or after {@code from}, sorted; {@code null} when
     * the caller must read the directory itself (not watched here, removed, replaced while
     * read, or the fence did not arrive).
     */
    synchronized List<String> namesFrom(Path dir, String from) {
        try {
            if (!fence()) {
                forgetAll();
                return null;
            }
            BasicFileAttributes attrs;
            try {
                attrs = Files.readAttributes(dir, BasicFileAttributes.class);
            } catch (NoSuchFileException missing) {
                return null;  // the caller says so
            }
            Object fileKey = attrs.fileKey();
            if (fileKey == null || !attrs.isDirectory() || unwatchable.contains(fileKey)) {
                return null;
            }
            Directory directory = directories.get(fileKey);
            if (directory != null && !directory.key.isValid()) {
                directories.remove(fileKey);
                directory = null;
            }
            if (directory == null) {
                if (!LOCAL.contains(Files.getFileStore(dir).type())) {
                    unwatchable.add(fileKey);
                    return null;
                }
                directory = watch(dir, fileKey);
                if (directory == null) {
                    return null;
                }
            }
            if (directory.unknown) {
                directory.key.pollEvents();  // what they say, the read below shows
                directory.names = Names.read(dir);
                directory.unknown = false;
                Object after = Files.readAttributes(dir, BasicFileAttributes.class).fileKey();
                if (!fileKey.equals(after)) {  // replaced while read
                    forget(fileKey);
                    return null;
                }
            }
            return directory.names.from(from);
        } catch (IOException | RuntimeException e) {
            forgetAll();
            return null;
        }
    }

    private Directory watch(Path dir, Object fileKey) throws IOException {
        while (directories.size() >= MAX_DIRECTORIES) {
            forget(directories.keySet().iterator().next());
        }
        WatchKey key;
        try {
            key = dir.register(service, StandardWatchEventKinds.ENTRY_CREATE,
                               StandardWatchEventKinds.ENTRY_DELETE);
        } catch (IOException noWatch) {  // the user's limit of inotify watches, say
            unwatchable.add(fileKey);
            return null;
        }
        Directory directory = new Directory(key);
        directories.put(fileKey, directory);
        return directory;
    }

    private void forget(Object fileKey) {
        Directory gone = directories.remove(fileKey);
        if (gone != null) {
            gone.key.cancel();
        }
    }

    private void forgetAll() {
        for (Object fileKey : new ArrayList<>(directories.keySet())) {
            forget(fileKey);
        }
    }

    /**
     * Make and remove a file in the fence directory, wait for its creation's event, then
     * apply every watched directory's events: all changes completed before this call are
     * then in the names. {@code false}: the event did not come in time.
     */
    private boolean fence() throws IOException {
        Path mark = fenceDirectory.resolve("fence-" + (++fences));
        Files.createFile(mark);
        Files.delete(mark);
        Path name = mark.getFileName();
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(FENCE_TIMEOUT_MS);
        boolean seen = false;
        while (!seen) {
            for (WatchEvent<?> event : fenceKey.pollEvents()) {
                if (event.kind() == StandardWatchEventKinds.OVERFLOW) {
                    // the kernel dropped events (its queue was full): every directory unknown
                    for (Directory directory : directories.values()) {
                        directory.unknown = true;
                    }
                    seen = true;
                } else if (name.equals(event.context())) {
                    seen = true;
                }
            }
            if (seen) {
                break;
            }
            long left = deadline - System.nanoTime();
            if (left <= 0) {
                return false;
            }
            WatchKey signalled;
            try {
                signalled = service.poll(left, TimeUnit.NANOSECONDS);
            } catch (InterruptedException interrupted) {
                Thread.currentThread().interrupt();
                return false;
            }
            if (signalled != null) {
                signalled.reset();  // so that it is signalled again
            }
        }
        for (Directory directory : directories.values()) {
            directory.apply(directory.key.pollEvents());
        }
        return true;
    }

    /** A watched directory: its key and its names (unknown until read, or after events were
     * lost). */
    private static final class Directory {
        final WatchKey key;
        Names names;
        boolean unknown = true;

        Directory(WatchKey key) {
            this.key = key;
        }

        void apply(List<WatchEvent<?>> events) {
            for (WatchEvent<?> event : events) {
                WatchEvent.Kind<?> kind = event.kind();
                if (kind == StandardWatchEventKinds.OVERFLOW) {
                    unknown = true;
                } else if (!unknown) {
                    String name = event.context().toString();
                    if (kind == StandardWatchEventKinds.ENTRY_CREATE) {
                        names.add(name);
                    } else if (kind == StandardWatchEventKinds.ENTRY_DELETE) {
                        names.remove(name);
                    }
                }
            }
        }
    }

    /**
     * A directory's names: the log's own, a version in 20 digits with one of a few suffixes,
     * as bits by version (a million commits in a few hundred KB); any other name as it is.
     */
    static final class Names {
        /** Prefix and suffix around the 20-digit version: Delta's commits and checksums,
         * and Hadoop's checksum files of each. */
        private static final String[][] PATTERNS = {
            {"", ".json"}, {"", ".crc"}, {".", ".json.crc"}, {".", ".crc.crc"}};
        private static final int DIGITS = 20;

        private final BitSet[] versions = new BitSet[PATTERNS.length];
        private final TreeSet<String> others = new TreeSet<>();

        Names() {
            for (int i = 0; i < versions.length; i++) {
                versions[i] = new BitSet();
            }
        }

        static Names read(Path dir) throws IOException {
            String[] all = dir.toFile().list();
            if (all == null) {
                throw new IOException("cannot read " + dir);
            }
            READS.incrementAndGet();
            Names names = new Names();
            for (String name : all) {
                names.add(name);
            }
            return names;
        }

        void add(String name) {
            for (int i = 0; i < PATTERNS.length; i++) {
                int version = version(name, PATTERNS[i]);
                if (version >= 0) {
                    versions[i].set(version);
                    return;
                }
            }
            others.add(name);
        }

        void remove(String name) {
            for (int i = 0; i < PATTERNS.length; i++) {
                int version = version(name, PATTERNS[i]);
                if (version >= 0) {
                    versions[i].clear(version);
                    return;
                }
            }
            others.remove(name);
        }

        /** The names at or after {@code from}, sorted. */
        List<String> from(String from) {
            // Names of a version below from's own (its first 20 digits) sort before it;
            // the dotted patterns sort before any name that starts with a digit.
            int first = leadingVersion(from);
            char lead = from.isEmpty() ? 0 : from.charAt(0);
            List<String> found = new ArrayList<>(others.tailSet(from, true));
            for (int i = 0; i < PATTERNS.length; i++) {
                // Every name of a pattern starts with a dot or a digit: none can be at or
                // after a start whose first character sorts after that.
                char patternLead = PATTERNS[i][0].isEmpty() ? '9' : '.';
                if (lead > patternLead) {
                    continue;
                }
                BitSet bits = versions[i];
                for (int v = bits.nextSetBit(Math.max(first, 0)); v >= 0;
                     v = bits.nextSetBit(v + 1)) {
                    String name = name(v, PATTERNS[i]);
                    if (name.compareTo(from) >= 0) {
                        found.add(name);
                    }
                    if (v == Integer.MAX_VALUE) {
                        break;
                    }
                }
            }
            Collections.sort(found);
            return found;
        }

        /** The version in {@code name} if it has the pattern's form (and fits an int), else -1. */
        static int version(String name, String[] pattern) {
            String prefix = pattern[0];
            String suffix = pattern[1];
            if (name.length() != prefix.length() + DIGITS + suffix.length()
                    || !name.startsWith(prefix) || !name.endsWith(suffix)) {
                return -1;
            }
            long value = 0;
            for (int i = prefix.length(); i < prefix.length() + DIGITS; i++) {
                char c = name.charAt(i);
                if (c < '0' || c > '9') {
                    return -1;
                }
                value = value * 10 + (c - '0');
                if (value > Integer.MAX_VALUE) {
                    return -1;
                }
            }
            return (int) value;
        }

        /** The version in from's first 20 characters, if they are digits (so names of lower
         * versions sort before it), else 0. */
        static int leadingVersion(String from) {
            if (from.length() < DIGITS) {
                return 0;
            }
            long value = 0;
            for (int i = 0; i < DIGITS; i++) {
                char c = from.charAt(i);
                if (c < '0' || c > '9') {
                    return 0;
                }
                value = value * 10 + (c - '0');
                if (value > Integer.MAX_VALUE) {
                    return Integer.MAX_VALUE;
                }
            }
            return (int) value;
        }

        static String name(int version, String[] pattern) {
            String digits = Integer.toString(version);
            StringBuilder name = new StringBuilder(pattern[0]);
            for (int i = digits.length(); i < DIGITS; i++) {
                name.append('0');
            }
            return name.append(digits).append(pattern[1]).toString();
        }
    }
}
