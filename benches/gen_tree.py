#!/usr/bin/env python3
"""Generates a deterministic, source-like tree for the search benchmarks (benches/run.sh).

    python3 benches/gen_tree.py OUT_DIR [--seed N] [--files N] [--mib N]

The tree looks like a polyglot monorepo: Rust crates, Python packages, JavaScript/TypeScript
packages, docs and config files, in nested directories, with identifiers, comments and string
literals. It also holds what real trees hold and a search must skip:

* a `.git/` directory (so `.gitignore` is honoured by rg, fd and wardfs alike) and a `.gitignore`
  that ignores `target/`, `node_modules/`, `build/`, `__pycache__/`, `*.log` and `*.min.js`, with
  files under those names (they contain the benchmark patterns, so honouring the ignores matters);
* hidden files and directories (`.github/`, `.cache/`), also containing the patterns;
* a handful of binary files (NUL bytes up front, the patterns inside), which all tools skip;
* a few symlinks (not followed by any of the tools).

With the defaults: about 24,000 text files (136 MB) in about 2,800 directories, plus the files
above. Same seed, same tree: contents, names and modification times are all derived from the seed.
The script refuses to write into an existing non-empty directory.
"""

import argparse
import os
import random
import sys

VERSION = 2  # printed; bump when the tree changes shape (run.sh regenerates whenever this file changes)

WORDS = (
    "account actor adapter alloc anchor arena atom audit backend batch bind block bloom "
    "buffer bundle cache call canvas cell chain channel chunk cipher claim client clock "
    "codec column commit config conn context cursor daemon data delta digest dispatch "
    "domain draft driver edge entry epoch event export extent fence field filter flag "
    "frame future gauge graph guard handle hash header heap hook index inode input "
    "journal kernel key label layer lease ledger limit link list loader lock log mailbox "
    "manifest map marker matrix merge meta metric mirror mode module mount mutex node "
    "notify offset order output packet page parser patch path peer pipe plan policy pool "
    "port prefix probe process profile proxy queue quota range reader record region "
    "registry relay replica request resolver result retry ring route row runtime sample "
    "schema scope segment selector session shard signal sink slab slot snapshot socket "
    "source span stage state store stream string symbol sync table target task tenant "
    "ticket timer token trace tracker txn update upload user value vector version view "
    "watcher window worker writer zone"
).split()

TYPES_RS = ["u8", "u16", "u32", "u64", "usize", "i32", "i64", "bool", "String", "&str",
            "Vec<u8>", "Option<u64>", "Arc<Mutex<State>>", "HashMap<String, u64>", "PathBuf"]
TRAITS = ["Clone", "Debug", "Default", "Drop", "Display", "From<u64>", "Iterator", "Read",
          "Write", "Hash", "PartialEq", "Send", "Sync", "AsRef<[u8]>", "Deref", "Serialize"]
COMMENT_RS = [
    "// {a} the {b} before the {c} is flushed.",
    "// NOTE: the {b} must outlive the {c}; see {a}_{b}.",
    "/// Returns the {a} of this {b}, or `None` when the {c} is empty.",
    "/// Creates a new {a} {b} with the given {c}.",
    "// SAFETY: the {a} pointer is valid for the lifetime of the {b}.",
    "// TODO: avoid cloning the {a} here once {b} is {c}.",
    "// Keep the {a} sorted by {b} so lookups can binary-search the {c}.",
]
COMMENT_PY = [
    "# {a} the {b} before the {c} is flushed.",
    "# TODO: cache the {a} per {b}.",
    "# The {a} is shared with the {b}; do not mutate the {c}.",
    "# Retry the {a} when the {b} times out.",
]
COMMENT_JS = [
    "// {a} the {b} before the {c} is flushed.",
    "// TODO: debounce the {a} {b}.",
    "/** Returns the {a} for the given {b}. */",
    "// The {a} is memoized per {b} and {c}.",
]


class Out(list):
    """A list of lines that keeps count of its size in bytes (with newlines)."""

    def __init__(self, lines=()):
        super().__init__()
        self.size = 0
        for l in lines:
            self.append(l)

    def append(self, line):
        super().append(line)
        self.size += len(line) + 1


