#!/usr/bin/env bash
# wardfs mirror benchmarks (issue 5): bash benches/sandbox.sh   (or: make bench-sandbox; root)
#
# Against the real sandbox-agent 0.4.2 on loopback, inside a loopback-only network namespace
# (the script re-runs itself under .ci/netns; the server is started with --token, --no-telemetry,
# 127.0.0.1, a temp HOME and a cleared environment, and killed by PID at the end):
#   1. first push of a 10,000-file tree (the mirror engine, benches/mirror.rs) against the same
#      tree sent by hand: `tar c` of batches of at most 2 MiB piped to `curl --data-binary @-` on
#      /v1/fs/upload-batch; target: wardfs <= 2x the hand-made upload;
#   2. incremental push after one edit in that tree: target < 0.2 s and exactly one file sent;
#   3. first push of one 100 MiB file against a plain chunked upload (`split -b 2M`, one
#      `curl --upload-file` PUT per chunk); MB/s for both;
#   4. a zone served from the sandbox (`[zones.workspace] sandbox = ...`), mounted: reading the
#      large file and 100 small files, and writing 100 small files, through the mount against the
#      same requests made with curl.
# Prints a summary and keeps raw results in bench-data/results/sandbox-*.
#
# Environment: WARDFS_BENCH_RUNS (default 3), WARDFS_BENCH_BIG_MB (default 100), CARGO.
set -euo pipefail

cd "$(dirname "$0")/.."
repo_root=$PWD
runs=${WARDFS_BENCH_RUNS:-3}
big_mb=${WARDFS_BENCH_BIG_MB:-100}
cargo=${CARGO:-cargo}

me=sandbox.sh
# shellcheck source=benches/lib.sh
. benches/lib.sh

if [ -z "${WARDFS_BENCH_IN_NETNS:-}" ]; then
  for t in curl tar python3 split unshare ip; do
    command -v "$t" >/dev/null 2>&1 || die "$t is missing: run .ci/install-deps test"
  done
  sandbox_agent_bin >/dev/null
  log "building (release)"
  "$cargo" build --release --bench mirror --bin wardfs
  export WARDFS_BENCH_IN_NETNS=1
  exec .ci/netns bash "$0" "$@"
fi

# --- inside the namespace from here on
need_loopback_netns
bench_bin=$(ls -t "$repo_root"/target/release/deps/mirror-* | grep -v '\.d$' | head -1)
[ -x "$bench_bin" ] || die "the mirror bench binary was not built"

