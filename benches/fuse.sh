#!/usr/bin/env bash
# wardfs FUSE benchmark suite: bash benches/fuse.sh   (or: make bench-fuse; `make bench` runs it too)
#
# Three targets, measured in the same run, over the same backing directory:
#   native  the backing directory itself (bench-data/fuse/backing, and a tmpfs for metadata)
#   bindfs  Debian's bindfs (C, libfuse) mounted over it
#   wardfs  `wardfs serve` with that directory as its workspace zone and the tmpfs as its cache zone
#           ([zones] mode = "direct"), in the I/O mode of WARDFS_FUSE_IO (cached unless set;
#           passthrough: kernel FUSE passthrough when the kernel allows it)
# Workloads:
#   1. fio (benches/fio/*.fio), 1 GiB file, bs=1M: sequential write (fsync at the end), sequential
#      read cold (caches dropped before each run) and warm (invalidate=0), random 4 KiB read warm.
#   2. benches/meta.py: 10,000 files of 4 KiB in 100 directories, create / stat / read / delete,
#      files per second, on the ext4 backing dir and on a tmpfs backing dir.
#   3. rg through each target over the generated ~136 MB source tree (benches/gen_tree.py, copied into
#      the backing dir), hyperfine --warmup 2 --output=pipe; the matches are checked to be identical.
# Each fio and metadata measurement is the median of WARDFS_FUSE_REPS runs (WARDFS_FUSE_NOISY_REPS
# for the write and the cold read), the targets taking turns in a balanced order. wardfs is mounted
# only while it is measured. Prints a table of absolute figures and ratios to native with the
# targets' pass/fail; raw results go to bench-data/results/fuse-*.
#
# Needs root (drop_caches, a tmpfs mount, kernel passthrough) and: fio, bindfs, hyperfine, rg,
# fusermount3, python3. Installs nothing; names the Debian package of what is missing.
#
# Environment:
#   WARDFS_FUSE_REPS     repetitions per measurement (default 3; the median is reported)
#   WARDFS_FUSE_NOISY_REPS  repetitions of the sequential write and the cold read, which depend on
#                        the VM host's cache (default 5)
#   WARDFS_FUSE_SIZE     fio file size (default 1g)
#   WARDFS_FUSE_RUNTIME  seconds per random-read run (default 4)
#   WARDFS_FUSE_FILES    files in the metadata tree (default 10000)
#   WARDFS_FUSE_ONLY     comma-separated subset of: io,meta,rg (default: all)
#   WARDFS_FUSE_IO       zones.<zone>.io of the mount: cached (the daemon's default) or passthrough
#   WARDFS_FUSE_TRANSPORT  [fuse] transport: io_uring or device (default: the daemon's, io_uring)
#   WARDFS_BENCH_STRICT  1: exit 1 when a target is missed (default: only a wrong result fails)
#   WARDFS_BIN           use this wardfs binary instead of building target/release/wardfs
#   WARDFS_FUSE_AUTO_CHECKPOINT_MS  [checkpoints] auto_quiet_ms for the daemon (0: automatic
#                        checkpoints off; default: the daemon's default), to measure what they cost
#   CARGO                cargo command (default cargo)
set -euo pipefail
shopt -s inherit_errexit

cd "$(dirname "$0")/.."
repo=$PWD
reps=${WARDFS_FUSE_REPS:-3}
noisy_reps=${WARDFS_FUSE_NOISY_REPS:-5}
size=${WARDFS_FUSE_SIZE:-1g}
runtime=${WARDFS_FUSE_RUNTIME:-4}
nfiles=${WARDFS_FUSE_FILES:-10000}
only=${WARDFS_FUSE_ONLY:-io,meta,rg}
io=${WARDFS_FUSE_IO:-cached}
transport=${WARDFS_FUSE_TRANSPORT:-}
strict=${WARDFS_BENCH_STRICT:-0}
cargo=${CARGO:-cargo}
literal='unsafe impl'
regex='impl<[^>]*> (Drop|Clone|Default) for'

