//! Check functions shared by the fuzz targets (in `fuzz/`) and by the test
//! that replays the fuzz corpus on stable Rust, plus a builder of sample image
//! sets for tests, benchmarks and the corpus.
//!
//! Each `check_*` function feeds untrusted bytes to a decoder and asserts the
//! properties a decoder must have: it returns (never panics) and whatever it
//! accepts survives encode → decode unchanged. A failed assertion is a bug
//! found. Not part of the supported API.

use std::io::Cursor;

use crate::framing::{read_message, write_message, ReadLimits};
use crate::messages::{flags, DevIolink, DrmBoEntry, DrmVmEntry, KfdDeviceEntry};
use crate::pages::{PagesBo, PagesLayout};
use crate::store::{ImageStore, ImageWriter, MemStore};
use crate::{
    verify_set, CriuDmabufNode, CriuKfd, CriuRenderNode, Error, ImageMessage, ImageName,
    KfdBoEntry, ValidatedKfd, ValidatedRenderNode, PAGE_SIZE,
};

/// Limits for fuzzing: small, so huge headers are rejected fast.
const LIMITS: ReadLimits = ReadLimits {
    max_message_len: 1 << 20,
};

fn roundtrip<M: ImageMessage + PartialEq + std::fmt::Debug>(file: &str, data: &[u8]) -> Option<M> {
    let first: M = read_message(Cursor::new(data), file, LIMITS).ok()?;
    let mut framed = Vec::new();
    let len = write_message(&mut framed, file, &first).expect("writing to a Vec cannot fail");
    assert_eq!(framed.len() as u64, len + 8);
    let second: M = read_message(
        Cursor::new(&framed),
        file,
        ReadLimits {
            max_message_len: u64::MAX,
        },
    )
    .expect("our own encoding must decode");
    assert_eq!(
        first, second,
        "decode → encode → decode changed the message"
    );
    // Writing seals messages with our producer marker, and only those.
    let sealed = matches!(
        crate::seal::check(&framed[8..]),
        crate::seal::SealCheck::Match(_)
    );
    assert_eq!(sealed, first.is_ours(), "sealed iff ours");
    assert_eq!(
        crate::framing::encode_for_writing(&second),
        framed[8..],
        "encoding is not stable"
    );
    Some(first)
}

/// Fuzz check for `amdgpu-kfd-<id>.img` contents (header included).
pub fn check_kfd_image(data: &[u8]) {
    if let Some(msg) = roundtrip::<CriuKfd>("amdgpu-kfd-1.img", data) {
        let problems = ValidatedKfd::problems(1, &msg);
        match ValidatedKfd::new(1, msg) {
            Ok(v) => {
                assert!(problems.is_empty());
                for (_, layout) in v.pages_files() {
                    let sum: u64 = layout.bos().iter().map(|b| b.size).sum();
                    assert_eq!(sum, layout.total_len());
                }
            }
            Err(Error::Invalid(p)) => assert_eq!(p, problems),
            Err(e) => panic!("validation returned {e}"),
        }
    }
}

/// Fuzz check for `amdgpu-renderD-<id>.img` contents (header included).
pub fn check_render_image(data: &[u8]) {
    if let Some(msg) = roundtrip::<CriuRenderNode>("amdgpu-renderD-1.img", data) {
        let n = msg.bo_entries.len();
        if let Ok(v) = ValidatedRenderNode::new(1, msg) {
            for i in 0..n {
                let (_, layout) = v
                    .drm_pages(i)
                    .expect("every listed bo has a drm-pages file");
                assert_eq!(layout.bos().len(), 1);
            }
        }
    }
}

/// Fuzz check for `amdgpu-dmabuf_<id>.img` contents (header included).
pub fn check_dmabuf_image(data: &[u8]) {
    roundtrip::<CriuDmabufNode>("amdgpu-dmabuf_1.img", data);
}

