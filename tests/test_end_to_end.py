"""Both trainers run for real with tiny flags: run files, determinism, failing threads."""

import csv
import json
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from fast_dqn.config import ALGO_DQN, ALGO_FAST_DQN
from fast_dqn.launch import main
from tests import cli_runs
from tests.cli_runs import REPO, SMALL_BATCH, without_hours

# The tests' tiny breakout run (tests/cli_runs.py), 2,000 steps with two evaluations.
# Minibatches of 4, not 32: an update costs ~20 ms at 32 on a 2-core CPU, and no test here
# is about the trainer's speed against the acting (they check files, determinism, resumes
# and failures, none of which depends on the minibatch's size). Evaluation games cut at 300
# steps, as training games are at 400: an untrained agent's game of breakout can last the
# default 4,500, and no test here reads a score.
RUN = [*cli_runs.TINY, "--timesteps=2000", "--evaluate=1000", "--eval-episodes=2",
       "--eval-max-episode-steps=300", "--checkpoint-every=0", SMALL_BATCH]
EPISODE_COLUMNS = ["episode", "timestep", "length", "return", "avg_length", "avg_return",
                   "hours"]
EVALUATION_COLUMNS = ["timestep", "mean", "std", "episodes", "hours"]


def read_rows(path: Path) -> tuple[list[str], list[dict]]:
    with open(path) as file:
        reader = csv.DictReader(file)
        return reader.fieldnames, list(reader)


def check_run_files(run_dir: Path, algo: str, steps: int) -> dict:
    config = json.loads((run_dir / "config.json").read_text())
    assert config["algo"] == algo
    assert config["game"] == "breakout"
    assert "tensorflow" in config["library_versions"]
    columns, episodes = read_rows(run_dir / "episodes.csv")
    assert columns == EPISODE_COLUMNS
    assert episodes, "a few games of breakout end within 2000 steps"
    assert [int(row["episode"]) for row in episodes] == list(range(1, len(episodes) + 1))
    columns, evaluations = read_rows(run_dir / "evaluations.csv")
    assert columns == EVALUATION_COLUMNS
    assert [int(row["episodes"]) for row in evaluations] == [2] * len(evaluations)
    assert list(run_dir.glob("events.out.tfevents.*"))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["finished"] is True
    assert summary["steps"] == steps
    assert summary["updates"] == (steps - 400) // 4
    assert summary["steps_per_second"] > 0
    assert summary["device"].startswith("training on")
    assert (run_dir / "checkpoint" / "manifest.json").is_file()
    assert not [path for path in run_dir.iterdir() if "mp4" in path.name]  # --video-every=0
    return summary


@pytest.mark.slow
def test_run_dqn_writes_every_run_file(tmp_path, capsys):
    run_dir = tmp_path / "dqn"
    assert main(RUN + [f"--logdir={run_dir}"], ALGO_DQN) == 0
    out = capsys.readouterr().out
    assert "training on CPU" in out and "; XLA on" in out  # --xla=on
    assert json.loads((run_dir / "config.json").read_text())["xla_compiled"] is True
    summary = check_run_files(run_dir, ALGO_DQN, 2000)
    _, evaluations = read_rows(run_dir / "evaluations.csv")
    assert [int(row["timestep"]) for row in evaluations] == [1000, 2000]
    assert summary["last_evaluation"]["timestep"] == 2000


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["vector", "threads"])
def test_run_fast_dqn_writes_every_run_file(tmp_path, backend):
    run_dir = tmp_path / backend
    argv = RUN + ["--workers=4", f"--backend={backend}", f"--logdir={run_dir}"]
    assert main(argv, ALGO_FAST_DQN) == 0
    check_run_files(run_dir, ALGO_FAST_DQN, 2000)
    _, evaluations = read_rows(run_dir / "evaluations.csv")
    # Evaluations happen at the first sync point at or after each multiple of --evaluate.
    assert [int(row["timestep"]) for row in evaluations] == [1200, 2000]


@pytest.mark.slow
@pytest.mark.parametrize("flags", [["--concurrent=false"], ["--synchronize=false"]])
def test_fast_dqn_variants_run(tmp_path, flags):
    run_dir = tmp_path / "variant"
    # Two epochs of learning (400 steps each): each variant's loop goes from one to the next.
    argv = RUN + ["--workers=2", "--evaluate=0", "--timesteps=1200", f"--logdir={run_dir}"]
    assert main(argv + flags, ALGO_FAST_DQN) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["finished"] and summary["updates"] == (1200 - 400) // 4


