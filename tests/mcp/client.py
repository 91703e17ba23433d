"""Drives `wardfs mcp` with the official MCP Python SDK's stdio client (tests/mcp/main.rs runs it).

usage: client.py WARDFS_BIN SOCKET CONFIG MODE

Spawns `WARDFS_BIN --socket SOCKET --config CONFIG mcp` and, by MODE:
  tools      lists the tools, calls each one against the daemon the Rust test started and checks
             results and error shapes (the config has no [mcp] section: no git_push)
  push       checks that git_push is listed (the config says [mcp] allow_push = true)
  git        with a repository pulled into /workspace/demo (README.md "# Demo\n"): edits it, then
             checks git_status, git_stage, staged_list and staged_show
  no-daemon  checks that a call with no daemon behind the socket is a DAEMON_NOT_RUNNING error
  list       prints `listed NAME...`: the tools/list names, sorted (the config allows every tool)
  push       (also) with a repository pulled into /workspace/demo from a bare repository the
             daemon can push to: stages a change of README.md and pushes it with git_push
  sandbox    with a sandbox `dev` of provider local and [mcp] allow_sandboxes = true: lists,
             creates, mirrors to and from, and destroys it, and reads its lifecycle in events
  rewind     an agent's session with a way back: files written with MCP, changed by shell commands
             in the mounted workspace ($WARDFS_TEST_MNT), a checkpoint, more changes of both
             kinds, a restore that puts back what the shell and the tools did, and its undo
 Prints one `ok <check>`
line per passed check and `PASS` at the end; the first failed check raises, so the exit status
is non-zero and the traceback names it.

Every mode first checks that each listed tool declares an object `outputSchema`; every
successful call's `structuredContent` is then validated against its tool's schema here, with
`jsonschema` (which the MCP client itself uses, and validates with too), and the last line
before `PASS` names the tools whose answers were validated.
"""

import asyncio
import json
import os
import subprocess
import sys

from jsonschema.validators import validator_for
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

TOOLS = {
    "read", "write", "edit", "ls", "glob", "grep", "stat", "rm", "mv",
    "git_status", "git_stage", "staged_list", "staged_show", "mirror_push", "mirror_pull",
    "checkpoint", "checkpoint_list", "checkpoint_diff", "restore", "events",
    "fork", "forks", "changes", "merge", "update",
}


# Each listed tool's outputSchema, by name; and the tools whose answers were validated.
SCHEMAS = {}
VALIDATED = set()


def ok(what):
    print(f"ok {what}", flush=True)


def check(cond, what, detail=None):
    if not cond:
        raise AssertionError(f"{what}: {detail!r}")
    ok(what)


def text_of(result):
    return "".join(c.text for c in result.content if getattr(c, "type", None) == "text")


def schema_errors(name, document):
    """Returns what is wrong with `document` as an answer of tool `name` (empty: nothing)."""
    schema = SCHEMAS[name]
    validator = validator_for(schema)(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]


async def load_schemas(session):
    """Lists the tools; checks that each declares an object outputSchema; keeps them."""
    for t in (await session.list_tools()).tools:
        schema = t.output_schema
        check(isinstance(schema, dict) and schema.get("type") == "object" and schema.get("properties"),
              f"{t.name} has an object outputSchema", schema)
        validator_for(schema).check_schema(schema)
        SCHEMAS[t.name] = schema


async def call(session, name, args):
    result = await session.call_tool(name, args)
    check(not result.is_error, f"{name} succeeds", text_of(result))
    errors = schema_errors(name, result.structured_content)
    check(not errors, f"{name}'s answer matches its outputSchema", (errors, result.structured_content))
    VALIDATED.add(name)
    return result


def passed():
    print("ok answers validated against their outputSchema: " + " ".join(sorted(VALIDATED)), flush=True)
    print("PASS", flush=True)


