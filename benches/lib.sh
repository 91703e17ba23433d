# shellcheck shell=bash disable=SC2154,SC2034 # variables of the sourcing script
# Helpers shared by the benchmarks (benches/fuse.sh, agent.sh, forks.sh, sandbox.sh, ...). Sourced,
# not run:
#
#   me=fuse.sh            # the script's name, for messages
#   . benches/lib.sh
#
# The daemon helpers use these variables of the sourcing script: `bin` (the wardfs binary), `tmp`
# (the run's temp dir: config.toml, daemon.log, daemon.pid, the socket under run/), `mnt` (the mount
# point) and `daemon_pid` (empty while the daemon is down). Optional: `wardfs_log` (the daemon's log
# file, default $tmp/daemon.log) and `wardfs_rust_log` (its RUST_LOG, default $RUST_LOG or info).

log() { printf '\n== %s\n' "$*" >&2; }
die() {
  printf '%s: %s\n' "${me:-bench}" "$*" >&2
  exit 1
}

# need_root WHY: root and /dev/fuse, or a clear message.
need_root() {
  [ "$(id -u)" = 0 ] || die "must run as root ($1)"
  [ -e /dev/fuse ] || die "/dev/fuse is missing (modprobe fuse)"
}

# fuse_uring_on: turns on FUSE over io_uring (the fuse module's enable_uring, off after a boot
# unless something turned it on), so a mount measured gets the daemon's default transport rather
# than falling back to /dev/fuse; says so when the kernel has no such switch (before Linux 6.14).
fuse_uring_on() {
  local uring=/sys/module/fuse/parameters/enable_uring
  if [ ! -e "$uring" ]; then
    log "no $uring: mounts use /dev/fuse (FUSE over io_uring needs Linux 6.14+)"
  elif [ "$(cat "$uring")" != Y ]; then
    log "turning on FUSE over io_uring ($uring = Y)"
    echo Y >"$uring"
  fi
}

