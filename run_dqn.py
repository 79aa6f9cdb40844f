"""Train Nature DQN on an Atari game with the serial reference procedure.

    python run_dqn.py --game=pong
"""

import sys

from fast_dqn.config import ALGO_DQN
from fast_dqn.launch import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], ALGO_DQN, exiting=True))
