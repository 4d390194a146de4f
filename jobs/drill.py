"""spark-submit entry point: `ttl drill` (see `ttl drill --help`)."""

import sys

from ttl.cli import run

if __name__ == "__main__":
    sys.argv = [sys.argv[0], "drill", *sys.argv[1:]]
    run()
