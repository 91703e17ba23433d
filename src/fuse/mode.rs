//! The mount's I/O modes, decided in one place: what the daemon asks of the kernel at `INIT`,
//! which requests it then answers `ENOSYS` once so that the kernel stops sending them, and the
//! flags each open is answered with. Pure decisions over the configuration and what the kernel
//! agreed to, tested here without a kernel; the open files themselves are `super::handles`.
//!
//! Two I/O modes per zone (`zones.<zone>.io`, [`IoMode`]):
//! * **passthrough**: `OPEN` hands the kernel the backing file (Linux 6.9+), and reads and writes
//!   never reach the daemon;
//! * **cached** (the default): reads come from the page cache. When every zone is local,
//!   writable and cached, the first `OPEN`, `OPENDIR` and `FLUSH` are answered `ENOSYS` and the
//!   kernel sends none again (nor `RELEASE`, `RELEASEDIR`): reads and writes that reach the
//!   daemon then carry file handle 0 and are served by an *implicit writer*
//!   (`super::handles::ImplicitWriters`), which no `RELEASE` ends: it is journaled once it has
//!   gone `IMPLICIT_IDLE_MS` without a write, or when its name is removed or replaced.
//!
//! A zone served from a sandbox has neither: its files are read and written through the daemon
//! (`FOPEN_DIRECT_IO`) and its listings asked for again after its TTL.

use std::sync::atomic::{AtomicBool, Ordering};

use fuser::{FopenFlags, InitFlags, KernelConfig};
use rustix::fs::OFlags;

use crate::config::IoMode;

/// `max_write` over io_uring: every ring entry holds a payload buffer this large.
const URING_MAX_WRITE: u32 = 1 << 20;

/// What the kernel is asked at `INIT`: [`KernelConfig`], or a stand-in in tests.
pub trait Kernel {
    /// Asks for `flags`; true when the kernel offers them.
    fn ask(&mut self, flags: InitFlags) -> bool;
    /// Asks for a passthrough stack depth of `depth`; true when granted.
    fn stack_depth(&mut self, depth: u32) -> bool;
    /// Sets the largest write the kernel sends.
    fn max_write(&mut self, bytes: u32);
}

impl Kernel for KernelConfig {
    fn ask(&mut self, flags: InitFlags) -> bool {
        self.add_capabilities(flags).is_ok()
    }
    fn stack_depth(&mut self, depth: u32) -> bool {
        self.set_max_stack_depth(depth).is_ok()
    }
    fn max_write(&mut self, bytes: u32) {
        let _ = self.set_max_write(bytes);
    }
}

/// The mount's I/O modes (see the module's doc): wanted from the configuration, then settled by
/// what the kernel agrees to in [`Modes::negotiate`].
pub struct Modes {
    /// Zones served from the page cache without passthrough ([`IoMode::Cached`]), by zone
    /// index; a fork has its parent workspace's mode.
    cached: [bool; 2],
    /// `OPEN` (and `FLUSH`) answered `ENOSYS`: every zone is local, writable and cached.
    no_open: AtomicBool,
    /// `OPENDIR` answered `ENOSYS`: every zone is local. Not with a sandbox zone, whose
    /// listings must be asked for again after its TTL.
    no_opendir: AtomicBool,
    want_passthrough: bool,
    /// The kernel agreed to passthrough.
    passthrough: AtomicBool,
    /// Ask the kernel for FUSE over io_uring (`mount_transport = "io_uring"`).
    want_uring: bool,
}

impl Modes {
    /// The modes wanted for zones in I/O modes `io` (by zone index), given whether every zone
    /// is local and whether every zone is writable.
    pub fn new(io: [IoMode; 2], all_local: bool, all_writable: bool, want_uring: bool) -> Modes {
        let cached = io.map(|m| m == IoMode::Cached);
        let no_open = all_local && all_writable && cached.iter().all(|c| *c);
        Modes {
            cached,
            no_open: AtomicBool::new(no_open),
            no_opendir: AtomicBool::new(all_local),
            want_passthrough: !no_open,
            passthrough: AtomicBool::new(false),
            want_uring,
        }
    }

