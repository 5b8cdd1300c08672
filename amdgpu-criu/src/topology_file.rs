//! A machine's topology as one file: the JSON `topology --json` prints and
//! `topology --export FILE` writes, read back by every command that takes a
//! machine (`map --from FILE`, `check --sysfs FILE`, `demo --topology FILE`,
//! ...), so a topology attached to a bug report or copied from another node
//! is a machine like a sysfs tree.
//!
//! Only the `system` member is read (the whole parsed model, every key of
//! every `properties` file in the kernel's order); a bare model is read too.
//! What the file lacks is refused naming the member, never guessed. This
//! module reads and writes nothing but the file it is given.

use std::fmt;
use std::path::Path;

use amdgpu_topology::model::{Indexed, Link, Node, Properties};
use amdgpu_topology::System;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

/// The largest topology file read (a 64-partition machine's is about 2 MiB).
const MAX_BYTES: u64 = 64 << 20;

/// A `properties` map in the file's order: numbers, or verbatim lists.
struct PropertiesJson(Properties);

impl<'de> Deserialize<'de> for PropertiesJson {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct InOrder;
        impl<'de> Visitor<'de> for InOrder {
            type Value = PropertiesJson;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of property names to numbers (or lists of numbers)")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut properties = Properties::new();
                while let Some(key) = map.next_key::<String>()? {
                    match map.next_value::<serde_json::Value>()? {
                        serde_json::Value::Number(n) => {
                            let n = n.as_u64().ok_or_else(|| {
                                de::Error::custom(format!("{key}: {n} is not an unsigned integer"))
                            })?;
                            properties.set(&key, n);
                        }
                        serde_json::Value::String(list) => properties.set_list(&key, list),
                        other => {
                            return Err(de::Error::custom(format!(
                                "{key}: {other} is neither a number nor a list"
                            )))
                        }
                    }
                }
                Ok(PropertiesJson(properties))
            }
        }
        deserializer.deserialize_map(InOrder)
    }
}

#[derive(Deserialize)]
struct IndexedJson {
    index: u32,
    properties: PropertiesJson,
    used_memory: Option<u64>,
}

#[derive(Deserialize)]
struct LinkJson {
    index: u32,
    properties: PropertiesJson,
}

#[derive(Deserialize)]
struct NodeJson {
    id: u32,
    gpu_id: Option<u32>,
    name: Option<String>,
    properties: PropertiesJson,
    mem_banks: Option<Vec<IndexedJson>>,
    caches: Option<Vec<IndexedJson>>,
    io_links: Option<Vec<LinkJson>>,
    p2p_links: Option<Vec<LinkJson>>,
}

/// What `topology --json` prints: the model under `system`, beside other
/// members this reader does not need.
#[derive(Deserialize)]
struct Wrapped {
    system: SystemJson,
}

#[derive(Deserialize)]
struct SystemJson {
    generation_id: Option<u64>,
    system_properties: Option<PropertiesJson>,
    nodes: Vec<NodeJson>,
}

fn indexed(list: Option<Vec<IndexedJson>>) -> Option<Vec<Indexed>> {
    list.map(|l| {
        l.into_iter()
            .map(|i| Indexed {
                used_memory: i.used_memory,
                ..Indexed::new(i.index, i.properties.0)
            })
            .collect()
    })
}

fn links(list: Option<Vec<LinkJson>>) -> Option<Vec<Link>> {
    list.map(|l| {
        l.into_iter()
            .map(|l| Link {
                index: l.index,
                properties: l.properties.0,
            })
            .collect()
    })
}

impl From<SystemJson> for System {
    fn from(s: SystemJson) -> System {
        System {
            generation_id: s.generation_id,
            system_properties: s.system_properties.map(|p| p.0),
            nodes: s
                .nodes
                .into_iter()
                .map(|n| Node {
                    id: n.id,
                    gpu_id: n.gpu_id,
                    name: n.name,
                    properties: n.properties.0,
                    mem_banks: indexed(n.mem_banks),
                    caches: indexed(n.caches),
                    io_links: links(n.io_links),
                    p2p_links: links(n.p2p_links),
                })
                .collect(),
        }
    }
}

/// Reads the topology file at `path`.
pub fn read(path: &Path) -> Result<System, String> {
    let shown = path.display();
    let len = std::fs::metadata(path)
        .map_err(|e| format!("{shown}: {e}"))?
        .len();
    if len > MAX_BYTES {
        return Err(format!(
            "{shown}: {len} bytes, more than a topology file holds ({MAX_BYTES}); a machine \
             is a sysfs tree (a directory), builtin:NAME or the file `amdgpu-criu topology \
             --export FILE` writes"
        ));
    }
    let text = std::fs::read(path).map_err(|e| format!("{shown}: {e}"))?;
    // Read straight from the text, not through a `Value`, so the properties
    // keep the kernel's order.
    let value: serde_json::Value = serde_json::from_slice(&text).map_err(|e| {
        format!(
            "{shown}: not a topology file ({e}); a machine is a sysfs tree (a directory, \
             `cp -r /sys/class/kfd/kfd/topology DIR`), builtin:NAME or the file \
             `amdgpu-criu topology --export FILE` writes"
        )
    })?;
    let read = if value.get("system").is_some() {
        serde_json::from_slice::<Wrapped>(&text).map(|w| w.system)
    } else {
        serde_json::from_slice::<SystemJson>(&text)
    };
    let system = read.map_err(|e| {
        format!(
            "{shown}: not a topology ({e}); write one with `amdgpu-criu topology --export \
             FILE` (or `--json`)"
        )
    })?;
    let system = System::from(system);
    if system.nodes.is_empty() {
        return Err(format!("{shown}: the topology has no nodes"));
    }
    Ok(system)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_machine_reads_back_equal() {
        for name in amdgpu_topology::builtin_names() {
            let system = amdgpu_topology::builtin(name).unwrap();
            // As `topology --json` writes it: straight from the model.
            let model = serde_json::to_string_pretty(&system).unwrap();
            let json = format!("{{\"source\": \"builtin:{name}\", \"system\": {model}}}");
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("topology.json");
            std::fs::write(&file, json).unwrap();
            assert_eq!(read(&file).unwrap(), system, "{name}");
            // The bare model too.
            std::fs::write(&file, serde_json::to_string(&system).unwrap()).unwrap();
            assert_eq!(read(&file).unwrap(), system, "{name}");
        }
    }

    #[test]
    fn what_is_no_topology_is_refused_saying_what_is() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("x.json");
        std::fs::write(&file, "kernel 6.1").unwrap();
        assert!(read(&file).unwrap_err().contains("not a topology file"));
        std::fs::write(&file, r#"{"system": {"nodes": [{"id": 0}]}}"#).unwrap();
        let e = read(&file).unwrap_err();
        assert!(e.contains("properties"), "{e}");
        std::fs::write(&file, r#"{"system": {"nodes": []}}"#).unwrap();
        assert!(read(&file).unwrap_err().contains("no nodes"));
    }
}