@pytest.mark.slow
def test_a_device_that_cannot_compile_finishes_the_run_uncompiled(tmp_path, monkeypatch,
                                                                   capsys):
    """XLA declining to compile on the device (faked: every compiled call is refused) costs
    one line on stderr; the run finishes uncompiled and config.json records it."""
    from fast_dqn.learner import Learner
    from tests.fakes import refusing_xla

    build = Learner._build_functions

    def build_refused(self, xla):
        build(self, xla)
        if xla:
            refusing_xla(self, "XLA compilation requires a fixed tensor list size")

    monkeypatch.setattr(Learner, "_build_functions", build_refused)
    run_dir = tmp_path / "refused"
    argv = RUN + ["--workers=2", "--evaluate=0", "--timesteps=1200", f"--logdir={run_dir}"]
    assert main(argv, ALGO_FAST_DQN) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "XLA" in line]
    assert err == ["note: XLA could not compile on this device (XLA compilation requires a "
                   "fixed tensor list size); the run goes on uncompiled, as with --xla=off"]
    assert json.loads((run_dir / "config.json").read_text())["xla_compiled"] is False
    assert json.loads((run_dir / "summary.json").read_text())["finished"] is True


@pytest.mark.slow
@pytest.mark.parametrize("pieces", [[], ["--n-step=3", "--prioritized=true"]],
                         ids=["nature", "n-step-prioritized"])
def test_fast_dqn_is_deterministic_whatever_the_thread_timing(tmp_path, monkeypatch, pieces):
    """Same seed, same run; in the second, the trainer's updates and the calls of the acting
    loop's rounds (the pool's send and receive, which the fast loop makes) are slowed by
    random sleeps, so the two threads interleave differently. (Flushing the epoch's
    transitions before waiting for the learner, so that it samples a memory being written,
    made this test fail.) One minibatch per trainer call, so that the trainer draws from the
    memory all through each epoch, not only in the first moments of it. Epochs of 200 steps
    (50 updates; the trainer, slower than the acting here even unslowed, is still drawing
    when an epoch's last step is taken), so that 3 epochs take half the updates. With
    priorities the learner thread writes them back during the epoch, and draws the next
    call only after (the priorities are compared with the memory's other arrays)."""
    argv = RUN + ["--workers=4", "--target-update=200", "--timesteps=1000",  # 3 epochs
                  "--updates-per-call=1", *pieces]
    assert main(argv + [f"--logdir={tmp_path / 'a'}"], ALGO_FAST_DQN) == 0

    from fast_dqn.learner import Learner
    from fast_dqn.env_pools import VectorEnvPool
    jitter = random.Random()  # deliberately unseeded: the timing differs on every run

    def slowed(method, seconds):
        def slow(self, *args):
            time.sleep(jitter.random() * seconds)
            return method(self, *args)
        return slow

    monkeypatch.setattr(Learner, "update", slowed(Learner.update, 0.02))
    monkeypatch.setattr(VectorEnvPool, "send", slowed(VectorEnvPool.send, 0.002))
    monkeypatch.setattr(VectorEnvPool, "receive", slowed(VectorEnvPool.receive, 0.002))
    assert main(argv + [f"--logdir={tmp_path / 'b'}"], ALGO_FAST_DQN) == 0

    for name in ("episodes.csv", "evaluations.csv"):
        _, rows_a = read_rows(tmp_path / "a" / name)
        _, rows_b = read_rows(tmp_path / "b" / name)
        assert without_hours(rows_a) == without_hours(rows_b)
        assert rows_a
    replay_a = sorted((tmp_path / "a" / "checkpoint" / "replay").glob("*.npy"))
    assert {path.stem for path in replay_a} >= {"frames", "actions", "rewards", "terminals",
                                                 "episode_ends", "cursor", "size",
                                                 *(["priorities"] if pieces else [])}
    for path_a in replay_a:  # every array and counter of the memory
        saved_b = np.load(tmp_path / "b" / "checkpoint" / "replay" / path_a.name)
        np.testing.assert_array_equal(np.load(path_a), saved_b, err_msg=path_a.name)
    weights_a = _saved_variables(tmp_path / "a")
    weights_b = _saved_variables(tmp_path / "b")
    assert weights_a.keys() == weights_b.keys()
    assert any(name.startswith("target/") for name in weights_a)  # the target network too
    for name in weights_a:
        np.testing.assert_array_equal(weights_a[name], weights_b[name], err_msg=name)


def _saved_variables(run_dir: Path) -> dict[str, np.ndarray]:
    """Every variable of the saved networks and optimizer slots."""
    import tensorflow as tf
    reader = tf.train.load_checkpoint(str(run_dir / "checkpoint" / "network" / "ckpt"))
    names = [name for name in reader.get_variable_to_shape_map()
             if name != "_CHECKPOINTABLE_OBJECT_GRAPH"]
    assert len(names) > 20  # online and target layers and the optimizer's slots
    return {name: reader.get_tensor(name) for name in names}


FAULT_DRIVER = textwrap.dedent("""
    import importlib
    import sys
    from fast_dqn.config import ALGO_FAST_DQN
    from fast_dqn.launch import main

    owner = getattr(importlib.import_module("{module}"), "{owner}")
    original = getattr(owner, "{method}")
    calls = [0]

    def failing(self, *args):
        calls[0] += 1
        if calls[0] > {after}:
            raise RuntimeError("{message}")
        return original(self, *args)

    setattr(owner, "{method}", failing)
    sys.exit(main(sys.argv[1:], ALGO_FAST_DQN))
""")


