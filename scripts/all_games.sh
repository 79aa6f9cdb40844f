#!/usr/bin/env bash
# Trains run_fast_dqn.py on the 49 games of the Nature DQN study, several seeds each.
# Run with --help for the options; README.md (Sweeps and results) has the whole procedure.
set -euo pipefail

# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
  cat <<EOF
Usage: scripts/$PROG [options] [-- EXTRA FLAGS]

Runs, for every game G and seed S,
  PY run_fast_dqn.py --game=G --seed=S --logdir=OUT/G-seedS [EXTRA FLAGS]
from the repository root, with its stdout and stderr in OUT/G-seedS.log.
A run whose OUT/G-seedS/summary.json says "finished": true is skipped. A run with a
checkpoint (OUT/G-seedS/checkpoint/manifest.json, or checkpoint.old/manifest.json, which
a kill between the two renames of a checkpoint's swap leaves) but no finished summary is
resumed:
  PY run_fast_dqn.py --resume OUT/G-seedS [--timesteps=T if EXTRA FLAGS set it]
A run directory with neither is renamed OUT/G-seedS.incomplete-<time> and started afresh.
A run that another process runs (a live process holds OUT/G-seedS/.lock, or another sweep
holds OUT/G-seedS.log) is running elsewhere: it is listed with the holder the lock names
and left alone (not moved, resumed or started).
Exit status: 0 if every run succeeded; 1 if any failed (they are listed); 3 if every run
it started succeeded but some were running elsewhere (listed: run the same command again
once they have ended); 130 if interrupted; 2 for bad options. --dry-run exits 0.

Options:
  --games "G1 G2"   games (ale-py ROM ids; default: the 49 Nature games,
                    fast_dqn.atari_data.NATURE_GAMES)
  --seeds "S1 S2"   seeds (default: "0 1 2")
  --jobs N          runs at once (default: min(CPUs / W, memory / M), at least 1, where
                    W = --workers of the runs (default 8: each run keeps W emulator
                    threads busy) and M = GiB per run (replay memory of --replay-capacity
                    at 7 KB per transition, plus 3 GiB; 10 GiB at the default 1,000,000).
                    The runs share the GPU; with N > 1, TF_FORCE_GPU_ALLOW_GROWTH=true is
                    set so that no run claims all of its memory.
                    With --slurm: array tasks at once (default: all)
  --out DIR         where the runs go (default: runs/all_games)
  --python PY       Python interpreter (default: python)
  --dry-run         print the commands (with --slurm: the batch script), run nothing
  --slurm           write OUT/all_games.sbatch, a SLURM array job with one task per run,
                    and its task list OUT/all_games.tasks, then submit it with sbatch
  -h, --help        show this help
  -- EXTRA FLAGS    passed to every new run (e.g. -- --timesteps=10000000 --workers=8)

$SLURM_USAGE
EOF
}

GAMES=
SEEDS="0 1 2"
JOBS=
OUT=runs/all_games
PY=python
DRY_RUN=0
SLURM=0
EXTRA=()

split_equals "$@"
set -- "${SPLIT_ARGS[@]}"
while (($#)); do
  case $1 in
    --games)
      need_value "$1" $#
      [[ -n ${2// /} ]] || die_usage "--games: no games given"
      GAMES=$2
      shift 2
      ;;
    --seeds) need_value "$1" $#; SEEDS=$2; shift 2 ;;
    --jobs) need_value "$1" $#; JOBS=$2; shift 2 ;;
    --out) need_value "$1" $#; OUT=$2; shift 2 ;;
    --python) need_value "$1" $#; PY=$2; shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    --slurm) SLURM=1; shift ;;
    --slurm-partition | --slurm-time | --slurm-gpus | --slurm-cpus | --slurm-mem)
      need_value "$1" $#; parse_slurm_option "$1" "$2"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) die_usage "unknown option '$1'" ;;
  esac
done

