"""Tests of fast_dqn.run_logs: the CSVs, TensorBoard scalars, config.json and summary.json."""

from __future__ import annotations

import csv
import dataclasses
import errno
import io
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from fast_dqn import run_logs
from fast_dqn.config import Config
from fast_dqn.counters import EpisodeStats
from fast_dqn.run_dir import RunDirGone, WriteFailed, library_versions
from fast_dqn.run_logs import (EPISODE_COLUMNS, EVALUATION_COLUMNS, EpisodeRow, RunLogs,
                               check_logs_match)
from tests.cli_runs import REPO
from tests.fakes import episodes_of

EPISODES_HEADER = ",".join(EPISODE_COLUMNS) + "\n"
EVALUATIONS_HEADER = ",".join(EVALUATION_COLUMNS) + "\n"


def csv_rows(path: Path) -> list[list[str]]:
    """Every row as written, the header too (tests/cli_runs.read_csv gives dicts, which
    would hide a header written twice or a header's own columns)."""
    with open(path, newline="") as file:
        return list(csv.reader(file))


def opened(run_dir: Path, kept_rows: tuple[int, int] | None = None) -> RunLogs:
    run_dir.mkdir(parents=True, exist_ok=True)
    logs = RunLogs(run_dir)
    logs.open(kept_rows=kept_rows)
    return logs


def log_game(logs: RunLogs, stats: EpisodeStats, timestep: int, length: int, ret: float,
             hours: float = 0.0) -> None:
    """Logs one game the way the training loop does: the averages from its EpisodeStats."""
    stats.add(length, ret)
    logs.log_episode(EpisodeRow(episode=stats.episodes, timestep=timestep, length=length,
                                ret=ret, avg_length=stats.avg_length,
                                avg_return=stats.avg_return, hours=hours))


def row(episode: int, timestep: int) -> EpisodeRow:
    return EpisodeRow(episode, timestep, 100, 1.0, 100.0, 1.0, 0.0)


# ---------------------------------------------------------------------------- opening


def test_nothing_is_opened_until_open(tmp_path):
    logs = RunLogs(tmp_path / "run")
    logs.close()  # nothing to close either
    assert not (tmp_path / "run").exists()
    (tmp_path / "run").mkdir()
    RunLogs(tmp_path / "run")
    assert list((tmp_path / "run").iterdir()) == []
    logs = RunLogs(tmp_path / "run")
    logs.open()
    logs.close()
    assert (tmp_path / "run" / "episodes.csv").read_text() == EPISODES_HEADER
    assert (tmp_path / "run" / "evaluations.csv").read_text() == EVALUATIONS_HEADER


# ---------------------------------------------------------------------------- config.json


def test_config_json_round_trips_settings_with_library_versions(tmp_path):
    config = Config(game="breakout", seed=7, workers=4, lr=1e-4)
    (tmp_path / "run").mkdir()
    RunLogs(tmp_path / "run").write_config(dataclasses.asdict(config))
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved.pop("library_versions") == library_versions()
    assert Config(**saved) == config


# ---------------------------------------------------------------------------- episodes.csv


def test_episodes_csv_header_and_columns(tmp_path):
    logs, stats = opened(tmp_path / "run"), EpisodeStats()
    log_game(logs, stats, timestep=812, length=812, ret=-21.0, hours=0.01)
    log_game(logs, stats, timestep=1700, length=888, ret=-19.0, hours=0.02)
    logs.close()
    rows = csv_rows(tmp_path / "run" / "episodes.csv")
    assert rows[0] == ["episode", "timestep", "length", "return", "avg_length", "avg_return",
                       "hours"]
    assert tuple(rows[0]) == EPISODE_COLUMNS
    assert rows[1] == ["1", "812", "812", "-21.0", "812.0", "-21.0", "0.0100"]
    assert rows[2] == ["2", "1700", "888", "-19.0", "850.0", "-20.0", "0.0200"]
    assert all(len(row) == 7 for row in rows)


