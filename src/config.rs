//! Configuration: the `config.toml` format, its embedded default and its validation.
//!
//! A [`ConfigFile`] is what serde reads (unknown keys rejected); [`Settings`] is the validated,
//! fully resolved result the daemon and the CLI use. Every rejected value names its key and the
//! rule it broke. The repository's `config.toml` is the embedded default, byte for byte.
//!
//! Owns the config file and the zone names ([`ZoneId`]). Imports nothing of wardfs: every other
//! room may import it (`tests/rules` checks the imports).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The documented default configuration, embedded in the binary.
pub const DEFAULT_CONFIG: &str = include_str!("../config.toml");

/// Environment variable naming a config file when `--config` is not given.
pub const CONFIG_ENV: &str = "WARDFS_CONFIG";

/// A config that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config {origin}: {}", source.to_string().trim_end())]
    Parse {
        origin: String,
        source: Box<toml::de::Error>,
    },
    #[error("config {origin}{}: `{key}`: {rule}", at.map(|(l, c)| format!(", line {l}, column {c}")).unwrap_or_default())]
    Invalid {
        origin: String,
        key: String,
        rule: String,
        /// Where the key is written (line and column, from 1), when it is written at all.
        at: Option<(usize, usize)>,
    },
}

impl ConfigError {
    /// Returns the error with the line and column of its key in `text`, when it has one.
    fn located(self, text: &str) -> ConfigError {
        match self {
            ConfigError::Invalid {
                origin,
                key,
                rule,
                at: None,
            } => {
                let at = locate(text, &key);
                ConfigError::Invalid {
                    origin,
                    key,
                    rule,
                    at,
                }
            }
            other => other,
        }
    }
}

/// Returns the line and column (from 1) of the dotted `key` in the TOML `text`: the deepest
/// part of the key that is written there (a key left to its default has no place of its own).
fn locate(text: &str, key: &str) -> Option<(usize, usize)> {
    let doc = toml::de::DeTable::parse(text).ok()?;
    let mut table = doc.get_ref();
    let mut found = None;
    for part in key.split('.') {
        let (k, v) = table.iter().find(|(k, _)| k.get_ref().as_ref() == part)?;
        found = Some(k.span().start);
        match v.get_ref() {
            toml::de::DeValue::Table(t) => table = t,
            _ => break,
        }
    }
    let offset = found?;
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    Some((line, column))
}

/// The file format of `config.toml`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    pub state_dir: Option<PathBuf>,
    pub socket: Option<PathBuf>,
    pub mount: Option<PathBuf>,
    #[serde(default)]
    pub fuse: FuseSection,
    #[serde(default)]
    pub zones: ZonesSection,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub api: ApiSection,
    #[serde(default)]
    pub git: GitSection,
    #[serde(default)]
    pub journal: JournalSection,
    #[serde(default)]
    pub checkpoints: CheckpointsSection,
    #[serde(default)]
    pub mcp: McpSection,
    #[serde(default)]
    pub forks: ForksSection,
    /// `[sandboxes.<name>]`: remote sandboxes, by name.
    #[serde(default)]
    pub sandboxes: BTreeMap<String, SandboxSection>,
}

/// How the zones are backed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ZoneMode {
    #[default]
    Sandboxed,
    Direct,
    Single,
}

/// `[zones]`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ZonesSection {
    #[serde(default)]
    pub mode: ZoneMode,
    pub root: Option<PathBuf>,
    pub dir: Option<PathBuf>,
    pub cache_subdir: Option<String>,
    #[serde(default)]
    pub cache: ZoneSection,
    #[serde(default)]
    pub workspace: ZoneSection,
}

/// `[zones.cache]` and `[zones.workspace]`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ZoneSection {
    pub dir: Option<PathBuf>,
    #[serde(default)]
    pub read_only: bool,
    #[serde(default)]
    pub allow_hardlinks: bool,
    /// Serve the zone from a directory inside this sandbox (a name from `[sandboxes]`).
    pub sandbox: Option<String>,
    /// The directory inside the sandbox (absolute); the sandbox's `root` when not given.
    pub path: Option<String>,
    /// How long a remote zone's attributes and listings are trusted (milliseconds).
    pub attr_ttl_ms: Option<u64>,
    /// How the mount does file I/O in this zone (local zones only).
    pub io: Option<IoMode>,
}

/// `zones.<zone>.io`: how the mount serves file reads and writes in a local zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum IoMode {
    /// Each `open` is a request to the daemon, whose reply hands the kernel the backing file
    /// (kernel passthrough, Linux 6.9+): reads and writes then go to the backing file without
    /// the daemon, at native speed for large files. Without passthrough, the daemon serves them.
    Passthrough,
    /// The default. Reads are served from the kernel's page cache, kept across opens; when every
    /// zone is local, writable and cached, the kernel sends no `OPEN`, `RELEASE` or `FLUSH` at
    /// all (`FUSE_NO_OPEN_SUPPORT`): opening and closing a file costs no request, and a file read
    /// before costs none to read again. Cold reads and all writes go through the daemon.
    #[default]
    Cached,
}

/// `[fuse]`: how the mount talks to the kernel.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FuseSection {
    /// How the kernel hands the mount's requests to the daemon.
    #[serde(default)]
    pub transport: Transport,
    /// Read ahead of a walk through the mount: when the kernel lists a directory, a thread
    /// reads its subdirectories and stats their entries on the backing disk (see
    /// `core::prefetch`). Default true.
    #[serde(default = "yes")]
    pub prefetch: bool,
    /// Extended attributes through the mount (`getfattr`, `setfattr`, `tar --xattrs`). Default
    /// true. False answers them `ENOSYS`, and the kernel stops asking: before every write and
    /// chown of a file it asks for `security.capability` (to clear file capabilities), a round
    /// trip each that an untar pays twice per file.
    #[serde(default = "yes")]
    pub xattrs: bool,
    /// The mount's read-ahead window in KiB (the kernel's `read_ahead_kb` of the mount's
    /// device): how far ahead of a sequential reader the kernel asks the daemon for a file's
    /// pages not yet in its page cache. Default 1024 (one request of the largest size; the
    /// kernel's own is 128); 0 leaves the kernel's. At most 65536.
    #[serde(default = "read_ahead_kb")]
    pub read_ahead_kb: u32,
}

fn yes() -> bool {
    true
}

/// `fuse.read_ahead_kb`'s default: as much as one `READ` carries (`max_pages`, 1 MiB).
fn read_ahead_kb() -> u32 {
    1024
}

/// The largest `fuse.read_ahead_kb` taken (64 MiB).
pub const MAX_READ_AHEAD_KB: u32 = 65_536;

impl Default for FuseSection {
    fn default() -> Self {
        FuseSection {
            transport: Transport::default(),
            prefetch: true,
            xattrs: true,
            read_ahead_kb: read_ahead_kb(),
        }
    }
}

/// `fuse.transport`: how requests travel between the kernel and the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
pub enum Transport {
    /// The default. FUSE over io_uring (Linux 6.14+ with the `fuse` module's `enable_uring`
    /// parameter on): one ring per CPU; a request is copied into a buffer the daemon registered
    /// and answered by one `io_uring_enter`, instead of a `read` and a `write` of `/dev/fuse`.
    /// When the kernel does not offer it, the mount uses `device` and logs why.
    #[default]
    #[serde(rename = "io_uring")]
    IoUring,
    /// Every request is read from and answered through `/dev/fuse`.
    #[serde(rename = "device")]
    Device,
}

/// `[limits]`.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    pub max_read_bytes: u64,
    pub max_write_bytes: u64,
    pub grep_max_results: usize,
    pub glob_max_results: usize,
    /// Largest JSON answer read from a sandbox (stat, listings, command output).
    pub sandbox_answer_bytes: u64,
    /// Largest walk listing of a sandbox's tree read (mirror push and pull): the records
    /// downloaded, or the paths listed when the sandbox has no GNU find. With
    /// `sandbox_walk_entries` it bounds what a walk keeps in memory (its paths, plus about
    /// 100 bytes an entry).
    pub sandbox_listing_bytes: u64,
    /// Most entries one walk or listing of a sandbox's tree may hold (each is kept in memory).
    pub sandbox_walk_entries: usize,
    /// Largest file downloaded from a sandbox; mirror pull skips and reports larger ones.
    pub sandbox_file_bytes: u64,
    /// Largest file a git pull takes from a repository (libgit2 reads a blob whole); larger ones
    /// are skipped and reported. Plus `git::memory::HEADROOM`, the most libgit2 may allocate at
    /// once while a fetch or pull reads a repository.
    pub git_blob_bytes: u64,
    /// Descriptors the daemon may hold open. The mount keeps one per inode the kernel caches, so
    /// this bounds how large a tree stays cached (three quarters of it); past that, the least
    /// recently used entries are dropped and looked up again. The daemon raises its limit to
    /// this when the system allows (root, or a hard limit at least as high), else to its hard
    /// limit, and says so.
    pub open_files: u64,
    /// Memory all request bodies being read and parsed may take together (the API's body
    /// budget): past it a request waits for its turn, then gets BUSY.
    pub body_memory_bytes: u64,
    /// How long a request waits for room in `body_memory_bytes` before it gets BUSY.
    pub body_memory_wait_secs: u64,
    /// How long a command run in a sandbox (`wardfs run --sandbox`, `POST /v1/run`) may take
    /// when the run names no timeout; the remote process is killed at its deadline.
    pub run_timeout_secs: u64,
    /// Output of a run kept in memory for its result, per stream (the last bytes; the rest is
    /// counted, not kept). What streams to the client is not kept.
    pub run_output_bytes: u64,
    /// How long a run whose clients all went away waits for one to reconnect
    /// (`GET /v1/runs/{id}/events`) before its command is stopped; 0 stops it at once.
    pub run_reconnect_secs: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_read_bytes: 10 << 20,
            max_write_bytes: 100 << 20,
            grep_max_results: 1000,
            glob_max_results: 1000,
            sandbox_answer_bytes: 16 << 20,
            sandbox_listing_bytes: 64 << 20,
            sandbox_walk_entries: 1_000_000,
            sandbox_file_bytes: 4 << 30,
            git_blob_bytes: 256 << 20,
            open_files: 262_144,
            body_memory_bytes: 192 << 20,
            body_memory_wait_secs: 30,
            run_timeout_secs: 600,
            run_output_bytes: 1 << 20,
            run_reconnect_secs: 10,
        }
    }
}

/// `[api]`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ApiSection {
    #[serde(default)]
    pub allowed_uids: Vec<u32>,
    /// The token variables a sandbox added through the API (`wardfs sandbox add`) may name.
    #[serde(default)]
    pub sandbox_token_envs: Vec<String>,
    /// Hosts besides loopback that a sandbox added through the API may reach over plain http.
    #[serde(default)]
    pub sandbox_http_hosts: Vec<String>,
    /// Most connections the socket serves at once (see [`Connections`]).
    #[serde(default)]
    pub max_connections: Option<usize>,
    /// Seconds a connection may go without a complete request head (see [`Connections`]).
    #[serde(default)]
    pub idle_timeout_secs: Option<u64>,
}

