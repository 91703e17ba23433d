//! The local provider (`wardfs::sandbox::provision::local`) with real parts: bubblewrap
//! namespaces, an overlay root, the real sandbox-agent inside, cgroup freezers and signals.
//! What a sandbox did is checked from the host: its volume's upper dir, `/proc`, the cgroup
//! files, every process's mount table. Every sandbox a test makes is destroyed when its
//! [`Local`] drops, also when the test panics.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use wardfs::sandbox::provision::local::{
    FreezerKind, LocalConfig, LocalProvisioner, Proc, RootMode, MINIMAL_BASE,
};
use wardfs::sandbox::provision::{
    Handle, ProviderState, ProvisionError, Provisioner, SandboxSpec, SnapshotSpec, VolumeMount,
};
use wardfs::sandbox::{ExecRequest, SandboxAgent, SandboxAgentConfig, SandboxFs};

use crate::support::sandbox_agent::require_loopback_only;

/// A provider on a temp state dir; destroys what its tests made when dropped.
struct Local {
    provider: Option<LocalProvisioner>,
    dir: tempfile::TempDir,
    freezer: FreezerKind,
    root_mode: RootMode,
    made: std::sync::Mutex<Vec<String>>,
}

impl Local {
    fn new() -> Local {
        Local::with_freezer(FreezerKind::Auto)
    }

    fn with_freezer(freezer: FreezerKind) -> Local {
        require_loopback_only();
        let dir = tempfile::tempdir().expect("temp dir");
        let mut local = Local {
            provider: None,
            dir,
            freezer,
            root_mode: RootMode::Auto,
            made: Default::default(),
        };
        local.reopen();
        local
    }

    /// Drops the provider (its bridges close) and opens a new one on the same state dir.
    fn reopen(&mut self) {
        self.provider = None;
        let mut config = LocalConfig::new(self.state());
        config.freezer = self.freezer.clone();
        config.root_mode = self.root_mode;
        config.start_timeout = Duration::from_secs(20);
        self.provider = Some(LocalProvisioner::open(config).expect("open the local provider"));
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("provision")
    }

    fn p(&self) -> &LocalProvisioner {
        self.provider.as_ref().unwrap()
    }

    async fn create(&self, spec: &SandboxSpec) -> Handle {
        let handle = self.p().create(spec).await.expect("create");
        self.made.lock().unwrap().push(handle.id.clone());
        handle
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        if let Some(p) = &self.provider {
            for id in self.made.lock().unwrap().iter() {
                let _ = p.destroy_blocking(id, false);
            }
        }
    }
}

fn spec(name: &str, volume: Option<&str>) -> SandboxSpec {
    SandboxSpec {
        name: name.into(),
        snapshot: None,
        volume: volume.map(|v| VolumeMount {
            volume: v.into(),
            mount_path: "/home/work".into(),
        }),
        env: BTreeMap::from([("GREETING".to_string(), "hello".to_string())]),
    }
}

fn client(handle: &Handle, timeout: Duration) -> SandboxAgent {
    let mut config = SandboxAgentConfig::new(handle.url.clone());
    config.request_timeout = timeout;
    config.connect_timeout = Duration::from_secs(2);
    config.exec_timeout = Duration::from_secs(30);
    SandboxAgent::with_token(&config, Some(handle.token.clone())).expect("client")
}

async fn sh(fs: &SandboxAgent, script: &str) -> (Option<i32>, String, String) {
    let out = fs
        .exec(ExecRequest::new("/bin/sh", ["-c", script]))
        .await
        .expect("exec");
    (out.exit_code, out.stdout, out.stderr)
}

/// Returns whether any process on this machine has a mount whose line mentions `needle`.
fn mounted_anywhere(needle: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let table = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap_or_default();
        if table.contains(needle) {
            found.push(pid);
        }
    }
    found
}

