"""Every setting of a run, in one frozen dataclass with the Nature-DQN defaults.

The command-line flags of both entry points, their `--help` text, `config.json` and the
README's flag table are all generated from `Config`; nothing else in the package reads flags.
Defaults follow Mnih et al. (2015), "Human-level control through deep reinforcement learning",
and the Atari protocol names of Machado et al. (2018).
"""

from __future__ import annotations

import argparse
import dataclasses
import decimal
import difflib
import json
import math
import textwrap
import typing
from typing import Any, Callable, Mapping, Sequence

# Atari protocol constants that no flag changes: they define the learning problem's input.
FRAME_SKIP = 4  # emulator frames per agent step (the last 2 are max-pooled)
FRAME_SIZE = 84  # pixels, square grayscale frame
HISTORY = 4  # frames stacked into one state

ALGO_DQN = "dqn"
ALGO_FAST_DQN = "fast_dqn"

# The largest --seed: runs keep NumPy's legacy 32-bit range. The environment seeds derived
# from it are folded into ale-py's narrower range by the env pools.
MAX_SEED = 2**32 - 1

INTERPOLATIONS = ("area", "linear", "nearest", "cubic")
BACKENDS = ("vector", "threads")
XLA_MODES = ("on", "off")
PRECISIONS = ("float32", "bfloat16")
REPLAY_DEVICES = ("auto", "host", "device")
DEVICES = ("auto", "cpu", "gpu")
DEVICE_HELP = ("where TensorFlow computes: auto = a GPU if TensorFlow sees one, else the CPU; "
               "cpu = the CPU, the GPUs hidden before TensorFlow starts; gpu = a GPU, refused "
               "in one line if TensorFlow sees none")

# The Atari protocols `--protocol` selects: each sets the settings below, unless a flag given
# on the command line sets one itself. "machado" is the protocol of Machado et al. (2018),
# "Revisiting the Arcade Learning Environment" (JAIR 61); docs/protocol.md gives the source of
# each value. "nature" is the same settings at their defaults (PROTOCOL_PRESETS, below Config).
_MACHADO_PRESET: dict[str, Any] = {"sticky_actions": 0.25, "life_loss_terminal": False,
                                   "full_action_set": True, "noop_max": 0,
                                   "max_episode_steps": 27_000}
PROTOCOLS = ("nature", "machado")

# The optimizers and losses `--optimizer` and `--loss` name, the one list of each
# (update_rule.make_optimizer and update_rule.loss_named make them): Nature's centered RMSProp
# and summed Huber loss, or the Adam and mean squared loss of Dopamine's JAX DQN
# (docs/protocol.md cites its source for each value).
OPTIMIZERS = ("rmsprop", "adam")
LOSSES = ("huber", "mse")
# What `--optimizer=adam` sets unless a flag given on the command line sets it itself:
# Dopamine's learning rate (its epsilon and moments are update_rule's constants).
_ADAM_PRESET: dict[str, Any] = {"lr": 6.25e-5}
# dqn_zoo's prioritized agent (dqn_zoo/prioritized/run_atari.py): Nature's learning rate
# divided by 4 and RMSProp's epsilon by 4 squared, as Schaul et al. (2016) lower the step size.
_PRIORITIZED_RMSPROP_PRESET: dict[str, Any] = {"lr": 2.5e-4 / 4, "rmsprop_epsilon": 0.01 / 16}
# The flags of RMSProp only, refused beside --optimizer=adam.
_RMSPROP_ONLY = ("rmsprop_rho", "rmsprop_epsilon")

# Settings of one resume's command line, not of the run: config.json does not keep them, and
# `Config.from_saved` leaves them out of an older config.json that does (a run started with
# --refill-replay would otherwise refill every later resume without being asked).
RESUME_ONLY = ("resume", "refill_replay")
# Settings of one process, not of the run: config.json does not keep them, and a resume may
# give them anew (a run resumed on another machine picks that machine's device).
PROCESS_ONLY = ("device",)
NOT_SAVED = RESUME_ONLY + PROCESS_ONLY