/// How the API's socket bounds its connections: `api.max_connections` and
/// `api.idle_timeout_secs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connections {
    /// Most connections served at once (the daemon also keeps it under an eighth of its
    /// descriptor limit).
    pub max: usize,
    /// How long a connection may go without a complete request head, from its opening or its
    /// last answer; then it is closed.
    pub idle_timeout: Duration,
}

impl Default for Connections {
    fn default() -> Self {
        Connections {
            max: 1024,
            idle_timeout: Duration::from_secs(10),
        }
    }
}

/// `[git]`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct GitSection {
    pub token_env: Option<String>,
    pub token_user: String,
    pub ssh_key: Option<PathBuf>,
    pub github_url: String,
    pub github_api: String,
    pub author_name: String,
    pub author_email: String,
    pub max_diff_bytes: u64,
    /// Hosts (`host` or `host:port`) besides `github_url`'s that the token may be sent to.
    pub token_hosts: Vec<String>,
    /// Whether the token may go over plain http to a loopback host it may be sent to.
    pub token_over_http: bool,
    /// Hosts besides loopback that remotes may be reached at over plain http.
    pub http_hosts: Vec<String>,
    /// Directories beneath which a local repository (a path or `file://` URL) may be pulled
    /// from or pushed to; none by default, so no client of the socket reads a repository
    /// outside the zones.
    pub local_remotes: Vec<PathBuf>,
}

impl Default for GitSection {
    fn default() -> Self {
        GitSection {
            token_env: Some("GITHUB_TOKEN".into()),
            token_user: "x-access-token".into(),
            ssh_key: None,
            github_url: "https://github.com".into(),
            github_api: "https://api.github.com".into(),
            author_name: "wardfs agent".into(),
            author_email: "wardfs@localhost".into(),
            max_diff_bytes: 1 << 20,
            token_hosts: Vec::new(),
            token_over_http: false,
            http_hosts: Vec::new(),
            local_remotes: Vec::new(),
        }
    }
}

/// `[checkpoints]`: snapshots of a zone to go back to (`wardfs checkpoint`, `wardfs restore`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct CheckpointsSection {
    /// Files larger than this are recorded by size only, never copied into the store (and a
    /// restore leaves them as they are).
    pub max_file_bytes: u64,
    /// Gitignore-style patterns, relative to the zone, that no checkpoint records (nor a restore
    /// touches).
    pub exclude: Vec<String>,
    /// Also leave out what the zone's `.gitignore` files ignore.
    pub gitignore: bool,
    /// Checkpoint a changed zone once the journal has been quiet this long; 0 switches it off.
    pub auto_quiet_ms: u64,
    /// Checkpoints kept per zone, newest first (0: no limit); the newest is always kept.
    pub keep: u32,
    /// Days a checkpoint is kept (0: forever); the newest of each zone is always kept.
    pub keep_days: u32,
}

impl Default for CheckpointsSection {
    fn default() -> Self {
        CheckpointsSection {
            max_file_bytes: 16 * 1024 * 1024,
            exclude: vec!["node_modules/".into(), ".venv/".into()],
            gitignore: true,
            auto_quiet_ms: 2000,
            keep: 1000,
            keep_days: 30,
        }
    }
}

/// `[journal]`.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct JournalSection {
    /// Days a journal row (and a discarded staged commit) is kept; 0 keeps them forever.
    pub keep_days: u32,
    /// Watch the local zones' directories and journal changes made beside wardfs.
    pub watch: bool,
}

impl Default for JournalSection {
    fn default() -> Self {
        JournalSection {
            keep_days: 30,
            watch: true,
        }
    }
}

/// `[mcp]`: the MCP server (`wardfs mcp`).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct McpSection {
    /// Offer the `git_push` tool. Pushing is a person's decision, so it is off by default.
    pub allow_push: bool,
    /// Offer the `sandbox_create`, `sandbox_list` and `sandbox_destroy` tools. Making and
    /// destroying sandboxes is a person's decision too: off by default.
    pub allow_sandboxes: bool,
    /// Offer the `run` tool (a command run in a sandbox, its changes pulled back): off by
    /// default, like the sandbox tools.
    pub allow_run: bool,
}

/// `[forks]`: forks of zones (`wardfs fork`).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ForksSection {
    /// Keep a fork made ahead (a spare) of each zone that has been forked, so the next fork of
    /// it takes milliseconds: the spare's hard links are brought up to date from the journal
    /// and it becomes the fork. Off, every fork links the whole tree when it is made.
    pub spare: bool,
}

impl Default for ForksSection {
    fn default() -> Self {
        ForksSection { spare: true }
    }
}

/// When a sandbox is attached (health-checked and connected).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// On first use.
    #[default]
    Lazy,
    /// When the daemon starts.
    Warm,
}

impl SandboxMode {
    /// Returns the name used in the config and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::Lazy => "lazy",
            SandboxMode::Warm => "warm",
        }
    }

    /// Parses `lazy` or `warm`.
    pub fn from_name(s: &str) -> Option<SandboxMode> {
        match s {
            "lazy" => Some(SandboxMode::Lazy),
            "warm" => Some(SandboxMode::Warm),
            _ => None,
        }
    }
}

/// `[sandboxes.<name>]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SandboxSection {
    pub provider: String,
    /// `sandbox-agent` only (required there).
    #[serde(default)]
    pub url: Option<String>,
    pub token_env: Option<String>,
    pub root: Option<String>,
    #[serde(default)]
    pub mode: SandboxMode,
    pub idle_ttl_minutes: Option<u64>,
    pub retries: Option<u32>,
    pub retry_backoff_ms: Option<u64>,
    pub request_timeout_secs: Option<u64>,
    /// The daemon's environment variables a run may pass into this sandbox (`--env VAR`).
    #[serde(default)]
    pub run_env: Vec<String>,
    /// Provisioned (`local`, `daytona`): a snapshot id to start from.
    #[serde(default)]
    pub snapshot: Option<String>,
    /// Provisioned: what the snapshot is built from (a directory locally, an image on daytona).
    #[serde(default)]
    pub snapshot_base: Option<String>,
    /// Provisioned: shell commands run once in a sandbox made from `snapshot_base`.
    #[serde(default)]
    pub snapshot_setup: Option<Vec<String>>,
    /// Provisioned (local): the setup commands reach the host's network.
    #[serde(default)]
    pub snapshot_network: Option<bool>,
    /// Provisioned: a named volume that outlives the sandbox.
    #[serde(default)]
    pub volume: Option<String>,
    /// Provisioned: where the volume appears inside the sandbox (default: `root`).
    #[serde(default)]
    pub volume_path: Option<String>,
    /// Provisioned: minutes without use before the sandbox is paused (fractions allowed).
    #[serde(default)]
    pub idle_pause_minutes: Option<f64>,
    /// Provisioned: minutes a paused sandbox is kept before it is destroyed (fractions allowed).
    #[serde(default)]
    pub paused_ttl_minutes: Option<f64>,
    /// `local`: the static `sandbox-agent` binary bound into the sandbox.
    #[serde(default)]
    pub agent_bin: Option<PathBuf>,
    /// `daytona`: the API's base URL.
    #[serde(default)]
    pub api_url: Option<String>,
    /// `daytona`: the variable holding the API key (sent only to `api_url`'s host).
    #[serde(default)]
    pub api_key_env: Option<String>,
}

/// A sandbox wardfs reaches but does not own (someone else started its sandbox-agent).
pub const PROVIDER_SANDBOX_AGENT: &str = "sandbox-agent";
/// A sandbox wardfs makes on this machine (`sandbox::provision::local`).
pub const PROVIDER_LOCAL: &str = "local";
/// A sandbox wardfs makes through Daytona's API (`sandbox::provision::daytona`).
pub const PROVIDER_DAYTONA: &str = "daytona";
/// The remote directory mirrored to when a sandbox names none.
pub const DEFAULT_SANDBOX_ROOT: &str = "/workspace";

/// Which provider makes a provisioned sandbox, with that provider's own keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProvisionKind {
    /// `provider = "local"`.
    Local {
        /// `agent_bin`; `None`: `sandbox-agent` on the daemon's `PATH`.
        agent_bin: Option<PathBuf>,
    },
    /// `provider = "daytona"`.
    Daytona {
        /// `api_url`; `None`: the provider's default.
        api_url: Option<String>,
        /// `api_key_env`: the NAME of the variable holding the key.
        api_key_env: String,
    },
}

impl ProvisionKind {
    /// Returns the provider's name, as in `provider = "..."`.
    pub fn name(&self) -> &'static str {
        match self {
            ProvisionKind::Local { .. } => PROVIDER_LOCAL,
            ProvisionKind::Daytona { .. } => PROVIDER_DAYTONA,
        }
    }
}

/// What a provisioned sandbox is made from and how long it lives unused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvisionSettings {
    pub kind: ProvisionKind,
    /// A snapshot id to start from.
    pub snapshot: Option<String>,
    /// The snapshot to build (`snapshot_base`, `snapshot_setup`) when no id is given.
    pub snapshot_base: Option<String>,
    pub snapshot_setup: Vec<String>,
    /// The setup commands reach the host's network (a sandbox never does).
    pub snapshot_network: bool,
    /// A named volume and where it appears inside the sandbox.
    pub volume: Option<String>,
    pub volume_path: String,
    /// Time without use after which the sandbox is paused (0: never).
    pub idle_pause: Duration,
    /// Time a paused sandbox is kept before it is destroyed (0: never).
    pub paused_ttl: Duration,
}

/// Checks a provider-side name (snapshot, volume): 1 to 64 of letters, digits, `.`, `_`, `-`,
/// not starting with `.` or `-`.
pub fn check_plain_name(value: &str) -> Result<(), String> {
    let ok = !value.is_empty()
        && value.len() <= 64
        && !value.starts_with(['.', '-'])
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{value:?} must be 1 to 64 letters, digits, '.', '_' or '-', not starting with '.' or '-'"
        ))
    }
}

/// Converts `minutes` (the key `key`, fractions allowed) to a duration of at most a week.
fn minutes(key: &str, value: Option<f64>, default: f64) -> Result<Duration, (String, String)> {
    let m = value.unwrap_or(default);
    if !m.is_finite() || !(0.0..=10_080.0).contains(&m) {
        return Err((
            key.to_string(),
            format!("{m} must be between 0 and 10080 (a week); 0 never does it"),
        ));
    }
    Ok(Duration::from_millis((m * 60_000.0).round() as u64))
}

