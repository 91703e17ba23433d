# The two commands of the README, and a few helpers.
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: run test lint build bench

## make run: install what is missing, build, and start the daemon on the embedded default
run:
	.ci/install-deps run
	$(CARGO) build --release
	./target/release/sandfs serve

## make test: install the test dependencies and run every test (what CI runs)
test:
	.ci/install-deps test
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings
	$(CARGO) test --all-targets --no-fail-fast

build:
	$(CARGO) build --release

## make bench: measure against rg, fd and native I/O (see docs/benchmarks.md)
bench:
	bash benches/run.sh
