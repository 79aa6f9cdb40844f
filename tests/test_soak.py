"""The soak test of stopping and resuming (scripts/soak.py), shortened to three kills."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # drives the entry points or scripts as subprocesses

SOAK = Path(__file__).resolve().parent.parent / "scripts" / "soak.py"


def test_a_run_killed_three_times_finishes_with_every_row_once(tmp_path):
    result = subprocess.run([sys.executable, str(SOAK), "--kills", "3", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["kills"] == 3, figures
    assert figures["rows_lost"] == 0 and figures["rows_repeated"] == 0, figures
    assert figures["second_sweeps"] >= 1, figures  # the first cycle's, before a checkpoint
    assert figures["sweeps_left_alone"] == figures["second_sweeps"], figures
    assert figures["renamed_mid_run"], figures  # the final run, moved while it ran