/// Refuses the first of `keys` (a field, and whether it is set) that is set, with `rule`: a key
/// written where it does not belong.
fn first_set(keys: &[(&'static str, bool)], rule: String) -> Result<(), (&'static str, String)> {
    match keys.iter().find(|(_, set)| *set) {
        Some((field, _)) => Err((*field, rule)),
        None => Ok(()),
    }
}

/// One sandbox, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSettings {
    pub name: String,
    /// `sandbox-agent`, `local` or `daytona`.
    pub provider: String,
    pub url: String,
    /// The NAME of the environment variable holding the token (never the token).
    pub token_env: Option<String>,
    /// The remote directory (absolute).
    pub root: String,
    pub mode: SandboxMode,
    /// Idle time after which the connection is dropped (0: never).
    pub idle_ttl: Duration,
    /// Health-check attempts after the first one fails with the sandbox unreachable.
    pub retries: u32,
    /// The first wait between attempts; it doubles each time.
    pub retry_backoff: Duration,
    /// Longest time one request may take.
    pub request_timeout: Duration,
    /// `Some` for a sandbox wardfs makes itself (`local`, `daytona`); its `url` is empty (the
    /// provider hands one out) and `idle_ttl` is its `idle_pause_minutes`.
    pub provision: Option<Box<ProvisionSettings>>,
    /// The NAMES of the daemon's environment variables a run may pass into the sandbox
    /// (`run_env`; `wardfs run --sandbox NAME --env VAR`).
    pub run_env: Vec<String>,
}

impl SandboxSettings {
    /// Validates one sandbox definition; `key` is how errors name it (`sandboxes.dev`). The
    /// keys are checked in this order, and the first rule broken is the error: the name, the
    /// provider and the keys of the other kind of provider, the URL, the token, the root, the
    /// idle time, a provisioned sandbox's own keys, the retries and the timeout.
    pub fn validate(
        name: &str,
        s: &SandboxSection,
        key: &str,
    ) -> Result<SandboxSettings, (String, String)> {
        let at = |(field, rule): (&str, String)| (format!("{key}.{field}"), rule);
        if let Err(rule) = check_sandbox_name(name) {
            return Err((key.to_string(), rule));
        }
        let provisioned = Self::is_provisioned(&s.provider).map_err(at)?;
        let url = if provisioned {
            Self::no_agent_keys(s).map_err(at)?;
            String::new()
        } else {
            Self::no_provision_keys(s).map_err(at)?;
            Self::agent_url(s).map_err(at)?
        };
        Self::check_token_env(s).map_err(at)?;
        Self::check_run_env(s).map_err(at)?;
        let root = Self::root(s).map_err(at)?;
        let mut idle_ttl = Self::idle_ttl(s).map_err(at)?;
        let provision = if provisioned {
            let p = Self::provision(s, key, &root)?;
            idle_ttl = p.idle_pause;
            Some(Box::new(p))
        } else {
            None
        };
        let (retries, retry_backoff, request_timeout) = Self::retry_limits(s).map_err(at)?;
        Ok(SandboxSettings {
            name: name.to_string(),
            provider: s.provider.clone(),
            url,
            token_env: s.token_env.clone(),
            root,
            mode: s.mode,
            idle_ttl,
            retries,
            retry_backoff,
            request_timeout,
            provision,
            run_env: s.run_env.clone(),
        })
    }

    /// Whether `provider` makes its sandboxes itself (`local`, `daytona`) rather than reaching
    /// one someone else started (`sandbox-agent`).
    fn is_provisioned(provider: &str) -> Result<bool, (&'static str, String)> {
        match provider {
            PROVIDER_SANDBOX_AGENT => Ok(false),
            PROVIDER_LOCAL | PROVIDER_DAYTONA => Ok(true),
            other => Err((
                "provider",
                format!(
                    "{other:?} is not a known provider (known: {PROVIDER_SANDBOX_AGENT}, {PROVIDER_LOCAL}, {PROVIDER_DAYTONA})"
                ),
            )),
        }
    }

    /// Refuses the keys of a `sandbox-agent` sandbox in a provisioned one.
    fn no_agent_keys(s: &SandboxSection) -> Result<(), (&'static str, String)> {
        first_set(
            &[
                ("url", s.url.is_some()),
                ("token_env", s.token_env.is_some()),
                ("idle_ttl_minutes", s.idle_ttl_minutes.is_some()),
            ],
            format!(
                "is for provider = \"{PROVIDER_SANDBOX_AGENT}\"; a {} sandbox gets its URL and token from its provider (idle time: idle_pause_minutes)",
                s.provider
            ),
        )
    }

    /// Refuses the keys of a provisioned sandbox in a `sandbox-agent` one.
    fn no_provision_keys(s: &SandboxSection) -> Result<(), (&'static str, String)> {
        first_set(
            &[
                ("snapshot", s.snapshot.is_some()),
                ("snapshot_base", s.snapshot_base.is_some()),
                ("snapshot_setup", s.snapshot_setup.is_some()),
                ("snapshot_network", s.snapshot_network.is_some()),
                ("volume", s.volume.is_some()),
                ("volume_path", s.volume_path.is_some()),
                ("idle_pause_minutes", s.idle_pause_minutes.is_some()),
                ("paused_ttl_minutes", s.paused_ttl_minutes.is_some()),
                ("agent_bin", s.agent_bin.is_some()),
                ("api_url", s.api_url.is_some()),
                ("api_key_env", s.api_key_env.is_some()),
            ],
            format!(
                "is for a sandbox wardfs makes itself (provider = \"{PROVIDER_LOCAL}\" or \"{PROVIDER_DAYTONA}\"), not for provider = \"{PROVIDER_SANDBOX_AGENT}\""
            ),
        )
    }

    /// The `url` of a `sandbox-agent` sandbox (required): http(s) with a host, without a
    /// trailing `/`.
    fn agent_url(s: &SandboxSection) -> Result<String, (&'static str, String)> {
        let Some(raw) = &s.url else {
            return Err((
                "url",
                format!("is required with provider = \"{PROVIDER_SANDBOX_AGENT}\""),
            ));
        };
        let url = raw.trim_end_matches('/');
        let host = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"))
            .unwrap_or("");
        if host.is_empty() || host.starts_with('/') {
            return Err((
                "url",
                format!("{raw:?} must be an http(s):// URL with a host"),
            ));
        }
        Ok(url.to_string())
    }

    /// Checks that `token_env`, when set, is the name of a variable.
    fn check_token_env(s: &SandboxSection) -> Result<(), (&'static str, String)> {
        if let Some(var) = &s.token_env {
            if !is_env_name(var) {
                // Never echo the value: it may be a token pasted where its variable's name belongs.
                return Err((
                    "token_env",
                    "must be the NAME of an environment variable (letters, digits, _), not a token"
                        .into(),
                ));
            }
        }
        Ok(())
    }

    /// Checks that every entry of `run_env` is the name of a variable.
    fn check_run_env(s: &SandboxSection) -> Result<(), (&'static str, String)> {
        if s.run_env.iter().all(|v| is_env_name(v)) {
            return Ok(());
        }
        // Never echo the entry: it may be a secret pasted where its variable's name belongs.
        Err((
            "run_env",
            "must list NAMES of environment variables (letters, digits, _), not values".into(),
        ))
    }

    /// `root` (default [`DEFAULT_SANDBOX_ROOT`]): absolute, without `.` or `..`, without a
    /// trailing `/`.
    fn root(s: &SandboxSection) -> Result<String, (&'static str, String)> {
        let root = s
            .root
            .clone()
            .unwrap_or_else(|| DEFAULT_SANDBOX_ROOT.to_string());
        if !root.starts_with('/')
            || root.contains('\0')
            || root.split('/').any(|c| c == "." || c == "..")
        {
            return Err((
                "root",
                format!("{root:?} must be an absolute path without `.` or `..`"),
            ));
        }
        Ok(if root.len() > 1 {
            root.trim_end_matches('/').to_string()
        } else {
            root
        })
    }

    /// `idle_ttl_minutes` (default 30, at most a week; 0 never detaches).
    fn idle_ttl(s: &SandboxSection) -> Result<Duration, (&'static str, String)> {
        let ttl = s.idle_ttl_minutes.unwrap_or(30);
        if ttl > 10_080 {
            return Err((
                "idle_ttl_minutes",
                format!("{ttl} must be at most 10080 (a week); 0 never detaches"),
            ));
        }
        Ok(Duration::from_secs(ttl * 60))
    }

    /// `retries`, `retry_backoff_ms` and `request_timeout_secs`, with their defaults.
    fn retry_limits(
        s: &SandboxSection,
    ) -> Result<(u32, Duration, Duration), (&'static str, String)> {
        let retries = s.retries.unwrap_or(3);
        if retries > 20 {
            return Err(("retries", format!("{retries} must be at most 20")));
        }
        let backoff = s.retry_backoff_ms.unwrap_or(500);
        if backoff == 0 || backoff > 60_000 {
            return Err((
                "retry_backoff_ms",
                format!("{backoff} must be between 1 and 60000"),
            ));
        }
        let timeout = s.request_timeout_secs.unwrap_or(30);
        if timeout == 0 || timeout > 3600 {
            return Err((
                "request_timeout_secs",
                format!("{timeout} must be between 1 and 3600"),
            ));
        }
        Ok((
            retries,
            Duration::from_millis(backoff),
            Duration::from_secs(timeout),
        ))
    }

    /// Validates the keys of a provisioned sandbox (`provider = "local"` or `"daytona"`).
    fn provision(
        s: &SandboxSection,
        key: &str,
        root: &str,
    ) -> Result<ProvisionSettings, (String, String)> {
        let field = |f: &str| format!("{key}.{f}");
        let bad = |f: &str, rule: String| Err((field(f), rule));
        let kind = if s.provider == PROVIDER_LOCAL {
            for (f, present) in [
                ("api_url", s.api_url.is_some()),
                ("api_key_env", s.api_key_env.is_some()),
            ] {
                if present {
                    return bad(
                        f,
                        format!(
                            "is for provider = \"{PROVIDER_DAYTONA}\", not \"{PROVIDER_LOCAL}\""
                        ),
                    );
                }
            }
            if let Some(bin) = &s.agent_bin {
                if !bin.is_absolute() {
                    return bad(
                        "agent_bin",
                        format!("{} must be an absolute path", bin.display()),
                    );
                }
            }
            ProvisionKind::Local {
                agent_bin: s.agent_bin.clone(),
            }
        } else {
            if s.agent_bin.is_some() {
                return bad(
                    "agent_bin",
                    format!("is for provider = \"{PROVIDER_LOCAL}\"; a {PROVIDER_DAYTONA} snapshot must provide sandbox-agent"),
                );
            }
            let Some(var) = &s.api_key_env else {
                return bad(
                    "api_key_env",
                    format!("is required with provider = \"{PROVIDER_DAYTONA}\": the NAME of the variable holding the API key"),
                );
            };
            if !is_env_name(var) {
                return bad(
                    "api_key_env",
                    "must be the NAME of an environment variable (letters, digits, _), not a key"
                        .into(),
                );
            }
            if let Some(url) = &s.api_url {
                match Endpoint::parse(url) {
                    Some(end) if end.scheme == "https" || end.plain_http_allowed(&[]) => {}
                    Some(_) => {
                        return bad(
                            "api_url",
                            format!("{url:?} must be https: the API key is sent to it (plain http only to a loopback host)"),
                        )
                    }
                    None => return bad("api_url", format!("{url:?} must be an https:// URL with a host")),
                }
            }
            ProvisionKind::Daytona {
                api_url: s.api_url.clone(),
                api_key_env: var.clone(),
            }
        };
        for (f, v) in [("snapshot", &s.snapshot), ("volume", &s.volume)] {
            if let Some(v) = v {
                check_plain_name(v).map_err(|rule| (field(f), rule))?;
            }
        }
        if s.snapshot.is_some() && s.snapshot_base.is_some() {
            return bad(
                "snapshot_base",
                "names what to build a snapshot from; `snapshot` names one already built: set one of them".into(),
            );
        }
        if s.snapshot_network.is_some() && matches!(kind, ProvisionKind::Daytona { .. }) {
            return bad(
                "snapshot_network",
                format!("is for provider = \"{PROVIDER_LOCAL}\" (a daytona snapshot is built with the network the image's build has)"),
            );
        }
        if s.snapshot_network.is_some() && s.snapshot_setup.is_none() {
            return bad(
                "snapshot_network",
                "says whether snapshot_setup's commands reach the network: set those too".into(),
            );
        }
        if s.snapshot_setup.is_some() && s.snapshot_base.is_none() {
            return bad(
                "snapshot_setup",
                "is run in a sandbox made from snapshot_base: set that too".into(),
            );
        }
        if let Some(base) = &s.snapshot_base {
            if base.is_empty() || base.contains('\0') {
                return bad("snapshot_base", "must not be empty or hold NUL".into());
            }
        }
        let setup = s.snapshot_setup.clone().unwrap_or_default();
        if setup.iter().any(|c| c.contains('\0')) {
            return bad("snapshot_setup", "a command must not hold NUL".into());
        }
        let volume_path = s.volume_path.clone().unwrap_or_else(|| root.to_string());
        if s.volume_path.is_some() && s.volume.is_none() {
            return bad(
                "volume_path",
                "is where `volume` appears inside the sandbox: set that too".into(),
            );
        }
        if !volume_path.starts_with('/')
            || volume_path.contains('\0')
            || volume_path.split('/').any(|c| c == "." || c == "..")
        {
            return bad(
                "volume_path",
                format!("{volume_path:?} must be an absolute path without `.` or `..`"),
            );
        }
        Ok(ProvisionSettings {
            kind,
            snapshot: s.snapshot.clone(),
            snapshot_base: s.snapshot_base.clone(),
            snapshot_setup: setup,
            snapshot_network: s.snapshot_network.unwrap_or(false),
            volume: s.volume.clone(),
            volume_path,
            idle_pause: minutes(&field("idle_pause_minutes"), s.idle_pause_minutes, 30.0)?,
            paused_ttl: minutes(&field("paused_ttl_minutes"), s.paused_ttl_minutes, 1440.0)?,
        })
    }
}

/// Checks a sandbox name: 1 to 64 of letters, digits, `-` and `_`, starting with a letter or digit.
pub fn check_sandbox_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "sandbox name {name:?} must be 1 to 64 letters, digits, `-` or `_`, starting with a letter or digit"
        ))
    }
}

