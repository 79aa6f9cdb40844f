"""tools/ab_table.py: the A/B table's medians and ratios, from benchmark logs written here,
run as tools/ab_benchmark.sh runs it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_runs import REPO

AB_TABLE = REPO / "tools" / "ab_table.py"


def ab_table(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(AB_TABLE), *argv], capture_output=True,
                          text=True, timeout=60)


def write_log(path: Path, fast: float, serial: float, update_ms: float,
              with_update_ms_key: bool) -> None:
    result = {"fast_steps_per_second": fast, "serial_steps_per_second": serial,
              "fast_over_serial": fast / serial, "workers": 8, "round_cpu_us": 1000.0}
    if with_update_ms_key:
        result["update_ms"] = update_ms
    path.write_text(f"trainer alone: ...\nfast W=8: {fast:.0f} steps/s, emulation alone 3000 "
                    f"steps/s, {update_ms:.2f} ms per update (2000 us CPU), 50000 us per round\n"
                    f"{json.dumps(result)}\n")


def test_medians_and_ratios_by_hand(tmp_path):
    # base: fast 100, 120, 110 -> median 110; head: 130, 121, 125 -> median 125
    for index, (fast, ms) in enumerate([(100, 25.0), (120, 27.0), (110, 26.0)], start=1):
        write_log(tmp_path / f"base-{index}.log", fast, 100.0, ms, with_update_ms_key=False)
    for index, (fast, ms) in enumerate([(130, 24.0), (121, 23.0), (125, 22.0)], start=1):
        write_log(tmp_path / f"head-{index}.log", fast, 100.0, ms, with_update_ms_key=True)
    result = ab_table(str(tmp_path))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    fast_row = next(line for line in out.splitlines() if line.startswith("fast steps/s"))
    # median 110 and 125, spread (120 - 100) / 110 and (130 - 121) / 125, ratio 125 / 110
    assert fast_row.split()[2:] == ["110", "18.2%", "125", "7.2%", "1.136"]
    ms_row = next(line for line in out.splitlines() if line.startswith("ms per update"))
    # read from the printed line where the JSON lacks it (older benchmarks): 26.00 and 23.00
    assert ms_row.split()[-5:] == ["26.00", "7.7%", "23.00", "8.7%", "0.885"]


def test_a_log_without_a_result_is_an_error(tmp_path):
    write_log(tmp_path / "base-1.log", 100, 100, 25.0, True)
    (tmp_path / "head-1.log").write_text("Traceback (most recent call last):\n")
    result = ab_table(str(tmp_path))
    assert result.returncode == 1
    assert "head-1.log: no result line" in result.stderr


@pytest.mark.parametrize("argv", [[], ["/no/such/directory"]])
def test_bad_arguments_exit_2(argv):
    result = ab_table(*argv)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr


# A stand-in for the interpreter: it imports everything, its "benchmark" reports 100 fast
# steps/s, or 200 when given --precision=bfloat16, and it runs the table's script for real.
FAKE_PYTHON = """#!/usr/bin/env bash
[[ $1 == -c ]] && exit 0
[[ $1 == *ab_table.py ]] && exec {python} "$@"
fast=100
for arg in "$@"; do [[ $arg == --precision=bfloat16 ]] && fast=200; done
echo "{{\\"fast_steps_per_second\\": $fast, \\"args\\": \\"$*\\"}}"
"""


def test_head_flags_go_to_the_head_runs_alone(tmp_path):
    """An A/B of one flag on one commit (issue 45: float32 against bfloat16)."""
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON.format(python=sys.executable))
    fake.chmod(0o755)
    out = tmp_path / "ab"
    done = subprocess.run(
        ["bash", str(REPO / "tools" / "ab_benchmark.sh"), "--pairs", "2", "--python", str(fake),
         "--out", str(out), "--head-flags=--precision=bfloat16 --xla=off", "HEAD", "HEAD",
         "--", "--game=pong"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    for pair in (1, 2):
        base_args = json.loads((out / f"base-{pair}.log").read_text())["args"]
        head_args = json.loads((out / f"head-{pair}.log").read_text())["args"]
        assert base_args == "-m fast_dqn.benchmark --game=pong"
        assert head_args == "-m fast_dqn.benchmark --game=pong --precision=bfloat16 --xla=off"
    fast_row = next(line for line in done.stdout.splitlines()
                    if line.startswith("fast steps/s"))
    assert fast_row.split()[-1] == "2.000"
    assert "head flags --precision=bfloat16 --xla=off" in done.stdout