def camel(w):
    return "".join(p[:1].upper() + p[1:] for p in w.split("_"))


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def w(self):
        return self.r.choice(WORDS)

    def ident(self, n=None):
        n = n or self.r.choice((1, 2, 2, 3))
        return "_".join(self.w() for _ in range(n))

    def ty(self):
        return camel(self.ident(self.r.choice((1, 2))))

    def comment(self, templates):
        return self.r.choice(templates).format(a=self.w(), b=self.w(), c=self.w())

    # --- Rust -------------------------------------------------------------------------------
    def rust_fn(self, out, indent):
        r = self.r
        pad = "    " * indent
        if r.random() < 0.5:
            out.append(pad + self.comment(COMMENT_RS))
        args = ", ".join(f"{self.ident(1)}: {r.choice(TYPES_RS)}" for _ in range(r.randint(0, 3)))
        recv = r.choice(("&self, ", "&mut self, ", "")) if indent else ""
        if not args:
            recv = recv.rstrip(", ")
        ret = r.choice(("", f" -> {r.choice(TYPES_RS)}", " -> Result<(), Error>", " -> Self"))
        vis = r.choice(("pub ", "", "pub(crate) "))
        out.append(f"{pad}{vis}fn {self.ident()}({recv}{args}){ret} {{")
        for _ in range(r.randint(2, 12)):
            k = r.random()
            a, b = self.ident(), self.ident()
            if k < 0.3:
                out.append(f"{pad}    let {a} = self.{b}.{self.ident(1)}({r.randint(0, 4096)});")
            elif k < 0.45:
                out.append(f"{pad}    if {a}.is_empty() {{ return Err(Error::{self.ty()}); }}")
            elif k < 0.6:
                out.append(f"{pad}    for {self.ident(1)} in {b}.iter() {{ {a}.push({self.ident(1)}.clone()); }}")
            elif k < 0.7:
                out.append(f'{pad}    tracing::debug!({a} = %{b}, "{self.w()} {self.w()} {self.w()}");')
            elif k < 0.8:
                out.append(f"{pad}    {self.comment(COMMENT_RS)}")
            elif k < 0.9:
                out.append(f"{pad}    let {a}: {r.choice(TYPES_RS)} = {b}.into();")
            else:
                out.append(f'{pad}    match {a} {{ Some(x) => x, None => panic!("{self.w()} {self.w()}") }};')
        out.append(f"{pad}}}")
        out.append("")

    def rust_file(self, target):
        r = self.r
        out = Out(["//! " + self.comment(["The {a} {b}: {c} handling."]), ""])
        for _ in range(r.randint(2, 6)):
            out.append(f"use crate::{self.ident(1)}::{{{self.ty()}, {self.ty()}}};")
        out.append("use std::sync::{Arc, Mutex};")
        out.append("")
        while out.size < target:
            k = r.random()
            name = self.ty()
            if k < 0.25:
                derives = ", ".join(r.sample(["Debug", "Clone", "Default", "PartialEq", "Eq", "Hash"], r.randint(1, 4)))
                out.append(f"#[derive({derives})]")
                out.append(f"pub struct {name} {{")
                for _ in range(r.randint(1, 8)):
                    out.append(f"    pub {self.ident()}: {r.choice(TYPES_RS)},")
                out.append("}")
                out.append("")
            elif k < 0.55:
                h = r.random()
                if h < 0.05:
                    out.append(f"unsafe impl {r.choice(('Send', 'Sync'))} for {name} {{}}")
                    out.append("")
                    continue
                if h < 0.06:
                    out.append(f"impl<{r.choice(('T', 'T: Clone', 'K, V', 'R: Read'))}> "
                               f"{r.choice(('Drop', 'Clone', 'Default'))} for {name}<T> {{")
                elif h < 0.15:
                    out.append(f"impl<T> {r.choice(TRAITS)} for {name}<T> {{")
                elif h < 0.4:
                    out.append(f"impl {r.choice(TRAITS)} for {name} {{")
                else:
                    out.append(f"impl {name} {{")
                for _ in range(r.randint(1, 4)):
                    self.rust_fn(out, 1)
                out.append("}")
                out.append("")
            elif k < 0.85:
                self.rust_fn(out, 0)
            elif k < 0.92:
                out.append(f"pub const {self.ident().upper()}: {r.choice(('u64', 'usize', 'u32'))} = {r.randint(1, 1 << 20)};")
            else:
                out.append("#[cfg(test)]")
                out.append(f"mod {self.ident(1)}_tests {{")
                out.append("    use super::*;")
                out.append("")
                out.append("    #[test]")
                self.rust_fn(out, 1)
                out.append("}")
                out.append("")
        return "\n".join(out) + "\n"

    # --- Python -----------------------------------------------------------------------------
    def py_file(self, target):
        r = self.r
        out = Out(['"""' + self.comment(["The {a} {b} for {c} handling."]) + '"""', ""])
        for _ in range(r.randint(2, 6)):
            out.append(f"from {self.ident(1)}.{self.ident(1)} import {self.ty()}, {self.ident()}")
        out.append("import os")
        out.append("")
        while out.size < target:
            k = r.random()
            if k < 0.3:
                out.append(f"class {self.ty()}({r.choice(('object', 'Exception', 'Base' + self.ty()))}):")
                out.append(f'    """{self.comment(["{a} the {b} of a {c}."])}"""')
                out.append("")
                for _ in range(r.randint(1, 4)):
                    self.py_def(out, "    ", method=True)
            else:
                self.py_def(out, "", method=False)
        return "\n".join(out) + "\n"

    def py_def(self, out, pad, method):
        r = self.r
        if r.random() < 0.4:
            out.append(pad + self.comment(COMMENT_PY))
        args = ", ".join(self.ident(1) for _ in range(r.randint(0, 3)))
        if method:
            args = "self" + (", " + args if args else "")
        prefix = "async def" if r.random() < 0.1 else "def"
        out.append(f"{pad}{prefix} {self.ident()}({args}):")
        for _ in range(r.randint(2, 10)):
            k = r.random()
            a, b = self.ident(), self.ident()
            if k < 0.35:
                out.append(f"{pad}    {a} = {b}.get({self.w()!r}, {r.randint(0, 999)})")
            elif k < 0.5:
                out.append(f"{pad}    if not {a}:")
                out.append(f"{pad}        raise ValueError(\"{self.w()} {self.w()} is missing\")")
            elif k < 0.65:
                out.append(f"{pad}    for {self.ident(1)} in {b}:")
                out.append(f"{pad}        {a}.append({self.ident(1)})")
            elif k < 0.75:
                out.append(f"{pad}    {self.comment(COMMENT_PY)}")
            elif k < 0.85:
                out.append(f"{pad}    log.debug(\"%s {self.w()} %s\", {a}, {b})")
            else:
                out.append(f"{pad}    {a} = [{self.ident(1)} for {self.ident(1)} in {b} if {self.ident(1)}]")
        out.append(f"{pad}    return {self.ident()}")
        out.append("")

    # --- JavaScript / TypeScript -------------------------------------------------------------
    def js_file(self, target, ts):
        r = self.r
        out = Out()
        for _ in range(r.randint(2, 6)):
            out.append(f"import {{ {camel(self.ident())[0].lower() + camel(self.ident())[1:]} }} from './{self.ident(1)}';")
        out.append("")
        while out.size < target:
            k = r.random()
            if r.random() < 0.4:
                out.append(self.comment(COMMENT_JS))
            name = self.ident()
            jsname = name.split("_")[0] + camel("_".join(name.split("_")[1:]))
            if k < 0.2:
                out.append(f"export class {self.ty()} {{")
                for _ in range(r.randint(1, 4)):
                    self.js_fn(out, "  ", method=True, ts=ts)
                out.append("}")
                out.append("")
            elif k < 0.35:
                out.append(f"export const {jsname} = ({self.ident(1)}{': number' if ts else ''}) => "
                           f"{self.ident(1)} * {r.randint(2, 64)};")
            else:
                self.js_fn(out, "", method=False, ts=ts)
        return "\n".join(out) + "\n"

    def js_fn(self, out, pad, method, ts):
        r = self.r
        n = self.ident()
        name = n.split("_")[0] + camel("_".join(n.split("_")[1:]))
        args = ", ".join(self.ident(1) + (": string" if ts else "") for _ in range(r.randint(0, 3)))
        kw = "" if method else r.choice(("function ", "export function ", "async function "))
        out.append(f"{pad}{kw}{name}({args}) {{")
        for _ in range(r.randint(2, 10)):
            k = r.random()
            a, b = self.ident(1), self.ident(1)
            if k < 0.35:
                out.append(f"{pad}  const {a} = {b}.{self.ident(1)}({r.randint(0, 100)});")
            elif k < 0.5:
                out.append(f"{pad}  if (!{a}) {{ throw new Error('{self.w()} {self.w()}'); }}")
            elif k < 0.65:
                out.append(f"{pad}  for (const {a} of {b}) {{ result.push({a}); }}")
            elif k < 0.8:
                out.append(f"{pad}  {self.comment(COMMENT_JS)}")
            else:
                out.append(f"{pad}  console.debug(`{self.w()} ${{{a}}} {self.w()}`);")
        out.append(f"{pad}  return {self.ident(1)};")
        out.append(f"{pad}}}")
        out.append("")

    # --- Other ------------------------------------------------------------------------------
    def md_file(self, target):
        out = Out([f"# The {self.w()} {self.w()}", ""])
        while out.size < target:
            out.append(" ".join(self.w() for _ in range(self.r.randint(8, 16))).capitalize() + ".")
            if self.r.random() < 0.2:
                out.append("")
                out.append(f"## {self.w().capitalize()} {self.w()}")
                out.append("")
        return "\n".join(out) + "\n"

    def toml_file(self, target):
        out = Out(["[package]", f'name = "{self.ident(2).replace("_", "-")}"', 'version = "0.1.0"', ""])
        out.append("[dependencies]")
        while out.size < target:
            out.append(f'{self.ident(1)}-{self.ident(1)} = "{self.r.randint(0, 3)}.{self.r.randint(0, 40)}"')
        return "\n".join(out) + "\n"

    def size(self):
        """A file size: mostly a few KiB, with a long tail."""
        s = int(self.r.lognormvariate(8.25, 0.75))  # median ~3.8 KB, mean ~5 KB
        return max(200, min(s, 120_000))


