//! The vendored fuser mounted for real, through both of its transports: `/dev/fuse` and FUSE
//! over io_uring (`src/uring.rs`, ours). A small in-memory filesystem (one flat directory of a
//! few files) is mounted, read, written, listed and unmounted, and every request it serves
//! records the thread that served it, so each test asserts which transport carried the requests.
//!
//! Needs root (a FUSE mount) and, for the io_uring test, a kernel that offers FUSE over io_uring
//! (Linux 6.14+, `/sys/module/fuse/parameters/enable_uring` = Y): wardfs uses it by default, so
//! its absence fails the test instead of skipping it. `make test` runs these (.ci/test-areas).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::MutexGuard;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;
use std::time::SystemTime;

use fuser::Config;
use fuser::Errno;
use fuser::FileAttr;
use fuser::FileHandle;
use fuser::FileType;
use fuser::Filesystem;
use fuser::FopenFlags;
use fuser::Generation;
use fuser::INodeNo;
use fuser::InitFlags;
use fuser::KernelConfig;
use fuser::LockOwner;
use fuser::MountOption;
use fuser::OpenFlags;
use fuser::ReplyAttr;
use fuser::ReplyCreate;
use fuser::ReplyData;
use fuser::ReplyDirectory;
use fuser::ReplyEntry;
use fuser::ReplyWrite;
use fuser::Request;
use fuser::TimeOrNow;
use fuser::WriteFlags;

/// The `fuse` module's switch for FUSE over io_uring.
const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";
/// The name prefix of fuser's ring threads (`uring::Rings::start`).
const RING_THREAD: &str = "fuser-ring-";
/// No caching in the kernel: every lookup and stat reaches the filesystem.
const TTL: Duration = Duration::ZERO;
/// The root directory's inode.
const ROOT: INodeNo = INodeNo(1);

/// How the filesystem asks the kernel to send its requests.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Transport {
    DevFuse,
    IoUring,
}

/// What a mounted filesystem reports back to its test.
#[derive(Default)]
struct Probe {
    /// Each request served: its operation and the name of the thread that served it.
    served: Mutex<Vec<(&'static str, String)>>,
    /// Whether the kernel agreed to FUSE over io_uring in `init` (None: no `init` yet).
    uring_agreed: Mutex<Option<bool>>,
    /// Set by `destroy`.
    destroyed: AtomicBool,
}

impl Probe {
    fn record(&self, op: &'static str) {
        let thread = std::thread::current().name().unwrap_or("").to_string();
        self.served.lock().unwrap().push((op, thread));
    }

    fn take_served(&self) -> Vec<(&'static str, String)> {
        std::mem::take(&mut *self.served.lock().unwrap())
    }
}

/// One regular file of the filesystem.
struct File {
    name: String,
    data: Vec<u8>,
}

/// A flat directory of files in memory.
struct MemFs {
    transport: Transport,
    files: Mutex<BTreeMap<u64, File>>,
    probe: Arc<Probe>,
}

impl MemFs {
    /// The filesystem with `hello.txt` and `notes.txt`.
    fn new(transport: Transport, probe: Arc<Probe>) -> MemFs {
        let files = BTreeMap::from([
            (2, file("hello.txt", b"hello\n")),
            (3, file("notes.txt", b"one\ntwo\n")),
        ]);
        MemFs {
            transport,
            files: Mutex::new(files),
            probe,
        }
    }

    fn files(&self) -> MutexGuard<'_, BTreeMap<u64, File>> {
        self.files.lock().unwrap()
    }
}

fn file(name: &str, data: &[u8]) -> File {
    File {
        name: name.to_string(),
        data: data.to_vec(),
    }
}