    /// Asks the kernel for what the modes need, and gives up what it refuses. Returns whether
    /// requests travel over io_uring.
    pub fn negotiate(&self, kernel: &mut impl Kernel) -> bool {
        kernel.ask(
            InitFlags::FUSE_DO_READDIRPLUS
                | InitFlags::FUSE_READDIRPLUS_AUTO
                | InitFlags::FUSE_PARALLEL_DIROPS,
        );
        if self.no_opendir() && !kernel.ask(InitFlags::FUSE_NO_OPENDIR_SUPPORT) {
            self.no_opendir.store(false, Ordering::Relaxed);
        }
        if self.no_open() && !kernel.ask(InitFlags::FUSE_NO_OPEN_SUPPORT) {
            tracing::info!(
                "the kernel cannot skip OPEN (FUSE_NO_OPEN_SUPPORT); cached zones send OPEN"
            );
            self.no_open.store(false, Ordering::Relaxed);
        }
        if self.no_open() {
            // Every write comes to the daemon, which clears set-user-ID and set-group-ID when
            // the kernel says the writer may not keep them (`FUSE_WRITE_KILL_SUIDGID`): the
            // kernel then stops asking for security.capability before each write (one GETXATTR
            // per write before; now at most one per file, SB_NOSEC). Not with passthrough,
            // where writes bypass the daemon.
            kernel.ask(InitFlags::FUSE_HANDLE_KILLPRIV_V2);
        }
        if self.want_passthrough {
            self.negotiate_passthrough(kernel);
        }
        self.negotiate_uring(kernel)
    }

    fn negotiate_passthrough(&self, kernel: &mut impl Kernel) {
        if !kernel.ask(InitFlags::FUSE_PASSTHROUGH) {
            tracing::info!("kernel passthrough unavailable (needs Linux 6.9+ and CAP_SYS_ADMIN)");
        } else if !kernel.stack_depth(2) {
            tracing::info!("kernel passthrough unavailable (stack depth refused)");
        } else {
            self.passthrough.store(true, Ordering::Relaxed);
        }
    }

    fn negotiate_uring(&self, kernel: &mut impl Kernel) -> bool {
        let uring = self.want_uring && kernel.ask(InitFlags::FUSE_OVER_IO_URING);
        if uring {
            // Each ring entry gets a payload buffer of max_write bytes; the kernel splits
            // requests at max_pages (1 MiB) anyway.
            kernel.max_write(URING_MAX_WRITE);
        } else if self.want_uring {
            tracing::info!(
                "the kernel does not offer FUSE over io_uring (Linux 6.14+ with \
                 /sys/module/fuse/parameters/enable_uring = Y); requests go through /dev/fuse"
            );
        }
        uring
    }

    /// `OPEN` and `FLUSH` are answered `ENOSYS` (once; the kernel sends none again).
    pub fn no_open(&self) -> bool {
        self.no_open.load(Ordering::Relaxed)
    }

    /// `OPENDIR` is answered `ENOSYS` (once; the kernel sends none again).
    pub fn no_opendir(&self) -> bool {
        self.no_opendir.load(Ordering::Relaxed)
    }

    /// The kernel agreed to passthrough.
    pub fn passthrough(&self) -> bool {
        self.passthrough.load(Ordering::Relaxed)
    }

    /// Whether the zone of index `zone` (a fork: its parent's, `None`) hands the kernel its
    /// files.
    pub fn passthrough_for(&self, zone: Option<usize>) -> bool {
        self.passthrough() && !self.cached[zone.unwrap_or(1)]
    }

