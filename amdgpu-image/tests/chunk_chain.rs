//! Chunk digests, parent chains and deduplicated sets at the image level:
//! sets written the way the dump writes them (a filter deciding per chunk),
//! read back through the chain bit for bit, refused by a reader that
//! ignores the chunk fields (as the C plugin does), checked by
//! `verify_set` (a missing, replaced or changed parent reported by name)
//! and flattened into a standalone set.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};

use amdgpu_image::chain::{flatten, verify_references};
use amdgpu_image::chunks::{encode_digests, ChecksumAlgo};
use amdgpu_image::{
    flags, verify_set, ChainReader, ChunkResolver, ChunkSource, CriuKfd, DirStore, Error,
    ImageName, ImageStore, KfdBoEntry, KfdDeviceEntry, PagesLayout, PagesReader, PieceSource,
    ReadLimits, ValidatedKfd,
};

/// Chunk size of these tests (small sets, many chunks).
const CHUNK: u64 = 64 << 10;
const ID: u32 = 7;

fn gpu_id(g: usize) -> u32 {
    0x1000 + g as u32
}

fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// What the filter decided, shared with the test.
type Decider = Arc<dyn Fn(u128, u64) -> ChunkSource + Send + Sync>;

/// Writes a one-process set: per GPU, BOs with `contents`; `decide` says
/// where each chunk goes (all here when `None`); `parent` names the parent
/// dump it references.
fn write_set(
    dir: &Path,
    contents: &[Vec<Vec<u8>>],
    decide: Option<Decider>,
    dump_id: [u8; 16],
    parent: Option<[u8; 16]>,
) {
    let store = DirStore::open_dir(dir).unwrap();
    let mut device_entries = vec![KfdDeviceEntry {
        node_id: 0,
        cpu_cores_count: 8,
        ..Default::default()
    }];
    let mut bo_entries = Vec::new();
    for (g, bos) in contents.iter().enumerate() {
        device_entries.push(KfdDeviceEntry {
            node_id: g as u32 + 1,
            gpu_id: gpu_id(g),
            vendor_id: 0x1002,
            ..Default::default()
        });
        let first = bo_entries.len();
        for (b, data) in bos.iter().enumerate() {
            bo_entries.push(KfdBoEntry {
                addr: 0x7f00_0000_0000 + ((g as u64) << 32) + ((b as u64) << 24),
                size: data.len() as u64,
                alloc_flags: flags::KFD_VRAM,
                gpu_id: gpu_id(g),
                handle: flags::NO_HANDLE,
                ..Default::default()
            });
        }
        let layout = PagesLayout::from_sizes(bos.iter().map(|d| d.len() as u64))
            .unwrap()
            .with_chunks(ChecksumAlgo::V2 { chunk_size: CHUNK }, Vec::new())
            .unwrap();
        let name = ImageName::Pages {
            id: ID,
            gpu_id: gpu_id(g),
        };
        let mut writer = store.create_pages(&name, layout).unwrap();
        if let Some(decide) = &decide {
            let decide = Arc::clone(decide);
            assert!(
                writer.set_filter(Box::new(move |_, _, len, digest| decide(digest, len))),
                "a directory file takes a filter"
            );
        }
        for data in bos {
            // Odd piece sizes: chunks are assembled across calls.
            for piece in data.chunks(40_000) {
                writer.write(piece).unwrap();
            }
        }
        let (file, written) = writer.finish().unwrap();
        amdgpu_image::ImageWriter::commit(file).unwrap();
        for (entry, sum) in written.checksums {
            bo_entries[first + entry].content_checksum = Some(sum);
        }
        for (entry, digests) in written.digests {
            bo_entries[first + entry].chunk_digests = Some(encode_digests(&digests));
        }
        for (entry, sources) in written.sources {
            if sources.iter().any(|s| *s != ChunkSource::Here) {
                bo_entries[first + entry].chunk_sources =
                    Some(sources.iter().map(|s| *s as u8).collect());
            }
        }
    }
    let mut msg = CriuKfd {
        pid: 42,
        num_of_gpus: contents.len() as u32,
        num_of_cpus: 1,
        device_entries,
        num_of_bos: bo_entries.len() as u64,
        bo_entries,
        priv_data: vec![1, 2, 3],
        chunk_size: Some(CHUNK),
        dump_id: Some(dump_id.to_vec()),
        parent_dump_id: parent.map(|p| p.to_vec()),
        ..Default::default()
    };
    msg.mark_producer();
    store
        .write_message(&ImageName::Kfd { id: ID }, &msg)
        .unwrap();
}