# config.json's version (one without the key: 1, written before it was kept). A config.json
# holds every setting of its version; one of an older version lacks the settings added after
# it, which its run ran with at their defaults (version 1: from checkpoint format 2 on).
CONFIG_VERSION_KEY = "config_version"
CONFIG_VERSION = 4
SETTINGS_ADDED_AFTER = {1: ("protocol", "life_loss_terminal", "full_action_set", "double",
                            "dueling", "replay_device", "optimizer", "loss", "n_step",
                            "prioritized"),
                        2: ("video_every",), 3: ("precision",)}
# The largest --timesteps: TensorBoard records the agent step as a 64-bit integer.
MAX_TIMESTEPS = 2**63 - 1


# The groups of the flags in --help, in its order; each field names its own (`_field`'s third
# argument). The fast scheme's flags are the fast trainer's only.
PROTOCOL, LEARNING, REPLAY, EVALUATION, RUN_FILES, FAST_SCHEME = GROUPS = (
    "Atari protocol", "network and learning", "replay memory", "evaluation", "run files",
    "fast scheme")


def _field(default: Any, help: str, group: str, *, choices: Sequence[str] = ()):
    return dataclasses.field(default=default, metadata={
        "help": help, "group": group, "fast_only": group == FAST_SCHEME,
        "choices": tuple(choices)})