/// Fuzz check for file names: a parsed name formats back to the same
/// string, and every name formats to a string that parses back to it.
pub fn check_file_name(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(name) = ImageName::parse(s) {
            assert_eq!(name.to_string(), s);
        }
    }
    if data.len() >= 13 {
        let word = |i: usize| u32::from_le_bytes([data[i], data[i + 1], data[i + 2], data[i + 3]]);
        let (a, b, c) = (word(1), word(5), word(9));
        let name = match data[0] % 5 {
            0 => ImageName::Kfd { id: a },
            1 => ImageName::Pages { id: a, gpu_id: b },
            2 => ImageName::RenderNode { id: a },
            3 => ImageName::DrmPages {
                id: a,
                minor: b,
                bo_index: c,
            },
            _ => ImageName::Dmabuf { id: a },
        };
        let text = name.to_string();
        assert_eq!(ImageName::parse(&text).ok(), Some(name), "{text}");
    }
}

/// Serializes a set of files as the `image_set` fuzz input: per file a
/// 1-byte name length, the name, a 4-byte little-endian length, the bytes.
pub fn encode_set_input(files: &[(ImageName, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, bytes) in files {
        let name = name.to_string();
        out.push(name.len() as u8);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(bytes);
    }
    out
}

/// Parses an `image_set` fuzz input into a [`MemStore`]; malformed records
/// end the set, unknown names are skipped.
pub fn decode_set_input(mut data: &[u8]) -> MemStore {
    let store = MemStore::new();
    while let Some((&name_len, rest)) = data.split_first() {
        let Some(name) = rest.get(..usize::from(name_len)) else {
            break;
        };
        let rest = &rest[usize::from(name_len)..];
        let Some(len) = rest.get(..4) else { break };
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let rest = &rest[4..];
        let len = len.min(rest.len());
        if let Some(name) = std::str::from_utf8(name)
            .ok()
            .and_then(|n| ImageName::parse(n).ok())
        {
            store.insert(name, rest[..len].to_vec());
        }
        data = &rest[len..];
    }
    store
}

/// Fuzz check for whole-set validation over an in-memory set.
pub fn check_image_set(data: &[u8]) {
    let store = decode_set_input(data);
    let report = verify_set(&store, LIMITS).expect("a memory store always lists");
    let again = verify_set(&store, LIMITS).expect("a memory store always lists");
    assert_eq!(report, again, "verification is not deterministic");
    for p in &report.problems {
        assert!(
            ImageName::parse(&p.file).is_ok(),
            "problem names no image file: {p}"
        );
    }
}

/// Shape of a sample image set built by [`write_sample_set`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleSpec {
    /// Ext-file id of the KFD image (the render node gets `id + 1`, the dma-buf `id + 2`).
    pub id: u32,
    /// GPUs in the KFD image.
    pub gpus: u32,
    /// VRAM/GTT BOs per GPU (plus one doorbell BO per GPU, without contents).
    pub bos_per_gpu: u32,
    /// Pages per content BO.
    pub bo_pages: u64,
}

impl Default for SampleSpec {
    fn default() -> Self {
        Self {
            id: 1,
            gpus: 2,
            bos_per_gpu: 3,
            bo_pages: 4,
        }
    }
}

/// Deterministic BO contents: pattern pages with every third page zero (holes).
pub fn sample_bo_bytes(seed: u64, size: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(size as usize);
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for page in 0..size.div_ceil(PAGE_SIZE) {
        let n = (size - page * PAGE_SIZE).min(PAGE_SIZE) as usize;
        if page % 3 == 2 {
            out.resize(out.len() + n, 0);
            continue;
        }
        for _ in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            out.push(x as u8);
        }
    }
    out
}

