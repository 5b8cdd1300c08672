//! The protobuf messages of `criu-amdgpu.proto`, written by hand with prost's
//! derive (no protoc, no build script).
//!
//! Field numbers and types are identical to upstream's proto2 schema, in which
//! every scalar is `required`. Required fields are plain Rust values, always
//! emitted on encode (also when zero, as protobuf-c's reader demands) and in
//! tag order, so our encoding is byte-identical to protobuf-c's. prost does not
//! check presence on decode; [`decode_message`](crate::decode_message) does.
//!
//! Our additions use tags 100 and above and are all optional, so the C
//! plugin's reader skips them and images without them stay valid:
//!
//! | message | tag | field | meaning |
//! |---|---|---|---|
//! | `criu_kfd`, `criu_render_node`, `criu_dmabuf_node` | 100 | `producer` (string) | who wrote the image, [`PRODUCER`] |
//! | same | 101 | `format_version` (uint32) | [`FORMAT_VERSION`] of our additions |
//! | `kfd_bo_entry`, `drm_bo_entry` | 100 | `content_checksum` (fixed64) | [`content_checksum`](crate::content_checksum) of the BO's bytes in its pages file |
//! | `drm_bo_entry` | 101 | `share_handle` (uint32) | the handle naming the BO's buffer across the image set |
//! | `criu_render_node` | 102 | `device` (`kfd_device_entry`) | the node's GPU at checkpoint, see [`CriuRenderNode::device`] |
//! | `criu_kfd`, `criu_render_node`, `criu_dmabuf_node` | 120 | `message_checksum` (fixed64) | XXH3-64 of the message encoded without this field ([`seal`](crate::seal)) |
//! | `criu_kfd`, `criu_render_node` | 130 | `chunk_size` (uint64) | chunk size of the digests ([`chunks`](crate::chunks)) |
//! | `kfd_bo_entry`, `drm_bo_entry` | 130 | `chunk_digests` (bytes) | XXH3-128 per chunk, 16 bytes each |
//! | `kfd_bo_entry` | 131 | `chunk_sources` (bytes) | per chunk: 0 here, 1 elsewhere in the set (dedup), 2 parent chain |
//! | `criu_kfd` | 131 / 132 | `dump_id` / `parent_dump_id` (bytes) | names this dump / the parent it references |
//! | `drm_bo_entry` | 150 | `chunk_sources` (bytes) | as `kfd_bo_entry`'s tag 131 |
//! | `criu_render_node` | 150 / 151 | `dump_id` / `parent_dump_id` (bytes) | as `criu_kfd`'s tags 131 / 132 |
//! | `criu_render_node` | 152 | `referencing_gpu_id` (uint32) | the user gpu_id of an image with chunk references, whose `gpu_id` is 0 (the C plugin refuses it) |
//!
//! Messages serialize with serde under the proto field names; `bytes` fields
//! serialize as `{ "len": n, "hex_prefix": "…" }` (a summary), or inside
//! [`with_every_byte`] as `{ "len": n, "hex": "…" }` with every byte. They
//! deserialize from the same names (unknown fields refused, required ones
//! demanded), every `bytes` field, required or optional, from
//! `{ "hex": "…" }` holding every byte (and `len`, checked when given):
//! what `amdgpu-criu decode` writes and `encode` reads. This module never
//! reads files.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The producer string our images carry in tag 100.
pub const PRODUCER: &str = concat!("amdgpu-criu-rs ", env!("CARGO_PKG_VERSION"));

/// Version of our additions to the format. Version 1: tags 100/101 on the
/// top-level messages and 100 (`content_checksum`, the 8-lane
/// multiply-rotate hash of [`checksum`](crate::checksum)) on BO entries.
/// Version 2: chunk digests (tags 130-132) and `content_checksum` derived
/// from them with XXH3-64 ([`chunks`](crate::chunks)); version-1 images
/// still verify with the version-1 hash.
pub const FORMAT_VERSION: u32 = 2;