@dataclasses.dataclass(frozen=True)
class Config:
    """Settings of one training run. Units are in each field's help text.

    `protocol` names a preset that `with_protocol` applies when a run is made from flags;
    building a Config with `protocol="machado"` alone does not change the other settings.
    """

    game: str = _field("pong", "Atari ROM id (pong, space_invaders; SpaceInvaders and "
                       "Gymnasium's ids are accepted too, but an id whose defaults are not "
                       "the run's protocol, such as ALE/Pong-v5 with its sticky actions, "
                       "needs --protocol or --sticky-actions beside it)", PROTOCOL)
    timesteps: int = _field(50_000_000, "agent steps to train (1 step = 4 frames; the Nature "
                            "budget is 200M frames)", LEARNING)
    evaluate: int = _field(250_000, "evaluation period in agent steps (0 = never)", EVALUATION)
    seed: int = _field(0, "random seed for environments, exploration, replay and network",
                       LEARNING)
    interp: str = _field("area", "interpolation of the 84x84 resize", PROTOCOL,
                         choices=INTERPOLATIONS)

    replay_capacity: int = _field(1_000_000, "replay memory size in transitions", REPLAY)
    replay_start: int = _field(50_000, "uniformly random agent steps before learning starts",
                               REPLAY)
    train_freq: int = _field(4, "agent steps per minibatch update", LEARNING)
    target_update: int = _field(10_000, "agent steps between target-network updates", LEARNING)
    batch_size: int = _field(32, "transitions per minibatch", LEARNING)
    lr: float = _field(2.5e-4, "learning rate (with --optimizer=adam, Dopamine's 6.25e-5 "
                       "unless given)", LEARNING)
    optimizer: str = _field("rmsprop", "rmsprop: centered RMSProp (Nature); adam: Adam as "
                            "Dopamine's JAX DQN runs it (optax.adam, b1 0.9, b2 0.999, "
                            "epsilon 1.5e-4 added after the bias correction)",
                            LEARNING, choices=OPTIMIZERS)
    rmsprop_rho: float = _field(0.95, "centered RMSProp gradient momentum (rho; "
                                "--optimizer=rmsprop only)", LEARNING)
    rmsprop_epsilon: float = _field(0.01, "centered RMSProp epsilon, inside the square root "
                                    "(--optimizer=rmsprop only)", LEARNING)
    loss: str = _field("huber", "huber: Huber loss (delta 1) summed over the minibatch "
                       "(Nature); mse: squared TD error averaged over the minibatch "
                       "(Dopamine's JAX DQN)", LEARNING, choices=LOSSES)
    discount: float = _field(0.99, "discount factor gamma", LEARNING)
    initial_epsilon: float = _field(1.0, "exploration epsilon at the start of learning", LEARNING)
    exploration_steps: int = _field(1_000_000, "agent steps over which epsilon decays linearly",
                                    LEARNING)
    final_epsilon: float = _field(0.1, "exploration epsilon after the decay", LEARNING)
    eval_episodes: int = _field(30, "full games per evaluation", EVALUATION)
    eval_epsilon: float = _field(0.05, "epsilon of the evaluation policy", EVALUATION)
    eval_max_episode_steps: int = _field(4_500, "agent steps before an evaluation game is cut "
                                         "off (4,500 steps = 18,000 frames = 5 minutes, "
                                         "Nature's Methods, 'Evaluation procedure')", EVALUATION)
    video_every: int = _field(0, "record the first game of every Nth evaluation into "
                              "RUN_DIR/eval-step<STEP>.mp4, as play records a game (0 = never; a "
                              "run that records plays its first evaluation games in Python "
                              "envs, whose screens can be read, not in ale-py's vector env)",
                              EVALUATION)
    protocol: str = _field("nature", "Atari protocol preset: nature (Mnih et al. 2015) or "
                           "machado (Machado et al. 2018: sticky actions 0.25, no life-loss "
                           "signal, all 18 actions, no no-ops); flags given beside it win",
                           PROTOCOL, choices=PROTOCOLS)
    sticky_actions: float = _field(0.0, "probability of repeating the previous action "
                                   "(Machado et al. 2018 use 0.25; Nature used none)", PROTOCOL)
    life_loss_terminal: bool = _field(True, "a lost life ends the learning episode (Nature); "
                                      "false: only the game's end does (Machado et al. 2018)",
                                      PROTOCOL)
    full_action_set: bool = _field(False, "act with all 18 joystick actions instead of the "
                                   "game's minimal set (Machado et al. 2018)", PROTOCOL)
    noop_max: int = _field(30, "maximum random no-op actions at the start of each game", PROTOCOL)
    max_episode_steps: int = _field(27_000, "agent steps before a game is cut off "
                                    "(27,000 steps = 108,000 frames = 30 minutes)", PROTOCOL)
    double: bool = _field(False, "Double DQN target (van Hasselt et al. 2016): the online "
                          "network picks the next action, the target network values it", LEARNING)
    dueling: bool = _field(False, "dueling network (Wang et al. 2016): value and advantage "
                           "streams, mean advantage subtracted, the gradient into the last "
                           "convolution scaled by 1/sqrt(2)", LEARNING)
    n_step: int = _field(1, "n-step returns (Dopamine's update_horizon): the target sums n "
                         "clipped rewards, discounted, up to the learning episode's end, and "
                         "bootstraps from the state n steps on; 1 = Nature", LEARNING)
    prioritized: bool = _field(False, "proportional prioritized replay (Schaul et al. 2016, "
                               "as dqn_zoo runs it): priority exponent 0.6, importance-sampling "
                               "exponent 0.4 to 1 over the run; with RMSProp a new run's "
                               "--lr is divided by 4 and --rmsprop-epsilon by 16 unless given",
                               REPLAY)

    logdir: str = _field("", "run directory: a new or empty one, outside any other run's "
                         "(default: runs/<game>-<algo>-seed<seed>-<time>)", RUN_FILES)
    checkpoint_every: int = _field(1_000_000, "agent steps between checkpoints (0 = only at "
                                   "the end and on interruption)", RUN_FILES)
    checkpoint_replay: bool = _field(True, "save the replay memory in checkpoints", RUN_FILES)
    resume: str = _field("", "run directory to continue from its latest checkpoint (only "
                         "--timesteps, to extend the run, --refill-replay and --device may be "
                         "given beside it)", RUN_FILES)
    refill_replay: bool = _field(False, "with --resume only: if the checkpoint's replay "
                                 "memory is missing, refill it for --replay-start steps instead "
                                 "of refusing to resume (for that resume: config.json does not "
                                 "keep it)", RUN_FILES)
    progress_every: float = _field(30.0, "seconds between progress lines when stdout is "
                                   "not a terminal", RUN_FILES)
    xla: str = _field("on", "compile the minibatch update and the samplers' query with XLA on "
                      "every device (one that cannot compile runs uncompiled and says so in "
                      "one line); off = never", LEARNING, choices=XLA_MODES)
    precision: str = _field("float32", "the network's arithmetic: float32 (Nature); "
                            "bfloat16, a departure from Nature: its convolutions and dense "
                            "layers compute in bfloat16, in the queries and the update; the "
                            "weights, the optimizer's slots, the Q-values it outputs, the TD "
                            "targets, the loss and the checkpoints stay float32; on a CPU "
                            "with XLA on it measured slower than float32 "
                            "(docs/throughput.md)", LEARNING, choices=PRECISIONS)
    replay_device: str = _field("auto", "where the replay memory's frames live: device = "
                                "in a variable on the training device, gathered by the "
                                "update; host = in NumPy, gathered by the host; auto = the "
                                "device on a GPU with room for them, else the host (the "
                                "same updates either way)", REPLAY, choices=REPLAY_DEVICES)
    device: str = _field("auto", f"{DEVICE_HELP} (for this process only: config.json does "
                         "not keep it, and it may be given beside --resume)", LEARNING,
                         choices=DEVICES)

    workers: int = _field(8, "number of environments acting in parallel", FAST_SCHEME)
    concurrent: bool = _field(True, "train in a background thread while the samplers act",
                              FAST_SCHEME)
    synchronize: bool = _field(True, "batch the samplers' Q-value queries in lock-step rounds",
                               FAST_SCHEME)
    backend: str = _field("vector", "sampler pool: ale-py's C++ vector env, or one Python "
                          "thread per env", FAST_SCHEME, choices=BACKENDS)
    updates_per_call: int = _field(64, "minibatch updates the learner draws and runs in one "
                                   "call (the same updates as one per call; fewer calls "
                                   "cost the host less)", FAST_SCHEME)

    def replace(self, **changes: Any) -> "Config":
        return dataclasses.replace(self, **changes)

    def saved_settings(self) -> dict[str, Any]:
        """The settings config.json keeps: all but the resume-only and process-only ones
        (NOT_SAVED), with the version of config.json they are written in."""
        return {CONFIG_VERSION_KEY: CONFIG_VERSION,
                **{name: value for name, value in dataclasses.asdict(self).items()
                   if name not in NOT_SAVED}}

    @classmethod
    def from_saved(cls, saved: Mapping[str, Any], algo: str) -> "Config":
        """The settings in a run's config.json of the trainer `algo`, checked as the flags are
        (`validate`). Its other keys (e.g. the library versions and the code's commits) and
        the settings it does not keep (NOT_SAVED) are left out; the settings added after its
        version (SETTINGS_ADDED_AFTER) take their defaults where it lacks them.

        Raises:
            ValueError: one line naming the key: its version is unknown, a setting of its
                version is missing (deleted by hand), or a value is not of its field's type
                (such as "workers": "4"), not one of its choices, or out of its flag's range.
        """
        version = saved.get(CONFIG_VERSION_KEY, 1)
        if type(version) is not int or not 1 <= version <= CONFIG_VERSION:
            raise ValueError(f"{CONFIG_VERSION_KEY!r} must be an integer from 1 to "
                             f"{CONFIG_VERSION}; got {_as_json(version)}")
        added = {name for after, names in SETTINGS_ADDED_AFTER.items() if after >= version
                 for name in names}
        types = typing.get_type_hints(cls)
        values = {}
        for field in dataclasses.fields(cls):
            if field.name in NOT_SAVED:
                continue
            if field.name in saved:
                values[field.name] = _saved_value(field, saved[field.name], types[field.name])
            elif field.name not in added:
                raise ValueError(f"{field.name!r} is missing")
        config = cls(**values)
        validate(config, algo, name=repr)
        return config


