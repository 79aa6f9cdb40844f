"""Train Nature DQN on an Atari game with the concurrent, synchronized scheme.

    python run_fast_dqn.py --game=pong --workers=8
"""

import sys

from fast_dqn.config import ALGO_FAST_DQN
from fast_dqn.launch import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], ALGO_FAST_DQN, exiting=True))
