#!/usr/bin/env bash
# wardfs runs in a sandbox (issue 34): bash benches/sandbox_run.sh   (or: make bench-run; root)
#
# Against the real sandbox-agent 0.4.2 on loopback, inside a loopback-only network namespace
# (the script re-runs itself under .ci/netns; the server is started with --token, --no-telemetry,
# 127.0.0.1, a temp HOME and a cleared environment; it and the daemon are killed by PID at the
# end), with a release `wardfs serve --no-mount` whose workspace holds 1,000 small files:
#   1. `wardfs run --sandbox dev -- true` with nothing changed, end to end (the CLI started,
#      the push finding nothing, the command, the pull finding nothing): target < 100 ms;
#   2. one file edited through the API (`wardfs write`, not timed), then `wardfs run --sandbox
#      dev -- cat it.txt`: target < 150 ms, and the new content is what prints;
#   3. a command writing 1,000 files: every one back in the workspace and journaled, < 2 s.
# Medians of WARDFS_BENCH_RUNS runs (default 10; 3 for the third). Prints a summary and keeps it
# in bench-data/results/sandbox-run-*.txt. WARDFS_BENCH_STRICT=1: exit 1 when a target is missed
# (a wrong result always fails).
set -euo pipefail

cd "$(dirname "$0")/.."
repo_root=$PWD
runs=${WARDFS_BENCH_RUNS:-10}
strict=${WARDFS_BENCH_STRICT:-0}
cargo=${CARGO:-cargo}

me=sandbox_run.sh
# shellcheck source=benches/lib.sh
. benches/lib.sh

if [ -z "${WARDFS_BENCH_IN_NETNS:-}" ]; then
  for t in curl python3 unshare ip; do
    command -v "$t" >/dev/null 2>&1 || die "$t is missing: run .ci/install-deps test"
  done
  sandbox_agent_bin >/dev/null
  log "building (release)"
  "$cargo" build --release --bin wardfs
  export WARDFS_BENCH_IN_NETNS=1
  exec .ci/netns bash "$0" "$@"
fi

# --- inside the namespace from here on
need_loopback_netns
wardfs=$repo_root/target/release/wardfs
[ -x "$wardfs" ] || die "target/release/wardfs was not built"

data=$repo_root/bench-data/sandbox-run
results=$repo_root/bench-data/results
mkdir -p "$data" "$results"
work=$(mktemp -d "$data/run.XXXXXX")
agent_pid=""
daemon_pid=""
cleanup() {
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null || true
  [ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

now_ns() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# --- the server
sandbox_agent_start "$work"

# --- the daemon, its workspace holding 1,000 small files
mkdir -p "$work/zones/workspace/src"
for i in $(seq 1000); do printf 'file %s\n' "$i" >"$work/zones/workspace/src/f$i.txt"; done
cat >"$work/config.toml" <<EOF
state_dir = "$work/state"
socket = "$work/run/s.sock"
[zones]
root = "$work/zones"
[sandboxes.dev]
provider = "sandbox-agent"
url = "$url"
token_env = "WARDFS_BENCH_TOKEN"
root = "$home/remote"
EOF
WARDFS_BENCH_TOKEN=$token RUST_LOG=warn "$wardfs" serve --config "$work/config.toml" --no-mount \
  >"$work/daemon.log" 2>&1 &
daemon_pid=$!
w() { "$wardfs" --socket "$work/run/s.sock" "$@"; }
for _ in $(seq 100); do
  w status >/dev/null 2>&1 && break
  kill -0 "$daemon_pid" 2>/dev/null || { cat "$work/daemon.log" >&2; die "wardfs serve exited"; }
  sleep 0.1
done
w status >/dev/null || die "the daemon did not answer: $(cat "$work/daemon.log")"

log "first run (pushes the 1,000 files)"
t0=$(now_ns)
[ "$(w run --sandbox dev -- cat src/f7.txt)" = "file 7" ] || die "the first run did not see the pushed files"
first_ms=$((($(now_ns) - t0) / 1000000))

log "run -- true, nothing changed ($runs runs)"
true_ms=()
for _ in $(seq "$runs"); do
  t0=$(now_ns)
  w run --sandbox dev -- true
  true_ms+=($((($(now_ns) - t0) / 1000000)))
done

log "one file edited, then run -- cat it ($runs runs)"
cat_ms=()
for i in $(seq "$runs"); do
  w write /workspace/it.txt "version $i" >/dev/null
  t0=$(now_ns)
  out=$(w run --sandbox dev -- cat it.txt)
  cat_ms+=($((($(now_ns) - t0) / 1000000)))
  [ "$out" = "version $i" ] || die "run -- cat it.txt printed '$out', not 'version $i'"
done

log "a command writing 1,000 files (3 runs)"
many_ms=()
for i in 1 2 3; do
  t0=$(now_ns)
  w run --sandbox dev -- sh -c "mkdir -p many$i && cd many$i && for n in \$(seq 1000); do echo \$n > f\$n; done" 2>/dev/null
  many_ms+=($((($(now_ns) - t0) / 1000000)))
  got=$(find "$work/zones/workspace/many$i" -type f | wc -l)
  [ "$got" = 1000 ] || die "run $i: $got of 1,000 files came back"
  journaled=$(w --json log --limit 5000 "/workspace/many$i" | python3 -c '
import json, sys
rows = json.load(sys.stdin)["entries"]
print(sum(1 for r in rows if r["op"] == "write" and r["via"] == "sandbox"))')
  [ "$journaled" = 1000 ] || die "run $i: $journaled of 1,000 files journaled"
done

t_true=$(printf '%s\n' "${true_ms[@]}" | median)
t_cat=$(printf '%s\n' "${cat_ms[@]}" | median)
t_many=$(printf '%s\n' "${many_ms[@]}" | median)
missed=0
verdict() { if [ "$1" -lt "$2" ]; then echo pass; else echo MISS; fi; }
v_true=$(verdict "$t_true" 100) v_cat=$(verdict "$t_cat" 150) v_many=$(verdict "$t_many" 2000)
case "$v_true$v_cat$v_many" in *MISS*) missed=1 ;; esac
summary=$(
  cat <<EOF
Runs in a sandbox (local sandbox-agent, release build, workspace of 1,000 files; medians)
  first run, pushing 1,000 files:         ${first_ms} ms
  run -- true, nothing changed:           ${t_true} ms   (target < 100 ms: $v_true)  all: ${true_ms[*]}
  one edit, then run -- cat it:           ${t_cat} ms   (target < 150 ms: $v_cat)  all: ${cat_ms[*]}
  a command writing 1,000 files:          ${t_many} ms  (target < 2000 ms: $v_many)  all: ${many_ms[*]}
  (1,000 files back in the workspace and journaled via sandbox, each run)
EOF
)
printf '\n%s\n' "$summary"
printf '%s\n' "$summary" >"$results/sandbox-run-$(date +%Y%m%d-%H%M%S).txt"
if [ "$strict" = 1 ] && [ "$missed" = 1 ]; then exit 1; fi
