#!/usr/bin/env bash
# The cost of one FUSE request, by transport: bash benches/rtt.sh   (or: make bench-rtt)
#
# Four targets over the same backing directory, in the same run:
#   native          the backing directory itself
#   bindfs          Debian's bindfs (libfuse, requests through /dev/fuse)
#   wardfs device   `wardfs serve` with [fuse] transport = "device" (requests through /dev/fuse)
#   wardfs io_uring `wardfs serve` with [fuse] transport = "io_uring" (FUSE over io_uring)
# Two requests the kernel cannot answer from its caches, each timed by a Python client calling the
# system call in a loop (1 client, then 2 clients at once, each on its own files):
#   getxattr  getxattr(2) of a missing name: one GETXATTR each (µs per call)
#   lookup    stat(2) of each of WARDFS_RTT_FILES files after dropping the dentry cache: one LOOKUP
#             each (µs per file)
# Median of WARDFS_RTT_REPS runs; the targets take turns. Prints µs per request and the ratio to
# wardfs device; raw results go to bench-data/results/rtt.txt.
#
# Needs root (drop_caches; FUSE over io_uring needs /sys/module/fuse/parameters/enable_uring = Y,
# which this script turns on when the file exists), bindfs, python3, fusermount3.
#
# Environment:
#   WARDFS_RTT_REPS    runs per measurement (default 5; the median is reported)
#   WARDFS_RTT_CALLS   getxattr calls per client and run (default 50000)
#   WARDFS_RTT_FILES   files for the lookup measurement (default 20000)
#   WARDFS_BIN         use this wardfs binary instead of building target/release/wardfs
#   CARGO              cargo command (default cargo)
set -euo pipefail
shopt -s inherit_errexit

cd "$(dirname "$0")/.."
repo=$PWD
reps=${WARDFS_RTT_REPS:-5}
calls=${WARDFS_RTT_CALLS:-50000}
nfiles=${WARDFS_RTT_FILES:-20000}

me=rtt.sh
# shellcheck source=benches/lib.sh
. benches/lib.sh

need_root "drop_caches, FUSE over io_uring"
need_tools bindfs:bindfs python3:python3 fusermount3:fuse3 mountpoint:util-linux
[ -e /sys/module/fuse/parameters/enable_uring ] || die "FUSE over io_uring needs Linux 6.14+"
fuse_uring_on

CARGO=${CARGO:-cargo} wardfs_binary "$repo"

clear_stale_runs wardfs-rtt
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wardfs-rtt.XXXXXX")
echo $$ >"$tmp/owner"
mnt=$tmp/mnt
bmnt=$tmp/bindfs
daemon_pid=""
results=$repo/bench-data/results
mkdir -p "$results" "$mnt" "$bmnt" "$tmp/run"
: >"$results/rtt.txt"

cleanup() {
  wardfs_kill
  mountpoint -q "$bmnt" && fusermount3 -u "$bmnt" || true
  rm -rf "$tmp"
}
trap cleanup EXIT

root=$tmp/root
mkdir -p "$root/workspace/x" "$root/cache"
echo data >"$root/workspace/x/file"
log "creating $nfiles files"
python3 - "$root/workspace" "$nfiles" <<'EOF'
import os, sys
base, n = sys.argv[1], int(sys.argv[2])
for c in (0, 1):
    os.makedirs(f"{base}/lk{c}", exist_ok=True)
for i in range(n):
    with open(f"{base}/lk{i % 2}/f{i}", "w") as f:
        f.write("x")
EOF

cat >"$tmp/client.py" <<'EOF'
import os, sys, time
kind, base, n, client = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if kind == "getxattr":
    path = f"{base}/x/file"
    t = time.perf_counter()
    for _ in range(n):
        try:
            os.getxattr(path, "user.nope")
        except OSError:
            pass
else:
    names = [f"{base}/lk{client}/f{i}" for i in range(client, n, 2)]
    t = time.perf_counter()
    for p in names:
        os.stat(p)
    n = len(names)
print((time.perf_counter() - t) / n * 1e6)
EOF

# measure KIND DIR CLIENTS: µs per request (the mean of the clients' figures).
measure() {
  local kind=$1 dir=$2 clients=$3 c out=()
  [ "$kind" = lookup ] && { sync; echo 2 >/proc/sys/vm/drop_caches; }
  for ((c = 0; c < clients; c++)); do
    python3 "$tmp/client.py" "$kind" "$dir" "$([ "$kind" = lookup ] && echo "$nfiles" || echo "$calls")" "$c" >"$tmp/out.$c" &
  done
  wait
  for ((c = 0; c < clients; c++)); do out+=("$(cat "$tmp/out.$c")"); done
  python3 -c 'import sys; v=[float(x) for x in sys.argv[1:]]; print(f"{sum(v)/len(v):.2f}")' "${out[@]}"
}

# start TARGET: mounts what TARGET needs; sets `dir` to the directory to measure.
start() {
  case $1 in
  native) dir=$root/workspace ;;
  bindfs)
    bindfs --no-allow-other "$root/workspace" "$bmnt"
    dir=$bmnt
    ;;
  wardfs-*)
    cat >"$tmp/config.toml" <<EOT
state_dir = "$tmp/state"
socket = "$tmp/run/s.sock"
mount = "$mnt"
[fuse]
transport = "${1#wardfs-}"
[zones]
mode = "sandboxed"
root = "$root"
EOT
    wardfs_start
    dir=$mnt/workspace
    ;;
  esac
}
stop() {
  case $1 in
  bindfs) fusermount3 -u "$bmnt" ;;
  wardfs-*) wardfs_stop ;;
  esac
}

targets=(native bindfs wardfs-device wardfs-io_uring)
for kind in getxattr lookup; do
  for clients in 1 2; do
    for ((r = 0; r < reps; r++)); do
      # Rotate the order each run, so no target always runs first.
      for ((i = 0; i < ${#targets[@]}; i++)); do
        t=${targets[$(((i + r) % ${#targets[@]}))]}
        start "$t"
        v=$(measure "$kind" "$dir" "$clients")
        stop "$t"
        printf '%s\t%s\t%s\t%s\n' "$kind" "$clients" "$t" "$v" >>"$results/rtt.txt"
      done
    done
    log "$kind, $clients client(s): done"
  done
done

grep -q 'transport="io_uring"' "$tmp/daemon.log" ||
  die "the io_uring runs did not use io_uring: $(grep -m1 'io_uring\|transport' "$tmp/daemon.log")"

python3 - "$results/rtt.txt" <<'EOF'
import sys, statistics
rows = [l.split("\t") for l in open(sys.argv[1]) if l.strip()]
med = {}
for kind, clients, target, v in rows:
    med.setdefault((kind, clients, target), []).append(float(v))
med = {k: statistics.median(v) for k, v in med.items()}
names = ["native", "bindfs", "wardfs-device", "wardfs-io_uring"]
print("\n| request | clients | native | bindfs | wardfs device | wardfs io_uring | io_uring / device |")
print("|---|---|---|---|---|---|---|")
for kind, label in (("getxattr", "GETXATTR (missing name)"), ("lookup", "LOOKUP (stat after dropping dentries)")):
    for clients in ("1", "2"):
        v = [med[(kind, clients, n)] for n in names]
        print(f"| {label} | {clients} | " + " | ".join(f"{x:.1f} µs" for x in v) + f" | **{v[3] / v[2]:.2f}×** |")
EOF
