#!/usr/bin/env bash
# Daemon peak memory under large and hostile inputs (issue 11): bash benches/memory.sh
# (or: make bench-memory; root, for the loopback-only namespace and the mount).
#
# Each case starts a fresh release daemon (`wardfs serve`), does one thing, and prints the daemon's
# peak resident memory (VmHWM from /proc/<pid>/status) against the target (below 100 MB):
#   grep         `wardfs grep a` over one 1 GiB file of "a\n" lines, through the API;
#   mirror push  `wardfs mirror push` of a 2 GiB zone (16 large random files and 200 small ones)
#                into the real sandbox-agent;
#   mirror pull  `wardfs mirror pull` of that 2 GiB into an empty zone (a second, fresh daemon);
#   remote read  `cat` of a 1 GiB file through the mount, from a zone served from the sandbox;
#   endless stat `wardfs stat` on a zone served from a sandbox (a small python3 HTTP server) that
#                answers /v1/fs/* with a body that never ends.
# The sandbox-agent runs as in benches/sandbox.sh: inside a loopback-only network namespace (the
# script re-runs itself under .ci/netns), with --token, --no-telemetry, 127.0.0.1, a temp HOME and
# a cleared environment. Everything started is stopped by PID, the mount is unmounted and the work
# dir removed at exit (also on failure), so runs are independent of each other.
#
# A watchdog samples the daemon every 50 ms and kills it (by PID) once its resident memory passes
# MEM_BENCH_ABORT_MB: the case is then FAIL with the figure reached, and the machine is spared (an
# endless body once took the daemon to 24 GB). A case whose operation fails still prints its
# figure, marked with the error, so the script works on any version of the daemon.
#
# Environment:
#   MEM_BENCH_GIB       size unit in GiB (default 1: the grep file and the remote file are 1 unit,
#                       the mirrored zone 2 units); e.g. MEM_BENCH_GIB=0.1 for a quick trial
#   MEM_BENCH_LIMIT_MB  the target, in MB (default 100)
#   MEM_BENCH_ABORT_MB  the watchdog's limit, in MB (default 2000)
#   MEM_BENCH_CASES     the cases to run (default "grep push pull remote endless")
#   MEM_BENCH_WARDFS    a wardfs binary to use instead of building the release one
#   CARGO, CARGO_TARGET_DIR as for cargo.
# Prints a summary table and keeps it in bench-data/results/memory-summary.txt.
set -euo pipefail

cd "$(dirname "$0")/.."
repo_root=$PWD
gib=${MEM_BENCH_GIB:-1}
limit_mb=${MEM_BENCH_LIMIT_MB:-100}
abort_mb=${MEM_BENCH_ABORT_MB:-2000}
cases=${MEM_BENCH_CASES:-grep push pull remote endless}
cargo=${CARGO:-cargo}

me=memory.sh
# shellcheck source=benches/lib.sh
. benches/lib.sh

