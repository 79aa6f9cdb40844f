"""The benchmark runs end to end and prints its table and the JSON line of docs/design.md §6.

It checks the keys and that the figures are consistent, not how fast anything is: speed is
reported by the benchmark itself, never asserted by a timed test.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fast_dqn import benchmark
from fast_dqn.config import Config
from tests.cli_runs import REAL_NETWORK, benchmark_parser, last_json_line

SMALL = ["--steps=400", "--random-steps=200", "--trainer-seconds=0.25", "--trainer-windows=3",
         "--target-update=200", "--emulation-seconds=0.3"]


# The real network's run of the test below, shorter still: what it checks is that the figures
# are reported and agree with one another, not what they are. Minibatches of 4 (an update of 4
# transitions costs a fraction of one of 32 on the CPU) and 100 measured steps, one epoch, per
# loop: each loop still builds and compiles its own network, which is most of what is left.
REAL_NETWORK_SHORT = [*REAL_NETWORK, "--batch-size=4", "--steps=100", "--random-steps=100",
                      "--target-update=100"]


def test_real_network_benchmark_reports_the_ratios(capsys):
    assert benchmark.main(REAL_NETWORK_SHORT + ["--workers", "2", "4"]) == 0
    out = capsys.readouterr().out
    result = last_json_line(out)
    for key in ("trainer_updates_per_second", "serial_steps_per_second",
                "fast_steps_per_second", "fast_over_serial", "fast_over_limit"):
        assert result[key] > 0
    assert set(result["fast_by_workers"]) == {"2", "4"}
    assert result["fast_over_limit"] == pytest.approx(
        result["fast_steps_per_second"] / (4 * result["trainer_updates_per_second"]))
    assert result["fast_over_serial"] == pytest.approx(
        result["fast_steps_per_second"] / result["serial_steps_per_second"])
    assert "x serial" in out and "fast, 4 workers" in out
    # the limit is the fastest trainer-alone window; 2 windows before the loops, 1 after
    windows = result["trainer_updates_per_second_windows"]
    assert len(windows) == 3
    assert result["trainer_updates_per_second"] == max(windows)
    assert result["trainer_drift"] == pytest.approx(abs(max(windows[:2]) - windows[2])
                                                    / max(windows))
    assert "the fastest of 3 windows" in out
    # the CPU-work limit by hand (issue 45): the cores over the CPU time of an agent step,
    # its acting and a quarter of the least CPU time an update took alone
    cpu_windows = result["trainer_update_cpu_us_windows"]
    assert len(cpu_windows) == 3 and result["trainer_alone_update_cpu_us"] == min(cpu_windows)
    # (of the faster worker count, whose figures the JSON line's top level gives)
    per_step_us = (result["acting_cpu_us_by_workers"][str(result["workers"])]
                   + min(cpu_windows) / 4)
    assert result["cpu_work_limit_steps_per_second"] == pytest.approx(
        os.cpu_count() * 1e6 / per_step_us)
    assert result["fast_over_cpu_work_limit"] == pytest.approx(
        result["fast_steps_per_second"] / result["cpu_work_limit_steps_per_second"])
    assert "CPU-work limit" in out
    # the table gives each row's ratio to it beside the ratio to the training limit
    header = next(line for line in out.splitlines() if line.startswith("configuration"))
    assert "x limit  x CPU work  note" in header
    fast_row = next(line for line in out.splitlines()
                    if line.startswith(f"fast, {result['workers']} workers"))
    assert float(fast_row.split()[6]) == pytest.approx(result["fast_over_cpu_work_limit"],
                                                       abs=0.005)
    assert result["simulated"] is False
    assert result["xla"] == Config().xla == "on"
    for kind in ("dispatch_per_update", "dispatch_per_query"):
        assert result[kind]["xla_on"] == 1 and result[kind]["xla_off"] > 1
    assert result["dispatch_per_update"]["xla_off"] > result["dispatch_per_query"]["xla_off"]


def test_simulated_gpu_benchmark_reports_the_trainer_busy_fraction(capsys):
    argv = SMALL + ["--workers", "4", "--skip-serial", "--trainer-stub-ms=0.8",
                    "--query-stub-ms=0.3"]
    assert benchmark.main(argv) == 0
    out, err = capsys.readouterr()
    result = last_json_line(out)
    assert_one_unit_per_line(out)
    # the warning comes exactly when the fastest windows before and after the loops are
    # more than 5% apart
    warned = "warning: the trainer alone's fastest windows" in err
    assert warned == (result["trainer_drift"] > 0.05), (result["trainer_drift"], err)
    assert result["simulated"] is True
    assert result["xla"] == "on"  # as on a real GPU
    assert 0 < result["sim_trainer_busy"] <= 1.0
    assert 0 < result["sim_gpu_busy"] <= result["sim_trainer_busy"]
    assert result["sim_steps_per_second"] == result["fast_steps_per_second"]
    assert result["sim_update_ms"] >= 0.8  # a wait never ends early
    assert "serial_steps_per_second" not in result
    # 4 steps per update over 0.8 ms per update (docs/design.md §6)
    assert result["gpu_limit_steps_per_second"] == pytest.approx(5000.0)
    assert result["sim_fraction_of_gpu_limit"] == pytest.approx(
        result["sim_steps_per_second"] / 5000.0)
    # the host's share of an update: its measured cost beyond the 0.8 ms wait
    assert result["update_host_us"] == pytest.approx(1000 * result["sim_update_ms"] - 800,
                                                     abs=1e-6)
    # CPU time is at most the wall time it was spent in
    assert 0 < result["update_cpu_us"] <= 1000 * result["sim_update_ms"]
    assert 0 < result["round_cpu_us"] <= result["round_wall_us"]
    # the process's busy share of the cores holds the acting loop's own, and no more than all
    acting_share = result["round_cpu_us"] / result["round_wall_us"] / os.cpu_count()
    assert acting_share <= result["cpu_busy"] <= 1.05
    # the ceiling by hand: 4 envs per round, 4 agent steps per update
    per_step_us = result["round_cpu_us"] / 4 + result["update_cpu_us"] / 4
    assert result["host_ceiling_steps_per_second"] == pytest.approx(1e6 / per_step_us)
    emulation = result["emulation_steps_per_second_by_workers"]["4"]
    assert emulation > 0
    # the attainable limit is the GPU's, or the emulators' where they are slower
    assert result["sim_fraction_of_attainable"] == pytest.approx(
        result["sim_steps_per_second"] / min(5000.0, emulation))
    assert result["updates_per_call"] == Config().updates_per_call


def assert_one_unit_per_line(out: str) -> None:
    """Regression (issue 46): the trainer-alone line said "updates/s -> limit N steps/s" and
    its table row a steps/s figure with an updates/s note. The trainer alone speaks of
    updates/s, every other figure of steps/s; "cores busy" says what it is where it is."""
    lines = out.splitlines()
    trainer = [line for line in lines if line.startswith("trainer alone:")]
    assert len(trainer) == 2, out
    for line in lines:
        if line.startswith("trainer alone:"):
            assert "updates/s" in line and "steps/s" not in line, line
        elif not line.startswith("{"):  # the JSON line's keys name both
            assert "updates/s" not in line, line
        if "cores busy" in line:
            assert re.search(r"cores busy \d+% \(process CPU time / \(wall time x \d+ "
                             r"cores\)\)", line), line


@pytest.mark.parametrize("before, after, shown", [
    ([100.0, 80.0], [90.0, 70.0], "10%"),  # fastest 100 and 90: 10 / 100
    ([70.0, 96.0], [100.0], None),  # 4 / 100
    ([95.0], [100.0, 60.0], None),  # 5% exactly
])
def test_trainer_windows_whose_fastest_drift_by_more_than_5_percent_are_warned_of(
        before, after, shown, capsys):
    """Regression (issue 46): a spread of 30% was printed beside the limit without a word.
    Issue 45: the limit is the fastest window; what makes it uncertain is a machine slower
    for all the windows on one side of the loops."""
    trainer = benchmark.TrainerAlone.__new__(benchmark.TrainerAlone)
    trainer.windows = before + after
    benchmark.warn_of_drift(trainer.drift(len(before)))
    out, err = capsys.readouterr()
    assert out == ""
    if shown is None:
        assert err == ""
    else:
        assert err.startswith("warning: the trainer alone's fastest windows before and after "
                              f"the loops are {shown} apart, more than 5%: "), err
        assert len(err.splitlines()) == 1


def test_updates_per_call_is_a_benchmark_setting(capsys):
    argv = SMALL + ["--workers", "4", "--skip-serial", "--trainer-stub-ms=0.8",
                    "--query-stub-ms=0.3", "--updates-per-call=3"]
    assert benchmark.main(argv) == 0
    assert last_json_line(capsys.readouterr().out)["updates_per_call"] == 3


@pytest.mark.parametrize("argv", [["--workers", "0"], ["--trainer-stub-ms=1"],
                                  ["--workers", "3"], ["--trainer-windows=1"],
                                  # W = 16 rounds the random steps up to 32, the serial
                                  # reference's W = 1 does not (a traceback, before)
                                  ["--random-steps=30", "--workers", "16", "--steps=16"]])
def test_bad_benchmark_input_exits_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        status = benchmark.main(argv)
        raise SystemExit(status)
    assert exit_info.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


RESIDENT_GROWTH = """
import json, sys
import numpy as np
from fast_dqn import benchmark
from fast_dqn.config import Config

