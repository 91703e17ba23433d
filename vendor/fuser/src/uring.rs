//! FUSE over io_uring (`FUSE_OVER_IO_URING`, Linux 6.14+).
//!
//! With the classic transport every request costs a `read(2)` of `/dev/fuse` by a daemon thread
//! and every reply a `writev(2)`. Over io_uring the daemon registers buffers with the kernel,
//! one "ring entry" each, and the kernel copies a request straight into a free entry of the
//! queue of the CPU the caller runs on, then completes the entry's command; the daemon answers
//! by writing the reply into the same entry and submitting COMMIT_AND_FETCH, which hands the
//! reply over and arms the entry for the next request in one `io_uring_enter(2)`.
//!
//! Layout, as the kernel defines it (`include/uapi/linux/fuse.h`): an entry is two buffers, a
//! header (`fuse_uring_req_header`: the in/out header, the op's own header, and the entry's
//! commit id and payload size) and a payload for everything after the op header (names, write
//! data, and the whole of a reply). The kernel needs one queue per possible CPU before it routes
//! requests to the rings; until then, and always for FORGET and INTERRUPT, `/dev/fuse` carries
//! them, so the classic threads keep running beside the ring threads.
//!
//! Here every ring thread owns one io_uring with one entry per `depth` and answers inline, the
//! same model as a `/dev/fuse` thread. A reply sent from another thread (a filesystem that
//! answers later) submits under the ring's lock.
//!
//! A request is handed to the filesystem in the classic layout. Most are small and copied into
//! the thread's buffer; a WRITE is not: each entry's payload buffer has room in front of it for
//! the two headers, which are copied there, so the data (up to `max_write`) is read where the
//! kernel put it. Its reply waits until the filesystem has returned from the request, since it
//! is written into the same buffer.
//!
//! Every `unsafe` here carries a `// SAFETY:` comment (`clippy::undocumented_unsafe_blocks`,
//! turned on for this module in lib.rs). The buffers
//! a ring entry names are shared with the kernel: it writes a request into them between the
//! submission of the entry's command and its completion, and reads the reply between the
//! COMMIT_AND_FETCH submission and the next completion. The rule every `unsafe` leans on is that
//! the daemon touches an entry's buffers only while the kernel does not own them, and that they
//! outlive the io_uring (which is closed, cancelling its commands, before they are freed).

use std::cell::UnsafeCell;
use std::io;
use std::io::IoSlice;
use std::os::fd::AsRawFd;
use std::os::fd::FromRawFd;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::thread::JoinHandle;

use io_uring::IoUring;
use io_uring::opcode;
use io_uring::squeue;
use io_uring::types;
use log::debug;
use log::warn;
use parking_lot::Mutex;

use crate::Filesystem;
use crate::channel::ChannelSender;
use crate::dev_fuse::DevFuse;
use crate::ll::Operation;
use crate::ll::fuse_abi as abi;
use crate::reply::ReplyEmpty;
use crate::reply::ReplySender;
use crate::request::RequestWithSender;
use crate::session::SessionEventLoop;

/// `FUSE_IO_URING_CMD_REGISTER`: register an entry's buffers and fetch a request.
const CMD_REGISTER: u32 = 1;
/// `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`: hand over a reply and fetch the next request.
const CMD_COMMIT_AND_FETCH: u32 = 2;
/// Size of the in/out header and of the op header areas of `fuse_uring_req_header`.
const HEADER_AREA: usize = 128;
/// `user_data` of the poll on the wake-up eventfd.
const WAKE: u64 = u64::MAX;
/// More possible CPUs than this and the rings are not used (one queue per CPU is required).
const MAX_QUEUES: usize = 64;
/// Room in front of an entry's payload for `fuse_in_header` and the op header (at most
/// `HEADER_AREA`), where a WRITE is laid out in the classic layout without moving its data.
const HEADROOM: usize = 256;
/// `FUSE_WRITE`: the request read in place.
const OP_WRITE: u32 = 16;
/// Size of `fuse_in_header`, the first header of every request.
const IN_HEADER: usize = size_of::<abi::fuse_in_header>();
/// Size of `fuse_out_header`, the first header of every reply.
const OUT_HEADER: usize = size_of::<abi::fuse_out_header>();
/// The kernel's list of the CPUs it may route requests from.
const POSSIBLE_CPUS: &str = "/sys/devices/system/cpu/possible";

/// `struct fuse_uring_ent_in_out`.
#[repr(C)]
#[derive(Clone, Copy)]
struct EntInOut {
    flags: u64,
    commit_id: u64,
    payload_sz: u32,
    padding: u32,
    reserved: u64,
}

