//! The reference model of a zone's tree that two tests check wardfs against: the core's unit test
//! (src/core/model_tests.rs, the core's calls on real zones) and the mount's integration test
//! (tests/fuse/test_model.rs, the same operations through the mount and the socket API).
//!
//! A plain map from relative path to node, with the answer every operation must give. The core's
//! rules are one function each, so the model is one; only the interfaces differ (the API's write
//! and move create missing parents, the mount's do not), so the model takes the interface as an
//! input.
//!
//! Each test includes this file by path (`#[path = …] mod fs_model;`) and supplies `EntryKind`
//! and `ErrorCode` from its own crate (`crate::core` or `wardfs::core`) in the including module;
//! it is therefore not a module of `support`. Each test keeps its own generator of operations
//! (their mixes differ) and its own way of running them.

use std::collections::BTreeMap;
use std::path::Path;

use super::{EntryKind, ErrorCode};

/// The paths operations choose from, relative to the zone root: deep enough for parents that
/// are missing, files in the way and moves into a subtree.
pub const PATHS: &[&str] = &["a", "b", "d", "d/a", "d/b", "d/e", "d/e/f"];

/// Which interface an operation goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// Plain system calls on the mount: no parent is created.
    #[allow(dead_code)] // the core's test runs every operation as the API does
    Mount,
    /// The socket API, which calls the core as it is: writes and moves create parents.
    Api,
}

/// An operation on the paths of [`PATHS`], by index.
#[derive(Debug, Clone)]
pub enum Op {
    Write(usize, String),
    Read(usize),
    /// Exact-string edit of `old` to `new`, every occurrence when the flag is set.
    Edit(usize, &'static str, &'static str, bool),
    /// Delete, recursively when the flag is set.
    Delete(usize, bool),
    /// Make a directory, its parents too when the flag is set.
    Mkdir(usize, bool),
    /// Move the first path to the second, replacing what is there when the flag is set.
    Move(usize, usize, bool),
    /// List a directory, the zone root for `None`.
    List(Option<usize>),
    #[allow(dead_code)] // the mount's test does not generate it
    Exists(usize),
}