def resident_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096

capacity = int(sys.argv[1])
benchmark.make_memory(Config(xla="off"), 10, np.random.default_rng(0))  # TensorFlow loaded
kept, growth = [], {}
for replay_device in ("host", "device"):
    before = resident_bytes()
    kept.append(benchmark.make_memory(Config(replay_device=replay_device, xla="off"), capacity,
                                      np.random.default_rng(0)))
    growth[replay_device] = resident_bytes() - before
print(json.dumps(growth))
"""


@pytest.mark.slow  # a fresh process, which imports TensorFlow
def test_the_benchmark_memory_has_its_pages_mapped():
    # In a fresh process (a test process reuses pages that earlier tests freed): 20,000
    # frames of 84 x 84 bytes, 141 MB that a fresh NumPy array or variable maps only on
    # first write, must be resident once the benchmark has built its memory. Both memories
    # are kept, so the second cannot reuse the first's pages.
    capacity = 20_000
    done = subprocess.run([sys.executable, "-c", RESIDENT_GROWTH, str(capacity)],
                          capture_output=True, text=True, timeout=300, check=True,
                          cwd=Path(__file__).resolve().parents[1])
    growth = json.loads(done.stdout.strip().splitlines()[-1])
    for replay_device in ("host", "device"):
        assert growth[replay_device] >= 0.9 * capacity * 84 * 84, growth


@pytest.mark.parametrize("replay_device", ["host", "device"])
def test_the_benchmark_memory_is_built_empty(replay_device):
    capacity = 1_000
    memory = benchmark.make_memory(Config(replay_device=replay_device, xla="off"), capacity,
                                   np.random.default_rng(0))
    assert memory.size == 0 and memory.cursor == 0
    assert not memory.frames.rows(0, capacity).any()
    assert not any(column.any() for column in memory.columns)


def test_every_benchmark_flag_has_help(monkeypatch):
    """Regression (issue 36): --game, --backend, --final-epsilon and --seed had no help."""
    parser = benchmark_parser(monkeypatch)
    flags = [action for action in parser._actions if action.option_strings]
    assert len(flags) >= 19
    missing = [action.option_strings[0] for action in flags
               if not (action.help or "").strip()]
    assert missing == []


@pytest.mark.parametrize("argv0, usage", [
    ("/repo/fast_dqn/benchmark.py", "python -m fast_dqn.benchmark"),  # python -m ...
    ("/venv/bin/fast-dqn-benchmark", "fast-dqn-benchmark"),  # the console script
    ("python -m fast_dqn benchmark", "python -m fast_dqn benchmark"),  # fast_dqn/cli.py sets
])
def test_the_usage_line_names_the_command_as_it_was_run(argv0, usage):
    assert benchmark.program_name(argv0) == usage


@pytest.mark.slow
def test_benchmark_help_says_how_it_is_run_and_gives_the_one_minute_form():
    """Regression (issue 36): `python -m fast_dqn.benchmark --help` said `benchmark.py`."""
    done = subprocess.run([sys.executable, "-m", "fast_dqn.benchmark", "--help"],
                          capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:4] == ["usage:", "python", "-m", "fast_dqn.benchmark"]
    assert "benchmark.py" not in done.stdout
    text = " ".join(done.stdout.split())  # argparse wraps the epilog
    assert "fast-dqn-benchmark" in text
    assert f"python -m fast_dqn.benchmark {benchmark.ONE_MINUTE_FLAGS}" in text