/// Asserts that nothing of sandbox `id` is left: no process, no cgroup, no mount, no dir.
fn assert_gone(local: &Local, id: &str, procs: &[Proc]) {
    assert!(!procs.is_empty());
    let alive: Vec<&Proc> = procs.iter().filter(|p| p.alive()).collect();
    assert!(alive.is_empty(), "processes of {id} left: {alive:?}");
    if let Some(cgroup) = local.p().cgroup(id) {
        assert!(!cgroup.exists(), "{} is left", cgroup.display());
    }
    let dir = local.p().sandbox_dir(id);
    let holders = mounted_anywhere(&dir.to_string_lossy());
    assert!(
        holders.is_empty(),
        "processes {holders:?} still mount {}",
        dir.display()
    );
    assert!(!dir.exists(), "{} is left", dir.display());
}

/// Asserts that the agent behind `fs` does not answer within its short timeout.
async fn assert_unanswered(fs: &SandboxAgent) {
    let started = Instant::now();
    let err = fs
        .stat("/home")
        .await
        .expect_err("a frozen sandbox answered");
    assert!(err.is_unavailable(), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_sandbox_keeps_its_files_in_its_volume_across_pause_resume_and_destroy() {
    let local = Local::new();
    let p = local.p();
    assert_eq!(p.create_volume("work").await.unwrap(), "work");
    let handle = local.create(&spec("dev", Some("work"))).await;
    assert!(
        handle.url.starts_with("http://127.0.0.1:"),
        "{}",
        handle.url
    );
    let fs = client(&handle, Duration::from_secs(1));

    fs.write("/home/work/hello.txt", "hi there\n".into())
        .await
        .unwrap();
    let names: Vec<String> = fs
        .list("/home/work")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["hello.txt"]);
    assert_eq!(
        &fs.read("/home/work/hello.txt").await.unwrap()[..],
        b"hi there\n"
    );
    // The write landed in the volume's upper layer on the host.
    let upper = p.volume_dir("work").join("upper/home/work/hello.txt");
    assert_eq!(std::fs::read_to_string(&upper).unwrap(), "hi there\n");
    // The spec's environment reaches commands; HOME is the agent's clean one.
    let (code, out, _) = sh(&fs, "printf '%s %s' \"$GREETING\" \"$HOME\"").await;
    assert_eq!((code, out.as_str()), (Some(0), "hello /run/wardfs/home"));
    assert_eq!(p.state(&handle.id).await.unwrap(), ProviderState::Running);

    p.pause(&handle.id).await.unwrap();
    p.pause(&handle.id).await.unwrap();
    assert_eq!(p.state(&handle.id).await.unwrap(), ProviderState::Paused);
    assert_unanswered(&fs).await;

    let again = p.resume(&handle.id).await.unwrap();
    assert_eq!(again.url, handle.url);
    let fs = client(&again, Duration::from_secs(5));
    assert_eq!(
        &fs.read("/home/work/hello.txt").await.unwrap()[..],
        b"hi there\n"
    );
    assert_eq!(p.state(&handle.id).await.unwrap(), ProviderState::Running);

    let procs = p.processes(&handle.id);
    assert!(procs.len() >= 3, "{procs:?}");
    p.destroy(&handle.id, true).await.unwrap();
    assert_gone(&local, &handle.id, &procs);
    assert_eq!(p.state(&handle.id).await.unwrap(), ProviderState::Missing);
    p.destroy(&handle.id, true).await.unwrap();
    assert!(p.resume(&handle.id).await.is_err());
    assert_eq!(std::fs::read_to_string(&upper).unwrap(), "hi there\n");

    // A new sandbox on the same volume sees the file.
    let second = local.create(&spec("dev", Some("work"))).await;
    assert_ne!(second.id, handle.id);
    let fs = client(&second, Duration::from_secs(5));
    assert_eq!(
        &fs.read("/home/work/hello.txt").await.unwrap()[..],
        b"hi there\n"
    );
    let err = p.delete_volume("work").await.unwrap_err();
    assert!(err.to_string().contains(&second.id), "{err}");
    let procs = p.processes(&second.id);
    p.destroy(&second.id, false).await.unwrap();
    assert_gone(&local, &second.id, &procs);
    // A named volume is not the sandbox's: it stays until deleted.
    assert!(upper.exists());
    p.delete_volume("work").await.unwrap();
    p.delete_volume("work").await.unwrap();
    assert!(!p.volume_dir("work").exists());
}

#[tokio::test]
async fn a_sandbox_s_own_volume_is_removed_with_it_unless_kept() {
    let local = Local::new();
    let p = local.p();
    for keep in [false, true] {
        let handle = local.create(&spec("own", None)).await;
        let fs = client(&handle, Duration::from_secs(5));
        fs.write("/root/note", "mine".into()).await.unwrap();
        let upper = p.volume_dir(&handle.id).join("upper/root/note");
        assert_eq!(std::fs::read_to_string(&upper).unwrap(), "mine");
        let procs = p.processes(&handle.id);
        p.destroy(&handle.id, keep).await.unwrap();
        assert_gone(&local, &handle.id, &procs);
        assert_eq!(upper.exists(), keep, "keep_volume = {keep}");
    }
}

#[tokio::test]
async fn pause_freezes_the_tree_with_each_freezer() {
    let kinds = [
        FreezerKind::CgroupV2("/sys/fs/cgroup/unified".into()),
        FreezerKind::CgroupV1("/sys/fs/cgroup/freezer".into()),
        FreezerKind::Signals,
    ];
    for kind in kinds {
        let local = Local::with_freezer(kind.clone());
        let p = local.p();
        let handle = local.create(&spec("frozen", None)).await;
        let fs = client(&handle, Duration::from_secs(1));
        fs.write("/root/x", "1".into()).await.unwrap();
        let procs = p.processes(&handle.id);

        p.pause(&handle.id).await.unwrap();
        match &kind {
            FreezerKind::CgroupV2(_) => {
                let events =
                    std::fs::read_to_string(p.cgroup(&handle.id).unwrap().join("cgroup.events"))
                        .unwrap();
                assert!(events.contains("frozen 1"), "{events}");
            }
            FreezerKind::CgroupV1(_) => {
                let state =
                    std::fs::read_to_string(p.cgroup(&handle.id).unwrap().join("freezer.state"))
                        .unwrap();
                assert_eq!(state.trim(), "FROZEN");
            }
            _ => {
                // Every process of the sandbox's pid namespace is stopped.
                let inside: Vec<&Proc> = procs.iter().skip(1).collect();
                for proc in inside {
                    assert_eq!(proc.state(), Some('T'), "{kind:?}: {proc:?}");
                }
            }
        }
        assert_eq!(
            p.state(&handle.id).await.unwrap(),
            ProviderState::Paused,
            "{kind:?}"
        );
        assert_unanswered(&fs).await;

        let again = p.resume(&handle.id).await.unwrap();
        let fs = client(&again, Duration::from_secs(5));
        assert_eq!(&fs.read("/root/x").await.unwrap()[..], b"1", "{kind:?}");
        p.resume(&handle.id).await.unwrap();

        // Destroying a paused sandbox leaves nothing either.
        p.pause(&handle.id).await.unwrap();
        p.destroy(&handle.id, false).await.unwrap();
        assert_gone(&local, &handle.id, &procs);
    }
}

#[tokio::test]
async fn an_unchanged_snapshot_spec_is_reused_not_rebuilt() {
    let local = Local::new();
    let p = local.p();
    let snap = SnapshotSpec {
        network: false,
        base: String::new(),
        setup: vec![
            "head -c 16 /dev/urandom | od -An -tx1 > /stamp".into(),
            "mkdir -p /opt/tool && echo built > /opt/tool/version".into(),
        ],
    };
    let key = p.snapshot(&snap).await.unwrap();
    assert_eq!(key, snap.key());
    let root = p.snapshot_dir(&key).join("root");
    let stamp = std::fs::read_to_string(root.join("stamp")).unwrap();
    let inode = std::fs::metadata(&root).unwrap().ino();

    assert_eq!(p.snapshot(&snap).await.unwrap(), key);
    assert_eq!(std::fs::read_to_string(root.join("stamp")).unwrap(), stamp);
    assert_eq!(std::fs::metadata(&root).unwrap().ino(), inode);

    // A sandbox made from it sees what setup installed; its writes do not touch the snapshot.
    let mut s = spec("snap", None);
    s.snapshot = Some(key.clone());
    let handle = local.create(&s).await;
    let fs = client(&handle, Duration::from_secs(5));
    let (code, out, _) = sh(&fs, "cat /stamp /opt/tool/version && echo x > /stamp").await;
    assert_eq!((code, out), (Some(0), format!("{stamp}built\n")));
    assert_eq!(std::fs::read_to_string(root.join("stamp")).unwrap(), stamp);

    // A failing setup command is named in the error and leaves no snapshot behind.
    let bad = SnapshotSpec {
        network: false,
        base: String::new(),
        setup: vec!["true".into(), "echo broken >&2; exit 3".into()],
    };
    let err = p.snapshot(&bad).await.unwrap_err().to_string();
    assert!(err.contains("setup[1]") && err.contains("broken"), "{err}");
    let left: Vec<_> = std::fs::read_dir(p.snapshot_dir(&key).parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, std::slice::from_ref(&key));
    // An unknown snapshot is missing, not built.
    s.snapshot = Some("wardfs-0000000000000000".into());
    let err = p.create(&s).await.unwrap_err();
    assert!(matches!(err, ProvisionError::Missing { .. }), "{err}");
}

#[tokio::test]
async fn a_snapshot_setup_shares_the_hosts_network_only_when_its_spec_asks_and_never_the_sandbox() {
    let local = Local::new();
    let p = local.p();
    let host_net = std::fs::read_link("/proc/self/ns/net").unwrap();
    let host_net = host_net.to_string_lossy().into_owned();
    // The setup records which network namespace it ran in; "minimal" names the minimal root.
    let setup = vec![
        "readlink /proc/self/ns/net > /setup-netns".to_string(),
        // Tools reached through Debian's alternatives work in the minimal root.
        "echo a b | awk '{ print $2 }' > /awk-says".to_string(),
    ];
    let mut keys = Vec::new();
    for network in [false, true] {
        let spec = SnapshotSpec {
            network,
            base: MINIMAL_BASE.into(),
            setup: setup.clone(),
        };
        let key = p.snapshot(&spec).await.unwrap();
        let seen = std::fs::read_to_string(p.snapshot_dir(&key).join("root/setup-netns")).unwrap();
        assert_eq!(
            seen.trim() == host_net,
            network,
            "network = {network}: the setup ran in {seen:?}, the host is in {host_net:?}"
        );
        let awk = std::fs::read_to_string(p.snapshot_dir(&key).join("root/awk-says")).unwrap();
        assert_eq!(awk, "b\n");
        let etc = p.snapshot_dir(&key).join("root/etc");
        assert_eq!(
            etc.join("ssl/certs").is_dir(),
            std::path::Path::new("/etc/ssl/certs").is_dir(),
            "the host's CA certificates are there"
        );
        assert!(
            !etc.join("ssl/private").exists(),
            "the host's private keys never are"
        );
        keys.push(key);
    }
    assert_ne!(keys[0], keys[1], "the switch is part of the key");

    // A sandbox made from the snapshot built with the network still has only its own loopback.
    let mut s = spec("netsnap", None);
    s.snapshot = Some(keys[1].clone());
    let handle = local.create(&s).await;
    let fs = client(&handle, Duration::from_secs(5));
    let (code, out, _) = sh(&fs, "readlink /proc/self/ns/net; cat /proc/net/dev").await;
    assert_eq!(code, Some(0));
    let mut lines = out.lines();
    assert_ne!(lines.next(), Some(host_net.as_str()), "{out}");
    // /proc/net/dev: two header lines, then `name: counters` per interface.
    let interfaces: Vec<&str> = lines
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(interfaces, ["lo"], "{out}");
}

#[tokio::test]
async fn a_reopened_provider_lists_and_resumes_running_sandboxes() {
    let mut local = Local::new();
    let handle = local.create(&spec("survivor", None)).await;
    client(&handle, Duration::from_secs(5))
        .write("/root/kept", "yes".into())
        .await
        .unwrap();
    let procs = local.p().processes(&handle.id);

    local.reopen();
    let p = local.p();
    let listed = p.list().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].id, handle.id);
    assert_eq!(listed[0].name.as_deref(), Some("survivor"));
    assert_eq!(listed[0].state, ProviderState::Running);
    assert!(procs.iter().all(Proc::alive));

    let again = p.resume(&handle.id).await.unwrap();
    let fs = client(&again, Duration::from_secs(5));
    assert_eq!(&fs.read("/root/kept").await.unwrap()[..], b"yes");
    p.destroy(&handle.id, false).await.unwrap();
    assert_gone(&local, &handle.id, &procs);
    assert!(p.list().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_sandbox_cannot_reach_a_host_port_or_host_files() {
    let local = Local::new();
    let p = local.p();
    // A listener on the host's loopback (the test's namespace) and a secret beside the state.
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let secret = local.dir.path().join("secret.txt");
    std::fs::write(&secret, "host secret").unwrap();

    let handle = local.create(&spec("attacker", None)).await;
    let fs = client(&handle, Duration::from_secs(10));
    let (code, _, err) = sh(&fs, &format!("echo hi > /dev/tcp/127.0.0.1/{port}")).await;
    // dash has no /dev/tcp; bash does, and is in the minimal root's /usr.
    assert_eq!(code, Some(2), "{err}");
    let (code, _, err) = sh(
        &fs,
        &format!("exec bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}'"),
    )
    .await;
    assert_ne!(code, Some(0), "the sandbox reached the host's port {port}");
    assert!(err.contains("refused"), "{err}");
    assert!(matches!(
        listener.accept(),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
    ));
    // Its own loopback works: the agent listens there.
    let (code, _, err) = sh(&fs, "exec bash -c 'exec 3<>/dev/tcp/127.0.0.1/2468'").await;
    assert_eq!(code, Some(0), "{err}");
    // No interface but loopback.
    let (_, out, _) = sh(&fs, "cat /proc/net/dev").await;
    let interfaces: Vec<&str> = out
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(interfaces, ["lo"]);

    // Host files outside its root are not there: the secret, the provider's state, /work.
    for path in [
        secret.to_string_lossy().into_owned(),
        local.state().to_string_lossy().into_owned(),
        p.volume_dir(&handle.id).to_string_lossy().into_owned(),
        "/work".into(),
        "/etc/shadow".into(),
    ] {
        let (code, out, _) = sh(&fs, &format!("cat '{path}' || ls '{path}'")).await;
        assert_ne!(code, Some(0), "{path} is visible inside: {out}");
    }
    // Its pid 1 is its own init; the host's processes are not in its /proc.
    let (_, out, _) = sh(
        &fs,
        "tr '\\0' ' ' </proc/1/cmdline; echo; ls /proc | grep -c '^[0-9]'",
    )
    .await;
    let mut lines = out.lines();
    assert!(
        lines.next().unwrap().starts_with("/usr/bin/bwrap "),
        "{out}"
    );
    let count: usize = lines.next().unwrap().trim().parse().unwrap();
    assert!(count < 10, "{count} processes visible inside");
    // Not the host's root user either: no capability over the host's mounts or devices.
    let (code, _, _) = sh(&fs, "mknod /root/disk b 8 0 && cat /root/disk").await;
    assert_ne!(code, Some(0));
}

#[tokio::test]
async fn bad_names_and_paths_are_refused_naming_the_key_and_rule() {
    let local = Local::new();
    let p = local.p();
    let mut bad = Vec::new();
    for name in ["..", "a/b", "/", "a\0b", ""] {
        bad.push(("sandbox.name", spec(name, None)));
    }
    for volume in ["..", "../../etc", "/etc", "v\0"] {
        bad.push(("sandbox.volume.volume", spec("ok", Some(volume))));
    }
    for mount in ["relative", "/a/../../b", "/", "/run/wardfs", "/a\0"] {
        let mut s = spec("ok", Some("v"));
        s.volume.as_mut().unwrap().mount_path = mount.into();
        bad.push(("sandbox.volume.mount_path", s));
    }
    for snapshot in ["..", "/tmp", "x/../y"] {
        let mut s = spec("ok", None);
        s.snapshot = Some(snapshot.into());
        bad.push(("sandbox.snapshot", s));
    }
    for (key, s) in bad {
        let err = p.create(&s).await.unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, ProvisionError::Invalid { .. }) && text.contains(key),
            "{s:?}: {text}"
        );
        assert!(text.contains("must"), "{text}");
    }
    for id in ["..", "../x", "a/b"] {
        assert!(matches!(
            p.destroy(id, false).await,
            Err(ProvisionError::Invalid { .. })
        ));
        assert!(p.create_volume(id).await.is_err());
        assert!(p.delete_volume(id).await.is_err());
    }
    let err = p
        .snapshot(&SnapshotSpec {
            network: false,
            base: "relative/dir".into(),
            setup: vec![],
        })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("snapshot.base"), "{err}");
    assert!(std::fs::read_dir(local.state().join("sandboxes"))
        .unwrap()
        .next()
        .is_none());
}

