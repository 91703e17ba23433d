//! A ceiling on what libgit2 allocates at once while it reads what a remote sent.
//!
//! libgit2 holds an object whole: resolving a delta allocates the result's declared size before
//! applying it (a pack of a few hundred bytes can declare gigabytes: a delta bomb), a delta's
//! base and the delta itself are read whole, and a fetch from a local repository reads each of
//! its objects whole. Its one pack option (`GIT_OPT_SET_PACK_MAX_OBJECT_SIZE`) checks a delta's
//! result only, and fails without saying the size. So wardfs installs libgit2's allocator
//! ([`install`]): plain `malloc`, `realloc` and `free`, except that on a thread inside a [`Cap`]
//! one request over the cap fails before anything is inflated (libgit2 then fails the operation
//! as out of memory) and is remembered, so that the error can say what was refused
//! ([`take_refused`]). Fetches and pulls run inside a cap of `limits.git_blob_bytes` plus
//! [`HEADROOM`]; every other use of libgit2 is unchanged. [`install`] also bounds libgit2's pack
//! windows and object cache, which it keeps across operations.

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;

/// What a cap allows beyond the largest object wardfs reads (a tree, a blob): libgit2's own
/// buffers (an object's trailing NUL, a pack's object table) get this much more.
pub const HEADROOM: u64 = 16 << 20;

/// The size of one mapped window of a pack file (libgit2's default is 1 GiB on 64-bit systems).
const PACK_WINDOW_BYTES: usize = 32 << 20;

/// How much of its pack files libgit2 keeps mapped at most (default 8 GiB): mapped pages count
/// in the daemon's resident memory once read.
const PACK_MAPPED_BYTES: usize = 128 << 20;

/// How many bytes of parsed small objects (commits, trees) libgit2 caches (default 256 MiB).
const OBJECT_CACHE_BYTES: isize = 64 << 20;

/// The libgit2 version whose allocator interface [`Allocator`] mirrors.
const KNOWN_LIBGIT2: (u32, u32) = (1, 9);

thread_local! {
    /// The largest single allocation libgit2 may make on this thread.
    static LIMIT: Cell<usize> = const { Cell::new(usize::MAX) };
    /// The largest allocation refused on this thread since the last [`take_refused`] (0: none).
    static REFUSED: Cell<usize> = const { Cell::new(0) };
}

/// libgit2's `git_allocator` (include/git2/sys/alloc.h, libgit2 1.9).
#[repr(C)]
struct Allocator {
    gmalloc: unsafe extern "C" fn(usize, *const c_char, c_int) -> *mut c_void,
    grealloc: unsafe extern "C" fn(*mut c_void, usize, *const c_char, c_int) -> *mut c_void,
    gfree: unsafe extern "C" fn(*mut c_void),
}

/// Whether this thread's cap refuses `n` bytes (remembering the refusal).
fn refuse(n: usize) -> bool {
    let limit = LIMIT.try_with(Cell::get).unwrap_or(usize::MAX);
    if n <= limit {
        return false;
    }
    let _ = REFUSED.try_with(|r| r.set(r.get().max(n)));
    true
}

unsafe extern "C" fn capped_malloc(n: usize, _file: *const c_char, _line: c_int) -> *mut c_void {
    if refuse(n) {
        return std::ptr::null_mut();
    }
    // SAFETY: plain malloc; libgit2 frees with `plain_free`.
    unsafe { libc::malloc(n) }
}

unsafe extern "C" fn capped_realloc(
    ptr: *mut c_void,
    n: usize,
    _file: *const c_char,
    _line: c_int,
) -> *mut c_void {
    if refuse(n) {
        // As a failed realloc: `ptr` stays valid and the caller still owns it.
        return std::ptr::null_mut();
    }
    // SAFETY: `ptr` came from malloc or realloc (libgit2's default allocator is libc's too).
    unsafe { libc::realloc(ptr, n) }
}

unsafe extern "C" fn plain_free(ptr: *mut c_void) {
    // SAFETY: `ptr` came from malloc or realloc, or is null.
    unsafe { libc::free(ptr) }
}