_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _saved_value(field: dataclasses.Field, value: Any, wanted: type) -> Any:
    """`value` as the setting `field` of type `wanted` holds it; raises ValueError unless it
    is of that type. JSON's true is an int to Python, and must not pass for a count; a whole
    number passes for a float (JSON writes 1.0 as 1.0, a person may write 1)."""
    if wanted is float and type(value) is int:
        value = float(value)
    if type(value) is not wanted:
        raise ValueError(f"{field.name!r} must be {_TYPE_NAMES[wanted]}; got {_as_json(value)}")
    value = _RENAMED_VALUES.get((field.name, value), value)
    choices = field.metadata["choices"]
    if choices and value not in choices:
        raise ValueError(f"{field.name!r} must be one of {', '.join(choices)}; "
                         f"got {_as_json(value)}")
    return value


# Values older runs' config.json may hold, as they are named now: --xla=auto did what on does.
_RENAMED_VALUES = {("xla", "auto"): "on"}


def _as_json(value: Any, limit: int = 40) -> str:
    """A value as config.json spells it (null, "4", true), cut to `limit` characters."""
    text = json.dumps(value, default=repr)
    return text if len(text) <= limit else text[:limit - 3] + "..."


@dataclasses.dataclass(frozen=True)
class Variant:
    """A way a run departs from Nature DQN, declared once: one setting of `Config`, whose
    default is Nature's. The trainers' flags, the run's variant line (launch.variant_line),
    the benchmark, scripts/summarize.py and scripts/learning_check.sh read VARIANTS.

    `labels` names each departing value for the variant line ("Double DQN target"), `names`
    for summaries and run directories ("double"); a departing value not listed is named by
    itself.
    """

    field: str
    labels: Mapping[Any, str] | str  # or one format string for every value ("{}-step")
    names: Mapping[Any, str] | str

    @property
    def flag(self) -> str:
        return flag_name(self.field)

    @property
    def nature(self) -> Any:
        """Nature DQN's value: the setting's default."""
        return getattr(Config, self.field)

    def departs(self, value: Any) -> bool:
        """Whether `value` departs from Nature DQN (of a switch, only true does: a
        hand-edited config.json's "yes" is no variant)."""
        if isinstance(self.nature, bool):
            return value is True
        return value != self.nature

    def label(self, value: Any) -> str | None:
        return _named(self.labels, value, f"{self.field} {value}") if self.departs(value) else None

    def short_name(self, value: Any) -> str | None:
        return _named(self.names, value, str(value)) if self.departs(value) else None