data=$repo_root/bench-data/sandbox
results=$repo_root/bench-data/results
mkdir -p "$data" "$results"
work=$(mktemp -d "$data/run.XXXXXX")
agent_pid=""
daemon_pid=""
cleanup() {
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null || true
  if grep -q " $work/mnt " /proc/self/mountinfo 2>/dev/null; then
    fusermount3 -u -z "$work/mnt" 2>/dev/null || umount -l "$work/mnt" 2>/dev/null || true
  fi
  [ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

log "generating a 10,000-file tree and a ${big_mb} MiB file"
python3 - "$work/tree" <<'EOF'
import os, random, sys
root = sys.argv[1]
rng = random.Random(7)
for d in range(100):
    dd = os.path.join(root, f"d{d:03}")
    os.makedirs(dd)
    for f in range(100):
        with open(os.path.join(dd, f"f{d * 100 + f:04}.txt"), "w") as fh:
            fh.write("".join(rng.choice("abcdefgh \n") for _ in range(rng.randint(200, 4000))))
EOF
mkdir -p "$work/big"
head -c "$((big_mb * 1024 * 1024))" /dev/urandom >"$work/big/blob.bin"
tree_bytes=$(du -sb --apparent-size "$work/tree" | cut -f1)

# --- the server
sandbox_agent_start "$work"
auth=(-H "Authorization: Bearer $token")

now_ms() { date +%s%3N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# --- peer 1: the tree by hand, in tar batches of at most 2 MiB (file sizes plus tar headers)
log "peer: hand-made tar batches through curl"
(cd "$work/tree" && find . -type f -printf '%s %p\n' | sort -k2) >"$work/files.txt"
python3 - "$work/files.txt" "$work/batch" <<'EOF'
import sys
limit, n, size, out = 2 * 1024 * 1024 - 10240, 0, 0, None
for line in open(sys.argv[1]):
    s, p = line.rstrip("\n").split(" ", 1)
    cost = 512 + (int(s) + 511) // 512 * 512
    if out is None or size + cost > limit:
        n += 1; size = 0
        out = open(f"{sys.argv[2]}.{n:04}", "w")
    out.write(p + "\n"); size += cost
EOF
peer_ms=()
for run in $(seq "$runs"); do
  t0=$(now_ms)
  for list in "$work"/batch.*; do
    (cd "$work/tree" && tar c -T "$list") |
      curl -sf "${auth[@]}" -H 'Content-Type: application/x-tar' --data-binary @- \
        "$url/v1/fs/upload-batch?path=$home/remote/peer-$run" >/dev/null
  done
  peer_ms+=($(($(now_ms) - t0)))
done
batches=$(ls "$work"/batch.* | wc -l)
peer_med=$(printf '%s\n' "${peer_ms[@]}" | median)
n_remote=$(find "$home/remote/peer-1" -type f | wc -l)
[ "$n_remote" = 10000 ] || die "the hand-made upload left $n_remote files, not 10000"

# --- peer 2: the big file in 2 MiB PUTs
log "peer: chunked curl upload of the ${big_mb} MiB file"
split -b 2M -d -a 3 "$work/big/blob.bin" "$work/chunk."
t0=$(now_ms)
for c in "$work"/chunk.*; do
  curl -sf "${auth[@]}" --upload-file "$c" "$url/v1/fs/file?path=$home/remote/peer-big/$(basename "$c")" >/dev/null
done
peer_big_ms=$(($(now_ms) - t0))

# --- wardfs
log "wardfs: mirror pushes"
WARDFS_BENCH_AGENT_URL=$url WARDFS_BENCH_AGENT_TOKEN=$token WARDFS_BENCH_TREE=$work/tree \
  WARDFS_BENCH_BIG=$work/big WARDFS_BENCH_REMOTE=$home/remote/wardfs WARDFS_BENCH_RUNS=$runs \
  "$bench_bin" >"$work/wardfs.json"
cmp -s "$work/big/blob.bin" "$home/remote/wardfs/big/blob.bin" || die "the pushed large file differs"
n_remote=$(find "$home/remote/wardfs/tree-0" -type f | wc -l)
[ "$n_remote" = 10000 ] || die "the first push left $n_remote files, not 10000"

# --- a zone served from the sandbox, through the mount, against curl
log "wardfs: the sandbox's directory as a mounted zone"
mkdir -p "$work/mnt"
cat >"$work/config.toml" <<EOF
state_dir = "$work/state"
socket = "$work/run/s.sock"
mount = "$work/mnt"
[zones]
root = "$work/zones"
[zones.workspace]
sandbox = "dev"
path = "$home/remote"
[sandboxes.dev]
provider = "sandbox-agent"
url = "$url"
token_env = "WARDFS_BENCH_TOKEN"
EOF
WARDFS_BENCH_TOKEN=$token RUST_LOG=warn "$repo_root/target/release/wardfs" serve --config "$work/config.toml" \
  >"$work/daemon.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do
  [ -e "$work/mnt/workspace/wardfs" ] && break
  kill -0 "$daemon_pid" 2>/dev/null || { cat "$work/daemon.log" >&2; die "wardfs serve exited"; }
  sleep 0.1
done
[ -e "$work/mnt/workspace/wardfs" ] || die "the remote zone did not come up: $(cat "$work/daemon.log")"
small=$home/remote/peer-1/d000
zone_read_big=() curl_read_big=() zone_read_small=() curl_read_small=() zone_write=() curl_write=()
for run in $(seq "$runs"); do
  t0=$(now_ms); cat "$work/mnt/workspace/wardfs/big/blob.bin" >/dev/null; zone_read_big+=($(($(now_ms) - t0)))
  t0=$(now_ms); curl -sf "${auth[@]}" "$url/v1/fs/file?path=$home/remote/wardfs/big/blob.bin" >/dev/null
  curl_read_big+=($(($(now_ms) - t0)))
  sleep 1.1 # past the zone's attribute TTL: the listing and attributes are asked for again
  t0=$(now_ms); cat "$work/mnt/workspace/peer-1/d000"/* >/dev/null; zone_read_small+=($(($(now_ms) - t0)))
  # The peers are one curl each, reusing one connection for all their requests.
  t0=$(now_ms)
  gets=(-o /dev/null "$url/v1/fs/entries?path=$small")
  for f in "$small"/*; do gets+=(-o /dev/null "$url/v1/fs/file?path=$f"); done
  curl -sf "${auth[@]}" "${gets[@]}"
  curl_read_small+=($(($(now_ms) - t0)))
  t0=$(now_ms); cp -r "$work/tree/d001" "$work/mnt/workspace/zone-w-$run"; zone_write+=($(($(now_ms) - t0)))
  t0=$(now_ms)
  puts=()
  for f in "$work/tree/d001"/*; do
    puts+=(-o /dev/null -T "$f" "$url/v1/fs/file?path=$home/remote/curl-w-$run/$(basename "$f")")
  done
  curl -sf "${auth[@]}" "${puts[@]}"
  curl_write+=($(($(now_ms) - t0)))
done
diff -r "$work/tree/d001" "$home/remote/zone-w-1" >/dev/null || die "files written through the remote zone differ"
zone_line() { # name, wardfs runs, curl runs
  echo "$1 $(printf '%s\n' $2 | median) $(printf '%s\n' $3 | median)"
}
{
  zone_line read_big "${zone_read_big[*]}" "${curl_read_big[*]}"
  zone_line read_small "${zone_read_small[*]}" "${curl_read_small[*]}"
  zone_line write_small "${zone_write[*]}" "${curl_write[*]}"
} >"$work/zone.txt"

stamp=$(date -u +%Y-%m-%dT%H:%MZ)
python3 - "$work/wardfs.json" "$peer_med" "$peer_big_ms" "$big_mb" "$tree_bytes" "$batches" "$stamp" \
  "$(cut -d' ' -f1-3 /proc/loadavg)" "${peer_ms[*]}" <<'EOF' | tee "$results/sandbox-summary.txt"
import json, sys
r = json.load(open(sys.argv[1]))
peer, peer_big, big_mb, tree_bytes, batches, stamp, load, peer_runs = sys.argv[2:10]
peer, peer_big, big_mb = float(peer), float(peer_big), float(big_mb)
first = r["first_push_median_ms"]
incr = r["incremental_push_median_ms"]
mb = big_mb * 1.048576
print(f"wardfs mirror benchmarks, {stamp}: sandbox-agent 0.4.2 on loopback; load average at end: {load}")
print(f"tree: 10,000 files, {int(tree_bytes) / 1e6:.1f} MB; hand-made upload: {batches} tar batches of <= 2 MiB; runs: {peer_runs} ms")
print()
print("| measure | wardfs | peer | ratio | target | |")
print("|---|---|---|---|---|---|")
ratio = first / peer
print(f"| first push, 10,000 files | {first:.0f} ms ({10000 / first * 1000:,.0f} files/s) | tar batches + curl: {peer:.0f} ms ({10000 / peer * 1000:,.0f} files/s) | {ratio:.2f}x | <= 2x | {'met' if ratio <= 2 else 'NOT met'} |")
ok = incr < 200 and all(f == 1 for f in r["incremental_files_sent"])
print(f"| incremental push after 1 edit | {incr:.0f} ms, files sent {r['incremental_files_sent']}, requests {r['incremental_requests']} | | | < 200 ms, 1 file | {'met' if ok else 'NOT met'} |")
print(f"| push with nothing changed | {r['idle_push_median_ms']:.0f} ms | | | | |")
bm = mb / (r["big_push_ms"] / 1000)
pm = mb / (peer_big / 1000)
print(f"| first push, one {big_mb:.0f} MiB file | {r['big_push_ms']:.0f} ms ({bm:.0f} MB/s) | chunked curl PUTs: {peer_big:.0f} ms ({pm:.0f} MB/s) | {bm / pm:.2f}x speed | (report) | |")
print()
print("A zone served from the sandbox, through the mount (medians; ratio = time through the mount / time with curl):")
print()
print("| measure | through the mount | curl | ratio |")
print("|---|---|---|---|")
names = {"read_big": f"read the {big_mb:.0f} MiB file (`cat`) vs one GET",
         "read_small": "read 100 small files of one directory (`cat dir/*`) vs a listing and 100 GETs in one curl",
         "write_small": "write 100 small files (`cp -r`) vs 100 PUTs in one curl"}
for line in open(sys.argv[1].replace("wardfs.json", "zone.txt")):
    n, a, b = line.split()
    print(f"| {names[n]} | {float(a):.0f} ms | {float(b):.0f} ms | {float(a) / float(b):.2f}x |")
EOF
cp "$work/wardfs.json" "$results/sandbox-raw.json"
