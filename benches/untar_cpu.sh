#!/usr/bin/env bash
# Where the daemon's CPU goes during untar + `rm -rf` (issues 14, 32): the same tarball unpacked and
# removed natively on a tmpfs and through a wardfs mount whose zones are on the same tmpfs (the
# disk out of the picture, so what is left is the FUSE round trips and the daemon's own work; or
# all on a fresh ext4 image, WARDFS_UNTAR_FS=ext4), and through the crates.io peer when it is
# installed, run after run, with the CPU each of the daemon's threads used per run (from
# /proc/PID/task/*/stat): the ring threads that serve requests, the watcher (`wardfs-watch`, and
# `wardfs-inotify`, which reads the kernel's events), the journal's flusher (`wardfs-journal`)
# and the rest.
#
#   make bench-untar-cpu        # = bash benches/untar_cpu.sh
#
# Needs root (mounts a tmpfs; FUSE) and tar. The tarball is benches/agent.sh's untar tarball
# (bench-data/agent/data/deps.tar, about 4,179 entries of the cargo registry's crates), made by
# `WARDFS_AGENT_ONLY=untar make bench-agent` once; or WARDFS_UNTAR_TARBALL=FILE.
#
# Environment:
#   WARDFS_UNTAR_RUNS     runs (default 5; the first is a warm-up and not counted)
#   WARDFS_UNTAR_TARBALL  the tarball (default bench-data/agent/data/deps.tar)
#   WARDFS_UNTAR_DIRS     directories already in the workspace, each watched by the daemon's
#                         watcher as a repository's would be (default 3000; the generated tree
#                         of bench-forks has 2,813)
#   WARDFS_UNTAR_XATTRS   [fuse] xattrs of the daemon: true or false (default: the daemon's)
#   WARDFS_UNTAR_CONFIG   TOML appended to the daemon's config (to compare settings, say
#                         $'[journal]\nwatch = false')
#   WARDFS_UNTAR_FS       what the zones and native's copy live on: tmpfs (default: the disk out
#                         of the picture) or ext4 (a fresh journaled ext4 image on the disk,
#                         loop-mounted, as `make bench-agent`'s write workloads use)
#   WARDFS_UNTAR_PEER     the crates.io peer's `sandfs` binary: adds its column, its copy and home
#                         on the same file system (default: target/bench-peer/bin/sandfs when
#                         there, as `make bench-agent` installs it; `none` leaves it out)
#   WARDFS_BIN            a wardfs binary to use instead of building the release one
#
# Prints one line per run and the medians: native and wardfs wall time, their ratio, and the
# daemon's CPU per thread group, counted until the daemon is idle again after the run (2 s with no
# CPU: what the run left it to do, its checkpoint included, is the run's).
set -euo pipefail

me=untar_cpu.sh
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
# shellcheck source=benches/lib.sh
. benches/lib.sh

need_root "FUSE and a tmpfs mount"
fuse_uring_on
need_tools tar:tar fusermount3:fuse3
runs=${WARDFS_UNTAR_RUNS:-5}
[[ $runs =~ ^[0-9]+$ ]] && ((runs >= 2)) || die "WARDFS_UNTAR_RUNS=$runs: must be a number, at least 2"
dirs=${WARDFS_UNTAR_DIRS:-3000}
xattrs=${WARDFS_UNTAR_XATTRS:-}
[[ $dirs =~ ^[0-9]+$ ]] || die "WARDFS_UNTAR_DIRS=$dirs: must be a number"
fs=${WARDFS_UNTAR_FS:-tmpfs}
[[ $fs == tmpfs || $fs == ext4 ]] || die "WARDFS_UNTAR_FS=$fs: must be tmpfs or ext4"
peer_bin=${WARDFS_UNTAR_PEER:-$repo/target/bench-peer/bin/sandfs}
if [ "$peer_bin" = none ] || { [ -z "${WARDFS_UNTAR_PEER:-}" ] && [ ! -x "$peer_bin" ]; }; then
  peer_bin=""
fi
[ -z "$peer_bin" ] || [ -x "$peer_bin" ] || die "WARDFS_UNTAR_PEER=$peer_bin: not an executable"
tarball=${WARDFS_UNTAR_TARBALL:-$repo/bench-data/agent/data/deps.tar}
[ -f "$tarball" ] ||
  die "no tarball at $tarball: run 'WARDFS_AGENT_ONLY=untar make bench-agent' once, or set WARDFS_UNTAR_TARBALL"
wardfs_binary "$repo"

clear_stale_runs wardfs-untar-cpu
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wardfs-untar-cpu.XXXXXX")
echo $$ >"$tmp/owner"
mnt=$tmp/mnt pmnt=$tmp/peer-mnt peer_pid="" daemon_pid="" wardfs_log=$tmp/daemon.log wardfs_rust_log=warn
mkdir -p "$mnt" "$pmnt" "$tmp/fast" "$tmp/run" "$tmp/state"
cleanup() {
  if [ -n "$peer_pid" ]; then
    fusermount3 -u "$pmnt" 2>/dev/null || true
    kill "$peer_pid" 2>/dev/null || true
    wait "$peer_pid" 2>/dev/null || true
  fi
  mountpoint -q "$pmnt" && fusermount3 -u -z "$pmnt"
  wardfs_kill
  mountpoint -q "$mnt" && fusermount3 -u -z "$mnt"
  mountpoint -q "$tmp/fast" && umount -l "$tmp/fast"
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "$fs" = tmpfs ]; then
  mount -t tmpfs -o size=4g tmpfs "$tmp/fast"
else
  need_tools mkfs.ext4:e2fsprogs
  truncate -s 4G "$tmp/fs.img"
  mkfs.ext4 -q -F -O has_journal "$tmp/fs.img"
  mount -o loop "$tmp/fs.img" "$tmp/fast"
