#!/usr/bin/env bash
# Waits until a daemon is idle (benches/agent.sh): bash benches/agent_idle.sh PID SECONDS [MAX]
#
# Returns once process PID (all its threads) has used at most 3 clock ticks of CPU in each of
# SECONDS one-second intervals in a row, or after MAX seconds (default 900) with a message, or at
# once when PID is gone. Prints "EXTRA CPU": the seconds waited beyond SECONDS and the CPU seconds
# PID used meanwhile. agent.sh runs it after a workload that changes files, and as part of the
# untimed preparation of each write-heavy run, so a daemon's work left over from one run (its
# journal, checkpoints) is not timed in the next.
set -euo pipefail

pid=${1:?usage: agent_idle.sh PID SECONDS [MAX]}
need=${2:?usage: agent_idle.sh PID SECONDS [MAX]}
max=${3:-900}
[[ $pid =~ ^[0-9]+$ && $need =~ ^[0-9]+$ && $max =~ ^[0-9]+$ ]] ||
  { echo "agent_idle.sh: PID, SECONDS and MAX must be whole numbers: '$pid' '$need' '$max'" >&2; exit 2; }

# ticks: the CPU time PID has used so far, in clock ticks (0 once it is gone).
ticks() {
  local s
  s=$(cat "/proc/$pid/stat" 2>/dev/null) || {
    echo 0
    return
  }
  s=${s##*) }
  # shellcheck disable=SC2086
  set -- $s
  echo $((${12} + ${13}))
}

start=$SECONDS
c0=$(ticks)
prev=$c0
cur=$c0
idle=0
while ((idle < need)) && [ -e "/proc/$pid" ]; do
  sleep 1
  cur=$(ticks)
  if ((cur - prev <= 3)); then idle=$((idle + 1)); else idle=0; fi
  prev=$cur
  if ((SECONDS - start > max)); then
    echo "agent_idle.sh: pid $pid still busy after $max s; going on" >&2
    break
  fi
done
extra=$((SECONDS - start - need))
((extra >= 0)) || extra=0
awk -v e="$extra" -v t=$((cur - c0)) -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%d %.2f\n", e, t / hz}'
