#!/usr/bin/env bash
# The learning check: trains one trainer on a real game with a short schedule, prints its
# evaluation curve and PASS or FAIL against a threshold. Run with --help for the options.
set -euo pipefail

# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The short schedule. Network, loss, optimizer, discount, minibatch, train frequency and
# target period stay Nature's (unless a variant flag is given); only what shrinks the work is
# changed: the budget, the replay start, the epsilon decay, and 10 evaluation games instead
# of 30.
GAME=road_runner
STEPS=150000
REPLAY_START=20000
EXPLORATION_STEPS=50000
EVALUATE=25000
EVAL_EPISODES=10
# The best evaluation after the exploration decay must reach THRESHOLD. At this stage a
# learning agent's evaluations are either about 0 (the greedy policy stalls for all 5
# minutes) or several hundred and more, so the best one, not the mean, tells a learner from a
# broken one. Set from the runs in the README's "Learning check" section (best 1160 and
# 660): below half of the lower; a random agent scores 11.5 (Nature, Extended Data Table 2).
THRESHOLD=300

usage() {
  cat <<EOF
Usage: scripts/$PROG [options] [-- EXTRA FLAGS]

Trains one trainer on one game with a short schedule (once per --seed given), then prints
each run's evaluation curve ($EVAL_EPISODES games at epsilon 0.05 every E steps), the best
evaluation after the exploration decay (step >= $((REPLAY_START + EXPLORATION_STEPS))) and the
mean of the last three, each beside random play's score (Nature, Extended Data Table 2), and
PASS if every run's best reaches the threshold, FAIL otherwise; with several seeds, a table
of them and their means:
  PY run_fast_dqn.py --workers=8 (or run_dqn.py) --game=G --seed=S --timesteps=T
      --replay-start=$REPLAY_START --exploration-steps=$EXPLORATION_STEPS --replay-capacity=T
      --evaluate=E --eval-episodes=$EVAL_EPISODES --checkpoint-every=0
      --checkpoint-replay=false --logdir=OUT
Everything else is the Nature default, but for the variant flags given (below). On a
2-core CPU one run of the default schedule took 17 to 38 minutes in the runs of
docs/learning-check.md (2 cores, most of them beside other work); it is meant for changes
that can touch learning, not for CI.
An existing finished run in OUT is checked again without training.

Options:
  --trainer T       fast (run_fast_dqn.py --workers=8) or serial (run_dqn.py); default: fast
  --game G          game (default: $GAME; the threshold is for it)
  --steps T         agent steps (default: $STEPS; with --prioritized, whose preset
                    takes a quarter of Nature's step, docs/learning-check.md used 300000)
  --evaluate E      evaluation period in agent steps (default: $EVALUATE)
  --seed S          seed (default: 0); give it again for more runs (--seed 0 --seed 1)
  --threshold X     score the best evaluation after the decay must reach
                    (default: $THRESHOLD)
  --out DIR         run directory, for one seed (default:
                    runs/learning-check-GAME-TRAINER[-VARIANTS]-seedS)
  --python PY       Python interpreter (default: python)
  -h, --help        show this help
  -- EXTRA FLAGS    passed to the trainer (e.g. -- --backend=threads)

Variants (the trainers' flags declared in fast_dqn/config.py's VARIANTS, passed to the
trainer; the default run directory names those that depart from Nature DQN, in this order):
$(variant_help)

Exit status: 0 PASS, 1 FAIL or a failed run, 2 bad input.
EOF
}

# variant_help: the variant flags, one per line, from their declaration (fast_dqn/config.py).
variant_help() {
  "$PY" - "$REPO_ROOT" <<'EOF' 2>/dev/null || echo "  (--python $PY cannot list them)"
import sys
sys.path.insert(0, sys.argv[1])
from fast_dqn.config import variant_help_lines
print("\n".join(variant_help_lines()))
EOF
}

TRAINER=fast
SEEDS=()
GIVEN_VARIANTS=()  # the variant flags as given, for fast_dqn/config.py to read
HELP=false
OUT=
PY=python
EXTRA=()

split_equals "$@"
set -- "${SPLIT_ARGS[@]+"${SPLIT_ARGS[@]}"}"
while (($#)); do
  case $1 in
    --trainer) need_value "$1" $#; TRAINER=$2; shift 2 ;;
    --game) need_value "$1" $#; GAME=$2; shift 2 ;;
    --steps) need_value "$1" $#; STEPS=$2; shift 2 ;;
    --evaluate) need_value "$1" $#; EVALUATE=$2; shift 2 ;;
    --seed) need_value "$1" $#; SEEDS+=("$2"); shift 2 ;;
    --threshold) need_value "$1" $#; THRESHOLD=$2; shift 2 ;;
    --out) need_value "$1" $#; OUT=$2; shift 2 ;;
    --python) need_value "$1" $#; PY=$2; shift 2 ;;
    -h|--help) HELP=true; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    # Any other option is a variant's flag, with its value unless an option follows.
    --*) GIVEN_VARIANTS+=("$1"); shift
         if (($#)) && [[ $1 != -* ]]; then GIVEN_VARIANTS+=("$1"); shift; fi ;;
    *) die_usage "unknown option: $1" ;;
  esac
done
if $HELP; then usage; exit 0; fi

case $TRAINER in
  fast) SCRIPT=(run_fast_dqn.py --workers=8) ;;
  serial) SCRIPT=(run_dqn.py) ;;
  *) die_usage "--trainer must be fast or serial; got '$TRAINER'" ;;
