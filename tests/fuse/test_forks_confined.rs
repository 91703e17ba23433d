//! A command and a directory confined to a fork, through a real mount (issue 30): `wardfs run
//! --fork NAME -- CMD` runs CMD in the local provider's jail with the fork's tree as its only
//! writable files, no network but its own loopback unless `--network`, and a clean
//! environment; `wardfs fork NAME --mount DIR` binds the fork's tree at DIR until `wardfs
//! unmount DIR`, the fork's removal or the daemon's stop. The commands try their way out as an
//! attacker would (writes everywhere, the daemon's socket and CLI, remounts, symlinks out of
//! the fork) and the workspace must end as it was.
//!
//! The zones live outside `/tmp` (which the jail replaces with a private tmpfs), so that
//! hiding them is the jail's own doing.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::json;

use crate::support::{Daemon, BIN};

const SECRET: &str = "WORKSPACE-ONLY";

/// A mounted daemon whose zones are under `zones` (outside /tmp): the workspace holds
/// `shared.txt`, fork `a` was made of it, then the workspace got `after.txt` (the secret).
struct Setup {
    d: Daemon,
    zones: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        let zones = tempfile::Builder::new()
            .prefix("confined-zones")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap();
        let d = Daemon::options()
            .prefix("wardfs-fuse")
            .mount()
            .config(&format!(
                "[zones]\nmode = \"sandboxed\"\nroot = \"{}\"\n",
                zones.path().display()
            ))
            .start();
        d.write("/workspace/shared.txt", "before the fork\n");
        d.ok("/v1/forks", json!({"name": "a"}));
        d.write("/workspace/after.txt", &format!("{SECRET}\n"));
        Setup { d, zones }
    }

    fn workspace(&self) -> PathBuf {
        self.zones.path().join("workspace")
    }

    fn fork(&self, name: &str) -> PathBuf {
        self.d.mnt.join("forks").join(name)
    }

    /// Runs `wardfs ARGS` against the daemon, with `env` added to the test's environment.
    fn wardfs(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        Command::new(BIN)
            .arg("--socket")
            .arg(&self.d.socket)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// Runs `sh -c script` confined to fork `name` (with `--network` when `network`).
    fn run(&self, name: &str, network: bool, script: &str) -> Output {
        let mut args = vec!["run", "--fork", name];
        if network {
            args.push("--network");
        }
        args.extend(["--", "sh", "-c", script]);
        self.wardfs(&args, &[])
    }

    /// The API's answer to reading `path`: its content, or `None` when it is not found.
    fn api_read(&self, path: &str) -> Option<String> {
        match self.d.call("/v1/fs/read", json!({ "path": path })) {
            Ok(v) => Some(v["content"].as_str().unwrap().to_string()),
            Err((code, _)) if code.as_str() == "NOT_FOUND" => None,
            Err(e) => panic!("read {path}: {e:?}"),
        }
    }
}

/// Every file under `dir` with its bytes.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(dir).unwrap().to_path_buf();
            let md = std::fs::symlink_metadata(&p).unwrap();
            if md.is_dir() {
                stack.push(p);
                out.insert(rel, Vec::new());
            } else {
                out.insert(rel, std::fs::read(&p).unwrap_or_default());
            }
        }
    }
    out
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_command_run_in_a_fork_changes_the_fork_and_nothing_else() {
    let s = Setup::new();
    let before = tree(&s.workspace());
    let mnt = s.d.mnt.display().to_string();
    let tag = std::process::id();
    let script = format!(
        r#"
        echo made > made.txt && mkdir -p sub && echo deep > sub/deep.txt
        test "$(pwd)" = "{fork}" && echo cwd-ok
        cat shared.txt
        for p in /etc/wardfs-{tag} /usr/wardfs-{tag} /root/wardfs-{tag} /var/tmp/wardfs-{tag} \
                 {ws}/after.txt {ws}/new-{tag} {mnt}/workspace/after.txt {mnt}/workspace/new \
                 {mnt}/forks/b/x {state}/x {socket}; do
            if (echo PWNED > "$p") 2>/dev/null; then echo "WROTE $p"; fi
        done
        cat {ws}/after.txt {mnt}/workspace/after.txt 2>/dev/null
        ls -A {mnt}; ls -A {mnt}/forks
        ln -s {ws}/after.txt out-abs && (echo PWNED > out-abs) 2>/dev/null && echo "WROTE out-abs"
        ln -s ../../workspace/after.txt out-rel && cat out-rel 2>/dev/null
        (echo PWNED > out-rel) 2>/dev/null && echo "WROTE out-rel"
        test -e {socket} && echo SOCKET-SEEN
        {bin} --socket {socket} write /workspace/pwned.txt PWNED 2>/dev/null && echo "ASKED THE DAEMON"
        mount -o remount,rw / 2>/dev/null && echo REMOUNTED
        umount {ws} 2>/dev/null && echo UNHID
        echo home > "$HOME/h-{tag}" && echo home-ok
        echo tmp > /tmp/t-{tag} && echo tmp-ok
        exit 7
        "#,
        fork = s.fork("a").display(),
        ws = s.workspace().display(),
        state = s.d.dir.path().join("state").display(),
        socket = s.d.socket.display(),
        bin = BIN,
    );
    let out = s.run("a", false, &script);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(7), "{stdout}\n{stderr}");
    for want in ["cwd-ok", "before the fork", "home-ok", "tmp-ok"] {
        assert!(stdout.contains(want), "no {want} in:\n{stdout}\n{stderr}");
    }
    for bad in [
        "WROTE",
        SECRET,
        "SOCKET-SEEN",
        "ASKED THE DAEMON",
        "REMOUNTED",
        "UNHID",
    ] {
        assert!(!stdout.contains(bad), "{bad} in:\n{stdout}\n{stderr}");
    }
    // The mount shows the command only its fork: `ls -A MOUNT` then `ls -A MOUNT/forks`.
    assert!(
        stdout.contains("\nforks\na\n"),
        "the mount showed more than the fork:\n{stdout}"
    );

    // The fork has the command's files, the workspace none, and the host none of its scratch.
    assert_eq!(s.api_read("/forks/a/made.txt").as_deref(), Some("made\n"));
    assert_eq!(
        s.api_read("/forks/a/sub/deep.txt").as_deref(),
        Some("deep\n")
    );
    assert_eq!(s.api_read("/workspace/made.txt"), None);
    assert_eq!(s.api_read("/workspace/pwned.txt"), None);
    assert_eq!(tree(&s.workspace()), before, "the workspace changed");
    for gone in [format!("/tmp/t-{tag}"), format!("/tmp/home/h-{tag}")] {
        assert!(!Path::new(&gone).exists(), "{gone} outlived the command");
    }
    for p in ["/etc", "/usr", "/root", "/var/tmp"] {
        assert!(!Path::new(p).join(format!("wardfs-{tag}")).exists(), "{p}");
    }
    // The journal names the command's writes as the mount's, in the fork.
    let log = s.d.cli_ok(&["log", "--limit", "50"]);
    assert!(log.contains("/forks/a/made.txt"), "{log}");
}