/// The attributes of inode `ino`: a directory for the root, else a file of `size` bytes.
fn attr(ino: u64, size: u64) -> FileAttr {
    let kind = if ino == ROOT.0 {
        FileType::Directory
    } else {
        FileType::RegularFile
    };
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: SystemTime::UNIX_EPOCH,
        mtime: SystemTime::UNIX_EPOCH,
        ctime: SystemTime::UNIX_EPOCH,
        crtime: SystemTime::UNIX_EPOCH,
        kind,
        perm: if kind == FileType::Directory {
            0o755
        } else {
            0o644
        },
        nlink: if kind == FileType::Directory { 2 } else { 1 },
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl Filesystem for MemFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        if self.transport == Transport::IoUring {
            let agreed = config
                .add_capabilities(InitFlags::FUSE_OVER_IO_URING)
                .is_ok();
            *self.probe.uring_agreed.lock().unwrap() = Some(agreed);
        }
        Ok(())
    }

    fn destroy(&mut self) {
        self.probe.destroyed.store(true, Ordering::SeqCst);
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.probe.record("lookup");
        let files = self.files();
        let found = files.iter().find(|(_, f)| OsStr::new(&f.name) == name);
        match found {
            Some((&ino, f)) if parent == ROOT => {
                reply.entry(&TTL, &attr(ino, f.data.len() as u64), Generation(0))
            }
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.probe.record("getattr");
        if ino == ROOT {
            return reply.attr(&TTL, &attr(ROOT.0, 0));
        }
        match self.files().get(&ino.0) {
            Some(f) => reply.attr(&TTL, &attr(ino.0, f.data.len() as u64)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.probe.record("setattr");
        let mut files = self.files();
        let Some(f) = files.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        if let Some(size) = size {
            f.data.resize(size as usize, 0);
        }
        reply.attr(&TTL, &attr(ino.0, f.data.len() as u64));
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.probe.record("read");
        let files = self.files();
        // Straight into the reply's buffer (over io_uring, the ring entry's payload).
        reply.data_from(size as usize, |buf| {
            let f = files.get(&ino.0).ok_or(Errno::ENOENT)?;
            let start = (offset as usize).min(f.data.len());
            let n = (f.data.len() - start).min(buf.len());
            buf[..n].copy_from_slice(&f.data[start..start + n]);
            Ok(n)
        });
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.probe.record("write");
        let mut files = self.files();
        let Some(f) = files.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let end = offset as usize + data.len();
        if f.data.len() < end {
            f.data.resize(end, 0);
        }
        f.data[offset as usize..end].copy_from_slice(data);
        reply.written(data.len() as u32);
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        self.probe.record("create");
        if parent != ROOT {
            return reply.error(Errno::ENOENT);
        }
        let mut files = self.files();
        let ino = files.keys().max().unwrap_or(&ROOT.0) + 1;
        files.insert(ino, file(&name.to_string_lossy(), b""));
        reply.created(
            &TTL,
            &attr(ino, 0),
            Generation(0),
            FileHandle(0),
            FopenFlags::empty(),
        );
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.probe.record("readdir");
        if ino != ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let files = self.files();
        let entries = [
            (ROOT.0, FileType::Directory, "."),
            (ROOT.0, FileType::Directory, ".."),
        ]
        .into_iter()
        .chain(
            files
                .iter()
                .map(|(&ino, f)| (ino, FileType::RegularFile, f.name.as_str())),
        );
        for (i, (ino, kind, name)) in entries.enumerate().skip(offset as usize) {
            if reply.add(INodeNo(ino), i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }
}

/// Mounts one at a time: the tests look at this process's threads, which both would start.
static ONE_MOUNT: Mutex<()> = Mutex::new(());

/// The names of this process's threads that start with `prefix` (as the kernel shows them).
fn threads_named(prefix: &str) -> Vec<String> {
    fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter_map(|t| fs::read_to_string(t.path().join("comm")).ok())
        .map(|comm| comm.trim_end().to_string())
        .filter(|comm| comm.starts_with(prefix))
        .collect()
}

/// Whether `dir` is a mount point of this process's mount namespace.
fn is_mounted(dir: &Path) -> bool {
    let dir = dir.to_str().unwrap();
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(dir))
}

fn assert_root() {
    assert!(
        euid_is_root(),
        "these tests mount FUSE and must run as root (make test and CI do, inside .ci/netns)"
    );
}

/// Whether this process runs with effective uid 0.
fn euid_is_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1).map(|euid| euid == "0"))
        .unwrap_or(false)
}

/// Reads, writes and lists the mounted filesystem at `mnt`, checking every answer. Writes
/// 300 KiB to a new file, so that it takes several WRITE requests of up to `max_write`.
fn use_the_mount(mnt: &Path) {
    assert_eq!(
        fs::read_to_string(mnt.join("hello.txt")).unwrap(),
        "hello\n"
    );
    let mut names: Vec<String> = fs::read_dir(mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["hello.txt", "notes.txt"]);

    let big: Vec<u8> = (0..300 * 1024u32).map(|i| (i % 251) as u8).collect();
    fs::File::create(mnt.join("big.bin"))
        .unwrap()
        .write_all(&big)
        .unwrap();
    assert_eq!(
        fs::metadata(mnt.join("big.bin")).unwrap().len(),
        big.len() as u64
    );
    assert!(
        fs::read(mnt.join("big.bin")).unwrap() == big,
        "big.bin read back differs"
    );

    // Truncated and rewritten (setattr, then write), then written in the middle.
    fs::write(mnt.join("notes.txt"), "three\n").unwrap();
    let notes = fs::OpenOptions::new()
        .write(true)
        .open(mnt.join("notes.txt"))
        .unwrap();
    notes.write_all_at(b"TH", 0).unwrap();
    drop(notes);
    assert_eq!(
        fs::read_to_string(mnt.join("notes.txt")).unwrap(),
        "THree\n"
    );

    let mut names: Vec<String> = fs::read_dir(mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["big.bin", "hello.txt", "notes.txt"]);
    assert!(fs::metadata(mnt.join("missing")).is_err());
}