if [ -z "${MEM_BENCH_IN_NETNS:-}" ]; then
  for t in curl python3 unshare ip fusermount3 cmp; do
    command -v "$t" >/dev/null 2>&1 || die "$t is missing: run .ci/install-deps test"
  done
  sandbox_agent_bin >/dev/null
  if [ -z "${MEM_BENCH_WARDFS:-}" ]; then
    log "building (release)"
    "$cargo" build --release --bin wardfs
    target_dir=${CARGO_TARGET_DIR:-target}
    case $target_dir in /*) ;; *) target_dir=$repo_root/$target_dir ;; esac
    export MEM_BENCH_WARDFS=$target_dir/release/wardfs
  fi
  export MEM_BENCH_IN_NETNS=1
  exec .ci/netns bash "$0" "$@"
fi

# --- inside the namespace from here on
need_loopback_netns
wardfs=$MEM_BENCH_WARDFS
[ -x "$wardfs" ] || die "no wardfs binary at $wardfs"
unit=$(python3 -c 'import sys; print(int(float(sys.argv[1]) * 2**30))' "$gib")
[ "$unit" -gt 0 ] || die "MEM_BENCH_GIB must be a positive number, not $gib"

data=$repo_root/bench-data/memory
results=$repo_root/bench-data/results
mkdir -p "$data" "$results"
work=$(mktemp -d "$data/run.XXXXXX")
agent_pid="" daemon_pid="" watch_pid="" endless_pid=""
stop_pid() { # pid: SIGTERM, wait, then SIGKILL if it lingers
  local pid=$1
  [ -n "$pid" ] || return 0
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
unmount() {
  if grep -q " $work/mnt " /proc/self/mountinfo 2>/dev/null; then
    fusermount3 -u -z "$work/mnt" 2>/dev/null || umount -l "$work/mnt" 2>/dev/null || true
  fi
}
cleanup() {
  stop_pid "$watch_pid"
  stop_pid "$daemon_pid"
  unmount
  stop_pid "$endless_pid"
  stop_pid "$agent_pid"
  rm -rf "$work"
}
trap cleanup EXIT

# --- the real sandbox-agent
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
sandbox_agent_start "$work"

# --- the hostile sandbox: /v1/health answers, every other route streams a body that never ends
cat >"$work/endless.py" <<'EOF'
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CHUNK = b"a" * 65536

class Endless(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # no length: the body ends only when the connection closes

    def answer(self):
        if self.path.startswith("/v1/health"):
            body = b'{"status":"ok"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        try:
            self.wfile.write(b'{"name":"')
            while True:
                self.wfile.write(CHUNK)
        except (BrokenPipeError, ConnectionResetError):
            pass

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = answer

    def log_message(self, *args):
        pass

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Endless).serve_forever()
EOF
endless_port=$(free_port)
python3 "$work/endless.py" "$endless_port" >"$work/endless.log" 2>&1 &
endless_pid=$!

# --- helpers
# A config for one case: $1 name, $2 the [zones.workspace] lines; prints its path.
config() {
  local name=$1 zone=$2 c=$work/$1.toml
  mkdir -p "$work/$name/zones" "$work/run"
  cat >"$c" <<EOF
state_dir = "$work/$name/state"
socket = "$work/run/$name.sock"
mount = "$work/mnt"
[zones]
root = "$work/$name/zones"
[zones.workspace]
$zone
[sandboxes.dev]
provider = "sandbox-agent"
url = "$url"
token_env = "MEM_BENCH_TOKEN"
root = "$home/remote/zone"
[sandboxes.evil]
provider = "sandbox-agent"
url = "http://127.0.0.1:$endless_port"
request_timeout_secs = 5
retries = 0
EOF
  echo "$c"
}

# Samples the daemon $1 every 50 ms: its peak (VmHWM, kB) into $2, killed past abort_mb.
watch_rss() {
  local pid=$1 out=$2 hwm rss
  while kill -0 "$pid" 2>/dev/null; do
    read -r hwm rss < <(awk '/^VmHWM/ {h = $2} /^VmRSS/ {r = $2} END {print h + 0, r + 0}' \
      "/proc/$pid/status" 2>/dev/null || echo "0 0") || true
    [ "${hwm:-0}" -gt 0 ] && echo "$hwm" >"$out"
    if [ "${rss:-0}" -gt $((abort_mb * 1000000 / 1024)) ]; then
      echo "killed by the watchdog past $abort_mb MB" >"$out.aborted"
      kill -9 "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.05
  done
}

# Starts a fresh daemon on config $1 (more arguments go to `serve`) and its watchdog.
start_daemon() {
  local c=$1 name
  shift
  name=$(basename "$c" .toml)
  rm -f "$work/$name.hwm" "$work/$name.hwm.aborted"
  MEM_BENCH_TOKEN=$token RUST_LOG=warn "$wardfs" serve --config "$c" "$@" >>"$work/daemon-$name.log" 2>&1 &
  daemon_pid=$!
  watch_rss "$daemon_pid" "$work/$name.hwm" &
  watch_pid=$!
  for _ in $(seq 200); do
    python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' \
      "$work/run/$name.sock" 2>/dev/null && return 0
    kill -0 "$daemon_pid" 2>/dev/null || { cat "$work/daemon-$name.log" >&2; die "wardfs serve exited ($name)"; }
    sleep 0.1
  done
  die "the daemon did not answer on its socket within 20 s ($name)"
}

summary=$work/summary.txt
: >"$summary"
# Reads the daemon's peak, stops it, and adds a line: $1 case, $2 what was done, $3 note (or "").
finish_case() {
  local name=$1 what=$2 note=$3 kb=0 mb verdict
  if [ -r "/proc/$daemon_pid/status" ]; then
    kb=$(awk '/^VmHWM/ {print $2}' "/proc/$daemon_pid/status" 2>/dev/null || echo 0)
  fi
  [ "${kb:-0}" -gt 0 ] || kb=$(cat "$work/$name.hwm" 2>/dev/null || echo 0)
  [ -e "$work/$name.hwm.aborted" ] && note="${note:+$note; }$(cat "$work/$name.hwm.aborted")"
  stop_pid "$daemon_pid"
  daemon_pid=""
  stop_pid "$watch_pid"
  watch_pid=""
  unmount
  [ "$what" != - ] || return 0 # a daemon that only prepared the next case
  mb=$(python3 -c 'import sys; print(f"{int(sys.argv[1]) * 1024 / 1e6:.1f}")' "$kb")
  if python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)' "$mb" "$limit_mb" &&
    [ ! -e "$work/$name.hwm.aborted" ]; then
    verdict=PASS
  else
    verdict=FAIL
  fi
  printf '| %s | %s | %s MB | %s%s |\n' "$name" "$what" "$mb" "$verdict" "${note:+ ($note)}" | tee -a "$summary" >&2
}

human() { python3 -c 'import sys; n = int(sys.argv[1]); print(f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB")' "$1"; }
# Runs a command, its output discarded; prints "" on success, else the exit status and the
# last line of its stderr.
run_op() {
  local err=$work/op.err rc=0
  "$@" >/dev/null 2>"$err" || rc=$?
  [ "$rc" = 0 ] || echo "exit $rc: $(tail -n 1 "$err" | cut -c1-160)"
}
want() { case " $cases " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

log "peak daemon memory, unit $gib GiB ($(human "$unit")), target < $limit_mb MB"

if want grep; then
  log "grep: one $(human "$unit") file of \"a\\n\" lines through the API"
  c=$(config grep "")
  mkdir -p "$work/grep/zones/workspace"
  yes a | head -c "$unit" >"$work/grep/zones/workspace/a.txt" || true
  start_daemon "$c" --no-mount
  note=$(run_op "$wardfs" --config "$c" grep a /workspace)
  rm -f "$work/grep/zones/workspace/a.txt"
  finish_case grep "grep a, one $(human "$unit") file" "$note"
fi

if want push || want pull; then
  log "generating a $(human $((2 * unit))) zone"
  zone=$work/push/zones/workspace
  mkdir -p "$zone/small"
  for i in $(seq -w 1 16); do head -c $((2 * unit / 16)) /dev/urandom >"$zone/big-$i.bin"; done
  python3 - "$zone/small" <<'EOF'
import os, sys
for i in range(200):
    with open(os.path.join(sys.argv[1], f"f{i:03}.txt"), "w") as f:
        f.write(f"small file {i}\n" * 50)
EOF
  zone_bytes=$(du -sb --apparent-size "$zone" | cut -f1)
  c=$(config push "")
  start_daemon "$c" --no-mount
  note=$(run_op "$wardfs" --config "$c" mirror push dev)
  sent=$(du -sb --apparent-size "$home/remote/zone" 2>/dev/null | cut -f1 || echo 0)
  [ "${sent:-0}" = "$zone_bytes" ] || note="${note:+$note; }the sandbox holds ${sent:-0} of $zone_bytes bytes"
  if want push; then
    finish_case push "mirror push, $(human "$zone_bytes")" "$note"
  else
    finish_case push - ""
  fi
  rm -rf "$zone"
fi

if want pull; then
  log "mirror pull of the $(human "$zone_bytes") zone into an empty zone"
  c=$(config pull "")
  start_daemon "$c" --no-mount
  note=$(run_op "$wardfs" --config "$c" mirror pull dev)
  got=$(du -sb --apparent-size "$work/pull/zones/workspace" 2>/dev/null | cut -f1 || echo 0)
  [ "${got:-0}" -ge "$zone_bytes" ] || note="${note:+$note; }pulled ${got:-0} of $zone_bytes bytes"
  finish_case pull "mirror pull, $(human "$zone_bytes")" "$note"
  rm -rf "$work/pull/zones/workspace"
fi
rm -rf "$home/remote/zone"

if want remote; then
  log "remote read: one $(human "$unit") file through the mount, from a zone served from the sandbox"
  mkdir -p "$home/remote/files" "$work/mnt"
  head -c "$unit" /dev/urandom >"$home/remote/files/big.bin"
  c=$(config remote "sandbox = \"dev\"
path = \"$home/remote/files\"")
  start_daemon "$c"
  for _ in $(seq 100); do [ -e "$work/mnt/workspace/big.bin" ] && break; sleep 0.1; done
  note=$(run_op cmp "$work/mnt/workspace/big.bin" "$home/remote/files/big.bin")
  finish_case remote "read through the mount (cmp), one $(human "$unit") remote file" "$note"
  rm -rf "$home/remote/files"
fi

if want endless; then
  log "endless stat: a sandbox whose /v1/fs/* answers never end"
  c=$(config endless "sandbox = \"evil\"
path = \"/srv\"")
  start_daemon "$c" --no-mount
  note=$(run_op timeout 120 "$wardfs" --config "$c" stat /workspace/x.txt)
  # A refusal is the right answer here: only a hang or a crash is worth noting.
  case $note in "exit 124"*) note="no answer within 120 s" ;; "") ;; *) note="" ;; esac
  kill -0 "$daemon_pid" 2>/dev/null || [ -e "$work/endless.hwm.aborted" ] || note="${note:+$note; }the daemon died"
  finish_case endless "stat answered by an endless body" "$note"
fi

{
  echo "wardfs daemon peak memory (VmHWM), $(date -u +%Y-%m-%dT%H:%MZ), unit $gib GiB; target < $limit_mb MB"
  echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg); binary: $wardfs"
  echo
  echo "| case | what | peak RSS | verdict |"
  echo "|---|---|---|---|"
  cat "$summary"
} | tee "$results/memory-summary.txt"