/// Allocation flags and GEM domains stored in BO entries.
pub mod flags {
    /// KFD BO in VRAM (`KFD_IOC_ALLOC_MEM_FLAGS_VRAM`).
    pub const KFD_VRAM: u32 = 1 << 0;
    /// KFD BO in GTT (system memory mapped for the GPU).
    pub const KFD_GTT: u32 = 1 << 1;
    /// KFD BO over user memory (contents are dumped by CRIU as process memory).
    pub const KFD_USERPTR: u32 = 1 << 2;
    /// KFD doorbell page(s).
    pub const KFD_DOORBELL: u32 = 1 << 3;
    /// KFD MMIO remap page.
    pub const KFD_MMIO_REMAP: u32 = 1 << 4;
    /// Mask of the memory-type bits.
    pub const KFD_MEM_TYPE_MASK: u32 =
        KFD_VRAM | KFD_GTT | KFD_USERPTR | KFD_DOORBELL | KFD_MMIO_REMAP;
    /// BO handle value meaning "no GEM handle" (`KFD_INVALID_FD`).
    pub const NO_HANDLE: u32 = 0xffff_ffff;
    /// GEM domain: CPU.
    pub const GEM_DOMAIN_CPU: u32 = 0x1;
    /// GEM domain: GTT.
    pub const GEM_DOMAIN_GTT: u32 = 0x2;
    /// GEM domain: VRAM.
    pub const GEM_DOMAIN_VRAM: u32 = 0x4;
}

/// A message that is the payload of one image file.
pub trait ImageMessage: prost::Message + Default + crate::presence::Checked {
    /// The proto message name (`criu_kfd`), used in error paths.
    const PROTO_NAME: &'static str;

    /// The recorded [`seal`](crate::seal) (tag 120), if any.
    fn message_checksum(&self) -> Option<u64>;

    /// Sets or clears the recorded seal (tag 120).
    fn set_message_checksum(&mut self, checksum: Option<u64>);

    /// Whether the message carries our producer marker (`format_version`):
    /// [`write_message`](crate::write_message) seals those.
    fn is_ours(&self) -> bool;
}

/// `dev_iolink`: one valid io link of a topology node.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DevIolink {
    /// Link type (sysfs `type`).
    #[prost(uint32, required, tag = "1")]
    #[serde(rename = "type")]
    pub r#type: u32,
    /// Node id at the far end of the link.
    #[prost(uint32, required, tag = "2")]
    pub node_to_id: u32,
}

/// `kfd_device_entry`: one topology node (GPU or CPU) at checkpoint time.
///
/// CPU entries have only `node_id`, `cpu_cores_count` and `iolinks` set.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KfdDeviceEntry {
    /// Topology node id.
    #[prost(uint32, required, tag = "1")]
    pub node_id: u32,
    /// User-visible GPU id (0 for CPU nodes).
    #[prost(uint32, required, tag = "2")]
    pub gpu_id: u32,
    /// CPU cores (non-zero only for CPU nodes).
    #[prost(uint32, required, tag = "3")]
    pub cpu_cores_count: u32,
    /// SIMD count.
    #[prost(uint32, required, tag = "4")]
    pub simd_count: u32,
    /// Memory bank count.
    #[prost(uint32, required, tag = "5")]
    pub mem_banks_count: u32,
    /// Cache count.
    #[prost(uint32, required, tag = "6")]
    pub caches_count: u32,
    /// Io link count (sysfs).
    #[prost(uint32, required, tag = "7")]
    pub io_links_count: u32,
    /// Max waves per SIMD.
    #[prost(uint32, required, tag = "8")]
    pub max_waves_per_simd: u32,
    /// LDS size in KiB.
    #[prost(uint32, required, tag = "9")]
    pub lds_size_in_kb: u32,
    /// GDS size in KiB (never filled by the C plugin).
    #[prost(uint32, required, tag = "10")]
    pub gds_size_in_kb: u32,
    /// Global wave syncs.
    #[prost(uint32, required, tag = "11")]
    pub num_gws: u32,
    /// Wavefront size.
    #[prost(uint32, required, tag = "12")]
    pub wave_front_size: u32,
    /// Array count.
    #[prost(uint32, required, tag = "13")]
    pub array_count: u32,
    /// SIMD arrays per engine.
    #[prost(uint32, required, tag = "14")]
    pub simd_arrays_per_engine: u32,
    /// CUs per SIMD array.
    #[prost(uint32, required, tag = "15")]
    pub cu_per_simd_array: u32,
    /// SIMDs per CU.
    #[prost(uint32, required, tag = "16")]
    pub simd_per_cu: u32,
    /// Max scratch slots per CU.
    #[prost(uint32, required, tag = "17")]
    pub max_slots_scratch_cu: u32,
    /// PCI vendor id.
    #[prost(uint32, required, tag = "18")]
    pub vendor_id: u32,
    /// PCI device id.
    #[prost(uint32, required, tag = "19")]
    pub device_id: u32,
    /// PCI domain.
    #[prost(uint32, required, tag = "20")]
    pub domain: u32,
    /// DRM render minor.
    #[prost(uint32, required, tag = "21")]
    pub drm_render_minor: u32,
    /// XGMI hive id.
    #[prost(uint64, required, tag = "22")]
    pub hive_id: u64,
    /// SDMA engines.
    #[prost(uint32, required, tag = "23")]
    pub num_sdma_engines: u32,
    /// XGMI SDMA engines.
    #[prost(uint32, required, tag = "24")]
    pub num_sdma_xgmi_engines: u32,
    /// SDMA queues per engine.
    #[prost(uint32, required, tag = "25")]
    pub num_sdma_queues_per_engine: u32,
    /// CP queues.
    #[prost(uint32, required, tag = "26")]
    pub num_cp_queues: u32,
    /// Firmware version.
    #[prost(uint32, required, tag = "27")]
    pub fw_version: u32,
    /// Capability bits.
    #[prost(uint32, required, tag = "28")]
    pub capability: u32,
    /// SDMA firmware version.
    #[prost(uint32, required, tag = "29")]
    pub sdma_fw_version: u32,
    /// Whether VRAM is CPU-visible (0/1).
    #[prost(uint32, required, tag = "30")]
    pub vram_public: u32,
    /// VRAM size in bytes.
    #[prost(uint64, required, tag = "31")]
    pub vram_size: u64,
    /// Valid io links.
    #[prost(message, repeated, tag = "32")]
    pub iolinks: Vec<DevIolink>,
    /// Ours (tag 110): the node's sysfs `location_id` (PCI bus << 8 |
    /// device << 3 | function), so a device map can name the GPU by PCI
    /// address. GPU entries only.
    #[prost(uint32, optional, tag = "110")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location_id: Option<u32>,
    /// Ours (tag 111): the node's sysfs `unique_id`, so a device map can
    /// name the GPU by it. GPU entries whose kernel reports one only.
    #[prost(uint64, optional, tag = "111")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unique_id: Option<u64>,
}

