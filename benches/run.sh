#!/usr/bin/env bash
# wardfs benchmark suite (issue 2): bash benches/run.sh   (or: make bench)
#
# 1. grep / glob through the daemon (the `wardfs` CLI talking to `wardfs serve`) against ripgrep and
#    fd on the same generated tree, with hyperfine (--warmup 3, --output=pipe). Both sides are
#    processes, so process start-up is counted on both sides. Both sides must print the same
#    matches (checked, and the counts printed).
# 2. Small-file read / stat / write round trips over the socket with 16 clients against the same
#    operations done natively with 16 threads (benches/api_load.rs).
# 3. The daemon's memory (VmRSS, VmHWM) idle after start, after the searches, after the load.
#
# Prints a summary with ratios and pass/fail against the targets, and keeps the raw results in
# bench-data/results/. The tree is generated once into bench-data/tree (git-ignored) and reused while
# benches/gen_tree.py is unchanged.
#
# Environment:
#   WARDFS_BENCH_SECONDS   seconds per load phase (default 10)
#   WARDFS_BENCH_CLIENTS   concurrent clients / native threads (default 16)
#   WARDFS_BENCH_STRICT    1: exit 1 when a target is missed (default: only a wrong result fails)
#   WARDFS_BIN             use this wardfs binary instead of building target/release/wardfs (to
#                          compare two builds on the same machine)
#   CARGO                  cargo command (default cargo)
set -euo pipefail

cd "$(dirname "$0")/.."
repo=$PWD
load_seconds=${WARDFS_BENCH_SECONDS:-10}
clients=${WARDFS_BENCH_CLIENTS:-16}
strict=${WARDFS_BENCH_STRICT:-0}
cargo=${CARGO:-cargo}

# The searches: a literal and a regex with hundreds to a few thousand matching lines in the tree.
literal='unsafe impl'
regex='impl<[^>]*> (Drop|Clone|Default) for'
glob='*.rs'
# Informational (no target): a pattern with ~90,000 matching lines, far more than an agent should ask
# for (the default result cap is 1,000); shows what a huge answer costs in time and daemon memory.
many='fn \w+'
big_limit=10000000

log() { printf '\n== %s\n' "$*" >&2; }
die() { printf 'run.sh: %s\n' "$*" >&2; exit 1; }

# --- tools ---------------------------------------------------------------------------------------
missing=()
command -v hyperfine >/dev/null 2>&1 || missing+=(hyperfine)
command -v rg >/dev/null 2>&1 || missing+=(ripgrep)
fd_bin=""
if command -v fdfind >/dev/null 2>&1; then
  fd_bin=$(command -v fdfind)
elif command -v fd >/dev/null 2>&1 && fd --version 2>/dev/null | grep -q '^fd '; then
  fd_bin=$(command -v fd)
else
  missing+=(fd-find)
