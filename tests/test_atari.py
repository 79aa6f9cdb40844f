"""Tests of the single-game Nature pipeline (fast_dqn/atari.py); CPU only, no TensorFlow."""

from __future__ import annotations

import re

import cv2
import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import AtariPreprocessing

from fast_dqn.atari import (AtariEnv, AtariStep, GameSettings, game_of_new_run, gymnasium_id,
                            gymnasium_id_defaults, make_atari_env, resolve_game)
from fast_dqn.config import Config, with_protocol

BREAKOUT_LIVES = 5


def make(game: str = "breakout", seed: int = 0, **kwargs) -> AtariEnv:
    return make_atari_env(GameSettings(game, **({"noop_max": 0} | kwargs)), seed=seed)


def frames_since_reset(env: AtariEnv) -> int:
    """Emulator frames since the game's emulator reset (the FIRE and no-ops included), as
    ALE counts them."""
    return int(env._ale.getEpisodeFrameNumber())


def random_actions(n_actions: int, steps: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n_actions, size=steps)


def area_resize(screen: np.ndarray) -> np.ndarray:
    return cv2.resize(screen, (84, 84), interpolation=cv2.INTER_AREA)


def reference_run(game: str, actions: np.ndarray) -> tuple[list[np.ndarray], list[float], int]:
    """Steps a raw frameskip=1 ALE env by hand: FIRE once, then 4 frames per action,
    max over the last 2 grayscale frames, area resize. Returns frames, rewards, and the
    number of steps whose max-pooled frame differs from the last frame alone."""
    raw = gym.make(gymnasium_id(game), frameskip=1, repeat_action_probability=0.0,
                   obs_type="grayscale")
    screen, _ = raw.reset(seed=0)
    meanings = raw.unwrapped.get_action_meanings()
    if "FIRE" in meanings:
        screen, *_ = raw.step(meanings.index("FIRE"))
    frames, rewards, max_mattered = [area_resize(screen)], [], 0
    for action in actions:
        total, last_two = 0.0, []
        for frame_index in range(4):
            screen, reward, terminated, truncated, _ = raw.step(int(action))
            assert not (terminated or truncated), "reference run must stay within one game"
            total += reward
            if frame_index >= 2:
                last_two.append(screen)
        pooled = area_resize(np.maximum(*last_two))
        max_mattered += not np.array_equal(pooled, area_resize(last_two[-1]))
        frames.append(pooled)
        rewards.append(total)
    raw.close()
    return frames, rewards, max_mattered


def play_actions(env: AtariEnv, actions: np.ndarray,
                 seed: int = 0) -> tuple[np.ndarray, list[AtariStep]]:
    first = env.reset(seed=seed)
    return first, [env.step(int(a)) for a in actions]


def test_shapes_and_dtypes():
    env = make("pong")
    frame = env.reset(seed=1)
    step = env.step(0)
    assert frame.shape == (84, 84) and frame.dtype == np.uint8
    assert step.frame.shape == (84, 84) and step.frame.dtype == np.uint8
    assert isinstance(step.reward, float)
    assert all(isinstance(flag, bool) for flag in (step.terminal, step.truncated, step.game_over))
    assert env.n_actions == 6
    assert env.screen_rgb().shape == (210, 160, 3) and env.screen_rgb().dtype == np.uint8
    for bad_action in (-1, 6):
        with pytest.raises(ValueError, match="action"):
            env.step(bad_action)
    env.close()


@pytest.mark.parametrize("game", ["breakout", "space_invaders"])
def test_frames_are_max_of_last_two_frames_and_rewards_are_raw(game):
    env = make(game)
    actions = random_actions(env.n_actions, 150)
    first, steps = play_actions(env, actions)
    frames, rewards, max_mattered = reference_run(game, actions)
    env.close()
    assert np.array_equal(first, frames[0])
    for t, step in enumerate(steps):
        assert np.array_equal(step.frame, frames[t + 1]), f"frame of step {t}"
        assert step.reward == rewards[t], f"reward of step {t}"
    assert max_mattered > 0, "the run should include frames where the 2-frame max matters"
    if game == "space_invaders":
        assert max(rewards) > 1, "aliens are worth 5 to 30 points: rewards are not clipped"


