"""The 49 Atari games of the Nature DQN study, with their random and human reference scores.

Source: Mnih et al. (2015), Nature 518, 529-533, Extended Data Table 2, the columns "Random
Play" and "Human", as printed (measured with up to 30 no-ops and 5 minutes of play). Games
are named by their ale-py ROM ids, the names `--game` takes.
"""

from __future__ import annotations

from typing import NamedTuple


class GameScores(NamedTuple):
    """Reference scores of one game (raw game score, not clipped)."""

    random: float
    human: float


# Extended Data Table 2 of Mnih et al. (2015): ROM id -> (random play, human).
_NATURE_SCORES: dict[str, GameScores] = {
    "alien": GameScores(227.8, 6875.0),
    "amidar": GameScores(5.8, 1676.0),
    "assault": GameScores(222.4, 1496.0),
    "asterix": GameScores(210.0, 8503.0),
    "asteroids": GameScores(719.1, 13157.0),
    "atlantis": GameScores(12850.0, 29028.0),
    "bank_heist": GameScores(14.2, 734.4),
    "battle_zone": GameScores(2360.0, 37800.0),
    "beam_rider": GameScores(363.9, 5775.0),
    "bowling": GameScores(23.1, 154.8),
    "boxing": GameScores(0.1, 4.3),
    "breakout": GameScores(1.7, 31.8),
    "centipede": GameScores(2091.0, 11963.0),
    "chopper_command": GameScores(811.0, 9882.0),
    "crazy_climber": GameScores(10781.0, 35411.0),
    "demon_attack": GameScores(152.1, 3401.0),
    "double_dunk": GameScores(-18.6, -15.5),
    "enduro": GameScores(0.0, 309.6),
    "fishing_derby": GameScores(-91.7, 5.5),
    "freeway": GameScores(0.0, 29.6),
    "frostbite": GameScores(65.2, 4335.0),
    "gopher": GameScores(257.6, 2321.0),
    "gravitar": GameScores(173.0, 2672.0),
    "hero": GameScores(1027.0, 25763.0),
    "ice_hockey": GameScores(-11.2, 0.9),
    "jamesbond": GameScores(29.0, 406.7),
    "kangaroo": GameScores(52.0, 3035.0),
    "krull": GameScores(1598.0, 2395.0),
    "kung_fu_master": GameScores(258.5, 22736.0),
    "montezuma_revenge": GameScores(0.0, 4367.0),
    "ms_pacman": GameScores(307.3, 15693.0),
    "name_this_game": GameScores(2292.0, 4076.0),
    "pong": GameScores(-20.7, 9.3),
    "private_eye": GameScores(24.9, 69571.0),
    "qbert": GameScores(163.9, 13455.0),
    "riverraid": GameScores(1339.0, 13513.0),
    "road_runner": GameScores(11.5, 7845.0),
    "robotank": GameScores(2.2, 11.9),
    "seaquest": GameScores(68.4, 20182.0),
    "space_invaders": GameScores(148.0, 1652.0),
    "star_gunner": GameScores(664.0, 10250.0),
    "tennis": GameScores(-23.8, -8.9),
    "time_pilot": GameScores(3568.0, 5925.0),
    "tutankham": GameScores(11.4, 167.7),
    "up_n_down": GameScores(533.4, 9082.0),
    "venture": GameScores(0.0, 1188.0),
    "video_pinball": GameScores(16257.0, 17298.0),
    "wizard_of_wor": GameScores(563.5, 4757.0),
    "zaxxon": GameScores(32.5, 9173.0),
}

NATURE_GAMES: tuple[str, ...] = tuple(sorted(_NATURE_SCORES))
"""The 49 games of the Nature study as ale-py ROM ids, in alphabetical order."""


def reference_scores(game: str) -> GameScores:
    """The Nature table's random-play and human scores of `game`, an ale-py ROM id.

    Raises:
      ValueError: `game` is not the ROM id of one of the 49 games of the Nature table.
    """
    try:
        return _NATURE_SCORES[game]
    except KeyError:
        raise ValueError(f"no reference scores for {game!r}: not the ROM id of one of the 49 "
                         "games of the Nature DQN table (see fast_dqn.atari_data.NATURE_GAMES)"
                         ) from None


def human_normalized_score(game: str, score: float) -> float:
    """100 * (score - random) / (human - random): 0 is random play, 100 the human tester.

    Raises:
      ValueError: `game` is not one of the 49 games of the Nature table.
    """
    reference = reference_scores(game)
    return 100.0 * (score - reference.random) / (reference.human - reference.random)