/// Returns true when `name` can be an environment variable's name.
pub fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit())
}

/// The scheme, host and port of a URL: what decides where a credential or a plain-http
/// request may go. Parsed once, here, for the git remotes, the GitHub URLs and the sandboxes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Lower case (`https`, `http`, `ssh`, ...).
    pub scheme: String,
    /// Lower case, without the brackets of an IPv6 address.
    pub host: String,
    /// The port the URL names, if any.
    pub port: Option<u16>,
}

impl Endpoint {
    /// Parses `scheme://[user@]host[:port]/...`; `None` for anything else (an scp-like
    /// `git@host:path`, a local path, a URL without a host).
    pub fn parse(url: &str) -> Option<Endpoint> {
        let uri: hyper::Uri = url.parse().ok()?;
        let scheme = uri.scheme_str()?.to_ascii_lowercase();
        let host = uri
            .host()?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        if host.is_empty() {
            return None;
        }
        Some(Endpoint {
            scheme,
            host,
            port: uri.port_u16(),
        })
    }

    /// The port connected to: the URL's, or its scheme's default.
    pub fn effective_port(&self) -> Option<u16> {
        self.port.or(match self.scheme.as_str() {
            "http" => Some(80),
            "https" => Some(443),
            "ssh" => Some(22),
            "git" => Some(9418),
            _ => None,
        })
    }

    /// `http` or `https`.
    pub fn is_http_or_https(&self) -> bool {
        self.scheme == "http" || self.scheme == "https"
    }

    /// `localhost` or a loopback address: traffic that never leaves the machine.
    pub fn is_loopback(&self) -> bool {
        self.host == "localhost"
            || self
                .host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }

    /// Whether `list` (entries `host`, `host:port`, `[v6]` or `[v6]:port`, as
    /// [`check_host_entry`] accepts) names this endpoint's host (and port, when the entry has one).
    pub fn listed_in(&self, list: &[String]) -> bool {
        list.iter().any(|entry| match split_host_entry(entry) {
            Some((host, port)) => {
                host.eq_ignore_ascii_case(&self.host)
                    && port.is_none_or(|p| Some(p) == self.effective_port())
            }
            None => false,
        })
    }

    /// Whether plain http may go here: not http at all, a loopback host, or a host in `list`.
    pub fn plain_http_allowed(&self, list: &[String]) -> bool {
        self.scheme != "http" || self.is_loopback() || self.listed_in(list)
    }

    /// The rule a refused plain-http endpoint broke, naming the key that would allow it.
    pub fn plain_http_rule(&self, key: &str) -> String {
        format!(
            "plain http to {} is refused: it is not a loopback host, and {key} does not list it (use https)",
            self.authority()
        )
    }

    /// `host:port` (`[v6]:port`) for messages.
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match self.effective_port() {
            Some(p) => format!("{host}:{p}"),
            None => host,
        }
    }
}

/// Splits a host-list entry into its host (no brackets) and optional port.
fn split_host_entry(entry: &str) -> Option<(&str, Option<u16>)> {
    let (host, port) = if let Some(rest) = entry.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        match after {
            "" => (host, None),
            p => (host, Some(p.strip_prefix(':')?)),
        }
    } else {
        match entry.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (entry, None),
        }
    };
    let port = match port {
        Some(p) => Some(p.parse::<u16>().ok().filter(|p| *p > 0)?),
        None => None,
    };
    let ok_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == ':';
    if host.is_empty()
        || !host.chars().all(ok_char)
        || (host.contains(':') && !entry.starts_with('['))
    {
        return None;
    }
    Some((host, port))
}

/// Checks one entry of a host list (`git.token_hosts`, `git.http_hosts`,
/// `api.sandbox_http_hosts`): `host`, `host:port`, `[v6]` or `[v6]:port`; no scheme, user or path.
pub fn check_host_entry(entry: &str) -> Result<(), String> {
    match split_host_entry(entry) {
        Some(_) => Ok(()),
        None => Err(format!(
            "{entry:?} must be a host name or address, optionally with :port (no scheme, user or path)"
        )),
    }
}

/// Where a zone's files are.
// Two of these exist (one per zone), built once when the config loads: the size of the remote
// variant costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backing {
    /// A local directory (created at start when `create` is set).
    Dir { path: PathBuf, create: bool },
    /// A directory inside a remote sandbox, reached through its provider.
    Sandbox(SandboxBacking),
    /// The zone is switched off; the string says why.
    Disabled(String),
}

/// Where a remote-backed zone lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxBacking {
    /// The sandbox, as defined in `[sandboxes.<name>]`.
    pub sandbox: SandboxSettings,
    /// The absolute directory inside the sandbox.
    pub path: String,
    /// How long attributes and listings are trusted before they are asked for again.
    pub attr_ttl: Duration,
}

/// The default of `zones.<zone>.attr_ttl_ms`.
pub const DEFAULT_REMOTE_ATTR_TTL_MS: u64 = 1000;

/// One zone, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneSettings {
    pub id: ZoneId,
    pub backing: Backing,
    pub read_only: bool,
    pub allow_hardlinks: bool,
    pub io: IoMode,
}

/// A validated, resolved configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The file it came from, or `None` for the embedded default.
    pub source: Option<PathBuf>,
    pub state_dir: PathBuf,
    pub socket: PathBuf,
    pub mount: PathBuf,
    /// `[fuse]`: the mount's transport, read-ahead and extended attributes.
    pub fuse: FuseSection,
    pub zones: Vec<ZoneSettings>,
    pub limits: Limits,
    pub allowed_uids: Vec<u32>,
    /// `api.max_connections` and `api.idle_timeout_secs`.
    pub connections: Connections,
    /// `api.sandbox_token_envs`: the token variables `sandbox add` may name.
    pub sandbox_token_envs: Vec<String>,
    /// `api.sandbox_http_hosts`: non-loopback hosts `sandbox add` may name over plain http.
    pub sandbox_http_hosts: Vec<String>,
    pub git: GitSection,
    pub journal: JournalSection,
    pub checkpoints: CheckpointsSection,
    pub mcp: McpSection,
    pub forks: ForksSection,
    /// The sandboxes of the config file, by name.
    pub sandboxes: Vec<SandboxSettings>,
}

impl Settings {
    /// Loads `path`, or `$WARDFS_CONFIG`, or the embedded default (relative to the current dir).
    pub fn load(path: Option<&Path>) -> Result<Settings, ConfigError> {
        let env_path = std::env::var_os(CONFIG_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        match path.map(Path::to_path_buf).or(env_path) {
            Some(p) => Settings::from_file(&p),
            None => {
                let cwd = std::env::current_dir().map_err(|e| ConfigError::Read {
                    path: ".".into(),
                    source: e,
                })?;
                Settings::from_str(DEFAULT_CONFIG, "(embedded default)", &cwd, None)
            }
        }
    }

    /// Loads and validates a config file; relative paths resolve against its directory.
    pub fn from_file(path: &Path) -> Result<Settings, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.to_path_buf(),
            source: e,
        })?;
        let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let base = abs.parent().map(Path::to_path_buf).unwrap_or_default();
        Settings::from_str(&text, &path.display().to_string(), &base, Some(abs))
    }

    /// Parses and validates config text; `base` resolves relative paths.
    pub fn from_str(
        text: &str,
        origin: &str,
        base: &Path,
        source: Option<PathBuf>,
    ) -> Result<Settings, ConfigError> {
        let file: ConfigFile = toml::from_str(text).map_err(|e| ConfigError::Parse {
            origin: origin.to_string(),
            source: Box::new(e),
        })?;
        resolve(file, origin, base, source).map_err(|e| e.located(text))
    }
}

/// Reads `api.max_connections` (1 to 1000000) and `api.idle_timeout_secs` (1 to 3600), with
/// their defaults.
fn connections(api: &ApiSection) -> Result<Connections, (&'static str, String)> {
    let d = Connections::default();
    let max = api.max_connections.unwrap_or(d.max);
    if !(1..=1_000_000).contains(&max) {
        return Err((
            "api.max_connections",
            format!("{max} must be between 1 and 1000000"),
        ));
    }
    let idle = api.idle_timeout_secs.unwrap_or(d.idle_timeout.as_secs());
    if !(1..=3600).contains(&idle) {
        return Err((
            "api.idle_timeout_secs",
            format!("{idle} must be between 1 and 3600"),
        ));
    }
    Ok(Connections {
        max,
        idle_timeout: Duration::from_secs(idle),
    })
}