def _named(names: Mapping[Any, str] | str, value: Any, otherwise: str) -> str:
    return names.format(value) if isinstance(names, str) else names.get(value, otherwise)


VARIANTS: tuple[Variant, ...] = (
    Variant("protocol", {"machado": "protocol machado"}, {"machado": "machado"}),
    Variant("double", {True: "Double DQN target"}, {True: "double"}),
    Variant("dueling", {True: "dueling network"}, {True: "dueling"}),
    Variant("optimizer", {"adam": "Adam (Dopamine's)"}, {"adam": "adam"}),
    Variant("loss", {"mse": "mean squared loss (Dopamine's)"}, {"mse": "mse"}),
    Variant("n_step", "{}-step returns", "nstep{}"),
    Variant("prioritized", {True: "prioritized replay"}, {True: "prioritized"}),
    Variant("precision", {"bfloat16": "bfloat16 network compute"}, {"bfloat16": "bf16"}),
)


PROTOCOL_PRESETS: dict[str, dict[str, Any]] = {
    "nature": {name: getattr(Config, name) for name in _MACHADO_PRESET},
    "machado": _MACHADO_PRESET,
}


def parse_bool(text: str) -> bool:
    """Parses the boolean spellings the original tool accepted."""
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "y", "t"):
        return True
    if lowered in ("false", "0", "no", "n", "f"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false/1/0/yes/no, got {text!r}")


def parse_count(text: str) -> int:
    """A whole number as people write step counts: 1000000, 1_000_000, 1e6 or 2.5e5."""
    try:
        value = decimal.Decimal(text)  # exact: 1e23 is 10**23, not the nearest float's
        if value == value.to_integral_value():  # so is inf, which int() refuses
            return int(value)
    except (decimal.InvalidOperation, OverflowError):
        pass
    raise argparse.ArgumentTypeError(f"expected a whole number (such as 1000000, 1_000_000 or "
                                     f"1e6), got {text!r}")


def counted(count: int, noun: str) -> str:
    """"1 game", "30 games": a count of things, as a line for people says it."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def flag_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


class WholeFlagsHelpFormatter(argparse.HelpFormatter):
    """argparse's help, wrapped at spaces only: a flag named in a help text
    (--no-life-loss-terminal) stays whole on its line, to be copied, at any terminal width."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False,
                             break_long_words=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n".join(indent + line for line in self._split_lines(text, width - len(indent)))


class OneLineErrorParser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line and exit with status 2; an unknown flag's
    line names the flag it is closest to (`--gmae=pong`: did you mean --game?).

    `flags_elsewhere` maps flags this parser lacks to where they belong (the fast trainer's
    own flags, given to the serial one), said instead of a close flag.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        # No abbreviations: `--work=4` must not silently mean `--workers=4`.
        super().__init__(*args, allow_abbrev=False, formatter_class=WholeFlagsHelpFormatter,
                         **kwargs)
        self.flags_elsewhere: dict[str, str] = {}

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        # argparse's own "unrecognized arguments" error, with a suggestion (Python 3.14's
        # suggest_on_error covers choices only, and this interpreter is older).
        parsed, unknown = self.parse_known_args(args, namespace)
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}"
                       f"{self._unknown_flag_hint(unknown)}")
        return parsed

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")

    def _unknown_flag_hint(self, unknown: Sequence[str]) -> str:
        """'; did you mean --game?' for the first unknown flag close to one of this parser's
        flags (or where a flag of the other trainer belongs); '' if none is."""
        known = [option for option in self._option_string_actions if option.startswith("--")]
        for argument in unknown:
            if not argument.startswith("--"):
                continue
            flag = argument.split("=", 1)[0]
            if flag in self.flags_elsewhere:
                return f"; {flag} is {self.flags_elsewhere[flag]}"
            close = difflib.get_close_matches(flag, known, n=1, cutoff=0.7)
            if close:
                return f"; did you mean {close[0]}?"
        return ""


