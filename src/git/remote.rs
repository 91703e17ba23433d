//! Talking to remotes: fetch, ls-remote and push with credentials, progress and a lease.
//!
//! Credentials come from the environment variable named by `git.token_env` (HTTPS), ssh-agent or
//! `git.ssh_key` (ssh); the callback gives up after [`MAX_AUTH_ATTEMPTS`] (libgit2 keeps asking
//! otherwise) and the token is never put in a URL, a log line or the database. The token is
//! bound to its hosts ([`token_may_go`]): a remote URL comes from the API, that is from an agent,
//! so it goes only over https to `git.github_url`'s host and the hosts in `git.token_hosts`
//! (plain http only to a listed loopback host with `git.token_over_http`), judged on the URL
//! libgit2 is actually talking to (after any redirect). Plain http to a host that is not
//! loopback is refused unless `git.http_hosts` lists it ([`check_transport`]). A push carries a
//! lease: `push_negotiation` checks that the remote ref still points where we last saw it, and a
//! `push_update_reference` status is a rejection even though libgit2 reports success.
//!
//! Failures are [`RemoteError`]s (a push's own refusals, a broken lease or a rejection, are
//! `PushError`s), told apart by libgit2's error code and class and by what the callbacks and
//! the memory cap ([`memory`]) saw, never by message text.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::os::fd::{AsRawFd as _, OwnedFd};

use rustix::fs::{Mode, OFlags};

use git2::{Cred, CredentialType, Direction, FetchOptions, Oid, PushOptions, RemoteCallbacks};
use serde::Serialize;

use super::error::{libgit2, RemoteError};
use super::memory;
use super::PushError;
use crate::config::{Endpoint, GitSection};

/// libgit2's `GIT_ENOTSUPPORTED`: what its local transport answers a shallow fetch with.
const NOT_SUPPORTED: i32 = -39;

/// How many times the credential callback answers before giving up.
pub const MAX_AUTH_ATTEMPTS: u32 = 3;

/// The fetch depth that turns a shallow repository into a complete one (libgit2's
/// `GIT_FETCH_DEPTH_UNSHALLOW`).
pub const UNSHALLOW: i32 = i32::MAX;

/// Progress of a pull or push.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Progress {
    /// `fetch` (objects received), `push` (objects sent) or `write` (files written into the
    /// workspace).
    pub phase: &'static str,
    /// Objects (or files) done so far.
    pub done: usize,
    /// Objects (or files) in all; 0 while unknown.
    pub total: usize,
    /// Bytes transferred so far (0 in the `write` phase).
    pub bytes: usize,
}

/// Where progress goes (called often; cheap to call).
pub type OnProgress<'a> = &'a (dyn Fn(&Progress) + Sync);

/// What the callbacks saw, read after the operation.
#[derive(Default)]
struct Seen {
    attempts: Cell<u32>,
    auth_problem: RefCell<Option<String>>,
    remote_text: RefCell<String>,
    moved: RefCell<Option<(Oid, Oid)>>,
    rejected: RefCell<Option<(String, String)>>,
}

