#!/usr/bin/env python3
"""Metadata benchmark for benches/fuse.sh: a tree of small files, created, stat'ed, read, deleted.

    python3 benches/meta.py DIR [--files 10000] [--size 4096] [--per-dir 100] [--label NAME]
                                [--json OUT]

Makes DIR/meta.<pid>/dNNN/fNNNNN (FILES files of SIZE bytes, PER_DIR per directory) and times four
phases, each over every file, in files per second:

  create   mkdir the directories, then open(O_CREAT|O_EXCL|O_WRONLY), write SIZE bytes, close
  stat     stat() every file (warm: right after create, as a build or an agent would)
  read     open(O_RDONLY), read, close every file (contents checked)
  delete   unlink every file, then rmdir the directories

os.sync() runs before each phase (not timed), so a phase does not pay for the writeback of the one
before. Prints one JSON object (and appends it to OUT with --json). Python's per-call overhead
(about 1 µs) is the same on every target; the ratios between targets are what count.
"""

import argparse
import json
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--files", type=int, default=10000)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--per-dir", type=int, default=100)
    ap.add_argument("--label", default="")
    ap.add_argument("--json", help="append the result as one JSON line to this file")
    a = ap.parse_args()

    root = os.path.join(a.dir, f"meta.{os.getpid()}")
    ndirs = (a.files + a.per_dir - 1) // a.per_dir
    dirs = [os.path.join(root, f"d{d:03d}") for d in range(ndirs)]
    files = [os.path.join(dirs[i // a.per_dir], f"f{i:05d}") for i in range(a.files)]
    # Each file's contents start with its index, so a read that returns another file's bytes fails.
    body = lambda i: (f"{i:08d}".encode() * (a.size // 8 + 1))[: a.size]
    bodies = [body(i) for i in range(a.files)]

    os.mkdir(root)
    result = {"label": a.label, "files": a.files, "size": a.size}

    def phase(name, fn):
        os.sync()
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        result[name] = a.files / dt
        result[name + "_s"] = dt

    def create():
        for d in dirs:
            os.mkdir(d)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        for p, b in zip(files, bodies):
            fd = os.open(p, flags, 0o644)
            try:
                if os.write(fd, b) != len(b):
                    raise SystemExit(f"meta.py: short write to {p}")
            finally:
                os.close(fd)

    def stat():
        for p in files:
            if os.stat(p).st_size != a.size:
                raise SystemExit(f"meta.py: {p} has the wrong size")

    def read():
        flags = os.O_RDONLY | os.O_CLOEXEC
        for p, b in zip(files, bodies):
            fd = os.open(p, flags)
            try:
                got = os.read(fd, a.size + 1)
            finally:
                os.close(fd)
            if got != b:
                raise SystemExit(f"meta.py: {p} read back wrong ({len(got)} bytes)")

    def delete():
        for p in files:
            os.unlink(p)
        for d in dirs:
            os.rmdir(d)

    try:
        phase("create", create)
        phase("stat", stat)
        phase("read", read)
        phase("delete", delete)
    finally:
        # Leave nothing behind, even after a failure.
        for p in files:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
        for d in dirs:
            try:
                os.rmdir(d)
            except FileNotFoundError:
                pass
        os.rmdir(root)

    line = json.dumps(result)
    print(line)
    if a.json:
        with open(a.json, "a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    sys.exit(main())
