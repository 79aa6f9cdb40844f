"""One Atari game with the Nature-DQN input pipeline, and game-name handling.

The protocol of Mnih et al. (2015) in the terms of Machado et al. (2018): 4 emulator frames
per agent step with a max over the last 2, grayscale, an 84x84 resize, up to `noop_max`
no-ops and FIRE at a game's start, a life loss ending the *learning* episode while the game
goes on, and a cap on a game's agent steps; Machado's protocol changes only its settings.
Gymnasium's `AtariPreprocessing` does the frame skip, the max, grayscale and no-ops; this
module adds what it lacks, so that one `AtariEnv` behaves like one environment of ale-py's
`AtariVectorEnv(autoreset_mode="SameStep", life_loss_info=True)`: FIRE once after the
emulator reset (`use_fire_reset`), the life-loss terminal without a game reset (0 < lives <
lives before, as ale-py and the OpenAI baselines count it), the cap in agent steps after
the reset procedure (the ALE's frame cap would count the no-ops), the reset at game over,
and the resize interpolation (Gymnasium hard-codes area).

The no-op counts differ (Gymnasium draws 1..noop_max frames, ale-py's vector env
0..noop_max-1 from its own generator): the backends agree frame for frame only without
no-ops and sticky actions, and in distribution with them.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from typing import Any, Collection, NamedTuple

import ale_py
import ale_py.registration
import ale_py.roms
import cv2
import gymnasium as gym
import numpy as np
from gymnasium.wrappers import AtariPreprocessing

from fast_dqn.config import FRAME_SIZE, FRAME_SKIP, INTERPOLATIONS, Config

gym.register_envs(ale_py)
# An emulator made alone (Gymnasium's env) prints the ALE's two-line banner at its Info
# level unless the level is lowered before any is made.
ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)

_CV2_FLAGS = {
    "area": cv2.INTER_AREA,
    "linear": cv2.INTER_LINEAR,
    "nearest": cv2.INTER_NEAREST,
    "cubic": cv2.INTER_CUBIC,
}
assert set(_CV2_FLAGS) == set(INTERPOLATIONS)

_FIRE = "FIRE"


def rom_ids() -> list[str]:
    """The ROM ids ale-py ships (`pong`, `space_invaders`, ...)."""
    return list(ale_py.roms.get_all_rom_ids())


def _name_key(name: str) -> str:
    """Reduces ROM ids, CamelCase and Gymnasium ids to one spelling: `spaceinvaders`."""
    name = name.strip().split("/")[-1]  # ALE/Pong-v5 -> Pong-v5
    name = re.sub(r"-v\d+$", "", name)  # Pong-v5 -> Pong
    name = re.sub(r"(-ram)?(NoFrameskip|Deterministic)?(-ram)?$", "", name)
    return name.replace("_", "").lower()


def resolve_game(name: str) -> str:
    """The ale-py ROM id of a game named by its ROM id (`space_invaders`), CamelCase
    (`SpaceInvaders`) or a Gymnasium id (`ALE/SpaceInvaders-v5`).

    Raises:
        ValueError: no ROM ale-py ships matches; the message lists close matches.
    """
    ids = rom_ids()
    by_key = {_name_key(rom): rom for rom in ids}
    key = _name_key(name)
    if key in by_key:
        return by_key[key]
    close = difflib.get_close_matches(key, list(by_key), n=3, cutoff=0.6)
    if close:
        hint = "did you mean: " + ", ".join(by_key[k] for k in close) + "?"
    else:
        hint = f"expected one of the {len(ids)} ROM ids ale-py ships, e.g. pong, breakout"
    raise ValueError(f"unknown game {name!r}; {hint}")


class GymnasiumIdDefaults(NamedTuple):
    """What a Gymnasium Atari id's environment does by default, where fast_dqn's pipeline
    could differ (ale-py 0.12's registration; the older gym's for Deterministic ids)."""

    version: int  # 0, 4 or 5 (another is no Atari id of Gymnasium's)
    sticky_actions: float  # repeat_action_probability: v0 and v5 0.25, v4 0
    frame_skip: int | None  # emulator frames per action; None: a random 2 to 4; 1: none
    ram: bool  # observations are the 128 bytes of RAM, not the screen


GYMNASIUM_VERSIONS = (0, 4, 5)
_VERSION_SUFFIX = re.compile(r"-v(\d+)$")


def gymnasium_id_defaults(name: str) -> GymnasiumIdDefaults | None:
    """The defaults a Gymnasium Atari id (`ALE/Pong-v5`, `PongNoFrameskip-v4`) stands for, or
    None for a name without a version. In ale-py 0.12.1's registration v5 repeats an action
    4 frames with sticky actions 0.25; v0 and v4 a random 2 to 4 frames, with sticky actions
    0.25 (v0) or none (v4), their NoFrameskip forms 1; all use the minimal action set. Gym's
    Deterministic ids repeated 4 frames (3 in Space Invaders)."""
    text = name.strip()
    version = _VERSION_SUFFIX.search(text)
    if version is None:
        return None
    number = int(version.group(1))
    body = text[:version.start()].split("/")[-1]
    if "NoFrameskip" in body:
        frame_skip: int | None = 1
    elif "Deterministic" in body:
        frame_skip = 3 if _name_key(body) == "spaceinvaders" else FRAME_SKIP
    else:
        frame_skip = FRAME_SKIP if number == 5 else None
    sticky = 0.0 if number == 4 else 0.25
    return GymnasiumIdDefaults(number, sticky, frame_skip, "-ram" in body)


def game_of_new_run(name: str, config: Config, given: Collection[str]) -> str:
    """The ROM id of a new run's `--game`, refused where the name stands for Gymnasium
    defaults the run would not train: a run named ALE/Pong-v5 must not train without sticky
    actions unless a flag says so.

    Args:
        given: the settings given as flags; --protocol or --sticky-actions beside an id with
            sticky actions says which is meant.

    Raises:
        ValueError: an unknown game, a version that does not exist, RAM observations, a
            frame skip no setting gives, or sticky actions with neither flag given.
    """
    game = resolve_game(name)
    defaults = gymnasium_id_defaults(name)
    if defaults is None:
        return game
    shown = f"--game={name.strip()}"
    if defaults.version not in GYMNASIUM_VERSIONS:
        raise ValueError(f"{shown}: Gymnasium has no Atari version v{defaults.version} "
                         f"(only v0, v4 and v5); --game={game} names the game")
    if defaults.ram:
        raise ValueError(f"{shown} names Gymnasium's RAM observations; fast_dqn learns from "
                         f"the screen: give --game={game}")
    if defaults.frame_skip not in (1, FRAME_SKIP):
        skip = ("a random 2 to 4 frames" if defaults.frame_skip is None
                else f"{defaults.frame_skip} frames")
        sticky = (", with --protocol=machado for sticky actions"
                  if defaults.sticky_actions else "")
        raise ValueError(f"{shown} names Gymnasium's v{defaults.version} defaults, which "
                         f"repeat each action {skip}; fast_dqn repeats it {FRAME_SKIP} "
                         f"frames: give --game={game}{sticky}")
    if (defaults.sticky_actions != config.sticky_actions
            and not {"protocol", "sticky_actions"} & set(given)):
        raise ValueError(
            f"{shown} names Gymnasium's v{defaults.version} defaults (sticky actions "
            f"{defaults.sticky_actions:g}), not the {config.protocol} protocol this run would "
            f"train (sticky actions {config.sticky_actions:g}); say which: --protocol=machado "
            "(Machado et al. 2018: sticky actions 0.25, all 18 actions, no life-loss signal, "
            "no no-ops; --no-full-action-set keeps Gymnasium's minimal set), "
            f"--sticky-actions={defaults.sticky_actions:g} alone, or --game={game} for the "
            f"{config.protocol} protocol")
    return game


class AtariStep(NamedTuple):
    """What one agent step (4 emulator frames) of an `AtariEnv` returns."""

    frame: np.ndarray  # (84, 84) uint8, newest frame; the new game's first at game over
    reward: float  # raw change of the game score (the replay memory clips it)
    terminal: bool  # learning episode over without bootstrap: life lost or game ended
    truncated: bool  # game cut off by the episode cap (and not terminal)
    game_over: bool  # the game itself ended (terminated or truncated); env was reset
    game_length: int  # the agent steps of the game that ended; 0 if none did


class _FireAtReset(gym.Wrapper):
    """FIRE for one emulator frame after the emulator reset, before the no-ops, where the
    action set has it (ale-py's `use_fire_reset`; Breakout waits for it). Wraps the
    frameskip=1 environment, below `AtariPreprocessing`."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings()
        self.fire_action: int | None = meanings.index(_FIRE) if _FIRE in meanings else None

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        if self.fire_action is not None:
            obs, _, _, _, info = self.env.step(self.fire_action)
        return obs, info


class AtariEnv:
    """One Atari game with the Nature pipeline: (84, 84) uint8 frames; at game over `step`
    returns the new game's first frame (ale-py's `autoreset_mode="SameStep"`)."""

    def __init__(self, env: gym.Env, *, max_episode_steps: int, interp: str,
                 life_loss_terminal: bool = True, frame_size: int = FRAME_SIZE):
        self._env = env
        self._ale = env.unwrapped.ale
        self._max_episode_steps = max_episode_steps
        self._life_loss_terminal = life_loss_terminal
        self._cv2_flag = _CV2_FLAGS[interp]
        self._frame_size = (frame_size, frame_size)
        self._lives = 0
        self._steps = 0  # agent steps since the current game's reset procedure
        self.n_actions: int = int(env.action_space.n)

    @property
    def lives(self) -> int:
        """Lives left in the current game (0 for games without lives)."""
        return int(self._ale.lives())

    def screen_rgb(self) -> np.ndarray:
        """The raw (210, 160, 3) uint8 RGB screen, for recording videos."""
        return self._ale.getScreenRGB()

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Starts a new game (FIRE, no-ops) and returns its first frame; `seed` seeds the
        no-op draws and the emulator (None continues them)."""
        obs, _ = self._env.reset(seed=seed)
        self._lives = self.lives
        self._steps = 0
        return self._resize(obs)

    def step(self, action: int) -> AtariStep:
        """Acts for 4 emulator frames; resets the game when it ends (see `AtariStep`)."""
        if not 0 <= action < self.n_actions:
            raise ValueError(f"action must be within [0, {self.n_actions}); got {action}")
        obs, reward, game_terminated, ale_truncated, _ = self._env.step(int(action))
        self._steps += 1
        lives = self.lives
        life_lost = 0 < lives < self._lives
        self._lives = lives
        # Gymnasium's terminated is the game's end alone (terminal_on_life_loss is off).
        terminal = bool(game_terminated) or (life_lost and self._life_loss_terminal)
        game_over = bool(games_over(bool(game_terminated), bool(ale_truncated), self._steps,
                                    self._max_episode_steps))
        game_length = self._steps if game_over else 0
        frame = self.reset() if game_over else self._resize(obs)
        # Cut off: over without a terminal (a terminal step that also hit the cap is terminal)
        return AtariStep(frame, float(reward), terminal, game_over and not terminal, game_over,
                         game_length)

    def close(self) -> None:
        self._env.close()

    def _resize(self, screen: np.ndarray) -> np.ndarray:
        return cv2.resize(screen, self._frame_size, interpolation=self._cv2_flag)


def gymnasium_id(rom_id: str) -> str:
    """The Gymnasium id of a game: `space_invaders` -> `ALE/SpaceInvaders-v5`."""
    return f"ALE/{ale_py.registration.rom_id_to_name(rom_id)}-v5"


@dataclasses.dataclass(frozen=True)
class GameSettings:
    """What each environment of a run is built with: the game, the Atari protocol's settings
    and the Nature pipeline's fixed steps. Both backends are configured from these fields
    alone (`make_atari_env` here, `env_pools.VectorEnvPool` for ale-py's vector env), so each
    step of the pipeline is declared once for both."""

    game: str  # ale-py ROM id: a run's game, resolved once where it is chosen
    noop_max: int = 30  # most no-op frames at the start of a game (0 = none)
    sticky_actions: float = 0.0  # probability that the emulator repeats the previous action
    life_loss_terminal: bool = True  # a lost life ends the learning episode
    full_action_set: bool = False  # all 18 actions instead of the game's minimal set
    max_episode_steps: int = 27_000  # agent steps after which a game is cut off
    interp: str = "area"  # resize interpolation, one of area, linear, nearest, cubic
    # The pipeline's fixed steps (Mnih et al. 2015): no run sets them (init=False), both
    # backends read them. Both also max-pool the last 2 of the skipped frames (Gymnasium's
    # AtariPreprocessing always does), return raw rewards (the memory clips them) and reset
    # a game in the step it ends.
    frame_skip: int = dataclasses.field(default=FRAME_SKIP, init=False)  # frames per step
    frame_size: int = dataclasses.field(default=FRAME_SIZE, init=False)  # square, in pixels
    grayscale: bool = dataclasses.field(default=True, init=False)
    fire_at_reset: bool = dataclasses.field(default=True, init=False)  # where the game has FIRE

    @property
    def max_episode_frames(self) -> int:
        """The episode cap in emulator frames, as the ALE counts a game's length."""
        return self.max_episode_steps * self.frame_skip

    @classmethod
    def of_run(cls, config: Config, max_episode_steps: int | None = None) -> "GameSettings":
        """A run's settings; games are cut off at its training cap unless told otherwise."""
        cap = config.max_episode_steps if max_episode_steps is None else max_episode_steps
        return cls(config.game, noop_max=config.noop_max, sticky_actions=config.sticky_actions,
                   life_loss_terminal=config.life_loss_terminal,
                   full_action_set=config.full_action_set, max_episode_steps=cap,
                   interp=config.interp)


def games_over(ended: Any, cut_off: Any, steps: Any, max_episode_steps: int) -> Any:
    """Whether a game is over, for both backends (bools for one env, arrays for a pool): it
    ended (its last life was lost, as each backend can tell), the ALE cut it off, or it has
    taken `max_episode_steps` agent steps since its reset procedure."""
    return ended | cut_off | (steps >= max_episode_steps)


def make_atari_env(settings: GameSettings, *, seed: int) -> AtariEnv:
    """One game with the Nature pipeline, reset with `seed` (settings checked by
    `config.validate`)."""
    base = gym.make(
        gymnasium_id(settings.game),
        frameskip=1,
        repeat_action_probability=settings.sticky_actions,
        full_action_space=settings.full_action_set,
        # Backstop only: the cap is counted in agent steps by AtariEnv, after the reset
        # procedure (FIRE + no-ops), as ale-py's vector env counts it.
        max_num_frames_per_episode=settings.max_episode_frames + settings.noop_max + 1,
    )
    raw_height, raw_width = base.observation_space.shape[:2]
    preprocessed = AtariPreprocessing(
        _FireAtReset(base) if settings.fire_at_reset else base,
        noop_max=settings.noop_max,
        frame_skip=settings.frame_skip,
        # Native size: AtariPreprocessing only max-pools and converts to grayscale here;
        # AtariEnv resizes with the chosen interpolation (AtariPreprocessing hard-codes area).
        screen_size=(raw_width, raw_height),
        terminal_on_life_loss=False,  # AtariEnv marks a life loss without ending the game
        grayscale_obs=settings.grayscale,
        scale_obs=False,
    )
    env = AtariEnv(preprocessed, max_episode_steps=settings.max_episode_steps,
                   interp=settings.interp, life_loss_terminal=settings.life_loss_terminal,
                   frame_size=settings.frame_size)
    env.reset(seed=seed)
    return env


def game_actions(config: Config) -> int:
    """The number of actions of the run's game (its minimal set, unless the protocol asks for
    all 18)."""
    env = make_atari_env(GameSettings.of_run(config), seed=config.seed)
    try:
        return env.n_actions
    finally:
        env.close()
