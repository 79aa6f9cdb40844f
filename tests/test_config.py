"""The settings: Nature defaults pinned, flags generated from the dataclass, validation."""

import argparse
import dataclasses
import json
import re

import pytest

from fast_dqn import config as config_module
from fast_dqn.config import (ALGO_DQN, ALGO_FAST_DQN, Config, make_parser, parse_bool,
                             validate)

# Mnih et al. (2015), Extended Data Table 1, and docs/design.md §1. A change here is a change
# of the learning problem: it must be deliberate.
NATURE_DEFAULTS = {
    "game": "pong",
    "timesteps": 50_000_000,
    "evaluate": 250_000,
    "interp": "area",
    "replay_capacity": 1_000_000,
    "replay_start": 50_000,
    "train_freq": 4,
    "target_update": 10_000,
    "batch_size": 32,
    "lr": 2.5e-4,
    "rmsprop_rho": 0.95,
    "rmsprop_epsilon": 0.01,
    "discount": 0.99,
    "initial_epsilon": 1.0,
    "exploration_steps": 1_000_000,
    "final_epsilon": 0.1,
    "eval_episodes": 30,
    "eval_epsilon": 0.05,
    "eval_max_episode_steps": 4_500,  # 5 minutes of play (Nature, Methods, "Evaluation")
    "protocol": "nature",
    "sticky_actions": 0.0,
    "life_loss_terminal": True,  # DeepMind's code ends the learning episode at a lost life
    "full_action_set": False,  # the game's minimal action set
    "double": False,
    "dueling": False,
    "noop_max": 30,
    "max_episode_steps": 27_000,
    "checkpoint_every": 1_000_000,
    "checkpoint_replay": True,
    "workers": 8,
    "concurrent": True,
    "synchronize": True,
    "backend": "vector",
}


@pytest.mark.parametrize("name,value", sorted(NATURE_DEFAULTS.items()))
def test_nature_default(name, value):
    assert getattr(Config(), name) == value


def test_protocol_constants():
    assert config_module.FRAME_SKIP == 4
    assert config_module.FRAME_SIZE == 84
    assert config_module.HISTORY == 4


def test_every_field_has_a_flag_with_its_default_in_help():
    parser = make_parser(ALGO_FAST_DQN, "test")
    help_text = " ".join(parser.format_help().split())  # as wrapped at any width
    for field in dataclasses.fields(Config):
        flag = "--" + field.name.replace("_", "-")
        assert flag in help_text
    assert "(default: 1000000)" in help_text
    assert "(default: 0.00025)" in help_text


def test_fast_only_flags_are_absent_from_the_serial_trainer():
    help_text = make_parser(ALGO_DQN, "test").format_help()
    for name in ("--workers", "--concurrent", "--synchronize", "--backend"):
        assert name not in help_text
    with pytest.raises(SystemExit) as exit_info:
        make_parser(ALGO_DQN, "test").parse_args(["--workers=8"])
    assert exit_info.value.code == 2


@pytest.mark.parametrize("text,value", [
    ("true", True), ("True", True), ("1", True), ("yes", True),
    ("false", False), ("FALSE", False), ("0", False), ("no", False),
])
def test_boolean_spellings(text, value):
    assert parse_bool(text) is value


def test_bad_boolean_is_a_usage_error():
    with pytest.raises(argparse.ArgumentTypeError):
        parse_bool("maybe")


def test_flags_override_defaults():
    args = make_parser(ALGO_FAST_DQN, "t").parse_args(
        ["--replay-capacity=20000", "--concurrent=false", "--lr=0.001", "--backend=threads"])
    config = Config(**config_module.given_settings(args))
    assert config.replay_capacity == 20_000
    assert config.concurrent is False
    assert config.lr == 0.001
    assert config.backend == "threads"
    assert config.target_update == 10_000  # untouched defaults stay Nature's