fn callbacks<'a>(
    settings: &'a GitSection,
    seen: &'a Seen,
    progress: OnProgress<'a>,
) -> RemoteCallbacks<'a> {
    let mut cb = RemoteCallbacks::new();
    cb.credentials(move |url, user_from_url, allowed| {
        let n = seen.attempts.get() + 1;
        seen.attempts.set(n);
        let give_up = |why: String| {
            *seen.auth_problem.borrow_mut() = Some(why.clone());
            Err(git2::Error::from_str(&why))
        };
        if n > MAX_AUTH_ATTEMPTS {
            return give_up(format!(
                "the remote refused the credentials {MAX_AUTH_ATTEMPTS} times; giving up"
            ));
        }
        let token_refused = if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) {
            token_may_go(url, settings).err()
        } else {
            None
        };
        if let Some(why) = &token_refused {
            // An ssh server may offer passwords and keys both: keys are still tried.
            if !allowed.intersects(CredentialType::SSH_KEY | CredentialType::USERNAME) {
                return give_up(why.clone());
            }
        }
        if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) && token_refused.is_none() {
            let Some(var) = settings.token_env.as_deref() else {
                return give_up(
                    "the remote wants a token and git.token_env names no variable".into(),
                );
            };
            let token = match std::env::var(var) {
                Ok(t) if !t.is_empty() => t,
                _ => {
                    return give_up(format!(
                        "the remote wants a token; set ${var} (git.token_env) in the daemon's environment"
                    ))
                }
            };
            if n > 1 {
                return give_up(format!("the remote refused the token in ${var}"));
            }
            let user = user_from_url.unwrap_or(&settings.token_user);
            return Cred::userpass_plaintext(user, &token);
        }
        if allowed.contains(CredentialType::SSH_KEY) {
            let user = user_from_url.unwrap_or("git");
            match (n, &settings.ssh_key) {
                (1, _) => return Cred::ssh_key_from_agent(user),
                (2, Some(key)) => return Cred::ssh_key(user, None, key, None),
                _ => {
                    return give_up(
                        "no ssh key was accepted (ssh-agent, then git.ssh_key)".into(),
                    )
                }
            }
        }
        if allowed.contains(CredentialType::USERNAME) {
            return Cred::username(user_from_url.unwrap_or("git"));
        }
        give_up(format!("the remote asks for credentials of a kind wardfs does not have ({allowed:?})"))
    });
    cb.transfer_progress(move |p| {
        progress(&Progress {
            phase: "fetch",
            done: p.received_objects(),
            total: p.total_objects(),
            bytes: p.received_bytes(),
        });
        true
    });
    cb.push_transfer_progress(move |done, total, bytes| {
        progress(&Progress {
            phase: "push",
            done,
            total,
            bytes,
        });
    });
    cb.sideband_progress(move |text| {
        let mut t = seen.remote_text.borrow_mut();
        if t.len() < 16 * 1024 {
            t.push_str(&String::from_utf8_lossy(text));
        }
        true
    });
    cb
}

/// Decides whether the token of `git.token_env` may be sent to `url` (the URL libgit2 is
/// talking to, after any redirect): over https to `git.github_url`'s host or a host in
/// `git.token_hosts`; over plain http only to such a host that is loopback, and only with
/// `git.token_over_http`. Anything else (another host, ssh, a URL that does not parse) gets no
/// token; the error says why and which keys would allow it.
pub fn token_may_go(url: &str, settings: &GitSection) -> Result<(), String> {
    let var = settings.token_env.as_deref().unwrap_or("git.token_env");
    let Some(end) = Endpoint::parse(url) else {
        return Err(format!(
            "the remote asks for a password; the token in ${var} goes only to https URLs naming a host in git.token_hosts or git.github_url's"
        ));
    };
    let github = Endpoint::parse(&settings.github_url);
    let listed = github
        .as_ref()
        .is_some_and(|g| g.host == end.host && g.effective_port() == end.effective_port())
        || end.listed_in(&settings.token_hosts);
    let var = settings.token_env.as_deref().unwrap_or("git.token_env");
    if !listed {
        return Err(format!(
            "{} asks for a password; the token in ${var} goes only to the host of git.github_url ({}) and the hosts in git.token_hosts",
            end.authority(),
            github.map(|g| g.authority()).unwrap_or_default()
        ));
    }
    match end.scheme.as_str() {
        "https" => Ok(()),
        "http" if end.is_loopback() && settings.token_over_http => Ok(()),
        "http" => Err(format!(
            "{} asks for a password over plain http; the token in ${var} goes over http only to a loopback host, with git.token_over_http = true",
            end.authority()
        )),
        other => Err(format!(
            "{} asks for a password over {other}; the token in ${var} goes only over https",
            end.authority()
        )),
    }
}