/// `struct fuse_uring_req_header`, page-aligned as the kernel prefers.
#[repr(C, align(4096))]
struct Header {
    in_out: [u8; HEADER_AREA],
    op_in: [u8; HEADER_AREA],
    ent: EntInOut,
}

thread_local! {
    /// The ring whose loop runs on this thread (null elsewhere).
    static SERVING: std::cell::Cell<*const Ring> = const { std::cell::Cell::new(std::ptr::null()) };
}

/// One ring entry: the buffers the kernel reads and writes, and the iovecs naming them.
struct Slot {
    header: Box<Header>,
    /// `HEADROOM` bytes, then the payload the kernel reads and writes (u64 words: aligned for
    /// `fuse_in_header`).
    words: Box<[u64]>,
    /// Length of the payload proper.
    payload_len: usize,
    iov: [libc::iovec; 2],
    /// The command last submitted for this entry (resubmitted after EINTR/EAGAIN).
    last: u32,
}

/// Initialised u64 words as bytes (u64 words keep a request aligned for `fuse_in_header`).
fn word_bytes(words: &mut [u64]) -> &mut [u8] {
    // SAFETY: reinterpreting initialised u64 words as bytes.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), words.len() * 8) }
}

impl Slot {
    /// The headroom and the payload, as bytes.
    fn bytes(&mut self) -> &mut [u8] {
        word_bytes(&mut self.words)
    }

    /// The payload the kernel reads and writes.
    fn payload(&mut self) -> &mut [u8] {
        let len = self.payload_len;
        &mut self.bytes()[HEADROOM..HEADROOM + len]
    }

    /// Sets the reply's header and the length of its payload (already in place), for the
    /// commit that hands the entry back.
    fn set_reply(&mut self, header: &[u8; OUT_HEADER], payload_len: usize) {
        self.header.in_out[..OUT_HEADER].copy_from_slice(header);
        self.header.ent.payload_sz = payload_len as u32;
        self.last = CMD_COMMIT_AND_FETCH;
    }
}

/// Whether a slot's request is being read in place by the filesystem.
#[derive(Default)]
enum Lend {
    /// Not lent: a reply is written into the slot at once.
    #[default]
    No,
    /// Lent: a reply is held until the filesystem returns.
    Lent,
    /// Lent, and this reply (the classic layout) waits to be written.
    Held(Vec<u8>),
}

/// One io_uring with its entries, all registered for queue `qid`.
pub(crate) struct Ring {
    // Dropped first: closing the ring cancels its commands before the buffers go.
    ring: IoUring<squeue::Entry128>,
    submit: Mutex<()>,
    slots: Box<[UnsafeCell<Slot>]>,
    lend: Box<[Mutex<Lend>]>,
    qid: u16,
    dev: Arc<DevFuse>,
    wake: OwnedFd,
}

// SAFETY: the `UnsafeCell` slots are what keeps `Ring` from being `Sync`. A slot is touched by
// the ring thread only between the completion that hands it a request and the reply's commit,
// and by the one reply of that request (from whichever thread answers); the kernel owns it in
// between, and `lend` orders a reply against a request still read in place. Submissions are
// serialised by `submit`; the completion queue is read by the ring thread alone.
unsafe impl Sync for Ring {}
// SAFETY: everything in a `Ring` is owned (boxes, descriptors) or `Send`; the raw pointers in
// the slots' iovecs point into the slots' own boxes, which move with it.
unsafe impl Send for Ring {}

/// Where the reply to a request that came in over a ring goes.
#[derive(Clone)]
pub(crate) struct RingReply {
    ring: Arc<Ring>,
    slot: usize,
}

impl std::fmt::Debug for RingReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RingReply(qid {}, slot {})", self.ring.qid, self.slot)
    }
}