impl KfdDeviceEntry {
    /// Whether the entry describes a GPU (`gpu_id != 0`); otherwise a CPU node.
    pub fn is_gpu(&self) -> bool {
        self.gpu_id != 0
    }
}

/// `kfd_bo_entry`: one KFD buffer object.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KfdBoEntry {
    /// GPU virtual address.
    #[prost(uint64, required, tag = "1")]
    pub addr: u64,
    /// Size in bytes.
    #[prost(uint64, required, tag = "2")]
    pub size: u64,
    /// mmap offset at checkpoint.
    #[prost(uint64, required, tag = "3")]
    pub offset: u64,
    /// `KFD_IOC_ALLOC_MEM_FLAGS_*`, see [`flags`].
    #[prost(uint32, required, tag = "4")]
    pub alloc_flags: u32,
    /// User-visible GPU id.
    #[prost(uint32, required, tag = "5")]
    pub gpu_id: u32,
    /// GEM handle, or [`flags::NO_HANDLE`].
    #[prost(uint32, required, tag = "6")]
    pub handle: u32,
    /// Ours (tag 100): checksum of the BO's bytes in the pages file.
    #[prost(fixed64, optional, tag = "100")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_checksum: Option<u64>,
    /// Ours (tag 130): one XXH3-128 digest per chunk of the BO's bytes, 16
    /// little-endian bytes each ([`chunks`](crate::chunks)).
    #[prost(bytes = "vec", optional, tag = "130")]
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_opt_bytes",
        deserialize_with = "deserialize_opt_bytes"
    )]
    pub chunk_digests: Option<Vec<u8>>,
    /// Ours (tag 131): one [`ChunkSource`](crate::chunks::ChunkSource) byte
    /// per chunk; absent when every chunk is in the BO's place in its pages file.
    #[prost(bytes = "vec", optional, tag = "131")]
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_opt_bytes",
        deserialize_with = "deserialize_opt_bytes"
    )]
    pub chunk_sources: Option<Vec<u8>>,
}

