#!/usr/bin/env bash
# Provisioned-sandbox benchmark (issue 15): bash benches/provision.sh   (or: make bench-provision)
#
# The local provider through the daemon (the release build, no mount) and the `wardfs` CLI (so a
# process start is in every figure), as root (namespaces, cgroups):
#   1. the first create, which builds the provider's default snapshot (a minimal root): one-time
#   2. create from that existing snapshot to a healthy sandbox-agent (median of 5; target < 1 s)
#   3. resume from paused to healthy (median of 5; target < 1 s)
#   4. 20 sandboxes created at once: wall time, the daemon's RSS with all 20 up (target < 100 MB)
#   5. the CPU the 20 sandboxes' processes use in 5 s while paused (target: none)
#   6. a snapshot of a spec with a few npm dependencies (snapshot_base = "minimal",
#      snapshot_network = true, `npm install` of NPM_DEPS from npm's configured registry):
#      the one-time build, the same spec again (reused), and a create from it to healthy.
#      Needs node and npm on this machine and its registry reachable; otherwise the row says
#      why it was not measured.
# Everything it makes is destroyed at the end (and on exit).
#
# Environment: CARGO (default cargo); WARDFS_PROVISION_AGENT (default: sandbox-agent on PATH);
# NPM_DEPS (default: "lodash express chalk@4 commander semver").
set -euo pipefail

cd "$(dirname "$0")/.."
repo=$PWD
cargo=${CARGO:-cargo}
n=20
npm_deps=${NPM_DEPS:-lodash express chalk@4 commander semver}

