# The two commands of the README, and a few helpers.
SHELL := /bin/bash
CARGO ?= cargo
# Where cargo builds (honours $CARGO_TARGET_DIR like cargo does).
TARGET_DIR ?= $(or $(CARGO_TARGET_DIR),target)

.PHONY: run test lint build bench bench-api bench-fuse bench-agent bench-rtt bench-git bench-sandbox bench-memory bench-checkpoint bench-provision bench-untar-cpu bench-forks bench-run

## make run: install what is missing, build, and start the daemon on the embedded default
run:
	.ci/install-deps run
	$(CARGO) build --release
	$(TARGET_DIR)/release/wardfs serve

## make test: install the test dependencies and run every test (what CI runs; .ci/test). The tests
## run offline in a loopback-only network namespace (.ci/netns, as root): the sandbox tests start
## the real sandbox-agent, which must reach nothing but this machine.
test:
	CARGO="$(CARGO)" TARGET_DIR="$(TARGET_DIR)" .ci/test

build:
	$(CARGO) build --release

## make bench: measure against rg, fd and native I/O (see docs/benchmarks.md)
bench:
	bash benches/run.sh
	bash benches/fuse.sh
	bash benches/agent.sh
	bash benches/git.sh
	bash benches/sandbox.sh
	bash benches/memory.sh
	bash benches/checkpoint.sh

## make bench-api: grep/glob against rg/fd, API round trips against native I/O
bench-api:
	bash benches/run.sh

## make bench-fuse: the FUSE mount against the native backing dir and bindfs (fio, metadata, rg; root)
bench-fuse:
	bash benches/fuse.sh

## make bench-agent: agent workloads (rg, git status, find, tar over the cargo registry's sources and
## the generated tree; untar + rm -rf, npm ci, cargo build, git checkout): the mount vs native, bindfs
## and the crates.io peer, each over its own copy, warm and cold, with the FUSE requests per workload
## by opcode (root; WARDFS_AGENT_QUICK=1: a small version)
bench-agent:
	bash benches/agent.sh

## make bench-untar-cpu: untar + rm -rf natively, through the mount and through the crates.io peer
## (when installed), with the daemon's CPU per thread per run; on a tmpfs, or WARDFS_UNTAR_FS=ext4
## (root; uses bench-agent's untar tarball)
bench-untar-cpu:
	bash benches/untar_cpu.sh

## make bench-rtt: the cost of one FUSE request through /dev/fuse and over io_uring (wardfs's two
## transports), bindfs and native beside them, 1 and 2 clients (root)
bench-rtt:
	bash benches/rtt.sh

## make bench-git: git pull/stage/status on a 10,000-file repository against git clone --depth 1
bench-git:
	bash benches/git.sh

## make bench-checkpoint: checkpoints and restores of a 25,000-file tree against git add/write-tree and git checkout
bench-checkpoint:
	bash benches/checkpoint.sh

## make bench-provision: local provisioned sandboxes (as root): create and resume to healthy, 20 at once, paused CPU
bench-provision:
	bash benches/provision.sh

## make bench-forks: forks of a 25,000-file workspace: the time to make one, 100 alive (RSS, disk),
## changes and merge of 1,000 files, agent workloads through a fork's mount (root)
bench-forks:
	bash benches/forks.sh

## make bench-sandbox: mirror pushes into the real sandbox-agent against hand-made tar/curl uploads (root)
bench-sandbox:
	bash benches/sandbox.sh

## make bench-run: commands run in a local sandbox with the workspace in step: run -- true, an edit
## then run -- cat, a command writing 1,000 files (root)
bench-run:
	bash benches/sandbox_run.sh

## make bench-memory: the daemon's peak RSS while grepping 1 GiB, mirroring 2 GiB, reading a 1 GiB
## remote file through the mount and answering an endless sandbox body; target < 100 MB (root)
bench-memory:
	bash benches/memory.sh