impl KfdBoEntry {
    /// Whether the BO's contents are saved in the GPU's pages file (VRAM or GTT).
    pub fn has_contents(&self) -> bool {
        self.alloc_flags & (flags::KFD_VRAM | flags::KFD_GTT) != 0
    }
}

/// `criu_kfd`: the `amdgpu-kfd-<id>.img` payload.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CriuKfd {
    /// Pid of the checkpointed process.
    #[prost(uint32, required, tag = "1")]
    pub pid: u32,
    /// Number of GPU device entries.
    #[prost(uint32, required, tag = "2")]
    pub num_of_gpus: u32,
    /// Number of CPU device entries.
    #[prost(uint32, required, tag = "3")]
    pub num_of_cpus: u32,
    /// Topology nodes.
    #[prost(message, repeated, tag = "4")]
    pub device_entries: Vec<KfdDeviceEntry>,
    /// Number of BO entries.
    #[prost(uint64, required, tag = "5")]
    pub num_of_bos: u64,
    /// BOs in KFD bucket order.
    #[prost(message, repeated, tag = "6")]
    pub bo_entries: Vec<KfdBoEntry>,
    /// Number of KFD private objects (queues, events, ...).
    #[prost(uint32, required, tag = "7")]
    pub num_of_objects: u32,
    /// Size of `/dev/shm/hsakmt_shared_mem`, 0 if absent.
    #[prost(uint64, required, tag = "8")]
    pub shared_mem_size: u64,
    /// First 4 bytes of the hsakmt shared memory.
    #[prost(uint32, required, tag = "9")]
    pub shared_mem_magic: u32,
    /// KFD private data, opaque.
    #[prost(bytes = "vec", required, tag = "10")]
    #[serde(
        serialize_with = "serialize_bytes",
        deserialize_with = "deserialize_bytes"
    )]
    pub priv_data: Vec<u8>,
    /// Ours (tag 100): producer, [`PRODUCER`].
    #[prost(string, optional, tag = "100")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub producer: Option<String>,
    /// Ours (tag 101): [`FORMAT_VERSION`].
    #[prost(uint32, optional, tag = "101")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format_version: Option<u32>,
    /// Ours (tag 110): the dump host's KFD interface major version
    /// (`AMDKFD_IOC_GET_VERSION`).
    #[prost(uint32, optional, tag = "110")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kfd_major_version: Option<u32>,
    /// Ours (tag 111): the dump host's KFD interface minor version.
    #[prost(uint32, optional, tag = "111")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kfd_minor_version: Option<u32>,
    /// Ours (tag 112): the KFD interface minor version this image needs at
    /// restore: the oldest minor that has every feature the dumped state
    /// uses (see `amdgpu_checkpoint::kfd_version`).
    #[prost(uint32, optional, tag = "112")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kfd_required_minor: Option<u32>,
    /// Ours (tag 120): XXH3-64 of this message's encoding without this
    /// field, see [`seal`](crate::seal). Absent in images of the C plugin
    /// (and of versions before it), whose messages are then not covered.
    #[prost(fixed64, optional, tag = "120")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_checksum: Option<u64>,
    /// Ours (tag 130): the chunk size of the BOs' `chunk_digests`.
    #[prost(uint64, optional, tag = "130")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunk_size: Option<u64>,
    /// Ours (tag 131): 16 bytes naming this dump (one value for every image
    /// of one dump), which a child dump's `parent_dump_id` quotes.
    #[prost(bytes = "vec", optional, tag = "131")]
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_opt_bytes",
        deserialize_with = "deserialize_opt_bytes"
    )]
    pub dump_id: Option<Vec<u8>>,
    /// Ours (tag 132): the `dump_id` of the parent image set whose chunks
    /// this image references (chunk source 2); absent otherwise.
    #[prost(bytes = "vec", optional, tag = "132")]
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_opt_bytes",
        deserialize_with = "deserialize_opt_bytes"
    )]
    pub parent_dump_id: Option<Vec<u8>>,
}

/// `drm_vm_entry`: one GPU VA mapping of a DRM BO.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrmVmEntry {
    /// GPU virtual address.
    #[prost(uint64, required, tag = "1")]
    pub addr: u64,
    /// Mapping size.
    #[prost(uint64, required, tag = "2")]
    pub size: u64,
    /// Offset in the BO.
    #[prost(uint64, required, tag = "3")]
    pub offset: u64,
    /// Mapping flags.
    #[prost(uint64, required, tag = "4")]
    pub flags: u64,
}

