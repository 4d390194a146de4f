"""spark-submit entry point: `ttl restore` (see `ttl restore --help`)."""

import sys

from ttl.cli import run

if __name__ == "__main__":
    sys.argv = [sys.argv[0], "restore", *sys.argv[1:]]
    run()