me=fuse.sh
# shellcheck source=benches/lib.sh
. benches/lib.sh
[[ $io == passthrough || $io == cached ]] || die "WARDFS_FUSE_IO=$io: must be passthrough or cached"
[[ -z $transport || $transport == io_uring || $transport == device ]] ||
  die "WARDFS_FUSE_TRANSPORT=$transport: must be io_uring or device"
want() { [[ ",$only," == *",$1,"* ]]; }

# --- tools ---------------------------------------------------------------------------------------
need_root "drop_caches, the tmpfs mount, kernel FUSE passthrough"
fuse_uring_on
need_tools fio:fio bindfs:bindfs hyperfine:hyperfine rg:ripgrep fusermount3:fuse3 python3:python3 \
  mountpoint:util-linux

# --- build ---------------------------------------------------------------------------------------
CARGO=$cargo wardfs_binary "$repo"

# --- directories ---------------------------------------------------------------------------------
data=$repo/bench-data
work=$data/fuse
backing=$work/backing # ext4 (or whatever /work is): the workspace zone and the native target
results=$data/results
mkdir -p "$backing/io" "$backing/meta" "$results"
rm -f "$results"/fuse-*

# Mount points and the tmpfs live in a temp dir that records its owner: a run killed with SIGKILL
# leaves mounts behind, which the next run clears (only when their owner is gone).
tmpbase=${TMPDIR:-/tmp}
clear_stale_runs wardfs-fuse-bench
tmp=$(mktemp -d "$tmpbase/wardfs-fuse-bench.XXXXXX")
echo $$ >"$tmp/owner"
mnt=$tmp/mnt
bind=$tmp/bind
tmpfs=$tmp/tmpfs
bind_tmpfs=$tmp/bind-tmpfs
mkdir -p "$mnt" "$bind" "$tmpfs" "$bind_tmpfs" "$tmp/state" "$tmp/run"