/// Connects to the test's listener from inside a fork's jail; returns whether it got through.
fn reaches(s: &Setup, network: bool, port: u16, listener: &TcpListener) -> bool {
    let script = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo hi >&3");
    let out = s.wardfs(
        &["run", "--fork", "a"]
            .into_iter()
            .chain(network.then_some("--network"))
            .chain(["--", "bash", "-c", &script])
            .collect::<Vec<_>>(),
        &[],
    );
    listener.set_nonblocking(true).unwrap();
    let got = match listener.accept() {
        Ok((mut c, _)) => {
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut buf = String::new();
            let _ = c.read_to_string(&mut buf);
            buf == "hi\n"
        }
        Err(_) => false,
    };
    assert_eq!(
        out.status.success(),
        got,
        "exit {} but got {got}: {}",
        out.status,
        text(&out).1
    );
    got
}

#[test]
fn a_command_run_in_a_fork_has_no_network_unless_asked_and_a_clean_environment() {
    let s = Setup::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    assert!(
        !reaches(&s, false, port, &listener),
        "reached the host's loopback without --network"
    );
    assert!(
        reaches(&s, true, port, &listener),
        "no way to the host's loopback with --network"
    );
    // Its own network namespace, holding only loopback; the host's with --network.
    let ours = std::fs::read_link("/proc/self/ns/net").unwrap();
    let ns = |network: bool| {
        let out = s.run(
            "a",
            network,
            "readlink /proc/self/ns/net; tail -n +3 /proc/net/dev | cut -d: -f1",
        );
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stderr}");
        let mut lines = stdout.lines().map(str::trim);
        let id = lines.next().unwrap().to_string();
        (id, lines.map(str::to_string).collect::<Vec<_>>())
    };
    let (alone, interfaces) = ns(false);
    assert_ne!(Path::new(&alone), ours);
    assert_eq!(interfaces, ["lo"]);
    assert_eq!(Path::new(&ns(true).0), ours);

    // Only PATH, HOME (a scratch directory), TERM and LANG reach the command, with PWD (where
    // it starts).
    let out = s.wardfs(
        &["run", "--fork", "a", "--", "/usr/bin/env"],
        &[
            ("WARDFS_TEST_CANARY", "do-not-pass"),
            ("TERM", "xterm"),
            ("LANG", "C.UTF-8"),
        ],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let mut keys: Vec<&str> = stdout.lines().filter_map(|l| l.split('=').next()).collect();
    keys.sort();
    assert_eq!(keys, ["HOME", "LANG", "PATH", "PWD", "TERM"], "{stdout}");
    assert!(stdout.lines().any(|l| l == "HOME=/tmp/home"), "{stdout}");
    let pwd = format!("PWD={}", s.fork("a").display());
    assert!(stdout.lines().any(|l| l == pwd), "{stdout}");
    assert!(!stdout.contains("do-not-pass"), "{stdout}");

    // The command's exit status is wardfs's: a signal's as a shell reports it.
    assert_eq!(s.run("a", false, "kill -9 $$").status.code(), Some(137));
    // wardfs's own failures are 125, apart from any code the command may exit with; the
    // message says which.
    let missing = s.wardfs(&["run", "--fork", "nope", "--", "true"], &[]);
    assert_eq!(missing.status.code(), Some(125), "{}", text(&missing).1);
    assert!(
        text(&missing).1.contains("no such fork"),
        "{}",
        text(&missing).1
    );
    let hostile = s.wardfs(&["run", "--fork", "../a", "--", "true"], &[]);
    assert_eq!(hostile.status.code(), Some(125), "{}", text(&hostile).1);
}