impl RingReply {
    /// Writes the reply (`fuse_out_header` first, then its payload) into the entry and commits.
    pub(crate) fn send(&self, data: &[IoSlice<'_>]) -> io::Result<()> {
        self.ring.commit(self.slot, data)
    }

    /// Writes a reply of at most `max` bytes that `fill` puts straight into the entry's payload
    /// (or `fill`'s error), and commits. `fill` comes back unused when the entry cannot take
    /// the reply that way (its request is still read in place, or its payload is smaller than
    /// `max`): the caller then builds the reply elsewhere and `send`s it.
    pub(crate) fn send_filled<F>(
        &self,
        unique: u64,
        max: usize,
        fill: F,
    ) -> Result<io::Result<()>, F>
    where
        F: FnOnce(&mut [u8]) -> Result<usize, crate::Errno>,
    {
        self.ring.commit_filled(self.slot, unique, max, fill)
    }

    /// The `/dev/fuse` device of the connection (for backing-file ioctls).
    pub(crate) fn channel(&self) -> ChannelSender {
        ChannelSender(self.ring.dev.clone())
    }
}

/// The 80-byte command area of a ring entry's SQE: `struct fuse_uring_cmd_req`.
fn cmd_area(qid: u16, commit_id: u64) -> [u8; 80] {
    // struct fuse_uring_cmd_req { u64 flags; u64 commit_id; u16 qid; u8 padding[6]; }
    let mut cmd = [0u8; 80];
    cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    cmd[16..18].copy_from_slice(&qid.to_ne_bytes());
    cmd
}

impl Ring {
    fn new(dev: Arc<DevFuse>, qid: u16, depth: usize, payload: usize) -> io::Result<Ring> {
        let ring = IoUring::<squeue::Entry128>::builder()
            .setup_cqsize(2 * (depth as u32 + 1))
            .build(depth as u32 + 1)?;
        // SAFETY: eventfd(2) takes no pointers; it returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created (not -1, checked above) and is owned by nobody else.
        let wake = unsafe { OwnedFd::from_raw_fd(fd) };
        let slots = (0..depth)
            .map(|_| {
                let mut header = Box::new(Header {
                    in_out: [0; HEADER_AREA],
                    op_in: [0; HEADER_AREA],
                    ent: EntInOut {
                        flags: 0,
                        commit_id: 0,
                        payload_sz: 0,
                        padding: 0,
                        reserved: 0,
                    },
                });
                let mut words = vec![0u64; (HEADROOM + payload).div_ceil(8)].into_boxed_slice();
                let iov = [
                    libc::iovec {
                        iov_base: (&mut *header as *mut Header).cast(),
                        iov_len: size_of::<Header>(),
                    },
                    libc::iovec {
                        // SAFETY: the allocation is `HEADROOM + payload` bytes long (rounded up
                        // to words), so `HEADROOM` is within it.
                        iov_base: unsafe { words.as_mut_ptr().cast::<u8>().add(HEADROOM) }.cast(),
                        iov_len: payload,
                    },
                ];
                UnsafeCell::new(Slot {
                    header,
                    words,
                    payload_len: payload,
                    iov,
                    last: CMD_REGISTER,
                })
            })
            .collect();
        Ok(Ring {
            ring,
            submit: Mutex::new(()),
            slots,
            lend: (0..depth).map(|_| Mutex::new(Lend::No)).collect(),
            qid,
            dev,
            wake,
        })
    }

    fn entry(&self, slot: usize, cmd: u32) -> squeue::Entry128 {
        // SAFETY: only the slot's iovec address and its commit id are read, and only by the
        // thread that holds the slot (see `unsafe impl Sync for Ring`): the kernel wrote the
        // commit id before completing the command this entry answers.
        let s = unsafe { &*self.slots[slot].get() };
        let commit_id = if cmd == CMD_COMMIT_AND_FETCH {
            s.header.ent.commit_id
        } else {
            0
        };
        let mut e = opcode::UringCmd80::new(types::Fd(self.dev.as_raw_fd()), cmd)
            .cmd(cmd_area(self.qid, commit_id))
            .addr(Some(s.iov.as_ptr() as u64))
            .build()
            .user_data(slot as u64);
        if cmd == CMD_REGISTER {
            // The kernel wants `sqe->len` = 2 (header and payload iovecs), which the builder
            // does not set.
            // SAFETY: `Entry128` is `repr(C)` and starts with the kernel's `io_uring_sqe`,
            // whose `len` is the u32 at byte 24 (`include/uapi/linux/io_uring.h`); the write is
            // within the 128-byte entry, which `e` owns.
            unsafe {
                let p = (&mut e as *mut squeue::Entry128).cast::<u8>();
                p.add(24).cast::<u32>().write_unaligned(2);
            }
        }
        e
    }

    fn push(&self, entries: &[squeue::Entry128]) -> io::Result<()> {
        let _guard = self.submit.lock();
        // SAFETY: `submission_shared` needs no other submission queue access at once: every
        // push happens under `submit`, held here. The entries point at iovecs and buffers that
        // live as long as the ring.
        unsafe {
            let mut sq = self.ring.submission_shared();
            for e in entries {
                sq.push(e)
                    .map_err(|_| io::Error::other("io_uring submission queue full"))?;
            }
        }
        // On the ring's own thread the loop's next `submit_and_wait` submits the entries and
        // waits for the next request in one system call; any other thread submits now.
        if !SERVING.with(|s| std::ptr::eq(s.get(), self)) {
            self.ring.submit()?;
        }
        Ok(())
    }