/// `drm_bo_entry`: one GEM BO of a render node.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrmBoEntry {
    /// Address of the last VM mapping (0 if none).
    #[prost(uint64, required, tag = "1")]
    pub addr: u64,
    /// Size in bytes.
    #[prost(uint64, required, tag = "2")]
    pub size: u64,
    /// mmap offset at checkpoint.
    #[prost(uint64, required, tag = "3")]
    pub offset: u64,
    /// GEM create flags.
    #[prost(uint64, required, tag = "4")]
    pub alloc_flags: u64,
    /// Alignment.
    #[prost(uint64, required, tag = "5")]
    pub alignment: u64,
    /// `AMDGPU_GEM_DOMAIN_*`, see [`flags`].
    #[prost(uint32, required, tag = "6")]
    pub preferred_domains: u32,
    /// GEM handle.
    #[prost(uint32, required, tag = "7")]
    pub handle: u32,
    /// Whether the BO is imported (0/1).
    #[prost(uint32, required, tag = "8")]
    pub is_import: u32,
    /// Number of VM entries.
    #[prost(uint32, required, tag = "9")]
    pub num_of_vms: u32,
    /// VM mappings.
    #[prost(message, repeated, tag = "10")]
    pub vm_entries: Vec<DrmVmEntry>,
    /// Ours (tag 100): checksum of the BO's bytes in its drm-pages file.
    #[prost(fixed64, optional, tag = "100")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_checksum: Option<u64>,
    /// Ours (tag 101): the handle naming this BO's buffer across the image
    /// set, as KFD BO entries and dma-buf images name it (`handle` is the
    /// GEM handle inside its own file, which an importer's differs from).
    /// Absent in images of the C plugin, which keys imports by `handle`.
    #[prost(uint32, optional, tag = "101")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share_handle: Option<u32>,
    /// Ours (tag 130): one XXH3-128 digest per chunk of the BO's bytes, as
    /// in [`KfdBoEntry::chunk_digests`].
    #[prost(bytes = "vec", optional, tag = "130")]
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_opt_bytes",
        deserialize_with = "deserialize_opt_bytes"
    )]
    pub chunk_digests: Option<Vec<u8>>,
    /// Ours (tag 150): one [`ChunkSource`](crate::chunks::ChunkSource) byte
    /// per chunk, as in [`KfdBoEntry::chunk_sources`]; absent when every
    /// chunk is in the BO's drm-pages file.
    #[prost(bytes = "vec", optional, tag = "150")]
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_opt_bytes",
        deserialize_with = "deserialize_opt_bytes"
    )]
    pub chunk_sources: Option<Vec<u8>>,
}

impl DrmBoEntry {
    /// The key of this BO's buffer in the restore's shared handle table:
    /// [`DrmBoEntry::share_handle`], or the GEM handle for images without it.
    pub fn buffer_key(&self) -> u32 {
        self.share_handle.unwrap_or(self.handle)
    }

    /// Whether restore writes this BO's contents back: a VRAM or GTT BO
    /// with at least one VM mapping (the only ones whose contents the C
    /// plugin saves), or one whose dump saved its contents with a checksum
    /// or chunk digests (this project's dumps save every VRAM and GTT BO: a
    /// buffer the process maps only for the CPU holds data too, and would
    /// come back as zeros).
    pub fn restore_needs_contents(&self) -> bool {
        self.preferred_domains & (flags::GEM_DOMAIN_VRAM | flags::GEM_DOMAIN_GTT) != 0
            && (!self.vm_entries.is_empty()
                || self.content_checksum.is_some()
                || self.chunk_digests.as_ref().is_some_and(|d| !d.is_empty()))
    }
}

