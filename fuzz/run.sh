#!/usr/bin/env bash
# Runs every cargo-fuzz target for a bounded time (FUZZ_SECONDS each, default 10), starting from
# the seeds in fuzz/corpus/<target>/. cargo-fuzz needs a nightly compiler for its instrumentation
# flags; `-s none` (no sanitizer) keeps the runtime plain libFuzzer; `--dev` builds without
# optimisation (wardfs's crate took 8 of CI's minutes at opt-level 3 with the coverage
# instrumentation, under 2 at opt-level 0; a bounded smoke run loses little from slower
# executions). Idempotent: installs cargo-fuzz only when missing. A crash fails the run and leaves the input in fuzz/artifacts/.
set -euo pipefail

cd "$(dirname "$0")"
seconds="${FUZZ_SECONDS:-10}"
targets=(path glob_grep config walk listing batch foreign names)

# cargo-fuzz's flags need a nightly compiler: the installed nightly when there is one, else the
# stable compiler with its unstable features unlocked (RUSTC_BOOTSTRAP=1).
if rustup toolchain list | grep -q '^nightly'; then
  fuzz=(cargo +nightly fuzz)
else
  echo "fuzz/run.sh: no nightly toolchain; using the stable compiler with RUSTC_BOOTSTRAP=1" >&2
  export RUSTC_BOOTSTRAP=1
  fuzz=(cargo fuzz)
fi
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --quiet --locked cargo-fuzz --version 0.13.1

"${fuzz[@]}" build -s none --dev
for t in "${targets[@]}"; do
  # New inputs go to a scratch corpus under target/ (libFuzzer writes to the first directory);
  # the seeds kept in the repository (corpus/<target>/) are only read. To keep a grown corpus:
  # `cargo +nightly fuzz cmin -s none <target>` after copying it into corpus/<target>/.
  scratch="target/corpus/$t"
  mkdir -p "corpus/$t" "$scratch"
  echo "fuzz: $t for ${seconds}s" >&2
  "${fuzz[@]}" run -s none --dev "$t" "$scratch" "corpus/$t" -- \
    -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 2>&1 | tail -n 6
done