/// A remote URL that passed [`check_transport`], as libgit2 is to be given it: the URL itself,
/// or for a local repository the `/proc/self/fd/N` path of its directory, opened once and
/// checked, and held open while libgit2 works, so that what libgit2 opens is the directory that
/// was checked, whatever is swapped in at the path meanwhile.
#[derive(Debug)]
pub struct Checked {
    target: String,
    _dir: Option<OwnedFd>,
}

impl Checked {
    /// What libgit2 is given in place of the URL.
    pub fn target(&self) -> &str {
        &self.target
    }
}

/// Refuses plain http to a host that is neither loopback nor in `git.http_hosts` (anything on
/// the way could read or change what is fetched and pushed). Other URLs are left to libgit2.
///
/// It also refuses what libgit2 would reject only with an unclassified error, so that no failure
/// has to be told apart by its message text: a scheme libgit2 does not speak, and a local path
/// (or `file://` URL) that is not a git repository. A local repository allowed (beneath
/// `git.local_remotes`) is pinned: libgit2 gets the path of the directory fd that was checked
/// ([`Checked`]), never the path again.
pub fn check_transport(url: &str, settings: &GitSection) -> Result<Checked, RemoteError> {
    let bad = |reason: String| {
        Err(RemoteError::BadRemote {
            url: url.into(),
            reason,
        })
    };
    if let Some(end) = Endpoint::parse(url) {
        if !end.plain_http_allowed(&settings.http_hosts) {
            return bad(end.plain_http_rule("git.http_hosts"));
        }
    }
    let local = match url.split_once("://") {
        Some(("file", path)) => Some(path),
        Some(("http" | "https" | "git" | "ssh" | "git+ssh" | "ssh+git", _)) => None,
        Some((scheme, _)) => {
            return bad(format!(
                "unsupported URL scheme {scheme:?} (use https://, http://, ssh://, git://, file:// or a path)"
            ))
        }
        // scp-like `user@host:path` (a colon before any slash) goes over ssh.
        None if url.find(':').is_some_and(|c| !url[..c].contains('/')) => None,
        None => Some(url),
    };
    let Some(path) = local else {
        return Ok(Checked {
            target: url.to_string(),
            _dir: None,
        });
    };
    let dir = match local_remote_allowed(path, &settings.local_remotes) {
        Ok(dir) => dir,
        Err(rule) => return bad(rule),
    };
    let target = format!("/proc/self/fd/{}", dir.as_raw_fd());
    if git2::Repository::open_bare(&target)
        .or_else(|_| git2::Repository::open(&target))
        .is_err()
    {
        return bad(format!("no git repository at {path}"));
    }
    Ok(Checked {
        target,
        _dir: Some(dir),
    })
}

/// Allows a local repository only beneath a directory of `git.local_remotes`, so a client of the
/// socket cannot copy a repository from anywhere the daemon's user can read. The directory is
/// opened once (`O_PATH`, symlinks on the way followed) and judged on where that fd really is
/// (`/proc/self/fd/N`), and the fd is returned for libgit2 to open through: a symlink swapped in
/// at the path after the check cannot redirect what is read.
fn local_remote_allowed(path: &str, allowed: &[std::path::PathBuf]) -> Result<OwnedFd, String> {
    if allowed.is_empty() {
        return Err(format!(
            "{path} is a local repository, and local repositories are refused: list a directory \
             holding it in git.local_remotes to allow it"
        ));
    }
    let no_repo = |e: &dyn std::fmt::Display| format!("no git repository at {path} ({e})");
    let dir = rustix::fs::open(
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| no_repo(&e))?;
    let real = std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd()))
        .map_err(|e| no_repo(&e))?;
    let inside = allowed
        .iter()
        .filter_map(|d| std::fs::canonicalize(d).ok())
        .any(|d| real.starts_with(d));
    if inside {
        return Ok(dir);
    }
    let dirs: Vec<String> = allowed.iter().map(|d| d.display().to_string()).collect();
    Err(format!(
        "{path} is a local repository outside git.local_remotes ({}); only repositories \
         beneath those may be pulled from or pushed to",
        dirs.join(", ")
    ))
}