/// Every chunk (digest, len) of the set in `dir`: what a child references.
fn digests_of(dir: &Path) -> HashSet<(u128, u64)> {
    let image = image_of(dir);
    let mut out = HashSet::new();
    for g in image.gpus().map(|d| d.gpu_id).collect::<Vec<_>>() {
        for bo in image.bo_chunks(g) {
            for (i, d) in bo.digests.iter().enumerate() {
                out.insert((*d, bo.chunk_len(i)));
            }
        }
    }
    out
}

fn image_of(dir: &Path) -> ValidatedKfd {
    let store = DirStore::open_dir(dir).unwrap();
    let msg: CriuKfd = store
        .read_message(&ImageName::Kfd { id: ID }, ReadLimits::default())
        .unwrap()
        .unwrap();
    ValidatedKfd::new(ID, msg).unwrap()
}

fn incremental(parent: &Path) -> Decider {
    let known = digests_of(parent);
    Arc::new(move |d, len| {
        if known.contains(&(d, len)) {
            ChunkSource::Parent
        } else {
            ChunkSource::Here
        }
    })
}

/// Reads GPU `g`'s BOs of the set in `dir` through its chain, with
/// buffers smaller than a chunk (pieces end inside chunks) and larger than
/// several (pieces join chunks from different files and end inside one):
/// both must read the same bytes.
fn read_back(dir: &Path, g: usize) -> Result<Vec<Vec<u8>>, Error> {
    let small = read_back_with(dir, g, 50_000)?;
    let large = read_back_with(dir, g, 3 * CHUNK as usize + 12_345)?;
    assert_eq!(
        small,
        large,
        "{}: buffer sizes read differently",
        dir.display()
    );
    Ok(large)
}

fn read_back_with(dir: &Path, g: usize, buf_len: usize) -> Result<Vec<Vec<u8>>, Error> {
    let store = DirStore::open_dir(dir)?;
    let image = image_of(dir);
    let resolver = ChunkResolver::new(&store, ReadLimits::default())?;
    let name = ImageName::Pages {
        id: ID,
        gpu_id: gpu_id(g),
    };
    let own = store
        .open_pages(&name, image.pages_layout(gpu_id(g)))?
        .expect("pages file");
    let chunks = image.bo_chunks(gpu_id(g));
    let mut out: Vec<Vec<u8>> = chunks.iter().map(|_| Vec::new()).collect();
    let mut reader: Box<dyn PieceSource> =
        Box::new(ChainReader::new(own, chunks, &resolver, &name)?);
    let mut buf = vec![0u8; buf_len];
    while let Some(piece) = reader.read_piece(&mut buf)? {
        assert_eq!(piece.offset, out[piece.bo].len() as u64, "pieces in order");
        out[piece.bo].extend_from_slice(&buf[..piece.len]);
    }
    reader.finish_pieces()?;
    Ok(out)
}

fn link_parent(child: &Path, parent: &str) {
    std::os::unix::fs::symlink(parent, child.join("parent")).unwrap();
}

fn stored_len(dir: &Path, g: usize) -> u64 {
    let name = ImageName::Pages {
        id: ID,
        gpu_id: gpu_id(g),
    };
    let bytes = std::fs::read(dir.join(name.to_string())).unwrap();
    u64::from_le_bytes(bytes[..8].try_into().unwrap())
}