/// Turns a parsed config file into [`Settings`]. The sections are checked in this order, and
/// the first rule broken is the error: the zones' local directories, the limits (with the API's
/// connection bounds), the daemon's own paths, the sandboxes, the zones served from them, git
/// and the journal.
fn resolve(
    file: ConfigFile,
    origin: &str,
    base: &Path,
    source: Option<PathBuf>,
) -> Result<Settings, ConfigError> {
    let r = Resolver { origin, base };
    let z = &file.zones;
    let LocalBackings {
        cache,
        workspace,
        mount_root,
    } = r.local_backings(z)?;
    let l = file.limits;
    let connections = check_limits(&l, &file.api).map_err(|(key, rule)| r.bad(key, rule))?;
    let (state_dir, socket, mount) = r.daemon_paths(&file, mount_root)?;
    let sandboxes = r.sandboxes(&file.sandboxes)?;
    let zones = vec![
        r.zone(ZoneId::Cache, &z.cache, cache, &sandboxes)?,
        r.zone(ZoneId::Workspace, &z.workspace, workspace, &sandboxes)?,
    ];
    let git = r.git(file.git, &file.api)?;
    if file.fuse.read_ahead_kb > MAX_READ_AHEAD_KB {
        return Err(r.bad(
            "fuse.read_ahead_kb",
            format!(
                "{} must be at most {MAX_READ_AHEAD_KB} (64 MiB); 0 leaves the kernel's",
                file.fuse.read_ahead_kb
            ),
        ));
    }
    if file.journal.keep_days > 36_500 {
        return Err(r.bad(
            "journal.keep_days",
            format!(
                "{} must be at most 36500 (100 years); 0 keeps rows forever",
                file.journal.keep_days
            ),
        ));
    }
    Ok(Settings {
        source,
        state_dir,
        socket,
        mount,
        fuse: file.fuse,
        zones,
        limits: l,
        allowed_uids: file.api.allowed_uids,
        connections,
        sandbox_token_envs: file.api.sandbox_token_envs,
        sandbox_http_hosts: file.api.sandbox_http_hosts,
        git,
        journal: file.journal,
        checkpoints: file.checkpoints,
        mcp: file.mcp,
        forks: file.forks,
        sandboxes,
    })
}

/// What [`resolve`] turns keys into settings or errors with: where the config came from (for
/// its errors) and the directory its relative paths resolve against.
struct Resolver<'a> {
    origin: &'a str,
    base: &'a Path,
}

/// The zones' local directories as `zones.mode` lays them out (before a zone naming a sandbox
/// is served from it).
#[derive(Debug)]
struct LocalBackings {
    cache: Backing,
    workspace: Backing,
    /// Sandboxed mode's `zones.root`: the mount goes beneath it unless `mount` is set.
    mount_root: Option<PathBuf>,
}

impl Resolver<'_> {
    /// The error of `key` breaking `rule`.
    fn bad(&self, key: &str, rule: String) -> ConfigError {
        ConfigError::Invalid {
            origin: self.origin.to_string(),
            key: key.to_string(),
            rule,
            at: None,
        }
    }

    /// The path `p` (the value of `key`) with `~` expanded, resolved against the config's directory.
    fn abs(&self, key: &str, p: &Path) -> Result<PathBuf, ConfigError> {
        if p.as_os_str().is_empty() {
            return Err(self.bad(key, "must not be empty".into()));
        }
        Ok(self.base.join(expand_home(p)))
    }

    /// Refuses `key` when it is set (`present`) in a `zones.mode` (`mode`) that does not use it.
    fn forbid(&self, key: &str, present: bool, mode: &str) -> Result<(), ConfigError> {
        if present {
            Err(self.bad(
                key,
                format!("is not used in {mode} mode; remove it or change zones.mode"),
            ))
        } else {
            Ok(())
        }
    }

    /// Lays out the zones' local directories as `zones.mode` says.
    fn local_backings(&self, z: &ZonesSection) -> Result<LocalBackings, ConfigError> {
        match z.mode {
            ZoneMode::Sandboxed => self.sandboxed(z),
            ZoneMode::Direct => self.direct(z),
            ZoneMode::Single => self.single(z),
        }
    }

    /// Sandboxed mode: both zones beneath `zones.root` (default `.wardfs`), made at start.
    fn sandboxed(&self, z: &ZonesSection) -> Result<LocalBackings, ConfigError> {
        self.forbid("zones.dir", z.dir.is_some(), "sandboxed")?;
        self.forbid("zones.cache_subdir", z.cache_subdir.is_some(), "sandboxed")?;
        self.forbid("zones.cache.dir", z.cache.dir.is_some(), "sandboxed")?;
        self.forbid(
            "zones.workspace.dir",
            z.workspace.dir.is_some(),
            "sandboxed",
        )?;
        let root = self.abs(
            "zones.root",
            z.root.as_deref().unwrap_or(Path::new(".wardfs")),
        )?;
        Ok(LocalBackings {
            cache: Backing::Dir {
                path: root.join("cache"),
                create: true,
            },
            workspace: Backing::Dir {
                path: root.join("workspace"),
                create: true,
            },
            mount_root: Some(root),
        })
    }

    /// Direct mode: each zone is an existing directory of its own (`zones.<zone>.dir`), unless
    /// it is served from a sandbox.
    fn direct(&self, z: &ZonesSection) -> Result<LocalBackings, ConfigError> {
        self.forbid("zones.root", z.root.is_some(), "direct")?;
        self.forbid("zones.dir", z.dir.is_some(), "direct")?;
        self.forbid("zones.cache_subdir", z.cache_subdir.is_some(), "direct")?;
        let dir = |key: &str, section: &ZoneSection| -> Result<Backing, ConfigError> {
            if section.sandbox.is_some() && section.dir.is_none() {
                return Ok(Backing::Disabled("served from a sandbox".into()));
            }
            let d = section.dir.as_deref().ok_or_else(|| {
                self.bad(
                    key,
                    "is required in direct mode (or name a sandbox to serve the zone from)".into(),
                )
            })?;
            Ok(Backing::Dir {
                path: self.abs(key, d)?,
                create: false,
            })
        };
        Ok(LocalBackings {
            cache: dir("zones.cache.dir", &z.cache)?,
            workspace: dir("zones.workspace.dir", &z.workspace)?,
            mount_root: None,
        })
    }

    /// Single mode: the workspace is `zones.dir`; the cache is its `zones.cache_subdir`, or
    /// there is none.
    fn single(&self, z: &ZonesSection) -> Result<LocalBackings, ConfigError> {
        self.forbid("zones.root", z.root.is_some(), "single")?;
        self.forbid("zones.cache.dir", z.cache.dir.is_some(), "single")?;
        self.forbid("zones.workspace.dir", z.workspace.dir.is_some(), "single")?;
        let dir = z
            .dir
            .as_deref()
            .ok_or_else(|| self.bad("zones.dir", "is required in single mode".into()))?;
        let dir = self.abs("zones.dir", dir)?;
        let cache = match &z.cache_subdir {
            None => {
                Backing::Disabled("single mode without zones.cache_subdir serves no /cache".into())
            }
            Some(sub) => {
                let p = Path::new(sub);
                let plain = !sub.is_empty()
                    && p.components()
                        .all(|c| matches!(c, std::path::Component::Normal(_)));
                if !plain {
                    return Err(self.bad(
                        "zones.cache_subdir",
                        format!("{sub:?} must be a relative path inside zones.dir without `..`"),
                    ));
                }
                Backing::Dir {
                    path: dir.join(p),
                    create: true,
                }
            }
        };
        Ok(LocalBackings {
            cache,
            workspace: Backing::Dir {
                path: dir,
                create: false,
            },
            mount_root: None,
        })
    }

    /// The daemon's `state_dir`, `socket` and `mount`, each defaulted when not set (`mount`
    /// beneath `mount_root` when there is one).
    fn daemon_paths(
        &self,
        file: &ConfigFile,
        mount_root: Option<PathBuf>,
    ) -> Result<(PathBuf, PathBuf, PathBuf), ConfigError> {
        let runtime = runtime_dir();
        let state_dir = match &file.state_dir {
            Some(p) => self.abs("state_dir", p)?,
            None => default_state_dir(),
        };
        let socket = match &file.socket {
            Some(p) => self.abs("socket", p)?,
            None => runtime.join("wardfs").join("wardfs.sock"),
        };
        let mount = match (&file.mount, mount_root) {
            (Some(p), _) => self.abs("mount", p)?,
            (None, Some(root)) => root.join("mnt"),
            (None, None) => runtime.join("wardfs").join("mnt"),
        };
        Ok((state_dir, socket, mount))
    }

    /// Validates each `[sandboxes.<name>]`, in name order.
    fn sandboxes(
        &self,
        sections: &BTreeMap<String, SandboxSection>,
    ) -> Result<Vec<SandboxSettings>, ConfigError> {
        let mut sandboxes = Vec::with_capacity(sections.len());
        for (name, section) in sections {
            let s = SandboxSettings::validate(name, section, &format!("sandboxes.{name}"))
                .map_err(|(key, rule)| self.bad(&key, rule))?;
            sandboxes.push(s);
        }
        Ok(sandboxes)
    }

    /// Zone `id` as `section` (`zones.<zone>`) sets it: served from its `local` directory, or
    /// from the sandbox it names.
    fn zone(
        &self,
        id: ZoneId,
        section: &ZoneSection,
        local: Backing,
        sandboxes: &[SandboxSettings],
    ) -> Result<ZoneSettings, ConfigError> {
        let backing = remote_backing(id.name(), section, local, sandboxes)
            .map_err(|(k, r)| self.bad(&k, r))?;
        Ok(ZoneSettings {
            id,
            backing,
            read_only: section.read_only,
            allow_hardlinks: section.allow_hardlinks,
            io: section.io.unwrap_or_default(),
        })
    }

    /// Checks `[git]` (with the host and token lists of `[api]`) and resolves its paths.
    fn git(&self, mut git: GitSection, api: &ApiSection) -> Result<GitSection, ConfigError> {
        check_git(&git, api).map_err(|(key, rule)| self.bad(key, rule))?;
        if let Some(k) = &git.ssh_key {
            git.ssh_key = Some(self.abs("git.ssh_key", k)?);
        }
        git.local_remotes = git
            .local_remotes
            .iter()
            .map(|d| self.abs("git.local_remotes", d))
            .collect::<Result<_, _>>()?;
        Ok(git)
    }
}

/// Checks `[limits]`, and reads the connection bounds of `[api]` (checked between
/// `limits.body_memory_wait_secs` and `limits.open_files`: the order errors are reported in).
fn check_limits(l: &Limits, api: &ApiSection) -> Result<Connections, (&'static str, String)> {
    if l.max_read_bytes == 0 || l.max_read_bytes > 1 << 30 {
        return Err((
            "limits.max_read_bytes",
            format!("{} must be between 1 and 1073741824", l.max_read_bytes),
        ));
    }
    if l.max_write_bytes == 0 || l.max_write_bytes > 16 << 30 {
        return Err((
            "limits.max_write_bytes",
            format!("{} must be between 1 and 17179869184", l.max_write_bytes),
        ));
    }
    for (key, v) in [
        ("limits.grep_max_results", l.grep_max_results),
        ("limits.glob_max_results", l.glob_max_results),
        ("limits.sandbox_walk_entries", l.sandbox_walk_entries),
    ] {
        if v == 0 || v > 10_000_000 {
            return Err((key, format!("{v} must be between 1 and 10000000")));
        }
    }
    for (key, v, min) in [
        (
            "limits.sandbox_answer_bytes",
            l.sandbox_answer_bytes,
            64 << 10,
        ),
        (
            "limits.sandbox_listing_bytes",
            l.sandbox_listing_bytes,
            64 << 10,
        ),
        ("limits.sandbox_file_bytes", l.sandbox_file_bytes, 1),
        ("limits.git_blob_bytes", l.git_blob_bytes, 1),
    ] {
        if v < min {
            return Err((key, format!("{v} must be at least {min}")));
        }
    }
    if l.body_memory_bytes < 1 << 20 {
        return Err((
            "limits.body_memory_bytes",
            format!("{} must be at least 1048576 (1 MiB)", l.body_memory_bytes),
        ));
    }
    if !(1..=3600).contains(&l.body_memory_wait_secs) {
        return Err((
            "limits.body_memory_wait_secs",
            format!("{} must be between 1 and 3600", l.body_memory_wait_secs),
        ));
    }
    if !(1..=86_400).contains(&l.run_timeout_secs) {
        return Err((
            "limits.run_timeout_secs",
            format!("{} must be between 1 and 86400", l.run_timeout_secs),
        ));
    }
    if !(1024..=1 << 30).contains(&l.run_output_bytes) {
        return Err((
            "limits.run_output_bytes",
            format!("{} must be between 1024 and 1073741824", l.run_output_bytes),
        ));
    }
    if l.run_reconnect_secs > 3600 {
        return Err((
            "limits.run_reconnect_secs",
            format!("{} must be between 0 and 3600", l.run_reconnect_secs),
        ));
    }
    let connections = connections(api)?;
    if !(256..=1 << 24).contains(&l.open_files) {
        return Err((
            "limits.open_files",
            format!("{} must be between 256 and 16777216", l.open_files),
        ));
    }
    Ok(connections)
}