/// Whether `dir` is a mount point now.
fn mounted(dir: &Path) -> bool {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|m| Path::new(m) == dir)
}

/// Unmounts what a test bound, also when it fails.
struct Unbind(Vec<PathBuf>);

impl Drop for Unbind {
    fn drop(&mut self) {
        for dir in &self.0 {
            while mounted(dir) {
                let done = Command::new("umount").arg("-l").arg(dir).status();
                if !done.is_ok_and(|s| s.success()) {
                    break;
                }
            }
        }
    }
}

#[test]
fn a_fork_bound_at_a_directory_shows_its_tree_until_unmounted_removed_or_stopped() {
    let mut s = Setup::new();
    let places = tempfile::Builder::new()
        .prefix("confined-binds")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let (x, y, z) = (
        places.path().join("x/deeper"),
        places.path().join("y"),
        places.path().join("z"),
    );
    let _unbind = Unbind(vec![x.clone(), y.clone(), z.clone()]);
    let x_shown = x.display().to_string();

    // Made and bound: its tree at x, written through x into the fork alone.
    let out = s.wardfs(&["--json", "fork", "c", "--mount", &x_shown], &[]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let answer: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(answer["made"]["fork"]["name"], "c", "{answer}");
    assert!(mounted(&x));
    let mut names: Vec<String> = std::fs::read_dir(&x)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["after.txt", "shared.txt"]);
    std::fs::write(x.join("new.txt"), "through the bind\n").unwrap();
    assert_eq!(
        s.api_read("/forks/c/new.txt").as_deref(),
        Some("through the bind\n")
    );
    assert_eq!(s.api_read("/workspace/new.txt"), None);
    // A command confined to another fork does not see it.
    let out = s.run("a", false, &format!("ls -A {x_shown} | wc -l"));
    assert_eq!(text(&out).0.trim(), "0", "{}", text(&out).1);

    // Unmounted by `wardfs unmount DIR`, once; nothing else is ever unmounted by it.
    let out = s.wardfs(&["unmount", &x_shown], &[]);
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(!mounted(&x) && std::fs::read_dir(&x).unwrap().next().is_none());
    assert_eq!(
        s.api_read("/forks/c/new.txt").as_deref(),
        Some("through the bind\n")
    );
    for (dir, says) in [
        (x_shown.as_str(), "nothing is mounted there"),
        ("/proc", "not a fork's mount"),
    ] {
        let out = s.wardfs(&["unmount", dir], &[]);
        assert_eq!(out.status.code(), Some(6), "{dir}: {}", text(&out).1);
        assert!(text(&out).1.contains(says), "{dir}: {}", text(&out).1);
    }
    assert!(mounted(Path::new("/proc")));

    // Refused before anything is made: a place inside the mount, a directory with files, a
    // name no fork can have, a caller who is not root.
    let inside = s.fork("c").join("in");
    std::fs::write(y.with_extension("txt"), "").unwrap();
    let full = places.path();
    for (args, code, says) in [
        (
            vec!["fork", "c", "--mount", inside.to_str().unwrap()],
            6,
            "inside the mount",
        ),
        (
            vec!["fork", "c", "--mount", full.to_str().unwrap()],
            6,
            "not empty",
        ),
        (
            vec!["fork", "../c", "--mount", y.to_str().unwrap()],
            2,
            "not a fork name",
        ),
    ] {
        let out = s.wardfs(&args, &[]);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", text(&out).1);
        assert!(text(&out).1.contains(says), "{args:?}: {}", text(&out).1);
    }
    assert!(!inside.exists() && !y.exists());
    let out = Command::new("setpriv")
        .args([
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            BIN,
        ])
        .arg("--socket")
        .arg(&s.d.socket)
        .args(["fork", "d", "--mount", y.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(6), "{}", text(&out).1);
    assert!(text(&out).1.contains("needs root"), "{}", text(&out).1);
    assert_eq!(s.api_read("/forks/d/shared.txt"), None);

    // An existing fork is bound as it is; removing the fork unmounts it, and so does the
    // daemon's stop.
    let out = s.wardfs(&["fork", "c", "--mount", y.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", text(&out).1);
    assert_eq!(
        std::fs::read_to_string(y.join("new.txt")).unwrap(),
        "through the bind\n"
    );
    let out = s.wardfs(&["fork", "a", "--mount", z.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(mounted(&y) && mounted(&z));
    s.d.cli_ok(&["fork", "rm", "c"]);
    assert!(!mounted(&y), "the removed fork is still bound");
    assert!(mounted(&z));
    s.d.stop();
    assert!(!mounted(&z), "a bind outlived the daemon's mount");
}