/// `criu_render_node`: the `amdgpu-renderD-<id>.img` payload.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CriuRenderNode {
    /// User-visible GPU id, as the KFD image of a process using the GPU
    /// names it; 0 in a render-only image (see [`CriuRenderNode::device`]).
    #[prost(uint32, required, tag = "1")]
    pub gpu_id: u32,
    /// CRIU ext-file id.
    #[prost(uint32, required, tag = "2")]
    pub id: u32,
    /// Render minor at checkpoint.
    #[prost(uint32, required, tag = "3")]
    pub drm_render_minor: u32,
    /// Number of BO entries.
    #[prost(uint64, required, tag = "4")]
    pub num_of_bos: u64,
    /// BOs in GEM_LIST_HANDLES order; the index names the drm-pages file.
    #[prost(message, repeated, tag = "5")]
    pub bo_entries: Vec<DrmBoEntry>,
    /// Ours (tag 100): producer, [`PRODUCER`].
    #[prost(string, optional, tag = "100")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub producer: Option<String>,
    /// Ours (tag 101): [`FORMAT_VERSION`].
    #[prost(uint32, optional, tag = "101")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format_version: Option<u32>,
    /// Ours (tag 102): the node's GPU as the checkpointing machine's
    /// topology described it: every property and valid io link a KFD image
    /// stores for a GPU node, with `node_id` and `gpu_id` the machine's own
    /// (sysfs) ids. A restore that has no KFD mapping for the node (its
    /// process never opened `/dev/kfd`) picks a compatible local GPU by it.
    /// Absent in images of the C plugin.
    ///
    /// A render-only image (no dumped KFD process used the GPU) has
    /// [`CriuRenderNode::gpu_id`] 0: the C plugin's reader finds no GPU for
    /// user id 0 and refuses the file (`-ENODEV`) instead of mapping it
    /// through another process's ids.
    #[prost(message, optional, tag = "102")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<KfdDeviceEntry>,
    /// Ours (tag 103): when [`CriuRenderNode::gpu_id`] names the GPU by a
    /// KFD process's user id, the pids of the dumped KFD processes that use
    /// the GPU (each as its KFD image records it: the pid in the process's
    /// own pid namespace). The dump cannot tell which task a render fd
    /// belongs to; a restored task whose pid is not among these has no KFD
    /// file for the node (a process without `/dev/kfd` sharing the GPU) and
    /// is restored render-only, without listing the image set (which a
    /// stream cannot). Empty in render-only images and in images of the C
    /// plugin.
    #[prost(uint32, repeated, packed = "false", tag = "103")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kfd_pids: Vec<u32>,
    /// Ours (tag 120): XXH3-64 of this message's encoding without this
    /// field, see [`seal`](crate::seal). Absent in images of the C plugin
    /// (and of versions before it), whose messages are then not covered.
    #[prost(fixed64, optional, tag = "120")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_checksum: Option<u64>,
    /// Ours (tag 130): the chunk size of the BOs' `chunk_digests`.
    #[prost(uint64, optional, tag = "130")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunk_size: Option<u64>,
    /// Ours (tag 150): the dump's `dump_id`, as [`CriuKfd::dump_id`] (one
    /// value for every image of one dump).
    #[prost(bytes = "vec", optional, tag = "150")]
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_opt_bytes",
        deserialize_with = "deserialize_opt_bytes"
    )]
    pub dump_id: Option<Vec<u8>>,
    /// Ours (tag 151): the `dump_id` of the parent image set whose chunks
    /// this image references (chunk source 2); absent otherwise.
    #[prost(bytes = "vec", optional, tag = "151")]
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_opt_bytes",
        deserialize_with = "deserialize_opt_bytes"
    )]
    pub parent_dump_id: Option<Vec<u8>>,
    /// Ours (tag 152): the user gpu_id of an image whose BOs reference
    /// chunks stored elsewhere (`chunk_sources`); its
    /// [`gpu_id`](CriuRenderNode::gpu_id) is then 0, so the C plugin, which
    /// ignores the references (and whose DRM content restore does not check
    /// a drm-pages file's length), finds no GPU for it and refuses the file
    /// (`-ENODEV`) instead of restoring zeros. Readers of this crate take
    /// the gpu_id from here ([`ValidatedRenderNode`](crate::ValidatedRenderNode)).
    #[prost(uint32, optional, tag = "152")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub referencing_gpu_id: Option<u32>,
}

impl CriuRenderNode {
    /// Whether no dumped KFD process used the node's GPU: `gpu_id` is 0 and
    /// the GPU is described by [`CriuRenderNode::device`] alone.
    pub fn is_render_only(&self) -> bool {
        self.gpu_id == 0
    }
}