def test_area_frames_equal_gymnasium_atari_preprocessing():
    env = make("breakout")
    actions = random_actions(env.n_actions, 60)
    first, steps = play_actions(env, actions)
    base = gym.make("ALE/Breakout-v5", frameskip=1, repeat_action_probability=0.0)
    reference = AtariPreprocessing(base, noop_max=0, frame_skip=4, screen_size=84)
    reference.reset(seed=0)
    obs, *_ = reference.unwrapped.step(1)  # FIRE once, as AtariEnv does at reset
    for action, step in zip(actions, steps):
        obs, *_ = reference.step(int(action))
        assert np.array_equal(step.frame, obs)
    env.close()
    reference.close()


@pytest.mark.parametrize("game, fire_frames", [("pong", 1), ("freeway", 0)])
def test_noop_count_within_one_to_noop_max(game, fire_frames):
    counts = set()
    for seed in range(8):
        env = make(game, seed=seed, noop_max=30)
        counts.add(frames_since_reset(env) - fire_frames)
        env.close()
    assert all(1 <= count <= 30 for count in counts), counts
    assert len(counts) > 1, "different seeds should draw different no-op counts"
    env = make(game, noop_max=0)
    assert frames_since_reset(env) == fire_frames
    env.close()


def test_fire_at_reset_launches_breakout():
    env = make("breakout")
    assert frames_since_reset(env) == 1  # the FIRE frame, before any no-op
    # NOOP only: only the reset FIRE launched a ball
    _, steps = play_actions(env, np.zeros(300, int))
    terminals = [t for t, step in enumerate(steps) if step.terminal]
    assert len(terminals) == 1 and env.lives == BREAKOUT_LIVES - 1
    env.close()


def test_life_loss_is_terminal_without_reset_and_game_over_restarts():
    env = make("breakout")
    fresh_first_frame = env.reset(seed=0)
    life_losses, game_over_step = 0, None
    for t, action in enumerate(random_actions(env.n_actions, 2000)):
        lives, frames_before = env.lives, frames_since_reset(env)
        step = env.step(int(action))
        if step.game_over:
            game_over_step = step
            assert lives == 1 and step.terminal and not step.truncated
            break
        assert frames_since_reset(env) > frames_before  # the game was not reset
        if step.terminal:
            life_losses += 1
            assert env.lives == lives - 1
        else:
            assert env.lives == lives
    assert game_over_step is not None, "a random policy loses 5 breakout lives in 2000 steps"
    assert life_losses == BREAKOUT_LIVES - 1
    assert env.lives == BREAKOUT_LIVES and frames_since_reset(env) == 1
    assert np.array_equal(game_over_step.frame, fresh_first_frame)
    env.close()


def test_without_the_life_loss_signal_lives_go_but_only_the_game_over_is_terminal():
    env = make("breakout", life_loss_terminal=False)
    lives_lost_quietly = 0
    for action in random_actions(env.n_actions, 2000):
        lives = env.lives
        step = env.step(int(action))
        if step.game_over:
            assert step.terminal and lives == 1
            break
        assert not step.terminal
        lives_lost_quietly += env.lives < lives
    else:
        pytest.fail("a random policy loses 5 breakout lives in 2000 steps")
    assert lives_lost_quietly == BREAKOUT_LIVES - 1
    env.close()


def test_same_seed_same_run_and_other_seeds_differ():
    actions = random_actions(4, 200)

    def frames(seed: int) -> np.ndarray:
        env = make("breakout", seed=seed, noop_max=30, sticky_actions=0.25)
        first, steps = play_actions(env, actions, seed=seed)
        env.close()
        return np.stack([first] + [s.frame for s in steps])

    assert np.array_equal(frames(3), frames(3))
    assert any(not np.array_equal(frames(3), frames(seed)) for seed in (4, 5))


