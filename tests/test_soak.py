"""The soak test of stopping and resuming (tools/soak.py), shortened to three kills."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.cli_runs import REPO

# A signal within 6 s of the run taking its lock (the soak's default: 16 s): the kills land in
# the start-up or the first seconds of acting, and each launch's --timesteps (its wait's worth
# of steps beyond where it starts) and so the final run are shorter.
WAIT_SECONDS = 6


@pytest.mark.slow  # the soak starts the trainer and a sweep as subprocesses
def test_a_run_killed_three_times_finishes_with_every_row_once(tmp_path):
    result = subprocess.run([sys.executable, str(REPO / "tools" / "soak.py"), "--kills", "3",
                             "--wait-seconds", str(WAIT_SECONDS), "--out", str(tmp_path)],
                            cwd=REPO, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["kills"] == 3, figures
    assert figures["rows_lost"] == 0 and figures["rows_repeated"] == 0, figures
    assert figures["second_sweeps"] >= 1, figures  # the first cycle's, before a checkpoint
    assert figures["sweeps_left_alone"] == figures["second_sweeps"], figures
    assert figures["renamed_mid_run"], figures  # the final run, moved while it ran
