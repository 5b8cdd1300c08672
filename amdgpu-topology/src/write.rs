//! Writing a [`System`] out as a KFD sysfs tree, the inverse of
//! [`crate::parse()`].
//!
//! Files are written as the kernel prints them: `key value\n` lines in model
//! order, single-value files with a trailing newline. Only what the model
//! holds is written (an absent `gpu_id` stays absent), so
//! `parse(write(m)) == m` for every model the parser can produce. This module
//! writes only below the root it is given and refuses to write over an
//! existing tree.

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::Path;

use crate::model::{Indexed, Link, Properties, System};
use crate::parse::RealFs;

/// The file system operations the writer needs: [`RealFs`] writes files,
/// [`crate::memfs::MemoryFs`] keeps them in memory.
pub trait SysfsWriter {
    /// Creates `path` and its missing parents; fine if it exists.
    fn create_dir_all(&mut self, path: &Path) -> io::Result<()>;
    /// Creates directory `path`; `AlreadyExists` if it exists.
    fn create_dir(&mut self, path: &Path) -> io::Result<()>;
    /// Creates or replaces file `path` with `contents`.
    fn write_file(&mut self, path: &Path, contents: &[u8]) -> io::Result<()>;
}

impl SysfsWriter for RealFs {
    fn create_dir_all(&mut self, path: &Path) -> io::Result<()> {
        fs::create_dir_all(path)
    }
    fn create_dir(&mut self, path: &Path) -> io::Result<()> {
        fs::create_dir(path)
    }
    fn write_file(&mut self, path: &Path, contents: &[u8]) -> io::Result<()> {
        fs::write(path, contents)
    }
}

/// The text of a `properties` file: one `key value` line per entry.
pub fn format_properties(properties: &Properties) -> String {
    let mut out = String::new();
    for (key, value) in properties.entries() {
        // Writing to a String cannot fail.
        let _ = writeln!(out, "{key} {value}");
    }
    out
}

/// Writes `system` as a topology tree under `root` (created if needed):
/// `generation_id`, `system_properties` and `nodes/N/...` for what the model
/// holds. Fails with `AlreadyExists` when `root/nodes` exists, so two trees
/// are never mixed.
pub fn write(system: &System, root: &Path) -> io::Result<()> {
    write_with(&mut RealFs, system, root)
}

/// [`write()`] through `out`.
pub fn write_with(out: &mut impl SysfsWriter, system: &System, root: &Path) -> io::Result<()> {
    out.create_dir_all(root)?;
    let nodes_dir = root.join("nodes");
    out.create_dir(&nodes_dir).map_err(|e| {
        if e.kind() == io::ErrorKind::AlreadyExists {
            io::Error::new(
                e.kind(),
                format!(
                    "{} already exists: write into an empty directory",
                    nodes_dir.display()
                ),
            )
        } else {
            e
        }
    })?;
    if let Some(generation) = system.generation_id {
        out.write_file(
            &root.join("generation_id"),
            format!("{generation}\n").as_bytes(),
        )?;
    }
    if let Some(props) = &system.system_properties {
        out.write_file(
            &root.join("system_properties"),
            format_properties(props).as_bytes(),
        )?;
    }
    for node in &system.nodes {
        let dir = nodes_dir.join(node.id.to_string());
        out.create_dir(&dir)?;
        if let Some(gpu_id) = node.gpu_id {
            out.write_file(&dir.join("gpu_id"), format!("{gpu_id}\n").as_bytes())?;
        }
        if let Some(name) = &node.name {
            out.write_file(&dir.join("name"), format!("{name}\n").as_bytes())?;
        }
        out.write_file(
            &dir.join("properties"),
            format_properties(&node.properties).as_bytes(),
        )?;
        if let Some(banks) = &node.mem_banks {
            write_indexed(out, &dir.join("mem_banks"), banks)?;
        }
        if let Some(caches) = &node.caches {
            write_indexed(out, &dir.join("caches"), caches)?;
        }
        if let Some(links) = &node.io_links {
            write_links(out, &dir.join("io_links"), links)?;
        }
        if let Some(links) = &node.p2p_links {
            write_links(out, &dir.join("p2p_links"), links)?;
        }
    }
    Ok(())
}

fn write_indexed(out: &mut impl SysfsWriter, dir: &Path, entries: &[Indexed]) -> io::Result<()> {
    out.create_dir(dir)?;
    for entry in entries {
        let sub = dir.join(entry.index.to_string());
        out.create_dir(&sub)?;
        out.write_file(
            &sub.join("properties"),
            format_properties(&entry.properties).as_bytes(),
        )?;
        if let Some(used) = entry.used_memory {
            out.write_file(&sub.join("used_memory"), format!("{used}\n").as_bytes())?;
        }
    }
    Ok(())
}

fn write_links(out: &mut impl SysfsWriter, dir: &Path, links: &[Link]) -> io::Result<()> {
    out.create_dir(dir)?;
    for link in links {
        let sub = dir.join(link.index.to_string());
        out.create_dir(&sub)?;
        out.write_file(
            &sub.join("properties"),
            format_properties(&link.properties).as_bytes(),
        )?;
    }
    Ok(())
}
