package ttl.delta;

import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.FileSystems;
import java.nio.file.Files;
import java.nio.file.LinkOption;
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
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
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
 * names of a log of 100,000 commits (200,000 files) took about 0.1 s a listing. Here a
 * directory is read once, when first listed; after that Linux's inotify (Java's
 * {@code WatchService}) names every entry created, removed or renamed in it, by any process
 * on the host, and each such name is looked up again ({@code lstat}): what the events say
 * happened is not trusted, only that something happened to that name (a swap of two names,
 * {@code renameat2}'s exchange, reports one of them as removed).
 *
 * <p>Exact, not a cache that can be stale. Before a listing is answered: one entry of the
 * directory is read, which waits for a change still under way in it (the kernel holds the
 * directory's lock until the change's event is queued); then a <i>fence</i>: a file is
 * created in a directory watched by the same inotify instance, and the listing waits for its
 * event. The kernel queues an instance's events in the order the changes happen, and Java's
 * poller hands them on in that order, so once the fence's event is in, so is every event of
 * a change completed before the listing began. If events were lost (the kernel's queue, or a
 * key's list of 512, overflowed), the directory is read again. If a fence does not arrive
 * within two seconds (Java's poller thread gone), watching stops for the JVM. A directory
 * that cannot be watched, was removed or replaced while read, or any error: the caller reads
 * the directory itself. Not caught: a directory renamed away and another put at its path and
 * the two swapped back, all between this store's look at it and its registration (a few
 * microseconds), would leave the wrong directory watched.
 *
 * <p>Only where inotify reports every change: the local file systems named in {@link #LOCAL}
 * (not NFS, SMB or FUSE, whose other hosts' changes it never sees; not ZFS, whose rollback
 * and receive change a mounted directory without events; not overlay, whose layers can be
 * changed beneath it), and only on Linux (elsewhere Java's watch service polls). At most
 * {@link #MAX_DIRECTORIES} directories are watched, the least recently listed given up
 * first. Listings through it take one lock: one at a time in the JVM.
 */
public final class WatchedNames {

    /** File system types on which inotify reports every change of the host's processes. */
    static final Set<String> LOCAL =
        Set.of("ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "f2fs");
    static final int MAX_DIRECTORIES = 64;
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
    private final Map<WatchKey, Directory> byKey = new HashMap<>();
    /** Directories found on a file system inotify does not fully see (or out of watches). */
    private final Set<Object> unwatchable = new HashSet<>();

    private WatchedNames(WatchService service, Path fenceDirectory, WatchKey fenceKey) {
        this.service = service;
        this.fenceDirectory = fenceDirectory;
        this.fenceKey = fenceKey;
    }

    /** The JVM's one instance (one inotify instance, one poller thread), or {@code null}
     * where watching is not possible here (not Linux, no inotify instance left, a temporary
     * directory on a file system not in {@link #LOCAL}) or was given up. */
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

    /** Stop watching in this JVM; every listing reads its directory from now on. Nothing is
     * cancelled or closed: with the poller thread gone, either would wait for it forever. */
    private static synchronized void giveUp() {
        shared = null;
        unavailable = true;
    }

    /**
     * The names in {@code dir} that sort at or after {@code from}, sorted; {@code null} when
     * the caller must read the directory itself (not watched here, missing, removed or
     * replaced while read, or the fence did not arrive).
     */
    synchronized List<String> namesFrom(Path dir, String from) {
        Object fileKey = null;
        try {
            BasicFileAttributes attrs;
            try {
                attrs = Files.readAttributes(dir, BasicFileAttributes.class,
                                             LinkOption.NOFOLLOW_LINKS);
            } catch (NoSuchFileException missing) {
                return null;  // the caller says so
            }
            fileKey = attrs.fileKey();
            if (fileKey == null || !attrs.isDirectory() || unwatchable.contains(fileKey)) {
                return null;
            }
            waitForChangesUnderWay(dir);
            if (!fence()) {
                giveUp();
                return null;
            }
            Directory directory = directories.get(fileKey);
            if (directory != null && !directory.key.isValid()) {
                forget(fileKey);
                directory = null;
            }
            if (directory == null) {
                if (!local(dir)) {
                    markUnwatchable(fileKey);
                    return null;
                }
                directory = watch(dir, fileKey);
                if (directory == null) {
                    return null;
                }
            }
            if (directory.unknown) {
                directory.key.pollEvents();  // what they name, the read below shows
                directory.changed.clear();
                directory.names = Names.read(dir);
                directory.unknown = false;
                Object after = Files.readAttributes(dir, BasicFileAttributes.class,
                                                    LinkOption.NOFOLLOW_LINKS).fileKey();
                if (!fileKey.equals(after)) {  // replaced while read
                    forget(fileKey);
                    return null;
                }
            } else {
                directory.recheck(dir);
            }
            return directory.names.from(from);
        } catch (IOException | RuntimeException e) {
            if (fileKey != null) {
                forget(fileKey);
            }
            return null;
        }
    }

    /** Whether {@code dir} is on a file system in {@link #LOCAL} ({@code false} when its
     * mount cannot be found, as in some containers). */
    private static boolean local(Path dir) {
        try {
            return LOCAL.contains(Files.getFileStore(dir).type());
        } catch (IOException | RuntimeException unknown) {
            return false;
        }
    }

    /** Read one entry of {@code dir}: the kernel lists a directory under its lock, which a
     * change holds until its event is queued, so this returns after any change under way. */
    private static void waitForChangesUnderWay(Path dir) throws IOException {
        try (DirectoryStream<Path> entries = Files.newDirectoryStream(dir)) {
            entries.iterator().hasNext();
        }
    }

    private Directory watch(Path dir, Object fileKey) {
        while (directories.size() >= MAX_DIRECTORIES) {
            forget(directories.keySet().iterator().next());
        }
        WatchKey key;
        try {
            key = dir.register(service, StandardWatchEventKinds.ENTRY_CREATE,
                               StandardWatchEventKinds.ENTRY_DELETE);
        } catch (IOException noWatch) {  // the user's limit of inotify watches, say
            markUnwatchable(fileKey);
            return null;
        }
        Directory directory = new Directory(key);
        directories.put(fileKey, directory);
        byKey.put(key, directory);
        return directory;
    }

    private void markUnwatchable(Object fileKey) {
        if (unwatchable.size() >= 1_024) {
            unwatchable.clear();  // and try them again
        }
        unwatchable.add(fileKey);
    }

    private void forget(Object fileKey) {
        Directory gone = directories.remove(fileKey);
        if (gone != null) {
            byKey.remove(gone.key);
            gone.key.cancel();
        }
    }

    /**
     * Create a file in the fence directory and wait for its event, then take every watched
     * directory's events: all changes completed before this call are then named in them.
     * {@code false}: the event did not come in time.
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
                Directory directory = byKey.get(signalled);
                if (directory != null) {
                    directory.take(signalled.pollEvents());  // else reset queues it again
                }
                signalled.reset();  // so that it is signalled again
            }
        }
        for (Directory directory : directories.values()) {
            directory.take(directory.key.pollEvents());
        }
        return true;
    }

    /** A watched directory: its key, its names (unknown until read, or after events were
     * lost), and the names its events named since they were last looked up. */
    private static final class Directory {
        final WatchKey key;
        Names names;
        boolean unknown = true;
        final Set<String> changed = new HashSet<>();

        Directory(WatchKey key) {
            this.key = key;
        }

        void take(List<WatchEvent<?>> events) {
            for (WatchEvent<?> event : events) {
                if (event.kind() == StandardWatchEventKinds.OVERFLOW) {
                    unknown = true;
                    changed.clear();
                } else if (!unknown && event.context() != null) {
                    changed.add(event.context().toString());
                }
            }
        }

        /** Look up each name an event named: there now, or not. */
        void recheck(Path dir) {
            for (String name : changed) {
                if (Files.exists(dir.resolve(name), LinkOption.NOFOLLOW_LINKS)) {
                    names.add(name);
                } else {
                    names.remove(name);
                }
            }
            changed.clear();
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
        /** Versions from here on are kept as names: a stray name of a huge version would
         * otherwise size a bit set to it. */
        private static final int MAX_BIT = 1 << 26;

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
            set(name, true);
        }

        void remove(String name) {
            set(name, false);
        }

        /** Mark {@code name} there or not: as a version's bit when it has one of the
         * patterns' forms, else among the other names. */
        private void set(String name, boolean there) {
            for (int i = 0; i < PATTERNS.length; i++) {
                int version = version(name, PATTERNS[i]);
                if (version >= 0 && version < MAX_BIT) {
                    versions[i].set(version, there);
                    return;
                }
            }
            if (there) {
                others.add(name);
            } else {
                others.remove(name);
            }
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