    /// How file I/O is served, for the start-up log.
    pub fn describe(&self) -> &'static str {
        if self.no_open() {
            "the page cache, with no OPEN requests (every zone io = \"cached\")"
        } else if self.passthrough() {
            "kernel passthrough"
        } else {
            "reads and writes served by the daemon"
        }
    }

    /// The flags of an `OPEN`'s answer: with a passthrough `backing` file or without.
    pub fn opened(backing: bool) -> FopenFlags {
        if backing {
            FopenFlags::FOPEN_NOFLUSH
        } else {
            FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_NOFLUSH
        }
    }

    /// The flags of a `CREATE`'s answer. Without `OPEN` the kernel sends no `RELEASE`: the
    /// file's `FLUSH` at close is what ends it, so it is asked for.
    pub fn created(&self, backing: bool) -> FopenFlags {
        if backing {
            FopenFlags::FOPEN_NOFLUSH
        } else if self.no_open() {
            FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::FOPEN_NOFLUSH
        }
    }

    /// The flags of an `OPENDIR`'s answer: a listing the kernel may keep across opens (changes
    /// through the mount update it, changes behind its back invalidate it), unless it must be
    /// asked for again (`refreshed`: a sandbox's after its TTL, the forks' at every open).
    pub fn opened_dir(refreshed: bool) -> FopenFlags {
        if refreshed {
            FopenFlags::empty()
        } else {
            FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE
        }
    }
}

/// The flags to open a backing file with for the kernel's open `flags`: creation flags were
/// handled by the kernel or by `create`; the access mode and behaviour are kept.
pub fn open_flags(flags: i32) -> OFlags {
    let keep = libc::O_ACCMODE
        | libc::O_APPEND
        | libc::O_TRUNC
        | libc::O_DIRECT
        | libc::O_SYNC
        | libc::O_DSYNC
        | libc::O_NOATIME;
    OFlags::from_bits_retain((flags & keep) as u32)
}

