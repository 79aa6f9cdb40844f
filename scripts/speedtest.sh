#!/usr/bin/env bash
# The speed grid of Daley & Amato (2021): steps per second of run_fast_dqn.py over worker
# counts x concurrent on/off x synchronize on/off. Run with --help for the options.
set -euo pipefail

# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
  cat <<EOF
Usage: scripts/$PROG [options] [-- EXTRA FLAGS]

Measures agent steps per second of run_fast_dqn.py for every point of the grid
  workers W x --concurrent C (true, false) x --synchronize Y (true, false) x seed S
one run at a time (runs side by side would disturb each other's timing):
  PY run_fast_dqn.py --game=G --workers=W --concurrent=C --synchronize=Y --seed=S
      --timesteps=T --replay-start=R --exploration-steps=0 --evaluate=0
      --checkpoint-every=0 --checkpoint-replay=false --logdir=OUT/G-wW-cC-sY-seedS
After a short uniformly random start of R steps, exploration is fixed at the final
epsilon and the steps/s that each run reports (summary.json, measured after the replay
start) are tabulated at the end. R is rounded up to a multiple of W, and where W does not
divide --target-update (default 10000) that is rounded up to a multiple of W and 4 too
(e.g. 10016 for W = 32). Finished runs are skipped; unfinished ones start afresh (the old
directory is renamed OUT/<run>.incomplete-<time>); one that another process runs (it holds
OUT/<run>/.lock or OUT/<run>.log) is left alone.
Exit status: 0 if every run succeeded; 1 if any failed; 3 if some were left alone because
another process runs them; 130 if interrupted; 2 for bad options.

Options:
  --game G          game (default: pong)
  --workers "W..."  worker counts (default: "1 2 4 8 16", plus 32 where nproc >= 32)
  --seeds "S..."    seeds (default: "0")
  --timesteps T     agent steps per run (default: 100000)
  --replay-start R  random steps before learning and timing (default: 10000)
  --out DIR         where the runs go (default: runs/speedtest)
  --python PY       Python interpreter (default: python)
  --dry-run         print the commands (with --slurm: the batch script), run nothing
  --table           only print the table of the runs already in OUT
  --slurm           write OUT/speedtest.sbatch (one array task per run) and its task list
                    OUT/speedtest.tasks, then submit it with sbatch
  --jobs N          with --slurm: array tasks at once (default: 1, one after another;
                    SLURM may still place them on different nodes)
  -h, --help        show this help
  -- EXTRA FLAGS    passed to every run (e.g. -- --backend=threads)

$SLURM_USAGE
EOF
}

GAME=pong
WORKERS=
SEEDS=0
TIMESTEPS=100000
REPLAY_START=10000
OUT=runs/speedtest
PY=python
DRY_RUN=0
TABLE_ONLY=0
SLURM=0
JOBS=1
EXTRA=()

split_equals "$@"
set -- "${SPLIT_ARGS[@]}"
while (($#)); do
  case $1 in
    --game) need_value "$1" $#; GAME=$2; shift 2 ;;
    --workers) need_value "$1" $#; WORKERS=$2; shift 2 ;;
    --seeds) need_value "$1" $#; SEEDS=$2; shift 2 ;;
    --timesteps) need_value "$1" $#; TIMESTEPS=$2; shift 2 ;;
    --replay-start) need_value "$1" $#; REPLAY_START=$2; shift 2 ;;
    --out) need_value "$1" $#; OUT=$2; shift 2 ;;
    --python) need_value "$1" $#; PY=$2; shift 2 ;;
    --jobs) need_value "$1" $#; JOBS=$2; shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    --table) TABLE_ONLY=1; shift ;;
    --slurm) SLURM=1; shift ;;
    --slurm-partition | --slurm-time | --slurm-gpus | --slurm-cpus | --slurm-mem)
      need_value "$1" $#; parse_slurm_option "$1" "$2"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) die_usage "unknown option '$1'" ;;
  esac
done

if [[ -z $WORKERS ]]; then
  WORKERS="1 2 4 8 16"
  if (($(cpu_count) >= 32)); then
    WORKERS+=" 32"
  fi