def add_config_flags(parser: argparse.ArgumentParser, algo: str,
                     names: Sequence[str] | None = None) -> None:
    """Adds one flag per `Config` field (fast-only fields only for the fast trainer), or
    per field in `names` (for the commands that take some of the trainers' flags), each in
    its field's group (GROUPS; argparse leaves an empty group out of --help)."""
    groups = {title: parser.add_argument_group(title) for title in GROUPS}
    for field in dataclasses.fields(Config):
        if field.metadata["fast_only"] and algo != ALGO_FAST_DQN:
            continue
        if names is not None and field.name not in names:
            continue
        kwargs: dict[str, Any] = {"default": None, "dest": field.name}
        group = groups[field.metadata["group"]]
        if field.type in ("bool", bool):
            _add_bool_flag(group, field)
            continue
        if field.type in ("int", int):
            kwargs["type"] = parse_count
        elif field.type in ("float", float):
            kwargs["type"] = float
        if field.metadata["choices"]:
            kwargs["choices"] = field.metadata["choices"]
        # An empty default is "not given": the help says what that means (--logdir).
        shown = f" (default: {field.default!r})" if field.default != "" else ""
        kwargs["help"] = field.metadata["help"] + shown
        group.add_argument(flag_name(field.name), **kwargs)


def _add_bool_flag(parser: argparse._ActionsContainer, field: dataclasses.Field) -> None:
    """`--name` alone means true and `--no-name` false, as people type them; `--name=BOOL`
    keeps the original tool's spellings (true/false/1/0/yes/no)."""
    default = str(field.default).lower()
    parser.add_argument(flag_name(field.name), dest=field.name, default=None, nargs="?",
                        const=True, type=parse_bool, metavar="BOOL",
                        help=f"{field.metadata['help']} (default: {default}; "
                             f"{_negated_flag(field.name)} for false)")
    parser.add_argument(_negated_flag(field.name), dest=field.name, action="store_false",
                        default=None, help=argparse.SUPPRESS)


def _negated_flag(field_name: str) -> str:
    return "--no-" + flag_name(field_name).removeprefix("--")


def make_parser(algo: str, description: str,
                fast_command: str = "run_fast_dqn.py, fast-dqn") -> OneLineErrorParser:
    parser = OneLineErrorParser(description=description,
                                usage="%(prog)s [-h] [--FLAG[=VALUE] ...]")
    add_config_flags(parser, algo)
    if algo != ALGO_FAST_DQN:
        for field in dataclasses.fields(Config):
            if field.metadata["fast_only"]:
                flags = [flag_name(field.name)]
                if field.type in ("bool", bool):
                    flags.append(_negated_flag(field.name))
                for flag in flags:
                    parser.flags_elsewhere[flag] = ("a flag of the fast trainer only "
                                                    f"({fast_command})")
    return parser


