//! Which pages of a file the page cache holds (`mincore(2)`), and dropping a file from it: for
//! the unit tests of what wardfs reads ahead (the state database, a directory's files), which
//! include this file by path as `state::page_cache`, and for the mount's tests of what its
//! invalidations leave cached (`support::page_cache`).

use std::path::Path;
use std::time::Duration;

/// Pages of `f` in the page cache, and pages in all (`mincore(2)` over a shared mapping).
pub fn resident_pages(f: &std::fs::File) -> (usize, usize) {
    use std::os::fd::AsRawFd;
    let len = f.metadata().unwrap().len() as usize;
    // SAFETY: sysconf takes no pointer.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let pages = len.div_ceil(page);
    let mut vec = vec![0u8; pages];
    // SAFETY: a read-only shared mapping of an open file, unmapped below; mincore writes one
    // byte per page into `vec`, which has that many.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(p, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
        let r = libc::mincore(p, len, vec.as_mut_ptr());
        let err = std::io::Error::last_os_error();
        libc::munmap(p, len);
        assert_eq!(r, 0, "mincore: {err}");
    }
    (vec.iter().filter(|b| **b & 1 != 0).count(), pages)
}

/// [`resident_pages`] of the file at `path`.
pub fn resident(path: &Path) -> (usize, usize) {
    resident_pages(&std::fs::File::open(path).unwrap())
}

/// Drops the file at `path` from the page cache (written back first).
#[allow(dead_code)] // only the unit tests drop pages
pub fn evict(path: &Path) {
    let f = std::fs::File::open(path).unwrap();
    rustix::fs::fsync(&f).unwrap();
    rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed).unwrap();
}

/// Waits up to 10 s for all of the file at `path` to be in the page cache; true when it is.
#[allow(dead_code)] // only the unit tests wait for a read-ahead
pub fn becomes_resident(path: &Path) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (r, n) = resident(path);
        if r == n || std::time::Instant::now() >= deadline {
            return r == n;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