def test_running_averages_cover_the_last_100_games(tmp_path):
    games = episodes_of(150)
    logs, stats = opened(tmp_path / "run"), EpisodeStats()
    for i, (length, ret) in enumerate(games):
        log_game(logs, stats, timestep=1000 * (i + 1), length=length, ret=ret)
    logs.close()
    assert stats.episodes == 150
    rows = csv_rows(tmp_path / "run" / "episodes.csv")
    last, last_100 = rows[-1], games[50:]
    assert int(last[0]) == 150
    assert float(last[4]) == pytest.approx(sum(g[0] for g in last_100) / 100)
    assert float(last[5]) == pytest.approx(sum(g[1] for g in last_100) / 100)
    # Before 100 games, the average covers all games so far.
    assert float(rows[30][5]) == pytest.approx(sum(g[1] for g in games[:30]) / 30)


def test_resume_appends_without_second_header_and_continues_numbers(tmp_path):
    run_dir = tmp_path / "run"
    games = episodes_of(120)
    logs, stats = opened(run_dir), EpisodeStats()
    for i, (length, ret) in enumerate(games[:110]):
        log_game(logs, stats, timestep=10 * (i + 1), length=length, ret=ret)
    logs.log_evaluation(500, [1.0, 2.0], hours=0.0)
    logs.close()
    checkpoint = json.loads(json.dumps(stats.state()))

    logs, stats = opened(run_dir, kept_rows=(110, 1)), EpisodeStats()
    stats.restore(checkpoint)
    for i, (length, ret) in enumerate(games[110:], start=110):
        log_game(logs, stats, timestep=10 * (i + 1), length=length, ret=ret)
    logs.log_evaluation(1200, [3.0], hours=0.0)
    logs.close()

    rows = csv_rows(run_dir / "episodes.csv")
    assert rows.count(list(EPISODE_COLUMNS)) == 1
    assert [int(row[0]) for row in rows[1:]] == list(range(1, 121))
    assert float(rows[-1][5]) == pytest.approx(sum(g[1] for g in games[20:]) / 100)
    evaluations = csv_rows(run_dir / "evaluations.csv")
    assert evaluations.count(list(EVALUATION_COLUMNS)) == 1
    assert [row[0] for row in evaluations[1:]] == ["500", "1200"]


def test_resume_drops_rows_logged_after_the_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    logs = opened(run_dir)
    for n, step in enumerate((100, 200, 300), start=1):
        logs.log_episode(EpisodeRow(n, step, 100, float(step), 100.0, 1.0, 0.0))
        logs.log_evaluation(step, [float(step)], hours=0.0)
    logs.close()
    with open(run_dir / "episodes.csv", "ab") as file:
        file.write(b"4,400,100,40")  # a torn row, as a power cut could leave
    logs = opened(run_dir, kept_rows=(2, 2))  # a checkpoint at step 200
    logs.log_episode(EpisodeRow(3, 300, 100, 7.0, 100.0, 1.0, 0.0))
    logs.close()
    rows = csv_rows(run_dir / "episodes.csv")
    assert [(row[0], row[1], row[3]) for row in rows[1:]] == \
        [("1", "100", "100.0"), ("2", "200", "200.0"), ("3", "300", "7.0")]
    assert [row[0] for row in csv_rows(run_dir / "evaluations.csv")[1:]] == ["100", "200"]