/// Three dumps of a changing process: full, then two incremental ones.
struct Chain {
    root: tempfile::TempDir,
    contents: Vec<Vec<Vec<Vec<u8>>>>,
}

impl Chain {
    fn dir(&self, n: usize) -> std::path::PathBuf {
        self.root.path().join(n.to_string())
    }
}

fn chain_of_three() -> Chain {
    let root = tempfile::tempdir().unwrap();
    // GPU 0: a 1 MiB + 4 KiB BO (a short last chunk), a 256 KiB BO; GPU 1: 512 KiB.
    let mut contents = vec![vec![
        vec![bytes(1, (1 << 20) + 4096), bytes(2, 256 << 10)],
        vec![bytes(3, 512 << 10)],
    ]];
    for step in 1..3u8 {
        let mut next = contents[step as usize - 1].clone();
        // A few chunks change per step: chunk 0 and one per step.
        next[0][0][5] ^= step;
        next[0][0][(step as usize) * CHUNK as usize + 9] ^= 0x55;
        next[1][0][(1 << 19) - 1] ^= step;
        contents.push(next);
    }
    let chain = Chain { root, contents };
    for n in 0..3 {
        std::fs::create_dir(chain.dir(n)).unwrap();
        let decide = (n > 0).then(|| {
            link_parent(&chain.dir(n), &format!("../{}", n - 1));
            incremental(&chain.dir(n - 1))
        });
        write_set(
            &chain.dir(n),
            &chain.contents[n],
            decide,
            [n as u8 + 1; 16],
            (n > 0).then_some([n as u8; 16]),
        );
    }
    chain
}

#[test]
fn a_chain_of_three_reads_back_bit_identically_and_stores_only_changes() {
    let chain = chain_of_three();
    for n in 0..3 {
        for g in 0..2 {
            assert_eq!(
                read_back(&chain.dir(n), g).unwrap(),
                chain.contents[n][g],
                "set {n} gpu {g}"
            );
        }
        let report = verify_set(
            &DirStore::open_dir(chain.dir(n)).unwrap(),
            ReadLimits::default(),
        )
        .unwrap();
        assert!(report.is_clean(), "set {n}: {:?}", report.problems);
        assert_eq!(report.chain_depth, if n == 0 { 1 } else { n + 1 }.min(3));
        if n > 0 {
            assert!(report.references_verified > 0);
        }
    }
    // Set 2 stores only the changed chunks: chunk 0 and chunk 2 of the
    // first BO (chunk 1 changed in set 1, whose chunk is referenced), one
    // chunk of GPU 1.
    assert_eq!(stored_len(&chain.dir(2), 0), 2 * CHUNK);
    assert_eq!(stored_len(&chain.dir(2), 1), CHUNK);
    // Chunk 1 of set 2 comes from set 1 (a grandparent chunk would come
    // from set 0): both levels are read.
    assert_eq!(
        verify_references(
            &DirStore::open_dir(chain.dir(2)).unwrap(),
            ReadLimits::default()
        )
        .0
        .depth,
        3
    );
}