/// True when an open with `flags` may change the file.
pub fn is_write(flags: i32) -> bool {
    let acc = flags & libc::O_ACCMODE;
    acc == libc::O_WRONLY || acc == libc::O_RDWR || flags & libc::O_TRUNC != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel that offers everything but `refuses`, and records what it was asked.
    struct FakeKernel {
        refuses: InitFlags,
        deep_stacks: bool,
        asked: InitFlags,
        max_write: Option<u32>,
    }

    impl Kernel for FakeKernel {
        fn ask(&mut self, flags: InitFlags) -> bool {
            self.asked |= flags;
            !self.refuses.intersects(flags)
        }
        fn stack_depth(&mut self, _depth: u32) -> bool {
            self.deep_stacks
        }
        fn max_write(&mut self, bytes: u32) {
            self.max_write = Some(bytes);
        }
    }

    fn kernel() -> FakeKernel {
        FakeKernel {
            refuses: InitFlags::empty(),
            deep_stacks: true,
            asked: InitFlags::empty(),
            max_write: None,
        }
    }

    const CACHED: [IoMode; 2] = [IoMode::Cached, IoMode::Cached];

    #[test]
    fn local_writable_cached_zones_skip_open_opendir_and_flush_and_let_the_kernel_kill_privileges()
    {
        let m = Modes::new(CACHED, true, true, false);
        let mut k = kernel();
        assert!(!m.negotiate(&mut k));
        assert!(m.no_open() && m.no_opendir());
        assert!(k.asked.contains(InitFlags::FUSE_HANDLE_KILLPRIV_V2));
        assert!(!k.asked.contains(InitFlags::FUSE_PASSTHROUGH));
        assert!(!m.passthrough_for(Some(0)));
        assert_eq!(m.created(false), FopenFlags::FOPEN_KEEP_CACHE);
    }

    #[test]
    fn a_kernel_that_cannot_skip_open_gets_opens_and_no_killpriv() {
        let m = Modes::new(CACHED, true, true, false);
        let mut k = FakeKernel {
            refuses: InitFlags::FUSE_NO_OPEN_SUPPORT,
            ..kernel()
        };
        m.negotiate(&mut k);
        assert!(!m.no_open());
        assert!(m.no_opendir(), "OPENDIR is skipped on its own flag");
        assert!(!k.asked.contains(InitFlags::FUSE_HANDLE_KILLPRIV_V2));
        assert_eq!(m.created(false), FopenFlags::FOPEN_NOFLUSH);
    }

    #[test]
    fn a_sandbox_zone_keeps_open_and_opendir() {
        let m = Modes::new(CACHED, false, true, false);
        m.negotiate(&mut kernel());
        assert!(!m.no_open() && !m.no_opendir());
    }

    #[test]
    fn a_read_only_zone_keeps_open_so_that_writes_are_refused_there() {
        let m = Modes::new(CACHED, true, false, false);
        m.negotiate(&mut kernel());
        assert!(!m.no_open());
        assert!(m.no_opendir());
    }

    #[test]
    fn passthrough_is_asked_for_and_used_only_by_the_zones_in_that_mode() {
        let m = Modes::new([IoMode::Cached, IoMode::Passthrough], true, true, false);
        let mut k = kernel();
        m.negotiate(&mut k);
        assert!(!m.no_open(), "a passthrough zone needs OPEN");
        assert!(k.asked.contains(InitFlags::FUSE_PASSTHROUGH));
        assert!(m.passthrough());
        assert!(!m.passthrough_for(Some(0)));
        assert!(m.passthrough_for(Some(1)));
        assert!(m.passthrough_for(None), "a fork has the workspace's mode");
        assert_eq!(m.describe(), "kernel passthrough");
    }

    #[test]
    fn passthrough_refused_by_the_kernel_or_its_stack_depth_serves_io_in_the_daemon() {
        for k in [
            &mut FakeKernel {
                refuses: InitFlags::FUSE_PASSTHROUGH,
                ..kernel()
            },
            &mut FakeKernel {
                deep_stacks: false,
                ..kernel()
            },
        ] {
            let m = Modes::new([IoMode::Passthrough; 2], true, true, false);
            m.negotiate(k);
            assert!(!m.passthrough() && !m.passthrough_for(Some(1)));
            assert_eq!(m.describe(), "reads and writes served by the daemon");
        }
    }

    #[test]
    fn io_uring_is_asked_for_when_wanted_and_sizes_the_ring_buffers() {
        let m = Modes::new(CACHED, true, true, true);
        let mut k = kernel();
        assert!(m.negotiate(&mut k));
        assert_eq!(k.max_write, Some(URING_MAX_WRITE));
        let mut refusing = FakeKernel {
            refuses: InitFlags::FUSE_OVER_IO_URING,
            ..kernel()
        };
        assert!(!Modes::new(CACHED, true, true, true).negotiate(&mut refusing));
        assert_eq!(refusing.max_write, None);
        let mut unasked = kernel();
        Modes::new(CACHED, true, true, false).negotiate(&mut unasked);
        assert!(!unasked.asked.contains(InitFlags::FUSE_OVER_IO_URING));
    }

    #[test]
    fn opens_keep_the_access_mode_and_behaviour_and_drop_creation_flags() {
        let f = open_flags(libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_APPEND);
        assert_eq!(f, OFlags::RDWR | OFlags::APPEND);
        assert!(is_write(libc::O_WRONLY) && is_write(libc::O_RDWR));
        assert!(
            is_write(libc::O_RDONLY | libc::O_TRUNC),
            "a truncation changes the file"
        );
        assert!(!is_write(libc::O_RDONLY | libc::O_NOATIME));
    }

    #[test]
    fn listings_are_kept_by_the_kernel_unless_they_must_be_asked_again() {
        assert!(Modes::opened_dir(false).contains(FopenFlags::FOPEN_CACHE_DIR));
        assert_eq!(Modes::opened_dir(true), FopenFlags::empty());
        assert!(Modes::opened(false).contains(FopenFlags::FOPEN_KEEP_CACHE));
        assert_eq!(Modes::opened(true), FopenFlags::FOPEN_NOFLUSH);
    }
}
