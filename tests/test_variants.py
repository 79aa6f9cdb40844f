"""Tests of the variants' declaration (fast_dqn/config.py's VARIANTS) and of its readers: the
trainers' flags, the variant line (launch.variant_line), the benchmark, scripts/summarize.py
and scripts/learning_check.sh.

What each reader should say is written out here, not taken from the declaration: a test of
a reader against the table it reads would pass whatever the table said.
"""

from __future__ import annotations

import csv
import dataclasses
import os
import subprocess

import pytest

from fast_dqn import benchmark
from fast_dqn.config import ALGO_DQN, ALGO_FAST_DQN, VARIANTS, Config, make_parser
from fast_dqn.launch import prepare_config, variant_line
from tests.cli_runs import REAL_NETWORK, benchmark_parser, last_json_line
from tests.script_runs import LEARNING_CHECK, PY, SUMMARIZE, learning_check, make_run, run

# Every variant, as a reader should know it: field, flag, Nature's value, a departing value
# and its label and short name.
EXPECTED = [
    ("protocol", "--protocol", "nature", "machado", "protocol machado", "machado"),
    ("double", "--double", False, True, "Double DQN target", "double"),
    ("dueling", "--dueling", False, True, "dueling network", "dueling"),
    ("optimizer", "--optimizer", "rmsprop", "adam", "Adam (Dopamine's)", "adam"),
    ("loss", "--loss", "huber", "mse", "mean squared loss (Dopamine's)", "mse"),
    ("n_step", "--n-step", 1, 3, "3-step returns", "nstep3"),
    ("prioritized", "--prioritized", False, True, "prioritized replay", "prioritized"),
    ("precision", "--precision", "float32", "bfloat16", "bfloat16 network compute", "bf16"),
]


def test_the_declaration_lists_each_variant_with_natures_value():
    assert [(v.field, v.flag, v.nature) for v in VARIANTS] == [row[:3] for row in EXPECTED]
    for variant, (_, _, nature, departing, label, name) in zip(VARIANTS, EXPECTED):
        assert getattr(Config(), variant.field) == nature  # the trainers' default
        assert (variant.label(nature), variant.short_name(nature)) == (None, None)
        assert (variant.label(departing), variant.short_name(departing)) == (label, name)


def test_a_switch_is_a_variant_only_when_true():
    double = VARIANTS[1]
    assert [double.short_name(value) for value in (True, False, "yes", 1, None)] == \
        ["double", None, None, None, None]


@pytest.mark.parametrize("algo", [ALGO_FAST_DQN, ALGO_DQN])
def test_both_trainers_take_every_variant_flag(algo):
    parser = make_parser(algo, "")
    args = parser.parse_args(["--protocol=machado", "--double", "--dueling",
                              "--optimizer=adam", "--loss=mse", "--precision=bfloat16"])
    assert (args.protocol, args.double, args.dueling, args.optimizer, args.loss,
            args.precision) == ("machado", True, True, "adam", "mse", "bfloat16")


# ----------------------------------------------------------------------- variant line


@pytest.mark.parametrize("argv, line", [
    ([], None),
    (["--optimizer=adam"], "Adam (Dopamine's)"),
    (["--loss=mse"], "mean squared loss (Dopamine's)"),
    (["--optimizer=adam", "--loss=mse", "--double"],
     "Double DQN target; Adam (Dopamine's); mean squared loss (Dopamine's)"),
    (["--loss=mse", "--protocol=machado", "--noop-max=30", "--optimizer=adam"],
     "protocol machado; changed by flags: --noop-max=30; Adam (Dopamine's); "
     "mean squared loss (Dopamine's)"),
    (["--optimizer=rmsprop", "--loss=huber"], None),
])
def test_the_variant_line_names_the_optimizer_and_the_loss(argv, line, tmp_path):
    config = prepare_config([*argv, f"--logdir={tmp_path / 'run'}"], ALGO_DQN)
    assert variant_line(config) == line


# ---------------------------------------------------------------------------- summaries


