#!/usr/bin/env bash
# wardfs agent-workload benchmark (issue 14): bash benches/agent.sh   (or: make bench-agent)
#
# What agents do in a workspace (search, git status, walk, read everything, unpack and delete a
# dependency tree), through three sides measured in the same run over the same backing directory:
#   native  the backing directory itself: bench-data/agent/data/zones/workspace
#   bindfs  Debian's bindfs (C, libfuse) mounted over it
#   wardfs  `wardfs serve` (the release build) with a private config: [zones] mode = "sandboxed",
#           root = bench-data/agent/data/zones, so the backing directory is its /workspace zone;
#           the I/O mode of WARDFS_AGENT_IO (the daemon's default, cached, unless set; the daemon
#           logs which)
# Trees, inside the workspace, built once and reused while their inputs stay the same:
#   registry  this machine's cargo registry sources ($CARGO_HOME/registry/src/*/*), crates copied in
#             name order up to WARDFS_AGENT_MAX_FILES files; `git init`, one commit (fixed author
#             and dates), `git gc` (packed, as a clone is)
#   gen       benches/gen_tree.py's tree (the one fuse.sh and run.sh use), the same git treatment
#   In each tree one tracked .rs file is changed (a line appended) at the start of every run.
# Workloads (WARDFS_AGENT_ONLY, comma-separated; `rg` means both rg ones), each over each tree:
#   rg-literal  rg -n -F 'unsafe impl' TREE
#   rg-regex    rg -n 'impl<[^>]*> (Drop|Clone) for' TREE
#   git         git -C TREE status --porcelain   (no monitor, no untracked cache: -c core.fsmonitor=false
#               -c core.untrackedCache=false, on every side)
#   git-fsm     the same `git status` with wardfs's file-system monitor on the wardfs side (-c
#               core.fsmonitor='WARDFS --socket S git fsmonitor-hook', core.untrackedCache=true, what
#               `wardfs git watch` sets); native and bindfs run the plain `git` command, the baseline.
#               Two rows: git-fsm, whose cold run is the first after a restart of the daemon (a new
#               instance: the monitor answers "everything" and git looks at every file), and
#               git-fsm-live, whose cold run follows drop_caches with the daemon kept running (its
#               token still good: git looks at what the journal names). WARDFS_AGENT_ONLY=git-fsm
#               means both
#   find        find TREE -type f -printf '%s\n'
#   tar         tar -C TREE -cf - .   (into hyperfine's pipe: GNU tar reads no file contents when its
#               archive is /dev/null, so `tar -cf /dev/null .` would only stat the files)
#   untar       (once, not per tree) a tarball of registry crates with ~4,179 entries, made once on
#               the native disk, unpacked into the workspace, then `rm -rf` of what it unpacked.
#               Unpacked into untar-fs/ in the workspace: a fresh journaled ext4 (a loop-mounted
#               image made at each start; WARDFS_AGENT_UNTAR_ON=backing: the backing dir itself).
#               On an ext4 without a journal (as this machine's root may be) the inode allocator
#               skips every inode freed in the last 60-300 s, one by one, so each untar + rm -rf
#               makes the next side's untar slower (up to 10x, native included): the figures
#               then measure the order of the sides, not the sides
# Every command writes into a pipe (hyperfine --output=pipe); git runs with no global/system config.
#
# warm      hyperfine -N --warmup W --runs R per side, after one check run whose output must be the
#           same as native's (rg matches, git status, file sizes and names, tar listing); also the
#           CPU time the wardfs and bindfs daemons use per run (from /proc, warmup runs included)
# cold      the first run after a fresh mount (wardfs restarted, bindfs remounted) and right after
#           `sync; echo 3 > /proc/sys/vm/drop_caches`, on all three sides alike (native: the drop
#           only); median of WARDFS_AGENT_COLD_REPS. For git, a `git status` through the same side,
#           on the mount before, refreshes the index first (the side's own inode numbers are in it).
# requests  the FUSE requests the daemons receive, by opcode, during the cold and then one warm run
#           of each workload: wardfs with RUST_LOG=fuser=debug, bindfs with -d (separate, final pass;
#           logging slows both, so this pass is not timed)
#
# wardfs is mounted only while it is measured (its inotify watcher would react to what native and
# bindfs runs change in the backing dir), and measured only when idle: after its start, and after a
# workload that changes files (git writes its index, untar), the script waits until the daemon has
# used no CPU for a few seconds (its automatic checkpoint runs 2 s after the last change); how long
# that took is in settle.tsv.
#
# Prints a table of medians and ratios (wardfs/native, bindfs/native) with the issue's goals, and the
# requests by opcode. Raw hyperfine JSON and the rest: bench-data/agent/results/ (quick runs:
# bench-data/agent/results-quick/).
#
# Needs root (drop_caches, kernel passthrough) and: hyperfine, rg, git, bindfs, fusermount3, tar,
# python3. Installs nothing; names the Debian package of what is missing.
#
# Environment:
#   WARDFS_AGENT_QUICK=1       a small version for checking the script: small trees (data-quick/),
#                              1 warmup + 2 runs, 1 cold run, ~400-entry tarball
#   WARDFS_AGENT_ONLY          comma-separated subset of rg-literal,rg-regex,rg,git,git-fsm,
#                              git-fsm-live,find,tar,untar
#   WARDFS_AGENT_TREES         comma-separated subset of registry,gen (default both)
#   WARDFS_AGENT_RUNS / WARDFS_AGENT_WARMUP   hyperfine runs and warmup runs (default 5 / 2)
#   WARDFS_AGENT_COLD_REPS     cold runs per side and workload (default 3; the median is reported)
#   WARDFS_AGENT_REQUESTS=0    skip the requests pass
#   WARDFS_AGENT_MAX_FILES     cap of the registry tree, in files (default 26000)
#   WARDFS_AGENT_UNTAR_ENTRIES entries in the untar tarball (default 4179; quick 400)
#   WARDFS_AGENT_UNTAR_ON      image (default: a fresh journaled ext4 image, see untar) or backing
#   WARDFS_AGENT_AUTO_CHECKPOINT_MS  [checkpoints] auto_quiet_ms for the daemon (0: off; default:
#                              the daemon's default)
#   WARDFS_AGENT_TRANSPORT     [fuse] transport: io_uring or device (default: the daemon's, io_uring)
#   WARDFS_AGENT_PREFETCH      [fuse] prefetch: true or false (default: the daemon's, true)
#   WARDFS_AGENT_IO            zones.<zone>.io for both zones: cached or passthrough (default: the
#                              daemon's, cached)
#   WARDFS_BENCH_STRICT=1      exit 1 when a goal is missed (default: only a wrong result fails)
#   WARDFS_BIN                 use this wardfs binary instead of building target/release/wardfs
#   CARGO                      cargo command (default cargo)
set -Eeuo pipefail
shopt -s inherit_errexit
trap 'printf "agent.sh: line %s: %s failed (exit %s)\n" "$LINENO" "$BASH_COMMAND" "$?" >&2' ERR

