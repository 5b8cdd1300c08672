//! Writing a [`System`] out as a KFD sysfs tree, the inverse of
//! [`crate::parse`].
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
    fs::create_dir_all(root)?;
    let nodes_dir = root.join("nodes");
    fs::create_dir(&nodes_dir).map_err(|e| {
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
        fs::write(root.join("generation_id"), format!("{generation}\n"))?;
    }
    if let Some(props) = &system.system_properties {
        fs::write(root.join("system_properties"), format_properties(props))?;
    }
    for node in &system.nodes {
        let dir = nodes_dir.join(node.id.to_string());
        fs::create_dir(&dir)?;
        if let Some(gpu_id) = node.gpu_id {
            fs::write(dir.join("gpu_id"), format!("{gpu_id}\n"))?;
        }
        if let Some(name) = &node.name {
            fs::write(dir.join("name"), format!("{name}\n"))?;
        }
        fs::write(dir.join("properties"), format_properties(&node.properties))?;
        if let Some(banks) = &node.mem_banks {
            write_indexed(&dir.join("mem_banks"), banks)?;
        }
        if let Some(caches) = &node.caches {
            write_indexed(&dir.join("caches"), caches)?;
        }
        if let Some(links) = &node.io_links {
            write_links(&dir.join("io_links"), links)?;
        }
        if let Some(links) = &node.p2p_links {
            write_links(&dir.join("p2p_links"), links)?;
        }
    }
    Ok(())
}

fn write_indexed(dir: &Path, entries: &[Indexed]) -> io::Result<()> {
    fs::create_dir(dir)?;
    for entry in entries {
        let sub = dir.join(entry.index.to_string());
        fs::create_dir(&sub)?;
        fs::write(sub.join("properties"), format_properties(&entry.properties))?;
        if let Some(used) = entry.used_memory {
            fs::write(sub.join("used_memory"), format!("{used}\n"))?;
        }
    }
    Ok(())
}

fn write_links(dir: &Path, links: &[Link]) -> io::Result<()> {
    fs::create_dir(dir)?;
    for link in links {
        let sub = dir.join(link.index.to_string());
        fs::create_dir(&sub)?;
        fs::write(sub.join("properties"), format_properties(&link.properties))?;
    }
    Ok(())
}