def write(path, data, mtime):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(path, mode) as f:
        f.write(data)
    os.utime(path, (mtime, mtime))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=20261122)
    ap.add_argument("--files", type=int, default=24000, help="number of searchable text files")
    ap.add_argument("--mib", type=int, default=110, help="minimum total size of searchable text")
    a = ap.parse_args()

    if os.path.exists(a.out) and os.listdir(a.out):
        sys.exit(f"gen_tree: {a.out} exists and is not empty; remove it first")
    os.makedirs(a.out, exist_ok=True)
    g = Gen(a.seed)
    r = g.r
    base_mtime = 1_790_000_000  # 2026-09; every file gets a seeded mtime after this
    stamp = lambda: base_mtime + r.randint(0, 60 * 86400)

    # Repository scaffolding.
    write(os.path.join(a.out, ".git", "HEAD"), "ref: refs/heads/main\n", base_mtime)
    os.makedirs(os.path.join(a.out, ".git", "objects"), exist_ok=True)
    os.makedirs(os.path.join(a.out, ".git", "refs", "heads"), exist_ok=True)
    write(os.path.join(a.out, ".gitignore"),
          "target/\nnode_modules/\nbuild/\n__pycache__/\n*.log\n*.min.js\n", base_mtime)

    # Top-level projects: Rust crates, Python packages, JS/TS packages.
    crates = [f"crates/{g.ident(1)}-{g.ident(1)}" for _ in range(40)]
    pypkgs = [f"python/{g.ident(1)}_{g.ident(1)}" for _ in range(25)]
    jspkgs = [f"web/packages/{g.ident(1)}-{g.ident(1)}" for _ in range(25)]

    # Each project gets a fixed set of module directories (1-3 levels deep), so directories hold
    # about a dozen files on average, as in real source trees.
    dirs = {}

    def nested(prefix, depth_max):
        if prefix not in dirs:
            ds = [prefix]
            for _ in range(r.randint(6, 24)):
                parent = r.choice(ds)
                if parent.count("/") - prefix.count("/") < depth_max:
                    ds.append(f"{parent}/{g.ident(1)}")
            dirs[prefix] = sorted(set(ds))
        return r.choice(dirs[prefix])

    written = 0
    total = 0
    names = set()
    target_bytes = a.mib * 1024 * 1024
    i = 0
    while i < a.files or total < target_bytes:
        k = r.random()
        size = g.size()
        if k < 0.40:
            d = nested(r.choice(crates) + "/src", 3)
            ext, body = "rs", (lambda s=size: g.rust_file(s))
        elif k < 0.65:
            d = nested(r.choice(pypkgs), 3)
            ext, body = "py", (lambda s=size: g.py_file(s))
        elif k < 0.80:
            d = nested(r.choice(jspkgs) + "/src", 3)
            ext, body = "js", (lambda s=size: g.js_file(s, ts=False))
        elif k < 0.92:
            d = nested(r.choice(jspkgs) + "/src", 3)
            ext, body = "ts", (lambda s=size: g.js_file(s, ts=True))
        elif k < 0.97:
            d = nested(r.choice(crates + pypkgs + jspkgs) + "/docs", 1)
            ext, body = "md", (lambda s=size: g.md_file(s))
        else:
            d = r.choice(crates + pypkgs + jspkgs)
            ext, body = "toml", (lambda s=size: g.toml_file(min(s, 3000)))
        name = f"{d}/{g.ident(r.choice((1, 2)))}.{ext}"
        if name in names:
            continue
        names.add(name)
        text = body()
        write(os.path.join(a.out, name), text, stamp())
        total += len(text)
        i += 1
        written += 1
        if written % 2000 == 0:
            print(f"gen_tree: {written} files, {total / 1e6:.0f} MB", file=sys.stderr)

    # A few large generated files (bindings, tables).
    for j in range(3):
        name = f"crates/generated/src/bindings_{j}.rs"
        text = g.rust_file(1_500_000)
        write(os.path.join(a.out, name), text, stamp())
        total += len(text)
        written += 1

    # Ignored by .gitignore: build output, dependencies, logs, caches.
    ignored = 0
    for j in range(300):
        c = r.choice(crates)
        for name, text in (
            (f"{c}/target/debug/build/{g.ident(1)}-{j}/out/{g.ident(1)}.rs", g.rust_file(g.size())),
            (f"web/node_modules/{g.ident(1)}-{j}/index.js", g.js_file(g.size(), ts=False)),
        ):
            write(os.path.join(a.out, name), text, stamp())
            ignored += 1
    for j in range(40):
        write(os.path.join(a.out, f"logs/run-{j}.log"), g.rust_file(g.size()), stamp())
        write(os.path.join(a.out, f"{r.choice(pypkgs)}/__pycache__/{g.ident(1)}_{j}.py"), g.py_file(g.size()), stamp())
        write(os.path.join(a.out, f"{r.choice(jspkgs)}/build/bundle-{j}.min.js"), g.js_file(g.size(), ts=False), stamp())
        write(os.path.join(a.out, f"{r.choice(jspkgs)}/build/chunk-{j}.rs"), g.rust_file(g.size()), stamp())
        ignored += 4

    # Hidden: skipped by default by every tool.
    for j in range(30):
        write(os.path.join(a.out, f".cache/{g.ident(1)}/{g.ident(1)}_{j}.rs"), g.rust_file(g.size()), stamp())
    write(os.path.join(a.out, ".github/workflows/ci.yml"),
          "on: push\njobs:\n  test:\n    runs-on: ubuntu-latest\n    steps:\n      - run: cargo test\n", stamp())

    # Binary files: NUL bytes up front, then source text that would match.
    for j in range(12):
        ext = ("png", "bin", "rs")[j % 3]
        blob = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(r.getrandbits(8) for _ in range(2000))
        blob += g.rust_file(8000).encode()
        write(os.path.join(a.out, f"assets/{g.ident(1)}_{j}.{ext}"), blob, stamp())

    # Symlinks (not followed).
    some = sorted(names)[:5]
    for j, target in enumerate(some):
        link = os.path.join(a.out, f"links/link_{j}")
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(os.path.relpath(os.path.join(a.out, target), os.path.dirname(link)), link)

    # Directory and symlink times too, so the whole tree (not only file contents) is reproducible.
    for link in sorted(os.listdir(os.path.join(a.out, "links"))):
        os.utime(os.path.join(a.out, "links", link), (stamp(),) * 2, follow_symlinks=False)
    all_dirs = sorted(dp for dp, _, _ in os.walk(a.out))
    for dp in reversed(all_dirs):  # children before parents
        t = stamp()
        os.utime(dp, (t, t))

    print(f"gen_tree: {written} searchable files ({total / 1e6:.1f} MB), {ignored} ignored, "
          f"30 hidden, 12 binary, 5 symlinks (seed {a.seed}, version {VERSION})", file=sys.stderr)


if __name__ == "__main__":
    main()