    fn register(&self) -> io::Result<()> {
        let mut entries: Vec<squeue::Entry128> = (0..self.slots.len())
            .map(|i| self.entry(i, CMD_REGISTER))
            .collect();
        entries.push(
            opcode::PollAdd::new(types::Fd(self.wake.as_raw_fd()), libc::POLLIN as u32)
                .build()
                .user_data(WAKE)
                .into(),
        );
        self.push(&entries)
    }

    fn commit(&self, slot: usize, data: &[IoSlice<'_>]) -> io::Result<()> {
        {
            let mut lend = self.lend[slot].lock();
            if !matches!(*lend, Lend::No) {
                // The filesystem still reads the request in this slot: the ring thread writes
                // the reply once it has returned (`unlend`).
                *lend = Lend::Held(data.iter().flat_map(|p| p.iter().copied()).collect());
                return Ok(());
            }
        }
        {
            // SAFETY: the slot belongs to this reply until it is committed below: the kernel
            // completed its command (it holds a request), the request is no longer read (not
            // lent, checked above), and a request gets one reply.
            let s = unsafe { &mut *self.slots[slot].get() };
            let mut header = [0u8; OUT_HEADER];
            let written = fill_reply(data, &mut header, s.payload());
            s.set_reply(&header, written);
        }
        self.push(&[self.entry(slot, CMD_COMMIT_AND_FETCH)])
    }

    /// `commit` for a reply whose data `fill` writes into the slot's payload (see
    /// `RingReply::send_filled`).
    fn commit_filled<F>(
        &self,
        slot: usize,
        unique: u64,
        max: usize,
        fill: F,
    ) -> Result<io::Result<()>, F>
    where
        F: FnOnce(&mut [u8]) -> Result<usize, crate::Errno>,
    {
        if !matches!(*self.lend[slot].lock(), Lend::No) {
            return Err(fill);
        }
        {
            // SAFETY: as in `commit`: the kernel completed the slot's command, the request is
            // not read in place (checked above), and this is the request's one reply.
            let s = unsafe { &mut *self.slots[slot].get() };
            if max > s.payload_len {
                return Err(fill);
            }
            let (len, error) = match fill(&mut s.payload()[..max]) {
                Ok(n) => (n.min(max), 0),
                Err(e) => (0, -e.code()),
            };
            s.set_reply(&out_header(len, error, unique), len);
        }
        Ok(self.push(&[self.entry(slot, CMD_COMMIT_AND_FETCH)]))
    }

    /// The request in `slot` as the classic transport would have read it: `fuse_in_header`, the
    /// op header, then the payload, and whether the slot is lent. A WRITE is laid out in the
    /// slot itself, in front of its data, and the slot is lent until `unlend`; any other request
    /// is copied into `buf`.
    ///
    /// # Safety
    /// The kernel must have completed the slot's command, and the returned bytes must not be
    /// used after the slot's reply is written (for a lent slot: after `unlend`).
    unsafe fn request<'b>(&self, slot: usize, buf: &'b mut [u8]) -> io::Result<(&'b [u8], bool)> {
        // SAFETY: the kernel completed this slot's command; it is ours until the reply.
        let s = unsafe { &mut *self.slots[slot].get() };
        let hdr = IN_HEADER;
        let len = u32::from_ne_bytes(s.header.in_out[..4].try_into().unwrap()) as usize;
        let opcode = u32::from_ne_bytes(s.header.in_out[4..8].try_into().unwrap());
        let payload = s.header.ent.payload_sz as usize;
        let op = op_header_len(len, payload, s.payload_len, buf.len())?;
        if let Some(start) = in_place_start(opcode, op) {
            *self.lend[slot].lock() = Lend::Lent;
            let (in_out, op_in) = (s.header.in_out, s.header.op_in);
            let bytes = s.bytes();
            bytes[start..start + hdr].copy_from_slice(&in_out[..hdr]);
            bytes[start + hdr..HEADROOM].copy_from_slice(&op_in[..op]);
            let ptr = bytes[start..].as_ptr();
            // SAFETY: `start + len` lies within the slot's words, which live as long as the
            // ring; the caller stops using them before the slot is written again.
            return Ok((unsafe { std::slice::from_raw_parts(ptr, len) }, true));
        }
        buf[..hdr].copy_from_slice(&s.header.in_out[..hdr]);
        buf[hdr..hdr + op].copy_from_slice(&s.header.op_in[..op]);
        buf[hdr + op..len].copy_from_slice(&s.payload()[..payload]);
        Ok((&buf[..len], false))
    }