/// `criu_dmabuf_node`: the `amdgpu-dmabuf_<id>.img` payload.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CriuDmabufNode {
    /// GEM handle of the BO the dma-buf exports.
    #[prost(uint32, required, tag = "1")]
    pub gem_handle: u32,
    /// Ours (tag 100): producer, [`PRODUCER`].
    #[prost(string, optional, tag = "100")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub producer: Option<String>,
    /// Ours (tag 101): [`FORMAT_VERSION`].
    #[prost(uint32, optional, tag = "101")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format_version: Option<u32>,
    /// Ours (tag 120): XXH3-64 of this message's encoding without this
    /// field, see [`seal`](crate::seal). Absent in images of the C plugin
    /// (and of versions before it), whose messages are then not covered.
    #[prost(fixed64, optional, tag = "120")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_checksum: Option<u64>,
}

macro_rules! image_message {
    ($($ty:ident => $name:literal),* $(,)?) => {$(
        impl ImageMessage for $ty {
            const PROTO_NAME: &'static str = $name;
            fn message_checksum(&self) -> Option<u64> {
                self.message_checksum
            }
            fn set_message_checksum(&mut self, checksum: Option<u64>) {
                self.message_checksum = checksum;
            }
            fn is_ours(&self) -> bool {
                self.format_version.is_some()
            }
        }
        impl $ty {
            /// Sets our producer marker (tags 100 and 101) to this crate's values.
            pub fn mark_producer(&mut self) {
                self.producer = Some(PRODUCER.to_owned());
                self.format_version = Some(FORMAT_VERSION);
            }
        }
    )*};
}

image_message!(CriuKfd => "criu_kfd", CriuRenderNode => "criu_render_node", CriuDmabufNode => "criu_dmabuf_node");

#[derive(Serialize)]
struct BytesSummary<'a> {
    len: usize,
    hex_prefix: &'a str,
}

#[derive(Serialize)]
struct BytesEvery<'a> {
    len: usize,
    hex: &'a str,
}

/// How many leading bytes of a `bytes` field serde output shows.
const HEX_PREFIX_BYTES: usize = 16;

thread_local! {
    /// Set inside [`with_every_byte`] on this thread.
    static EVERY_BYTE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `serialize` with every `bytes` field of every message written in
/// full (`{ "len": n, "hex": "…" }`, what deserializing reads back) instead
/// of summarised: the form of `amdgpu-criu decode`, whose output `encode`
/// turns back into the same bytes. Only this thread is affected, and only
/// until `serialize` returns (or unwinds).
pub fn with_every_byte<T>(serialize: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            EVERY_BYTE.with(|every| every.set(self.0));
        }
    }
    let _restore = Restore(EVERY_BYTE.with(|every| every.replace(true)));
    serialize()
}

fn serialize_opt_bytes<S: Serializer>(bytes: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
    match bytes {
        Some(b) => serialize_bytes(b, s),
        None => s.serialize_none(),
    }
}

fn serialize_bytes<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    if EVERY_BYTE.with(std::cell::Cell::get) {
        return BytesEvery {
            len: bytes.len(),
            hex: &full_hex(bytes),
        }
        .serialize(s);
    }
    let mut hex = String::with_capacity(HEX_PREFIX_BYTES * 2);
    for b in bytes.iter().take(HEX_PREFIX_BYTES) {
        hex.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        hex.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
    }
    BytesSummary {
        len: bytes.len(),
        hex_prefix: &hex,
    }
    .serialize(s)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BytesFull {
    #[serde(default)]
    len: Option<usize>,
    #[serde(default)]
    hex: Option<String>,
    #[serde(default)]
    hex_prefix: Option<String>,
}

fn deserialize_opt_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
    Option::<BytesFull>::deserialize(d)?
        .map(bytes_of::<D::Error>)
        .transpose()
}

fn deserialize_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    bytes_of(BytesFull::deserialize(d)?)
}

/// The bytes a `{ "hex": … }` object holds.
fn bytes_of<E: serde::de::Error>(b: BytesFull) -> Result<Vec<u8>, E> {
    let Some(hex) = b.hex else {
        return Err(E::custom(if b.hex_prefix.is_some() {
            "only a hex_prefix is given (the summary `show` prints); `amdgpu-criu decode` \
             writes every byte as \"hex\""
        } else {
            "a bytes field needs \"hex\" with every byte"
        }));
    };
    if hex.len() % 2 != 0 {
        return Err(E::custom("hex has an odd number of digits"));
    }
    let digit = |c: u8| -> Result<u8, E> {
        match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            b'A'..=b'F' => Ok(c - b'A' + 10),
            _ => Err(E::custom(format!(
                "hex holds {:?}, not a hex digit",
                char::from(c)
            ))),
        }
    };
    let bytes = hex
        .as_bytes()
        .chunks(2)
        .map(|pair| Ok((digit(pair[0])? << 4) | digit(pair[1])?))
        .collect::<Result<Vec<u8>, E>>()?;
    if let Some(len) = b.len.filter(|&len| len != bytes.len()) {
        return Err(E::custom(format!(
            "len is {len} but hex holds {} bytes",
            bytes.len()
        )));
    }
    Ok(bytes)
}