/// Writes a consistent image set into `store` (a KFD image with its pages
/// files, a render node with its drm-pages files, a dma-buf) with checksums
/// and producer marks, and returns the KFD message.
pub fn write_sample_set<S: ImageStore>(store: &S, spec: SampleSpec) -> Result<CriuKfd, Error> {
    let gpu_id = |g: u32| 0x1000 + g * 0x111;
    let mut devices = vec![KfdDeviceEntry {
        node_id: 0,
        cpu_cores_count: 16,
        iolinks: (1..=spec.gpus)
            .map(|n| DevIolink {
                r#type: 2,
                node_to_id: n,
            })
            .collect(),
        ..Default::default()
    }];
    let mut bos = Vec::new();
    let bo_size = spec.bo_pages * PAGE_SIZE;
    for g in 0..spec.gpus {
        devices.push(KfdDeviceEntry {
            node_id: g + 1,
            gpu_id: gpu_id(g),
            simd_count: 304,
            mem_banks_count: 1,
            io_links_count: 1,
            vendor_id: 0x1002,
            device_id: 0x74a1,
            drm_render_minor: 128 + g,
            vram_size: 192 << 30,
            iolinks: vec![DevIolink {
                r#type: 2,
                node_to_id: 0,
            }],
            ..Default::default()
        });
        for b in 0..=spec.bos_per_gpu {
            let addr = (u64::from(g) + 1) << 40 | u64::from(b) << 32;
            let (size, alloc_flags) = if b == spec.bos_per_gpu {
                (PAGE_SIZE, flags::KFD_DOORBELL)
            } else if b % 2 == 0 {
                (bo_size, flags::KFD_VRAM | 0x8000_0000)
            } else {
                (bo_size, flags::KFD_GTT)
            };
            let handle = if g == 0 && b == 0 {
                1
            } else {
                flags::NO_HANDLE
            };
            bos.push(KfdBoEntry {
                addr,
                size,
                offset: addr >> 12,
                alloc_flags,
                gpu_id: gpu_id(g),
                handle,
                content_checksum: None,
                ..Default::default()
            });
        }
    }
    let mut kfd = CriuKfd {
        pid: 4242,
        num_of_gpus: spec.gpus,
        num_of_cpus: 1,
        device_entries: devices,
        num_of_bos: bos.len() as u64,
        bo_entries: bos,
        num_of_objects: 2,
        shared_mem_size: 0,
        shared_mem_magic: 0,
        priv_data: (0..64u8).collect(),
        producer: None,
        format_version: None,
        kfd_major_version: None,
        kfd_minor_version: None,
        kfd_required_minor: None,
        message_checksum: None,
        ..Default::default()
    };
    kfd.mark_producer();
    for d in kfd.device_entries.clone().iter().filter(|d| d.is_gpu()) {
        let entries: Vec<usize> = (0..kfd.bo_entries.len())
            .filter(|&i| kfd.bo_entries[i].gpu_id == d.gpu_id && kfd.bo_entries[i].has_contents())
            .collect();
        let layout = PagesLayout::new(
            entries
                .iter()
                .map(|&entry| PagesBo {
                    entry,
                    size: kfd.bo_entries[entry].size,
                    checksum: None,
                })
                .collect(),
        )
        .unwrap_or_default();
        let mut w = store.create_pages(
            &ImageName::Pages {
                id: spec.id,
                gpu_id: d.gpu_id,
            },
            layout,
        )?;
        for &entry in &entries {
            w.write(&sample_bo_bytes(entry as u64, kfd.bo_entries[entry].size))?;
        }
        let (sink, written) = w.finish()?;
        sink.commit()
            .map_err(|e| Error::io("sample pages", "commit", e))?;
        for (entry, sum) in written.checksums {
            kfd.bo_entries[entry].content_checksum = Some(sum);
        }
    }
    store.write_message(&ImageName::Kfd { id: spec.id }, &kfd)?;

    let render_id = spec.id + 1;
    let mut rn = CriuRenderNode {
        gpu_id: gpu_id(0),
        id: render_id,
        drm_render_minor: 128,
        num_of_bos: 2,
        bo_entries: vec![
            DrmBoEntry {
                addr: 0x7000_0000,
                size: 2 * PAGE_SIZE,
                offset: 0x10_0000,
                alignment: PAGE_SIZE,
                preferred_domains: flags::GEM_DOMAIN_VRAM,
                handle: 1,
                is_import: 1,
                num_of_vms: 1,
                vm_entries: vec![DrmVmEntry {
                    addr: 0x7000_0000,
                    size: 2 * PAGE_SIZE,
                    offset: 0,
                    flags: 0xe,
                }],
                ..Default::default()
            },
            DrmBoEntry {
                size: PAGE_SIZE,
                preferred_domains: flags::GEM_DOMAIN_CPU,
                handle: 2,
                ..Default::default()
            },
        ],
        producer: None,
        format_version: None,
        message_checksum: None,
        device: None,
        kfd_pids: Vec::new(),
        ..Default::default()
    };
    rn.mark_producer();
    for i in 0..rn.bo_entries.len() {
        let size = rn.bo_entries[i].size;
        let name = ImageName::DrmPages {
            id: render_id,
            minor: rn.drm_render_minor,
            bo_index: i as u32,
        };
        let mut w =
            store.create_pages(&name, PagesLayout::from_sizes([size]).unwrap_or_default())?;
        w.write(&sample_bo_bytes(1000 + i as u64, size))?;
        let (sink, written) = w.finish()?;
        sink.commit().map_err(|e| Error::io(name, "commit", e))?;
        rn.bo_entries[i].content_checksum = written.checksums.first().map(|c| c.1);
    }
    store.write_message(&ImageName::RenderNode { id: render_id }, &rn)?;

    let mut db = CriuDmabufNode {
        gem_handle: 2,
        producer: None,
        format_version: None,
        message_checksum: None,
    };
    db.mark_producer();
    store.write_message(&ImageName::Dmabuf { id: spec.id + 2 }, &db)?;
    Ok(kfd)
}