    /// Ends the loan of `slot` once the filesystem has returned from its request, and writes
    /// the reply it gave meanwhile, if any.
    fn unlend(&self, slot: usize) -> io::Result<()> {
        let held = std::mem::take(&mut *self.lend[slot].lock());
        match held {
            Lend::Held(reply) => self.commit(slot, &[IoSlice::new(&reply)]),
            Lend::No | Lend::Lent => Ok(()),
        }
    }
}

/// Copies a reply (`fuse_out_header`, then its payload, split across `data` in any way) into an
/// entry: the header into `header`, the rest into `payload`. Returns the payload's length. A
/// reply larger than `payload` cannot be delivered: it becomes EIO, with no payload.
fn fill_reply(data: &[IoSlice<'_>], header: &mut [u8; OUT_HEADER], payload: &mut [u8]) -> usize {
    let mut filled = 0usize;
    let mut written = 0usize;
    for part in data {
        let mut rest: &[u8] = part;
        if filled < OUT_HEADER {
            let n = (OUT_HEADER - filled).min(rest.len());
            header[filled..filled + n].copy_from_slice(&rest[..n]);
            filled += n;
            rest = &rest[n..];
        }
        if written + rest.len() > payload.len() {
            header[4..8].copy_from_slice(&(-libc::EIO).to_ne_bytes());
            return 0;
        }
        payload[written..written + rest.len()].copy_from_slice(rest);
        written += rest.len();
    }
    written
}

/// The `fuse_out_header` of a reply to `unique` with `payload` bytes after it and `error` (0,
/// or a negative errno).
fn out_header(payload: usize, error: i32, unique: u64) -> [u8; OUT_HEADER] {
    let mut out = [0u8; OUT_HEADER];
    out[..4].copy_from_slice(&((OUT_HEADER + payload) as u32).to_ne_bytes());
    out[4..8].copy_from_slice(&error.to_ne_bytes());
    out[8..16].copy_from_slice(&unique.to_ne_bytes());
    out
}

/// The reply EIO to the request `unique` (a `fuse_out_header` alone).
fn eio_reply(unique: [u8; 8]) -> [u8; OUT_HEADER] {
    out_header(0, -libc::EIO, u64::from_ne_bytes(unique))
}

/// The length of the op header of a request the kernel put in an entry, from the request's
/// length (`fuse_in_header.len`) and its payload's (`payload_sz`): what is neither the in header
/// nor payload. Refused when that does not fit the entry's op header area, the payload is larger
/// than the entry's (`room`), or the whole request than the buffer it is copied into.
fn op_header_len(len: usize, payload: usize, room: usize, buf_len: usize) -> io::Result<usize> {
    len.checked_sub(IN_HEADER + payload)
        .filter(|&op| op <= HEADER_AREA && payload <= room && len <= buf_len)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "ring entry holds a request of {len} bytes with {payload} of payload; an \
                     entry holds {IN_HEADER} + at most {HEADER_AREA} bytes of headers, {room} of \
                     payload, {buf_len} in all"
                ),
            )
        })
}

/// Where in an entry's words a request with opcode `opcode` and an op header of `op` bytes
/// starts when it is read in place (its headers copied in front of its payload): for a WRITE
/// whose `fuse_in_header` then lands 8-byte aligned. `None`: the request is copied out.
fn in_place_start(opcode: u32, op: usize) -> Option<usize> {
    let start = HEADROOM - IN_HEADER - op;
    (opcode == OP_WRITE && start % 8 == 0).then_some(start)
}

/// The number of CPUs in a kernel CPU list such as `0-3,8-11\n`: one past the highest.
fn cpu_count(list: &str) -> io::Result<usize> {
    let mut n = 0usize;
    for part in list.trim().split(',') {
        let last = part.rsplit('-').next().unwrap_or(part);
        let last: usize = last.parse().map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{POSSIBLE_CPUS}: {list:?} is not a CPU list like 0-3,8"),
            )
        })?;
        n = n.max(last + 1);
    }
    Ok(n)
}

/// How many rings to start per queue, for `queues` queues (one per possible CPU) and
/// `per_queue` asked for: as asked (at least one) up to four CPUs, one past that (one thread
/// per queue is plenty there, and bounds the buffers' memory). Refused for no queue or more
/// than `MAX_QUEUES`.
fn rings_per_queue(queues: usize, per_queue: usize) -> io::Result<usize> {
    if queues == 0 || queues > MAX_QUEUES {
        return Err(io::Error::other(format!(
            "{queues} possible CPUs: FUSE over io_uring needs one queue per CPU, from 1 to \
             {MAX_QUEUES}"
        )));
    }
    Ok(if queues > 4 { 1 } else { per_queue.max(1) })
}