fi
[[ $GAME =~ ^[A-Za-z0-9_]+$ ]] || die_usage "--game: bad game name '$GAME' (use a ROM id such as space_invaders)"
is_positive_int "$TIMESTEPS" || die_usage "--timesteps: expected a positive whole number, got '$TIMESTEPS'"
is_uint "$REPLAY_START" || die_usage "--replay-start: expected a whole number, got '$REPLAY_START'"
((10#$TIMESTEPS > 10#$REPLAY_START)) ||
  die_usage "--timesteps ($TIMESTEPS) must exceed --replay-start ($REPLAY_START): steps/s are timed after it"
is_positive_int "$JOBS" || die_usage "--jobs: expected a positive whole number, got '$JOBS'"
TIMESTEPS=$((10#$TIMESTEPS))
REPLAY_START=$((10#$REPLAY_START))
JOBS=$((10#$JOBS))
read -r -a WORKER_LIST <<<"$WORKERS"
((${#WORKER_LIST[@]})) || die_usage "--workers: no worker counts given"
for workers in "${WORKER_LIST[@]}"; do
  is_positive_int "$workers" || die_usage "--workers: expected positive whole numbers, got '$workers'"
done
read -r -a SEED_LIST <<<"$SEEDS"
((${#SEED_LIST[@]})) || die_usage "--seeds: no seeds given"
for seed in "${SEED_LIST[@]}"; do
  is_uint "$seed" || die_usage "--seeds: expected whole numbers, got '$seed'"
done
[[ -n $OUT ]] || die_usage "--out needs a directory"
check_out_dir "$OUT"
OUT=$(absolute_path "$OUT")
[[ -n $PY ]] || die_usage "--python needs an interpreter"
forbid_extra "is set by the speed grid" game workers concurrent synchronize seed timesteps \
  replay-start logdir resume -- "${EXTRA[@]}"
for flag in "${EXTRA[@]}"; do
  [[ $flag != *$'\t'* && $flag != *$'\n'* ]] || die_usage "extra flags must not contain tabs or newlines"
done
TARGET_UPDATE=$(extra_value target-update "${EXTRA[@]}") || TARGET_UPDATE=10000
TRAIN_FREQ=$(extra_value train-freq "${EXTRA[@]}") || TRAIN_FREQ=4
is_positive_int "$TARGET_UPDATE" || die_usage "--target-update: expected a positive whole number"
is_positive_int "$TRAIN_FREQ" || die_usage "--train-freq: expected a positive whole number"

# print_table: steps/s of the runs in OUT, one row per game x grid point, mean +- std over
# seeds, and the ratio to the (1 worker, concurrent=false, synchronize=false) point.
print_table() {
  "$PY" - "$OUT" "$PROG" <<'PYTHON'
import json
import pathlib
import statistics
import sys

rows = {}
for summary_path in sorted(pathlib.Path(sys.argv[1]).glob("*/summary.json")):
    try:
        summary = json.loads(summary_path.read_text())
        config = json.loads((summary_path.parent / "config.json").read_text())
        key = (config["game"], int(config["workers"]), bool(config["concurrent"]),
               bool(config["synchronize"]))
        rows.setdefault(key, []).append(
            (float(summary["steps_per_second"]), float(summary.get("updates_per_second") or 0),
             bool(summary.get("finished")), str(summary.get("device", "?"))))
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"# left out {summary_path.parent.name}: {error!r}", file=sys.stderr)
if not rows:
    sys.exit(f"{sys.argv[2]}: error: no runs with summary.json and config.json in {sys.argv[1]}")


def mean_std(values):
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


header = ("game", "workers", "concurrent", "synchronize", "seeds", "steps/s", "+-",
          "updates/s", "x base", "device")
lines = []
for (game, workers, concurrent, synchronize), runs in sorted(rows.items()):
    steps, spread = mean_std([r[0] for r in runs])
    base_runs = rows.get((game, 1, False, False))
    ratio = f"{steps / statistics.fmean(r[0] for r in base_runs):.2f}" if base_runs else "-"
    seeds = str(len(runs)) + ("" if all(r[2] for r in runs) else "*")
    devices = ",".join(sorted({r[3] for r in runs}))
    devices = devices if len(devices) <= 40 else devices[:37] + "..."
    lines.append((game, str(workers), str(concurrent).lower(), str(synchronize).lower(), seeds,
                  f"{steps:.0f}", f"{spread:.0f}", f"{mean_std([r[1] for r in runs])[0]:.0f}",
                  ratio, devices))
widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
print("  ".join(h.rjust(w) for h, w in zip(header, widths)))
for line in lines:
    print("  ".join(cell.rjust(w) for cell, w in zip(line, widths)))
print("x base: steps/s relative to workers=1, concurrent=false, synchronize=false; "
      "* = some runs did not finish")
PYTHON
}

if ((TABLE_ONLY)); then
  print_table || exit 2
  exit 0
fi

cd "$REPO_ROOT"
if ((!DRY_RUN)) && [[ ! -f $REPO_ROOT/run_fast_dqn.py ]]; then
  die_usage "$REPO_ROOT/run_fast_dqn.py not found"
fi

# round_up VALUE MULTIPLE: the smallest multiple of MULTIPLE that is >= VALUE.
round_up() {
  echo $((($1 + $2 - 1) / $2 * $2))
}

gcd() {
  local a=$1 b=$2 t
  while ((b)); do
    t=$((a % b))
    a=$b
    b=$t
  done
  echo "$a"
}

for seed in "${SEED_LIST[@]}"; do
  for workers in "${WORKER_LIST[@]}"; do
    workers=$((10#$workers))
    replay_start=$(round_up "$REPLAY_START" "$workers")
    epoch=()
    if ((TARGET_UPDATE % workers != 0 || TARGET_UPDATE % TRAIN_FREQ != 0)); then
      multiple=$((workers * TRAIN_FREQ / $(gcd "$workers" "$TRAIN_FREQ")))
      epoch=("--target-update=$(round_up "$TARGET_UPDATE" "$multiple")")
      note "workers=$workers: --target-update $TARGET_UPDATE rounded to ${epoch[0]#*=}" \
        "(the workers must divide it)"
    fi
    for concurrent in true false; do
      for synchronize in true false; do
        name="$GAME-w$workers-c$concurrent-s$synchronize-seed$seed"
        dir="$OUT/$name"
        run_state "$dir" "$OUT/$name.log"
        case $RUN_STATE in
          finished)
            note "skip   $name (finished)"
            continue
            ;;
          running)
            note_elsewhere "$name" "$RUN_HOLDER"
            continue
            ;;
          resume | stale)
            ((DRY_RUN)) || set_aside "$dir"
            ;;
        esac
        add_task "$name" "$dir" "$OUT/$name.log" "$PY" run_fast_dqn.py "--game=$GAME" \
          "--workers=$workers" "--concurrent=$concurrent" "--synchronize=$synchronize" \
          "--seed=$seed" "--timesteps=$TIMESTEPS" "--replay-start=$replay_start" \
          --exploration-steps=0 --evaluate=0 --checkpoint-every=0 --checkpoint-replay=false \
          "--logdir=$dir" "${epoch[@]}" "${EXTRA[@]}"
      done
    done
  done
done

if ((${#TASK_CMDS[@]} == 0)); then
  if ((${#ELSEWHERE[@]})); then
    note "nothing to start: every other point of the grid has finished in $OUT"
    status=0
    ((DRY_RUN)) || report_elsewhere || status=$?
    print_table || true
    exit "$status"
  fi
  note "nothing to run: every point of the grid has finished in $OUT"
  print_table
  exit 0
fi

if ((SLURM)); then
  write_slurm "$OUT/speedtest.sbatch" "$OUT/speedtest.tasks" fast_dqn-speedtest "$JOBS" "$DRY_RUN"
  ((DRY_RUN)) || submit_slurm "$OUT/speedtest.sbatch"
  ((DRY_RUN)) || report_elsewhere || exit "$?"
  exit 0
fi

if ((DRY_RUN)); then
  print_tasks
  exit 0
fi

mkdir -p -- "$OUT" || die "cannot create $OUT"
note "${#TASK_CMDS[@]} run(s), one at a time; logs in $OUT/<run>.log"
status=0
run_tasks 1 || status=$?
print_table || true
exit "$status"