async def call_error(session, name, args, code):
    """Calls a tool that must fail; checks the error's shape and code; returns the error object."""
    result = await session.call_tool(name, args)
    check(result.is_error, f"{name} fails with {code}", text_of(result))
    # The error is the API's object, as structured content and as the text the model reads.
    err = result.structured_content
    check(isinstance(err, dict) and err.get("code") == code, f"{name} error code is {code}", err)
    check(isinstance(err.get("message"), str) and err["message"], f"{name} error has a message", err)
    check(json.loads(text_of(result)) == err, f"{name} error text is the same JSON", text_of(result))
    # `path` names the path the error is about, and is left out when there is none: never null.
    check(set(err) <= {"code", "message", "path"} and ("path" not in err or isinstance(err["path"], str)),
          f"{name} error has a path string or none", err)
    return err


def shell(cwd, script):
    """Runs a shell command in the mounted workspace, as an agent's bash tool does."""
    done = subprocess.run(["sh", "-ec", script], cwd=cwd, capture_output=True, text=True)
    check(done.returncode == 0, f"the shell runs {script!r}", done.stderr)


def on_disk(root, rel):
    try:
        with open(os.path.join(root, rel)) as f:
            return f.read()
    except FileNotFoundError:
        return None


async def rewind_flow(session, mnt):
    await call(session, "write", {"path": "/workspace/app/main.py", "content": "print('v1')\n"})
    await call(session, "write", {"path": "/workspace/app/notes.md", "content": "plan\n"})
    shell(mnt, "mkdir -p app/data && printf 'a,b\\n1,2\\n' > app/data/t.csv && chmod +x app/main.py"
               " && ln -s data/t.csv app/latest.csv")
    r = await call(session, "checkpoint", {"message": "before the refactor"})
    good = r.structured_content["id"]
    # The agent goes astray, with its tools and with the shell.
    await call(session, "edit", {"path": "/workspace/app/main.py", "old": "v1", "new": "broken"})
    shell(mnt, "rm -rf app/data && mv app/notes.md app/NOTES.md && echo junk > app/tmp.log")
    r = await call(session, "checkpoint_diff", {"from": good})
    changed = sorted(f["path"] for f in r.structured_content["files"])
    check(changed == ["app/NOTES.md", "app/data/t.csv", "app/main.py", "app/notes.md", "app/tmp.log"],
          "checkpoint_diff names what the tools and the shell changed", changed)
    r = await call(session, "restore", {"id": good})
    check(r.structured_content["conflicts"] == [], "the restore meets no conflict", r.structured_content)
    undo = r.structured_content["before"]
    r = await call(session, "read", {"path": "/workspace/app/main.py"})
    check(r.structured_content["content"] == "print('v1')\n", "the tool's edit is undone")
    check(on_disk(mnt, "app/data/t.csv") == "a,b\n1,2\n", "the shell's removal is undone, seen through the mount")
    check(on_disk(mnt, "app/notes.md") == "plan\n" and on_disk(mnt, "app/NOTES.md") is None,
          "the shell's rename is undone")
    check(on_disk(mnt, "app/tmp.log") is None, "the file made after the checkpoint is gone")
    check(os.readlink(os.path.join(mnt, "app/latest.csv")) == "data/t.csv", "the symlink is back")
    check(os.access(os.path.join(mnt, "app/main.py"), os.X_OK), "the executable bit is back")
    await call(session, "restore", {"id": undo})
    check(on_disk(mnt, "app/main.py") == "print('broken')\n" and on_disk(mnt, "app/tmp.log") == "junk\n",
          "restoring the pre-restore checkpoint brings the astray state back: nothing is lost")