#[test]
fn a_reader_ignoring_chunk_fields_refuses_a_set_with_references() {
    // The C plugin compares each pages file's length header with the sum
    // of its GPU's BO sizes (upstream-plugin.md §6.3 and §6.5: "size
    // mismatch", -EINVAL) before it reads a byte; a file that stores only
    // some chunks has a shorter header, so it refuses the restore.
    let chain = chain_of_three();
    let image = image_of(&chain.dir(1));
    assert!(image.has_references());
    let store = DirStore::open_dir(chain.dir(1)).unwrap();
    for g in 0..2 {
        let name = ImageName::Pages {
            id: ID,
            gpu_id: gpu_id(g),
        };
        let file = store.open(&name).unwrap().unwrap();
        let err = PagesReader::new(
            file,
            &name.to_string(),
            image.compat_pages_layout(gpu_id(g)),
        )
        .unwrap_err();
        assert!(
            matches!(err, Error::LengthMismatch { expected, actual, .. } if actual < expected),
            "{err}"
        );
    }
    // A full set reads the same either way.
    let full = image_of(&chain.dir(0));
    assert!(!full.has_references());
    let store = DirStore::open_dir(chain.dir(0)).unwrap();
    let name = ImageName::Pages {
        id: ID,
        gpu_id: gpu_id(0),
    };
    let file = store.open(&name).unwrap().unwrap();
    PagesReader::new(file, &name.to_string(), full.compat_pages_layout(gpu_id(0)))
        .unwrap()
        .verify_all_serial(&mut vec![0; 4096])
        .unwrap();
}

fn problems_of(dir: &Path) -> String {
    let report = verify_set(&DirStore::open_dir(dir).unwrap(), ReadLimits::default()).unwrap();
    report
        .problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_missing_parent_is_reported_by_name_and_never_read() {
    let chain = chain_of_three();
    std::fs::rename(chain.dir(0), chain.root.path().join("moved")).unwrap();
    let text = problems_of(&chain.dir(1));
    assert!(text.contains("parent -> ../0"), "{text}");
    assert!(text.contains("cannot be opened"), "{text}");
    assert!(read_back(&chain.dir(1), 0).is_err());
    // Set 2 needs set 0 through set 1: reported too.
    assert!(problems_of(&chain.dir(2)).contains("parent -> ../0"));
    std::fs::remove_file(chain.dir(1).join("parent")).unwrap();
    let text = problems_of(&chain.dir(1));
    assert!(text.contains("no `parent` link"), "{text}");
}

#[test]
fn a_replaced_parent_is_refused_by_its_dump_id() {
    let chain = chain_of_three();
    // Another dump (same contents even) in the parent's place.
    std::fs::remove_dir_all(chain.dir(0)).unwrap();
    std::fs::create_dir(chain.dir(0)).unwrap();
    write_set(&chain.dir(0), &chain.contents[0], None, [0xee; 16], None);
    let text = problems_of(&chain.dir(1));
    assert!(text.contains("parent -> ../0"), "{text}");
    assert!(text.contains("was replaced"), "{text}");
    assert!(matches!(
        read_back(&chain.dir(1), 0),
        Err(Error::Chain { .. })
    ));
}

#[test]
fn a_changed_parent_chunk_is_found_by_its_digest() {
    let chain = chain_of_three();
    let name = ImageName::Pages {
        id: ID,
        gpu_id: gpu_id(1),
    };
    let path = chain.dir(0).join(name.to_string());
    let mut bytes = std::fs::read(&path).unwrap();
    // A byte of GPU 1's chunk 0, which sets 1 and 2 reference.
    bytes[8 + 100] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let text = problems_of(&chain.dir(1));
    assert!(
        text.contains("parent -> ../0/amdgpu-pages-7-1001.img"),
        "{text}"
    );
    assert!(text.contains("does not match the recorded"), "{text}");
    let err = read_back(&chain.dir(1), 1).unwrap_err();
    assert!(matches!(err, Error::ChunkMismatch { .. }), "{err}");
}

#[test]
fn a_parent_of_another_process_tree_yields_only_what_matches() {
    // The parent holds other contents entirely: nothing is referenced, the
    // child is a full set, and it reads back.
    let root = tempfile::tempdir().unwrap();
    let other = root.path().join("other");
    let child = root.path().join("child");
    std::fs::create_dir(&other).unwrap();
    std::fs::create_dir(&child).unwrap();
    write_set(&other, &[vec![bytes(99, 256 << 10)]], None, [9; 16], None);
    link_parent(&child, "../other");
    let contents = vec![vec![bytes(5, 300 << 10)]];
    write_set(
        &child,
        &contents,
        Some(incremental(&other)),
        [10; 16],
        Some([9; 16]),
    );
    assert!(!image_of(&child).has_references());
    assert_eq!(stored_len(&child, 0), 300 << 10);
    assert_eq!(read_back(&child, 0).unwrap(), contents[0]);
}

#[test]
fn dedup_writes_each_distinct_chunk_once_and_flatten_makes_it_standalone() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("set");
    std::fs::create_dir(&dir).unwrap();
    // Four GPUs with identical weights and their own activations.
    let weights = bytes(77, 512 << 10);
    let contents: Vec<Vec<Vec<u8>>> = (0..4)
        .map(|g| vec![weights.clone(), bytes(100 + g, 128 << 10)])
        .collect();
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let decide: Decider = Arc::new(move |d, len| {
        if seen.lock().unwrap().insert((d, len)) {
            ChunkSource::Here
        } else {
            ChunkSource::Set
        }
    });
    write_set(&dir, &contents, Some(decide), [3; 16], None);
    let total: u64 = (0..4).map(|g| stored_len(&dir, g)).sum();
    assert_eq!(total, (512 << 10) + 4 * (128 << 10));
    for (g, bos) in contents.iter().enumerate() {
        assert_eq!(&read_back(&dir, g).unwrap(), bos);
    }
    assert_eq!(problems_of(&dir), "");

    let flat = root.path().join("flat");
    std::fs::create_dir(&flat).unwrap();
    let report = flatten(
        &DirStore::open_dir(&dir).unwrap(),
        &DirStore::open_dir(&flat).unwrap(),
        ReadLimits::default(),
    )
    .unwrap();
    assert_eq!(report.chunks_resolved, 3 * 8);
    let image = image_of(&flat);
    assert!(!image.has_references());
    assert!(image.message().parent_dump_id.is_none());
    for (g, bos) in contents.iter().enumerate() {
        assert_eq!(stored_len(&flat, g), (640 << 10) as u64);
        assert_eq!(&read_back(&flat, g).unwrap(), bos);
    }
    let report = verify_set(&DirStore::open_dir(&flat).unwrap(), ReadLimits::default()).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.references_verified, 0);
    assert_eq!(report.checksums_verified, 8);
}