/// Every byte of a `bytes` field as lowercase hex (what `decode` writes
/// beside `len`).
pub fn full_hex(bytes: &[u8]) -> String {
    let mut hex = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        hex.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        hex.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
    }
    hex
}

/// The required fields and sub-messages of each message, for
/// [`presence`](crate::presence)'s check on the wire bytes.
macro_rules! schema {
    ($static:ident, $ty:ty, $name:literal, [$($tag:literal => $field:literal),* $(,)?], [$($ctag:literal => $cfield:literal : $cschema:ident),* $(,)?]) => {
        static $static: crate::presence::Schema = crate::presence::Schema {
            name: $name,
            required: &[$(($tag, $field)),*],
            children: &[$(($ctag, $cfield, &$cschema)),*],
        };
        impl crate::presence::Checked for $ty {
            const SCHEMA: &'static crate::presence::Schema = &$static;
        }
    };
}

schema!(DEV_IOLINK, DevIolink, "dev_iolink", [1 => "type", 2 => "node_to_id"], []);
schema!(KFD_DEVICE_ENTRY, KfdDeviceEntry, "kfd_device_entry", [
    1 => "node_id", 2 => "gpu_id", 3 => "cpu_cores_count", 4 => "simd_count",
    5 => "mem_banks_count", 6 => "caches_count", 7 => "io_links_count",
    8 => "max_waves_per_simd", 9 => "lds_size_in_kb", 10 => "gds_size_in_kb",
    11 => "num_gws", 12 => "wave_front_size", 13 => "array_count",
    14 => "simd_arrays_per_engine", 15 => "cu_per_simd_array", 16 => "simd_per_cu",
    17 => "max_slots_scratch_cu", 18 => "vendor_id", 19 => "device_id", 20 => "domain",
    21 => "drm_render_minor", 22 => "hive_id", 23 => "num_sdma_engines",
    24 => "num_sdma_xgmi_engines", 25 => "num_sdma_queues_per_engine", 26 => "num_cp_queues",
    27 => "fw_version", 28 => "capability", 29 => "sdma_fw_version", 30 => "vram_public",
    31 => "vram_size",
], [32 => "iolinks": DEV_IOLINK]);
schema!(KFD_BO_ENTRY, KfdBoEntry, "kfd_bo_entry", [
    1 => "addr", 2 => "size", 3 => "offset", 4 => "alloc_flags", 5 => "gpu_id", 6 => "handle",
], []);
schema!(CRIU_KFD, CriuKfd, "criu_kfd", [
    1 => "pid", 2 => "num_of_gpus", 3 => "num_of_cpus", 5 => "num_of_bos",
    7 => "num_of_objects", 8 => "shared_mem_size", 9 => "shared_mem_magic", 10 => "priv_data",
], [4 => "device_entries": KFD_DEVICE_ENTRY, 6 => "bo_entries": KFD_BO_ENTRY]);
schema!(DRM_VM_ENTRY, DrmVmEntry, "drm_vm_entry", [1 => "addr", 2 => "size", 3 => "offset", 4 => "flags"], []);
schema!(DRM_BO_ENTRY, DrmBoEntry, "drm_bo_entry", [
    1 => "addr", 2 => "size", 3 => "offset", 4 => "alloc_flags", 5 => "alignment",
    6 => "preferred_domains", 7 => "handle", 8 => "is_import", 9 => "num_of_vms",
], [10 => "vm_entries": DRM_VM_ENTRY]);
schema!(CRIU_RENDER_NODE, CriuRenderNode, "criu_render_node", [
    1 => "gpu_id", 2 => "id", 3 => "drm_render_minor", 4 => "num_of_bos",
], [5 => "bo_entries": DRM_BO_ENTRY, 102 => "device": KFD_DEVICE_ENTRY]);
schema!(CRIU_DMABUF_NODE, CriuDmabufNode, "criu_dmabuf_node", [1 => "gem_handle"], []);