[[ -n $OUT ]] || die_usage "--out needs a directory"
check_out_dir "$OUT"
OUT=$(absolute_path "$OUT")
[[ -n $PY ]] || die_usage "--python needs an interpreter"
if [[ -n $JOBS ]]; then
  is_positive_int "$JOBS" || die_usage "--jobs: expected a positive whole number, got '$JOBS'"
  JOBS=$((10#$JOBS))
fi
read -r -a SEED_LIST <<<"$SEEDS"
((${#SEED_LIST[@]})) || die_usage "--seeds: no seeds given"
for seed in "${SEED_LIST[@]}"; do
  is_uint "$seed" || die_usage "--seeds: expected whole numbers, got '$seed'"
done
forbid_extra "is set per run by this script" game seed logdir resume -- "${EXTRA[@]}"
for flag in "${EXTRA[@]}"; do
  [[ $flag != *$'\t'* && $flag != *$'\n'* ]] || die_usage "extra flags must not contain tabs or newlines"
done

cd "$REPO_ROOT"
if [[ -z $GAMES ]]; then
  GAMES=$("$PY" -c 'from fast_dqn.atari_data import NATURE_GAMES; print(*NATURE_GAMES)' 2>/dev/null) ||
    die_usage "cannot read the game list with --python '$PY' (it must import fast_dqn)"
fi
read -r -a GAME_LIST <<<"$GAMES"
((${#GAME_LIST[@]})) || die_usage "--games: no games given"
for game in "${GAME_LIST[@]}"; do
  [[ $game =~ ^[A-Za-z0-9_]+$ ]] || die_usage "--games: bad game name '$game' (use ROM ids such as space_invaders)"
done
if ((!DRY_RUN)) && [[ ! -f $REPO_ROOT/run_fast_dqn.py ]]; then
  die_usage "$REPO_ROOT/run_fast_dqn.py not found"
fi

# default_jobs: the --jobs rule of --help.
default_jobs() {
  local workers capacity cpus mem per_run_gib jobs
  workers=$(extra_value workers "${EXTRA[@]}") || workers=8
  capacity=$(extra_value replay-capacity "${EXTRA[@]}") || capacity=1000000
  is_positive_int "$workers" || workers=8
  is_uint "$capacity" || capacity=1000000
  cpus=$(cpu_count)
  mem=$(memory_gib)
  per_run_gib=$(((10#$capacity * 7056 + (1 << 30) - 1) / (1 << 30) + 3))
  jobs=$((cpus / 10#$workers))
  if ((mem > 0 && mem / per_run_gib < jobs)); then
    jobs=$((mem / per_run_gib))
  fi
  echo $((jobs > 1 ? jobs : 1))
}

TIMESTEPS=$(extra_value timesteps "${EXTRA[@]}") || TIMESTEPS=
for game in "${GAME_LIST[@]}"; do
  for seed in "${SEED_LIST[@]}"; do
    name="$game-seed$seed"
    dir="$OUT/$name"
    log="$OUT/$name.log"
    run_state "$dir" "$log"
    case $RUN_STATE in
      finished)
        note "skip   $name (finished)"
        ;;
      running)
        note_elsewhere "$name" "$RUN_HOLDER"
        ;;
      resume)
        note "resume $name (from its checkpoint)"
        cmd=("$PY" run_fast_dqn.py --resume "$dir")
        [[ -z $TIMESTEPS ]] || cmd+=("--timesteps=$TIMESTEPS")
        add_task "$name" "$dir" "$log" "${cmd[@]}"
        ;;
      stale)
        if ((DRY_RUN || SLURM)); then
          note "$name: exists without a checkpoint; it will be moved aside and started afresh"
        fi
        if ((!DRY_RUN)); then
          set_aside "$dir"
        fi
        add_task "$name" "$dir" "$log" "$PY" run_fast_dqn.py "--game=$game" "--seed=$seed" \
          "--logdir=$dir" "${EXTRA[@]}"
        ;;
      new)
        add_task "$name" "$dir" "$log" "$PY" run_fast_dqn.py "--game=$game" "--seed=$seed" \
          "--logdir=$dir" "${EXTRA[@]}"
        ;;
    esac
  done
done

if ((${#TASK_CMDS[@]} == 0)); then
  if ((${#ELSEWHERE[@]})); then
    note "nothing to start: every other run has finished in $OUT"
    ((DRY_RUN)) || report_elsewhere || exit "$?"
    exit 0
  fi
  note "nothing to do: every run ($(counted ${#GAME_LIST[@]} game) x" \
    "$(counted ${#SEED_LIST[@]} seed)) has finished in $OUT"
  exit 0
fi

if ((SLURM)); then
  write_slurm "$OUT/all_games.sbatch" "$OUT/all_games.tasks" fast_dqn-all_games \
    "${JOBS:-${#TASK_CMDS[@]}}" "$DRY_RUN"
  ((DRY_RUN)) || submit_slurm "$OUT/all_games.sbatch"
  ((DRY_RUN)) || report_elsewhere || exit "$?"
  exit 0
fi

if ((DRY_RUN)); then
  print_tasks
  exit 0
fi

JOBS=${JOBS:-$(default_jobs)}
if ((JOBS > 1)); then
  export TF_FORCE_GPU_ALLOW_GROWTH=${TF_FORCE_GPU_ALLOW_GROWTH:-true}
fi
mkdir -p -- "$OUT" || die "cannot create $OUT"
note "${#TASK_CMDS[@]} run(s), at most $JOBS at once; logs in $OUT/<game>-seed<seed>.log"
status=0
run_tasks "$JOBS" || status=$?
if ((status == 0)); then
  note "all ${#TASK_CMDS[@]} run(s) finished; summarize with: $PY scripts/summarize.py $OUT"
elif ((status == EXIT_RUNNING_ELSEWHERE)); then
  note "the runs this sweep ran have finished; ${#ELSEWHERE[@]} run(s) left alone" \
    "(exit status $status)"
fi
exit "$status"