cd "$(dirname "$0")/.."
repo=$PWD
me=agent.sh
# shellcheck source=benches/lib.sh
. benches/lib.sh

quick=${WARDFS_AGENT_QUICK:-0}
if [ "$quick" = 1 ]; then
  runs=${WARDFS_AGENT_RUNS:-2} warmup=${WARDFS_AGENT_WARMUP:-1} cold_reps=${WARDFS_AGENT_COLD_REPS:-1}
  max_files=${WARDFS_AGENT_MAX_FILES:-600} untar_entries=${WARDFS_AGENT_UNTAR_ENTRIES:-400}
  gen_args=(--files 1500 --mib 8)
  data=$repo/bench-data/agent/data-quick results=$repo/bench-data/agent/results-quick
else
  runs=${WARDFS_AGENT_RUNS:-5} warmup=${WARDFS_AGENT_WARMUP:-2} cold_reps=${WARDFS_AGENT_COLD_REPS:-3}
  max_files=${WARDFS_AGENT_MAX_FILES:-26000} untar_entries=${WARDFS_AGENT_UNTAR_ENTRIES:-4179}
  gen_args=()
  data=$repo/bench-data/agent/data results=$repo/bench-data/agent/results
fi
only=""
for w in $(tr ',' ' ' <<<"${WARDFS_AGENT_ONLY:-rg,git,git-fsm,find,tar,untar}"); do
  case $w in
    rg) only+=",rg-literal,rg-regex" ;;
    git-fsm) only+=",git-fsm,git-fsm-live" ;;
    rg-literal | rg-regex | git | git-fsm-live | find | tar | untar) only+=",$w" ;;
    *) die "unknown workload '$w' in WARDFS_AGENT_ONLY (rg-literal, rg-regex, rg, git, git-fsm, git-fsm-live, find, tar, untar)" ;;
  esac