fi
mkdir -p "$tmp/fast/zones/workspace/tree" "$tmp/fast/native"
# The workspace's own directories, 100 to a parent, as a repository's would be.
(cd "$tmp/fast/zones/workspace/tree" && seq "$dirs" | awk '{print "p" int($1 / 100) "/d" $1}' | xargs -r mkdir -p)
wardfs_config "$tmp/fast/zones"
case "$xattrs" in
  '') ;; # the daemon's default (and a config older builds read)
  true | false) printf '\n[fuse]\nxattrs = %s\n' "$xattrs" >>"$tmp/config.toml" ;;
  *) die "WARDFS_UNTAR_XATTRS=$xattrs: must be true or false" ;;
esac
[ -z "${WARDFS_UNTAR_CONFIG:-}" ] || printf '\n%s\n' "$WARDFS_UNTAR_CONFIG" >>"$tmp/config.toml"
wardfs_start
if [ -n "$peer_bin" ]; then
  mkdir -p "$tmp/fast/peer-src" "$tmp/fast/peer-home"
  SANDFS_HOME=$tmp/fast/peer-home "$peer_bin" mount -f --name bench "$tmp/fast/peer-src" "$pmnt" \
    >>"$tmp/peer.log" 2>&1 &
  peer_pid=$!
  for _ in $(seq 100); do
    mountpoint -q "$pmnt" && break
    kill -0 "$peer_pid" 2>/dev/null || { cat "$tmp/peer.log" >&2; die "the peer exited at start"; }
    sleep 0.1
  done
  mountpoint -q "$pmnt" || die "the peer did not mount $pmnt in 10 s"
fi
sleep 2

# The daemon's CPU by thread group, in ms: "name=ms ..." (cumulative since it started).
threads() {
  local t comm
  for t in /proc/"$daemon_pid"/task/*; do
    # A thread may end between the listing and the read (the API's idle blocking threads).
    comm=$(cat "$t/comm" 2>/dev/null) || continue
    case $comm in
      fuser-ring-*) comm=ring ;;
      fuser-*) comm=fuser-other ;;
      wardfs-inotify) comm=inotify ;;
      notify-rs*) comm=notify ;; # the notify crate's thread, in builds before dir_watch
    esac
    awk -v c="$comm" -v hz="$(getconf CLK_TCK)" '{print c, ($14 + $15) * 1000 / hz}' "$t/stat" \
      2>/dev/null || true
  done | awk '{a[$1] += $2} END {for (k in a) printf "%s=%d\n", k, a[k]}' | sort
}

native_dir=$tmp/fast/native/x
mount_dir=$mnt/workspace/x
echo "on $fs; workspace: $dirs directories watched besides what each run makes"
printf '%-4s %10s %10s %7s %10s %12s  %s\n' run native wardfs ratio peer "daemon CPU" "by thread (ms)"
: >"$tmp/runs.tsv"
for r in $(seq "$runs"); do
  rm -rf "$native_dir"
  mkdir "$native_dir"
  sync # each side starts with nothing left to write back
  s=$(date +%s%N)
  tar -xf "$tarball" -C "$native_dir"
  rm -rf "$native_dir"
  nat=$((($(date +%s%N) - s) / 1000000))

  peer=-
  if [ -n "$peer_pid" ]; then
    s=$(date +%s%N)
    mkdir "$pmnt/x"
    tar -xf "$tarball" -C "$pmnt/x"
    rm -rf "$pmnt/x"
    peer=$((($(date +%s%N) - s) / 1000000))
  fi
  sync

  before=$(threads)
  s=$(date +%s%N)
  mkdir "$mount_dir"
  tar -xf "$tarball" -C "$mount_dir"
  rm -rf "$mount_dir"
  sfs=$((($(date +%s%N) - s) / 1000000))
  # What the run left the daemon to do (its watcher and journal catching up, the automatic
  # checkpoint after 2 s of quiet) is the run's too: counted once the daemon is idle.
  bash benches/agent_idle.sh "$daemon_pid" 2 60 >/dev/null
  after=$(threads)
  per=$(join -t= -a2 -e0 -o 0,1.2,2.2 <(echo "$before") <(echo "$after") |
    awk -F= '{d = $3 - $2; if (d > 0) printf "%s=%d ", $1, d}')
  total=$(awk '{for (i = 1; i <= NF; i++) {split($i, kv, "="); t += kv[2]}} END {print t + 0}' <<<"$per")
  ratio=$(awk -v a="$sfs" -v b="$nat" 'BEGIN {printf "%.2f", a / b}')
  label=$r
  ((r == 1)) && label="$r*"
  printf '%-4s %8s ms %8s ms %6s× %7s ms %9s ms  %s\n' "$label" "$nat" "$sfs" "$ratio" "$peer" "$total" "$per"
  ((r == 1)) || printf '%s\t%s\t%s\t%s\n' "$nat" "$sfs" "$total" "$peer" >>"$tmp/runs.tsv"
done
echo "(* warm-up, not counted)"
awk -F'\t' '
  function median(a, n,   i, j, t) {
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  { n++; nat[n] = $1; sfs[n] = $2; cpu[n] = $3; peer[n] = $4 }
  END {
    mn = median(nat, n); ms = median(sfs, n); mc = median(cpu, n)
    printf "median of %d runs: native %d ms, wardfs %d ms (%.2f×), daemon CPU %d ms a run", n, mn, ms, ms / mn, mc
    if (peer[1] != "-") { mp = median(peer, n); printf "; peer %d ms (%.2f×), wardfs/peer %.2f×", mp, mp / mn, ms / mp }
    printf "\n"
  }' "$tmp/runs.tsv"
wardfs_stop