/// Checks the values of `[git]` and the host and token lists of `[api]` (their paths are
/// resolved by [`Resolver::git`]).
fn check_git(git: &GitSection, api: &ApiSection) -> Result<(), (&'static str, String)> {
    if let Some(name) = &git.token_env {
        if !is_env_name(name) {
            // Never echo the value: it may be a token pasted where its variable's name belongs.
            return Err((
                "git.token_env",
                "must be the NAME of an environment variable (letters, digits, _), not a token"
                    .into(),
            ));
        }
    }
    for (key, list) in [
        ("git.token_hosts", &git.token_hosts),
        ("git.http_hosts", &git.http_hosts),
        ("api.sandbox_http_hosts", &api.sandbox_http_hosts),
    ] {
        for h in list {
            check_host_entry(h).map_err(|rule| (key, rule))?;
        }
    }
    for name in &api.sandbox_token_envs {
        if !is_env_name(name) {
            // Never echo the value: it may be a token pasted where its variable's name belongs.
            return Err((
                "api.sandbox_token_envs",
                "must list NAMES of environment variables (letters, digits, _), not tokens".into(),
            ));
        }
    }
    for (key, v) in [
        ("git.github_url", &git.github_url),
        ("git.github_api", &git.github_api),
    ] {
        let Some(end) = Endpoint::parse(v).filter(|e| e.is_http_or_https()) else {
            return Err((key, format!("{v:?} must be an http(s):// URL with a host")));
        };
        if !end.plain_http_allowed(&git.http_hosts) {
            return Err((key, end.plain_http_rule("git.http_hosts")));
        }
    }
    if git.author_name.trim().is_empty() {
        return Err(("git.author_name", "must not be empty".into()));
    }
    if !git.author_email.contains('@') {
        return Err((
            "git.author_email",
            format!("{:?} must be an email address", git.author_email),
        ));
    }
    if git.max_diff_bytes == 0 {
        return Err(("git.max_diff_bytes", "must be at least 1".into()));
    }
    Ok(())
}

/// Applies `zones.<zone>.sandbox`/`path`/`attr_ttl_ms`: a zone naming a sandbox is served from
/// it, whatever `zones.mode` says about local directories.
fn remote_backing(
    zone: &str,
    section: &ZoneSection,
    local: Backing,
    sandboxes: &[SandboxSettings],
) -> Result<Backing, (String, String)> {
    let key = |field: &str| format!("zones.{zone}.{field}");
    let Some(name) = &section.sandbox else {
        for (field, present) in [
            ("path", section.path.is_some()),
            ("attr_ttl_ms", section.attr_ttl_ms.is_some()),
        ] {
            if present {
                return Err((
                    key(field),
                    format!("is only used with zones.{zone}.sandbox; set that or remove it"),
                ));
            }
        }
        return Ok(local);
    };
    if section.dir.is_some() {
        return Err((
            key("dir"),
            format!("a zone is served either from a local dir or from a sandbox, not both (zones.{zone}.sandbox = {name:?})"),
        ));
    }
    if section.allow_hardlinks {
        return Err((
            key("allow_hardlinks"),
            "applies to local zones only; a remote zone never reads local files".into(),
        ));
    }
    if section.io.is_some() {
        return Err((
            key("io"),
            "applies to local zones only; a remote zone's file I/O always goes through the daemon"
                .into(),
        ));
    }
    let sandbox = sandboxes
        .iter()
        .find(|s| &s.name == name)
        .ok_or_else(|| {
            let known: Vec<&str> = sandboxes.iter().map(|s| s.name.as_str()).collect();
            (
                key("sandbox"),
                format!(
                    "{name:?} is not defined in [sandboxes] (defined: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            )
        })?
        .clone();
    let path = section.path.clone().unwrap_or_else(|| sandbox.root.clone());
    if !path.starts_with('/') || path.contains('\0') || path.split('/').any(|c| c == "..") {
        return Err((
            key("path"),
            format!("{path:?} must be an absolute path inside the sandbox, without `..`"),
        ));
    }
    let path = match path.trim_end_matches('/') {
        "" => "/".to_string(),
        p => p.to_string(),
    };
    let ttl_ms = section.attr_ttl_ms.unwrap_or(DEFAULT_REMOTE_ATTR_TTL_MS);
    if ttl_ms > 3_600_000 {
        return Err((
            key("attr_ttl_ms"),
            format!("{ttl_ms} must be at most 3600000 (an hour)"),
        ));
    }
    Ok(Backing::Sandbox(SandboxBacking {
        sandbox,
        path,
        attr_ttl: Duration::from_millis(ttl_ms),
    }))
}

fn expand_home(p: &Path) -> PathBuf {
    match (p.strip_prefix("~"), dirs::home_dir()) {
        (Ok(rest), Some(home)) => home.join(rest),
        _ => p.to_path_buf(),
    }
}

/// Returns `$XDG_STATE_HOME/wardfs` (or `~/.local/state/wardfs`).
pub fn default_state_dir() -> PathBuf {
    dirs::state_dir()
        .unwrap_or_else(|| {
            std::env::temp_dir().join(format!("wardfs-{}", rustix::process::getuid().as_raw()))
        })
        .join("wardfs")
}

/// Returns `$XDG_RUNTIME_DIR`, or a per-user directory in the temp dir when it is unset.
pub fn runtime_dir() -> PathBuf {
    dirs::runtime_dir().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("wardfs-{}", rustix::process::getuid().as_raw()))
    })
}

/// The zones of the virtual filesystem (named here, where the config names them; the core
/// re-exports it as `core::ZoneId`): the two the config names, and the forks made while the
/// daemon runs (`/forks/NAME`, see [`ForkSlot`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ZoneId {
    Cache,
    Workspace,
    /// A fork of a zone (issue 30): a copy-on-write zone of its own, named `forks/NAME`.
    Fork(ForkSlot),
}

/// A fork's place in the process's table of fork names: a `ZoneId` stays a small `Copy` value
/// and still names itself. A name keeps its slot for the life of the process (a fork removed and
/// made again under its name gets the same one); [`MAX_FORK_NAMES`] names at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ForkSlot(u16);

/// The most fork names one process keeps (each is a few bytes, kept until it exits).
pub const MAX_FORK_NAMES: usize = 4096;

/// The fork names this process knows, by slot: the name as paths show it (`forks/NAME`) and
/// whether a fork of that name exists now.
static FORK_NAMES: std::sync::RwLock<Vec<(&'static str, bool)>> =
    std::sync::RwLock::new(Vec::new());

/// The top-level directory that holds the forks in paths (`/forks/NAME/...`).
pub const FORKS_DIR: &str = "forks";

impl ZoneId {
    /// The two zones the config names, in listing order (forks are listed by the core).
    pub const ALL: [ZoneId; 2] = [ZoneId::Cache, ZoneId::Workspace];

    /// Returns the zone's name as it appears in paths (`cache`, `workspace`, `forks/NAME`).
    pub fn name(self) -> &'static str {
        match self {
            ZoneId::Cache => "cache",
            ZoneId::Workspace => "workspace",
            ZoneId::Fork(slot) => FORK_NAMES.read().expect("not poisoned")[slot.0 as usize].0,
        }
    }

    /// Parses a zone name: `cache`, `workspace`, or `forks/NAME` of a fork that exists now.
    pub fn from_name(name: &str) -> Option<ZoneId> {
        match name {
            "cache" => Some(ZoneId::Cache),
            "workspace" => Some(ZoneId::Workspace),
            _ => {
                let fork = name.strip_prefix(FORKS_DIR)?.strip_prefix('/')?;
                ZoneId::fork(fork)
            }
        }
    }

    /// The fork named `fork` (the last part of `forks/NAME`), if one exists now.
    pub fn fork(fork: &str) -> Option<ZoneId> {
        let names = FORK_NAMES.read().expect("not poisoned");
        names
            .iter()
            .position(|(n, alive)| *alive && n[FORKS_DIR.len() + 1..] == *fork)
            .map(|i| ZoneId::Fork(ForkSlot(i as u16)))
    }

    /// Gives the fork `fork` its zone id and marks it existing; `None` when the process already
    /// knows [`MAX_FORK_NAMES`] names. The caller checked the name (see `fork::check_name`).
    pub fn register_fork(fork: &str) -> Option<ZoneId> {
        let full = format!("{FORKS_DIR}/{fork}");
        let mut names = FORK_NAMES.write().expect("not poisoned");
        let slot = match names.iter().position(|(n, _)| *n == full) {
            Some(i) => i,
            None if names.len() < MAX_FORK_NAMES => {
                names.push((Box::leak(full.into_boxed_str()), false));
                names.len() - 1
            }
            None => return None,
        };
        names[slot].1 = true;
        Some(ZoneId::Fork(ForkSlot(slot as u16)))
    }

    /// Marks the fork `id` gone: its name no longer parses (its slot stays for a later fork of
    /// the same name).
    pub fn unregister_fork(id: ZoneId) {
        if let ZoneId::Fork(slot) = id {
            FORK_NAMES.write().expect("not poisoned")[slot.0 as usize].1 = false;
        }
    }

    /// The fork's own name (`NAME` of `forks/NAME`), or `None` for the config's zones.
    pub fn fork_name(self) -> Option<&'static str> {
        match self {
            ZoneId::Fork(_) => Some(&self.name()[FORKS_DIR.len() + 1..]),
            _ => None,
        }
    }

    /// The zone's place among the config's two zones; `None` for a fork.
    pub(crate) fn config_index(self) -> Option<usize> {
        match self {
            ZoneId::Cache => Some(0),
            ZoneId::Workspace => Some(1),
            ZoneId::Fork(_) => None,
        }
    }

    /// The fork at `slot` of the process's table, if that slot is taken.
    pub fn fork_at(slot: usize) -> Option<ZoneId> {
        let names = FORK_NAMES.read().expect("not poisoned");
        (slot < names.len()).then_some(ZoneId::Fork(ForkSlot(slot as u16)))
    }

    /// The fork's slot in the process's table (see [`ForkSlot`]); `None` for the config's zones.
    pub fn fork_slot(self) -> Option<usize> {
        match self {
            ZoneId::Fork(s) => Some(s.0 as usize),
            _ => None,
        }
    }
}