def test_summarize_names_a_runs_variants_in_their_declared_order():
    from scripts.summarize import variant_of
    assert variant_of({}) == ""  # a config.json from before the flags
    assert variant_of({"optimizer": "rmsprop", "loss": "huber", "double": False}) == ""
    assert variant_of({"loss": "mse", "optimizer": "adam", "protocol": "machado",
                       "dueling": True}) == "machado+dueling+adam+mse"
    assert variant_of({"double": "yes"}) == ""  # a hand edit is no variant


@pytest.mark.slow
def test_summarize_keeps_the_optimizers_and_losses_apart(tmp_path):
    root = tmp_path / "runs"  # make_run names a directory by the settings' names only
    make_run(root / "nature", "pong", 0, [(100000, 1.0)], optimizer="rmsprop", loss="huber")
    make_run(root / "nature", "pong", 1, [(100000, 3.0)])  # a config.json from before
    make_run(root / "dopamine", "pong", 0, [(100000, -5.0)], optimizer="adam", loss="mse")
    make_run(root / "dopamine", "pong", 1, [(100000, -7.0)], optimizer="adam", loss="mse")
    make_run(root / "adam", "pong", 0, [(100000, 9.0)], optimizer="adam")
    make_run(root / "double-mse", "pong", 0, [(100000, 4.0)], loss="mse", double=True)
    result = run([PY, SUMMARIZE, root, "--csv", tmp_path / "table.csv"])
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "table.csv", newline="") as file:
        rows = {row["game"]: row for row in csv.DictReader(file)}
    assert sorted(rows) == ["pong", "pong (adam)", "pong (adam+mse)", "pong (double+mse)"]
    assert float(rows["pong"]["final_mean"]) == 2.0  # (1 + 3) / 2
    assert float(rows["pong (adam+mse)"]["final_mean"]) == -6.0  # (-5 - 7) / 2
    assert float(rows["pong (adam)"]["final_mean"]) == 9.0
    assert float(rows["pong (double+mse)"]["final_mean"]) == 4.0


# ---------------------------------------------------------------------------- benchmark


def test_the_benchmark_takes_the_variant_flags_as_the_trainer_does():
    args = benchmark.parse_args(["--optimizer=adam", "--loss=mse", "--dueling",
                                 "--precision=bfloat16", "--workers", "4", "--random-steps=400"])
    config = benchmark.bench_config(args, 4)
    assert (config.optimizer, config.loss, config.dueling, config.double, config.precision) == \
        ("adam", "mse", True, False, "bfloat16")
    assert config.lr == 6.25e-5  # Dopamine's, as a new run's with --optimizer=adam
    nature = benchmark.bench_config(benchmark.parse_args(["--workers", "4"]), 4)
    assert (nature.optimizer, nature.loss, nature.lr, nature.protocol, nature.precision) == \
        ("rmsprop", "huber", 2.5e-4, "nature", "float32")


def test_the_benchmark_applies_the_protocol_preset():
    args = benchmark.parse_args(["--protocol=machado", "--workers", "4"])
    config = benchmark.bench_config(args, 4)
    assert (config.sticky_actions, config.full_action_set, config.noop_max) == (0.25, True, 0)


def test_the_benchmarks_trainer_flags_are_the_trainers(monkeypatch):
    """Its help for a trainer's flag is the trainer's: one parser makes both."""
    bench = {action.dest: action for action in benchmark_parser(monkeypatch)._actions}
    trainer = {action.dest: action for action in make_parser(ALGO_FAST_DQN, "")._actions}
    for name in ("game", "seed", "target_update", "final_epsilon", "backend",
                 "updates_per_call", "replay_device", "xla", "protocol", "double", "dueling",
                 "optimizer", "loss"):
        assert bench[name].help == trainer[name].help, name
        assert bench[name].choices == trainer[name].choices, name