@pytest.mark.parametrize("name, rom_id", [
    ("pong", "pong"),
    ("Pong", "pong"),
    ("PongNoFrameskip-v4", "pong"),
    ("ALE/Pong-v5", "pong"),
    ("space_invaders", "space_invaders"),
    ("SpaceInvaders", "space_invaders"),
    ("ALE/SpaceInvaders-v5", "space_invaders"),
    ("SpaceInvadersNoFrameskip-v4", "space_invaders"),
    ("MsPacman", "ms_pacman"),
])
def test_resolve_game(name, rom_id):
    assert resolve_game(name) == rom_id


def test_unknown_game_lists_close_matches_on_one_line():
    with pytest.raises(ValueError, match=r"unknown game 'pongg'; did you mean: pong\?") as info:
        resolve_game("pongg")
    assert "\n" not in str(info.value)


# -- Gymnasium ids and the protocol their names stand for (issue 36) ---------------------------

@pytest.mark.parametrize("gymnasium_name", [
    "ALE/Pong-v5", "ALE/SpaceInvaders-v5", "Pong-v4", "PongNoFrameskip-v4", "Pong-v0",
    "PongNoFrameskip-v0", "BreakoutNoFrameskip-v4", "SpaceInvaders-v0",
])
def test_a_gymnasium_ids_defaults_are_those_gymnasium_registers(gymnasium_name):
    """The expectation is Gymnasium's registry itself (ale-py registers these ids)."""
    kwargs = gym.spec(gymnasium_name).kwargs
    defaults = gymnasium_id_defaults(gymnasium_name)
    assert defaults.sticky_actions == kwargs["repeat_action_probability"]
    frameskip = kwargs["frameskip"]
    assert defaults.frame_skip == (None if isinstance(frameskip, tuple) else frameskip)
    assert kwargs["full_action_space"] is False  # the minimal set: as Nature, not as Machado
    assert defaults.ram is False


@pytest.mark.parametrize("name, version, frame_skip, ram", [
    ("Pong-v5", 5, 4, False),  # no ALE/ namespace: still v5
    ("SpaceInvadersDeterministic-v4", 4, 3, False),  # gym's: 3 frames in Space Invaders
    ("BreakoutDeterministic-v4", 4, 4, False),
    ("Pong-ramNoFrameskip-v4", 4, 1, True),
    ("ALE/Pong-ram-v5", 5, 4, True),
])
def test_ids_gymnasium_no_longer_registers(name, version, frame_skip, ram):
    defaults = gymnasium_id_defaults(name)
    assert (defaults.version, defaults.frame_skip, defaults.ram) == (version, frame_skip, ram)


@pytest.mark.parametrize("name", ["pong", "Pong", "space_invaders", "SpaceInvaders"])
def test_a_name_without_a_version_stands_for_the_game_alone(name):
    assert gymnasium_id_defaults(name) is None
    assert game_of_new_run(name, Config(), {"game": name}) == resolve_game(name)


def given_flags(flags: list[str]) -> dict[str, str | float]:
    """The settings `--name=value` flags give, as the command line's parser gives them."""
    given: dict[str, str | float] = {}
    for flag in flags:
        name, value = flag.removeprefix("--").split("=", 1)
        name = name.replace("-", "_")
        given[name] = float(value) if name == "sticky_actions" else value
    return given


def new_run_game(*flags: str) -> str:
    """game_of_new_run as a new run calls it: the flags, the protocol's preset, the given."""
    given = given_flags(list(flags))
    return game_of_new_run(given["game"], Config(**with_protocol(given)), given)