def variant_flags(argv: Sequence[str], prog: str) -> tuple[list[str], list[str]]:
    """The variant flags in `argv`, read as the trainers read them: the flags of the variants
    that depart from Nature DQN, as the trainers take them ("--double=true"), and their short
    names, both in VARIANTS' order. Exits with status 2 and one line, as a trainer's parser
    does, on any other flag or a bad value (scripts/learning_check.sh passes them on)."""
    parser = OneLineErrorParser(prog=prog)
    add_config_flags(parser, ALGO_FAST_DQN, names=[variant.field for variant in VARIANTS])
    given = vars(parser.parse_args(argv))
    flags, names = [], []
    for variant in VARIANTS:
        value = given[variant.field]
        if value is not None and variant.departs(value):
            flags.append(f"{variant.flag}={str(value).lower() if value is True else value}")
            names.append(variant.short_name(value))
    return flags, names


def variant_help_lines() -> list[str]:
    """One line per variant flag for a script's --help: the flag, its departing values'
    labels and its default."""
    lines = []
    for variant in VARIANTS:
        field = next(f for f in dataclasses.fields(Config) if f.name == variant.field)
        if isinstance(variant.nature, bool):
            usage, meaning = variant.flag, variant.labels[True]
        elif isinstance(variant.labels, str):  # a count: one label for every value
            usage = f"{variant.flag}=N"
            meaning = f"{variant.labels.format('N')} (default: {variant.nature})"
        else:
            usage = f"{variant.flag}={'|'.join(field.metadata['choices'])}"
            meaning = "; ".join(f"{value}: {label}" for value, label in variant.labels.items())
            meaning += f" (default: {variant.nature})"
        lines.append(f"  {usage:<28} {meaning}")
    return lines


def add_device_flag(parser: argparse.ArgumentParser) -> None:
    """`--device`, as the trainers take it, for the commands that build a network from
    other flags (play, the benchmark)."""
    parser.add_argument("--device", choices=DEVICES, default=Config.device,
                        help=f"{DEVICE_HELP} (default: {Config.device})")


def given_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the user gave on the command line (flags left out are None)."""
    names = {f.name for f in dataclasses.fields(Config)}
    return {k: v for k, v in vars(args).items() if k in names and v is not None}


def with_protocol(given: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of a new run: its protocol's preset, then the flags given on top."""
    preset = PROTOCOL_PRESETS[given.get("protocol", Config.protocol)]
    return {**preset, **given}


