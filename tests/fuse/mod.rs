//! Integration tests of the FUSE mount: a real `wardfs serve` mounting under a temp dir, used by
//! real tools (git, cargo, coreutils-style syscalls). Every test unmounts, also on failure.

mod test_checkpoint;
mod test_first_hour;
mod test_forks;
mod test_forks_confined;
mod test_links;
mod test_model;
mod test_mount;
mod test_watchers;
mod test_xattrs;