/// Installs the capped allocator and bounds libgit2's pack windows and object cache, once per
/// process. The allocator is libc's, as libgit2's default is, so memory allocated before the
/// switch is freed alike. Returns whether the allocator is in place (it is not with a libgit2
/// other than [`KNOWN_LIBGIT2`], whose allocator interface may differ: then nothing is capped).
pub fn install() -> bool {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    *INSTALLED.get_or_init(install_once)
}

fn install_once() -> bool {
    // SAFETY: git_libgit2_opts with the argument types libgit2 1.9 documents for each option;
    // git2's calls initialise libgit2 first, and libgit2 copies the allocator structure.
    unsafe {
        let _ = git2::opts::set_mwindow_size(PACK_WINDOW_BYTES);
        let _ = git2::opts::set_mwindow_mapped_limit(PACK_MAPPED_BYTES);
        let _ = git2::opts::set_cache_max_size(OBJECT_CACHE_BYTES);
        // Every tree wardfs writes names objects it wrote or read itself; libgit2's check that
        // each entry exists reads every entry's header from disk, most of a merge's time.
        git2::opts::strict_object_creation(false);
        let (major, minor, _) = git2::Version::get().libgit2_version();
        if (major, minor) != KNOWN_LIBGIT2 {
            tracing::warn!(
                "libgit2 {major}.{minor} is not {}.{}: its allocator is left alone, so fetches \
                 and pulls are not capped in memory",
                KNOWN_LIBGIT2.0,
                KNOWN_LIBGIT2.1
            );
            return false;
        }
        let allocator = Allocator {
            gmalloc: capped_malloc,
            grealloc: capped_realloc,
            gfree: plain_free,
        };
        let rc = libgit2_sys::git_libgit2_opts(
            libgit2_sys::GIT_OPT_SET_ALLOCATOR as c_int,
            &allocator as *const Allocator,
        );
        if rc < 0 {
            tracing::warn!("libgit2 refused wardfs's allocator: fetches are not capped in memory");
        }
        rc >= 0
    }
}

/// While alive, libgit2 allocates at most `bytes` at once on this thread (the previous cap comes
/// back on drop). A cap refuses one allocation at a time, so what libgit2 holds at once stays
/// within a few times the cap (a delta's base, the delta and its result).
pub struct Cap {
    previous: usize,
}

impl Cap {
    /// Caps this thread's libgit2 allocations at `bytes` and forgets earlier refusals.
    pub fn enter(bytes: u64) -> Cap {
        install();
        let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        let previous = LIMIT.with(|l| l.replace(bytes));
        take_refused();
        Cap { previous }
    }

    /// The cap in bytes.
    pub fn bytes(&self) -> u64 {
        LIMIT.with(Cell::get) as u64
    }
}

impl Drop for Cap {
    fn drop(&mut self) {
        LIMIT.with(|l| l.set(self.previous));
    }
}

/// The largest allocation the cap refused on this thread since the last call, if any: a libgit2
/// failure that follows one is the cap's doing.
pub fn take_refused() -> Option<u64> {
    match REFUSED.with(|r| r.replace(0)) {
        0 => None,
        n => Some(n as u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capped_thread_cannot_read_an_object_over_its_cap_and_says_so() {
        assert!(install(), "the allocator is installed with libgit2 1.9");
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init_bare(dir.path()).unwrap();
        let big = repo.blob(&vec![b'x'; 1 << 20]).unwrap();
        let small = repo.blob(b"small\n").unwrap();
        {
            let cap = Cap::enter(64 << 10);
            assert_eq!(cap.bytes(), 64 << 10);
            let e = repo.find_blob(big).unwrap_err();
            assert_eq!(e.class(), git2::ErrorClass::NoMemory, "{e}");
            let refused = take_refused().expect("the refusal is remembered");
            assert!(refused > 1 << 20, "{refused}");
            assert_eq!(take_refused(), None, "taken once");
            // The header says the size without reading the object; small objects still read.
            let (size, _) = repo.odb().unwrap().read_header(big).unwrap();
            assert_eq!(size, 1 << 20);
            assert_eq!(repo.find_blob(small).unwrap().content(), b"small\n");
        }
        // Outside the cap nothing changes.
        assert_eq!(repo.find_blob(big).unwrap().content().len(), 1 << 20);
        assert_eq!(take_refused(), None);
    }
}
