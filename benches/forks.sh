#!/usr/bin/env bash
# Forks benchmark (issue 30): bash benches/forks.sh   (or: make bench-forks; root, for the mount)
#
# On a copy of the generated tree (benches/gen_tree.py, ~25,000 files) as the workspace of a
# mounted daemon (the release build), through the socket API with curl:
#   1. a fork of the workspace: the first (filled when made), then 5 made of the spare the daemon
#      keeps ready (`forks.spare`): the time the daemon reports (`took_ms`) and the call's wall
#      time, median of 5 (each fork removed before the next)
#   2. 100 forks alive at once: the daemon's RSS, and the disk space they take
#   3. `changes` of a fork with 1,000 changed files (median of 5)
#   4. `merge` of those 1,000 files into the workspace
#   5. agent workloads through the fork's mount against the workspace's mount, warm (hyperfine):
#      rg, git status, find, tar
#   6. the same, cold: each run right after `sync; echo 3 > /proc/sys/vm/drop_caches` (median of 3)
# Prints a table; raw figures stay in bench-data/forks/. Environment: CARGO, WARDFS_BIN,
# FORKS_ALIVE (default 100).
set -euo pipefail

cd "$(dirname "$0")/.."
repo=$PWD
me=forks.sh
# shellcheck source=benches/lib.sh
. benches/lib.sh

need_root "the mount"
need_tools hyperfine:hyperfine jq:jq curl:curl git:git rg:ripgrep python3:python3
alive=${FORKS_ALIVE:-100}