# need_tools TOOL:DEBIAN_PACKAGE...: names the packages of the missing tools; installs nothing.
need_tools() {
  local missing=() dep
  for dep in "$@"; do
    command -v "${dep%%:*}" >/dev/null 2>&1 || missing+=("${dep##*:}")
  done
  if ((${#missing[@]})); then
    die "missing tools; install them with: apt-get install ${missing[*]}"
  fi
}

# wardfs_binary REPO: sets `bin` to $WARDFS_BIN, or builds the release binary with ${CARGO:-cargo}
# and sets `bin` to it (under $CARGO_TARGET_DIR when set).
wardfs_binary() {
  local repo=$1 cargo=${CARGO:-cargo}
  if [ -n "${WARDFS_BIN:-}" ]; then
    bin=$WARDFS_BIN
    [ -x "$bin" ] || die "WARDFS_BIN=$bin is not executable"
    log "using $bin (WARDFS_BIN; not building)"
  else
    command -v "$cargo" >/dev/null 2>&1 || die "cargo is not installed (https://rustup.rs)"
    log "building (release)"
    "$cargo" build --release --bin wardfs
    bin=${CARGO_TARGET_DIR:-$repo/target}/release/wardfs
  fi
}

# clear_stale_runs PREFIX: a run killed with SIGKILL leaves its temp dir $TMPDIR/PREFIX.* behind,
# with mounts and processes. Clears those whose owner (the pid in their `owner` file) is gone: kills
# the pids in their *.pid files, unmounts the mounts directly under them (FUSE with fusermount3,
# others with umount), removes them.
clear_stale_runs() {
  local prefix=$1 old owner pidf m
  for old in "${TMPDIR:-/tmp}/$prefix".*; do
    [ -d "$old" ] || continue
    owner=$(cat "$old/owner" 2>/dev/null || echo)
    if [ -n "$owner" ] && kill -0 "$owner" 2>/dev/null; then
      continue # another run in progress
    fi
    log "clearing what an interrupted run left in $old"
    for pidf in "$old"/*.pid; do
      [ -f "$pidf" ] && kill "$(cat "$pidf")" 2>/dev/null || true
    done
    for m in "$old"/*/; do
      m=${m%/}
      mountpoint -q "$m" 2>/dev/null || continue
      # A FUSE mount whose daemon is gone fails stat -f ("not connected"): unmount it as FUSE.
      if [ "$(stat -f -c %T "$m" 2>/dev/null)" = tmpfs ]; then
        umount -l "$m" || true
      else
        fusermount3 -u -z "$m" || true
      fi
    done
    rm -rf "$old" 2>/dev/null || true
  done
}

# wardfs_config ZONES_ROOT: writes $tmp/config.toml for wardfs_start: state and socket under $tmp,
# mounted on $mnt, sandboxed zones under ZONES_ROOT. Callers append further sections.
wardfs_config() {
  cat >"$tmp/config.toml" <<EOF
state_dir = '$tmp/state'
socket = '$tmp/run/s.sock'
mount = '$mnt'

[zones]
mode = "sandboxed"
root = '$1'
EOF
}

# wardfs_start: starts `wardfs serve --config $tmp/config.toml` mounted on $mnt, and returns once
# it is mounted and serves its socket.
wardfs_start() {
  [ -z "$daemon_pid" ] || return 0
  local logf=${wardfs_log:-$tmp/daemon.log}
  RUST_LOG=${wardfs_rust_log:-${RUST_LOG:-info}} XDG_RUNTIME_DIR=$tmp/run XDG_STATE_HOME=$tmp/state \
    "$bin" serve --config "$tmp/config.toml" >/dev/null 2>>"$logf" &
  daemon_pid=$!
  echo "$daemon_pid" >"$tmp/daemon.pid"
  for _ in $(seq 200); do
    # Ready when mounted and serving the socket (its SIGTERM handler is installed by then).
    mountpoint -q "$mnt" && stat -f "$mnt/workspace" >/dev/null 2>&1 && [ -S "$tmp/run/s.sock" ] &&
      return 0
    kill -0 "$daemon_pid" 2>/dev/null || { tail -50 "$logf" >&2; die "the daemon exited at start"; }
    sleep 0.1
  done
  tail -50 "$logf" >&2
  die "wardfs did not mount $mnt in 20 s"
}

# wardfs_stop: SIGTERM (the daemon unmounts and exits); fails when it takes more than 15 s or
# leaves the mount behind.
wardfs_stop() {
  [ -n "$daemon_pid" ] || return 0
  kill "$daemon_pid" 2>/dev/null || true
  for _ in $(seq 150); do
    kill -0 "$daemon_pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$daemon_pid" 2>/dev/null; then
    kill -9 "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
    daemon_pid=""
    die "wardfs did not exit within 15 s of SIGTERM"
  fi
  wait "$daemon_pid" 2>/dev/null || true
  daemon_pid=""
  rm -f "$tmp/daemon.pid"
  ! mountpoint -q "$mnt" || die "wardfs left $mnt mounted after SIGTERM"
}

# wardfs_kill: for cleanup traps: SIGTERM, SIGKILL after 10 s; never fails.
wardfs_kill() {
  if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
    kill "$daemon_pid"
    for _ in $(seq 100); do
      kill -0 "$daemon_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$daemon_pid" 2>/dev/null
    wait "$daemon_pid" 2>/dev/null
  fi
  daemon_pid=""
  return 0
}

drop_caches() {
  sync
  echo 3 >/proc/sys/vm/drop_caches
}

# foreign_sampler_start ROOT_PID OUT: load conditions: CPU time used by processes that are not
# ROOT_PID's (another build, say), sampled every second from /proc and written to OUT
# (foreign_cpu_s, foreign_wall_s, foreign_top). Sets `sampler_pid`; stop it with kill (SIGTERM
# writes the report once more).
foreign_sampler_start() {
  python3 - "$1" "$2" <<'PY' &
import os, sys, time, signal
root, out = int(sys.argv[1]), sys.argv[2]
hz = os.sysconf("SC_CLK_TCK")
def snapshot():
    procs = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            raw = open(f"/proc/{p}/stat").read()
        except OSError:
            continue
        comm = raw[raw.index("(") + 1:raw.rindex(")")]
        f = raw[raw.rindex(")") + 2:].split()
        procs[int(p)] = (int(f[1]), comm, int(f[11]) + int(f[12]))
    return procs
def ours(procs):
    mine, changed = {root, os.getpid()}, True
    while changed:
        changed = False
        for pid, (ppid, _, _) in procs.items():
            if ppid in mine and pid not in mine:
                mine.add(pid)
                changed = True
    return mine
start, prev, by_comm = time.time(), snapshot(), {}
def report():
    total = sum(by_comm.values()) / hz
    top = sorted(by_comm.items(), key=lambda kv: -kv[1])[:4]
    with open(out, "w") as f:
        f.write(f"foreign_cpu_s={total:.1f}\nforeign_wall_s={time.time() - start:.0f}\n")
        f.write("foreign_top=" + ", ".join(f"{c} {t / hz:.1f} s" for c, t in top if t) + "\n")
signal.signal(signal.SIGTERM, lambda *_: (report(), sys.exit(0)))
while os.path.exists(f"/proc/{root}"):
    time.sleep(1)
    cur = snapshot()
    mine = ours(cur)
    for pid, (ppid, comm, t) in cur.items():
        if pid in mine or comm.startswith("kworker"):
            continue
        before = prev.get(pid)
        d = t - before[2] if before and before[1] == comm else t if pid not in prev else 0
        if d > 0:
            by_comm[comm] = by_comm.get(comm, 0) + d
    prev = cur
    report()
PY
  sampler_pid=$!
}

# --- the real sandbox-agent, for the sandbox benchmarks (benches/sandbox.sh, sandbox_run.sh) ----

# sandbox_agent_bin: the installed sandbox-agent's path; dies when there is none.
sandbox_agent_bin() {
  local a
  for a in /usr/local/bin/sandbox-agent "$HOME/.local/bin/sandbox-agent"; do
    [ -x "$a" ] && { echo "$a"; return 0; }
  done
  die "sandbox-agent is missing: run .ci/install-deps test"
}

# need_loopback_netns: dies unless the script runs in a network namespace with loopback only
# (.ci/netns), where sandbox-agent may be started.
need_loopback_netns() {
  [ "$(tr -d ' ' </proc/self/net/dev | tail -n +3 | cut -d: -f1 | tr '\n' ' ')" = "lo " ] ||
    die "not in a loopback-only network namespace"
}

# sandbox_agent_start DIR: starts sandbox-agent as the project's safety rules want it: bound to
# 127.0.0.1 on a free port, with a fresh token, no telemetry, HOME=DIR/home (made, with the
# `remote` directory the benchmarks mirror into) and a cleared environment, its log in
# DIR/agent.log; returns once it answers /v1/health. Sets agent_pid, token, url and home; the
# caller kills agent_pid at its end. Only in a loopback-only namespace (need_loopback_netns).
sandbox_agent_start() {
  local dir=$1 agent port
  need_loopback_netns
  agent=$(sandbox_agent_bin)
  token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  home=$dir/home
  mkdir -p "$home/remote"
  env -i HOME="$home" PATH=/usr/bin:/bin "$agent" server --token "$token" --no-telemetry \
    --host 127.0.0.1 --port "$port" >"$dir/agent.log" 2>&1 &
  agent_pid=$!
  url=http://127.0.0.1:$port
  for _ in $(seq 100); do
    curl -sf -H "Authorization: Bearer $token" "$url/v1/health" >/dev/null 2>&1 && return 0
    kill -0 "$agent_pid" 2>/dev/null || {
      cat "$dir/agent.log" >&2
      die "sandbox-agent exited"
    }
    sleep 0.1
  done
  die "sandbox-agent did not answer /v1/health in 10 s"
}