#[test]
fn flatten_of_a_chain_reads_like_a_full_dump() {
    let chain = chain_of_three();
    let flat = chain.root.path().join("flat");
    std::fs::create_dir(&flat).unwrap();
    flatten(
        &DirStore::open_dir(chain.dir(2)).unwrap(),
        &DirStore::open_dir(&flat).unwrap(),
        ReadLimits::default(),
    )
    .unwrap();
    // No parent link, and none needed.
    assert!(!flat.join("parent").exists());
    let image = image_of(&flat);
    for g in 0..2 {
        let layout = image.compat_pages_layout(gpu_id(g));
        assert_eq!(stored_len(&flat, g), layout.total_len());
        assert_eq!(read_back(&flat, g).unwrap(), chain.contents[2][g]);
    }
    // Checksums are those of the chained set (the same bytes).
    let chained = image_of(&chain.dir(2));
    for (a, b) in image
        .message()
        .bo_entries
        .iter()
        .zip(&chained.message().bo_entries)
    {
        assert_eq!(a.content_checksum, b.content_checksum);
        assert_eq!(a.chunk_digests, b.chunk_digests);
    }
}

/// Runs `f` on a thread of its own and waits at most 30 s for it: a parent
/// chain followed forever must fail the test, not hang it.
fn within_30s<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(30))
        .unwrap_or_else(|_| {
            panic!("{what} did not return within 30 s: the parent chain is followed forever")
        })
}

/// Every chunk of the set's BOs "in the parent": the set stores nothing.
fn all_from_parent() -> Decider {
    Arc::new(|_, _| ChunkSource::Parent)
}