/// Fuzz check for checkpoint archives (tar or zstd-compressed tar, feature
/// `archive`): never a panic; every image found has a parsed name, at most
/// its length header of a pages file, all of a message up to the limit.
#[cfg(feature = "archive")]
pub fn check_archive(data: &[u8]) {
    let limits = ReadLimits {
        max_message_len: 1 << 20,
    };
    if let Ok(found) = crate::archive::read_archive(Cursor::new(data), limits) {
        for pair in found.windows(2) {
            assert!(pair[0].name < pair[1].name, "names sorted and unique");
        }
        for f in &found {
            let cap = if f.name.kind().holds_message() {
                limits.max_message_len + crate::HEADER_LEN as u64
            } else {
                crate::HEADER_LEN as u64
            };
            assert!(f.bytes.len() as u64 <= cap.min(f.len), "{}", f.path);
            assert_eq!(
                crate::ImageName::parse(&f.name.to_string()).ok(),
                Some(f.name)
            );
        }
    }
}
/// A private scratch directory for one fuzz input, removed on drop.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(tag: &str) -> Option<Scratch> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "amdgpu-image-fuzz-{tag}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&path).ok()?;
        Some(Scratch(path))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Largest sum of BO sizes [`check_chunk_chain`] reads through a chain
/// (larger claims are still verified, not read twice).
const CHAIN_READ_LIMIT: u64 = 64 << 20;