#[tokio::test]
async fn the_token_is_kept_private_and_never_in_the_hosts_ps() {
    let local = Local::new();
    let p = local.p();
    let handle = local.create(&spec("quiet", None)).await;
    let token_file = p.sandbox_dir(&handle.id).join("token");
    assert_eq!(
        std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let token = std::fs::read_to_string(&token_file).unwrap();
    assert!(token.len() >= 32);

    let ps = std::process::Command::new("ps")
        .args(["-eo", "pid,args"])
        .output()
        .unwrap();
    let ps = String::from_utf8_lossy(&ps.stdout);
    assert!(ps.contains("sandbox-agent server --token"), "{ps}");
    assert!(!ps.contains(&token), "the token shows in ps");
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let args = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&args).contains(&token),
            "{:?}",
            entry.path()
        );
    }
    assert!(!format!("{handle:?}").contains(&token));
    // The agent still takes it (it parsed its arguments before they were overwritten).
    client(&handle, Duration::from_secs(5))
        .check()
        .await
        .unwrap();
    // The log holds no token either.
    let log = std::fs::read_to_string(p.sandbox_dir(&handle.id).join("agent.log")).unwrap();
    assert!(!log.contains(&token));
}

#[tokio::test]
async fn a_killed_tree_is_stopped_and_resume_starts_it_again_on_its_volume() {
    for mode in [RootMode::Overlay, RootMode::Copy] {
        let mut local = Local::new();
        local.root_mode = mode;
        local.reopen();
        let p = local.p();
        // The named volume does not exist yet: create refuses, and leaves nothing.
        let err = p.create(&spec("phoenix", Some("v"))).await.unwrap_err();
        assert!(matches!(err, ProvisionError::Missing { .. }), "{err}");
        assert!(std::fs::read_dir(local.state().join("sandboxes"))
            .unwrap()
            .next()
            .is_none());
        p.create_volume("v").await.unwrap();
        let handle = local.create(&spec("phoenix", Some("v"))).await;
        let fs = client(&handle, Duration::from_secs(5));
        fs.write("/home/work/f", "before".into()).await.unwrap();
        let upper = p.volume_dir("v").join("upper");
        assert!(upper.join("home/work/f").is_file(), "{mode:?}");
        // In copy mode the volume holds the whole root; with overlayfs only the changes.
        assert_eq!(
            upper.join("usr").exists(),
            mode == RootMode::Copy,
            "{mode:?}"
        );

        // Kill the tree behind the provider's back (a reboot, the OOM killer).
        let procs = p.processes(&handle.id);
        for proc in &procs {
            proc.signal(libc::SIGKILL);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while procs.iter().any(Proc::alive) {
            assert!(
                Instant::now() < deadline,
                "{mode:?}: still alive after SIGKILL"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(p.state(&handle.id).await.unwrap(), ProviderState::Stopped);
        p.pause(&handle.id).await.unwrap();

        let again = p.resume(&handle.id).await.unwrap();
        let fs = client(&again, Duration::from_secs(5));
        assert_eq!(
            &fs.read("/home/work/f").await.unwrap()[..],
            b"before",
            "{mode:?}"
        );
        let procs = p.processes(&handle.id);
        p.destroy(&handle.id, false).await.unwrap();
        assert_gone(&local, &handle.id, &procs);
        assert!(upper.join("home/work/f").is_file());
    }
}