def new_run_settings(given: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of a new run from the flags `given`: its protocol's preset and, with
    --optimizer=adam, Dopamine's learning rate, then the flags given on top.

    Raises:
        ValueError: a flag of RMSProp given beside --optimizer=adam (--rmsprop-epsilon).
    """
    optimizer = given.get("optimizer", Config.optimizer)
    if optimizer == "adam":
        for name in _RMSPROP_ONLY:
            if name in given:
                raise ValueError(f"{flag_name(name)} is a setting of --optimizer=rmsprop; "
                                 "this run's optimizer is adam")
    preset = _ADAM_PRESET if optimizer == "adam" else {}
    if given.get("prioritized", Config.prioritized) and optimizer == "rmsprop":
        preset = _PRIORITIZED_RMSPROP_PRESET
    return {**preset, **with_protocol(given)}


def protocol_overrides(config: Config) -> list[str]:
    """The settings of `config` that differ from its protocol's preset (given as flags);
    config.json records them, so that a run says where it left its protocol."""
    preset = PROTOCOL_PRESETS[config.protocol]
    return sorted(name for name, value in preset.items() if getattr(config, name) != value)


def validate(config: Config, algo: str,
             name: Callable[[str], str] = flag_name) -> None:
    """Raises ValueError with a one-line, actionable message for settings that cannot run,
    naming each setting by `name`: its flag, or (`repr`) its key in config.json."""
    for field in float_fields():  # first: inf and nan pass some range checks below
        value = getattr(config, field)
        if not math.isfinite(value):
            raise ValueError(f"{name(field)} must be a finite number; got {value}")
    positive = ("timesteps", "replay_capacity", "train_freq", "target_update", "batch_size",
                "eval_episodes", "max_episode_steps", "eval_max_episode_steps", "workers",
                "updates_per_call", "n_step")
    for field in positive:
        if getattr(config, field) < 1:
            raise ValueError(f"{name(field)} must be at least 1; got {getattr(config, field)}")
    if config.timesteps > MAX_TIMESTEPS:
        raise ValueError(f"{name('timesteps')} must be at most {MAX_TIMESTEPS} (TensorBoard's "
                         f"64-bit step); got {config.timesteps}")
    non_negative = ("evaluate", "replay_start", "exploration_steps", "noop_max",
                    "checkpoint_every", "video_every")
    for field in non_negative:
        if getattr(config, field) < 0:
            raise ValueError(f"{name(field)} must be 0 or more; got {getattr(config, field)}")
    if not 0 <= config.seed <= MAX_SEED:
        raise ValueError(f"{name('seed')} must be within [0, {MAX_SEED}]; got {config.seed}")
    probabilities = ("initial_epsilon", "final_epsilon", "eval_epsilon", "sticky_actions",
                     "discount", "rmsprop_rho")
    for field in probabilities:
        value = getattr(config, field)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name(field)} must be within [0, 1]; got {value}")
    if not config.lr > 0:
        raise ValueError(f"{name('lr')} must be positive; got {config.lr}")
    if not config.rmsprop_epsilon > 0:
        raise ValueError(f"{name('rmsprop_epsilon')} must be positive; got "
                         f"{config.rmsprop_epsilon}")
    if config.progress_every <= 0:
        raise ValueError(f"{name('progress_every')} must be positive; got "
                         f"{config.progress_every}")
    if config.replay_start > config.replay_capacity:
        raise ValueError(f"{name('replay_start')} ({config.replay_start}) must not exceed "
                         f"{name('replay_capacity')} ({config.replay_capacity})")
    if config.replay_start < config.batch_size:
        raise ValueError(f"{name('replay_start')} ({config.replay_start}) must be at least "
                         f"{name('batch_size')} ({config.batch_size}): the first minibatch is "
                         "drawn from what the random start stored")
    if config.replay_capacity < config.batch_size + HISTORY:
        raise ValueError(f"{name('replay_capacity')} ({config.replay_capacity}) must hold a "
                         f"minibatch and its frame history: at least "
                         f"{config.batch_size + HISTORY}")
    if config.n_step >= config.replay_start:
        raise ValueError(f"{name('n_step')} ({config.n_step}) must be below "
                         f"{name('replay_start')} ({config.replay_start}): the first minibatch's "
                         "returns are drawn from what the random start stored")
    if algo == ALGO_FAST_DQN:
        _validate_fast(config, name)


def float_fields() -> list[str]:
    """Names of the settings that are floats (the annotations are strings here)."""
    return [field.name for field in dataclasses.fields(Config) if field.type in ("float", float)]


def _validate_fast(config: Config, name: Callable[[str], str]) -> None:
    if config.timesteps < config.workers:
        raise ValueError(f"{name('timesteps')} ({config.timesteps}) must be at least "
                         f"{name('workers')} ({config.workers}): every round steps all the "
                         "environments")
    if config.target_update % config.train_freq != 0:
        raise ValueError(f"{name('train_freq')} ({config.train_freq}) must divide "
                         f"{name('target_update')} ({config.target_update}) so that every "
                         "epoch has whole minibatches")
    if config.target_update % config.workers != 0:
        raise ValueError(f"{name('workers')} ({config.workers}) must divide "
                         f"{name('target_update')} ({config.target_update}); try "
                         f"{_nearest_divisor(config.target_update, config.workers)}")
    if config.replay_start % config.workers != 0:
        raise ValueError(f"{name('workers')} ({config.workers}) must divide "
                         f"{name('replay_start')} ({config.replay_start})")
    if config.backend == "vector" and config.interp != "area":
        raise ValueError(f"{name('interp')} other than 'area' needs {name('backend')}=threads "
                         "(ale-py's vector env always resizes with area interpolation)")


def _nearest_divisor(total: int, wanted: int) -> int:
    divisors = [d for d in range(1, total + 1) if total % d == 0]
    return min(divisors, key=lambda d: (abs(d - wanted), d))