wardfs_binary "$repo"
data=$repo/bench-data
tree=$data/tree
stamp=$data/tree.stamp
want_stamp=$(sha256sum benches/gen_tree.py | cut -d' ' -f1)
mkdir -p "$data"
if ! { [ -d "$tree" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want_stamp" ]; }; then
  log "generating $tree (once; about half a minute)"
  rm -rf "$tree" "$stamp"
  python3 benches/gen_tree.py "$tree"
  echo "$want_stamp" >"$stamp"
fi
out=$data/forks
rm -rf "$out"
mkdir -p "$out"

clear_stale_runs wardfs-forkbench
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wardfs-forkbench.XXXXXX")
echo $$ >"$tmp/owner"
mnt=$tmp/mnt
daemon_pid=""
cleanup() {
  wardfs_kill
  mountpoint -q "$mnt" 2>/dev/null && fusermount3 -u "$mnt" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "copying the tree into the workspace"
mkdir -p "$tmp/zones/workspace" "$tmp/zones/cache" "$mnt" "$tmp/run"
cp -a "$tree/." "$tmp/zones/workspace/"
git -C "$tmp/zones/workspace" init -q 2>/dev/null || true
git -C "$tmp/zones/workspace" add -A
git -C "$tmp/zones/workspace" -c gc.auto=0 -c user.name=b -c user.email=b@b commit -qm base
files=$(find "$tmp/zones/workspace" -type f | wc -l)
bytes=$(du -sb "$tmp/zones/workspace" | cut -f1)
wardfs_config "$tmp/zones"
cat >>"$tmp/config.toml" <<'TOML'
[checkpoints]
auto_quiet_ms = 0
TOML
wardfs_rust_log=warn wardfs_start
sock=$tmp/run/s.sock
api() { curl -sS --fail-with-body --unix-socket "$sock" -H 'content-type: application/json' "$@"; }
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# The first checkpoint of the workspace is the tree's whole hash: taken before, as an agent's
# daemon would have it, so the forks measure what a fork costs on a daemon that has been running.
api -X POST http://w/v1/checkpoints -d '{}' >/dev/null

# The daemon keeps a fork made ahead (a spare, `forks.spare`) once a zone has been forked: the
# first fork is filled when it is made, the next ones take the spare (waited for here, as a fork
# made at an agent's pace finds it ready).
spare_ready() {
  for _ in $(seq 1200); do
    api http://w/v1/forks | jq -e '.spares[] | select(.zone == "workspace" and .ready)' >/dev/null &&
      return 0
    sleep 0.1
  done
  die "the workspace's spare fork was not ready in 120 s"
}
log "1. a fork of the workspace: the first (filled), then 5 made of a spare"
api -X POST http://w/v1/forks -d '{"name":"t0"}' >"$out/fork-0.json"
fork_filled=$(jq .took_ms "$out/fork-0.json")
api -X DELETE http://w/v1/forks/t0 >/dev/null
for i in 1 2 3 4 5; do
  spare_ready
  s=$(date +%s%N)
  api -X POST http://w/v1/forks -d "{\"name\":\"t$i\"}" >"$out/fork-$i.json"
  echo "$(ms_since "$s") $(jq .took_ms "$out/fork-$i.json") $(jq .spare "$out/fork-$i.json")" >>"$out/fork-times.txt"
  api -X DELETE "http://w/v1/forks/t$i" >/dev/null
done
grep -q ' false$' "$out/fork-times.txt" && die "a fork after the first was not made of a spare"
fork_wall=$(cut -d' ' -f1 "$out/fork-times.txt" | median)
fork_daemon=$(cut -d' ' -f2 "$out/fork-times.txt" | median)
linked=$(jq .linked "$out/fork-0.json")

log "2. $alive forks alive at once"
rss_before=$(awk '/VmRSS/ { print $2 }' "/proc/$daemon_pid/status")
disk_before=$(df -k --output=used "$tmp" | tail -1)
s=$(date +%s%N)
for i in $(seq "$alive"); do
  api -X POST http://w/v1/forks -d "{\"name\":\"many$i\"}" >/dev/null
done
many_ms=$(ms_since "$s")
rss_after=$(awk '/VmRSS/ { print $2 }' "/proc/$daemon_pid/status")
disk_after=$(df -k --output=used "$tmp" | tail -1)
ls "$mnt/forks" | wc -l >"$out/listed.txt"
for i in $(seq "$alive"); do api -X DELETE "http://w/v1/forks/many$i" >/dev/null; done

log "3. changes of 1,000 changed files (5 runs)"
api -X POST http://w/v1/forks -d '{"name":"work"}' >/dev/null
(cd "$tmp/zones/workspace" && find . -type f -name '*.rs' | sort | sed -n 1,1000p) >"$tmp/changed.txt"
while read -r p; do echo "// changed in the fork" >>"$mnt/forks/work/${p#./}"; done <"$tmp/changed.txt"
for _ in 1 2 3 4 5; do
  s=$(date +%s%N)
  api "http://w/v1/forks/work/changes" >"$out/changes.json"
  ms_since "$s" >>"$out/changes-times.txt"
done
changes_ms=$(median <"$out/changes-times.txt")
changed=$(jq '.files | length' "$out/changes.json")

log "4. merge of those 1,000 files"
s=$(date +%s%N)
api -X POST http://w/v1/forks/work/merge -d '{}' >"$out/merge.json"
merge_ms=$(ms_since "$s")
merged=$(jq '.changed | length' "$out/merge.json")

log "5. agent workloads: the fork's mount against the workspace's mount (warm)"
api -X POST http://w/v1/forks -d '{"name":"agent"}' >/dev/null
ws=$mnt/workspace
fk=$mnt/forks/agent
hyperfine --warmup 2 --runs 10 --export-json "$out/agent.json" \
  "rg -n -F 'unsafe impl' $ws >/dev/null || true" "rg -n -F 'unsafe impl' $fk >/dev/null || true" \
  "git -C $ws status --porcelain >/dev/null" "git -C $fk status --porcelain >/dev/null" \
  "find $ws -type f -printf '%s\n' >/dev/null" "find $fk -type f -printf '%s\n' >/dev/null" \
  "tar -cf /dev/null -C $ws ." "tar -cf /dev/null -C $fk ." >/dev/null
log "6. the same, cold: each run right after sync and drop_caches (the kernel forgets the mount's entries and pages)"
hyperfine --prepare 'sync; echo 3 >/proc/sys/vm/drop_caches' --runs 3 --export-json "$out/agent-cold.json" \
  "rg -n -F 'unsafe impl' $ws >/dev/null || true" "rg -n -F 'unsafe impl' $fk >/dev/null || true" \
  "git -C $ws status --porcelain >/dev/null" "git -C $fk status --porcelain >/dev/null" \
  "find $ws -type f -printf '%s\n' >/dev/null" "find $fk -type f -printf '%s\n' >/dev/null" \
  "tar -cf /dev/null -C $ws ." "tar -cf /dev/null -C $fk ." >/dev/null
wardfs_stop

row() { jq -r --argjson i "$1" '.results[$i].median * 1000' "$out/${2:-agent}.json"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
verdict() { awk -v v="$1" -v t="$2" 'BEGIN { print (v <= t) ? "met" : "MISSED" }'; }
printf '\nwardfs forks benchmark, %s\n' "$(date -u +%Y-%m-%dT%H:%MZ)"
printf 'tree: %s files, %s MB (benches/gen_tree.py, a git work tree); %s cores; ext4, no reflinks\n\n' \
  "$files" "$((bytes / 1000000))" "$(nproc)"
printf '| measure | figure | target | |\n|---|---|---|---|\n'
printf '| fork of the workspace, in the daemon (made of a spare; median of 5; %s files) | %s ms | < 10 ms | %s |\n' \
  "$linked" "$fork_daemon" "$(verdict "$fork_daemon" 10)"
printf '| fork of the workspace, the API call (median of 5) | %s ms | | |\n' "$fork_wall"
printf '| the first fork of the workspace (no spare yet: %s files linked then) | %s ms | | |\n' \
  "$linked" "$fork_filled"
printf '| %s forks made one after another | %s ms in all | | |\n' "$alive" "$many_ms"
printf '| daemon RSS with %s forks alive | %s MB (%s MB before) | < 200 MB | %s |\n' \
  "$alive" "$((rss_after / 1024))" "$((rss_before / 1024))" "$(verdict "$((rss_after / 1024))" 200)"
printf '| disk used by %s forks | %s MB | | |\n' "$alive" "$(((disk_after - disk_before) / 1024))"
printf '| changes of a fork with %s changed files (median of 5) | %s ms | < 50 ms | %s |\n' \
  "$changed" "$changes_ms" "$(verdict "$changes_ms" 50)"
printf '| merge of %s changed files | %s ms | < 1,000 ms | %s |\n' \
  "$merged" "$merge_ms" "$(verdict "$merge_ms" 1000)"
for run in agent:warm agent-cold:cold; do
  for w in "rg -F:0" "git status:2" "find:4" "tar:6"; do
    name=${w%%:*} i=${w##*:}
    a=$(row "$i" "${run%%:*}") b=$(row $((i + 1)) "${run%%:*}")
    printf '| %s, %s: workspace mount %.0f ms, fork mount %.0f ms | fork/workspace %s | ≤ 1.10 | %s |\n' \
      "$name" "${run##*:}" "$a" "$b" "$(ratio "$b" "$a")" "$(verdict "$(ratio "$b" "$a")" 1.10)"
  done
done
