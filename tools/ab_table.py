#!/usr/bin/env python3
"""The table of tools/ab_benchmark.sh: medians of each commit's benchmark figures and the
ratio head / base, from the logs base-N.log and head-N.log (`python -m fast_dqn.benchmark`'s
output, its figures on its last JSON line) in a directory:

    python tools/ab_table.py DIR
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

# (JSON key, label, format); a key that a log lacks is left out of that log's figures.
FIGURES = (
    ("fast_steps_per_second", "fast steps/s", "{:.0f}"),
    ("serial_steps_per_second", "serial steps/s", "{:.0f}"),
    ("fast_over_serial", "fast / serial", "{:.3f}"),
    ("trainer_updates_per_second", "trainer alone (updates/s)", "{:.1f}"),
    ("fast_over_limit", "fast / limit", "{:.3f}"),
    ("cpu_work_limit_steps_per_second", "CPU-work limit (steps/s)", "{:.0f}"),
    ("fast_over_cpu_work_limit", "fast / CPU-work limit", "{:.3f}"),
    ("trainer_alone_update_cpu_us", "CPU per update alone (us)", "{:.0f}"),
    ("acting_cpu_us", "CPU per step acting alone (us)", "{:.0f}"),
    ("update_ms", "ms per update in the loop", "{:.2f}"),
    ("update_cpu_us", "trainer CPU per update (us)", "{:.0f}"),
    ("round_cpu_us", "round CPU (us)", "{:.0f}"),
    ("sim_steps_per_second", "simulated steps/s", "{:.0f}"),
    ("host_ceiling_steps_per_second", "host ceiling (steps/s)", "{:.0f}"),
    ("sim_fraction_of_attainable", "fraction of attainable", "{:.3f}"),
    ("update_host_us", "host cost per update (us)", "{:.0f}"),
)
FAST_LINE = re.compile(r"^fast W=(\d+): .*?([0-9.]+) ms per update")


def read_log(path: Path) -> dict[str, float]:
    """The figures of one benchmark log; ValueError if it holds no JSON line."""
    lines = path.read_text(errors="replace").splitlines()
    json_lines = [line for line in lines if line.startswith("{")]
    if not json_lines:
        raise ValueError(f"{path}: no result line; the benchmark did not finish")
    result = json.loads(json_lines[-1])
    # The ms per update in the fast loop, from its "fast W=..." line where older benchmarks
    # leave it out of the JSON.
    fast_ms = {int(m[1]): float(m[2]) for m in map(FAST_LINE.match, lines) if m}
    if "update_ms" not in result and result.get("workers") in fast_ms:
        result["update_ms"] = fast_ms[result["workers"]]
    return {key: float(result[key]) for key, _, _ in FIGURES
            if isinstance(result.get(key), (int, float)) and not isinstance(result[key], bool)}


def side_figures(directory: Path, side: str) -> list[dict[str, float]]:
    """The figures of SIDE-1.log, SIDE-2.log, ... in `directory`, in their order."""
    logs = sorted(directory.glob(f"{side}-*.log"), key=lambda path: int(path.stem.split("-")[-1]))
    return [read_log(path) for path in logs]


def spread(values: list[float]) -> float:
    """(max - min) / median: how far apart the runs of one commit were."""
    middle = statistics.median(values)
    return (max(values) - min(values)) / middle if middle else float("nan")


def table(base: list[dict[str, float]], head: list[dict[str, float]]) -> list[str]:
    rows = [f"{'figure':<30}{'base':>10}{'spread':>8}{'head':>10}{'spread':>8}"
            f"{'head/base':>11}"]
    for key, label, form in FIGURES:
        base_values = [run[key] for run in base if key in run]
        head_values = [run[key] for run in head if key in run]
        if not base_values or not head_values:
            continue
        b, h = statistics.median(base_values), statistics.median(head_values)
        ratio = f"{h / b:.3f}" if b else "-"
        rows.append(f"{label:<30}{form.format(b):>10}{spread(base_values):>8.1%}"
                    f"{form.format(h):>10}{spread(head_values):>8.1%}{ratio:>11}")
    return rows


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: ab_table.py DIR (a directory of base-N.log and head-N.log)",
              file=sys.stderr)
        return 2
    directory = Path(argv[0])
    try:
        base, head = side_figures(directory, "base"), side_figures(directory, "head")
        if not base or not head:
            raise ValueError(f"{directory} lacks base-N.log or head-N.log files")
    except ValueError as error:
        print(f"ab_table.py: error: {error}", file=sys.stderr)
        return 1
    header = directory / "ab.txt"
    if header.exists():
        print(header.read_text().rstrip())
    print(f"medians of {len(base)} base and {len(head)} head runs, alternating; spread = "
          "(max - min) / median")
    print("\n".join(table(base, head)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