esac
is_positive_int "$STEPS" || die_usage "--steps must be a positive integer; got '$STEPS'"
is_positive_int "$EVALUATE" || die_usage "--evaluate must be a positive integer; got '$EVALUATE'"
((${#SEEDS[@]})) || SEEDS=(0)
for SEED in "${SEEDS[@]}"; do
  is_uint "$SEED" || die_usage "--seed must be a non-negative integer; got '$SEED'"
done
[[ -z $OUT || ${#SEEDS[@]} -eq 1 ]] || die_usage "--out names one run: give one --seed with it"
[[ $THRESHOLD =~ ^-?[0-9]+([.][0-9]+)?$ ]] || die_usage "--threshold must be a number; got '$THRESHOLD'"
((10#$STEPS > REPLAY_START)) || die_usage "--steps must exceed the replay start ($REPLAY_START)"
# The variants given, read by their declaration: the first line names them for the run
# directory ("-machado-double"), the others are their flags as the trainer takes them. A flag
# that is no variant's, or a bad value, is refused there in one line (exit status 2).
VARIANTS=$("$PY" - "$REPO_ROOT" "$PROG" "${GIVEN_VARIANTS[@]+"${GIVEN_VARIANTS[@]}"}" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
from fast_dqn.config import variant_flags
flags, names = variant_flags(sys.argv[3:], prog=sys.argv[2])
print("".join("-" + name for name in names))
print("\n".join(flags))
EOF
) || exit $?
mapfile -t VARIANT_FLAGS <<<"$VARIANTS"
VARIANT_NAME=${VARIANT_FLAGS[0]}
VARIANT_FLAGS=("${VARIANT_FLAGS[@]:1}")
# Each seed's run is trained unless its directory already holds a finished one.
RUN_DIRS=()
for SEED in "${SEEDS[@]}"; do
  run_dir=${OUT:-runs/learning-check-$GAME-$TRAINER$VARIANT_NAME-seed$SEED}
  run_dir=$(absolute_path "$run_dir")
  RUN_DIRS+=("$run_dir")
  if grep -qs '"finished": true' "$run_dir/summary.json"; then
    continue
  fi
  if [[ -e $run_dir ]]; then
    die_usage "$run_dir exists but holds no finished run; remove it or choose another --out"
  fi
  cmd=("$PY" "$REPO_ROOT/${SCRIPT[0]}" "${SCRIPT[@]:1}" "--game=$GAME" "--seed=$SEED"
       "--timesteps=$STEPS" "--replay-start=$REPLAY_START"
       "--exploration-steps=$EXPLORATION_STEPS" "--replay-capacity=$STEPS"
       "--evaluate=$EVALUATE" "--eval-episodes=$EVAL_EPISODES" "--checkpoint-every=0"
       "--checkpoint-replay=false" "${VARIANT_FLAGS[@]+"${VARIANT_FLAGS[@]}"}"
       "--logdir=$run_dir" "${EXTRA[@]+"${EXTRA[@]}"}")
  note "training: ${cmd[*]}"
  "${cmd[@]}" || die "the run failed (exit status $?); see its output above"
done

"$PY" - "$REPO_ROOT" "$GAME" "$THRESHOLD" "$((REPLAY_START + EXPLORATION_STEPS))" \
  "${RUN_DIRS[@]}" <<'EOF'
import csv
import sys

sys.path.insert(0, sys.argv[1])
from fast_dqn.atari_data import reference_scores

game, threshold, decayed_at = sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
try:
    random_play = f"{reference_scores(game).random:g}"
except ValueError:
    random_play = "not in Nature's table"
results = []  # (run directory, best after the decay, mean of the last three, verdict)
for run_dir in sys.argv[5:]:
    with open(f"{run_dir}/evaluations.csv", newline="") as f:
        rows = [(int(row["timestep"]), float(row["mean"]), float(row["std"]))
                for row in csv.DictReader(f)]
    print(run_dir)
    print(f"{'step':>9}  {'mean':>7}  {'std':>6}")
    for step, mean, std in rows:
        print(f"{step:>9}  {mean:>7.1f}  {std:>6.1f}")
    judged = [mean for step, mean, _ in rows if step >= decayed_at]
    if not judged:
        print(f"FAIL: no evaluation at or after step {decayed_at} in {run_dir}")
        results.append((run_dir, None, None, "FAIL"))
        continue
    best = max(judged)
    last = [mean for _, mean, _ in rows[-3:]]
    last_mean = sum(last) / len(last)
    verdict = "PASS" if best >= threshold else "FAIL"
    print(f"{verdict}: best evaluation from step {decayed_at} on {best:.1f} "
          f"{'>=' if best >= threshold else '<'} threshold {threshold:g}; mean of the last "
          f"{len(last)} evaluations {last_mean:.1f}; random play {random_play}")
    results.append((run_dir, best, last_mean, verdict))
if len(results) > 1:
    judged = [result for result in results if result[1] is not None]
    print(f"\n{'run':<50}  {'best':>7}  {'last 3':>7}")
    for run_dir, best, last_mean, verdict in results:
        figures = "      -        -" if best is None else f"{best:>7.1f}  {last_mean:>7.1f}"
        print(f"{run_dir[-50:]:<50}  {figures}  {verdict}")
    if judged:
        best_mean = sum(result[1] for result in judged) / len(judged)
        last_mean = sum(result[2] for result in judged) / len(judged)
        print(f"{f'mean over {len(judged)} run(s)':<50}  {best_mean:>7.1f}  {last_mean:>7.1f}"
              f"  (random play {random_play})")
    passed = sum(result[3] == "PASS" for result in results)
    print(f"{'PASS' if passed == len(results) else 'FAIL'}: {passed} of {len(results)} runs pass")
sys.exit(0 if all(result[3] == "PASS" for result in results) else 1)
EOF