/// Turns a failed network operation into the error a user can act on.
fn failed(url: &str, op: &str, seen: &Seen, e: git2::Error) -> RemoteError {
    if let Some(why) = seen.auth_problem.borrow_mut().take() {
        return RemoteError::AuthFailed {
            url: url.into(),
            reason: why,
        };
    }
    // Classified by libgit2's code and class only: every refusal of credentials passes through
    // the callback above (`auth_problem`), and the remotes libgit2 fails without a class
    // (unknown schemes, paths that are no repository) were refused by `check_transport` first.
    if e.code() == git2::ErrorCode::Auth {
        return RemoteError::AuthFailed {
            url: url.into(),
            reason: e.message().into(),
        };
    }
    match e.class() {
        git2::ErrorClass::Repository | git2::ErrorClass::Invalid => RemoteError::BadRemote {
            url: url.into(),
            reason: e.message().into(),
        },
        git2::ErrorClass::Net
        | git2::ErrorClass::Os
        | git2::ErrorClass::Ssl
        | git2::ErrorClass::Ssh
        | git2::ErrorClass::Http => RemoteError::Unreachable {
            url: url.into(),
            reason: e.message().into(),
        },
        _ => libgit2(format!("{op} {url}"))(e).into(),
    }
}

/// Fetches `refspecs` from `url` into `repo` (shallow when `depth > 0`), libgit2 allocating at
/// most `cap` bytes at once ([`memory::Cap`]): an object that needs more (a delta bomb, a huge
/// file of a local repository) fails the fetch as [`RemoteError::ObjectTooBig`] before it is
/// inflated, whatever the transport.
pub fn fetch(
    repo: &git2::Repository,
    url: &str,
    refspecs: &[String],
    depth: i32,
    settings: &GitSection,
    cap: u64,
    progress: OnProgress<'_>,
) -> Result<(), RemoteError> {
    let cap = memory::Cap::enter(cap);
    fetch_capped(repo, url, refspecs, depth, settings, progress).map_err(|e| {
        match memory::take_refused() {
            Some(bytes) => RemoteError::ObjectTooBig {
                url: url.into(),
                bytes,
                cap: cap.bytes(),
            },
            None => e,
        }
    })
}

/// The fetch itself, run inside [`fetch`]'s cap.
fn fetch_capped(
    repo: &git2::Repository,
    url: &str,
    refspecs: &[String],
    depth: i32,
    settings: &GitSection,
    progress: OnProgress<'_>,
) -> Result<(), RemoteError> {
    let checked = check_transport(url, settings)?;
    let seen = Seen::default();
    let mut remote = repo
        .remote_anonymous(checked.target())
        .map_err(libgit2(format!("remote {url}")))?;
    let mut fo = FetchOptions::new();
    fo.remote_callbacks(callbacks(settings, &seen, progress));
    fo.download_tags(git2::AutotagOption::None);
    if depth > 0 {
        fo.depth(depth);
    }
    match remote.fetch(refspecs, Some(&mut fo), None) {
        // libgit2's local transport (paths, file://) cannot fetch shallowly: fetch it whole.
        Err(e)
            if depth > 0 && e.raw_code() == NOT_SUPPORTED && e.class() == git2::ErrorClass::Net =>
        {
            fetch_capped(repo, url, refspecs, 0, settings, progress)
        }
        r => r.map_err(|e| failed(url, "fetch", &seen, e)),
    }
}

/// Lists the remote's refs (`git ls-remote`) and its default branch.
pub fn ls_remote(
    repo: &git2::Repository,
    url: &str,
    settings: &GitSection,
) -> Result<(HashMap<String, Oid>, Option<String>), RemoteError> {
    let checked = check_transport(url, settings)?;
    let seen = Seen::default();
    let noop = |_: &Progress| {};
    let mut remote = repo
        .remote_anonymous(checked.target())
        .map_err(libgit2(format!("remote {url}")))?;
    let conn = remote
        .connect_auth(
            Direction::Fetch,
            Some(callbacks(settings, &seen, &noop)),
            None,
        )
        .map_err(|e| failed(url, "connect to", &seen, e))?;
    let refs = conn
        .list()
        .map_err(|e| failed(url, "list", &seen, e))?
        .iter()
        .map(|h| (h.name().to_string(), h.oid()))
        .collect();
    let default = conn.default_branch().ok().and_then(|b| {
        b.as_str()
            .ok()
            .map(|s| s.trim_start_matches("refs/heads/").to_string())
    });
    Ok((refs, default))
}

