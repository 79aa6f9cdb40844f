"""Tests of fast_dqn.run_files: the run directory's files and the progress line."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import statistics
from datetime import datetime
from pathlib import Path

import pytest

from fast_dqn import run_files
from fast_dqn.config import Config
from fast_dqn.run_files import (EPISODE_COLUMNS, EVALUATION_COLUMNS, EpisodeStats, Progress,
                                RunFiles, check_run_dir_writable, default_run_dir,
                                library_versions, write_json_atomic, write_text_atomic)


def read_csv(path: Path) -> list[list[str]]:
    with open(path, newline="") as file:
        return list(csv.reader(file))


def episodes_of(n: int) -> list[tuple[int, float]]:
    """n (length, return) pairs that differ from game to game."""
    return [(100 + 7 * i, float((i * 13) % 41 - 20)) for i in range(n)]


# ---------------------------------------------------------------------------- run directory


def test_default_run_dir_names_game_algo_seed_and_time():
    path = default_run_dir("pong", "fast_dqn", 3, now=datetime(2024, 5, 6, 7, 8, 9))
    assert path == Path("runs/pong-fast_dqn-seed3-20240506-070809")


def test_default_run_dir_keeps_gym_ids_in_one_directory():
    path = default_run_dir("ALE/Pong-v5", "dqn", 0, now=datetime(2024, 1, 1))
    assert path.parent == Path("runs") and "/" not in path.name


def test_check_run_dir_accepts_new_nested_dir_and_creates_nothing(tmp_path):
    check_run_dir_writable(tmp_path / "a" / "b" / "run")
    assert list(tmp_path.iterdir()) == []


def test_check_run_dir_rejects_file_as_parent_and_creates_nothing(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="not a directory.*--logdir"):
        check_run_dir_writable(tmp_path / "file" / "sub" / "run")
    with pytest.raises(ValueError, match="not a directory"):
        check_run_dir_writable(tmp_path / "file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_check_run_dir_rejects_existing_run_and_touches_nothing(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    check_run_dir_writable(run_dir)  # an empty directory is fine
    (run_dir / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="already holds a run.*--resume.*--logdir"):
        check_run_dir_writable(run_dir)
    assert [p.name for p in run_dir.iterdir()] == ["config.json"]
    assert (run_dir / "config.json").read_text() == "{}"


def test_check_run_dir_rejects_unwritable_parent(tmp_path, monkeypatch):
    # Root may write anywhere, so the kernel's answer is stubbed for the locked directory.
    parent = tmp_path / "locked"
    parent.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access",
                        lambda path, mode: False if Path(path) == parent else real_access(path, mode))
    with pytest.raises(ValueError, match="not writable"):
        check_run_dir_writable(parent / "run")
    assert list(parent.iterdir()) == []


def test_run_files_refuses_to_overwrite_a_run(tmp_path):
    with RunFiles(tmp_path / "run") as files:
        files.write_config({"seed": 0})
    with pytest.raises(ValueError, match="already holds a run"):
        RunFiles(tmp_path / "run")


def test_resume_needs_an_existing_directory(tmp_path):
    with pytest.raises(ValueError, match="cannot resume"):
        RunFiles(tmp_path / "missing", resume=True)
    assert not (tmp_path / "missing").exists()


# ---------------------------------------------------------------------------- atomic writes


def test_atomic_write_replaces_content_and_leaves_no_temp_files(tmp_path):
    target = tmp_path / "summary.json"
    write_json_atomic(target, {"a": 1})
    write_json_atomic(target, {"a": 2, "b": [1.5, None]})
    assert json.loads(target.read_text()) == {"a": 2, "b": [1.5, None]}
    write_text_atomic(tmp_path / "notes.txt", "hello\n")
    assert (tmp_path / "notes.txt").read_text() == "hello\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "summary.json"]


def test_failed_atomic_write_keeps_previous_file(tmp_path, monkeypatch):
    target = tmp_path / "config.json"
    write_json_atomic(target, {"version": 1})

    def broken_replace(src, dst):
        raise OSError("disk fell off")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk fell off"):
        write_json_atomic(target, {"version": 2})
    assert json.loads(target.read_text()) == {"version": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]


def test_json_is_strict(tmp_path):
    target = tmp_path / "s.json"
    write_json_atomic(target, {"nan": math.nan, "inf": math.inf, "path": Path("x/y")})
    assert json.loads(target.read_text()) == {"nan": None, "inf": None, "path": "x/y"}


# ---------------------------------------------------------------------------- config.json


def test_library_versions_names_every_library():
    versions = library_versions()
    assert set(versions) == {"python", "numpy", "tensorflow", "gymnasium", "ale-py", "opencv"}
    assert all(isinstance(v, str) and v for v in versions.values())


def test_config_json_round_trips_settings_with_library_versions(tmp_path):
    config = Config(game="breakout", seed=7, workers=4, lr=1e-4)
    with RunFiles(tmp_path / "run") as files:
        files.write_config(dataclasses.asdict(config))
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved.pop("library_versions") == library_versions()
    assert Config(**saved) == config


# ---------------------------------------------------------------------------- episodes.csv


def test_episodes_csv_header_and_columns(tmp_path):
    with RunFiles(tmp_path / "run") as files:
        files.log_episode(timestep=812, length=812, ret=-21.0, hours=0.01)
        files.log_episode(timestep=1700, length=888, ret=-19.0, hours=0.02)
    rows = read_csv(tmp_path / "run" / "episodes.csv")
    assert rows[0] == ["episode", "timestep", "length", "return", "avg_length", "avg_return",
                       "hours"]
    assert tuple(rows[0]) == EPISODE_COLUMNS
    assert rows[1] == ["1", "812", "812", "-21.0", "812.0", "-21.0", "0.0100"]
    assert rows[2][:4] == ["2", "1700", "888", "-19.0"]
    assert float(rows[2][4]) == 850.0 and float(rows[2][5]) == -20.0
    assert all(len(row) == 7 for row in rows)


def test_running_averages_cover_the_last_100_games(tmp_path):
    games = episodes_of(150)
    with RunFiles(tmp_path / "run") as files:
        for i, (length, ret) in enumerate(games):
            files.log_episode(timestep=1000 * (i + 1), length=length, ret=ret, hours=0.0)
        assert files.episode_stats.episodes == 150
    last = read_csv(tmp_path / "run" / "episodes.csv")[-1]
    last_100 = games[50:]
    assert int(last[0]) == 150
    assert float(last[4]) == pytest.approx(sum(g[0] for g in last_100) / 100)
    assert float(last[5]) == pytest.approx(sum(g[1] for g in last_100) / 100)
    # Before 100 games, the average covers all games so far.
    row_30 = read_csv(tmp_path / "run" / "episodes.csv")[30]
    assert float(row_30[5]) == pytest.approx(sum(g[1] for g in games[:30]) / 30)


def test_episode_stats_state_round_trips_through_json():
    stats = EpisodeStats()
    for length, ret in episodes_of(130):
        stats.add(length, ret)
    restored = EpisodeStats()
    restored.load_state(json.loads(json.dumps(stats.state())))
    for length, ret in episodes_of(20):
        stats.add(length, ret)
        restored.add(length, ret)
    assert restored.state() == stats.state()
    assert (restored.episodes, restored.avg_length, restored.avg_return) == \
        (stats.episodes, stats.avg_length, stats.avg_return)


def test_episode_stats_empty_and_bad_state():
    stats = EpisodeStats()
    assert stats.episodes == 0 and math.isnan(stats.avg_return) and math.isnan(stats.avg_length)
    with pytest.raises(ValueError, match="inconsistent"):
        stats.load_state({"window": 100, "episodes": 1, "lengths": [1, 2], "returns": [1.0]})


def test_resume_appends_without_second_header_and_continues_numbers(tmp_path):
    run_dir = tmp_path / "run"
    games = episodes_of(120)
    with RunFiles(run_dir) as files:
        for i, (length, ret) in enumerate(games[:110]):
            files.log_episode(timestep=10 * (i + 1), length=length, ret=ret, hours=0.0)
        files.log_evaluation(500, [1.0, 2.0], hours=0.0)
        checkpoint = json.loads(json.dumps(files.episode_stats.state()))

    with RunFiles(run_dir, resume=True) as files:
        files.episode_stats.load_state(checkpoint)
        for i, (length, ret) in enumerate(games[110:], start=110):
            files.log_episode(timestep=10 * (i + 1), length=length, ret=ret, hours=0.0)
        files.log_evaluation(1000, [3.0], hours=0.0)

    rows = read_csv(run_dir / "episodes.csv")
    assert rows.count(list(EPISODE_COLUMNS)) == 1
    assert [int(row[0]) for row in rows[1:]] == list(range(1, 121))
    assert float(rows[-1][5]) == pytest.approx(sum(g[1] for g in games[20:]) / 100)
    evaluations = read_csv(run_dir / "evaluations.csv")
    assert evaluations.count(list(EVALUATION_COLUMNS)) == 1
    assert [row[0] for row in evaluations[1:]] == ["500", "1000"]


def test_resume_without_checkpoint_state_continues_from_the_csv(tmp_path):
    run_dir = tmp_path / "run"
    games = episodes_of(130)
    with RunFiles(run_dir) as files:
        for i, (length, ret) in enumerate(games):
            files.log_episode(timestep=i + 1, length=length, ret=ret, hours=0.0)
        expected = files.episode_stats.state()
    with RunFiles(run_dir, resume=True) as files:
        assert files.episode_stats.state() == expected


def test_resume_step_drops_rows_logged_after_the_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    with RunFiles(run_dir) as files:
        for step in (100, 200, 300):
            files.log_episode(timestep=step, length=100, ret=float(step), hours=0.0)
            files.log_evaluation(step, [float(step)], hours=0.0)
    with open(run_dir / "episodes.csv", "ab") as file:
        file.write(b"4,400,100,40")  # a torn row, as a power cut could leave
    with RunFiles(run_dir, resume=True, resume_step=200) as files:
        assert files.episode_stats.episodes == 2
        files.log_episode(timestep=300, length=100, ret=7.0, hours=0.0)
    rows = read_csv(run_dir / "episodes.csv")
    assert [(row[0], row[1], row[3]) for row in rows[1:]] == \
        [("1", "100", "100.0"), ("2", "200", "200.0"), ("3", "300", "7.0")]
    assert [row[0] for row in read_csv(run_dir / "evaluations.csv")[1:]] == ["100", "200"]


def test_each_row_is_on_disk_whole_as_soon_as_it_is_logged(tmp_path):
    path = tmp_path / "run" / "episodes.csv"
    with RunFiles(tmp_path / "run") as files:
        for n in range(1, 4):
            files.log_episode(timestep=5 * n, length=5, ret=1.0, hours=0.0)
            text = path.read_text()  # read while the file is still open: nothing is buffered
            assert text.endswith("\n") and text.count("\n") == n + 1
            assert read_csv(path)[-1][:2] == [str(n), str(5 * n)]


# ---------------------------------------------------------------------------- evaluations.csv


def test_log_evaluation_writes_and_returns_the_row(tmp_path):
    returns = [-21.0, -20.0, -19.0, -21.0]
    with RunFiles(tmp_path / "run") as files:
        row = files.log_evaluation(250_000, returns, hours=1.5)
        with pytest.raises(ValueError, match="at least one"):
            files.log_evaluation(500_000, [], hours=2.0)
    assert row == {"timestep": 250_000, "mean": statistics.fmean(returns),
                   "std": pytest.approx(statistics.pstdev(returns)), "episodes": 4,
                   "hours": 1.5}
    rows = read_csv(tmp_path / "run" / "evaluations.csv")
    assert rows[0] == ["timestep", "mean", "std", "episodes", "hours"]
    assert len(rows) == 2
    assert rows[1][0] == "250000" and rows[1][3] == "4" and rows[1][4] == "1.5000"
    assert float(rows[1][1]) == row["mean"] and float(rows[1][2]) == pytest.approx(row["std"])


# ---------------------------------------------------------------------------- summary, TensorBoard


def test_write_summary(tmp_path):
    with RunFiles(tmp_path / "run") as files:
        files.write_summary({"steps": 10, "last_evaluation": None})
        files.write_summary({"steps": 20, "last_evaluation": -20.5})
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary == {"steps": 20, "last_evaluation": -20.5}


def test_module_imports_without_tensorflow():
    import subprocess
    import sys
    code = ("import sys, fast_dqn.run_files as r, tempfile, pathlib;"
            "d = pathlib.Path(tempfile.mkdtemp()) / 'run';"
            "f = r.RunFiles(d); f.write_config({}); f.log_episode(1, 1, 1.0, 0.0); f.close();"
            "assert 'tensorflow' not in sys.modules")
    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)


def test_log_scalars_writes_tensorboard_events(tmp_path):
    import tensorflow as tf
    run_dir = tmp_path / "run"
    with RunFiles(run_dir) as files:
        files.log_scalars(100, {"train/loss": 0.5, "train/epsilon": 0.9})
        files.log_scalars(200, {"train/loss": 0.25})
    events = list(run_dir.glob("events.out.tfevents.*"))
    assert len(events) == 1
    seen, plugins = {}, set()
    for record in tf.data.TFRecordDataset(str(events[0])):
        event = tf.compat.v1.Event.FromString(record.numpy())
        for value in event.summary.value:
            number = tf.make_ndarray(value.tensor).item()
            seen.setdefault(value.tag, []).append((event.step, number))
            plugins.add(value.metadata.plugin_data.plugin_name)
    assert seen["train/loss"] == [(100, 0.5), (200, 0.25)]
    assert seen["train/epsilon"] == [(100, pytest.approx(0.9))]
    assert plugins == {"scalars"}  # what TensorBoard's scalar dashboard looks for


def test_tensorboard_lists_the_scalars_of_a_real_run(tmp_path, capsys):
    """TensorBoard itself (requirements-scripts.txt) reads a tiny run's scalars, the way its
    scalars dashboard does: its event multiplexer and data provider, plugin "scalars"."""
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer

    from fast_dqn.config import ALGO_DQN
    from fast_dqn.launch import main

    runs = tmp_path / "runs"
    argv = ["--game=pong", "--timesteps=300", "--replay-start=100", "--replay-capacity=1000",
            "--target-update=100", "--evaluate=300", "--eval-episodes=1",
            "--eval-max-episode-steps=20", "--max-episode-steps=100", "--checkpoint-every=0",
            "--checkpoint-replay=false", f"--logdir={runs / 'tiny'}"]
    assert main(argv, ALGO_DQN) == 0
    capsys.readouterr()
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(runs))
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, str(runs))
    request = context.RequestContext()
    listed = provider.list_scalars(request, experiment_id="", plugin_name="scalars")
    assert set(listed) == {"tiny"}
    assert {"train/loss", "train/mean_q", "train/epsilon", "train/steps_per_second",
            "episode/return", "episode/length", "eval/mean_return"} <= set(listed["tiny"])
    data = provider.read_scalars(request, experiment_id="", plugin_name="scalars",
                                 downsample=1000, run_tag_filter=None)["tiny"]
    assert [datum.step for datum in data["eval/mean_return"]] == [300]
    assert [datum.step for datum in data["train/loss"]] == [200, 300]
    assert all(math.isfinite(datum.value) for datum in data["train/loss"])


# ---------------------------------------------------------------------------- progress


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_off_a_terminal_prints_plain_periodic_lines():
    stream, clock = io.StringIO(), FakeClock()
    progress = Progress(50_000_000, every_seconds=10.0, stream=stream, clock=clock)
    clock.now = 5.0
    progress.update(5_000, epsilon=0.95, recent_return=None, last_eval=None)
    assert stream.getvalue() == ""  # not due yet
    clock.now = 10.0
    progress.update(12_000, epsilon=0.91, recent_return=-20.3, last_eval=-21.0)
    clock.now = 20.0
    progress.update(32_000, epsilon=0.88, recent_return=-20.04, last_eval=None)
    progress.close()
    lines = stream.getvalue().splitlines()
    assert lines[0] == ("step 12000/50000000 (0.0%) | 1200 steps/s | ETA 11h34m | eps 0.91 | "
                        "return -20.3 | eval -21.0")
    assert lines[1].startswith("step 32000/50000000 (0.1%) | 2000 steps/s | ETA 6h56m | ")
    assert lines[1].endswith("eps 0.88 | return -20.0 | eval -")
    assert len(lines) == 2  # close adds nothing when the last step was already shown
    assert "\r" not in stream.getvalue()


def test_progress_off_a_terminal_with_real_clock():
    stream = io.StringIO()
    progress = Progress(1000, initial_step=100, every_seconds=1e-9, stream=stream)
    for step in range(200, 1001, 200):
        progress.update(step, epsilon=0.5, recent_return=1.0, last_eval=2.0)
    progress.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 5
    assert all("steps/s" in line and "ETA" in line for line in lines)
    assert lines[-1].startswith("step 1000/1000 (100.0%)") and "ETA 0m00s" in lines[-1]


def test_progress_close_prints_the_final_step():
    stream, clock = io.StringIO(), FakeClock()
    progress = Progress(100, every_seconds=30.0, stream=stream, clock=clock)
    clock.now = 2.0
    progress.update(100, epsilon=0.1, recent_return=3.0, last_eval=None)
    progress.close()
    assert stream.getvalue() == ("step 100/100 (100.0%) | 50 steps/s | ETA 0m00s | eps 0.10 | "
                                 "return 3.0 | eval -\n")


def test_progress_on_a_terminal_redraws_one_line_with_tqdm():
    stream, clock = FakeTerminal(), FakeClock()
    progress = Progress(10_000, every_seconds=30.0, stream=stream, clock=clock)
    for i in range(1, 11):
        clock.now = float(i)
        progress.update(1000 * i, epsilon=0.5, recent_return=-3.0, last_eval=4.0)
        assert "\n" not in stream.getvalue()  # redrawn in place, never a new line per update
    progress.close()
    output = stream.getvalue()
    assert output.count("\r") >= 10
    assert output.count("\n") <= 1
    assert "10.0k/10.0k" in output and "eps 0.50 | return -3.0 | eval 4.0" in output


def test_progress_rejects_bad_settings():
    with pytest.raises(ValueError, match="positive"):
        Progress(10, every_seconds=0, stream=io.StringIO())
    with pytest.raises(ValueError, match="0 or more"):
        Progress(-1, stream=io.StringIO())


def test_duration_format():
    assert run_files._duration(9 * 3600 + 2 * 60 + 10) == "9h02m"
    assert run_files._duration(245) == "4m05s"
