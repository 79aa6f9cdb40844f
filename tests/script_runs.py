"""What the tests of scripts/ share: the scripts' paths, a fake learner, running a script.
The fake learner's fixture, `fake_learner`, is in conftest.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.cli_runs import REPO

SUMMARIZE = REPO / "scripts" / "summarize.py"
PY = sys.executable
LEARNING_CHECK = REPO / "scripts" / "learning_check.sh"


def run(args, *, env=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


# -- scripts/summarize.py's input


def make_run(root: Path, game: str, seed: int, evaluations=None, summary=None,
             algo: str = "fast_dqn", **settings) -> Path:
    variant = "".join(f"-{name}" for name in settings)
    run_dir = root / f"{game}-{algo}{variant}-seed{seed}"
    write_json(run_dir / "config.json", {"game": game, "seed": seed, "workers": 8,
                                         "algo": algo, "library_versions": {}, **settings})
    if evaluations is not None:
        rows = ["timestep,mean,std,episodes,hours"]
        rows += [f"{t},{m},1.0,30,{t / 1e6}" for t, m in evaluations]
        (run_dir / "evaluations.csv").write_text("\n".join(rows) + "\n")
    if summary is not None:
        write_json(run_dir / "summary.json", summary)
    return run_dir


# -- scripts/learning_check.sh with a fake learner

# Stands in for "python run_*.py ARGS": records its arguments and writes the evaluations
# given in FAKE_EVALS ("step:mean step:mean ...") and a finished summary. "python -" (the
# script's verdict) runs the real interpreter.
FAKE_LEARNER = r"""#!/usr/bin/env bash
if [[ $1 == - ]]; then exec "$REAL_PYTHON" "$@"; fi
logdir=
for arg in "$@"; do
  case $arg in --logdir=*) logdir=${arg#*=} ;; esac
done
mkdir -p "$logdir"
printf '%s\n' "$@" >"$logdir/args"
echo "timestep,mean,std,episodes,hours" >"$logdir/evaluations.csv"
for pair in $FAKE_EVALS; do
  echo "${pair%%:*},${pair#*:},1.0,30,0.1" >>"$logdir/evaluations.csv"
done
echo '{"finished": true}' >"$logdir/summary.json"
"""


def learning_check(args, evals: str, fake: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "FAKE_EVALS": evals, "REAL_PYTHON": PY}
    return run([LEARNING_CHECK, "--python", fake, *args], env=env)