async def git_flow(session):
    r = await call(session, "git_status", {})
    repos = r.structured_content["repos"]
    check(len(repos) == 1 and repos[0]["repo"] == "/workspace/demo" and repos[0]["changes"] == [],
          "git_status shows the pulled repository, clean", repos)
    await call(session, "edit", {"path": "/workspace/demo/README.md", "old": "# Demo", "new": "# The demo"})
    await call(session, "write", {"path": "/workspace/demo/NOTES.md", "content": "notes\n"})
    r = await call(session, "git_status", {"repo": "/workspace/demo"})
    changes = r.structured_content["repos"][0]["changes"]
    check(changes == [{"path": "/workspace/demo/NOTES.md", "state": "created"},
                      {"path": "/workspace/demo/README.md", "state": "modified"}],
          "git_status lists the created and the modified file", changes)
    r = await call(session, "git_stage", {"message": "Rename the title", "files": ["README.md"]})
    staged = r.structured_content
    check(staged["state"] == "staged" and [f["path"] for f in staged["files"]] == ["/workspace/demo/README.md"],
          "git_stage stages the named file", staged)
    await call_error(session, "git_stage", {"message": "  ", "files": ["NOTES.md"]}, "INVALID_ARGUMENT")
    r = await call(session, "staged_list", {"state": "staged"})
    check([c["id"] for c in r.structured_content["staged"]] == [staged["id"]], "staged_list lists it", r.structured_content)
    r = await call(session, "staged_show", {"id": staged["id"]})
    diff = r.structured_content["files"][0]["diff"]
    check("-# Demo" in diff and "+# The demo" in diff, "staged_show has the diff", diff)
    tools = {t.name for t in (await session.list_tools()).tools}
    check("git_push" not in tools, "there is still no git_push tool", sorted(tools))
    # The commit stays staged for a person: nothing the agent has can push it.
    r = await call(session, "staged_list", {})
    check(r.structured_content["staged"][0]["state"] == "staged", "the commit awaits review")


async def push_flow(session):
    """A change of the pulled repository, staged and pushed by the agent itself."""
    await call(session, "edit", {"path": "/workspace/demo/README.md", "old": "# Demo", "new": "# Pushed"})
    r = await call(session, "git_stage", {"message": "Push from MCP"})
    staged = r.structured_content["id"]
    r = await call(session, "git_push", {"id": staged})
    check(r.structured_content["state"] == "pushed" and r.structured_content["id"] == staged,
          "git_push pushes the staged commit", r.structured_content)
    err = await call_error(session, "git_push", {"id": staged}, "CONFLICT")
    print(f"git_push again: {err}", flush=True)


async def sandbox_flow(session):
    """A sandbox's life through the tools: listed, made, mirrored both ways, destroyed."""
    r = await call(session, "events", {})
    start = r.structured_content["cursor"]
    r = await call(session, "sandbox_list", {})
    check([s["name"] for s in r.structured_content["sandboxes"]] == ["dev"], "sandbox_list names dev",
          r.structured_content)
    r = await call(session, "sandbox_create", {"name": "dev"})
    check(r.structured_content["status"] == "active", "sandbox_create makes it active", r.structured_content)
    await call(session, "write", {"path": "/workspace/m/a.txt", "content": "mirrored\n"})
    r = await call(session, "mirror_push", {"sandbox": "dev"})
    check(r.structured_content["files_sent"] == 1, "mirror_push sends the file", r.structured_content)
    r = await call(session, "mirror_pull", {"sandbox": "dev"})
    check(r.structured_content["conflicts"] == [], "mirror_pull meets no conflict", r.structured_content)
    await call(session, "write", {"path": "/workspace/m/a.txt", "content": "edited\n"})
    r = await call(session, "run", {"sandbox": "dev", "command": ["sh", "-c", "cat m/a.txt; echo made > m/b.txt; exit 4"]})
    check(r.structured_content["exit_code"] == 4 and r.structured_content["stdout"] == "edited\n"
          and r.structured_content["changed"] == ["m/b.txt"],
          "run sees the edit, passes the exit code and brings the change back", r.structured_content)
    r = await call(session, "read", {"path": "/workspace/m/b.txt"})
    check(r.structured_content["content"] == "made\n", "the run's file is in the workspace", r.structured_content)
    r = await call(session, "sandbox_destroy", {"name": "dev"})
    check(r.structured_content["status"] == "destroyed", "sandbox_destroy destroys it", r.structured_content)
    r = await call(session, "events", {"since": start, "zone": "sandboxes"})
    rows = r.structured_content["events"]
    check(rows and all(e["zone"] == "sandboxes" and e["path"] == "dev" for e in rows),
          "a sandbox's events keep its name as their path", rows)


