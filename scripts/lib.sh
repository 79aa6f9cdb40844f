# shellcheck shell=bash
# Helpers shared by the shell scripts in scripts/ and tools/ab_benchmark.sh. Sourced, not run.
#
# A sweep is a list of tasks (TASK_NAMES, TASK_DIRS, TASK_LOGS, TASK_CMDS: one entry per
# training run). The scripts fill the list, then either print it (--dry-run), run it here
# with at most N runs at once (run_tasks), or write it as a SLURM array job (write_slurm).

if ((BASH_VERSINFO[0] < 4 || (BASH_VERSINFO[0] == 4 && BASH_VERSINFO[1] < 4))); then
  echo "${0##*/}: error: needs bash 4.4 or newer; this is $BASH_VERSION" >&2
  exit 2
fi

PROG=${0##*/}
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

TASK_NAMES=()
TASK_DIRS=()
TASK_LOGS=()
TASK_CMDS=()

# One-line error for bad input, exit status 2.
die_usage() {
  printf '%s: error: %s (see --help)\n' "$PROG" "$*" >&2
  exit 2
}

# One-line error for a failure that is not the user's input, exit status 1.
die() {
  printf '%s: error: %s\n' "$PROG" "$*" >&2
  exit 1
}

# A message for people, on stderr (stdout carries the commands and tables).
note() {
  printf '%s: %s\n' "$PROG" "$*" >&2
}

# counted N NOUN: "1 game", "3 games".
counted() {
  if (($1 == 1)); then printf '%s %s' "$1" "$2"; else printf '%s %ss' "$1" "$2"; fi
}

is_uint() {
  [[ $1 =~ ^[0-9]+$ ]]
}

is_positive_int() {
  [[ $1 =~ ^[0-9]+$ ]] && ((10#$1 >= 1))
}

# split_equals ARGS...: sets SPLIT_ARGS to ARGS with every "--name=value" before a lone
# "--" split into "--name" "value", so that option loops handle one spelling.
split_equals() {
  SPLIT_ARGS=()
  while (($#)); do
    case $1 in
      --) SPLIT_ARGS+=("$@"); return ;;
      --*=*) SPLIT_ARGS+=("${1%%=*}" "${1#*=}") ;;
      *) SPLIT_ARGS+=("$1") ;;
    esac
    shift
  done
}

# need_value OPTION REMAINING_ARG_COUNT: an option that takes a value must have one.
need_value() {
  (($2 >= 2)) || die_usage "$1 needs a value"
}

# absolute_path PATH: PATH made absolute against the current directory (no symlinks resolved).
absolute_path() {
  local path=${1%/}
  [[ -n $path ]] || path=/
  if [[ $path == /* ]]; then
    printf '%s\n' "$path"
  else
    printf '%s\n' "$PWD/$path"
  fi
}

# check_out_dir DIR: task files hold one run per line with tab-separated fields.
check_out_dir() {
  [[ $1 != *$'\t'* && $1 != *$'\n'* ]] || die_usage "--out must not contain tabs or newlines"
}

# extra_value NAME ARGS...: prints the value of --NAME=V or --NAME V among ARGS (the last
# one given wins, as in argparse); returns 1 if ARGS do not set it.
extra_value() {
  local name=$1 found=1 value=
  shift
  while (($#)); do
    case $1 in
      "--$name=")
        value=
        found=0
        ;;
      "--$name="*)
        value=${1#*=}
        found=0
        ;;
      "--$name")
        if (($# >= 2)); then
          value=$2
          found=0
          shift
        fi
        ;;
    esac
    shift
  done
  ((found == 0)) && printf '%s\n' "$value"
  return "$found"
}

# forbid_extra "WHY" NAME... -- ARGS...: bad input if ARGS set any --NAME.
forbid_extra() {
  local why=$1 name names=()
  shift
  while (($#)) && [[ $1 != -- ]]; do
    names+=("$1")
    shift
  done
  shift
  for name in "${names[@]}"; do
    if extra_value "$name" "$@" >/dev/null; then
      die_usage "--$name $why; do not pass it after --"
    fi
  done
}

# cpu_count: online CPUs (nproc, else getconf, else 1).
cpu_count() {
  nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1
}

# memory_gib: total memory in GiB (0 where /proc/meminfo is not there).
memory_gib() {
  awk '/^MemTotal:/ { printf "%d\n", $2 / 1048576; found = 1 } END { if (!found) print 0 }' \
    /proc/meminfo 2>/dev/null || echo 0
}

# A sweep's exit status when it started no run in some directories because another process
# runs them there (another sweep, or a trainer started by hand), and every run it started
# succeeded.
EXIT_RUNNING_ELSEWHERE=3
ELSEWHERE=()  # "NAME (running elsewhere: WHO)" for each run this sweep left alone

# How a lock is tested without holding it for more than a moment: util-linux's flock, which
# Debian and Ubuntu install from the start, else the fcntl module of --python (e.g. macOS).
if command -v flock >/dev/null 2>&1; then
  LOCK_PROBE=flock
else
  LOCK_PROBE=python
fi
LOCK_HELD=75  # _lock_status: another process holds the lock

# _lock_status FILE: returns LOCK_HELD when another process holds an flock on FILE; 0 when
# nobody does, or FILE is not a regular file (missing, or a link: never followed); 1 when
# it cannot be told (FILE cannot be opened). Takes a shared lock for a moment: a run's
# exclusive lock keeps it out, and two sweeps looking at once do not see each other. Opens
# FILE for reading only, so no file is created.
_lock_status() {
  local file=$1 fd rc=0
  [[ -f $file && ! -L $file ]] || return 0
  if [[ $LOCK_PROBE == flock ]]; then
    { exec {fd}<"$file"; } 2>/dev/null || return 1
    flock --nonblock --shared --conflict-exit-code "$LOCK_HELD" "$fd" 2>/dev/null || rc=$?
    exec {fd}<&-
  else
    "$PY" -c '
import fcntl, os, sys
try:
    fd = os.open(sys.argv[1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
except BlockingIOError:
    sys.exit(int(sys.argv[2]))
except OSError:
    sys.exit(1)
' "$file" "$LOCK_HELD" 2>/dev/null || rc=$?
  fi
  ((rc == 0 || rc == LOCK_HELD)) || rc=1
  return "$rc"
}

# _take_lock FD: takes an exclusive flock on the open file FD, waiting at most 2 s (for
# another sweep's _lock_status to let go); returns non-zero if another process holds it.
# The lock stays with the open file (and every copy of it) after this returns.
_take_lock() {
  if [[ $LOCK_PROBE == flock ]]; then
    flock --exclusive --wait 2 "$1" 2>/dev/null
  else
    "$PY" -c '
import fcntl, sys, time
deadline = time.monotonic() + 2
while True:
    try:
        fcntl.flock(0, fcntl.LOCK_EX | fcntl.LOCK_NB)
        break
    except BlockingIOError:
        if time.monotonic() > deadline:
            sys.exit(1)
        time.sleep(0.05)
' <&"$1" 2>/dev/null
  fi
}

# _lock_holder FILE: the holder a run's lock names ("host H pid P since T"), one line.
_lock_holder() {
  local text
  text=$(head -c 200 -- "$1" 2>/dev/null | head -n 1) || text=
  text=${text//[^[:print:]]/?}
  printf '%s\n' "${text:-its lock $1 does not name the holder}"
}

# has_checkpoint DIR: whether `--resume DIR` has a complete checkpoint to continue from, by
# the trainer's rule, fast_dqn.checkpoints.latest_checkpoint: checkpoint/, else
# checkpoint.old/ (what a kill between the two renames of a checkpoint's swap leaves), each a
# directory (not a link) holding a manifest.json that is a regular file (not a link). A test
# (tests/test_scripts.py) holds the two to the same answers.
has_checkpoint() {
  local name
  for name in checkpoint checkpoint.old; do
    if [[ -d $1/$name && ! -L $1/$name && -f $1/$name/manifest.json &&
      ! -L $1/$name/manifest.json ]]; then
      return 0
    fi
  done
  return 1
}

# run_state DIR LOG: sets RUN_STATE to "finished" (summary.json says so), "running" (a live
# process holds the run's lock DIR/.lock, or another sweep holds its log LOG: see _run_one),
# "resume" (a checkpoint, has_checkpoint, but no finished summary), "stale" (the directory
# exists with neither) or "new"; and RUN_HOLDER to who runs it ("" unless running). A
# running run is never moved, resumed or started by a sweep; a stale one is moved aside
# (set_aside).
# shellcheck disable=SC2034  # RUN_STATE and RUN_HOLDER are read by the scripts that source this file
run_state() {
  local dir=$1 log=$2 status=0
  RUN_STATE=
  RUN_HOLDER=
  if [[ -f $dir/summary.json ]] &&
    grep -Eq '"finished"[[:space:]]*:[[:space:]]*true' "$dir/summary.json"; then
    RUN_STATE=finished
    return 0
  fi
  _lock_status "$dir/.lock" || status=$?
  if ((status == LOCK_HELD)); then
    RUN_STATE=running
    RUN_HOLDER=$(_lock_holder "$dir/.lock")
    return 0
  elif ((status != 0)); then
    RUN_STATE=running
    RUN_HOLDER="cannot tell: its lock $dir/.lock cannot be read"
    return 0
  fi
  status=0
  _lock_status "$log" || status=$?
  if ((status == LOCK_HELD)); then
    RUN_STATE=running
    RUN_HOLDER="another sweep holds its log $log"
  elif has_checkpoint "$dir"; then
    RUN_STATE=resume
  elif [[ -e $dir ]]; then
    RUN_STATE=stale
  else
    RUN_STATE=new
  fi
}

# note_elsewhere NAME WHO: a run left alone because another process runs it.
note_elsewhere() {
  ELSEWHERE+=("$1 (running elsewhere: $2)")
  note "busy   $1 (running elsewhere: $2); left alone"
}

# report_elsewhere: lists the runs left alone because another process runs them, and
# returns EXIT_RUNNING_ELSEWHERE if there are any (else 0).
report_elsewhere() {
  ((${#ELSEWHERE[@]})) || return 0
  note "${#ELSEWHERE[@]} run(s) running elsewhere, left alone and not run by this sweep;" \
    "run the same command again once they have ended:"
  printf '  %s\n' "${ELSEWHERE[@]}" >&2
  return "$EXIT_RUNNING_ELSEWHERE"
}

# set_aside DIR: renames a run directory that cannot be resumed (no checkpoint) so that a
# fresh run can take its place; nothing is deleted. Only for a stale DIR (run_state): one
# whose lock is held is never moved.
set_aside() {
  local dir=$1 target n=1
  target="$dir.incomplete-$(date +%Y%m%d-%H%M%S)"
  while [[ -e $target ]]; do
    target="$dir.incomplete-$(date +%Y%m%d-%H%M%S)-$n"
    n=$((n + 1))
  done
  mv -- "$dir" "$target" || die "cannot move $dir aside to $target"
  note "$(basename "$dir"): no checkpoint to resume from; moved the old directory to $target"
}

# add_task NAME RUN_DIR LOG COMMAND...: appends one run to the task list.
add_task() {
  local name=$1 dir=$2 log=$3 quoted
  shift 3
  quoted=$(printf '%q ' "$@")
  TASK_NAMES+=("$name")
  TASK_DIRS+=("$dir")
  TASK_LOGS+=("$log")
  TASK_CMDS+=("${quoted% }")
}

# print_tasks: the task list as commands, one per line, runnable from REPO_ROOT.
print_tasks() {
  local i
  printf '# %d run(s); commands run from %s; each one logs to <logdir>.log\n' \
    "${#TASK_CMDS[@]}" "$(printf '%q' "$REPO_ROOT")"
  for i in "${!TASK_CMDS[@]}"; do
    printf '%s\n' "${TASK_CMDS[i]}"
  done
}

# _run_one INDEX STATUS_DIR: runs one task, its output in its log, and writes its exit
# status to STATUS_DIR/INDEX ("stopped" when a SIGTERM from run_tasks ended it, "elsewhere"
# when another sweep runs it). SIGTERM is passed on to the trainer, which writes a
# checkpoint and exits; this waits for that.
#
# The log is this sweep's claim on the run: it is locked before the trainer starts, and the
# trainer holds that lock as its stdout until it ends. A second sweep that comes before the
# trainer has locked its run directory sees it (run_state), or, past that look at the same
# moment, finds it taken here; either way it leaves the run and its log alone.
_run_one() {
  local i=$1 status_dir=$2
  local log=${TASK_LOGS[i]} log_fd child rc=0 stopped=0
  trap 'stopped=1; kill -TERM "$child" 2>/dev/null' TERM
  if ! { exec {log_fd}<>"$log"; } 2>/dev/null; then
    note "FAILED  ${TASK_NAMES[i]} (cannot open its log $log)"
    echo 1 >"$status_dir/$i"
    return 0
  fi
  if ! _take_lock "$log_fd"; then
    note "busy    ${TASK_NAMES[i]} (running elsewhere: another sweep holds its log $log);" \
      "left alone"
    echo elsewhere >"$status_dir/$i"
    return 0
  fi
  if ((stopped)); then  # the SIGTERM came while this waited for the log
    echo stopped >"$status_dir/$i"
    return 0
  fi
  : >"$log"
  (eval "exec ${TASK_CMDS[i]}") </dev/null >&"$log_fd" 2>&1 {log_fd}>&- &
  child=$!
  exec {log_fd}>&-
  wait "$child" || rc=$?
  while kill -0 "$child" 2>/dev/null; do  # a signal cut the wait short; the run goes on
    rc=0
    wait "$child" || rc=$?
  done
  if ((rc == 0)); then
    note "done    ${TASK_NAMES[i]}"
  elif ((stopped)); then
    note "stopped ${TASK_NAMES[i]} (exit status $rc; log: ${TASK_LOGS[i]})"
    rc=stopped
  else
    note "FAILED  ${TASK_NAMES[i]} (exit status $rc; log: ${TASK_LOGS[i]})"
  fi
  echo "$rc" >"$status_dir/$i"
}

_INTERRUPTED=0

# On Ctrl-C or SIGTERM: stop starting runs, and send each running trainer one SIGTERM.
_on_interrupt() {
  _INTERRUPTED=1
  note "interrupted: asking the running trainers to checkpoint and stop"
  local pid
  for pid in $(jobs -p); do
    kill -TERM "$pid" 2>/dev/null || true
  done
}

# run_tasks JOBS: runs the task list here, at most JOBS runs at once, each from REPO_ROOT
# with stdout and stderr in its log. Returns 0 if all succeeded; otherwise lists the failed
# runs on stderr and returns 1, or 130 when interrupted. Lists the runs left alone because
# another process runs them (ELSEWHERE, and those found taken when they were due) and
# returns EXIT_RUNNING_ELSEWHERE if there are any and nothing failed.
#
# Job control (set -m) puts every run in its own process group, so that Ctrl-C in the
# terminal reaches only this shell, which then sends each trainer exactly one SIGTERM (a
# trainer takes a second signal as "stop now, without a checkpoint").
run_tasks() {
  local max_jobs=$1 status_dir i rc holder failed=0 stopped=0 missing=0 failures=()
  status_dir=$(mktemp -d) || die "cannot create a temporary directory"
  trap _on_interrupt INT TERM
  set -m
  for i in "${!TASK_CMDS[@]}"; do
    while (($(jobs -rp | wc -l) >= max_jobs)) && ((!_INTERRUPTED)); do
      wait -n || true
    done
    ((_INTERRUPTED)) && break
    note "start   ${TASK_NAMES[i]} (log: ${TASK_LOGS[i]})"
    (cd "$REPO_ROOT" && _run_one "$i" "$status_dir") &
  done
  while [[ -n $(jobs -rp) ]]; do
    wait || true
  done
  set +m
  trap - INT TERM

  for i in "${!TASK_CMDS[@]}"; do
    rc=$(cat "$status_dir/$i" 2>/dev/null) || rc=
    case $rc in
      0) ;;
      '') missing=$((missing + 1)) ;;
      stopped) stopped=$((stopped + 1)) ;;
      elsewhere)
        holder="another sweep holds its log ${TASK_LOGS[i]}"
        ELSEWHERE+=("${TASK_NAMES[i]} (running elsewhere: $holder)")
        ;;
      *)
        failed=$((failed + 1))
        failures+=("  ${TASK_NAMES[i]} (exit status $rc; log: ${TASK_LOGS[i]})")
        ;;
    esac
  done
  rm -rf -- "$status_dir"
  if ((failed)); then
    note "$failed of ${#TASK_CMDS[@]} run(s) failed:"
    printf '%s\n' "${failures[@]}" >&2
  fi
  rc=0
  report_elsewhere || rc=$?
  if ((_INTERRUPTED)); then
    note "interrupted: $stopped run(s) stopped, $missing not started;" \
      "run the same command again to go on"
    return 130
  fi
  ((failed == 0)) || return 1
  return "$rc"
}

# write_slurm SCRIPT TASKS_FILE JOB_NAME ARRAY_LIMIT DRY_RUN: writes the task list to
# TASKS_FILE (run dir, log and command, tab-separated, one run per line) and a SLURM array
# batch script to SCRIPT whose task i runs line i+1. With DRY_RUN=1 both are printed, not
# written. Uses SLURM_PARTITION, SLURM_TIME, SLURM_GPUS, SLURM_CPUS, SLURM_MEM.
write_slurm() {
  local script=$1 tasks_file=$2 job_name=$3 limit=$4 dry_run=$5 n=${#TASK_CMDS[@]} i
  local tasks_text script_text
  tasks_text=$(for i in "${!TASK_CMDS[@]}"; do
    printf '%s\t%s\t%s\n' "${TASK_DIRS[i]}" "${TASK_LOGS[i]}" "${TASK_CMDS[i]}"
  done)
  script_text=$(_slurm_script "$tasks_file" "$job_name" "$n" "$limit" "$(dirname "$script")")
  if ((dry_run)); then
    printf '# %s\n%s\n# %s\n%s\n' "$script" "$script_text" "$tasks_file" "$tasks_text"
    return 0
  fi
  mkdir -p -- "$(dirname "$script")" || die "cannot create $(dirname "$script")"
  printf '%s\n' "$tasks_text" >"$tasks_file" || die "cannot write $tasks_file"
  printf '%s\n' "$script_text" >"$script" || die "cannot write $script"
  note "wrote $script ($n array task(s), at most $limit at once) and $tasks_file"
}

_slurm_script() {
  local tasks_file=$1 job_name=$2 n=$3 limit=$4 log_dir=$5
  cat <<EOF
#!/bin/bash
#SBATCH --job-name=$job_name
#SBATCH --array=0-$((n - 1))%$limit
#SBATCH --time=$SLURM_TIME
#SBATCH --cpus-per-task=$SLURM_CPUS
#SBATCH --mem=$SLURM_MEM
EOF
  if ((SLURM_GPUS > 0)); then
    echo "#SBATCH --gres=gpu:$SLURM_GPUS"
  fi
  if [[ -n $SLURM_PARTITION ]]; then
    echo "#SBATCH --partition=$SLURM_PARTITION"
  fi
  cat <<EOF
#SBATCH --output=$log_dir/slurm-%A_%a.out
#SBATCH --signal=B:TERM@300
# Written by scripts/$PROG on $(date '+%Y-%m-%d %H:%M'): one array task per training run.
# Task i runs line i+1 of the task file (run dir, log, command; tab-separated) from the
# repository root. 300 s before the time limit the trainer gets SIGTERM, writes a
# checkpoint and stops; run scripts/$PROG again (same options) for the unfinished runs.
set -u
TASKS=$(printf '%q' "$tasks_file")
cd $(printf '%q' "$REPO_ROOT") || exit 1
line=\$(sed -n "\$((SLURM_ARRAY_TASK_ID + 1))p" "\$TASKS")
IFS=\$'\t' read -r run_dir log cmd <<<"\$line"
if [[ -z \$cmd ]]; then
  echo "no task \$SLURM_ARRAY_TASK_ID in \$TASKS" >&2
  exit 1
fi
if grep -Eqs '"finished"[[:space:]]*:[[:space:]]*true' "\$run_dir/summary.json"; then
  echo "\$run_dir already finished; nothing to do"
  exit 0
fi
echo "task \$SLURM_ARRAY_TASK_ID on \$(hostname): \$cmd (log: \$log)"
(eval "exec \$cmd") >"\$log" 2>&1 &
child=\$!
trap 'kill -TERM "\$child" 2>/dev/null' TERM
rc=0
wait "\$child" || rc=\$?
while kill -0 "\$child" 2>/dev/null; do
  rc=0
  wait "\$child" || rc=\$?
done
echo "exit status \$rc"
exit "\$rc"
EOF
}

# submit_slurm SCRIPT: submits SCRIPT with sbatch.
submit_slurm() {
  command -v sbatch >/dev/null 2>&1 ||
    die "sbatch not found: submit $1 on a SLURM login node (or use --dry-run to print it)"
  sbatch "$1" || die "sbatch $1 failed"
}

# parse_slurm_option OPTION VALUE: sets the SLURM_* setting of a --slurm-* option.
SLURM_PARTITION=
SLURM_TIME=24:00:00
SLURM_GPUS=1
SLURM_CPUS=8
SLURM_MEM=16G
parse_slurm_option() {
  case $1 in
    --slurm-partition)
      [[ $2 =~ ^[A-Za-z0-9_.,-]+$ ]] || die_usage "--slurm-partition: bad partition name '$2'"
      SLURM_PARTITION=$2
      ;;
    --slurm-time)
      [[ $2 =~ ^[0-9:-]+$ ]] || die_usage "--slurm-time: expected a SLURM time such as 24:00:00, got '$2'"
      SLURM_TIME=$2
      ;;
    --slurm-gpus)
      is_uint "$2" || die_usage "--slurm-gpus: expected a whole number, got '$2'"
      SLURM_GPUS=$((10#$2))
      ;;
    --slurm-cpus)
      is_positive_int "$2" || die_usage "--slurm-cpus: expected a positive whole number, got '$2'"
      SLURM_CPUS=$((10#$2))
      ;;
    --slurm-mem)
      [[ $2 =~ ^[0-9]+[KMGT]?$ ]] || die_usage "--slurm-mem: expected a size such as 16G, got '$2'"
      SLURM_MEM=$2
      ;;
  esac
}

# shellcheck disable=SC2034  # used in the --help of the scripts that source this file
SLURM_USAGE='SLURM (with --slurm):
  --slurm-partition P   partition to submit to (default: the cluster default)
  --slurm-time T        time limit per run (default: 24:00:00)
  --slurm-gpus N        GPUs per run (default: 1; 0 = none)
  --slurm-cpus N        CPU cores per run (default: 8)
  --slurm-mem M         memory per run (default: 16G)'