/// Pushes local ref `src` to remote ref `dst`, provided the remote ref is still `expected`
/// (`Oid::ZERO_SHA1`: it must not exist).
#[allow(clippy::too_many_arguments)]
pub fn push(
    repo: &git2::Repository,
    url: &str,
    src: &str,
    dst: &str,
    expected: Oid,
    settings: &GitSection,
    progress: OnProgress<'_>,
) -> Result<(), PushError> {
    let checked = check_transport(url, settings)?;
    let dst_owned = dst.to_string();
    let seen = Seen::default();
    let mut remote = repo
        .remote_anonymous(checked.target())
        .map_err(|e| RemoteError::from(libgit2(format!("remote {url}"))(e)))?;
    let mut cb = callbacks(settings, &seen, progress);
    cb.push_negotiation(|updates| {
        for u in updates {
            if u.dst_refname() == Ok(dst_owned.as_str()) && u.src() != expected {
                *seen.moved.borrow_mut() = Some((expected, u.src()));
                return Err(git2::Error::from_str("the remote ref moved (lease broken)"));
            }
        }
        Ok(())
    });
    cb.push_update_reference(|refname, status| {
        if let Some(reason) = status {
            *seen.rejected.borrow_mut() = Some((refname.to_string(), reason.to_string()));
        }
        Ok(())
    });
    let mut po = PushOptions::new();
    po.remote_callbacks(cb);
    let refspec = format!("+{src}:{dst}");
    let result = remote.push(&[refspec.as_str()], Some(&mut po));
    drop(po);
    if let Some((exp, found)) = seen.moved.borrow_mut().take() {
        return Err(PushError::RemoteMoved {
            branch: dst.trim_start_matches("refs/heads/").into(),
            expected: short(exp),
            found: short(found),
        });
    }
    let remote_text = seen.remote_text.borrow().clone();
    if let Some((refname, reason)) = seen.rejected.borrow_mut().take() {
        return Err(PushError::Rejected {
            refname,
            reason: with_remote_text(reason, &remote_text),
        });
    }
    // A refusal by the remote (a hook, a protected branch) came through
    // `push_update_reference` above; what is left failed on the way.
    result.map_err(|e| failed(url, "push to", &seen, e).into())
}

fn with_remote_text(reason: String, remote_text: &str) -> String {
    let text: Vec<&str> = remote_text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if text.is_empty() {
        reason
    } else {
        format!("{reason} (remote said: {})", text.join(" / "))
    }
}

