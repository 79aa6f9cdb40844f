#!/usr/bin/env bash
# A/B of two commits' throughput on this machine. Run with --help for the options.
set -euo pipefail

# shellcheck source=../scripts/lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

CPU_FLAGS=(--game=pong --workers 8)
SIMULATED_FLAGS=(--game=pong --workers 16 --trainer-stub-ms=0.8 --query-stub-ms=0.3
  --steps=30000 --random-steps=2000 --skip-serial)

usage() {
  cat <<EOF
Usage: tools/$PROG [options] BASE [HEAD] [-- BENCHMARK FLAGS]

Runs python -m fast_dqn.benchmark of commit BASE and of commit HEAD (default: HEAD)
alternately, BASE first, each from its own detached worktree, then prints the medians of
each figure over the pairs, their spread and HEAD / BASE (tools/ab_table.py OUT prints it
again). Nothing else should run meanwhile (docs/throughput.md, "A/B of two commits").
An A/B of one flag on one commit: --head-flags=FLAG HEAD HEAD.

Options:
  --pairs N       benchmark runs of each commit (default: 3)
  --simulated     the GPU regime: the network work replaced by waits (docs/throughput.md)
  --out DIR       where the worktrees and logs go (default: a new directory under /tmp)
  --head-flags F  benchmark flags added to HEAD's runs only, split at spaces
                  (e.g. --head-flags=--precision=bfloat16)
  --python PY     Python interpreter with the project's requirements (default: python)
  -h, --help      show this help

Benchmark flags: ${CPU_FLAGS[*]}
With --simulated: ${SIMULATED_FLAGS[*]}
Flags after -- replace these whole.
EOF
}

PAIRS=3 OUT='' PY=python
POSITIONAL=() BENCH_FLAGS=("${CPU_FLAGS[@]}") HEAD_FLAGS=()

split_equals "$@"
set -- "${SPLIT_ARGS[@]}"
while (($#)); do
  case $1 in
    --pairs) need_value "$1" $#; PAIRS=$2; shift 2 ;;
    --simulated) BENCH_FLAGS=("${SIMULATED_FLAGS[@]}"); shift ;;
    --out) need_value "$1" $#; OUT=$2; shift 2 ;;
    --python) need_value "$1" $#; PY=$2; shift 2 ;;
    --head-flags) need_value "$1" $#; read -ra HEAD_FLAGS <<<"$2"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; BENCH_FLAGS=("$@"); break ;;
    -*) die_usage "unknown option '$1'" ;;
    *) POSITIONAL+=("$1"); shift ;;
  esac
done

((${#POSITIONAL[@]} >= 1 && ${#POSITIONAL[@]} <= 2)) || die_usage "give BASE and optionally HEAD"
is_positive_int "$PAIRS" || die_usage "--pairs: expected a positive whole number, got '$PAIRS'"
PAIRS=$((10#$PAIRS))
declare -A REF=([base]=${POSITIONAL[0]} [head]=${POSITIONAL[1]:-HEAD}) SHA
for side in base head; do
  SHA[$side]=$(git -C "$REPO_ROOT" rev-parse --verify --quiet "${REF[$side]}^{commit}") ||
    die_usage "${side^^}: '${REF[$side]}' is not a commit of this repository"
done
"$PY" -c 'import tensorflow, ale_py' 2>/dev/null ||
  die_usage "--python: '$PY' cannot import tensorflow and ale_py (install requirements.txt)"

OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/ab_benchmark.XXXXXX")}
OUT=$(absolute_path "$OUT")
TREES="$OUT/trees"
mkdir -p "$TREES"

remove_trees() {
  local sha
  for sha in "${SHA[@]}"; do
    git -C "$REPO_ROOT" worktree remove --force "$TREES/$sha" 2>/dev/null || true
  done
}
trap remove_trees EXIT

for sha in "${SHA[@]}"; do # a detached worktree of each commit (reused if there already)
  [[ -d $TREES/$sha ]] || git -C "$REPO_ROOT" worktree add --detach --quiet "$TREES/$sha" "$sha"
done
printf 'base %s\nhead %s\nflags %s\nhead flags %s\n' "${SHA[base]}" "${SHA[head]}" \
  "${BENCH_FLAGS[*]}" "${HEAD_FLAGS[*]}" >"$OUT/ab.txt"
note "base ${REF[base]} (${SHA[base]:0:7}), head ${REF[head]} (${SHA[head]:0:7})" \
  "${HEAD_FLAGS[*]}, $PAIRS pairs; logs in $OUT"

for ((pair = 1; pair <= PAIRS; pair++)); do
  for side in base head; do
    sha=${SHA[$side]} flags=("${BENCH_FLAGS[@]}")
    [[ $side == head ]] && flags+=("${HEAD_FLAGS[@]}")
    log="$OUT/$side-$pair.log"
    note "pair $pair/$PAIRS: $side (${sha:0:7})"
    if ! (cd "$TREES/$sha" && CUDA_VISIBLE_DEVICES=-1 "$PY" -m fast_dqn.benchmark \
      "${flags[@]}") >"$log" 2>&1; then
      die "the benchmark of $side (${sha:0:7}) failed; see $log"
    fi
  done
done

"$PY" "$REPO_ROOT/tools/ab_table.py" "$OUT"
