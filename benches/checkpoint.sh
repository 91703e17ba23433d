#!/usr/bin/env bash
# Checkpoint benchmark (issue 13): bash benches/checkpoint.sh   (or: make bench-checkpoint)
#
# On a copy of the generated tree (benches/gen_tree.py, ~25,000 files, ~140 MB) as the workspace of
# a daemon (the release build, no mount), measured with hyperfine through the `wardfs` CLI (so a
# process start is in every figure) against git on another copy of the same tree, in the same run:
#   1. the first checkpoint              vs `git add -A && git write-tree` (fresh index each run)
#   2. a checkpoint after one changed file (target: under 30 ms)
#   3. a restore of one file             (target: under 20 ms)
#   4. a restore of the whole tree after 1,000 changed files vs `git checkout -f` of the same change
#   5. how much 100 checkpoints that each change one 4 KiB file grow the store (target: < 2 MB)
# Prints a table with ratios; the raw hyperfine exports stay in bench-data/checkpoint/.
#
# Environment: CARGO (default cargo).
set -euo pipefail

cd "$(dirname "$0")/.."
repo=$PWD
cargo=${CARGO:-cargo}

log() { printf '\n== %s\n' "$*" >&2; }
die() { printf 'checkpoint.sh: %s\n' "$*" >&2; exit 1; }

for t in hyperfine git python3 jq; do
  command -v "$t" >/dev/null 2>&1 || die "missing $t; install it with: apt-get install $t"
done