/// The ring threads of a session.
pub(crate) struct Rings {
    rings: Vec<Arc<Ring>>,
    threads: Vec<JoinHandle<io::Result<()>>>,
}

/// The CPUs the kernel may route requests from (`/sys/devices/system/cpu/possible`).
fn possible_cpus() -> io::Result<usize> {
    cpu_count(&std::fs::read_to_string(POSSIBLE_CPUS)?)
}

impl Rings {
    /// Sets up `per_queue` rings per possible CPU with `depth` entries of `payload` bytes each
    /// and starts a thread for each. An error leaves no entry registered, so requests keep
    /// coming over `/dev/fuse`.
    pub(crate) fn start<FS: Filesystem>(
        event_loop: impl Fn(String) -> SessionEventLoop<FS>,
        dev: Arc<DevFuse>,
        per_queue: usize,
        depth: usize,
        payload: usize,
    ) -> io::Result<Rings> {
        let queues = possible_cpus()?;
        let per_queue = rings_per_queue(queues, per_queue)?;
        let mut rings = Vec::new();
        for qid in 0..queues {
            for _ in 0..per_queue {
                rings.push(Arc::new(Ring::new(
                    dev.clone(),
                    qid as u16,
                    depth.max(1),
                    payload,
                )?));
            }
        }
        // Register only once every ring exists: the kernel starts routing requests to the
        // rings when each queue has an entry.
        let mut started = Rings {
            rings: Vec::new(),
            threads: Vec::new(),
        };
        for (i, ring) in rings.into_iter().enumerate() {
            let se = event_loop(format!("fuser-ring-{}-{}", ring.qid, i));
            let buf_len = size_of::<abi::fuse_in_header>() + HEADER_AREA + payload;
            let spawned = ring.register().and_then(|()| {
                let r = ring.clone();
                std::thread::Builder::new()
                    .name(se.thread_name.clone())
                    .spawn(move || ring_loop(&r, &se, buf_len))
            });
            match spawned {
                Ok(t) => {
                    started.rings.push(ring);
                    started.threads.push(t);
                }
                Err(e) => {
                    let served =
                        (0..queues).all(|q| started.rings.iter().any(|r| r.qid as usize == q));
                    if served {
                        // The kernel already routes requests to the rings: keep those running.
                        warn!("a FUSE ring failed to start ({e}); the others serve its queue");
                        continue;
                    }
                    // The kernel routes nothing to the rings until every queue has one, so
                    // requests stay on /dev/fuse; end the threads already started.
                    let _ = started.stop();
                    return Err(e);
                }
            }
        }
        let rings = started;
        debug!(
            "FUSE over io_uring: {queues} queues, {} rings",
            rings.rings.len()
        );
        Ok(rings)
    }

    /// Wakes every ring thread and waits for it (after the connection has ended).
    pub(crate) fn stop(self) -> io::Result<()> {
        for ring in &self.rings {
            let one = 1u64.to_ne_bytes();
            // SAFETY: `one` is 8 readable bytes, and the descriptor is the ring's own eventfd,
            // open as long as `ring` is.
            unsafe { libc::write(ring.wake.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        }
        let mut result = Ok(());
        for t in self.threads {
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => result = result.and(Err(e)),
                Err(_) => result = result.and(Err(io::Error::other("ring thread panicked"))),
            }
        }
        result
    }
}

fn pin_to(cpu: usize) {
    // SAFETY: an all-zero `cpu_set_t` is a valid, empty set; `CPU_SET` ignores a CPU past its
    // end, and `sched_setaffinity` gets a pointer to the set and its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        // A CPU outside this process's allowed set refuses; the thread then runs anywhere.
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set);
    }
}