async def main():
    binary, socket, config, mode = sys.argv[1:5]
    params = StdioServerParameters(
        command=binary, args=["--socket", socket, "--config", config, "mcp"]
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            check(init.server_info.name == "wardfs", "server names itself wardfs", init.server_info)
            check(bool(init.instructions), "server gives instructions")
            await load_schemas(session)

            if mode == "list":
                print("listed " + " ".join(sorted(SCHEMAS)), flush=True)
                passed()
                return
            if mode == "no-daemon":
                err = await call_error(session, "read", {"path": "/workspace/a"}, "DAEMON_NOT_RUNNING")
                check(socket in err["message"], "the error names the socket", err)
                check("path" not in err, "DAEMON_NOT_RUNNING has no path", err)
                passed()
                return
            if mode == "git":
                await git_flow(session)
                passed()
                return
            if mode == "rewind":
                await rewind_flow(session, os.environ["WARDFS_TEST_MNT"])
                passed()
                return
            if mode == "sandbox":
                await sandbox_flow(session)
                passed()
                return
            tools = {t.name: t for t in (await session.list_tools()).tools}
            names = set(tools)
            if mode == "push":
                check(names == TOOLS | {"git_push"}, "tools are the 24 plus git_push", sorted(names))
                check(bool(tools["git_push"].description), "git_push is described")
                await push_flow(session)
                passed()
                return
            if mode != "tools":
                raise SystemExit(f"unknown mode {mode!r}: tools, list, push, git, sandbox, rewind or no-daemon")
            check(names == TOOLS, "tools are the 24, no git_push", sorted(names))
            for t in tools.values():
                check(len(t.description or "") > 80, f"{t.name} has a description for a model")
                check(t.input_schema.get("type") == "object", f"{t.name} has an object input schema")
            read_props = tools["read"].input_schema["properties"]
            check({"path", "offset", "limit"} <= set(read_props), "read takes path, offset, limit", read_props)
            check(tools["read"].input_schema.get("required") == ["path"], "read requires only path")
            check("TOO_LARGE" in tools["read"].description, "read's description names its errors")
            check("1000" in tools["grep"].description, "grep's description gives its result cap")
            check(tools["read"].annotations.read_only_hint is True, "read is annotated read-only")

            # write, then read the same bytes back
            text = "alpha\nbeta\ngamma beta\n"
            r = await call(session, "write", {"path": "/workspace/notes/a.md", "content": text})
            check(r.structured_content == {"path": "/workspace/notes/a.md", "bytes": len(text), "created": True},
                  "write answers path, bytes, created", r.structured_content)
            r = await call(session, "read", {"path": "/workspace/notes/a.md"})
            check(text_of(r) == text, "read returns the text written", text_of(r))
            check(r.structured_content["total_lines"] == 3 and r.structured_content["truncated"] is False,
                  "read reports total_lines and truncated", r.structured_content)
            r = await call(session, "read", {"path": "/workspace/notes/a.md", "offset": 2, "limit": 1})
            check(text_of(r).startswith("beta\n"), "read honours offset and limit", text_of(r))
            check("offset=3" in text_of(r), "a truncated read says how to go on", text_of(r))
            check(r.structured_content["truncated"] is True, "a window before the end is truncated")

            # edit: unique, not unique, no match
            r = await call(session, "edit", {"path": "/workspace/notes/a.md", "old": "alpha", "new": "ALPHA"})
            check(r.structured_content["replacements"] == 1, "edit replaces one occurrence", r.structured_content)
            err = await call_error(session, "edit",
                                   {"path": "/workspace/notes/a.md", "old": "beta", "new": "BETA"}, "NOT_UNIQUE")
            check(err.get("path") == "/workspace/notes/a.md", "NOT_UNIQUE names the path", err)
            await call_error(session, "edit", {"path": "/workspace/notes/a.md", "old": "zeta", "new": "z"}, "NO_MATCH")
            r = await call(session, "edit", {"path": "/workspace/notes/a.md", "old": "beta", "new": "BETA",
                                             "replace_all": True})
            check(r.structured_content["replacements"] == 2, "edit with replace_all replaces both")
            r = await call(session, "read", {"path": "/workspace/notes/a.md"})
            check(text_of(r) == "ALPHA\nBETA\ngamma BETA\n", "the edits are in the file", text_of(r))

            # read errors
            await call_error(session, "read", {"path": "/workspace/missing.txt"}, "NOT_FOUND")
            await call_error(session, "read", {"path": "/workspace/../etc/passwd"}, "OUTSIDE_ZONE")
            await call_error(session, "read", {"path": "/workspace/notes"}, "IS_DIR")

            # ls, stat, glob, grep
            r = await call(session, "ls", {"path": "/workspace/notes"})
            entries = r.structured_content["entries"]
            check([e["name"] for e in entries] == ["a.md"] and entries[0]["kind"] == "file",
                  "ls lists the directory", entries)
            r = await call(session, "ls", {})
            check([e["name"] for e in r.structured_content["entries"]] == ["notes"], "ls defaults to /workspace")
            r = await call(session, "stat", {"path": "/workspace/notes/a.md"})
            check(r.structured_content["kind"] == "file" and r.structured_content["size"] == 22,
                  "stat describes the file", r.structured_content)
            await call_error(session, "stat", {"path": "/workspace/nope"}, "NOT_FOUND")
            await call(session, "write", {"path": "/workspace/src/main.rs", "content": "fn main() {}\n"})
            r = await call(session, "glob", {"pattern": "*.md"})
            check([m["path"] for m in r.structured_content["matches"]] == ["/workspace/notes/a.md"],
                  "glob finds the markdown file", r.structured_content)
            err = await call_error(session, "glob", {"pattern": "*", "limit": 5000}, "INVALID_ARGUMENT")
            check("path" not in err, "an error about no path leaves path out", err)
            r = await call(session, "grep", {"pattern": "gamma", "mode": "content"})
            lines = r.structured_content["lines"]
            check(lines == [{"path": "/workspace/notes/a.md", "line": 3, "text": "gamma BETA", "kind": "match"}],
                  "grep finds the match with path and line", lines)
            r = await call(session, "grep", {"pattern": "beta", "ignore_case": True, "mode": "count"})
            check(r.structured_content["counts"] == [{"path": "/workspace/notes/a.md", "count": 2}],
                  "grep counts case-insensitively", r.structured_content)
            r = await call(session, "grep", {"pattern": "fn", "type": ["rust"], "mode": "files"})
            check(r.structured_content["files"] == ["/workspace/src/main.rs"], "grep filters by type")
            await call_error(session, "grep", {"pattern": "("}, "INVALID_ARGUMENT")

            # mv, rm
            r = await call(session, "mv", {"from": "/workspace/notes/a.md", "to": "/cache/a.md"})
            check(r.structured_content == {"path": "/cache/a.md", "ok": True}, "mv moves between zones")
            await call_error(session, "mv", {"from": "/workspace/notes/a.md", "to": "/cache/b.md"}, "NOT_FOUND")
            await call(session, "write", {"path": "/workspace/notes/b.md", "content": "b\n"})
            await call_error(session, "rm", {"path": "/workspace/notes"}, "NOT_EMPTY")
            r = await call(session, "rm", {"path": "/workspace/notes", "recursive": True})
            check(r.structured_content["ok"] is True, "rm deletes recursively")
            await call_error(session, "read", {"path": "/workspace/notes/b.md"}, "NOT_FOUND")

            # git: nothing is pulled in this workspace
            r = await call(session, "git_status", {})
            check(r.structured_content == {"repos": []}, "git_status lists no repositories", r.structured_content)
            await call_error(session, "git_status", {"repo": "/workspace/nope"}, "NOT_FOUND")
            await call_error(session, "git_stage", {"message": "Nothing here"}, "NOT_FOUND")
            r = await call(session, "staged_list", {})
            check(r.structured_content == {"staged": []}, "staged_list is empty", r.structured_content)
            r = await call(session, "staged_list", {"state": "pushed"})
            check(r.structured_content == {"staged": []}, "staged_list filters by state")
            await call_error(session, "staged_show", {"id": "0123456789"}, "NOT_FOUND")

            # events: a cursor now, then exactly what changed after it, resumable without repeats
            r = await call(session, "events", {})
            start = r.structured_content["cursor"]
            check(r.structured_content["events"] == [] and isinstance(start, str),
                  "events without since gives only a cursor", r.structured_content)
            for i in range(3):
                await call(session, "write", {"path": f"/workspace/ev/{i}.txt", "content": f"{i}\n"})
            await call(session, "write", {"path": "/cache/ev-other.txt", "content": "x\n"})
            r = await call(session, "events", {"since": start, "zone": "workspace", "limit": 2})
            got = r.structured_content
            check([e["path"] for e in got["events"]] == ["/workspace/ev/0.txt", "/workspace/ev/1.txt"]
                  and got["more"] is True, "events gives the first two, in order, and says more", got)
            check(all(e["kind"] == "change" and e["zone"] == "workspace" for e in got["events"]),
                  "events rows keep their kind and zone", got)
            r = await call(session, "events", {"since": got["cursor"], "zone": "workspace"})
            rest = r.structured_content
            check([e["path"] for e in rest["events"]] == ["/workspace/ev/2.txt"] and rest["more"] is False,
                  "resuming from the cursor gives the rest, nothing repeated", rest)
            await call(session, "mv", {"from": "/workspace/ev/2.txt", "to": "/workspace/ev/moved.txt"})
            r = await call(session, "events", {"since": rest["cursor"], "path": "/workspace/ev"})
            moves = [(e["op"], e["path"], e["to_path"]) for e in r.structured_content["events"]]
            check(moves == [("move", "/workspace/ev/2.txt", "/workspace/ev/moved.txt")],
                  "a move names both ends as virtual paths", r.structured_content)
            await call_error(session, "events", {"since": "bogus"}, "INVALID_ARGUMENT")

            # checkpoints: take one, change a file, see the change, go back, and undo that
            await call(session, "write", {"path": "/workspace/cp.txt", "content": "before\n"})
            r = await call(session, "checkpoint", {"message": "before the change"})
            first = r.structured_content["id"]
            check(r.structured_content["message"] == "before the change", "checkpoint keeps its message")
            await call(session, "write", {"path": "/workspace/cp.txt", "content": "after\n"})
            r = await call(session, "checkpoint_diff", {"from": first})
            check([f["path"] for f in r.structured_content["files"]] == ["cp.txt"],
                  "checkpoint_diff names the changed file", r.structured_content)
            r = await call(session, "checkpoint_list", {"limit": 5})
            check(first in [c["id"] for c in r.structured_content["checkpoints"]], "checkpoint_list shows it")
            r = await call(session, "restore", {"id": first, "paths": ["/workspace/cp.txt"]})
            check(r.structured_content["restored"] == ["/workspace/cp.txt"], "restore puts the file back",
                  r.structured_content)
            undo = r.structured_content["before"]
            r = await call(session, "read", {"path": "/workspace/cp.txt"})
            check(r.structured_content["content"] == "before\n", "the file reads as it was")
            await call(session, "restore", {"id": undo})
            r = await call(session, "read", {"path": "/workspace/cp.txt"})
            check(r.structured_content["content"] == "after\n", "restoring the pre-restore checkpoint undoes it")
            await call_error(session, "restore", {"id": 999999}, "NOT_FOUND")

            # forks: a copy of the workspace of one's own, what changed there, merged back
            await call(session, "write", {"path": "/workspace/fk.txt", "content": "one\ntwo\n"})
            r = await call(session, "fork", {"name": "mcp-try"})
            check(r.structured_content["fork"]["path"] == "/forks/mcp-try" and r.structured_content["linked"] > 0,
                  "fork makes /forks/NAME sharing the workspace's files", r.structured_content)
            await call(session, "edit", {"path": "/forks/mcp-try/fk.txt", "old": "two", "new": "TWO"})
            r = await call(session, "read", {"path": "/workspace/fk.txt"})
            check(r.structured_content["content"] == "one\ntwo\n", "an edit in the fork leaves the workspace alone")
            r = await call(session, "forks", {})
            listed = [(f["name"], f["parent"], f["changed"]) for f in r.structured_content["forks"]]
            check(listed == [("mcp-try", "workspace", 1)], "forks lists the fork and its one change", listed)
            r = await call(session, "changes", {"name": "mcp-try", "patch": True})
            files = [(f["path"], f["status"]) for f in r.structured_content["files"]]
            check(files == [("fk.txt", "modified")] and "+TWO" in r.structured_content["patch"],
                  "changes names the edited file, with its patch", r.structured_content)
            r = await call(session, "merge", {"name": "mcp-try"})
            check(r.structured_content["applied"] is True and r.structured_content["changed"] == ["fk.txt"]
                  and isinstance(r.structured_content["before"], int),
                  "merge applies the fork's change", r.structured_content)
            r = await call(session, "read", {"path": "/workspace/fk.txt"})
            check(r.structured_content["content"] == "one\nTWO\n", "the merged change is in the workspace")
            await call(session, "edit", {"path": "/forks/mcp-try/fk.txt", "old": "one", "new": "fork's"})
            await call(session, "edit", {"path": "/workspace/fk.txt", "old": "one", "new": "workspace's"})
            r = await call(session, "merge", {"name": "mcp-try", "paths": ["fk.txt"]})
            check(r.structured_content["applied"] is False
                  and r.structured_content["conflicts"] == [{"path": "fk.txt", "kind": "content"}],
                  "a merge of a line both sides changed applies nothing and names the conflict",
                  r.structured_content)
            r = await call(session, "read", {"path": "/workspace/fk.txt"})
            check(r.structured_content["content"] == "workspace's\nTWO\n", "the refused merge changed nothing")
            r = await call(session, "merge", {"name": "mcp-try", "paths": ["fk.txt"], "ours": ["fk.txt"]})
            check(r.structured_content["applied"] is True
                  and r.structured_content["settled"] == [{"path": "fk.txt", "kind": "content"}],
                  "merge with ours settles the conflict, keeping the parent's version", r.structured_content)
            await call_error(session, "merge", {"name": "mcp-try", "theirs": ["../../etc/passwd"]}, "OUTSIDE_ZONE")
            # update: the workspace's later changes come into the fork; a conflict keeps both sides
            await call(session, "write", {"path": "/workspace/up.txt", "content": "the workspace's\n"})
            r = await call(session, "update", {"name": "mcp-try"})
            check(r.structured_content["conflicts"]
                  == [{"path": "fk.txt", "kind": "content", "parent_copy": "fk.txt.parent"}]
                  and sorted(r.structured_content["changed"]) == ["fk.txt.parent", "up.txt"],
                  "update keeps both sides of a conflict", r.structured_content)
            r = await call(session, "read", {"path": "/forks/mcp-try/fk.txt.parent"})
            check(r.structured_content["content"] == "workspace's\nTWO\n",
                  "the parent's version is beside the fork's", r.structured_content)
            await call_error(session, "update", {"name": "nope"}, "NOT_FOUND")
            await call_error(session, "changes", {"name": "nope"}, "NOT_FOUND")
            await call_error(session, "fork", {"name": "../x"}, "INVALID_ARGUMENT")
            await call_error(session, "fork", {"name": "mcp-try"}, "EXISTS")

            # mirror: no sandbox of that name (or, before the mirror routes exist, no route)
            for tool in ("mirror_push", "mirror_pull"):
                result = await session.call_tool(tool, {"sandbox": "nope"})
                err = result.structured_content
                check(result.is_error and isinstance(err, dict) and isinstance(err.get("code"), str),
                      f"{tool} without a sandbox is an error with a code", err)
                print(f"{tool}: {err['code']}: {err['message']}", flush=True)

            # input the schema refuses never reaches the daemon
            result = await session.call_tool("read", {"path": "/workspace/x", "bogus": 1})
            check(result.is_error, "an unknown argument is refused", text_of(result))

            # the schemas are not vacuous: an answer of the wrong shape fails them
            check(schema_errors("write", {"path": 1, "bytes": 2}) != [], "a wrong answer fails the schema")
            check(schema_errors("events", {"events": [{"kind": "change", "cursor": "1-0"}],
                                           "cursor": "1-0", "more": False}) != [],
                  "an event without its row fails the schema")

    passed()


asyncio.run(main())