log "building (release)"
"$cargo" build --release --bin wardfs
bin=$repo/target/release/wardfs

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
out=$data/checkpoint
rm -rf "$out"
mkdir -p "$out"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/wardfs-cpbench.XXXXXX")
daemon_pid=""
cleanup() {
  if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
    kill "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "copying the tree twice (wardfs's workspace, git's work tree)"
mkdir -p "$tmp/ws" "$tmp/git" "$tmp/run"
cp -a "$tree/." "$tmp/ws/"
rm -rf "$tmp/ws/.git"
cp -a "$tmp/ws/." "$tmp/git/"
files=$(find "$tmp/ws" -type f | wc -l)
bytes=$(du -sb "$tmp/ws" | cut -f1)

cat >"$tmp/config.toml" <<EOF
state_dir = '$tmp/state'
socket = '$tmp/run/s.sock'

[zones]
mode = "direct"

[zones.workspace]
dir = '$tmp/ws'

[zones.cache]
dir = '$tmp/cache'

# No automatic checkpoint between the changes and a restore: each restore checkpoints the
# changed files itself (reads, hashes and stores them), the case that costs most.
[checkpoints]
auto_quiet_ms = 0
EOF
mkdir -p "$tmp/cache"
RUST_LOG=warn "$bin" serve --config "$tmp/config.toml" --no-mount 2>"$tmp/daemon.log" &
daemon_pid=$!
for _ in $(seq 100); do [ -S "$tmp/run/s.sock" ] && break; sleep 0.05; done
[ -S "$tmp/run/s.sock" ] || die "the daemon did not start: $(cat "$tmp/daemon.log")"
sf() { "$bin" --socket "$tmp/run/s.sock" "$@"; }
export -f sf 2>/dev/null || true
export bin tmp

median() { jq '.results[0].median * 1000' "$1"; }

# 1. The first checkpoint (once: the store is new) against git writing every object of the same
# tree into an empty object store (objects and index removed before each run).
log "first checkpoint vs git add -A && git write-tree"
git -C "$tmp/git" init -q
# No `git gc --auto` detaching a repack of the 25,000 loose objects behind later measurements.
git -C "$tmp/git" config gc.auto 0
start=$(date +%s%N)
sf --json checkpoint -m first >"$out/first.json"
first_ms=$(( ($(date +%s%N) - start) / 1000000 ))
hyperfine --runs 3 --export-json "$out/git-add.json" \
  --prepare "rm -rf '$tmp/git/.git/index' '$tmp/git/.git/objects'; mkdir -p '$tmp/git/.git/objects'" \
  "git -C '$tmp/git' add -A && git -C '$tmp/git' write-tree" >/dev/null
git_add_ms=$(median "$out/git-add.json")

# 2. A checkpoint after one changed file.
log "checkpoint after one changed file"
f=$(cd "$tmp/ws" && find . -type f -name '*.rs' -print -quit)
hyperfine --warmup 2 --runs 20 --export-json "$out/one.json" \
  --prepare "'$bin' --socket '$tmp/run/s.sock' write /workspace/${f#./} \"\$(date +%N)\"" \
  "'$bin' --socket '$tmp/run/s.sock' checkpoint" >/dev/null
one_ms=$(median "$out/one.json")
noop_start=$(date +%s%N)
sf --json checkpoint >/dev/null
noop_ms=$(( ($(date +%s%N) - noop_start) / 1000000 ))

# 3. A restore of one file: change it, restore it from the last checkpoint.
log "restore of one file"
base=$(sf --json checkpoint -m base | jq .id)
hyperfine --warmup 2 --runs 20 --export-json "$out/restore-one.json" \
  --prepare "'$bin' --socket '$tmp/run/s.sock' write /workspace/${f#./} \"\$(date +%N)\"" \
  "'$bin' --socket '$tmp/run/s.sock' restore $base /workspace/${f#./}" >/dev/null
restore_one_ms=$(median "$out/restore-one.json")

# 4. The whole tree after 1,000 changed files, against git checkout of the same change.
log "restore of the whole tree after 1,000 changed files vs git checkout"
git -C "$tmp/git" -c user.name=b -c user.email=b@b commit -qm base
(cd "$tmp/ws" && find . -type f -name '*.rs' | sort | sed -n 1,1000p) >"$tmp/changed.txt"
# New content in every round (the round's number), so that each pre-restore checkpoint stores
# 1,000 blobs the store does not hold yet.
change_all() {
  while read -r p; do echo "// changed $2" >>"$1/$p"; done <"$tmp/changed.txt"
}
export -f change_all
restore_runs=()
git_runs=()
for round in 1 2 3; do
  # Changed beside wardfs, as an editor or a build would: the watcher journals them once they
  # have been quiet for 250 ms.
  change_all "$tmp/ws" "$round"
  sleep 2
  s=$(date +%s%N)
  sf --json restore "$base" >"$out/restore-all.json"
  restore_runs+=($(( ($(date +%s%N) - s) / 1000000 )))
  change_all "$tmp/git" "$round"
  s=$(date +%s%N)
  git -C "$tmp/git" checkout -q -f HEAD -- .
  git_runs+=($(( ($(date +%s%N) - s) / 1000000 )))
done
restored=$(jq '.restored | length' "$out/restore-all.json")
restore_all_ms=$(printf '%s\n' "${restore_runs[@]}" | sort -n | sed -n 2p)
git_checkout_ms=$(printf '%s\n' "${git_runs[@]}" | sort -n | sed -n 2p)

# 5. Store growth over 100 checkpoints that each change one 4 KiB file.
log "100 checkpoints of one changed 4 KiB file"
before_kb=$(du -sk "$tmp/state/checkpoints.git" | cut -f1)
for i in $(seq 100); do
  sf write /workspace/grow.txt "$(head -c 3072 /dev/urandom | base64 -w 0)" >/dev/null
  sf checkpoint >/dev/null
done
after_kb=$(du -sk "$tmp/state/checkpoints.git" | cut -f1)
growth_kb=$((after_kb - before_kb))

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f×", a / b }'; }
verdict() { awk -v v="$1" -v t="$2" 'BEGIN { print (v <= t) ? "met" : "MISSED" }'; }
printf '\nwardfs checkpoint benchmark, %s\n' "$(date -u +%Y-%m-%dT%H:%MZ)"
printf 'tree: %s files, %s MB (benches/gen_tree.py); %s cores; through the CLI (a process start in each figure)\n\n' \
  "$files" "$((bytes / 1000000))" "$(nproc)"
printf '| measure | wardfs | peer | ratio | target | |\n|---|---|---|---|---|---|\n'
printf '| first checkpoint | %s ms | git add -A && write-tree: %.0f ms | %s | ≤ 1.5× | %s |\n' \
  "$first_ms" "$git_add_ms" "$(ratio "$first_ms" "$git_add_ms")" \
  "$(verdict "$(awk -v a="$first_ms" -v b="$git_add_ms" 'BEGIN{print a/b}')" 1.5)"
printf '| checkpoint after one changed file (median of 20) | %.1f ms | | | < 30 ms | %s |\n' \
  "$one_ms" "$(verdict "$one_ms" 30)"
printf '| checkpoint with nothing changed | %s ms | | | | |\n' "$noop_ms"
printf '| restore of one file (median of 20) | %.1f ms | | | < 20 ms | %s |\n' \
  "$restore_one_ms" "$(verdict "$restore_one_ms" 20)"
printf '| restore of the whole tree after 1,000 changed files (median of 3; %s restored) | %s ms | git checkout -f: %s ms | %s | ≤ 1.5× | %s |\n' \
  "$restored" "$restore_all_ms" "$git_checkout_ms" "$(ratio "$restore_all_ms" "$git_checkout_ms")" \
  "$(verdict "$(awk -v a="$restore_all_ms" -v b="$git_checkout_ms" 'BEGIN{print a/b}')" 1.5)"
printf '| store growth, 100 checkpoints of one changed 4 KiB file | %s KB | | | < 2,000 KB | %s |\n' \
  "$growth_kb" "$(verdict "$growth_kb" 2000)"