fn ring_loop<FS: Filesystem>(
    ring: &Arc<Ring>,
    se: &SessionEventLoop<FS>,
    buf_len: usize,
) -> io::Result<()> {
    pin_to(ring.qid as usize);
    SERVING.with(|s| s.set(Arc::as_ptr(ring)));
    // u64 words keep the request aligned for `fuse_in_header`.
    let mut words = vec![0u64; buf_len.div_ceil(8)];
    let mut done = Vec::new();
    loop {
        match ring.ring.submitter().submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return Err(e),
        }
        done.clear();
        // SAFETY: `completion_shared` needs no other completion queue access at once: only this
        // thread reads the completion queue.
        unsafe {
            done.extend(
                ring.ring
                    .completion_shared()
                    .map(|c| (c.user_data(), c.result())),
            )
        };
        for &(slot, res) in &done {
            if slot == WAKE {
                return Ok(());
            }
            let slot = slot as usize;
            if res == -libc::EINTR || res == -libc::EAGAIN {
                // SAFETY: the slot's command ended without a request, so there is no reply that
                // could write it; this thread alone reads it.
                let last = unsafe { (*ring.slots[slot].get()).last };
                ring.push(&[ring.entry(slot, last)])?;
                continue;
            }
            if res < 0 {
                let err = io::Error::from_raw_os_error(-res);
                return match -res {
                    // The connection ended (unmount or abort).
                    libc::ENOTCONN | libc::ECONNABORTED | libc::ECANCELED | libc::ENODEV => Ok(()),
                    _ => {
                        warn!("io_uring FUSE entry failed: {err}");
                        Err(err)
                    }
                };
            }
            let buf = word_bytes(&mut words);
            // SAFETY: the kernel completed the slot's command (`res` >= 0), and the request is
            // used only until `unlend` below, before anything writes the slot again.
            let (request, lent) = match unsafe { ring.request(slot, buf) } {
                Ok(request) => request,
                Err(e) => {
                    // Answer the request so the caller is not left waiting, then go on.
                    warn!("{e}");
                    // SAFETY: the kernel completed the slot's command, so it holds the request
                    // header, and no reply has been written yet.
                    let unique = unsafe { &*ring.slots[slot].get() }.header.in_out[8..16]
                        .try_into()
                        .unwrap();
                    ring.commit(slot, &[IoSlice::new(&eio_reply(unique))])?;
                    continue;
                }
            };
            let reply = ReplySender::Ring(RingReply {
                ring: ring.clone(),
                slot,
            });
            match RequestWithSender::new(reply, request) {
                Some(req) => {
                    if let Ok(Operation::Destroy(_)) = req.request.operation() {
                        req.reply::<ReplyEmpty>().ok();
                        drop(req);
                        if lent {
                            ring.unlend(slot)?;
                        }
                        return Ok(());
                    }
                    req.dispatch(se);
                    // The request (which may point into the slot) is done with before the
                    // reply is written there.
                    drop(req);
                    if lent {
                        ring.unlend(slot)?;
                    }
                }
                None => {
                    if lent {
                        ring.unlend(slot)?;
                    }
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "invalid request on an io_uring entry",
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::IoSlice;
    use std::mem::offset_of;

    use super::*;

    #[test]
    fn the_entry_header_has_the_kernels_layout() {
        // struct fuse_uring_req_header { in_out[128]; op_in[128]; fuse_uring_ent_in_out }
        assert_eq!(offset_of!(Header, in_out), 0);
        assert_eq!(offset_of!(Header, op_in), 128);
        assert_eq!(offset_of!(Header, ent), 256);
        // struct fuse_uring_ent_in_out { u64 flags; u64 commit_id; u32 payload_sz; u32; u64 }
        assert_eq!(size_of::<EntInOut>(), 32);
        assert_eq!(offset_of!(EntInOut, commit_id), 8);
        assert_eq!(offset_of!(EntInOut, payload_sz), 16);
        assert_eq!(size_of::<Header>(), 4096, "one page, page-aligned");
        const { assert!(IN_HEADER + HEADER_AREA <= HEADROOM) };
    }

    #[test]
    fn the_command_area_carries_the_commit_id_and_the_queue() {
        let cmd = cmd_area(7, 0x0102_0304_0506_0708);
        assert_eq!(cmd[..8], [0; 8], "flags");
        assert_eq!(cmd[8..16], 0x0102_0304_0506_0708u64.to_ne_bytes());
        assert_eq!(cmd[16..18], 7u16.to_ne_bytes());
        assert!(cmd[18..].iter().all(|&b| b == 0));
    }

    /// A `fuse_out_header` of `len` bytes in all with `error`, for the request `unique`.
    fn header_bytes(len: u32, error: i32, unique: u64) -> Vec<u8> {
        [
            &len.to_ne_bytes()[..],
            &error.to_ne_bytes(),
            &unique.to_ne_bytes(),
        ]
        .concat()
    }

    #[test]
    fn a_reply_is_split_into_header_and_payload_however_its_parts_fall() {
        let header = header_bytes(16 + 10, 0, 42);
        let body = b"0123456789";
        let whole = [header.clone(), body.to_vec()].concat();
        // One part; the header split across parts; the header and the body in one part.
        let splits: [Vec<&[u8]>; 3] = [
            vec![&whole],
            vec![&whole[..5], &whole[5..20], &whole[20..]],
            vec![&header, &body[..3], &body[3..]],
        ];
        for parts in splits {
            let slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
            let mut h = [0u8; OUT_HEADER];
            let mut payload = [0u8; 32];
            let written = fill_reply(&slices, &mut h, &mut payload);
            assert_eq!(written, 10, "{parts:?}");
            assert_eq!(h[..], header[..]);
            assert_eq!(&payload[..10], body);
        }
    }

    #[test]
    fn a_reply_larger_than_the_entry_becomes_eio_without_payload() {
        let reply = [header_bytes(16 + 9, 0, 5), vec![7u8; 9]].concat();
        let mut h = [0u8; OUT_HEADER];
        let mut payload = [0u8; 8];
        let written = fill_reply(&[IoSlice::new(&reply)], &mut h, &mut payload);
        assert_eq!(written, 0);
        assert_eq!(i32::from_ne_bytes(h[4..8].try_into().unwrap()), -libc::EIO);
        assert_eq!(
            u64::from_ne_bytes(h[8..16].try_into().unwrap()),
            5,
            "unique kept"
        );
        // Exactly the entry's size still fits.
        let reply = [header_bytes(16 + 8, 0, 5), vec![7u8; 8]].concat();
        assert_eq!(fill_reply(&[IoSlice::new(&reply)], &mut h, &mut payload), 8);
    }

    #[test]
    fn a_filled_replys_header_counts_its_payload_and_carries_its_error() {
        assert_eq!(out_header(10, 0, 42)[..], header_bytes(16 + 10, 0, 42)[..]);
        assert_eq!(
            out_header(0, -libc::ENOENT, 7)[..],
            header_bytes(16, -libc::ENOENT, 7)[..]
        );
    }

    #[test]
    fn the_eio_reply_names_its_request() {
        assert_eq!(
            eio_reply(9u64.to_ne_bytes())[..],
            header_bytes(16, -libc::EIO, 9)[..]
        );
    }

    #[test]
    fn the_op_header_is_what_is_neither_in_header_nor_payload() {
        let write_in = size_of::<abi::fuse_write_in>();
        assert_eq!(
            op_header_len(IN_HEADER + write_in + 4096, 4096, 1 << 20, 2 << 20).unwrap(),
            write_in
        );
        assert_eq!(op_header_len(IN_HEADER, 0, 0, IN_HEADER).unwrap(), 0);
        // Shorter than its in header and payload; an op header past its area; a payload past
        // the entry's; a request past the buffer.
        for (len, payload, room, buf) in [
            (IN_HEADER - 1, 0, 64, 4096),
            (IN_HEADER + 10, 20, 64, 4096),
            (IN_HEADER + HEADER_AREA + 1, 0, 64, 4096),
            (IN_HEADER + 8 + 65, 65, 64, 4096),
            (IN_HEADER + 8 + 64, 64, 64, 100),
        ] {
            let e = op_header_len(len, payload, room, buf).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
            assert!(e.to_string().contains(&format!("{len} bytes")), "{e}");
        }
    }

    #[test]
    fn a_write_is_read_in_place_with_its_in_header_aligned() {
        let start = in_place_start(OP_WRITE, size_of::<abi::fuse_write_in>())
            .expect("a WRITE is read in place");
        assert_eq!(start % 8, 0);
        assert_eq!(
            start + IN_HEADER + size_of::<abi::fuse_write_in>(),
            HEADROOM
        );
        assert_eq!(in_place_start(OP_WRITE, 41), None, "unaligned: copied");
        assert_eq!(in_place_start(15, 16), None, "a READ is copied");
    }

    #[test]
    fn a_cpu_list_counts_up_to_its_highest_cpu() {
        assert_eq!(cpu_count("0\n").unwrap(), 1);
        assert_eq!(cpu_count("0-3\n").unwrap(), 4);
        assert_eq!(cpu_count("0-3,8-11").unwrap(), 12);
        assert_eq!(cpu_count("0,2,5").unwrap(), 6);
        for bad in ["", "a-b", "0-3,", "0-x"] {
            let e = cpu_count(bad).unwrap_err();
            assert!(e.to_string().contains(POSSIBLE_CPUS), "{e}");
        }
    }

    #[test]
    fn small_machines_get_the_rings_asked_for_larger_ones_one_per_queue() {
        assert_eq!(rings_per_queue(1, 3).unwrap(), 3);
        assert_eq!(rings_per_queue(4, 2).unwrap(), 2);
        assert_eq!(rings_per_queue(2, 0).unwrap(), 1, "at least one");
        assert_eq!(rings_per_queue(5, 3).unwrap(), 1);
        assert_eq!(rings_per_queue(MAX_QUEUES, 3).unwrap(), 1);
        for queues in [0, MAX_QUEUES + 1] {
            let e = rings_per_queue(queues, 1).unwrap_err();
            assert!(
                e.to_string().contains(&format!("{queues} possible CPUs")),
                "{e}"
            );
        }
    }
}