impl Serialize for ZoneId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl std::fmt::Display for ZoneId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Settings, ConfigError> {
        Settings::from_str(text, "test", Path::new("/base"), None)
    }

    #[test]
    fn endpoints_and_host_lists() {
        let e = Endpoint::parse("https://User@Git.Example.com/o/r.git").unwrap();
        assert_eq!(
            (e.scheme.as_str(), e.host.as_str(), e.effective_port()),
            ("https", "git.example.com", Some(443))
        );
        assert!(e.listed_in(&["git.example.com".into()]));
        assert!(e.listed_in(&["GIT.example.com:443".into()]));
        assert!(!e.listed_in(&["git.example.com:80".into(), "example.com".into()]));
        let v6 = Endpoint::parse("http://[::1]:8080/").unwrap();
        assert!(v6.is_loopback() && v6.listed_in(&["[::1]:8080".into()]));
        assert!(!Endpoint::parse("http://10.0.0.1/").unwrap().is_loopback());
        assert!(Endpoint::parse("git@github.com:o/r").is_none());
        for bad in [
            "",
            "https://x",
            "x/y",
            "a@b",
            "::1",
            "h:0",
            "h:99999",
            "[::1",
        ] {
            assert!(check_host_entry(bad).is_err(), "{bad}");
        }
        for good in ["github.com", "127.0.0.1:8080", "[::1]", "[::1]:22"] {
            assert!(check_host_entry(good).is_ok(), "{good}");
        }
        let e = load("[git]\ntoken_hosts = [\"https://x\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("git.token_hosts"), "{e}");
        let e = load("[api]\nsandbox_token_envs = [\"ghp-secret\"]\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("api.sandbox_token_envs") && !e.contains("ghp-secret"),
            "{e}"
        );
        let e = load("[git]\ngithub_api = \"http://api.example.com\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("git.github_api") && e.contains("git.http_hosts"),
            "{e}"
        );
        load("[git]\ngithub_api = \"http://127.0.0.1:9\"\n").unwrap();
        load(
            "[git]\ngithub_api = \"http://api.example.com\"\nhttp_hosts = [\"api.example.com\"]\n",
        )
        .unwrap();
    }

    #[test]
    fn embedded_default_is_sandboxed_under_dot_wardfs() {
        let s = load(DEFAULT_CONFIG).unwrap();
        assert_eq!(
            s.zones[1].backing,
            Backing::Dir {
                path: "/base/.wardfs/workspace".into(),
                create: true
            }
        );
        assert_eq!(s.mount, PathBuf::from("/base/.wardfs/mnt"));
        assert_eq!(s.limits, Limits::default());
    }

    #[test]
    fn io_modes_parse_per_zone_and_a_misspelled_one_names_the_choices() {
        let s = load("[zones.workspace]\nio = \"cached\"\n").unwrap();
        assert_eq!(
            (s.zones[0].io, s.zones[1].io),
            (IoMode::Cached, IoMode::Cached)
        );
        let s = load("[zones.cache]\nio = \"passthrough\"\n").unwrap();
        assert_eq!(
            (s.zones[0].io, s.zones[1].io),
            (IoMode::Passthrough, IoMode::Cached)
        );
        let e = load("[zones.cache]\nio = \"fast\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("fast") && e.contains("passthrough") && e.contains("cached"),
            "{e}"
        );
    }

    #[test]
    fn the_transport_defaults_to_io_uring_and_a_misspelled_one_names_the_choices() {
        assert_eq!(load("").unwrap().fuse.transport, Transport::IoUring);
        assert_eq!(
            load(DEFAULT_CONFIG).unwrap().fuse.transport,
            Transport::IoUring
        );
        let s = load("[fuse]\ntransport = \"device\"\n").unwrap();
        assert_eq!(s.fuse.transport, Transport::Device);
        let e = load("[fuse]\ntransport = \"uring\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("uring") && e.contains("io_uring") && e.contains("device"),
            "{e}"
        );
        let e = load("[fuse]\nthreads = 3\n").unwrap_err().to_string();
        assert!(e.contains("threads"), "{e}");
    }

    #[test]
    fn xattrs_are_on_by_default_and_take_only_a_boolean() {
        assert!(load("").unwrap().fuse.xattrs);
        assert!(load(DEFAULT_CONFIG).unwrap().fuse.xattrs);
        assert!(!load("[fuse]\nxattrs = false\n").unwrap().fuse.xattrs);
        let e = load("[fuse]\nxattrs = 1\n").unwrap_err().to_string();
        assert!(e.contains("xattrs"), "{e}");
    }

    #[test]
    fn the_read_ahead_window_is_a_mebibyte_by_default_and_bounded() {
        assert_eq!(load("").unwrap().fuse.read_ahead_kb, 1024);
        assert_eq!(load(DEFAULT_CONFIG).unwrap().fuse.read_ahead_kb, 1024);
        let kb = |v: &str| load(&format!("[fuse]\nread_ahead_kb = {v}\n"));
        assert_eq!(kb("0").unwrap().fuse.read_ahead_kb, 0);
        assert_eq!(kb("65536").unwrap().fuse.read_ahead_kb, 65_536);
        let e = kb("65537").unwrap_err().to_string();
        assert!(
            e.contains("fuse.read_ahead_kb") && e.contains("65536"),
            "{e}"
        );
        let e = kb("-1").unwrap_err().to_string();
        assert!(e.contains("read_ahead_kb"), "{e}");
    }

    #[test]
    fn prefetch_is_on_by_default_and_takes_only_a_boolean() {
        assert!(load("").unwrap().fuse.prefetch);
        assert!(load(DEFAULT_CONFIG).unwrap().fuse.prefetch);
        assert!(
            load("[fuse]\ntransport = \"device\"\n")
                .unwrap()
                .fuse
                .prefetch
        );
        assert!(!load("[fuse]\nprefetch = false\n").unwrap().fuse.prefetch);
        let e = load("[fuse]\nprefetch = \"yes\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("prefetch") && e.contains("bool"), "{e}");
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = load("[zones]\nmode = \"sandboxed\"\nrooot = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("rooot"), "{e}");
        let e = load("[limits]\nmax_read_bytes = -1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_read_bytes"), "{e}");
    }

    /// Returns every key of the config format as `section.key`, read from serde's own list of
    /// expected fields (so a new field cannot be missed), descending into fields that are tables.
    fn format_keys(section: &str) -> Vec<String> {
        // A table of named tables (`[sandboxes.<name>]`) is probed through one example name.
        let header = if section.is_empty() {
            String::new()
        } else {
            format!("[{}]\n", section.replace("<name>", "probe"))
        };
        let err = toml::from_str::<ConfigFile>(&format!("{header}zz_probe = 1\n"))
            .unwrap_err()
            .to_string();
        let list = err
            .split_once("expected one of ")
            .or_else(|| err.split_once("expected "))
            .unwrap_or_else(|| panic!("no field list for [{section}]: {err}"))
            .1;
        let mut keys = Vec::new();
        for field in list.split('`').skip(1).step_by(2) {
            let key = if section.is_empty() {
                field.to_string()
            } else {
                format!("{section}.{field}")
            };
            let probe = key.replace("<name>", "probe");
            let as_table = toml::from_str::<ConfigFile>(&format!("[{probe}]\nzz_probe = 1\n"))
                .unwrap_err()
                .to_string();
            let as_named =
                toml::from_str::<ConfigFile>(&format!("[{probe}.probe]\nzz_probe = 1\n"))
                    .map(|_| String::new())
                    .unwrap_or_else(|e| e.to_string());
            if as_table.contains("unknown field `zz_probe`") {
                keys.extend(format_keys(&key));
            } else if as_named.contains("unknown field `zz_probe`") {
                keys.extend(format_keys(&format!("{key}.<name>")));
            } else {
                keys.push(key);
            }
        }
        keys
    }

    #[test]
    fn every_key_is_documented_in_docs_and_the_default_config() {
        let keys = format_keys("");
        assert!(keys.contains(&"journal.keep_days".to_string()), "{keys:?}");
        assert!(
            keys.contains(&"sandboxes.<name>.token_env".to_string()),
            "{keys:?}"
        );
        assert!(
            keys.contains(&"zones.cache.read_only".to_string()),
            "{keys:?}"
        );
        let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/config.md"))
            .expect("docs/config.md exists");
        for key in &keys {
            assert!(
                docs.contains(&format!("`{key}`")),
                "docs/config.md does not document `{key}`"
            );
            // The default config shows the key (commented out when its default is computed) in
            // its own section.
            let (section, name) = key.rsplit_once('.').unwrap_or(("", key));
            let mut current = String::new();
            let shown = DEFAULT_CONFIG.lines().any(|line| {
                // A table of named tables is shown as a commented-out example: `# [sandboxes.dev]`.
                let l = line.trim().trim_start_matches('#').trim_start();
                if let Some(h) = l.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
                    current = match h.split_once('.') {
                        Some(("sandboxes", _)) => "sandboxes.<name>".to_string(),
                        _ => h.to_string(),
                    };
                    return false;
                }
                current == section && l.starts_with(&format!("{name} ="))
            });
            assert!(shown, "config.toml does not show `{name}` in [{section}]");
        }
    }

    #[test]
    fn sandboxes_are_validated_by_key() {
        let s = load(
            "[sandboxes.dev]\nprovider = \"sandbox-agent\"\nurl = \"http://127.0.0.1:2468/\"\ntoken_env = \"DEV_TOKEN\"\n",
        )
        .unwrap();
        assert_eq!(s.sandboxes.len(), 1);
        assert_eq!(s.sandboxes[0].url, "http://127.0.0.1:2468");
        assert_eq!(s.sandboxes[0].root, DEFAULT_SANDBOX_ROOT);
        assert_eq!(s.sandboxes[0].mode, SandboxMode::Lazy);
        let e = load("[sandboxes.dev]\nprovider = \"e2b\"\nurl = \"http://x\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("sandboxes.dev.provider"), "{e}");
        let e = load("[sandboxes.dev]\nprovider = \"sandbox-agent\"\nurl = \"ftp://x\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("sandboxes.dev.url"), "{e}");
        let e = load(
            "[sandboxes.dev]\nprovider = \"sandbox-agent\"\nurl = \"http://x\"\ntoken_env = \"sk-secret\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("sandboxes.dev.token_env") && !e.contains("sk-secret"),
            "{e}"
        );
        let e = load(
            "[sandboxes.dev]\nprovider = \"sandbox-agent\"\nurl = \"http://x\"\nroot = \"rel\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("sandboxes.dev.root") && e.contains("absolute"),
            "{e}"
        );
        let e = load(
            "[sandboxes.dev]\nprovider = \"sandbox-agent\"\nurl = \"http://x\"\nmode = \"hot\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("mode"), "{e}");
        let e = load("[sandboxes.\"a b\"]\nprovider = \"sandbox-agent\"\nurl = \"http://x\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("sandbox name"), "{e}");

        // snapshot_network: local only, and only with setup commands to give the network to.
        let s = load(
            "[sandboxes.box]\nprovider = \"local\"\nsnapshot_base = \"minimal\"\nsnapshot_setup = [\"true\"]\nsnapshot_network = true\n",
        )
        .unwrap();
        let p = s.sandboxes[0].provision.as_ref().unwrap();
        assert!(p.snapshot_network);
        let e = load("[sandboxes.box]\nprovider = \"local\"\nsnapshot_base = \"minimal\"\nsnapshot_network = true\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("sandboxes.box.snapshot_network") && e.contains("snapshot_setup"),
            "{e}"
        );
        let e = load("[sandboxes.box]\nprovider = \"daytona\"\napi_key_env = \"K\"\nsnapshot_base = \"debian:12\"\nsnapshot_setup = [\"true\"]\nsnapshot_network = true\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("sandboxes.box.snapshot_network") && e.contains("\"local\""),
            "{e}"
        );
        let e = load(
            "[sandboxes.dev]\nprovider = \"sandbox-agent\"\nurl = \"http://x\"\nsnapshot_network = true\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("snapshot_network"), "{e}");
    }

    #[test]
    fn journal_keep_days_is_bounded() {
        assert_eq!(load(DEFAULT_CONFIG).unwrap().journal.keep_days, 30);
        assert_eq!(
            load("[journal]\nkeep_days = 0\n")
                .unwrap()
                .journal
                .keep_days,
            0
        );
        let e = load("[journal]\nkeep_days = 40000\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("journal.keep_days") && e.contains("36500"),
            "{e}"
        );
    }

    #[test]
    fn a_zone_may_be_served_from_a_sandbox() {
        let dev = "[sandboxes.dev]\nprovider = \"sandbox-agent\"\nurl = \"http://127.0.0.1:2468\"\nroot = \"/srv\"\n";
        let s = load(&format!(
            "[zones.workspace]\nsandbox = \"dev\"\npath = \"/home/u/p/\"\nattr_ttl_ms = 50\n{dev}"
        ))
        .unwrap();
        match &s.zones[1].backing {
            Backing::Sandbox(r) => {
                assert_eq!(r.sandbox.name, "dev");
                assert_eq!(r.path, "/home/u/p");
                assert_eq!(r.attr_ttl, Duration::from_millis(50));
            }
            other => panic!("{other:?}"),
        }
        // The path defaults to the sandbox's root; direct mode needs no dir for it.
        let s = load(&format!(
            "[zones]\nmode = \"direct\"\n[zones.cache]\ndir = \"/c\"\n[zones.workspace]\nsandbox = \"dev\"\n{dev}"
        ))
        .unwrap();
        assert!(matches!(&s.zones[1].backing, Backing::Sandbox(r) if r.path == "/srv"));
        // A sandbox wardfs makes itself serves a zone too (made on the zone's first use).
        let s =
            load("[zones.workspace]\nsandbox = \"box\"\n[sandboxes.box]\nprovider = \"local\"\n")
                .unwrap();
        assert!(matches!(
            &s.zones[1].backing,
            Backing::Sandbox(r) if r.sandbox.provision.is_some() && r.path == DEFAULT_SANDBOX_ROOT
        ));
        for (text, key, says) in [
            (
                "[zones.workspace]\nsandbox = \"prod\"\n",
                "zones.workspace.sandbox",
                "\"prod\" is not defined",
            ),
            (
                "[zones.workspace]\nsandbox = \"dev\"\npath = \"rel\"\n",
                "zones.workspace.path",
                "absolute",
            ),
            (
                "[zones.workspace]\nsandbox = \"dev\"\npath = \"/a/../b\"\n",
                "zones.workspace.path",
                "`..`",
            ),
            (
                "[zones.workspace]\npath = \"/a\"\n",
                "zones.workspace.path",
                "only used with",
            ),
            (
                "[zones.cache]\nattr_ttl_ms = 5\n",
                "zones.cache.attr_ttl_ms",
                "only used with",
            ),
            (
                "[zones.workspace]\nsandbox = \"dev\"\nattr_ttl_ms = 9999999\n",
                "zones.workspace.attr_ttl_ms",
                "at most",
            ),
            (
                "[zones.workspace]\nsandbox = \"dev\"\nallow_hardlinks = true\n",
                "zones.workspace.allow_hardlinks",
                "local zones only",
            ),
            (
                "[zones.workspace]\nsandbox = \"dev\"\nio = \"cached\"\n",
                "zones.workspace.io",
                "local zones only",
            ),
        ] {
            let e = load(&format!("{text}{dev}")).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains(says), "{text}: {e}");
        }
        let e = load(&format!(
            "[zones]\nmode = \"direct\"\n[zones.cache]\ndir = \"/c\"\n[zones.workspace]\ndir = \"/w\"\nsandbox = \"dev\"\n{dev}"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("zones.workspace.dir") && e.contains("not both"),
            "{e}"
        );
    }

    #[test]
    fn modes_require_their_keys() {
        let e = load("[zones]\nmode = \"direct\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("zones.cache.dir") && e.contains("required"),
            "{e}"
        );
        let e = load("[zones]\nmode = \"single\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("zones.dir"), "{e}");
        let e = load("[zones]\nmode = \"single\"\ndir = \"/p\"\ncache_subdir = \"../x\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("zones.cache_subdir"), "{e}");
        let s = load("[zones]\nmode = \"single\"\ndir = \"/p\"\n").unwrap();
        assert!(matches!(s.zones[0].backing, Backing::Disabled(_)));
        let e = load("[zones]\nmode = \"direct\"\nroot = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("zones.root") && e.contains("direct"), "{e}");
        let e = load("[git]\ntoken_env = \"ghp_abc-123\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("git.token_env") && !e.contains("ghp_abc"), "{e}");
        let e = load("[limits]\ngrep_max_results = 0\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("limits.grep_max_results"), "{e}");
    }

    #[test]
    fn limits_are_checked_in_order_with_the_api_connection_bounds() {
        let api = ApiSection::default();
        assert_eq!(
            check_limits(&Limits::default(), &api),
            Ok(Connections::default())
        );
        let l = Limits {
            max_write_bytes: 0,
            open_files: 10,
            ..Limits::default()
        };
        assert_eq!(
            check_limits(&l, &api).unwrap_err().0,
            "limits.max_write_bytes"
        );
        // The connection bounds come between the body budget and the open files.
        let l = Limits {
            open_files: 10,
            ..Limits::default()
        };
        let api = ApiSection {
            max_connections: Some(0),
            ..ApiSection::default()
        };
        assert_eq!(check_limits(&l, &api).unwrap_err().0, "api.max_connections");
        let (key, rule) = check_limits(&l, &ApiSection::default()).unwrap_err();
        assert_eq!(key, "limits.open_files");
        assert!(rule.contains("between 256 and 16777216"), "{rule}");
    }

    #[test]
    fn git_values_are_checked_without_echoing_a_token() {
        let api = ApiSection::default();
        assert_eq!(check_git(&GitSection::default(), &api), Ok(()));
        let git = GitSection {
            token_env: Some("ghp_secret-1".into()),
            ..GitSection::default()
        };
        let (key, rule) = check_git(&git, &api).unwrap_err();
        assert_eq!(key, "git.token_env");
        assert!(!rule.contains("ghp_secret"), "{rule}");
        let git = GitSection {
            github_api: "http://example.com".into(),
            ..GitSection::default()
        };
        let (key, rule) = check_git(&git, &api).unwrap_err();
        assert_eq!(key, "git.github_api");
        assert!(rule.contains("git.http_hosts"), "{rule}");
        let git = GitSection {
            http_hosts: vec!["example.com".into()],
            ..git
        };
        assert_eq!(check_git(&git, &api), Ok(()));
        let api = ApiSection {
            sandbox_http_hosts: vec!["http://x".into()],
            ..ApiSection::default()
        };
        assert_eq!(
            check_git(&GitSection::default(), &api).unwrap_err().0,
            "api.sandbox_http_hosts"
        );
    }

    #[test]
    fn each_zone_mode_lays_out_its_local_directories() {
        let r = Resolver {
            origin: "test",
            base: Path::new("/base"),
        };
        let dir = |path: &str, create: bool| Backing::Dir {
            path: path.into(),
            create,
        };
        let z = ZonesSection::default();
        let l = r.local_backings(&z).unwrap();
        assert_eq!(l.cache, dir("/base/.wardfs/cache", true));
        assert_eq!(l.workspace, dir("/base/.wardfs/workspace", true));
        assert_eq!(l.mount_root, Some(PathBuf::from("/base/.wardfs")));
        let z = ZonesSection {
            mode: ZoneMode::Single,
            dir: Some("p".into()),
            cache_subdir: Some("c/d".into()),
            ..ZonesSection::default()
        };
        let l = r.local_backings(&z).unwrap();
        assert_eq!(l.cache, dir("/base/p/c/d", true));
        assert_eq!(l.workspace, dir("/base/p", false));
        assert_eq!(l.mount_root, None);
        // Direct: a zone served from a sandbox needs no directory of its own.
        let mut z = ZonesSection {
            mode: ZoneMode::Direct,
            ..ZonesSection::default()
        };
        z.cache.dir = Some("/c".into());
        z.workspace.sandbox = Some("dev".into());
        let l = r.local_backings(&z).unwrap();
        assert_eq!(l.cache, dir("/c", false));
        assert!(matches!(l.workspace, Backing::Disabled(_)));
        z.workspace.sandbox = None;
        let e = r.local_backings(&z).unwrap_err().to_string();
        assert!(
            e.contains("zones.workspace.dir") && e.contains("required"),
            "{e}"
        );
    }

    #[test]
    fn a_sandboxs_own_keys_are_checked_one_phase_at_a_time() {
        assert_eq!(SandboxSettings::is_provisioned("local"), Ok(true));
        assert_eq!(SandboxSettings::is_provisioned("sandbox-agent"), Ok(false));
        assert_eq!(
            SandboxSettings::is_provisioned("e2b").unwrap_err().0,
            "provider"
        );
        let s = SandboxSection {
            url: Some("https://h:1//".into()),
            root: Some("/srv/".into()),
            ..SandboxSection::default()
        };
        assert_eq!(SandboxSettings::agent_url(&s).unwrap(), "https://h:1");
        assert_eq!(SandboxSettings::root(&s).unwrap(), "/srv");
        assert_eq!(SandboxSettings::no_agent_keys(&s).unwrap_err().0, "url");
        assert_eq!(SandboxSettings::no_provision_keys(&s), Ok(()));
        let s = SandboxSection {
            root: Some("/".into()),
            volume: Some("v".into()),
            ..SandboxSection::default()
        };
        assert_eq!(SandboxSettings::root(&s).unwrap(), "/");
        assert_eq!(
            SandboxSettings::no_provision_keys(&s).unwrap_err().0,
            "volume"
        );
        assert_eq!(SandboxSettings::agent_url(&s).unwrap_err().0, "url");
        assert_eq!(
            SandboxSettings::retry_limits(&s).unwrap(),
            (3, Duration::from_millis(500), Duration::from_secs(30))
        );
        let s = SandboxSection {
            retry_backoff_ms: Some(0),
            ..SandboxSection::default()
        };
        assert_eq!(
            SandboxSettings::retry_limits(&s).unwrap_err().0,
            "retry_backoff_ms"
        );
    }
}