/// An abbreviated commit id ("none" for the zero id).
pub fn short(oid: Oid) -> String {
    if oid.is_zero() {
        "none".into()
    } else {
        oid.to_string()[..12].to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::{check_transport, token_may_go};
    use crate::config::GitSection;

    #[test]
    fn the_token_goes_only_to_its_hosts_over_https() {
        let mut s = GitSection::default();
        assert!(token_may_go("https://github.com/o/r.git", &s).is_ok());
        assert!(token_may_go("https://GitHub.com:443/o/r", &s).is_ok());
        for url in [
            "https://github.com.evil.example/o/r.git",
            "https://github.com@evil.example/o/r.git",
            "https://evil.example/github.com/o/r.git",
            "https://github.com:8443/o/r.git",
            "http://github.com/o/r.git",
            "ssh://git@github.com/o/r.git",
            "git@github.com:o/r.git",
            "http://127.0.0.1:8080/o/r.git",
            "not a url",
        ] {
            let why = token_may_go(url, &s).unwrap_err();
            assert!(why.contains("GITHUB_TOKEN"), "{url}: {why}");
        }
        s.token_hosts = vec!["git.example.com".into(), "127.0.0.1:8080".into()];
        assert!(token_may_go("https://git.example.com:9443/x.git", &s).is_ok());
        let why = token_may_go("http://127.0.0.1:8080/o/r.git", &s).unwrap_err();
        assert!(why.contains("git.token_over_http"), "{why}");
        s.token_over_http = true;
        assert!(token_may_go("http://127.0.0.1:8080/o/r.git", &s).is_ok());
        assert!(token_may_go("http://127.0.0.1:8081/o/r.git", &s).is_err());
        // Over plain http only to loopback, even when listed.
        assert!(token_may_go("http://git.example.com/x.git", &s).is_err());
    }

    #[test]
    fn plain_http_goes_only_to_loopback_or_listed_hosts() {
        let mut s = GitSection::default();
        for ok in [
            "https://example.com/x.git",
            "http://127.0.0.1:9/x.git",
            "http://[::1]:9/x.git",
            "http://localhost/x.git",
            "git://example.com/x.git",
        ] {
            assert!(check_transport(ok, &s).is_ok(), "{ok}");
        }
        let e = check_transport("http://example.com/x.git", &s).unwrap_err();
        assert!(e.to_string().contains("git.http_hosts"), "{e}");
        s.http_hosts = vec!["example.com".into()];
        assert!(check_transport("http://example.com/x.git", &s).is_ok());
    }

    #[test]
    fn remotes_are_classified_by_shape_and_error_class_never_by_message_text() {
        use crate::git::RemoteError;
        let s = GitSection::default();
        let d = tempfile::tempdir().unwrap();
        let mirror = git2::Repository::init_bare(d.path().join("mirror")).unwrap();
        git2::Repository::init_bare(d.path().join("up.git")).unwrap();
        std::fs::create_dir(d.path().join("plain")).unwrap();
        let path = |p: &str| d.path().join(p).display().to_string();
        let bad = [
            "foo://host/x".to_string(),
            path("nope"),
            path("plain"),
            format!("file://{}", path("nope")),
        ];
        let local_ok = GitSection {
            local_remotes: vec![d.path().to_path_buf()],
            ..GitSection::default()
        };
        for url in &bad {
            match super::ls_remote(&mirror, url, &local_ok) {
                Err(RemoteError::BadRemote { reason, .. }) => assert!(!reason.is_empty(), "{url}"),
                other => panic!("{url}: {:?}", other.map(|_| ())),
            }
        }
        // Local repositories only beneath git.local_remotes.
        for ok in [path("up.git"), format!("file://{}", path("up.git"))] {
            match check_transport(&ok, &s) {
                Err(RemoteError::BadRemote { reason, .. }) => {
                    assert!(reason.contains("git.local_remotes"), "{reason}")
                }
                other => panic!("{ok} allowed by default: {other:?}"),
            }
        }
        let allowed = GitSection {
            local_remotes: vec![d.path().to_path_buf()],
            ..GitSection::default()
        };
        for ok in [path("up.git"), format!("file://{}", path("up.git"))] {
            assert!(check_transport(&ok, &allowed).is_ok(), "{ok}");
        }
        let elsewhere = tempfile::tempdir().unwrap();
        let outside = GitSection {
            local_remotes: vec![elsewhere.path().to_path_buf()],
            ..GitSection::default()
        };
        std::os::unix::fs::symlink(d.path().join("up.git"), elsewhere.path().join("link.git"))
            .unwrap();
        let through_link = elsewhere.path().join("link.git").display().to_string();
        for url in [path("up.git"), through_link] {
            assert!(
                matches!(
                    check_transport(&url, &outside),
                    Err(RemoteError::BadRemote { .. })
                ),
                "{url}"
            );
        }
        // Nothing listens on port 1: a network failure, told by its class.
        match super::ls_remote(&mirror, "git://127.0.0.1:1/x", &s) {
            Err(RemoteError::Unreachable { .. }) => {}
            other => panic!("{:?}", other.map(|_| ())),
        }
    }
}