def test_resume_drops_a_torn_last_line_and_keeps_the_rows_before(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    whole = EPISODES_HEADER + "1,100,100,1.0,100.0,1.0,0.0000\n"
    (run_dir / "episodes.csv").write_text(whole + "2,200,10")
    opened(run_dir, kept_rows=(1, 0)).close()
    assert (run_dir / "episodes.csv").read_text() == whole


def test_resume_rewrites_nothing_when_nothing_is_dropped(tmp_path):
    run_dir = tmp_path / "run"
    logs = opened(run_dir)
    for n, step in enumerate((100, 200), start=1):
        logs.log_episode(row(n, step))
        logs.log_evaluation(step, [1.0], hours=0.0)
    logs.close()
    paths = [run_dir / "episodes.csv", run_dir / "evaluations.csv"]
    os.utime(paths[0], ns=(1_000_000_000, 1_000_000_000))  # an mtime a rewrite would change
    os.utime(paths[1], ns=(1_000_000_000, 1_000_000_000))
    before = [(p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes()) for p in paths]
    opened(run_dir, kept_rows=(2, 2)).close()
    opened(run_dir, kept_rows=(5, 5)).close()  # a count above the rows there drops nothing
    assert [(p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes()) for p in paths] == before
    opened(run_dir, kept_rows=(1, 1)).close()  # drops a row of each: a new file each
    assert all(p.stat().st_ino != ino for p, (ino, _, _) in zip(paths, before))
    assert [r[1] for r in csv_rows(paths[0])[1:]] == ["100"]
    assert [r[0] for r in csv_rows(paths[1])[1:]] == ["100"]


def test_resume_refuses_a_file_that_is_not_the_log(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "episodes.csv").write_text("something,else\n1,2\n")
    with pytest.raises(ValueError, match="episodes.csv does not start with the header"):
        RunLogs(run_dir).open(kept_rows=(1, 1))


def test_each_row_is_on_disk_whole_as_soon_as_it_is_logged(tmp_path):
    path = tmp_path / "run" / "episodes.csv"
    logs, stats = opened(tmp_path / "run"), EpisodeStats()
    for n in range(1, 4):
        log_game(logs, stats, timestep=5 * n, length=5, ret=1.0)
        text = path.read_text()  # read while the file is still open: nothing is buffered
        assert text.endswith("\n") and text.count("\n") == n + 1
        assert csv_rows(path)[-1][:2] == [str(n), str(5 * n)]
    logs.close()


# ---------------------------------------------------------------------------- full disk


def test_log_episode_on_a_full_disk_names_episodes_csv(tmp_path, tiny_disk, fill_disk,
                                                      monkeypatch):
    # Where the tmpfs mounts (as root; it does on the development machine) the disk really
    # fills; elsewhere the CSVs' files answer ENOSPC the way a full disk does.
    if tiny_disk is not None:
        run_dir = tiny_disk
    else:
        run_dir = tmp_path / "disk"
        full = [False]

        class FullDiskFile(io.FileIO):
            def write(self, data):
                if full[0]:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                return super().write(data)

        monkeypatch.setattr(run_logs, "open", lambda path, mode, buffering=0:
                            FullDiskFile(path, mode), raising=False)
    logs = opened(run_dir)
    if tiny_disk is not None:
        fill_disk(tiny_disk)
    else:
        full[0] = True
    try:
        with pytest.raises(WriteFailed) as failure:
            for n in range(1, 5000):  # the CSV's last page fills first
                logs.log_episode(row(n, n))
        assert failure.value.disk_full
        assert failure.value.path == run_dir / "episodes.csv"
        assert str(failure.value) == (f"cannot write {run_dir / 'episodes.csv'}: No space "
                                      "left on device; free some disk space")
    finally:
        logs.close()


def test_opening_the_logs_on_a_full_disk_names_episodes_csv(tmp_path, tiny_disk, fill_disk,
                                                            monkeypatch):
    # Where the tmpfs mounts the disk really is full; elsewhere the header's write answers
    # ENOSPC as a full disk does. (Not through a link to /dev/full: a run follows no link.)
    if tiny_disk is not None:
        run_dir = tiny_disk
        fill_disk(tiny_disk)
    else:
        run_dir = tmp_path

        class FullDiskFile(io.FileIO):
            def write(self, data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(run_logs, "open", lambda fd, mode, buffering=0:
                            FullDiskFile(fd, mode), raising=False)
    path = re.escape(str(run_dir / "episodes.csv"))
    with pytest.raises(WriteFailed, match=f"cannot write {path}: No space left on device; "
                       "free some disk space") as failure:
        RunLogs(run_dir).open()
    assert failure.value.disk_full


# ---------------------------------------------------------------------------- check_logs_match


def write_logs(run_dir: Path, episodes: list[tuple[int, int]], evaluations: list[int]) -> None:
    """Writes the CSVs by hand: (episode, timestep) rows and evaluation timesteps."""
    run_dir.mkdir(exist_ok=True)
    (run_dir / "episodes.csv").write_text(EPISODES_HEADER + "".join(
        f"{n},{t},100,1.0,100.0,1.0,0.0000\n" for n, t in episodes))
    (run_dir / "evaluations.csv").write_text(EVALUATIONS_HEADER + "".join(
        f"{t},1.0,0.0,30,0.0000\n" for t in evaluations))


def test_check_logs_match_passes_for_matching_logs(tmp_path):
    run_dir = tmp_path / "run"
    logs = opened(run_dir)
    for n, step in enumerate((100, 200, 300), start=1):
        logs.log_episode(row(n, step))
    logs.log_evaluation(200, [1.0], hours=0.0)
    logs.close()
    check_logs_match(run_dir, 300, episodes=3, evaluations=1)
    check_logs_match(run_dir, 250, episodes=2, evaluations=1)  # rows after the step ignored
    check_logs_match(run_dir, 150, episodes=1, evaluations=0)
    check_logs_match(tmp_path / "empty", 0, episodes=0, evaluations=0)  # no CSVs yet


@pytest.mark.parametrize("episodes, counted", [
    ([(1, 100), (3, 200)], 2),  # a missing row
    ([(1, 100), (2, 200), (2, 200), (3, 300)], 4),  # a repeated row
    ([(1, 100), (2, 200), (3, 300)], 4),  # a count that differs
    ([(1, 100), (2, 200), (3, 300)], 2),
], ids=["missing", "repeated", "fewer-logged", "more-logged"])
def test_check_logs_match_names_episodes_csv(tmp_path, episodes, counted):
    write_logs(tmp_path, episodes, [200])
    path = re.escape(str(tmp_path / "episodes.csv"))
    with pytest.raises(ValueError, match=f"^{path} holds {len(episodes)} games up to step 300 "
                       rf"\(numbered .*\); the checkpoint counts {counted}$"):
        check_logs_match(tmp_path, 300, episodes=counted, evaluations=1)


def test_check_logs_match_names_evaluations_csv_for_an_extra_evaluation(tmp_path):
    write_logs(tmp_path, [(1, 100), (2, 200)], [100, 150])
    path = re.escape(str(tmp_path / "evaluations.csv"))
    with pytest.raises(ValueError, match=f"^{path} holds 2 evaluations before step 200; the "
                       "checkpoint counts 1$"):
        check_logs_match(tmp_path, 200, episodes=2, evaluations=1)
    with pytest.raises(ValueError, match=f"^{path} holds 2 evaluations up to step 200; the "
                       "checkpoint counts 3$"):
        check_logs_match(tmp_path, 200, episodes=2, evaluations=3)


def test_an_evaluation_logged_at_the_checkpoints_step_after_it_is_dropped(tmp_path):
    """Regression (found by tools/soak.py): a stop cut the evaluation of step 3200 short,
    so the checkpoint at 3200 counted 3 evaluations; the resumed run played it and logged a
    4th row at 3200, and a kill before the next checkpoint left a run that no resume would
    take. That row is one the resumed run logs again: it is dropped."""
    write_logs(tmp_path, [(1, 100)], [800, 1600, 2400, 3200])
    check_logs_match(tmp_path, 3200, episodes=1, evaluations=3)
    opened(tmp_path, kept_rows=(1, 3)).close()
    assert [row[0] for row in csv_rows(tmp_path / "evaluations.csv")[1:]] == \
        ["800", "1600", "2400"]


# ---------------------------------------------------------------------------- evaluations.csv


def test_log_evaluation_writes_and_returns_the_row(tmp_path):
    returns = [-21.0, -20.0, -19.0, -21.0]
    logs = opened(tmp_path / "run")
    row_written = logs.log_evaluation(250_000, returns, hours=1.5)
    with pytest.raises(ValueError, match="at least one"):
        logs.log_evaluation(500_000, [], hours=2.0)
    logs.close()
    assert row_written == {"timestep": 250_000, "mean": statistics.fmean(returns),
                           "std": pytest.approx(statistics.pstdev(returns)), "episodes": 4,
                           "hours": 1.5}
    rows = csv_rows(tmp_path / "run" / "evaluations.csv")
    assert rows[0] == ["timestep", "mean", "std", "episodes", "hours"]
    assert len(rows) == 2
    assert rows[1][0] == "250000" and rows[1][3] == "4" and rows[1][4] == "1.5000"
    assert float(rows[1][1]) == -20.25
    assert float(rows[1][2]) == pytest.approx(math.sqrt(0.6875))  # worked by hand


# ---------------------------------------------------------------------------- summary, TensorBoard


def test_write_summary(tmp_path):
    (tmp_path / "run").mkdir()
    logs = RunLogs(tmp_path / "run")
    logs.write_summary({"steps": 10, "last_evaluation": None})
    logs.write_summary({"steps": 20, "last_evaluation": -20.5})
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary == {"steps": 20, "last_evaluation": -20.5}


@pytest.mark.slow  # starts a python process
def test_module_imports_without_tensorflow():
    code = ("import sys, fast_dqn.run_logs as r, tempfile, pathlib;"
            "d = pathlib.Path(tempfile.mkdtemp());"
            "f = r.RunLogs(d); f.open(); f.write_config({});"
            "f.log_episode(r.EpisodeRow(1, 1, 1, 1.0, 1.0, 1.0, 0.0));"
            "f.log_evaluation(1, [1.0], 0.0); f.flush(); f.write_summary({}); f.close();"
            "r.check_logs_match(d, 1, 1, 1);"
            "assert 'tensorflow' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=60)


def test_log_scalars_writes_tensorboard_events(tmp_path):
    import tensorflow as tf
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    logs = RunLogs(run_dir)
    logs.log_scalars(100, {"train/loss": 0.5, "train/epsilon": 0.9})
    logs.log_scalars(200, {"train/loss": 0.25})
    logs.close()
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


@pytest.mark.slow  # a real run (in this process; it starts git for its code version)
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


# ---------------------------------------------------------------------------- links, moves


def test_a_linked_episodes_csv_is_refused_on_resume_and_its_target_left_alone(tmp_path):
    run_dir = tmp_path / "run"
    write_logs(run_dir, [(1, 100), (2, 200)], [200])
    outside = tmp_path / "outside.csv"
    (run_dir / "episodes.csv").rename(outside)
    (run_dir / "episodes.csv").symlink_to(outside)
    before = outside.read_bytes()
    with pytest.raises(ValueError, match=r"episodes\.csv: it is a symbolic link"):
        check_logs_match(run_dir, 200, 2, 1)
    with pytest.raises(WriteFailed, match=r"episodes\.csv: it is a symbolic link"):
        RunLogs(run_dir).open(kept_rows=(2, 1))
    with pytest.raises(WriteFailed, match=r"episodes\.csv: it is a symbolic link"):
        RunLogs(run_dir).open()
    assert outside.read_bytes() == before


def test_rows_go_to_the_run_directory_after_it_is_moved(tmp_path):
    run_dir, moved = tmp_path / "run", tmp_path / "run.moved"
    logs = opened(run_dir)
    logs.log_episode(row(1, 100))
    run_dir.rename(moved)
    logs.log_episode(row(2, 200))
    logs.write_summary({"steps": 200})
    logs.close()
    assert [r[0] for r in csv_rows(moved / "episodes.csv")[1:]] == ["1", "2"]
    assert json.loads((moved / "summary.json").read_text()) == {"steps": 200}
    assert logs.run_dir == moved
    assert not run_dir.exists()


def test_a_row_after_the_directory_is_deleted_stops_the_run(tmp_path):
    run_dir = tmp_path / "run"
    logs = opened(run_dir)
    logs.log_episode(row(1, 100))
    shutil.rmtree(run_dir)
    try:
        with pytest.raises(RunDirGone, match="was deleted while the run ran"):
            logs.log_episode(row(2, 200))
        with pytest.raises(RunDirGone):
            logs.write_summary({"steps": 200})
    finally:
        logs.close()
    assert not run_dir.exists()


def test_a_fifo_in_place_of_a_csv_is_refused_not_waited_on(tmp_path):
    run_dir = tmp_path / "run"
    write_logs(run_dir, [(1, 100)], [])
    (run_dir / "episodes.csv").unlink()
    os.mkfifo(run_dir / "episodes.csv")  # reading it would wait for a writer forever
    with pytest.raises(ValueError, match=r"episodes\.csv: .*it is not a regular file"):
        check_logs_match(run_dir, 100, 1, 0)
