//! Test support: which pages of a file the page cache holds (`mincore(2)`), and dropping a file
//! from it, for the tests of what wardfs reads ahead (the state database, a directory's files).

use std::path::Path;
use std::time::Duration;

/// Pages of the file at `path` in the page cache, and pages in all.
pub fn resident(path: &Path) -> (usize, usize) {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    let pages = len.div_ceil(4096);
    let mut vec = vec![0u8; pages];
    // SAFETY: a read-only shared mapping of an open file, unmapped below; mincore writes one
    // byte per page into `vec`, which has at least that many.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        assert_eq!(libc::mincore(p, len, vec.as_mut_ptr()), 0);
        libc::munmap(p, len);
    }
    (vec.iter().filter(|b| **b & 1 != 0).count(), pages)
}

/// Drops the file at `path` from the page cache (written back first).
pub fn evict(path: &Path) {
    let f = std::fs::File::open(path).unwrap();
    rustix::fs::fsync(&f).unwrap();
    rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed).unwrap();
}

/// Waits up to 10 s for all of the file at `path` to be in the page cache; true when it is.
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
