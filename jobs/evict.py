"""spark-submit entry point: one eviction sweep (skips, exit 0, while a stream owns the table).

    spark-submit ... jobs/evict.py --conf cluster.toml [--clock wall|stream] [--dry-run]
"""

import sys

from ttl.cli import run

if __name__ == "__main__":
    sys.argv = [sys.argv[0], "evict", *sys.argv[1:]]
    run()