/// Splits a `chunk_chain` fuzz input: a 4-byte little-endian length, that
/// many bytes of the child set, the rest the parent set (each as
/// [`encode_set_input`] lays it out).
pub fn encode_chain_input(
    child: &[(ImageName, Vec<u8>)],
    parent: &[(ImageName, Vec<u8>)],
) -> Vec<u8> {
    let child = encode_set_input(child);
    let mut out = (child.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(&child);
    out.extend_from_slice(&encode_set_input(parent));
    out
}

fn write_dir(store: &MemStore, dir: &std::path::Path) -> Option<()> {
    for name in store.list().ok()? {
        let bytes = store.get(&name)?;
        std::fs::write(dir.join(name.to_string()), bytes.as_slice()).ok()?;
    }
    Some(())
}

/// Fuzz check of parent chains and chunk references: the child set and
/// its parent (linked as CRIU's `parent`) go into scratch directories.
/// `verify_set` must return the same report twice and name image files;
/// when it finds the child clean, every GPU's BOs must read through the
/// chain ([`ChainReader`](crate::ChainReader)) without error, and
/// [`flatten`](crate::chain::flatten) must write a standalone set that
/// verifies clean with no references left. Returns whether the child
/// verified clean (and so was read and flattened).
pub fn check_chunk_chain(data: &[u8]) -> bool {
    use crate::chain::{flatten, ChainReader, ChunkResolver, PieceSource};
    use crate::store::DirStore;
    let (child, parent) = match data.get(..4) {
        Some(len) => {
            let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
            let rest = &data[4..];
            let len = len.min(rest.len());
            (
                decode_set_input(&rest[..len]),
                decode_set_input(&rest[len..]),
            )
        }
        None => return false,
    };
    let (Some(root), Some(flat)) = (Scratch::new("chain"), Scratch::new("flat")) else {
        return false;
    };
    let (child_dir, parent_dir) = (root.0.join("child"), root.0.join("parent-set"));
    if std::fs::create_dir(&child_dir).is_err()
        || std::fs::create_dir(&parent_dir).is_err()
        || std::os::unix::fs::symlink("../parent-set", child_dir.join("parent")).is_err()
        || write_dir(&child, &child_dir).is_none()
        || write_dir(&parent, &parent_dir).is_none()
    {
        return false;
    }
    let Ok(store) = DirStore::open_dir(&child_dir) else {
        return false;
    };
    let report = verify_set(&store, LIMITS).expect("a directory store lists");
    let again = verify_set(&store, LIMITS).expect("a directory store lists");
    assert_eq!(report, again, "verification is not deterministic");
    for p in &report.problems {
        assert!(
            ImageName::parse(&p.file).is_ok(),
            "problem names no image file: {p}"
        );
    }
    if !report.is_clean() {
        return false;
    }
    // Clean: what restore reads must read, and flatten must make a clean set.
    let Ok(resolver) = ChunkResolver::new(&store, LIMITS) else {
        panic!("a clean set's chunks cannot be indexed");
    };
    let mut total = 0u64;
    let mut buf = vec![0u8; 64 << 10];
    for name in store.list().expect("listed above") {
        if name.kind() != crate::ImageKind::Kfd {
            continue;
        }
        let msg: CriuKfd = store
            .read_message(&name, LIMITS)
            .expect("verified")
            .expect("listed");
        let image = ValidatedKfd::new(name.id(), msg).expect("verified");
        for gpu in image.gpus().map(|d| d.gpu_id).collect::<Vec<_>>() {
            let layout = image.pages_layout(gpu);
            let chunks = image.bo_chunks(gpu);
            total += chunks.iter().map(|c| c.size).sum::<u64>();
            if total > CHAIN_READ_LIMIT {
                return true;
            }
            let pages = ImageName::Pages {
                id: name.id(),
                gpu_id: gpu,
            };
            let Some(own) = store.open_pages(&pages, layout.clone()).expect("verified") else {
                continue;
            };
            let mut reader: Box<dyn PieceSource> = if image.has_references()
                && chunks.len() == layout.bos().len()
            {
                Box::new(ChainReader::new(own, chunks, &resolver, &pages).expect("verified chain"))
            } else {
                Box::new(own)
            };
            while let Some(piece) = reader.read_piece(&mut buf).expect("a verified set reads") {
                assert!(piece.len <= buf.len());
            }
            reader
                .finish_pieces()
                .expect("a verified set ends where it should");
        }
    }
    let Ok(dst) = DirStore::open_dir(&flat.0) else {
        return true;
    };
    flatten(&store, &dst, LIMITS).expect("a verified set flattens");
    let flat_report = verify_set(&dst, LIMITS).expect("a directory store lists");
    assert!(
        flat_report.is_clean(),
        "flattened set: {:?}",
        flat_report.problems
    );
    assert_eq!(flat_report.references_verified, 0);
    true
}

/// A `chunk_chain` input of a consistent chain (the corpus seed): a parent
/// set of one GPU with two BOs, and a child whose BOs take their unchanged
/// chunks from the parent, one chunk changed, and a BO that repeats
/// another's contents stored once (deduplicated). Chunks of 4 KiB (BOs
/// are page multiples, so every chunk is whole).
pub fn chain_seed() -> Vec<u8> {
    use crate::chunks::{encode_digests, ChecksumAlgo, ChunkSource};
    use std::collections::HashSet;
    use std::sync::{Arc, Mutex};
    const CHUNK: u64 = 4096;
    let gpu = 0x1111;
    let build = |contents: &[Vec<u8>],
                 dump_id: u8,
                 parent: Option<(u8, HashSet<u128>)>|
     -> Vec<(ImageName, Vec<u8>)> {
        let store = MemStore::new();
        let mut bos: Vec<KfdBoEntry> = contents
            .iter()
            .enumerate()
            .map(|(i, c)| KfdBoEntry {
                addr: 0x10_0000_0000 + ((i as u64) << 24),
                size: c.len() as u64,
                alloc_flags: flags::KFD_VRAM,
                gpu_id: gpu,
                handle: flags::NO_HANDLE,
                ..Default::default()
            })
            .collect();
        let layout = PagesLayout::from_sizes(contents.iter().map(|c| c.len() as u64))
            .and_then(|l| l.with_chunks(ChecksumAlgo::V2 { chunk_size: CHUNK }, Vec::new()))
            .expect("small sizes");
        let name = ImageName::Pages { id: 1, gpu_id: gpu };
        let mut w = store.create_pages(&name, layout).expect("memory");
        let known = parent.as_ref().map(|(_, d)| d.clone()).unwrap_or_default();
        let seen = Arc::new(Mutex::new(HashSet::new()));
        let filter: crate::pages::ChunkFilter = Box::new(move |_, _, _, d| {
            if known.contains(&d) {
                ChunkSource::Parent
            } else if seen.lock().map_or(true, |mut s| s.insert(d)) {
                ChunkSource::Here
            } else {
                ChunkSource::Set
            }
        });
        let filtered = w.set_filter(filter);
        debug_assert!(filtered, "a memory file takes a filter");
        for c in contents {
            w.write(c).expect("memory");
        }
        let (sink, written) = w.finish().expect("memory");
        sink.commit().expect("memory");
        for (e, sum) in written.checksums {
            bos[e].content_checksum = Some(sum);
        }
        for (e, d) in written.digests {
            bos[e].chunk_digests = Some(encode_digests(&d));
        }
        for (e, s) in written.sources {
            if s.iter().any(|s| *s != ChunkSource::Here) {
                bos[e].chunk_sources = Some(s.iter().map(|s| *s as u8).collect());
            }
        }
        let mut kfd = CriuKfd {
            pid: 7,
            num_of_gpus: 1,
            num_of_cpus: 1,
            device_entries: vec![
                KfdDeviceEntry {
                    node_id: 0,
                    cpu_cores_count: 4,
                    ..Default::default()
                },
                KfdDeviceEntry {
                    node_id: 1,
                    gpu_id: gpu,
                    vendor_id: 0x1002,
                    ..Default::default()
                },
            ],
            num_of_bos: bos.len() as u64,
            bo_entries: bos,
            chunk_size: Some(CHUNK),
            dump_id: Some(vec![dump_id; 16]),
            parent_dump_id: parent.map(|(p, _)| vec![p; 16]),
            ..Default::default()
        };
        kfd.mark_producer();
        store
            .write_message(&ImageName::Kfd { id: 1 }, &kfd)
            .expect("memory");
        store
            .list()
            .expect("memory")
            .into_iter()
            .filter_map(|n| store.get(&n).map(|b| (n, b.to_vec())))
            .collect()
    };
    let a = sample_bo_bytes(1, 3 * CHUNK);
    let b = sample_bo_bytes(2, 2 * CHUNK);
    let parent = build(&[a.clone(), b.clone()], 1, None);
    let mut digests = HashSet::new();
    for c in [&a, &b] {
        for chunk in c.chunks(CHUNK as usize) {
            digests.insert(crate::chunks::chunk_digest(chunk));
        }
    }
    let mut a2 = a.clone();
    a2[CHUNK as usize + 5] ^= 0x40;
    let child = build(&[a2.clone(), b, a2], 2, Some((1, digests)));
    encode_chain_input(&child, &parent)
}