@pytest.mark.parametrize("argv, message", [
    (["--optimizer=sgd"], "argument --optimizer: invalid choice: 'sgd'"),
    (["--optimizer=adam", "--rmsprop-epsilon=0.1"], "unrecognized arguments"),
    (["--updates-per-call=0"], "--updates-per-call must be at least 1"),
])
def test_bad_variant_input_to_the_benchmark_is_one_line(argv, message, capsys):
    try:
        status = benchmark.main([*argv, "--workers", "4"])
    except SystemExit as exit_:  # argparse's refusals
        status = exit_.code
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1 and message in err, err


# ----------------------------------------------------------------------- learning check


@pytest.mark.slow
def test_learning_check_passes_adam_and_mse_and_names_their_run(tmp_path, fake_learner):  # noqa: F811
    env = {**os.environ, "FAKE_EVALS": "80000:400", "REAL_PYTHON": PY}
    result = subprocess.run([str(LEARNING_CHECK), "--python", str(fake_learner), "--loss=mse",
                             "--optimizer", "adam", "--trainer", "serial"],
                            capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = tmp_path / "runs" / "learning-check-road_runner-serial-adam-mse-seed0"
    args = (out / "args").read_text().split("\n")
    assert "--optimizer=adam" in args and "--loss=mse" in args
    assert not [a for a in args if a.startswith("--lr")]  # the trainer picks Dopamine's


@pytest.mark.slow
def test_learning_check_passes_natures_values_on_without_naming_them(tmp_path,
                                                                    fake_learner):  # noqa: F811
    env = {**os.environ, "FAKE_EVALS": "80000:400", "REAL_PYTHON": PY}
    result = subprocess.run([str(LEARNING_CHECK), "--python", str(fake_learner),
                             "--optimizer=rmsprop", "--double=false", "--protocol", "nature"],
                            capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = tmp_path / "runs" / "learning-check-road_runner-fast-seed0"
    args = (out / "args").read_text().split("\n")
    assert not [a for a in args if a.split("=")[0] in ("--optimizer", "--double", "--protocol")]


@pytest.mark.slow
def test_learning_check_help_lists_every_variant_flag(tmp_path):
    result = run([LEARNING_CHECK, "--python", PY, "--help"])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for flag, meaning in [("--protocol=nature|machado", "machado: protocol machado"),
                          ("--double", "Double DQN target"),
                          ("--dueling", "dueling network"),
                          ("--optimizer=rmsprop|adam", "adam: Adam (Dopamine's)"),
                          ("--loss=huber|mse", "mse: mean squared loss (Dopamine's)"),
                          ("--n-step=N", "N-step returns (default: 1)"),
                          ("--prioritized", "prioritized replay"),
                          ("--precision=float32|bfloat16",
                           "bfloat16: bfloat16 network compute (default: float32)")]:
        assert any(line.split()[:1] == [flag] and meaning in line for line in lines), flag


@pytest.mark.slow
@pytest.mark.parametrize("args, message", [
    (["--optimizer", "sgd"], "argument --optimizer: invalid choice: 'sgd'"),
    (["--loss=l1"], "argument --loss: invalid choice: 'l1'"),
    (["--lr=0.1"], "unrecognized arguments: --lr 0.1"),
])
def test_learning_check_refuses_a_bad_variant_in_one_line(tmp_path, fake_learner, args,  # noqa: F811
                                                          message):
    result = learning_check([*args, "--out", tmp_path / "run"], "", fake_learner)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr
    assert not (tmp_path / "run").exists()


def test_every_variant_field_is_a_config_field():
    names = {field.name for field in dataclasses.fields(Config)}
    assert {variant.field for variant in VARIANTS} <= names


@pytest.mark.slow
def test_the_benchmark_measures_an_adam_mse_run_and_names_it(capsys):
    argv = [*REAL_NETWORK, "--workers", "2", "--skip-serial", "--xla=off",
            "--optimizer=adam", "--loss=mse"]
    assert benchmark.main(argv) == 0
    result = last_json_line(capsys.readouterr().out)
    assert (result["optimizer"], result["loss"], result["double"], result["dueling"],
            result["protocol"]) == ("adam", "mse", False, False, "nature")
    assert result["fast_steps_per_second"] > 0 and result["trainer_updates_per_second"] > 0