def test_config_is_frozen_and_round_trips_through_json():
    config = Config(workers=4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.workers = 2  # type: ignore[misc]
    saved = json.loads(json.dumps({"algo": ALGO_FAST_DQN, **config.saved_settings()}))
    assert Config.from_saved(saved, ALGO_FAST_DQN) == config


# Settings a flag refuses, with its message (a regular expression).
REFUSED_SETTINGS = [
    ({"workers": 0}, ALGO_FAST_DQN, "--workers must be at least 1"),
    ({"updates_per_call": 0}, ALGO_FAST_DQN, "--updates-per-call must be at least 1"),
    ({"workers": 3}, ALGO_FAST_DQN, "--workers \\(3\\) must divide --target-update"),
    ({"timesteps": -5}, ALGO_DQN, "--timesteps must be at least 1"),
    ({"replay_capacity": 0}, ALGO_DQN, "--replay-capacity must be at least 1"),
    ({"replay_start": 2_000_000}, ALGO_DQN, "must not exceed --replay-capacity"),
    ({"sticky_actions": 1.5}, ALGO_DQN, "--sticky-actions must be within \\[0, 1\\]"),
    ({"eval_epsilon": -0.1}, ALGO_DQN, "--eval-epsilon must be within"),
    ({"evaluate": -1}, ALGO_DQN, "--evaluate must be 0 or more"),
    ({"video_every": -1}, ALGO_DQN, "--video-every must be 0 or more"),
    ({"lr": 0.0}, ALGO_DQN, "--lr must be positive"),
    ({"train_freq": 3}, ALGO_FAST_DQN, "--train-freq \\(3\\) must divide"),
    ({"interp": "linear"}, ALGO_FAST_DQN, "needs --backend=threads"),
    ({"seed": -1}, ALGO_DQN, "--seed must be within \\[0, 4294967295\\]; got -1"),
    ({"seed": 2**32}, ALGO_FAST_DQN, "--seed must be within \\[0, 4294967295\\]"),
    ({"lr": float("inf")}, ALGO_DQN, "--lr must be a finite number; got inf"),
    ({"progress_every": float("inf")}, ALGO_DQN, "--progress-every must be a finite number"),
    ({"discount": float("nan")}, ALGO_DQN, "--discount must be a finite number; got nan"),
    # An extra zero or an exponent typed for a count: beyond TensorBoard's 64-bit step.
    ({"timesteps": 10**30}, ALGO_DQN, "--timesteps must be at most 9223372036854775807"),
]


@pytest.mark.parametrize("changes,algo,message", REFUSED_SETTINGS)
def test_validation_errors(changes, algo, message):
    with pytest.raises(ValueError, match=message):
        validate(Config(**changes), algo)


def test_workers_error_suggests_a_divisor():
    with pytest.raises(ValueError, match="try 8"):
        validate(Config(workers=7, replay_start=56_000), ALGO_FAST_DQN)


def test_the_defaults_are_valid_for_both_trainers_and_the_samplers_check_is_the_fast_ones():
    validate(Config(), ALGO_DQN)
    validate(Config(), ALGO_FAST_DQN)
    validate(Config(workers=3), ALGO_DQN)  # the serial trainer has one env
    with pytest.raises(ValueError, match="--workers"):
        validate(Config(workers=3), ALGO_FAST_DQN)


def test_the_seed_is_valid_up_to_its_largest_value_and_refused_past_it():
    validate(Config(seed=config_module.MAX_SEED), ALGO_FAST_DQN)
    with pytest.raises(ValueError, match="--seed must be within"):
        validate(Config(seed=config_module.MAX_SEED + 1), ALGO_FAST_DQN)


def test_largest_timesteps_is_valid():
    validate(Config(timesteps=2**63 - 1), ALGO_FAST_DQN)


def flags_markdown_table() -> str:
    """docs/flags.md's tables of flags as `Config` declares them, one per group of --help: each
    field's flag, default and help (printed by `python -c "from tests.test_config import
    flags_markdown_table as t; print(t())"` to regenerate the tables)."""
    tables = []
    for group in config_module.GROUPS:
        only = " (run_fast_dqn.py only)" if group == config_module.FAST_SCHEME else ""
        lines = [f"**{group}**{only}", "", "| flag | default | meaning |", "| --- | --- | --- |"]
        for field in dataclasses.fields(Config):
            if field.metadata["group"] != group:
                continue
            default = field.default if field.default != "" else "(none)"
            if isinstance(default, bool):
                default = str(default).lower()
            elif isinstance(default, int):
                default = f"{default:,}"
            flag = config_module.flag_name(field.name)
            lines.append(f"| `{flag}` | {default} | {field.metadata['help']} |")
        tables.append("\n".join(lines))
    return "\n\n".join(tables)


def test_the_flag_tables_are_generated_from_the_config():
    from pathlib import Path
    page = (Path(__file__).resolve().parents[1] / "docs" / "flags.md").read_text()
    start = page.index("<!-- flags-table:start -->\n") + len("<!-- flags-table:start -->\n")
    end = page.index("\n<!-- flags-table:end -->")
    assert page[start:end] == flags_markdown_table()


# ------------------------------------------------------------------------- protocols

# Machado et al. (2018) as docs/protocol.md sources each value: sticky actions with
# probability 0.25, the end of the game as the only terminal signal, the 18 actions of the
# joystick, no no-op starts; the episode cap of 108,000 frames as Dopamine and ale-py's v5
# environments keep it.
MACHADO = {"sticky_actions": 0.25, "life_loss_terminal": False, "full_action_set": True,
           "noop_max": 0, "max_episode_steps": 108_000 // 4}


def test_the_nature_preset_is_the_defaults():
    preset = config_module.PROTOCOL_PRESETS["nature"]
    assert preset == {name: NATURE_DEFAULTS[name] for name in preset}


def test_the_machado_preset_resolves_to_the_papers_settings():
    settings = config_module.with_protocol({"protocol": "machado"})
    config = Config(**settings)
    assert {name: getattr(config, name) for name in MACHADO} == MACHADO
    assert config.protocol == "machado"
    assert config_module.protocol_overrides(config) == []
    untouched = {name: value for name, value in NATURE_DEFAULTS.items()
                 if name not in MACHADO and name != "protocol"}
    assert {name: getattr(config, name) for name in untouched} == untouched


def test_a_flag_given_beside_a_preset_wins_and_is_named():
    args = make_parser(ALGO_DQN, "t").parse_args(
        ["--protocol=machado", "--noop-max=30", "--sticky-actions=0.25"])
    config = Config(**config_module.with_protocol(config_module.given_settings(args)))
    assert config.noop_max == 30 and config.sticky_actions == 0.25
    assert config.life_loss_terminal is False
    assert config_module.protocol_overrides(config) == ["noop_max"]


def test_nature_runs_name_no_overrides_unless_a_protocol_setting_was_changed():
    assert config_module.protocol_overrides(Config()) == []
    assert config_module.protocol_overrides(Config(sticky_actions=0.25)) == ["sticky_actions"]


@pytest.mark.parametrize("algo", [ALGO_DQN, ALGO_FAST_DQN])
def test_every_boolean_flag_is_true_bare_false_negated_and_keeps_its_spellings(algo):
    """Regression: `--double` alone answered "expected one argument", though the README
    writes it so."""
    names = [field.name for field in dataclasses.fields(Config) if field.type in ("bool", bool)
             and (algo == ALGO_FAST_DQN or not field.metadata["fast_only"])]
    assert {"double", "dueling", "refill_replay", "checkpoint_replay"} <= set(names)
    parser = make_parser(algo, "test")
    for name in names:
        flag = "--" + name.replace("_", "-")
        negated = "--no-" + name.replace("_", "-")
        assert vars(parser.parse_args([flag]))[name] is True, flag
        assert vars(parser.parse_args([negated]))[name] is False, negated
        assert vars(parser.parse_args([f"{flag}=false"]))[name] is False, flag
        assert vars(parser.parse_args([f"{flag}=yes"]))[name] is True, flag
        assert vars(parser.parse_args([]))[name] is None, flag  # not given: the default


# Where a user looks for a flag in --help: an example of each group.
FLAG_GROUPS = {"--life-loss-terminal": "Atari protocol", "--game": "Atari protocol",
               "--lr": "network and learning", "--device": "network and learning",
               "--replay-capacity": "replay memory", "--prioritized": "replay memory",
               "--eval-episodes": "evaluation", "--resume": "run files",
               "--checkpoint-every": "run files", "--workers": "fast scheme"}


def test_help_lists_the_flags_by_group_and_leaves_none_ungrouped():
    """Each flag under its group's title, the groups in GROUPS' order; only -h under
    argparse's "options"."""
    help_text = make_parser(ALGO_FAST_DQN, "test").format_help()
    titles = [line[:-1] for line in help_text.splitlines() if re.fullmatch(r"\w.*:", line)]
    assert titles == ["options", *config_module.GROUPS]
    group_of = {}
    for line in help_text.splitlines():
        if line in [f"{title}:" for title in titles]:
            title = line[:-1]
        elif line.startswith("  -"):
            group_of[line.split()[0].rstrip(",")] = title
    assert {flag: group_of[flag] for flag in FLAG_GROUPS} == FLAG_GROUPS
    assert [flag for flag, title in group_of.items() if title == "options"] == ["-h"]
    assert len(group_of) == len(dataclasses.fields(Config)) + 1


def help_entries(help_text: str) -> dict[str, str]:
    """Each option's entry in argparse's --help, by its first flag: the flag's lines joined
    (an entry starts at a line indented by two spaces and a dash)."""
    entries: dict[str, list[str]] = {}
    for line in help_text.splitlines():
        if line.startswith("  -"):
            entry = entries.setdefault(line.split()[0].rstrip(","), [])
        elif not line.startswith("   "):
            entry = []  # a group's title, a blank line, the usage or the description
        entry.extend(line.split())
    return {flag: " ".join(words) for flag, words in entries.items()}


@pytest.mark.parametrize("columns", [40, 200])
@pytest.mark.parametrize("algo", [ALGO_DQN, ALGO_FAST_DQN])
def test_help_keeps_every_flag_whole_and_states_each_default_once(algo, columns, monkeypatch,
                                                                  capsys):
    """Regression: argparse wrapped help at hyphens, so that at some widths the help of
    --life-loss-terminal read `--no-life-loss-` / `terminal for false)`; --logdir and --resume
    printed `(default: '')` after their own words. At a narrow and a wide terminal, every
    name that starts with -- in --help is a whole flag of the trainer, every flag is named
    whole, and each entry states its default once (--resume has none: without it a run is
    new)."""
    monkeypatch.setenv("COLUMNS", str(columns))  # argparse wraps at $COLUMNS
    with pytest.raises(SystemExit) as exit_info:
        make_parser(algo, "test").parse_args(["--help"])
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    fields = [field for field in dataclasses.fields(Config)
              if algo == ALGO_FAST_DQN or not field.metadata["fast_only"]]
    flags = {"--" + field.name.replace("_", "-") for field in fields}
    negations = {"--no-" + field.name.replace("_", "-") for field in fields
                 if field.type in ("bool", bool)}
    named = {name for line in help_text.splitlines()
             for name in re.findall(r"(?<![\w-])--[\w-]+", line)}
    assert named - {"--help", "--FLAG"} == flags | negations
    entries = help_entries(help_text)
    for field in fields:
        entry = entries["--" + field.name.replace("_", "-")]
        assert entry.count("(default") == (0 if field.name == "resume" else 1), entry


def test_the_fast_trainer_announces_periods_it_cannot_keep():
    """Regression: --evaluate and --checkpoint-every below --target-update were rounded up to
    sync points without a word. The steps are those of the issue's example, by hand: sync
    points at 1,996 (the replay start) and every 1,000 steps after it."""
    from fast_dqn.launch import sync_point_note

    config = Config(replay_start=1996, replay_capacity=8000, target_update=1000,
                    evaluate=2000, workers=4, timesteps=8000)
    note = sync_point_note(config, ALGO_FAST_DQN)
    assert note.startswith("note: evaluations and checkpoints come at sync points only")
    assert "--evaluate=2000 acts at step 2,996, 4,996, 6,996, ..." in note
    assert "checkpoint-every" not in note  # 1,000,000: none before the end
    assert sync_point_note(config, ALGO_DQN) is None  # the serial trainer keeps them all
    assert sync_point_note(Config(), ALGO_FAST_DQN) is None  # Nature's periods fit
    every_2000 = sync_point_note(Config(checkpoint_every=2000), ALGO_FAST_DQN)
    assert "--checkpoint-every=2000 acts at step 10,000, 20,000, 30,000, ..." in every_2000


# -- config.json read back: types from the hand edits of issue 34 ------------------------------

SAVED = Config().saved_settings()  # config.json's settings, as a run writes them


@pytest.mark.parametrize("key, value, wanted", [
    ("workers", "4", 'an integer; got "4"'),
    ("workers", None, "an integer; got null"),
    ("workers", True, "an integer; got true"),  # JSON's true is an int to Python
    ("workers", 4.0, "an integer; got 4.0"),
    ("lr", "x", 'a number; got "x"'),
    ("lr", False, "a number; got false"),
    ("game", 5, "a string; got 5"),
    ("double", "yes", 'true or false; got "yes"'),
    ("double", 1, "true or false; got 1"),
    ("backend", "gpu", 'one of vector, threads; got "gpu"'),
])
def test_a_saved_setting_of_another_type_is_refused_naming_the_key(key, value, wanted):
    """Regression: "workers": "4", null or "lr": "x" gave a TypeError, "game": 5 an
    AttributeError, and "double": "yes" was taken as true."""
    with pytest.raises(ValueError) as error:
        Config.from_saved({**SAVED, key: value}, ALGO_FAST_DQN)
    assert str(error.value) == f"{key!r} must be {wanted}"


def test_every_saved_setting_has_its_type_checked_and_a_whole_number_is_a_float():
    for field in dataclasses.fields(Config):
        if field.name in ("resume", "refill_replay", "device"):  # not read back (below)
            continue
        with pytest.raises(ValueError, match=f"^{field.name!r} must be "):
            Config.from_saved({**SAVED, field.name: [1]}, ALGO_DQN)  # a list: no setting's type
    config = Config.from_saved({**SAVED, "lr": 1, "discount": 0.5, "workers": 4,
                                "double": True}, ALGO_FAST_DQN)
    assert (config.lr, config.discount, config.workers, config.double) == (1.0, 0.5, 4, True)
    assert type(config.lr) is float


def test_the_resume_only_settings_are_neither_saved_nor_read_back():
    """Regression: --refill-replay given once stayed in config.json and on for every later
    resume."""
    config = Config(refill_replay=True, resume="runs/x", workers=4)
    saved = config.saved_settings()
    assert "refill_replay" not in saved and "resume" not in saved and saved["workers"] == 4
    assert Config.from_saved({**SAVED, "refill_replay": True, "resume": "runs/x"},
                             ALGO_DQN) == Config()


# -- config.json read back: values a flag refuses, missing settings ----------------------------

@pytest.mark.parametrize("changes,algo,message", REFUSED_SETTINGS)
def test_a_saved_value_a_flag_refuses_is_refused_naming_the_key(changes, algo, message):
    """Regression: config.json's "timesteps": 10**30 trained (ETA 2e23 days), and -5 was
    refused as "--timesteps", a flag the resume was not given."""
    key = next(iter(changes))
    with pytest.raises(ValueError) as error:
        Config.from_saved({**SAVED, **changes}, algo)
    assert str(error.value).startswith(f"{key!r} ") and "--" not in str(error.value)


# config.json as the first runs that a resume reads wrote it (commit 88752bb, checkpoint
# format 2, before --protocol, --double, --dueling, --replay-device, --optimizer and --loss),
# for a run of run_fast_dqn.py --game=breakout --timesteps=1000 --replay-capacity=5000
# --replay-start=400.
VERSION_1 = {
    "algo": "fast_dqn", "backend": "vector", "batch_size": 32, "checkpoint_every": 1000000,
    "checkpoint_replay": True, "concurrent": True, "discount": 0.99, "eval_episodes": 30,
    "eval_epsilon": 0.05, "eval_max_episode_steps": 4500, "evaluate": 250000,
    "exploration_steps": 1000000, "final_epsilon": 0.1, "game": "breakout",
    "initial_epsilon": 1.0, "interp": "area", "logdir": "", "lr": 0.00025,
    "max_episode_steps": 27000, "noop_max": 30, "progress_every": 30.0, "refill_replay": False,
    "replay_capacity": 5000, "replay_start": 400, "resume": "", "rmsprop_epsilon": 0.01,
    "rmsprop_rho": 0.95, "seed": 0, "sticky_actions": 0.0, "synchronize": True,
    "target_update": 10000, "timesteps": 1000, "train_freq": 4, "updates_per_call": 4,
    "workers": 8, "xla": "auto", "library_versions": {"python": "3.11.9"}}
# The settings config.json holds from version 2 on, from 3 on and from 4 on: a setting added to
# Config needs a new version (config.CONFIG_VERSION, SETTINGS_ADDED_AFTER) and a line here.
VERSION_2_SETTINGS = {
    "game", "timesteps", "evaluate", "seed", "interp", "replay_capacity", "replay_start",
    "train_freq", "target_update", "batch_size", "lr", "optimizer", "rmsprop_rho",
    "rmsprop_epsilon", "loss", "discount", "initial_epsilon", "exploration_steps",
    "final_epsilon", "eval_episodes", "eval_epsilon", "eval_max_episode_steps", "protocol",
    "sticky_actions", "life_loss_terminal", "full_action_set", "noop_max", "max_episode_steps",
    "double", "dueling", "n_step", "prioritized", "logdir", "checkpoint_every",
    "checkpoint_replay", "progress_every", "xla", "replay_device", "workers", "concurrent",
    "synchronize", "backend", "updates_per_call"}
VERSION_3_SETTINGS = VERSION_2_SETTINGS | {"video_every"}
VERSION_4_SETTINGS = VERSION_3_SETTINGS | {"precision"}


def test_config_json_holds_every_setting_of_its_version():
    saved = dict(SAVED)
    assert saved.pop("config_version") == 4
    assert set(saved) == VERSION_4_SETTINGS


def test_a_config_json_of_version_3_is_read_with_natures_float32_precision():
    saved = {**{k: v for k, v in SAVED.items() if k != "precision"}, "config_version": 3}
    assert Config.from_saved(saved, ALGO_FAST_DQN).precision == "float32"
    assert Config.from_saved({**saved, "precision": "bfloat16"},
                             ALGO_DQN).precision == "bfloat16"
    with pytest.raises(ValueError, match="^'precision' is missing$"):
        Config.from_saved({**saved, "config_version": 4}, ALGO_FAST_DQN)
    with pytest.raises(ValueError, match="^'precision' must be one of float32, bfloat16; "
                                         'got "float16"$'):
        Config.from_saved({**SAVED, "precision": "float16"}, ALGO_FAST_DQN)


def test_a_config_json_of_version_2_is_read_without_video_every_at_its_default():
    saved = {**{k: v for k, v in SAVED.items() if k != "video_every"}, "config_version": 2}
    assert Config.from_saved(saved, ALGO_FAST_DQN).video_every == 0
    with pytest.raises(ValueError, match="^'video_every' is missing$"):
        Config.from_saved({**saved, "config_version": 3}, ALGO_FAST_DQN)


@pytest.mark.parametrize("key", sorted(VERSION_4_SETTINGS))
def test_a_setting_missing_from_config_json_is_refused_naming_the_key(key):
    """Regression: a setting deleted from config.json quietly took its default."""
    saved = {name: value for name, value in SAVED.items() if name != key}
    with pytest.raises(ValueError) as error:
        Config.from_saved(saved, ALGO_FAST_DQN)
    assert str(error.value) == f"{key!r} is missing"


def test_a_config_json_of_version_1_is_read_with_the_settings_added_since_at_their_defaults():
    config = Config.from_saved(VERSION_1, ALGO_FAST_DQN)
    added = VERSION_2_SETTINGS - set(VERSION_1)
    assert added == {"protocol", "life_loss_terminal", "full_action_set", "double", "dueling",
                     "replay_device", "optimizer", "loss", "n_step", "prioritized"}
    assert {name: getattr(config, name) for name in added} == {
        name: getattr(Config(), name) for name in added}
    assert (config.game, config.updates_per_call) == ("breakout", 4)
    assert config.xla == "on"  # --xla=auto, which such runs recorded, compiled as on does
    for key in sorted(set(VERSION_1) & VERSION_2_SETTINGS):  # what version 1 held, it must
        with pytest.raises(ValueError, match=f"^{key!r} is missing$"):
            Config.from_saved({name: v for name, v in VERSION_1.items() if name != key},
                              ALGO_FAST_DQN)


@pytest.mark.parametrize("version", [0, 5, "4", None])
def test_a_config_json_of_an_unknown_version_is_refused(version):
    with pytest.raises(ValueError, match="^'config_version' must be an integer from 1 to 4"):
        Config.from_saved({**SAVED, "config_version": version}, ALGO_DQN)


def test_a_run_of_a_version_1_config_json_resumes(tmp_path):
    """Old runs still resume: their config.json is read, the settings they lack at their
    defaults."""
    from fast_dqn.launch import prepare_config

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(VERSION_1))
    config = prepare_config(["--resume", str(run_dir), "--timesteps=2000"], ALGO_FAST_DQN)
    assert (config.timesteps, config.replay_capacity, config.protocol) == (2000, 5000, "nature")


# -- flag typos (issue 36) ----------------------------------------------------------------------

@pytest.mark.parametrize("algo, argv, hint", [
    (ALGO_FAST_DQN, ["--gmae=pong"], "; did you mean --game?"),
    (ALGO_DQN, ["--gmae", "pong"], "; did you mean --game?"),
    (ALGO_FAST_DQN, ["--wrokers=4"], "; did you mean --workers?"),
    (ALGO_FAST_DQN, ["--work=4"], "; did you mean --workers?"),  # suggested, never taken
    (ALGO_DQN, ["--no-dualing"], "; did you mean --no-dueling?"),
    (ALGO_DQN, ["--timestep=100"], "; did you mean --timesteps?"),
    (ALGO_DQN, ["--workers=4"], "; --workers is a flag of the fast trainer only "
                                "(run_fast_dqn.py, fast-dqn)"),
    (ALGO_DQN, ["--no-concurrent"], "; --no-concurrent is a flag of the fast trainer only"),
])
def test_a_flag_typo_names_the_flag_it_is_closest_to(capsys, algo, argv, hint):
    """Regression (issue 36): `--gmae=pong` got "unrecognized arguments" and nothing more,
    where a game's typo got "did you mean"."""
    with pytest.raises(SystemExit) as exit_info:
        make_parser(algo, "test").parse_args(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert f"error: unrecognized arguments: {' '.join(argv)}{hint}" in err


@pytest.mark.parametrize("argv0, fast", [("python -m fast_dqn serial", "python -m fast_dqn train"),
                                        ("/venv/bin/fast-dqn-serial", "fast-dqn"),
                                        ("run_dqn.py", "python run_fast_dqn.py")])
def test_a_flag_of_the_fast_trainer_names_it_as_the_serial_one_was_called(
        capsys, monkeypatch, argv0, fast):
    """Regression (issue 46): the line named run_fast_dqn.py and fast-dqn to a user of
    `python -m fast_dqn serial`."""
    from fast_dqn.launch import prepare_config

    monkeypatch.setattr("sys.argv", [argv0])
    with pytest.raises(SystemExit):
        prepare_config(["--workers=4"], ALGO_DQN)
    assert capsys.readouterr().err.endswith(
        f"--workers is a flag of the fast trainer only ({fast}) (see --help)\n")


@pytest.mark.parametrize("argv", [["--xyzzy=1"], ["pong"], ["--no-such-flag"]])
def test_a_flag_close_to_none_gets_no_suggestion(capsys, argv):
    with pytest.raises(SystemExit):
        make_parser(ALGO_FAST_DQN, "test").parse_args(argv)
    err = capsys.readouterr().err
    assert f"unrecognized arguments: {' '.join(argv)} (see --help)" in err
    assert "did you mean" not in err


def test_play_and_the_benchmark_suggest_flags_too(capsys):
    from fast_dqn import benchmark, play

    with pytest.raises(SystemExit):
        play.build_parser().parse_args(["runs/x", "--episodse=3"])
    assert "unrecognized arguments: --episodse=3; did you mean --episodes?" in \
        capsys.readouterr().err
    with pytest.raises(SystemExit):
        benchmark.parse_args(["--trainer-second=1"])
    assert "unrecognized arguments: --trainer-second=1; did you mean --trainer-seconds?" in \
        capsys.readouterr().err


# -- --device (issue 36) ------------------------------------------------------------------------

@pytest.mark.parametrize("algo", [ALGO_DQN, ALGO_FAST_DQN])
def test_both_trainers_take_a_device_of_auto_cpu_or_gpu(algo, capsys):
    parser = make_parser(algo, "test")
    assert parser.parse_args([]).device is None  # not given: Config's default
    assert Config().device == "auto"
    for device in ("auto", "cpu", "gpu"):
        assert parser.parse_args([f"--device={device}"]).device == device
    with pytest.raises(SystemExit):
        parser.parse_args(["--device=tpu"])
    assert "invalid choice: 'tpu'" in capsys.readouterr().err


def test_the_device_is_not_a_setting_of_the_run():
    """A run resumed on another machine picks that machine's device: config.json does not
    keep --device, and one that holds it (a hand edit) is read without it."""
    config = Config(device="gpu", workers=4)
    assert "device" not in config.saved_settings()
    assert Config.from_saved({**config.saved_settings(), "device": "gpu"},
                             ALGO_FAST_DQN) == Config(workers=4)


def test_a_resume_takes_a_device(tmp_path):
    from fast_dqn.launch import prepare_config

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    saved = Config(game="breakout", replay_capacity=5000, replay_start=400,
                   target_update=400, logdir=str(run_dir))
    (run_dir / "config.json").write_text(json.dumps({"algo": ALGO_FAST_DQN,
                                                     **saved.saved_settings()}))
    resumed = prepare_config(["--resume", str(run_dir), "--device=cpu"], ALGO_FAST_DQN)
    assert resumed.device == "cpu" and resumed.replay_capacity == 5000
    assert prepare_config(["--resume", str(run_dir)], ALGO_FAST_DQN).device == "auto"


# -- step counts as people write them (issue 46) ------------------------------------------------

COUNT_FIELDS = [field.name for field in dataclasses.fields(Config) if field.type in ("int", int)]


@pytest.mark.parametrize("name", COUNT_FIELDS)
@pytest.mark.parametrize("text, value", [("1e6", 1_000_000), ("2.5e5", 250_000),
                                         ("50_000_000", 50_000_000), ("1E3", 1000),
                                         ("4", 4)])
def test_every_count_flag_takes_a_whole_number_in_exponent_form_or_with_underscores(
        name, text, value):
    """Regression (issue 46): `--timesteps 1e6` was refused, as a user of the README typed it."""
    flag = "--" + name.replace("_", "-")
    args = make_parser(ALGO_FAST_DQN, "test").parse_args([flag, text])
    assert getattr(args, name) == value and type(getattr(args, name)) is int


@pytest.mark.parametrize("text", ["1.5", "2.5e0", "1e-3", "inf", "nan", "1e6x", "", "0x10"])
def test_a_count_that_is_no_whole_number_is_refused_in_one_line(capsys, text):
    with pytest.raises(SystemExit) as exit_info:
        make_parser(ALGO_DQN, "test").parse_args([f"--timesteps={text}"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert "argument --timesteps: expected a whole number" in err and repr(text) in err


def test_the_step_counts_of_a_run_are_counts():
    # the flags the issue names are among those that take counts, whatever else does
    assert {"timesteps", "replay_capacity", "replay_start", "exploration_steps",
            "target_update", "evaluate", "checkpoint_every"} <= set(COUNT_FIELDS)