daemon_pid=""
bindfs_pids=()
sampler_pid=""
cleanup() {
  local rc=$?
  set +e
  cp "$tmp/daemon.log" "$results/fuse-daemon.log" 2>/dev/null
  [ -z "$sampler_pid" ] || kill "$sampler_pid" 2>/dev/null
  # bindfs first (it serves the backing dir only), then the daemon (SIGTERM: it unmounts itself).
  for m in "$bind" "$bind_tmpfs"; do
    mountpoint -q "$m" && fusermount3 -u "$m"
  done
  for p in "${bindfs_pids[@]}"; do
    kill "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  wardfs_kill
  mountpoint -q "$mnt" && fusermount3 -u -z "$mnt"
  for m in "$bind" "$bind_tmpfs"; do
    mountpoint -q "$m" && fusermount3 -u -z "$m"
  done
  mountpoint -q "$tmpfs" && umount "$tmpfs"
  rm -f "$backing/io/w.dat"
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The metadata tree on ext4: make its parent an Orlov "top directory" (chattr +T), so that each run's
# directory lands in a block group of its own. Without it, ext4 (here without a journal) scans the
# inodes the previous run just deleted on every create, and whichever target runs second is slowed
# down by the first (the "erratic creation" of BASELINES.md).
chattr +T "$backing/meta" 2>/dev/null || true
mount -t tmpfs -o size=1g,mode=0755 wardfs-bench "$tmpfs"
mkdir -p "$tmpfs/meta"

# --- the source tree for rg ----------------------------------------------------------------------
if want rg; then
  tree_src=$data/tree
  stamp=$data/tree.stamp
  want_stamp=$(sha256sum benches/gen_tree.py | cut -d' ' -f1)
  if [ -d "$tree_src" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want_stamp" ]; then
    :
  else
    log "generating $tree_src (once; shared with benches/run.sh)"
    rm -rf "$tree_src" "$stamp"
    python3 benches/gen_tree.py "$tree_src"
    echo "$want_stamp" >"$stamp"
  fi
  if [ ! -d "$backing/tree" ] || [ "$(cat "$backing/tree.stamp" 2>/dev/null)" != "$want_stamp" ]; then
    log "copying the tree into the backing dir"
    rm -rf "$backing/tree" "$backing/tree.stamp"
    cp -a "$tree_src" "$backing/tree"
    echo "$want_stamp" >"$backing/tree.stamp"
  fi
fi

# --- the read file -------------------------------------------------------------------------------
if want io; then
  bytes=$(numfmt --from=iec "${size^^}")
  rfile=$backing/io/r.dat
  if [ "$(stat -c %s "$rfile" 2>/dev/null || echo 0)" != "$bytes" ]; then
    log "writing the $size read file"
    rm -f "$rfile"
    fio --name=prep --filename="$rfile" --rw=write --bs=1M --size="$size" --end_fsync=1 \
      --output=/dev/null
  fi
fi
rm -f "$backing/io/w.dat"

# --- mounts --------------------------------------------------------------------------------------
log "mounting bindfs over $backing and the tmpfs; checking that wardfs mounts"
bindfs -f "$backing" "$bind" 2>"$tmp/bindfs.log" &
bindfs_pids+=($!)
echo "$!" >"$tmp/bindfs.pid"
bindfs -f "$tmpfs" "$bind_tmpfs" 2>"$tmp/bindfs-tmpfs.log" &
bindfs_pids+=($!)
echo "$!" >"$tmp/bindfs-tmpfs.pid"

cat >"$tmp/config.toml" <<EOF
state_dir = '$tmp/state'
socket = '$tmp/run/s.sock'
mount = '$mnt'

[zones]
mode = "direct"

[zones.workspace]
dir = '$backing'
io = "$io"

[zones.cache]
dir = '$tmpfs'
io = "$io"
EOF
if [ -n "$transport" ]; then
  printf '\n[fuse]\ntransport = "%s"\n' "$transport" >>"$tmp/config.toml"
fi
if [ -n "${WARDFS_FUSE_AUTO_CHECKPOINT_MS:-}" ]; then
  printf '\n[checkpoints]\nauto_quiet_ms = %s\n' "$WARDFS_FUSE_AUTO_CHECKPOINT_MS" >>"$tmp/config.toml"
fi
# wardfs is mounted only while it is measured (wardfs_start/wardfs_stop in lib.sh): its watcher
# (inotify on the backing dir) reacts to every open and write that native and bindfs runs make in
# that directory, and would bill wardfs's bookkeeping to them (4.5 CPU-seconds during bindfs's 1 GiB
# write, measured).
# Mounts wardfs for target $1 == wardfs, unmounts it for the others.
use() {
  if [ "$1" = wardfs ]; then wardfs_start; else wardfs_stop; fi
}

for _ in $(seq 200); do
  mountpoint -q "$bind" && mountpoint -q "$bind_tmpfs" && break
  sleep 0.1
done
mountpoint -q "$bind" && mountpoint -q "$bind_tmpfs" || die "bindfs did not mount in 20 s"
wardfs_start
passthrough=$(grep -o 'FUSE session started.*' "$tmp/daemon.log" | head -1 | sed 's/\x1b\[[0-9;]*m//g')
log "wardfs: ${passthrough:-no 'FUSE session started' line in the daemon log}"
[ -z "$(ls -A "$backing")" ] || [ -n "$(ls -A "$mnt/workspace")" ] || die "the mount does not show the backing dir"
wardfs_stop

# Target name -> directory of the ext4 backing dir / of the tmpfs, as each target shows it.
declare -A root=([native]=$backing [bindfs]=$bind [wardfs]=$mnt/workspace)
declare -A troot=([native]=$tmpfs [bindfs]=$bind_tmpfs [wardfs]=$mnt/cache)
targets=(native bindfs wardfs)
# The targets in round $1's order: the six permutations, in an order where over six rounds each
# target comes first, second and third twice and follows each other target equally often (what runs
# just before matters here: a 1 GiB write or a cold read leaves the VM host's cache busy).
orders=("native bindfs wardfs" "bindfs wardfs native" "wardfs native bindfs"
  "native wardfs bindfs" "wardfs bindfs native" "bindfs native wardfs")
order() {
  echo "${orders[$(($1 % 6))]}" | tr ' ' '\n'
}
# For the sequential write and the cold read: native and wardfs take turns, bindfs runs after them.
# On this kind of VM whatever runs after a bindfs 1 GiB write is slowed down (native too: 330 MB/s
# instead of 1,000+, still 20 s later; not the page cache, not discard), so bindfs must not run
# between the two that are compared.
noisy_order() {
  local r=$1
  if ((r < noisy_reps)); then
    if ((r % 2)); then printf 'wardfs\nnative\n'; else printf 'native\nwardfs\n'; fi
  else
    echo bindfs
  fi
}

load_start=$(cut -d' ' -f1-3 /proc/loadavg)

# Load conditions: CPU time used by processes that are not this script's (another build, say),
# sampled every second from /proc while the benchmarks run (as in benches/run.sh).
foreign_sampler_start "$$" "$results/fuse-foreign.txt"

# fio JOB TARGET FILE -> prints bandwidth (MB/s, 1e6) or IOPS; keeps fio's JSON.
fio_run() {
  local job=$1 target=$2 file=$3 tag=$4
  local out=$tmp/fio-$tag.json
  FILE=$file SIZE=$size RUNTIME=$runtime fio --output-format=json --output="$out" \
    "benches/fio/$job.fio"
  cat "$out" >>"$results/fuse-fio-raw.json"
  python3 - "$out" "$job" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
job = sys.argv[2]
if j["error"]:
    sys.exit(f"fio {job}: error {j['error']}")
side = j["write"] if "write" in job else j["read"]
print(f"{side['iops']:.0f}" if job.startswith("rand") else f"{side['bw_bytes'] / 1e6:.1f}")
PY
}

record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$results/fuse-fio.txt"; }

# --- 1. fio --------------------------------------------------------------------------------------
if want io; then
  log "fio: sequential write, $size, bs=1M, fsync at the end (median of $noisy_reps)"
  for r in $(seq 0 $((2 * noisy_reps - 1))); do
    for t in $(noisy_order "$r"); do
      use "$t"
      rm -f "$backing/io/w.dat"
      drop_caches
      sleep 3
      v=$(fio_run seq-write "$t" "${root[$t]}/io/w.dat" "w-$t-$r")
      record seq_write "$t" "$r" "$v"
      printf '  %-7s %9s MB/s\n' "$t" "$v" >&2
    done
  done
  rm -f "$backing/io/w.dat"

  log "fio: sequential read, cold (caches dropped before each run; median of $noisy_reps)"
  # One untimed cold read first: in a VM the host's page cache also holds the disk's blocks, and only
  # the guest's can be dropped. Without it, the first target to read the file pays for the host's
  # cache too (here 600 MB/s against 2,000+ for the runs after it).
  drop_caches
  fio_run seq-read-cold native "${root[native]}/io/r.dat" "rc-first" >/dev/null
  for r in $(seq 0 $((2 * noisy_reps - 1))); do
    for t in $(noisy_order "$r"); do
      use "$t"
      drop_caches
      v=$(fio_run seq-read-cold "$t" "${root[$t]}/io/r.dat" "rc-$t-$r")
      record seq_read_cold "$t" "$r" "$v"
      printf '  %-7s %9s MB/s\n' "$t" "$v" >&2
    done
  done

  log "fio: sequential read, warm (invalidate=0, after one pass through the same target; median of $reps)"
  for r in $(seq 0 $((reps - 1))); do
    for t in $(order "$r"); do
      use "$t"
      fio_run seq-read-warm "$t" "${root[$t]}/io/r.dat" "rw0-$t-$r" >/dev/null
      v=$(fio_run seq-read-warm "$t" "${root[$t]}/io/r.dat" "rw-$t-$r")
      record seq_read_warm "$t" "$r" "$v"
      printf '  %-7s %9s MB/s\n' "$t" "$v" >&2
    done
  done

  log "fio: random 4 KiB read, warm (invalidate=0, ${runtime}s per run; median of $reps)"
  for r in $(seq 0 $((reps - 1))); do
    for t in $(order "$r"); do
      use "$t"
      fio_run seq-read-warm "$t" "${root[$t]}/io/r.dat" "rr0-$t-$r" >/dev/null
      v=$(fio_run rand-read-warm "$t" "${root[$t]}/io/r.dat" "rr-$t-$r")
      record rand_read_warm "$t" "$r" "$v"
      printf '  %-7s %9s IOPS\n' "$t" "$v" >&2
    done
  done
fi

# --- 2. metadata ---------------------------------------------------------------------------------
if want meta; then
  for fs in ext4 tmpfs; do
    log "metadata: $nfiles files of 4 KiB, create / stat / read / delete, $fs backing (median of $reps)"
    for r in $(seq 0 $((reps - 1))); do
      for t in $(order "$r"); do
        use "$t"
        if [ $fs = ext4 ]; then dir=${root[$t]}/meta; else dir=${troot[$t]}/meta; fi
        python3 benches/meta.py "$dir" --files "$nfiles" --label "$fs $t $r" \
          --json "$results/fuse-meta.txt" | python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
fs, t, r = d["label"].split()
print(f"  {t:<7} " + "  ".join(f"{k} {d[k]:>9,.0f}/s" for k in ("create", "stat", "read", "delete")), file=sys.stderr)'
      done
    done
  done
fi

# --- 3. rg ---------------------------------------------------------------------------------------
q() { printf '%q' "$1"; }
correct=1
if want rg; then
  log "rg: checking that the three targets find the same matches"
  for pat in literal regex; do
    if [ $pat = literal ]; then args=(-n -F "$literal"); else args=(-n "$regex"); fi
    for t in "${targets[@]}"; do
      use "$t"
      { rg "${args[@]}" "${root[$t]}/tree" || true; } | sed "s|^${root[$t]}/tree/||" | LC_ALL=C sort \
        >"$tmp/rg-$pat-$t.txt"
    done
    n=$(wc -l <"$tmp/rg-$pat-native.txt")
    for t in bindfs wardfs; do
      if cmp -s "$tmp/rg-$pat-native.txt" "$tmp/rg-$pat-$t.txt"; then
        echo "  $pat: $t finds the same $n matching lines as native" >&2
        echo "$pat $t identical ($n lines)" >>"$results/fuse-rg-check.txt"
      else
        echo "  $pat: MISMATCH: native $n lines, $t $(wc -l <"$tmp/rg-$pat-$t.txt"); first differences:" >&2
        diff "$tmp/rg-$pat-native.txt" "$tmp/rg-$pat-$t.txt" | head -5 >&2 || true
        correct=0
        echo "$pat $t MISMATCH" >>"$results/fuse-rg-check.txt"
      fi
    done
  done

  for pat in literal regex; do
    if [ $pat = literal ]; then p="-F $(q "$literal")"; else p=$(q "$regex"); fi
    log "rg -n $p, through each target (hyperfine --warmup 2)"
    # Two hyperfine runs, so that wardfs is mounted only for its own (see wardfs_start).
    wardfs_stop
    cmds=()
    for t in native bindfs; do
      cmds+=(-n "$t" "rg -n $p $(q "${root[$t]}/tree")")
    done
    hyperfine --warmup 2 --output=pipe -N --style basic --export-json "$results/fuse-rg-$pat-peers.json" \
      "${cmds[@]}" | tee -a "$results/fuse-rg.txt"
    wardfs_start
    hyperfine --warmup 2 --output=pipe -N --style basic --export-json "$results/fuse-rg-$pat-wardfs.json" \
      -n wardfs "rg -n $p $(q "${root[wardfs]}/tree")" | tee -a "$results/fuse-rg.txt"
  done
fi
wardfs_stop

load_end=$(cut -d' ' -f1-3 /proc/loadavg)
kill "$sampler_pid" 2>/dev/null || true
wait "$sampler_pid" 2>/dev/null || true
sampler_pid=""
[ -f "$results/fuse-foreign.txt" ] || printf 'foreign_cpu_s=?\nforeign_wall_s=?\nforeign_top=\n' >"$results/fuse-foreign.txt"

# --- summary -------------------------------------------------------------------------------------
{
  echo "date=$(date -u +%Y-%m-%dT%H:%MZ)"
  echo "cpus=$(nproc)"
  echo "cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
  echo "mem_gb=$(awk '/^MemTotal/ {printf "%.0f", $2/1048576}' /proc/meminfo)"
  echo "kernel=$(uname -r)"
  echo "os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  echo "fs=$(df -T "$backing" | awk 'NR==2 {print $2}')"
  echo "passthrough=$passthrough"
  echo "nofile_hard=$(ulimit -Hn)"
  echo "load_start=$load_start"
  echo "load_end=$load_end"
  echo "reps=$reps"
  echo "noisy_reps=$noisy_reps"
  echo "size=$size"
  echo "files=$nfiles"
  echo "tree_files=$(find "$backing/tree" -type f 2>/dev/null | wc -l)"
  echo "tree_bytes=$(find "$backing/tree" -type f -printf '%s\n' 2>/dev/null | awk '{s+=$1} END {print s+0}')"
  echo "fio=$(fio --version)"
  echo "bindfs=$(bindfs --version 2>&1 | head -1)"
  echo "rg=$(rg --version | head -1)"
  echo "hyperfine=$(hyperfine --version | head -1)"
  echo "wardfs=$bin"
  cat "$results/fuse-foreign.txt"
} >"$results/fuse-env.txt"

rc=0
python3 - "$results" "$correct" <<'PY' || rc=$?
import json, os, statistics, sys

res, correct = sys.argv[1], sys.argv[2] == "1"
env = dict(l.rstrip("\n").partition("=")[::2] for l in open(os.path.join(res, "fuse-env.txt")))
rows, failed = [], []

def fmt(v, unit):
    if unit == "ms":
        return f"{v:,.0f} ms"
    if unit == "IOPS":
        return f"{v / 1000:,.0f}k IOPS"
    if unit == "files/s":
        return f"{v / 1000:,.1f}k/s"
    return f"{v:,.0f} MB/s"

def row(label, unit, vals, target, higher_better=True, note=""):
    n, b, s = vals["native"], vals["bindfs"], vals["wardfs"]
    rb, rs = b / n, s / n
    if target is None:
        verdict, tgt = "info", "—"
    else:
        ok = rs >= target if higher_better else rs <= target
        verdict = "PASS" if ok else "FAIL"
        tgt = f"≥ {target:g}" if higher_better else f"≤ {target:g}×"
        if not ok:
            failed.append(label)
    r = (lambda x: f"{x:.2f}") if higher_better else (lambda x: f"{x:.1f}×")
    rows.append((label, fmt(n, unit), fmt(b, unit), fmt(s, unit), r(rb), r(rs), tgt, verdict + note))

fio_path = os.path.join(res, "fuse-fio.txt")
if os.path.exists(fio_path):
    runs = {}
    for line in open(fio_path):
        w, t, _, v = line.split("\t")
        runs.setdefault(w, {}).setdefault(t, []).append(float(v))
    size = env["size"].upper().replace("G", " GiB").replace("M", " MiB")
    for w, label, unit, target in (
        ("seq_write", f"sequential write {size}, bs=1M", "MB/s", 0.85),
        ("seq_read_cold", f"sequential read {size}, cold", "MB/s", 0.95),
        ("seq_read_warm", f"sequential read {size}, warm", "MB/s", 0.95),
        ("rand_read_warm", "random 4k read, warm", "IOPS", 0.9),
    ):
        if w in runs:
            row(label, unit, {t: statistics.median(v) for t, v in runs[w].items()}, target)

meta_path = os.path.join(res, "fuse-meta.txt")
if os.path.exists(meta_path):
    runs = {}
    for line in open(meta_path):
        d = json.loads(line)
        fs, t, _ = d["label"].split()
        for ph in ("create", "stat", "read", "delete"):
            runs.setdefault((fs, ph), {}).setdefault(t, []).append(d[ph])
    targets = {"create": 0.5, "stat": 0.5, "read": 0.4, "delete": 0.4}
    for fs in ("ext4", "tmpfs"):
        for ph in ("create", "stat", "read", "delete"):
            if (fs, ph) in runs:
                label = f"{int(env['files']):,} files: {ph} ({fs if fs == 'tmpfs' else env.get('fs', fs)})"
                row(label, "files/s", {t: statistics.median(v) for t, v in runs[(fs, ph)].items()},
                    targets[ph])

for pat, label in (("literal", "rg -n -F 'unsafe impl'"), ("regex", "rg -n 'impl<[^>]*> (Drop|Clone|Default) for'")):
    d = {}
    for part in ("peers", "wardfs"):
        p = os.path.join(res, f"fuse-rg-{pat}-{part}.json")
        if os.path.exists(p):
            d.update({r["command"]: r["mean"] * 1000 for r in json.load(open(p))["results"]})
    if len(d) == 3:
        row(label.replace("|", "\\|"), "ms", d, 3.0, higher_better=False)

head = ("workload", "native", "bindfs", "wardfs", "bindfs/native", "wardfs/native", "target", "wardfs")
md = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
md += ["| " + " | ".join(r) + " |" for r in rows]
tree = ""
if env.get("tree_files", "0") != "0":
    tree = f"; rg tree: {int(env['tree_files']):,} files, {int(env['tree_bytes']) / 1e6:.0f} MB"
text = "\n".join([
    f"wardfs FUSE benchmarks, {env['date']}",
    f"{env['cpus']} × {env['cpu']}, {env['mem_gb']} GB RAM, {env['os']}, kernel {env['kernel']}, "
    f"backing dir on {env['fs']}; {env['fio']}, {env['bindfs']}, {env['rg']}, {env['hyperfine']}",
    f"wardfs: {env['passthrough'] or '(no passthrough line in the daemon log)'}",
    f"medians of {env['reps']} runs ({env['noisy_reps']} for the sequential write and the cold read), "
    f"hyperfine means (rg){tree}; "
    f"ratios: throughput / native (higher is better), rg time / native (lower is better)",
    f"load average {env['load_start']} at start, {env['load_end']} at end; other processes used "
    f"{env['foreign_cpu_s']} CPU-seconds in {env['foreign_wall_s']} s"
    + (f" ({env['foreign_top']})" if env.get("foreign_top") else ""),
    "",
] + md) + "\n"
open(os.path.join(res, "fuse-summary.txt"), "w").write(text)
print("\n" + "=" * 100)
print(text)
if not correct:
    print("RESULT: a target found different rg matches than native (see above): a bug, not a slowness.")
elif failed:
    print("RESULT: wardfs targets missed: " + "; ".join(failed))
else:
    print("RESULT: every wardfs target met")
sys.exit(2 if not correct else (3 if failed else 0))
PY
echo "(raw results: $results/fuse-*)" >&2
case $rc in
  0) exit 0 ;;
  2) exit 1 ;;
  3) [ "$strict" = 1 ] && exit 1 || exit 0 ;;
  *) exit "$rc" ;;
esac