done
only=${only#,}
trees_wanted=${WARDFS_AGENT_TREES:-registry,gen}
requests=${WARDFS_AGENT_REQUESTS:-1}
strict=${WARDFS_BENCH_STRICT:-0}
workloads=(rg-literal rg-regex git git-fsm git-fsm-live find tar)
want() { [[ ",$only," == *",$1,"* ]]; }
for t in $(tr ',' ' ' <<<"$trees_wanted"); do
  [[ $t == registry || $t == gen ]] || die "unknown tree '$t' in WARDFS_AGENT_TREES"
done

# --- tools ---------------------------------------------------------------------------------------
need_root "drop_caches, kernel FUSE passthrough"
need_tools hyperfine:hyperfine rg:ripgrep git:git bindfs:bindfs fusermount3:fuse3 tar:tar \
  python3:python3 mountpoint:util-linux
wardfs_binary "$repo"

# git as an agent's would be, minus whatever this machine's user configured.
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
export GIT_AUTHOR_NAME=wardfs-bench GIT_AUTHOR_EMAIL=bench@localhost
export GIT_COMMITTER_NAME=wardfs-bench GIT_COMMITTER_EMAIL=bench@localhost
export GIT_AUTHOR_DATE='2026-01-01T00:00:00Z' GIT_COMMITTER_DATE='2026-01-01T00:00:00Z'
export LC_ALL=C

# --- directories ---------------------------------------------------------------------------------
zones=$data/zones
ws=$zones/workspace # the backing dir: wardfs's /workspace, native, bindfs's source
tarball=$data/deps.tar
mkdir -p "$ws" "$zones/cache" "$results"
[[ $ws =~ ^[A-Za-z0-9/._+-]+$ ]] || die "the repository path $repo has characters the commands here do not quote"
rm -f "$results"/*.json "$results"/*.tsv "$results"/*.txt "$results"/*.log
untar_on=${WARDFS_AGENT_UNTAR_ON:-image}
case $untar_on in
  image) scratch=untar-fs/untar-scratch ;;
  backing) scratch=untar-scratch ;;
  *) die "WARDFS_AGENT_UNTAR_ON=$untar_on: must be image or backing" ;;
esac
mountpoint -q "$ws/untar-fs" 2>/dev/null && umount "$ws/untar-fs"
rm -rf "$ws/untar-scratch" "$ws/untar-fs"

# Mount points live in a temp dir that records its owner: a run killed with SIGKILL leaves mounts
# behind, which the next run clears (only when their owner is gone).
clear_stale_runs wardfs-agent-bench
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wardfs-agent-bench.XXXXXX")
echo $$ >"$tmp/owner"
[[ $tmp =~ ^[A-Za-z0-9/._+-]+$ ]] || die "TMPDIR=$TMPDIR has characters the commands here do not quote"
mnt=$tmp/mnt
bind=$tmp/bind
mkdir -p "$mnt" "$bind" "$tmp/state" "$tmp/run"

daemon_pid=""
bindfs_pid=""
sampler_pid=""
cleanup() {
  local rc=$?
  set +e
  trap - ERR
  cp "$tmp/daemon.log" "$results/daemon.log" 2>/dev/null
  [ -z "$sampler_pid" ] || kill "$sampler_pid" 2>/dev/null
  # bindfs first (it serves the backing dir only), then the daemon (SIGTERM: it unmounts itself).
  mountpoint -q "$bind" && fusermount3 -u "$bind"
  if [ -n "$bindfs_pid" ]; then
    kill "$bindfs_pid" 2>/dev/null
    wait "$bindfs_pid" 2>/dev/null
  fi
  wardfs_kill
  mountpoint -q "$mnt" && fusermount3 -u -z "$mnt"
  mountpoint -q "$bind" && fusermount3 -u -z "$bind"
  rm -rf "$ws/untar-scratch"
  mountpoint -q "$ws/untar-fs" && umount "$ws/untar-fs"
  rm -rf "$ws/untar-fs" "$data/untar.img"
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the trees -----------------------------------------------------------------------------------
# git_snapshot DIR: a repository of everything in DIR, one commit, packed.
git_snapshot() {
  rm -rf "$1/.git"
  git -C "$1" init -q -b main
  git -C "$1" add -A
  git -C "$1" -c gc.auto=0 commit -q -m "snapshot of $(basename "$1")" # no background gc
  git -C "$1" gc -q
  git -C "$1" ls-files -- '*.rs' | sed -n 1p >"$data/$(basename "$1").changed" # not head: SIGPIPE
  [ -s "$data/$(basename "$1").changed" ] || die "$1 has no tracked .rs file to change"
}
# reset_tree DIR: the tree as committed, plus the one changed file.
reset_tree() {
  local d=$1 f
  f=$(cat "$data/$(basename "$d").changed")
  git -C "$d" checkout -q -- .
  git -C "$d" clean -fdq
  printf '// wardfs agent benchmark: the one changed file\n' >>"$d/$f"
  [ "$(git -C "$d" status --porcelain)" = " M $f" ] ||
    die "$d: git status should show only $f as changed: $(git -C "$d" status --porcelain | head -5)"
}

stamp_of() { printf '%s\n' "$@" | sha256sum | cut -d' ' -f1; }
tree_version=1 # bump when the trees change shape

# The cargo registry's sources: crates in name order, each once, up to $max_files files.
registry_src=${CARGO_HOME:-$HOME/.cargo}/registry/src
crates=()
declare -A crate_dir=()
if [[ ",$trees_wanted," == *,registry,* ]] || want untar; then
  total=0
  while IFS= read -r d; do
    c=$(basename "$d")
    [ -z "${crate_dir[$c]:-}" ] || continue
    n=$(find "$d" -type f | wc -l)
    ((total + n <= max_files)) || break
    crate_dir[$c]=$d
    crates+=("$c")
    total=$((total + n))
  done < <(find "$registry_src" -mindepth 2 -maxdepth 2 -type d 2>/dev/null | awk -F/ '{print $NF "\t" $0}' |
    sort -t$'\t' -k1,1 | cut -f2)
  ((${#crates[@]})) || die "no crate sources under $registry_src (run cargo fetch in a Rust project first)"
  want_stamp=$(stamp_of "$tree_version" "${crates[@]}")
  if [ "$(cat "$data/registry.stamp" 2>/dev/null)" != "$want_stamp" ] || [ ! -d "$ws/registry/.git" ] ||
    [ ! -s "$data/registry.changed" ]; then
    log "copying ${#crates[@]} crates ($total files) from $registry_src into $ws/registry (once)"
    rm -rf "$ws/registry" "$data/registry.stamp" "$tarball" "$data/deps.stamp"
    mkdir -p "$ws/registry"
    for c in "${crates[@]}"; do
      cp -a "${crate_dir[$c]}" "$ws/registry/$c"
    done
    git_snapshot "$ws/registry"
    echo "$want_stamp" >"$data/registry.stamp"
  fi
fi

# The generated tree: benches/gen_tree.py's, shared with fuse.sh and run.sh (full runs).
if [[ ",$trees_wanted," == *,gen,* ]]; then
  if [ "$quick" = 1 ]; then gen_src=$data/gen-src; else gen_src=$repo/bench-data/tree; fi
  gen_stamp=$(sha256sum benches/gen_tree.py | cut -d' ' -f1)
  if [ "$quick" = 1 ]; then gen_stamp=$(stamp_of "$gen_stamp" "${gen_args[@]}"); fi
  if [ ! -d "$gen_src" ] || [ "$(cat "$gen_src.stamp" 2>/dev/null)" != "$gen_stamp" ]; then
    log "generating $gen_src (once)"
    rm -rf "$gen_src" "$gen_src.stamp"
    python3 benches/gen_tree.py "$gen_src" "${gen_args[@]}"
    echo "$gen_stamp" >"$gen_src.stamp"
  fi
  want_stamp=$(stamp_of "$tree_version" "$gen_stamp")
  if [ "$(cat "$data/gen.stamp" 2>/dev/null)" != "$want_stamp" ] || [ ! -d "$ws/gen/.git" ] ||
    [ ! -s "$data/gen.changed" ]; then
    log "copying $gen_src into $ws/gen, git init + one commit (once)"
    rm -rf "$ws/gen" "$data/gen.stamp"
    cp -a "$gen_src" "$ws/gen"
    git_snapshot "$ws/gen"
    echo "$want_stamp" >"$data/gen.stamp"
  fi
fi

# The untar tarball: whole crates from the registry copy, in name order, skipping those that would
# overshoot, until it holds about $untar_entries entries.
if want untar; then
  picked=()
  total=0
  for c in "${crates[@]}"; do
    n=$(find "$ws/registry/$c" | wc -l)
    ((total + n <= untar_entries)) || continue
    picked+=("$c")
    total=$((total + n))
  done
  ((${#picked[@]})) || die "no crate small enough for a $untar_entries-entry tarball"
  want_stamp=$(stamp_of "$(cat "$data/registry.stamp")" "${picked[@]}")
  if [ ! -f "$tarball" ] || [ "$(cat "$data/deps.stamp" 2>/dev/null)" != "$want_stamp" ]; then
    log "making $tarball: ${#picked[@]} crates, $total entries (once)"
    tar -cf "$tarball" -C "$ws/registry" "${picked[@]}"
    echo "$want_stamp" >"$data/deps.stamp"
  fi
fi

trees=()
for t in registry gen; do
  [[ ",$trees_wanted," == *,$t,* ]] || continue
  trees+=("$t")
  reset_tree "$ws/$t"
done
# The mount refuses to open multiply-linked files (allow_hardlinks = false); the trees have none.
[ -z "$(find "$ws" -type f -links +1 -print -quit)" ] || die "$ws holds hard-linked files"
# The untar directory's parent is an Orlov "top directory" (chattr +T), as fuse.sh's metadata dir:
# on ext4 without a journal, creating files right after deleting as many otherwise makes the
# allocator scan the inodes just freed, and the untar runs slow each other down.
chattr +T "$ws" 2>/dev/null || true

# The untar workload's file system: a fresh journaled ext4 in the workspace (see untar above).
if want untar && [ "$untar_on" = image ]; then
  need_tools mkfs.ext4:e2fsprogs
  rm -f "$data/untar.img"
  truncate -s 2G "$data/untar.img"
  mkfs.ext4 -q -F -O has_journal "$data/untar.img"
  mkdir -p "$ws/untar-fs"
  mount -o loop "$data/untar.img" "$ws/untar-fs"
fi

# --- sides ---------------------------------------------------------------------------------------
wardfs_config "$zones"
io=${WARDFS_AGENT_IO:-}
case "$io" in
  '') ;;
  passthrough | cached)
    printf '\n[zones.cache]\nio = "%s"\n\n[zones.workspace]\nio = "%s"\n' "$io" "$io" >>"$tmp/config.toml"
    ;;
  *) die "WARDFS_AGENT_IO=$io: must be passthrough or cached" ;;
esac
transport=${WARDFS_AGENT_TRANSPORT:-}
prefetch=${WARDFS_AGENT_PREFETCH:-}
printf '\n[fuse]\n' >>"$tmp/config.toml"
case "$transport" in
  '') ;;
  io_uring | device) printf 'transport = "%s"\n' "$transport" >>"$tmp/config.toml" ;;
  *) die "WARDFS_AGENT_TRANSPORT=$transport: must be io_uring or device" ;;
esac
case "$prefetch" in
  '') ;;
  true | false) printf 'prefetch = %s\n' "$prefetch" >>"$tmp/config.toml" ;;
  *) die "WARDFS_AGENT_PREFETCH=$prefetch: must be true or false" ;;
esac
quiet_ms=2000 # the daemon's default auto_quiet_ms
if [ -n "${WARDFS_AGENT_AUTO_CHECKPOINT_MS:-}" ]; then
  quiet_ms=$WARDFS_AGENT_AUTO_CHECKPOINT_MS
  printf '\n[checkpoints]\nauto_quiet_ms = %s\n' "$quiet_ms" >>"$tmp/config.toml"
fi
start_idle=2                               # idle seconds after a start
write_idle=$(((quiet_ms + 999) / 1000 + 2)) # after a workload that changes files

bindfs_start() { # [debug]
  [ -z "$bindfs_pid" ] || return 0
  if [ "${1:-}" = debug ]; then
    bindfs -d "$ws" "$bind" 2>>"$tmp/bindfs-debug.log" &
  else
    bindfs -f "$ws" "$bind" 2>>"$tmp/bindfs.log" &
  fi
  bindfs_pid=$!
  echo "$bindfs_pid" >"$tmp/bindfs.pid"
  for _ in $(seq 200); do
    mountpoint -q "$bind" && stat -f "$bind" >/dev/null 2>&1 && return 0
    kill -0 "$bindfs_pid" 2>/dev/null || die "bindfs exited at start: $(tail -5 "$tmp/bindfs.log")"
    sleep 0.1
  done
  die "bindfs did not mount $bind in 20 s"
}
bindfs_stop() {
  [ -n "$bindfs_pid" ] || return 0
  for _ in $(seq 50); do
    ! mountpoint -q "$bind" || fusermount3 -u "$bind" 2>/dev/null || { sleep 0.1; continue; }
    break
  done
  mountpoint -q "$bind" && fusermount3 -u -z "$bind"
  for _ in $(seq 100); do
    kill -0 "$bindfs_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill "$bindfs_pid" 2>/dev/null || true
  wait "$bindfs_pid" 2>/dev/null || true
  bindfs_pid=""
  rm -f "$tmp/bindfs.pid"
}

# ticks PID: the CPU time process PID (all its threads) has used so far, in clock ticks.
ticks() {
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || {
    echo 0
    return
  }
  s=${s##*) }
  # shellcheck disable=SC2086
  set -- $s
  echo $((${12} + ${13}))
}
# wardfs_settle SECONDS LABEL: waits until the daemon has used (almost) no CPU for SECONDS in a row.
wardfs_settle() {
  [ -n "$daemon_pid" ] || return 0
  local need=$1 idle=0 t0=$SECONDS c0 prev cur
  c0=$(ticks "$daemon_pid")
  prev=$c0
  cur=$c0
  while ((idle < need)); do
    sleep 1
    cur=$(ticks "$daemon_pid")
    if ((cur - prev <= 3)); then idle=$((idle + 1)); else idle=0; fi
    prev=$cur
    if ((SECONDS - t0 > 900)); then
      log "wardfs still busy after 900 s ($2); measuring anyway"
      break
    fi
  done
  printf '%s\t%s\t%s\n' "$2" $((SECONDS - t0 - need)) \
    "$(awk -v t=$((cur - c0)) -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.2f", t / hz}')" \
    >>"$results/settle.tsv"
}
writes() { is_git "$1" || [ "$1" = untar ]; }
is_git() { [[ $1 == git || $1 == git-fsm* ]]; }

# Root of the workspace as side $1 shows it.
declare -A root=([native]=$ws [bindfs]=$bind [wardfs]=$mnt/workspace)
sides=(native bindfs wardfs)

# use SIDE: mounts what SIDE needs; wardfs runs only while it is measured.
use() {
  case $1 in
    native) wardfs_stop ;;
    bindfs) wardfs_stop && bindfs_start ;;
    wardfs) [ -n "$daemon_pid" ] || { wardfs_start && wardfs_settle $start_idle "start"; } ;;
  esac
}
# fresh SIDE: a new mount for SIDE (nothing for native).
fresh() {
  case $1 in
    native) wardfs_stop ;;
    bindfs) wardfs_stop && bindfs_stop && bindfs_start ;;
    wardfs) wardfs_stop && wardfs_start && wardfs_settle $start_idle "start" ;;
  esac
}

# The jobs: TREE:WORKLOAD, untar last (and once).
jobs=()
for t in "${trees[@]}"; do
  for w in "${workloads[@]}"; do
    if want "$w"; then jobs+=("$t:$w"); fi
  done
done
if want untar; then jobs+=("deps:untar"); fi
((${#jobs[@]})) || die "nothing to measure (WARDFS_AGENT_ONLY=$only, WARDFS_AGENT_TREES=$trees_wanted)"

# git without a monitor or an untracked cache, whatever the index holds from another side's run.
plain_git="-c core.fsmonitor=false -c core.untrackedCache=false"
# cmd_of JOB SIDE: the command line (for hyperfine -N and for sh -c alike).
cmd_of() {
  local t=${1%%:*} w=${1#*:} r=${root[$2]}
  local d=$r/$t s=$r/$scratch
  case $w in
    rg-literal) printf '%s' "rg -n -F 'unsafe impl' $d" ;;
    rg-regex) printf '%s' "rg -n 'impl<[^>]*> (Drop|Clone) for' $d" ;;
    git) printf '%s' "git $plain_git -C $d status --porcelain" ;;
    git-fsm | git-fsm-live)
      if [ "$2" = wardfs ]; then
        printf '%s' "git -c 'core.fsmonitor=$bin --socket $tmp/run/s.sock git fsmonitor-hook' -c core.fsmonitorHookVersion=2 -c core.untrackedCache=true -C $d status --porcelain"
      else
        printf '%s' "git $plain_git -C $d status --porcelain"
      fi
      ;;
    find) printf '%s' "find $d -type f -printf '%s\n'" ;;
    tar) printf '%s' "tar -C $d -cf - ." ;;
    untar) printf '%s' "sh -c 'rm -rf $s; mkdir $s && tar -xf $tarball -C $s && rm -rf $s'" ;;
  esac
}
# rg exits 1 when nothing matches (a quick tree may have no match).
hf_ignore() { case ${1#*:} in rg-*) echo -i ;; esac; }

# check JOB SIDE: one run whose (normalised) output must equal native's.
correct=1
check() {
  local job=$1 side=$2 t=${1%%:*} w=${1#*:} r=${root[$2]} out=$tmp/check-${1/:/-}-$2.txt cmd
  cmd=$(cmd_of "$job" "$side")
  case $w in
    rg-*) { sh -c "$cmd" || [ $? = 1 ]; } | sed "s|^$r/$t/||" | sort >"$out" ;;
    git | git-fsm | git-fsm-live) sh -c "$cmd" >"$out" ;;
    # Names too; not .git/index, which a git status through another side may have rewritten.
    find) find "$r/$t" -type f -printf '%s %P\n' | grep -v ' \.git/index$' | sort >"$out" ;;
    tar) sh -c "$cmd" | tar -tvf - | grep -Ev ' \./\.git(/|$)' | sort >"$out" ;;
    untar)
      rm -rf "${r:?}/$scratch"
      mkdir "$r/$scratch"
      tar -xf "$tarball" -C "$r/$scratch"
      find "$r/$scratch" -printf '%y %s %m %P\n' | sort >"$out"
      rm -rf "${r:?}/$scratch"
      ;;
  esac
  local n
  n=$(wc -l <"$out")
  if [ "$side" = native ]; then
    echo "$job native $n lines" >>"$results/check.txt"
  elif cmp -s "$tmp/check-${job/:/-}-native.txt" "$out"; then
    echo "$job $side identical ($n lines)" >>"$results/check.txt"
  else
    correct=0
    echo "$job $side MISMATCH" >>"$results/check.txt"
    printf '  %s: MISMATCH between native and %s; first differences:\n' "$job" "$side" >&2
    diff "$tmp/check-${job/:/-}-native.txt" "$out" | head -5 >&2 || true
  fi
}

# hf NAME JSON CMD ARGS...: hyperfine, one command, its report appended to hyperfine.txt.
hf() {
  local name=$1 json=$2 cmd=$3
  shift 3
  hyperfine -N --style basic --output=pipe --export-json "$json" -n "$name" "$@" "$cmd" \
    >>"$results/hyperfine.txt" 2>&1 || {
    tail -20 "$results/hyperfine.txt" >&2
    die "hyperfine failed: $cmd"
  }
}
median_of() {
  python3 -c 'import json, sys; print("%.3f" % json.load(open(sys.argv[1]))["results"][0]["median"])' "$1"
}

bindfs_start
wardfs_start
passthrough=$(grep -o 'FUSE session started.*' "$tmp/daemon.log" | sed -n '1{s/\x1b\[[0-9;]*m//g;p}')
log "wardfs: ${passthrough:-no 'FUSE session started' line in the daemon log}"
[ -d "$mnt/workspace/${trees[0]:-.}" ] || die "the mount does not show the backing dir"
# Inode numbers of one file as each side reports them (git keeps them in its index).
probe=${trees[0]:-}
if [ -n "$probe" ]; then
  probe=$probe/$(cat "$data/$probe.changed")
  inos="native $(stat -c %i "$ws/$probe"), bindfs $(stat -c %i "$bind/$probe"), wardfs $(stat -c %i "$mnt/workspace/$probe")"
else
  inos=""
fi
wardfs_stop

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
foreign_sampler_start "$$" "$results/foreign.txt"

# --- 1. warm -------------------------------------------------------------------------------------
log "warm: a check run, then hyperfine --warmup $warmup --runs $runs, per side (wardfs mounted last)"
for side in "${sides[@]}"; do
  use "$side"
  for job in "${jobs[@]}"; do
    [ "$side" != wardfs ] || wardfs_settle $start_idle "warm $job"
    check "$job" "$side"
    # The check run may have changed files (git refreshes its index for this side's inode numbers).
    if [ "$side" = wardfs ] && writes "${job#*:}"; then wardfs_settle "$write_idle" "after check $job"; fi
    cmd=$(cmd_of "$job" "$side")
    # The daemon's CPU time per run (warmup runs included), from /proc.
    dpid=""
    if [ "$side" = wardfs ]; then dpid=$daemon_pid; elif [ "$side" = bindfs ]; then dpid=$bindfs_pid; fi
    t0=$([ -z "$dpid" ] || ticks "$dpid")
    # shellcheck disable=SC2046
    hf "$side" "$results/warm-${job/:/-}-$side.json" "$cmd" --warmup "$warmup" --runs "$runs" \
      $(hf_ignore "$job")
    if [ -n "$dpid" ]; then
      printf '%s\t%s\t%s\n' "$job" "$side" "$(awk -v t=$(($(ticks "$dpid") - t0)) -v n=$((warmup + runs)) \
        -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.3f", t / hz / n}')" >>"$results/daemon-cpu.tsv"
    fi
    printf '  %-20s %-7s %8s s\n' "$job" "$side" "$(median_of "$results/warm-${job/:/-}-$side.json")" >&2
    if [ "$side" = wardfs ] && writes "${job#*:}"; then wardfs_settle "$write_idle" "after warm $job"; fi
  done
done
wardfs_stop

# --- 2. cold -------------------------------------------------------------------------------------
log "cold: first run after a fresh mount and drop_caches ($cold_reps per side; sides take turns)"
for rep in $(seq 1 "$cold_reps"); do
  j=0
  for job in "${jobs[@]}"; do
    j=$((j + 1))
    for k in 0 1 2; do
      side=${sides[$(((rep + j + k) % 3))]}
      cmd=$(cmd_of "$job" "$side")
      if is_git "${job#*:}"; then
        fresh "$side"
        sh -c "$cmd" >/dev/null # the index now holds this side's inode numbers
        [ "$side" != wardfs ] || wardfs_settle "$write_idle" "prime $job"
      fi
      if [ "${job#*:}" = git-fsm-live ]; then
        # The daemon keeps running: a second run leaves the index with a token it still vouches
        # for (the first after a start is answered "everything"), then only the caches go.
        sh -c "$cmd" >/dev/null
        [ "$side" != wardfs ] || wardfs_settle "$write_idle" "prime again $job"
      else
        fresh "$side"
      fi
      drop_caches
      # shellcheck disable=SC2046
      hf "$side" "$results/cold-${job/:/-}-$side-$rep.json" "$cmd" --runs 1 $(hf_ignore "$job")
      printf '  %-20s %-7s %8s s  (cold %s)\n' "$job" "$side" \
        "$(median_of "$results/cold-${job/:/-}-$side-$rep.json")" "$rep" >&2
      if [ "$side" = wardfs ] && writes "${job#*:}"; then wardfs_settle "$write_idle" "after cold $job"; fi
    done
  done
done
wardfs_stop

load_end=$(cut -d' ' -f1-3 /proc/loadavg)
kill "$sampler_pid" 2>/dev/null || true
wait "$sampler_pid" 2>/dev/null || true
sampler_pid=""
[ -f "$results/foreign.txt" ] || printf 'foreign_cpu_s=?\nforeign_wall_s=?\nforeign_top=\n' >"$results/foreign.txt"

# --- 3. requests by opcode -----------------------------------------------------------------------
# wait_quiet FILE: until FILE stops growing (the daemons log asynchronous requests, RELEASE and
# FORGET, a moment after the command returns).
wait_quiet() {
  local a b
  a=$(stat -c %s "$1")
  for _ in $(seq 100); do
    sleep 0.3
    b=$(stat -c %s "$1")
    [ "$a" != "$b" ] || return 0
    a=$b
  done
}
# count_run JOB SIDE RUN LOGFILE: runs JOB once through SIDE, counts the requests its daemon logged.
count_run() {
  local job=$1 side=$2 run=$3 logf=$4 cmd idx0 idx1
  cmd=$(cmd_of "$job" "$side")
  : >"$logf"
  idx0=$(stat -c '%i %y' "$ws/${job%%:*}/.git/index" 2>/dev/null || echo -)
  { sh -c "$cmd" || [ $? = 1 ]; } | cat >/dev/null
  idx1=$(stat -c '%i %y' "$ws/${job%%:*}/.git/index" 2>/dev/null || echo -)
  wait_quiet "$logf"
  if is_git "${job#*:}"; then
    if [ "$idx0" = "$idx1" ]; then echo "$job $side $run: index unchanged"; else echo "$job $side $run: index rewritten"; fi \
      >>"$results/git-index.txt"
  fi
  if [ "$side" = wardfs ]; then
    # A run may send no request at all (a warm tar through a cached mount).
    sed 's/\x1b\[[0-9;]*m//g' "$logf" | { grep -oE 'FUSE\( *[0-9]+\) ino 0x[0-9a-f]+ [A-Z_]+' || true; } |
      awk '{print $NF}'
  else
    { grep -oE 'opcode: [A-Z_]+' "$logf" || true; } | awk '{print $2}'
  fi | sed 's/^BATCHFORGET$/BATCH_FORGET/' | sort | uniq -c |
    awk -v j="$job" -v s="$side" -v r="$run" '{printf "%s\t%s\t%s\t%s\t%s\n", j, s, r, $2, $1}' \
      >>"$results/requests.tsv"
}
if [ "$requests" = 1 ]; then
  log "requests by opcode: wardfs (RUST_LOG=fuser=debug) and bindfs (-d), a cold run then a warm run"
  for side in wardfs bindfs; do
    for job in "${jobs[@]}"; do
      if is_git "${job#*:}"; then
        fresh "$side"
        sh -c "$(cmd_of "$job" "$side")" >/dev/null
        [ "$side" != wardfs ] || wardfs_settle "$write_idle" "prime requests $job"
      fi
      if [ "$side" = wardfs ]; then
        wardfs_stop
        wardfs_log=$tmp/wardfs-debug.log wardfs_rust_log=info,fuser=debug wardfs_start
        wardfs_settle $start_idle "start (debug)"
        logf=$tmp/wardfs-debug.log
      else
        wardfs_stop
        bindfs_stop
        bindfs_start debug
        logf=$tmp/bindfs-debug.log
      fi
      drop_caches
      count_run "$job" "$side" cold "$logf"
      count_run "$job" "$side" warm "$logf"
      printf '  %-20s %-7s %s requests cold, %s warm\n' "$job" "$side" \
        "$(awk -F'\t' -v j="$job" -v s="$side" '$1==j && $2==s && $3=="cold" {n+=$5} END {print n+0}' "$results/requests.tsv")" \
        "$(awk -F'\t' -v j="$job" -v s="$side" '$1==j && $2==s && $3=="warm" {n+=$5} END {print n+0}' "$results/requests.tsv")" >&2
      if [ "$side" = wardfs ]; then
        if writes "${job#*:}"; then wardfs_settle "$write_idle" "after requests $job"; fi
        wardfs_stop
      else
        bindfs_stop
        rm -f "$tmp/bindfs-debug.log"
      fi
      rm -f "$tmp/wardfs-debug.log"
    done
  done
fi

# --- summary -------------------------------------------------------------------------------------
tree_info() { # TREE
  local d=$ws/$1
  printf '%s files (%s tracked), %s MB with .git' \
    "$(find "$d" -type f | wc -l)" "$(git -C "$d" ls-files | wc -l)" \
    "$(du -sm "$d" | cut -f1)"
}
{
  echo "date=$(date -u +%Y-%m-%dT%H:%MZ)"
  echo "cpus=$(nproc)"
  echo "cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
  echo "mem_gb=$(awk '/^MemTotal/ {printf "%.0f", $2/1048576}' /proc/meminfo)"
  echo "kernel=$(uname -r)"
  echo "os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  echo "fs=$(df -T "$ws" | awk 'NR==2 {print $2}')"
  echo "passthrough=$passthrough"
  echo "inos=$inos"
  echo "load_start=$load_start"
  echo "load_end=$load_end"
  echo "runs=$runs"
  echo "warmup=$warmup"
  echo "cold_reps=$cold_reps"
  echo "quick=$quick"
  for t in "${trees[@]}"; do echo "tree_$t=$(tree_info "$t")"; done
  [[ ",$trees_wanted," != *,registry,* ]] || echo "registry_crates=${#crates[@]}"
  if want untar; then
    echo "untar_entries=$(tar -tf "$tarball" | wc -l)"
    case $untar_on in
      image) echo "untar_on=a fresh journaled ext4 image (loop)" ;;
      backing) echo "untar_on=the backing dir ($(findmnt -n -o FSTYPE -T "$ws"))" ;;
    esac
  fi
  echo "bindfs=$(bindfs --version 2>&1 | sed -n 1p)"
  echo "rg=$(rg --version | sed -n 1p)"
  echo "git=$(git --version)"
  echo "tar=$(tar --version | sed -n 1p)"
  echo "hyperfine=$(hyperfine --version | sed -n 1p)"
  echo "wardfs=$bin"
  cat "$results/foreign.txt"
} >"$results/env.txt"

rc=0
python3 - "$results" "$correct" "${jobs[@]}" <<'PY' || rc=$?
import glob, json, os, statistics, sys

res, correct, jobs = sys.argv[1], sys.argv[2] == "1", sys.argv[3:]
env = dict(l.rstrip("\n").partition("=")[::2] for l in open(os.path.join(res, "env.txt")))
untar_n = env.get("untar_entries", "?")
label = {
    "rg-literal": "`rg -n -F 'unsafe impl'`",
    "rg-regex": "`rg -n 'impl<[^>]*> (Drop\\|Clone) for'`",
    "git": "`git status --porcelain` (one file changed)",
    "git-fsm": "`git status --porcelain`, wardfs with its monitor (cold: first after a restart)",
    "git-fsm-live": "`git status --porcelain`, wardfs with its monitor (cold: caches dropped, daemon kept)",
    "find": "`find -type f -printf '%s\\n'`",
    "tar": "`tar -cf - .` (into a pipe)",
    "untar": f"untar {untar_n} entries + `rm -rf`",
}
goal = {"rg-literal": 1.5, "rg-regex": 1.5, "git": 2.0, "git-fsm": 1.0, "git-fsm-live": 1.0,
        "find": 1.5, "tar": 1.5, "untar": 2.0}
sides = ("native", "bindfs", "wardfs")
failed = []

def med(paths):
    times = []
    for p in paths:
        for r in json.load(open(p))["results"]:
            times += r["times"]
    return statistics.median(times) if times else None

def fmt(s):
    return f"{s * 1000:,.0f} ms" if s < 10 else f"{s:,.1f} s"

cpu = {}
cp = os.path.join(res, "daemon-cpu.tsv")
if os.path.exists(cp):
    for line in open(cp):
        job, side, sec = line.rstrip("\n").split("\t")
        cpu[(job, side)] = float(sec)

def table(kind):
    head = ("workload", "tree", "native", "bindfs", "wardfs", "bindfs/native", "wardfs/native", "goal", "wardfs")
    if kind == "warm":
        head += ("daemon CPU per run: bindfs", "wardfs")
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for job in jobs:
        tree, w = job.split(":")
        stem = job.replace(":", "-")
        m = {}
        for s in sides:
            pat = f"{kind}-{stem}-{s}.json" if kind == "warm" else f"{kind}-{stem}-{s}-*.json"
            m[s] = med(sorted(glob.glob(os.path.join(res, pat))))
        if None in m.values():
            continue
        rb, rs = m["bindfs"] / m["native"], m["wardfs"] / m["native"]
        ok = rs <= goal[w]
        if not ok:
            failed.append(f"{w} ({tree}, {kind})")
        cells = (label[w], "—" if tree == "deps" else tree, fmt(m["native"]), fmt(m["bindfs"]),
                 fmt(m["wardfs"]), f"{rb:.2f}×", f"**{rs:.2f}×**", f"≤ {goal[w]:g}×", "PASS" if ok else "FAIL")
        if kind == "warm":
            cells += tuple(fmt(cpu[(job, s)]) if (job, s) in cpu else "?" for s in ("bindfs", "wardfs"))
        out.append("| " + " | ".join(cells) + " |")
    return out

req = {}
rp = os.path.join(res, "requests.tsv")
if os.path.exists(rp):
    for line in open(rp):
        job, side, run, op, n = line.rstrip("\n").split("\t")
        req.setdefault((job, side, run), {})[op] = int(n)
rq = []
if req:
    rq = ["| workload | tree | side | run | requests | by opcode |", "|---|---|---|---|---|---|"]
    for job in jobs:
        tree, w = job.split(":")
        for side in ("wardfs", "bindfs"):
            for run in ("warm", "cold"):
                if not any(k[0] == job and k[1] == side for k in req):
                    continue
                # A run with no row sent no request at all (a warm tar through a cached mount).
                ops = req.get((job, side, run), {})
                by = ", ".join(f"{op} {n:,}" for op, n in sorted(ops.items(), key=lambda kv: -kv[1]))
                rq.append(f"| {label[w]} | {'—' if tree == 'deps' else tree} | {side} | {run} | "
                          f"{sum(ops.values()):,} | {by or 'none'} |")

settles = [l.rstrip("\n").split("\t") for l in open(os.path.join(res, "settle.tsv"))] \
    if os.path.exists(os.path.join(res, "settle.tsv")) else []
settle = ""
if settles:
    longest = max(settles, key=lambda x: int(x[1]))
    settle = (f"wardfs idle waits: {len(settles)}, {sum(int(x[1]) for x in settles)} s beyond the idle windows in all, "
              f"longest {longest[1]} s ({longest[0]}); daemon CPU during them {sum(float(x[2]) for x in settles):.1f} s")
gi = os.path.join(res, "git-index.txt")
gitidx = ["", "git status and the index (requests pass): " + "; ".join(l.strip() for l in open(gi))] if os.path.exists(gi) else []
trees = "; ".join(f"{k[5:]}: {v}" for k, v in env.items() if k.startswith("tree_"))
text = "\n".join([
    f"wardfs agent workloads, {env['date']}" + (" (QUICK: small trees, few runs; not for the docs)" if env["quick"] == "1" else ""),
    f"{env['cpus']} × {env['cpu']}, {env['mem_gb']} GB RAM, {env['os']}, kernel {env['kernel']}, "
    f"backing dir on {env['fs']}; {env['bindfs']}, {env['rg']}, {env['git']}, {env['tar']}, {env['hyperfine']}",
    f"wardfs: {env['passthrough'] or '(no passthrough line in the daemon log)'}",
    f"trees: {trees}"
    + (f"; untar: {untar_n} entries, on {env.get('untar_on', '?')}" if "untar_entries" in env else ""),
    f"inode numbers of one file: {env['inos']}",
    f"warm: hyperfine median of {env['runs']} runs after {env['warmup']} warmup runs; cold: median of "
    f"{env['cold_reps']} first runs after a fresh mount and drop_caches",
    f"load average {env['load_start']} at start, {env['load_end']} at end of the timed part; other "
    f"processes used {env['foreign_cpu_s']} CPU-seconds in {env['foreign_wall_s']} s"
    + (f" ({env['foreign_top']})" if env.get("foreign_top") else ""),
] + ([settle] if settle else []) + [
    "", "Warm", "",
] + table("warm") + ["", "Cold (first run after mount and drop_caches)", ""] + table("cold")
  + (["", "FUSE requests per run (wardfs: fuser debug log; bindfs: libfuse -d)", ""] + rq if rq else [])
  + gitidx) + "\n"
open(os.path.join(res, "summary.txt"), "w").write(text)
print("\n" + "=" * 100)
print(text)
if not correct:
    print("RESULT: a side gave different output than native (see above): a bug, not a slowness.")
elif failed:
    print("RESULT: goals missed: " + "; ".join(failed))
else:
    print("RESULT: every goal met")
sys.exit(2 if not correct else (3 if failed else 0))
PY
echo "(raw results: $results/)" >&2
case $rc in
  0) exit 0 ;;
  2) exit 1 ;;
  3) [ "$strict" = 1 ] && exit 1 || exit 0 ;;
  *) exit "$rc" ;;
esac