log() { printf '\n== %s\n' "$*" >&2; }
die() { printf 'provision.sh: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (the local provider makes namespaces and cgroups)"
for t in jq bwrap unshare; do
  command -v "$t" >/dev/null 2>&1 || die "missing $t; install it with .ci/install-deps run"
done
agent=${WARDFS_PROVISION_AGENT:-$(command -v sandbox-agent || true)}
[ -x "$agent" ] || die "no sandbox-agent binary; install it with .ci/install-deps test"

log "building (release)"
"$cargo" build --release --bin wardfs
bin=$repo/target/release/wardfs

tmp=$(mktemp -d "${TMPDIR:-/tmp}/wardfs-provbench.XXXXXX")
daemon_pid=""
sf() { "$bin" --socket "$tmp/run/s.sock" "$@"; }
cleanup() {
  if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
    for i in $(seq "$n") npm; do sf sandbox destroy "s$i" >/dev/null 2>&1 || true; done
    kill "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$tmp/run" "$tmp/ws" "$tmp/cache"
# The npm registry this machine is configured with (never written anywhere but the temp config).
registry=""
npm_skip=""
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  npm_skip="node and npm are not installed (apt-get install nodejs npm)"
else
  registry=$(npm config get registry 2>/dev/null || true)
  [ -n "$registry" ] || npm_skip="npm has no registry configured"
fi
{
  printf "state_dir = '%s'\nsocket = '%s'\n\n[zones]\nmode = \"direct\"\n" "$tmp/state" "$tmp/run/s.sock"
  printf "[zones.workspace]\ndir = '%s'\n[zones.cache]\ndir = '%s'\n" "$tmp/ws" "$tmp/cache"
  for i in $(seq "$n"); do
    printf '\n[sandboxes.s%s]\nprovider = "local"\nagent_bin = "%s"\nidle_pause_minutes = 0\n' "$i" "$agent"
  done
  if [ -n "$registry" ]; then
    printf '\n[sandboxes.snpm]\nprovider = "local"\nagent_bin = "%s"\nidle_pause_minutes = 0\n' "$agent"
    printf 'snapshot_base = "minimal"\nsnapshot_network = true\n'
    printf 'snapshot_setup = ["mkdir -p /opt/app && cd /opt/app && npm init -y >/dev/null && npm install --no-audit --no-fund --registry %s %s"]\n' "$registry" "$npm_deps"
  fi
} >"$tmp/config.toml"
RUST_LOG=warn "$bin" serve --config "$tmp/config.toml" --no-mount 2>"$tmp/daemon.log" &
daemon_pid=$!
for _ in $(seq 100); do [ -S "$tmp/run/s.sock" ] && break; sleep 0.05; done
[ -S "$tmp/run/s.sock" ] || die "the daemon did not start: $(cat "$tmp/daemon.log")"

ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

log "first create (builds the default snapshot once)"
s=$(date +%s%N)
sf sandbox create s1 >/dev/null
snapshot_ms=$(ms "$s")
sf sandbox destroy s1 >/dev/null

log "create from the existing snapshot, then destroy (5 times)"
creates=()
for _ in 1 2 3 4 5; do
  s=$(date +%s%N)
  sf sandbox create s1 >/dev/null
  creates+=("$(ms "$s")")
  sf sandbox destroy s1 >/dev/null
done
create_ms=$(printf '%s\n' "${creates[@]}" | median)

log "pause and resume (5 times)"
sf sandbox create s1 >/dev/null
resumes=()
for _ in 1 2 3 4 5; do
  sf sandbox pause s1 >/dev/null
  s=$(date +%s%N)
  sf sandbox resume s1 >/dev/null
  resumes+=("$(ms "$s")")
done
resume_ms=$(printf '%s\n' "${resumes[@]}" | median)

log "$n sandboxes at once"
s=$(date +%s%N)
pids=()
for i in $(seq 2 "$n"); do
  sf sandbox create "s$i" >"$tmp/create-$i.out" 2>&1 &
  pids+=($!)
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
all_ms=$(ms "$s")
[ "$failed" = 0 ] || die "$failed of the creates failed: $(cat "$tmp"/create-*.out)"
active=$(sf --json sandbox list | jq '[.sandboxes[] | select(.status == "active")] | length')
rss_kb=$(awk '/^VmRSS:/ {print $2}' "/proc/$daemon_pid/status")

log "CPU of the $n sandboxes' processes while paused (5 s)"
for i in $(seq "$n"); do sf sandbox pause "s$i" >/dev/null; done
agents=$(pgrep -f 'sandbox-agent server .*--no-telemetry' || true)
ticks() {
  local t=0
  for p in $agents; do
    [ -r "/proc/$p/stat" ] && t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
  done
  echo "$t"
}
t0=$(ticks)
sleep 5
t1=$(ticks)
paused_cpu_ms=$(( (t1 - t0) * 1000 / $(getconf CLK_TCK) ))
nagents=$(echo "$agents" | wc -w)

log "a snapshot with npm dependencies ($npm_deps)"
npm_snapshot_ms="" npm_again_ms="" npm_create_ms="" npm_modules=""
if [ -z "$npm_skip" ]; then
  s=$(date +%s%N)
  if sf --json sandbox snapshot snpm >"$tmp/npm-snapshot.json" 2>"$tmp/npm-snapshot.err"; then
    npm_snapshot_ms=$(ms "$s")
    key=$(jq -r .snapshot "$tmp/npm-snapshot.json")
    npm_modules=$(find "$tmp/state/provision/local/snapshots/$key/root/opt/app/node_modules" \
      -mindepth 2 -maxdepth 3 -name package.json | wc -l)
    s=$(date +%s%N)
    sf sandbox snapshot snpm >/dev/null
    npm_again_ms=$(ms "$s")
    s=$(date +%s%N)
    sf sandbox create snpm >/dev/null
    npm_create_ms=$(ms "$s")
    sf sandbox destroy snpm >/dev/null
  else
    npm_skip="the snapshot failed: $(tail -c 400 "$tmp/npm-snapshot.err" | tr '\n' ' ')"
  fi
fi

verdict() { awk -v v="$1" -v t="$2" 'BEGIN { print (v < t) ? "met" : "MISSED" }'; }
printf '\nwardfs provisioned-sandbox benchmark (local provider), %s\n' "$(date -u +%Y-%m-%dT%H:%MZ)"
printf '%s cores; through the CLI (a process start in each figure)\n\n' "$(nproc)"
printf '| measure | wardfs | target | |\n|---|---|---|---|\n'
printf '| first create, building the default snapshot (minimal root; one-time) | %s ms | reported | |\n' "$snapshot_ms"
printf '| create from an existing snapshot to healthy (median of 5) | %s ms | < 1,000 ms | %s |\n' "$create_ms" "$(verdict "$create_ms" 1000)"
printf '| resume from paused to healthy (median of 5) | %s ms | < 1,000 ms | %s |\n' "$resume_ms" "$(verdict "$resume_ms" 1000)"
printf '| %s sandboxes created at once (%s active after) | %s ms | all up | %s |\n' "$n" "$active" "$all_ms" "$([ "$active" = "$n" ] && echo met || echo MISSED)"
printf '| daemon RSS with %s sandboxes up | %s KB | < 100,000 KB | %s |\n' "$n" "$rss_kb" "$(verdict "$rss_kb" 100000)"
printf '| CPU in 5 s of the %s processes of the paused sandboxes | %s ms | none | %s |\n' "$nagents" "$paused_cpu_ms" "$([ "$paused_cpu_ms" = 0 ] && echo met || echo MISSED)"
if [ -z "$npm_skip" ]; then
  printf '| first snapshot of a spec with npm dependencies (%s: %s packages installed; one-time) | %s ms | reported | |\n' "$npm_deps" "$npm_modules" "$npm_snapshot_ms"
  printf '| the same spec again (its snapshot reused) | %s ms | reported | |\n' "$npm_again_ms"
  printf '| create from that snapshot to healthy | %s ms | < 1,000 ms | %s |\n' "$npm_create_ms" "$(verdict "$npm_create_ms" 1000)"
else
  printf '| first snapshot of a spec with npm dependencies | not measured: %s | reported | |\n' "$npm_skip"
fi
