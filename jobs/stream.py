"""spark-submit entry point: the streaming job.

    spark-submit ... jobs/stream.py --conf local.toml [--available-now]
"""

import sys

from ttl.cli import run

if __name__ == "__main__":
    sys.argv = [sys.argv[0], "run", *sys.argv[1:]]
    run()