/// Waits until a request reaches the filesystem on a ring thread: the kernel routes requests
/// to the rings only once every CPU's queue has one registered, which the session does after
/// the mount returns.
fn wait_for_the_rings(mnt: &Path, probe: &Probe) {
    let start = Instant::now();
    loop {
        fs::metadata(mnt.join("hello.txt")).unwrap();
        if probe
            .take_served()
            .iter()
            .any(|(_, thread)| thread.starts_with(RING_THREAD))
        {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the kernel agreed to FUSE over io_uring, but no request came over a ring in 5 s \
             (ring threads: {:?})",
            threads_named(RING_THREAD)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// How long a test may take before its process is aborted: a request the kernel never hands
/// to the filesystem blocks the caller in the kernel, where no assertion can time out.
const DEADLINE: Duration = Duration::from_secs(30);

/// Aborts the process, naming `test`, unless dropped within `DEADLINE`.
struct Watchdog(Arc<AtomicBool>);

impl Watchdog {
    fn start(test: &'static str) -> Watchdog {
        let done = Arc::new(AtomicBool::new(false));
        let seen = done.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            while start.elapsed() < DEADLINE {
                if seen.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            eprintln!(
                "{test}: still running after {DEADLINE:?}, a request through the mount hangs \
                 (threads: {:?}); aborting",
                threads_named("")
            );
            std::process::abort();
        });
        Watchdog(done)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Mounts the filesystem over `transport`, uses it, unmounts it, and returns what it served
/// while used.
fn mount_use_unmount(transport: Transport) -> Vec<(&'static str, String)> {
    let _watchdog = Watchdog::start(match transport {
        Transport::DevFuse => "the /dev/fuse mount",
        Transport::IoUring => "the io_uring mount",
    });
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path();
    let probe = Arc::new(Probe::default());
    let mut config = Config::default();
    config.mount_options = vec![MountOption::FSName("fuser-test".into())];
    let session = fuser::spawn_mount(MemFs::new(transport, probe.clone()), mnt, &config)
        .unwrap_or_else(|e| panic!("mounting on {}: {e}", mnt.display()));
    assert!(
        is_mounted(mnt),
        "{} is not in /proc/self/mountinfo",
        mnt.display()
    );

    if transport == Transport::IoUring {
        let agreed = *probe.uring_agreed.lock().unwrap();
        assert_eq!(
            agreed,
            Some(true),
            "the kernel did not agree to FUSE_OVER_IO_URING in init (None: no init)"
        );
        wait_for_the_rings(mnt, &probe);
    } else {
        assert_eq!(
            threads_named(RING_THREAD),
            Vec::<String>::new(),
            "ring threads started without FUSE_OVER_IO_URING"
        );
    }
    probe.take_served();
    use_the_mount(mnt);
    let served = probe.take_served();

    session.umount_and_join().expect("unmount and join");
    assert!(
        !is_mounted(mnt),
        "{} still mounted after unmount",
        mnt.display()
    );
    assert!(
        probe.destroyed.load(Ordering::SeqCst),
        "destroy was not called"
    );
    assert_eq!(
        threads_named(RING_THREAD),
        Vec::<String>::new(),
        "ring threads outlive the session"
    );
    served
}

/// The operations in `served`, each once, in order of first appearance.
fn ops(served: &[(&'static str, String)]) -> Vec<&'static str> {
    let mut ops = Vec::new();
    for (op, _) in served {
        if !ops.contains(op) {
            ops.push(*op);
        }
    }
    ops
}

/// Asserts that every request the workload takes was served.
fn assert_every_operation(served: &[(&'static str, String)]) {
    let ops = ops(served);
    for op in [
        "lookup", "getattr", "read", "write", "create", "setattr", "readdir",
    ] {
        assert!(ops.contains(&op), "no {op} request served; served: {ops:?}");
    }
}

#[test]
fn a_mount_over_io_uring_serves_every_request_on_the_rings() {
    let _one = ONE_MOUNT.lock().unwrap_or_else(|e| e.into_inner());
    assert_root();
    let on = fs::read_to_string(ENABLE_URING).unwrap_or_else(|e| format!("unreadable: {e}"));
    assert_eq!(
        on.trim(),
        "Y",
        "the kernel does not offer FUSE over io_uring ({ENABLE_URING} = {on:?}); it needs \
         Linux 6.14+ and, as root, `echo Y > {ENABLE_URING}` (.ci/install-deps does)"
    );
    let served = mount_use_unmount(Transport::IoUring);
    assert_every_operation(&served);
    let off_ring: Vec<_> = served
        .iter()
        .filter(|(_, thread)| !thread.starts_with(RING_THREAD))
        .collect();
    assert!(
        off_ring.is_empty(),
        "{} of {} requests came through /dev/fuse instead of a ring: {off_ring:?}",
        off_ring.len(),
        served.len()
    );
}

#[test]
fn a_mount_through_dev_fuse_serves_every_request_on_its_threads() {
    let _one = ONE_MOUNT.lock().unwrap_or_else(|e| e.into_inner());
    assert_root();
    let served = mount_use_unmount(Transport::DevFuse);
    assert_every_operation(&served);
    let elsewhere: Vec<_> = served
        .iter()
        .filter(|(_, thread)| !thread.starts_with("fuser-") || thread.starts_with(RING_THREAD))
        .collect();
    assert!(
        elsewhere.is_empty(),
        "{} of {} requests were not served by a /dev/fuse thread: {elsewhere:?}",
        elsewhere.len(),
        served.len()
    );
}