@pytest.mark.parametrize("module,owner,method,after,backend,message", [
    ("fast_dqn.atari", "AtariEnv", "step", 700, "threads", "injected sampler failure"),
    ("fast_dqn.learner", "Learner", "update", 2, "vector", "injected trainer failure"),
])
@pytest.mark.slow
def test_a_failing_thread_stops_the_run(tmp_path, module, owner, method, after, backend,
                                        message):
    run_dir = tmp_path / "run"
    argv = RUN + ["--workers=4", f"--backend={backend}", "--timesteps=20000",
                   f"--logdir={run_dir}"]
    started = time.monotonic()
    driver = FAULT_DRIVER.format(module=module, owner=owner, method=method, after=after,
                                 message=message)
    result = subprocess.run([sys.executable, "-c", driver, *argv],
                            cwd=REPO, capture_output=True, text=True, timeout=240)
    assert result.returncode != 0
    assert message in result.stderr
    assert time.monotonic() - started < 240
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["finished"] is False
    assert summary["steps"] < 20000


@pytest.mark.slow
@pytest.mark.parametrize("algo", [ALGO_DQN, ALGO_FAST_DQN])
def test_machado_double_dueling_runs_resumes_and_plays(tmp_path, algo, capsys):
    run_dir = tmp_path / algo
    flags = ["--protocol=machado", "--double=true", "--dueling=true", "--evaluate=0",
             "--timesteps=800", f"--logdir={run_dir}"]  # 100 updates, then 100 resumed
    flags += ["--workers=4"] if algo == ALGO_FAST_DQN else []
    assert main(RUN + flags, algo) == 0
    assert main([f"--resume={run_dir}", "--timesteps=1200"], algo) == 0
    config = json.loads((run_dir / "config.json").read_text())
    assert (config["protocol"], config["double"], config["dueling"]) == ("machado", True, True)
    assert (config["sticky_actions"], config["life_loss_terminal"]) == (0.25, False)
    assert config["full_action_set"] is True and config["noop_max"] == 0
    assert config["max_episode_steps"] == 400  # the tiny run's flag, beside the preset, wins
    assert config["protocol_overrides"] == ["max_episode_steps"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["finished"] and summary["steps"] == 1200
    _, episodes = read_rows(run_dir / "episodes.csv")
    last_returns = [float(row["return"]) for row in episodes[-100:]]
    assert summary["training_games"] == len(episodes) > 0
    assert summary["training_return_last_100"] == pytest.approx(np.mean(last_returns))

    from fast_dqn import play  # the dueling network of the checkpoint is rebuilt to play
    capsys.readouterr()
    assert play.main([str(run_dir), "--episodes", "1", "--max-steps", "20"]) == 0
    assert "game 1/1: score " in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("algo, frames", [(ALGO_DQN, "host"), (ALGO_FAST_DQN, "device")])
def test_bfloat16_runs_resumes_and_plays_in_bfloat16(tmp_path, algo, frames, monkeypatch,
                                                      capsys):
    """--precision=bfloat16 in each trainer, with each frame store: config.json keeps it, so
    the resume and play build their networks in bfloat16 too; the checkpoint is float32."""
    import fast_dqn
    from fast_dqn import learner, play

    built = []
    make_learner = learner.make_learner

    def recording(config, *args, **kwargs):
        network = make_learner(config, *args, **kwargs)
        built.append({layer.compute_dtype for layer in network.online.layers if layer.weights})
        return network

    monkeypatch.setattr(learner, "make_learner", recording)
    run_dir = tmp_path / algo
    flags = ["--precision=bfloat16", f"--replay-device={frames}", "--evaluate=0",
             "--timesteps=800", f"--logdir={run_dir}"]
    flags += ["--workers=4"] if algo == ALGO_FAST_DQN else []
    assert main(RUN + flags, algo) == 0
    assert "bfloat16 network compute" in capsys.readouterr().out  # the variant line
    assert main([f"--resume={run_dir}", "--timesteps=1200"], algo) == 0
    config = json.loads((run_dir / "config.json").read_text())
    assert config["precision"] == "bfloat16"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["finished"] and (summary["steps"], summary["updates"]) == (1200, 200)
    saved = _saved_variables(run_dir)
    assert {array.dtype.name for name, array in saved.items() if "iteration" not in name} == \
        {"float32"}
    assert play.main([str(run_dir), "--episodes", "1", "--max-steps", "20"]) == 0
    assert "game 1/1: score " in capsys.readouterr().out
    agent = fast_dqn.load(run_dir)
    assert agent.act(np.zeros((3, 4, 84, 84), np.uint8)).shape == (3,)
    assert built == [{"bfloat16"}] * 4  # the run, its resume, play and load