@pytest.mark.parametrize("flags", [
    ["--game=ALE/Pong-v5"], ["--game=Pong-v5"], ["--game=PongNoFrameskip-v0"],
])
def test_an_id_with_sticky_actions_is_refused_without_a_protocol(flags):
    """Regression (issue 36): --game=ALE/Pong-v5 trained the Nature protocol, without sticky
    actions, without a word."""
    with pytest.raises(ValueError) as info:
        new_run_game(*flags)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{flags[0]} names Gymnasium's ")
    assert "(sticky actions 0.25), not the nature protocol" in message
    assert "--protocol=machado" in message and "--game=pong for the nature protocol" in message


@pytest.mark.parametrize("flags, sticky_actions", [
    (["--game=ALE/Pong-v5", "--protocol=machado"], 0.25),
    (["--game=ALE/Pong-v5", "--sticky-actions=0.25"], 0.25),
    (["--game=ALE/Pong-v5", "--protocol=nature"], 0.0),  # said so: the name names the game
    (["--game=PongNoFrameskip-v4"], 0.0),  # the Nature setting: nothing to say
    (["--game=BreakoutDeterministic-v4"], 0.0),
])
def test_an_id_is_taken_where_a_flag_says_which_protocol(flags, sticky_actions):
    given = given_flags(flags)
    assert new_run_game(*flags) == resolve_game(given["game"])
    assert Config(**with_protocol(given)).sticky_actions == sticky_actions


@pytest.mark.parametrize("flags, message", [
    (["--game=Pong-v4"], "--game=Pong-v4 names Gymnasium's v4 defaults, which repeat each "
                         "action a random 2 to 4 frames; fast_dqn repeats it 4 frames: give "
                         "--game=pong"),
    (["--game=Pong-v0", "--protocol=machado"], "repeat each action a random 2 to 4 frames; "
     "fast_dqn repeats it 4 frames: give --game=pong, with --protocol=machado for sticky"),
    (["--game=SpaceInvadersDeterministic-v4"], "repeat each action 3 frames"),
    (["--game=Pong-ramNoFrameskip-v4"], "names Gymnasium's RAM observations; fast_dqn learns "
                                        "from the screen: give --game=pong"),
    (["--game=Pong-v3"], "Gymnasium has no Atari version v3 (only v0, v4 and v5)"),
    (["--game=Pongg-v5"], "unknown game 'Pongg-v5'; did you mean: pong?"),
])
def test_ids_whose_defaults_no_setting_gives_are_refused(flags, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        new_run_game(*flags)


def test_interpolation_choice_changes_frames():
    actions = random_actions(4, 20)
    frames = {}
    for interp in ("area", "linear", "nearest", "cubic"):
        env = make("breakout", interp=interp)
        _, steps = play_actions(env, actions)
        env.close()
        assert steps[-1].frame.shape == (84, 84) and steps[-1].frame.dtype == np.uint8
        frames[interp] = steps[-1].frame
    for interp in ("linear", "nearest", "cubic"):
        assert not np.array_equal(frames[interp], frames["area"]), interp


def test_episode_cap_truncates_after_max_episode_steps():
    env = make("breakout", max_episode_steps=5)
    fresh_first_frame = env.reset(seed=0)
    for game in range(2):
        steps = [env.step(0) for _ in range(5)]
        assert [s.truncated for s in steps] == [False] * 4 + [True]
        assert [s.game_over for s in steps] == [False] * 4 + [True]
        assert not any(s.terminal for s in steps)
        assert np.array_equal(steps[-1].frame, fresh_first_frame)  # the new game's first
    env.close()


def test_the_pipelines_fixed_steps_are_no_settings_of_a_run():
    """Frame skip, frame size, grayscale and FIRE at reset are the Nature protocol's steps,
    declared once in `GameSettings` for both backends; no run can set them."""
    settings = GameSettings("pong", max_episode_steps=100)
    assert (settings.frame_skip, settings.frame_size, settings.grayscale,
            settings.fire_at_reset, settings.max_episode_frames) == (4, 84, True, True, 400)
    with pytest.raises(TypeError):
        GameSettings("pong", frame_skip=2)