/// Two sets that are each other's parent (`a/parent -> ../b`,
/// `b/parent -> ../a`), each naming the other's dump_id, neither storing
/// a chunk: every lookup of a parent chunk goes round the loop.
fn looping_pair() -> (tempfile::TempDir, Vec<Vec<Vec<u8>>>) {
    let root = tempfile::tempdir().unwrap();
    let contents = vec![vec![bytes(41, 256 << 10)]];
    for (me, other, id, parent) in [
        ("a", "b", [0xa; 16], [0xb; 16]),
        ("b", "a", [0xb; 16], [0xa; 16]),
    ] {
        let dir = root.path().join(me);
        std::fs::create_dir(&dir).unwrap();
        link_parent(&dir, &format!("../{other}"));
        write_set(&dir, &contents, Some(all_from_parent()), id, Some(parent));
    }
    (root, contents)
}

#[test]
fn a_parent_chain_that_loops_is_refused_by_name_by_verify_read_and_flatten() {
    let (root, _) = looping_pair();
    let a = root.path().join("a");
    let text = within_30s("verify_set", {
        let a = a.clone();
        move || problems_of(&a)
    });
    assert!(text.contains("the parent chain loops"), "{text}");
    assert!(text.contains("parent -> ../a"), "{text}");
    let err = within_30s("a read through the chain", {
        let a = a.clone();
        move || read_back(&a, 0).unwrap_err()
    });
    assert!(
        matches!(&err, Error::ParentLoop { dir, level: 0, .. } if dir == "parent -> ../a"),
        "{err}"
    );
    let flat = root.path().join("flat");
    std::fs::create_dir(&flat).unwrap();
    let err = within_30s("flatten", {
        let (a, flat) = (a.clone(), flat.clone());
        move || {
            flatten(
                &DirStore::open_dir(&a).unwrap(),
                &DirStore::open_dir(&flat).unwrap(),
                ReadLimits::default(),
            )
            .unwrap_err()
        }
    });
    assert!(matches!(err, Error::ParentLoop { .. }), "{err}");
}

#[test]
fn a_copy_of_a_set_in_its_own_chain_is_a_loop_by_dump_id() {
    // b's parent is a copy of a (another directory, the same dump): the
    // chain a -> b -> copy of a comes back to a by its dump_id.
    let (root, _) = looping_pair();
    let copy = root.path().join("a-copy");
    std::fs::create_dir(&copy).unwrap();
    for entry in std::fs::read_dir(root.path().join("a")).unwrap() {
        let entry = entry.unwrap();
        let to = copy.join(entry.file_name());
        if entry.file_name() == "parent" {
            std::os::unix::fs::symlink("../b", to).unwrap();
        } else {
            std::fs::copy(entry.path(), to).unwrap();
        }
    }
    let b = root.path().join("b");
    std::fs::remove_file(b.join("parent")).unwrap();
    link_parent(&b, "../a-copy");
    let a = root.path().join("a");
    let err = within_30s("a read through the chain", move || {
        read_back(&a, 0).unwrap_err()
    });
    assert!(
        matches!(&err, Error::ParentLoop { dir, level: 0, .. } if dir == "parent -> ../a-copy"),
        "{err}"
    );
    assert!(err.to_string().contains("dump_id"), "{err}");
}