fi
command -v python3 >/dev/null 2>&1 || missing+=(python3)
if ((${#missing[@]})); then
  die "missing tools; install them with: apt-get install ${missing[*]}"
fi
command -v "$cargo" >/dev/null 2>&1 || die "cargo is not installed (https://rustup.rs)"

# --- build (once) --------------------------------------------------------------------------------
if [ -n "${WARDFS_BIN:-}" ]; then
  log "using $WARDFS_BIN (WARDFS_BIN; not building it)"
  bin=$WARDFS_BIN
else
  log "building (release)"
  "$cargo" build --release --bin wardfs
  bin=$repo/target/release/wardfs
fi
"$cargo" bench --bench api_load --no-run

# --- tree ----------------------------------------------------------------------------------------
data=$repo/bench-data
tree=$data/tree
stamp=$data/tree.stamp
want_stamp=$(sha256sum benches/gen_tree.py | cut -d' ' -f1)
mkdir -p "$data"
if [ -d "$tree" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want_stamp" ]; then
  log "reusing $tree"
else
  log "generating $tree (once; about half a minute)"
  rm -rf "$tree" "$stamp"
  python3 benches/gen_tree.py "$tree"
  echo "$want_stamp" >"$stamp"
fi
tree_files=$(find "$tree" -type f -not -path '*/.git/*' | wc -l)
tree_bytes=$(find "$tree" -type f -not -path '*/.git/*' -printf '%s\n' | awk '{s+=$1} END {print s}')

results=$data/results
rm -rf "$results"
mkdir -p "$results"

# --- daemon --------------------------------------------------------------------------------------
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wardfs-bench.XXXXXX")
sock=$tmp/s.sock
daemon_pid=""
sampler_pid=""
cleanup() {
  cp "$tmp/daemon.log" "$results/daemon.log" 2>/dev/null || true
  [ -z "$sampler_pid" ] || kill "$sampler_pid" 2>/dev/null || true
  if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
    kill "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$tmp/run" "$tmp/state" "$tmp/ws"
# /cache is the tree (read-only: the benchmark never changes it); /workspace is a scratch directory
# for the load benchmark's files.
cat >"$tmp/config.toml" <<EOF
state_dir = '$tmp/state/wardfs'

[zones]
mode = "direct"

[zones.cache]
dir = '$tree'
read_only = true

[zones.workspace]
dir = '$tmp/ws'

[limits]
grep_max_results = $big_limit
glob_max_results = $big_limit
EOF

log "starting the daemon"
XDG_RUNTIME_DIR=$tmp/run XDG_STATE_HOME=$tmp/state RUST_LOG=warn \
  "$bin" serve --no-mount --config "$tmp/config.toml" --socket "$sock" 2>"$tmp/daemon.log" &
daemon_pid=$!
for _ in $(seq 100); do
  [ -S "$sock" ] && break
  kill -0 "$daemon_pid" 2>/dev/null || { cat "$tmp/daemon.log" >&2; die "the daemon exited at start"; }
  sleep 0.1
done
[ -S "$sock" ] || { cat "$tmp/daemon.log" >&2; die "the daemon did not create $sock in 10 s"; }
sleep 1

mem_kb() { awk -v k="$1:" '$1 == k {print $2}' "/proc/$daemon_pid/status"; }
printf 'idle_rss_kb=%s\nidle_hwm_kb=%s\n' "$(mem_kb VmRSS)" "$(mem_kb VmHWM)" >"$results/mem_idle.env"

load_start=$(cut -d' ' -f1-3 /proc/loadavg)

# Load conditions: CPU time used by processes that are not this script's (another build, say),
# sampled every second from /proc while the benchmarks run.
python3 - "$$" "$results/foreign.env" <<'PY' &
import os, sys, time
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
        procs[int(p)] = (int(f[1]), comm, int(f[11]) + int(f[12]))  # ppid, comm, utime+stime
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
    wall = time.time() - start
    top = sorted(by_comm.items(), key=lambda kv: -kv[1])[:4]
    with open(out, "w") as f:
        f.write(f"foreign_cpu_s={total:.1f}\nforeign_wall_s={wall:.0f}\n")
        f.write("foreign_top=" + ", ".join(f"{c} {t / hz:.1f} s" for c, t in top if t) + "\n")
import signal
signal.signal(signal.SIGTERM, lambda *_: (report(), sys.exit(0)))
while os.path.exists(f"/proc/{root}"):
    time.sleep(1)
    cur = snapshot()
    mine = ours(cur)
    for pid, (ppid, comm, t) in cur.items():
        if pid in mine:
            continue
        before = prev.get(pid)
        d = t - before[2] if before and before[1] == comm else t if pid not in prev else 0
        if d > 0:
            by_comm[comm] = by_comm.get(comm, 0) + d
    prev = cur
    report()
PY
sampler_pid=$!

# --- search --------------------------------------------------------------------------------------
q() { printf '%q' "$1"; }
wardfs_cmd="$(q "$bin") --socket $(q "$sock")"
correct=1

# check NAME PEER_CMD WARDFS_CMD PEER_PREFIX: runs both once, compares their matches.
check() {
  local name=$1 peer=$2 ours=$3 prefix=$4
  # Peer paths are "$tree/rel", ours "/cache/rel": compare the relative paths (and lines).
  { sh -c "$peer" || true; } | sed "s|^$prefix/||" | LC_ALL=C sort >"$results/$name.peer.txt"
  { sh -c "$ours" || true; } | sed 's|^/cache/||' | LC_ALL=C sort >"$results/$name.wardfs.txt"
  local np ns
  np=$(wc -l <"$results/$name.peer.txt")
  ns=$(wc -l <"$results/$name.wardfs.txt")
  if cmp -s "$results/$name.peer.txt" "$results/$name.wardfs.txt"; then
    echo "$name: peer $np, wardfs $ns matches (identical)" >&2
    echo "$np" >"$results/$name.count"
  else
    echo "$name: MISMATCH: peer $np, wardfs $ns matches; first differences:" >&2
    diff "$results/$name.peer.txt" "$results/$name.wardfs.txt" | head -10 >&2 || true
    echo "$np/$ns MISMATCH" >"$results/$name.count"
    correct=0
  fi
}

# bench NAME PEER_NAME PEER_CMD WARDFS_CMD [EXTRA_NAME EXTRA_CMD]...
bench() {
  local name=$1 peer_name=$2 peer=$3 ours=$4
  shift 4
  local extra=()
  while (($# >= 2)); do
    extra+=(-n "$1" "$2")
    shift 2
  done
  hyperfine --warmup 3 --min-runs 10 --output=pipe -N --style basic \
    --export-json "$results/$name.json" \
    -n "$peer_name" "$peer" -n "wardfs" "$ours" "${extra[@]}"
}

lit_peer="rg -n -F $(q "$literal") $(q "$tree")"
lit_ours="$wardfs_cmd grep -n -F $(q "$literal") /cache --limit $big_limit"
re_peer="rg -n $(q "$regex") $(q "$tree")"
re_ours="$wardfs_cmd grep -n $(q "$regex") /cache --limit $big_limit"
glob_peer="$(q "$fd_bin") -g $(q "$glob") $(q "$tree")"
glob_ours="$wardfs_cmd glob $(q "$glob") /cache --limit $big_limit"

log "checking that wardfs and the peers find the same matches"
check grep_literal "$lit_peer" "$lit_ours" "$tree"
check grep_regex "$re_peer" "$re_ours" "$tree"
check glob "$glob_peer" "$glob_ours" "$tree"

log "grep, literal: rg -n -F '$literal' vs wardfs grep -F"
bench grep_literal rg "$lit_peer" "$lit_ours"
log "grep, regex: rg -n '$regex' vs wardfs grep"
bench grep_regex rg "$re_peer" "$re_ours"
log "glob: $(basename "$fd_bin") -g '$glob' vs wardfs glob"
# Also `wardfs --json glob` (informational): the same request, printed as one JSON write instead of
# one line per path, which isolates the CLI's printing from the daemon's work.
bench glob "$(basename "$fd_bin")" "$glob_peer" "$glob_ours" \
  "wardfs --json" "$wardfs_cmd --json glob $(q "$glob") /cache --limit $big_limit"

printf 'search_rss_kb=%s\nsearch_hwm_kb=%s\n' "$(mem_kb VmRSS)" "$(mem_kb VmHWM)" >"$results/mem_search.env"

# --- small-file round trips ----------------------------------------------------------------------
log "small files: $clients clients over the socket vs $clients native threads, ${load_seconds}s per phase"
"$cargo" bench --bench api_load -- --socket "$sock" --dir /workspace/load \
  --seconds "$load_seconds" --clients "$clients" --json "$results/load.json"

printf 'load_rss_kb=%s\nload_hwm_kb=%s\n' "$(mem_kb VmRSS)" "$(mem_kb VmHWM)" >"$results/mem_load.env"

# --- informational: a huge answer ----------------------------------------------------------------
many_peer="rg -n $(q "$many") $(q "$tree")"
many_ours="$wardfs_cmd grep -n $(q "$many") /cache --limit $big_limit"
log "informational: rg -n '$many' (tens of thousands of matching lines) vs wardfs grep"
check grep_many "$many_peer" "$many_ours" "$tree"
bench grep_many rg "$many_peer" "$many_ours"
printf 'many_rss_kb=%s\nmany_hwm_kb=%s\n' "$(mem_kb VmRSS)" "$(mem_kb VmHWM)" >"$results/mem_many.env"
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

# --- summary -------------------------------------------------------------------------------------
kill "$sampler_pid" 2>/dev/null || true
wait "$sampler_pid" 2>/dev/null || true
[ -f "$results/foreign.env" ] || printf 'foreign_cpu_s=?\nforeign_wall_s=?\nforeign_top=\n' >"$results/foreign.env"
{
  echo "date=$(date -u +%Y-%m-%dT%H:%MZ)"
  echo "cpus=$(nproc)"
  echo "cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
  echo "mem_gb=$(awk '/^MemTotal/ {printf "%.0f", $2/1048576}' /proc/meminfo)"
  echo "kernel=$(uname -r)"
  echo "os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  echo "fs=$(df -T "$tree" | awk 'NR==2 {print $2}')"
  echo "load_start=$load_start"
  echo "load_end=$load_end"
  echo "tree_files=$tree_files"
  echo "tree_bytes=$tree_bytes"
  echo "rg=$(rg --version | head -1)"
  echo "fd=$("$fd_bin" --version | head -1)"
  echo "hyperfine=$(hyperfine --version | head -1)"
} >"$results/env.env"

rc=0
python3 - "$results" "$correct" <<'PY' || rc=$?
import json, os, sys

res, correct = sys.argv[1], sys.argv[2] == "1"

def env(name):
    out = {}
    for line in open(os.path.join(res, name)):
        k, _, v = line.rstrip("\n").partition("=")
        out[k] = v
    return out

e = {**env("env.env"), **env("foreign.env")}
mem = {**env("mem_idle.env"), **env("mem_search.env"), **env("mem_load.env"), **env("mem_many.env")}
rows, failed = [], []

def verdict(ok):
    return "PASS" if ok else "FAIL"

def search_row(name, label, has_target):
    d = json.load(open(os.path.join(res, name + ".json")))["results"]
    peer, ours = d[0], d[1]
    ratio = ours["mean"] / peer["mean"]
    count = open(os.path.join(res, name + ".count")).read().strip()
    ok = ratio <= 1.2 and "MISMATCH" not in count
    if has_target and not ok:
        failed.append(label)
    rows.append((label, f"{peer['command']}: {peer['mean']*1000:.0f} ± {peer['stddev']*1000:.0f} ms",
                 f"{ours['mean']*1000:.0f} ± {ours['stddev']*1000:.0f} ms",
                 f"{ratio:.2f}×", "≤ 1.20×" if has_target else "— (info)", count,
                 verdict(ok) if has_target else "info"))

search_row("grep_literal", "grep literal `unsafe impl`", True)
search_row("grep_regex", "grep regex `impl<[^>]*> (Drop\\|Clone\\|Default) for`", True)
search_row("glob", "glob `*.rs`", True)
d = json.load(open(os.path.join(res, "glob.json")))["results"]
if len(d) > 2:
    rows.append(("glob `*.rs`, `wardfs --json glob` (info: same request, output in one write)",
                 f"{d[0]['command']}: {d[0]['mean']*1000:.0f} ± {d[0]['stddev']*1000:.0f} ms",
                 f"{d[2]['mean']*1000:.0f} ± {d[2]['stddev']*1000:.0f} ms",
                 f"{d[2]['mean'] / d[0]['mean']:.2f}×", "— (info)", "", "info"))

load = json.load(open(os.path.join(res, "load.json")))
for op in ("read", "stat", "write"):
    if op not in load["ops"]:
        continue
    o = load["ops"][op]
    s, n = o["wardfs"], o["native"]
    target, ok = "—", None
    if op == "read":
        target = "≥ 20,000 ops/s"
        ok = s["ops_per_s"] >= 20000
        if not ok:
            failed.append("read ops/s")
    rows.append((f"{op} 4 KiB, {load['clients']} clients",
                 f"native: {n['ops_per_s']:,.0f} ops/s (p50 {n['p50_us']:.0f} µs, p99 {n['p99_us']:.0f} µs)",
                 f"{s['ops_per_s']:,.0f} ops/s (p50 {s['p50_us']:.0f} µs, p99 {s['p99_us']:.0f} µs)",
                 f"{o['ratio_ops']:.3f}×", target, f"{s['ops']:,} ops", "—" if ok is None else verdict(ok)))

mb = lambda kb: int(kb) / 1024
for label, key in (("daemon VmRSS idle after start", "idle_rss_kb"),
                   ("daemon VmRSS after grep/glob", "search_rss_kb"),
                   ("daemon VmHWM after grep/glob", "search_hwm_kb"),
                   ("daemon VmRSS after the load run", "load_rss_kb"),
                   ("daemon VmHWM after the load run", "load_hwm_kb")):
    v = mb(mem[key])
    ok = v < 60
    if not ok:
        failed.append(label)
    rows.append((label, "", f"{v:.1f} MB", "", "< 60 MB", "", verdict(ok)))

# Informational: a huge answer (no target; the default result cap keeps agents away from it).
search_row("grep_many", "grep regex `fn \\w+`, all matches (info)", False)
for label, key in (("daemon VmRSS after the huge greps (info)", "many_rss_kb"),
                   ("daemon VmHWM after the huge greps (info)", "many_hwm_kb")):
    v = mb(mem[key])
    rows.append((label, "", f"{v:.1f} MB", "", "(< 60 MB)", "", "info: " + ("under" if v < 60 else "OVER")))

head = ("benchmark", "peer", "wardfs", "wardfs/peer", "target", "matches / ops", "result")
md = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
md += ["| " + " | ".join(r) + " |" for r in rows]
machine = (f"{e['cpus']} × {e['cpu']}, {e['mem_gb']} GB RAM, {e['os']}, kernel {e['kernel']}, "
           f"tree on {e['fs']}; load average {e['load_start']} at start, {e['load_end']} at end "
           f"(the load phase's own threads count in the latter)")
others = (f"other processes during the run: {e['foreign_cpu_s']} CPU-seconds in {e['foreign_wall_s']} s"
          + (f" ({e['foreign_top']})" if e['foreign_top'] else ""))
tree = f"tree: {int(e['tree_files']):,} files, {int(e['tree_bytes'])/1e6:.0f} MB ({e['rg']}, {e['fd']}, {e['hyperfine']})"
text = "\n".join([f"wardfs benchmarks, {e['date']}", machine, others, tree, ""] + md) + "\n"
open(os.path.join(res, "summary.md"), "w").write(text)

print("\n" + "=" * 100)
print(text)
if not correct:
    print("RESULT: wardfs and a peer disagreed on the matches (see above): a bug, not a slowness.")
elif failed:
    print("RESULT: targets missed: " + "; ".join(failed))
else:
    print("RESULT: every target met")
sys.exit(2 if not correct else (3 if failed else 0))
PY
echo "(raw results: $results)" >&2
case $rc in
  0) exit 0 ;;
  2) exit 1 ;;
  3) [ "$strict" = 1 ] && exit 1 || exit 0 ;;
  *) exit "$rc" ;;
esac
