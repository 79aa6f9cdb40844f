"""Tests of the Nature game list and the human-normalized score."""

import pytest

from fast_dqn import atari_data
from fast_dqn.atari import rom_ids


def test_forty_nine_distinct_games_all_shipped_by_ale_py():
    import ale_py.roms as roms
    games = atari_data.NATURE_GAMES
    assert len(games) == 49
    assert len(set(games)) == 49
    missing = sorted(set(games) - set(roms.get_all_rom_ids()))
    assert missing == []


@pytest.mark.parametrize(
    "game, score, expected",
    [
        # Pong: random -20.7, human 9.3 -> 100 * (0 + 20.7) / 30 = 69.0
        ("pong", 0.0, 69.0),
        # Breakout: random 1.7, human 31.8 -> 100 * (401.2 - 1.7) / 30.1 = 1327.24...
        # (the Nature table prints 1327% for DQN's 401.2)
        ("breakout", 401.2, 1327.2425249169435),
        # Video Pinball: random 16257, human 17298 -> 100 * 26427 / 1041 = 2538.6...
        ("video_pinball", 42684.0, 2538.6167146974063),
        # Double Dunk: both references negative -> 100 * (-17.05 + 18.6) / 3.1 = 50.0
        ("double_dunk", -17.05, 50.0),
    ],
)
def test_human_normalized_score_matches_hand_computation(game, score, expected):
    assert atari_data.human_normalized_score(game, score) == pytest.approx(expected)


def test_random_and_human_scores_normalize_to_0_and_100():
    for game in atari_data.NATURE_GAMES:
        reference = atari_data.reference_scores(game)
        assert reference.human != reference.random
        assert atari_data.human_normalized_score(game, reference.random) == pytest.approx(0.0)
        assert atari_data.human_normalized_score(game, reference.human) == pytest.approx(100.0)


def test_reference_scores_of_pong_and_breakout():
    assert atari_data.reference_scores("pong") == atari_data.GameScores(random=-20.7, human=9.3)
    assert atari_data.reference_scores("breakout") == atari_data.GameScores(1.7, 31.8)


@pytest.mark.parametrize("name", ["up_n_down", "montezuma_revenge", "kung_fu_master"])
def test_the_table_is_keyed_by_ale_py_rom_ids(name):
    assert name in rom_ids()
    atari_data.reference_scores(name)  # does not raise


def test_unknown_game_raises_value_error():
    with pytest.raises(ValueError, match="not the ROM id of one of the 49 games"):
        atari_data.human_normalized_score("tetris", 10.0)