impl Op {
    /// Whether this is a move of a path onto itself or into its own subtree.
    pub fn moves_into_itself(&self) -> bool {
        match self {
            Op::Move(a, b, _) => {
                let (src, dst) = (PATHS[*a], PATHS[*b]);
                dst == src || dst.starts_with(&format!("{src}/"))
            }
            _ => false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    File(String),
    Dir,
}

/// What an operation observably returned.
#[derive(Debug, PartialEq, Eq)]
pub enum Seen {
    Done,
    Text(String),
    /// A directory's entries, sorted by name.
    Listing(Vec<(String, EntryKind)>),
    Exists(Option<EntryKind>),
}

pub type Outcome = Result<Seen, ErrorCode>;

/// The reference model: a map from relative path to node; the zone root is implicit.
#[derive(Debug, Default, Clone)]
pub struct Model {
    pub tree: BTreeMap<String, Node>,
}

/// The ancestors of a relative path, outermost first, the zone root left out.
fn ancestors(p: &str) -> Vec<String> {
    let parts: Vec<&str> = p.split('/').collect();
    (1..parts.len()).map(|i| parts[..i].join("/")).collect()
}

fn kind(n: &Node) -> EntryKind {
    match n {
        Node::File(_) => EntryKind::File,
        Node::Dir => EntryKind::Dir,
    }
}

impl Model {
    /// Applies `op` as it goes through `via` and answers what it must return.
    pub fn apply(&mut self, via: Via, op: &Op) -> Outcome {
        match op {
            Op::Write(i, c) => self.write(via, PATHS[*i], c),
            Op::Read(i) => self.read(PATHS[*i]),
            Op::Edit(i, old, new, all) => self.edit(PATHS[*i], old, new, *all),
            Op::Delete(i, recursive) => self.delete(PATHS[*i], *recursive),
            Op::Mkdir(i, parents) => self.mkdir(PATHS[*i], *parents),
            Op::Move(..) if op.moves_into_itself() => Err(ErrorCode::InvalidArgument),
            Op::Move(a, b, overwrite) => self.move_to(via, PATHS[*a], PATHS[*b], *overwrite),
            Op::List(i) => self.list(i.map(|i| PATHS[i]).unwrap_or("")),
            Op::Exists(i) => {
                let p = PATHS[*i];
                Ok(Seen::Exists(
                    self.walk(p).ok().and_then(|_| self.tree.get(p).map(kind)),
                ))
            }
        }
    }

    fn write(&mut self, via: Via, p: &str, content: &str) -> Outcome {
        match via {
            Via::Api => self.make_parents(p)?,
            Via::Mount => self.walk(p)?,
        }
        if let Some(Node::Dir) = self.tree.get(p) {
            return Err(ErrorCode::IsDir);
        }
        self.tree.insert(p.into(), Node::File(content.into()));
        Ok(Seen::Done)
    }

    fn read(&self, p: &str) -> Outcome {
        self.walk(p)?;
        match self.tree.get(p) {
            None => Err(ErrorCode::NotFound),
            Some(Node::Dir) => Err(ErrorCode::IsDir),
            Some(Node::File(c)) => Ok(Seen::Text(c.clone())),
        }
    }

    fn edit(&mut self, p: &str, old: &str, new: &str, all: bool) -> Outcome {
        let Seen::Text(c) = self.read(p)? else {
            unreachable!("a read answers text")
        };
        let n = c.matches(old).count();
        if n == 0 {
            return Err(ErrorCode::NoMatch);
        }
        if n > 1 && !all {
            return Err(ErrorCode::NotUnique);
        }
        let updated = if all {
            c.replace(old, new)
        } else {
            c.replacen(old, new, 1)
        };
        self.tree.insert(p.into(), Node::File(updated));
        Ok(Seen::Done)
    }

    fn delete(&mut self, p: &str, recursive: bool) -> Outcome {
        self.walk(p)?;
        match self.tree.get(p) {
            None => Err(ErrorCode::NotFound),
            Some(Node::Dir) if !recursive && !self.children(p).is_empty() => {
                Err(ErrorCode::NotEmpty)
            }
            Some(_) => {
                self.take_subtree(p);
                Ok(Seen::Done)
            }
        }
    }

    fn mkdir(&mut self, p: &str, parents: bool) -> Outcome {
        if parents {
            if self.walk(p).is_ok() {
                match self.tree.get(p) {
                    Some(Node::Dir) => return Ok(Seen::Done),
                    Some(Node::File(_)) => return Err(ErrorCode::Exists),
                    None => {}
                }
            }
            self.make_parents(p)?;
        } else {
            self.walk(p)?;
            if self.tree.contains_key(p) {
                return Err(ErrorCode::Exists);
            }
        }
        self.tree.insert(p.into(), Node::Dir);
        Ok(Seen::Done)
    }

    /// Moves `src` to `dst`, neither of them inside the other.
    fn move_to(&mut self, via: Via, src: &str, dst: &str, overwrite: bool) -> Outcome {
        self.walk(src)?;
        if via == Via::Mount {
            self.walk(dst)?;
        }
        let Some(src_node) = self.tree.get(src).cloned() else {
            return Err(ErrorCode::NotFound);
        };
        if via == Via::Api {
            self.make_parents(dst)?;
        }
        if let Some(dst_node) = self.tree.get(dst) {
            if !overwrite || src.starts_with(&format!("{dst}/")) {
                return Err(ErrorCode::Exists);
            }
            match (&src_node, dst_node) {
                (Node::File(_), Node::Dir) => return Err(ErrorCode::IsDir),
                (Node::Dir, Node::File(_)) => return Err(ErrorCode::NotDir),
                (Node::Dir, Node::Dir) if !self.children(dst).is_empty() => {
                    return Err(ErrorCode::Exists)
                }
                _ => {}
            }
            self.take_subtree(dst);
        }
        for (k, n) in self.take_subtree(src) {
            self.tree.insert(format!("{dst}{}", &k[src.len()..]), n);
        }
        Ok(Seen::Done)
    }

    /// Lists `p`, the zone root when empty.
    fn list(&self, p: &str) -> Outcome {
        if !p.is_empty() {
            self.walk(p)?;
            match self.tree.get(p) {
                None => return Err(ErrorCode::NotFound),
                Some(Node::File(_)) => return Err(ErrorCode::NotDir),
                Some(Node::Dir) => {}
            }
        }
        Ok(Seen::Listing(self.children(p)))
    }

    /// Resolves the ancestors of `p` as the kernel does: first missing → NOT_FOUND, first file →
    /// NOT_DIR.
    fn walk(&self, p: &str) -> Result<(), ErrorCode> {
        for a in ancestors(p) {
            match self.tree.get(&a) {
                None => return Err(ErrorCode::NotFound),
                Some(Node::File(_)) => return Err(ErrorCode::NotDir),
                Some(Node::Dir) => {}
            }
        }
        Ok(())
    }

    /// Like `mkdir -p` of the ancestors: a file in the way is NOT_DIR; missing ones are created.
    fn make_parents(&mut self, p: &str) -> Result<(), ErrorCode> {
        let anc = ancestors(p);
        for a in &anc {
            match self.tree.get(a) {
                Some(Node::File(_)) => return Err(ErrorCode::NotDir),
                None => break,
                Some(Node::Dir) => {}
            }
        }
        for a in anc {
            self.tree.entry(a).or_insert(Node::Dir);
        }
        Ok(())
    }

    /// The entries directly in `p` (the zone root when empty), sorted by name.
    fn children(&self, p: &str) -> Vec<(String, EntryKind)> {
        let prefix = if p.is_empty() {
            String::new()
        } else {
            format!("{p}/")
        };
        self.tree
            .iter()
            .filter(|(k, _)| {
                k.len() > prefix.len() && k.starts_with(&prefix) && !k[prefix.len()..].contains('/')
            })
            .map(|(k, n)| (k[prefix.len()..].to_string(), kind(n)))
            .collect()
    }

    /// Removes `p` and everything beneath it, and answers what was removed.
    fn take_subtree(&mut self, p: &str) -> BTreeMap<String, Node> {
        let prefix = format!("{p}/");
        let keys: Vec<String> = self
            .tree
            .keys()
            .filter(|k| *k == p || k.starts_with(&prefix))
            .cloned()
            .collect();
        keys.into_iter()
            .map(|k| {
                let n = self.tree.remove(&k).expect("listed");
                (k, n)
            })
            .collect()
    }
}

/// Reads the tree below `root` on disk (a zone's directory, or the mount) in the model's shape.
pub fn disk_tree(root: &Path) -> BTreeMap<String, Node> {
    let mut out = BTreeMap::new();
    let mut stack = vec![String::new()];
    while let Some(rel) = stack.pop() {
        for e in std::fs::read_dir(root.join(&rel)).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            let r = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            if e.file_type().unwrap().is_dir() {
                stack.push(r.clone());
                out.insert(r, Node::Dir);
            } else {
                let content = std::fs::read_to_string(root.join(&r)).unwrap();
                out.insert(r, Node::File(content));
            }
        }
    }
    out
}
