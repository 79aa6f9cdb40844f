"""`python -m fast_dqn COMMAND ARGS`: train, serial, play or benchmark (fast_dqn/cli.py)."""

import sys

from fast_dqn.cli import main

if __name__ == "__main__":
    sys.exit(main())