#[test]
fn a_set_that_is_its_own_parent_is_refused() {
    // `parent -> .`, and the images name their own dump as the parent.
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("self");
    std::fs::create_dir(&dir).unwrap();
    link_parent(&dir, ".");
    write_set(
        &dir,
        &[vec![bytes(7, 128 << 10)]],
        Some(all_from_parent()),
        [0x5; 16],
        Some([0x5; 16]),
    );
    let text = within_30s("verify_set", {
        let dir = dir.clone();
        move || problems_of(&dir)
    });
    assert!(
        text.contains("criu_kfd.parent_dump_id: equals dump_id"),
        "{text}"
    );
    let store = DirStore::open_dir(&dir).unwrap();
    let resolver = ChunkResolver::new(&store, ReadLimits::default());
    assert!(
        matches!(&resolver, Err(Error::Invalid(_))),
        "an image naming itself as its parent is invalid: {resolver:?}"
    );
    // Images that name another dump as their parent: the directory itself
    // is refused as its own parent before anything of it is read again.
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::create_dir(&dir).unwrap();
    link_parent(&dir, ".");
    write_set(
        &dir,
        &[vec![bytes(7, 128 << 10)]],
        Some(all_from_parent()),
        [0x5; 16],
        Some([0x6; 16]),
    );
    let err = within_30s("a read through the chain", move || {
        read_back(&dir, 0).unwrap_err()
    });
    assert!(
        matches!(&err, Error::ParentLoop { dir, level: 0, same: "directory" } if dir == "parent -> ."),
        "{err}"
    );
}

#[test]
fn a_chain_deeper_than_the_bound_is_refused() {
    // A chain of distinct sets, each referencing a chunk only the bottom
    // one stores, one level deeper than the bound.
    let root = tempfile::tempdir().unwrap();
    let contents = vec![vec![bytes(3, 64 << 10)]];
    let levels = amdgpu_image::chain::MAX_CHAIN_DEPTH + 1;
    for n in 0..levels {
        let dir = root.path().join(n.to_string());
        std::fs::create_dir(&dir).unwrap();
        let id = |n: usize| {
            let mut id = [0u8; 16];
            id[..8].copy_from_slice(&(n as u64 + 1).to_le_bytes());
            id
        };
        let decide = (n > 0).then(|| {
            link_parent(&dir, &format!("../{}", n - 1));
            all_from_parent()
        });
        write_set(&dir, &contents, decide, id(n), (n > 0).then(|| id(n - 1)));
    }
    let top = root.path().join((levels - 1).to_string());
    let err = within_30s("a read through the chain", {
        let top = top.clone();
        move || read_back(&top, 0).unwrap_err()
    });
    assert!(
        matches!(err, Error::ChainTooDeep { limit, .. } if limit == amdgpu_image::chain::MAX_CHAIN_DEPTH),
        "{err}"
    );
    assert!(err.to_string().contains("amdgpu-criu flatten"), "{err}");
    // One level less reads back.
    let below = root.path().join((levels - 2).to_string());
    assert_eq!(read_back(&below, 0).unwrap(), contents[0]);
}

#[test]
fn images_of_two_dumps_in_one_set_are_refused_naming_both_dump_ids() {
    let dir = tempfile::tempdir().unwrap();
    write_set(dir.path(), &[vec![bytes(1, 8192)]], None, [0x11; 16], None);
    let store = DirStore::open_dir(dir.path()).unwrap();
    // A second process's image, of another dump, in the same directory.
    let mut msg: CriuKfd = store
        .read_message(&ImageName::Kfd { id: ID }, ReadLimits::default())
        .unwrap()
        .unwrap();
    msg.dump_id = Some(vec![0x22; 16]);
    store
        .write_message(&ImageName::Kfd { id: ID + 1 }, &msg)
        .unwrap();
    let err = ChunkResolver::new(&store, ReadLimits::default()).unwrap_err();
    let Error::MixedDumps {
        file,
        dump_id,
        others,
    } = &err
    else {
        panic!("not MixedDumps: {err:?}");
    };
    assert!(file.ends_with("amdgpu-kfd-8.img"), "{file}");
    assert_eq!(dump_id.as_deref(), Some(&[0x22; 16][..]));
    assert_eq!(others.as_deref(), Some(&[0x11; 16][..]));
    assert_eq!(
        err.to_string(),
        format!(
            "{file}: dump_id {} differs from the other images' {} (images of two dumps mixed)",
            "22".repeat(16),
            "11".repeat(16)
        )
    );
}
