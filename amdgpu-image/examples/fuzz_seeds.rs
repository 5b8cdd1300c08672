//! Writes the seed corpus of the fuzz targets: `fuzz_seeds <corpus dir>`
//! (normally `fuzz/corpus`). Seeds are small valid and broken images.

use std::fs;
use std::path::{Path, PathBuf};

use amdgpu_image::fuzz_support::{encode_set_input, write_sample_set, SampleSpec};
use amdgpu_image::{ImageKind, ImageName, ImageStore, MemStore};

fn main() {
    let Some(root) = std::env::args().nth(1).map(PathBuf::from) else {
        eprintln!("usage: fuzz_seeds <corpus dir>");
        std::process::exit(2);
    };
    let store = MemStore::new();
    let spec = SampleSpec {
        id: 1,
        gpus: 2,
        bos_per_gpu: 2,
        bo_pages: 1,
    };
    if let Err(e) = write_sample_set(&store, spec) {
        eprintln!("fuzz_seeds: {e}");
        std::process::exit(1);
    }
    let files: Vec<(ImageName, Vec<u8>)> = store
        .list()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|n| store.get(&n).map(|b| (n, b.to_vec())))
        .collect();
    let of_kind = |k: ImageKind| {
        files
            .iter()
            .filter(move |(n, _)| n.kind() == k)
            .map(|(_, b)| b.clone())
    };
    let framed = |payload: &[u8]| {
        let mut v = (payload.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(payload);
        v
    };

    let mut kfd: Vec<Vec<u8>> = of_kind(ImageKind::Kfd).collect();
    // Minimal: every required scalar present and zero.
    kfd.push(framed(&[
        0x08, 0, 0x10, 0, 0x18, 0, 0x28, 0, 0x38, 0, 0x40, 0, 0x48, 0, 0x52, 0,
    ]));
    // A required field missing, a bad header, a truncated payload.
    kfd.push(framed(&[0x08, 0, 0x10, 0]));
    kfd.push(vec![0xff; 8]);
    kfd.push(kfd[0][..kfd[0].len() / 2].to_vec());
    write(&root, "kfd_image", &kfd);

    let mut render: Vec<Vec<u8>> = of_kind(ImageKind::RenderNode).collect();
    render.push(framed(&[0x08, 0, 0x10, 0, 0x18, 0, 0x20, 0]));
    write(&root, "render_image", &render);

    let mut dmabuf: Vec<Vec<u8>> = of_kind(ImageKind::Dmabuf).collect();
    dmabuf.push(framed(&[0x08, 0]));
    dmabuf.push(framed(&[]));
    write(&root, "dmabuf_image", &dmabuf);

    let mut sets = vec![encode_set_input(&files)];
    let mut broken = files.clone();
    if let Some((_, bytes)) = broken
        .iter_mut()
        .find(|(n, _)| n.kind() == ImageKind::Pages)
    {
        if let Some(b) = bytes.get_mut(20) {
            *b ^= 1;
        }
    }
    sets.push(encode_set_input(&broken));
    write(&root, "image_set", &sets);

    // A clean chain, and the same child without its parent set.
    let chain = amdgpu_image::fuzz_support::chain_seed();
    let child_len = chain
        .get(..4)
        .map_or(0, |l| u32::from_le_bytes([l[0], l[1], l[2], l[3]]) as usize);
    let orphan = chain[..(4 + child_len).min(chain.len())].to_vec();
    write(&root, "chunk_chain", &[chain, orphan]);

    let mut names: Vec<Vec<u8>> = files
        .iter()
        .map(|(n, _)| n.to_string().into_bytes())
        .collect();
    names.push(b"amdgpu-drm-pages--5--1-ffffffff.img".to_vec());
    names.push(vec![3, 1, 0, 0, 0, 128, 0, 0, 0, 255, 255, 0, 0]);
    write(&root, "file_name", &names);
}

fn write(root: &Path, target: &str, seeds: &[Vec<u8>]) {
    let dir = root.join(target);
    if let Err(e) = fs::create_dir_all(&dir) {
        eprintln!("fuzz_seeds: {}: {e}", dir.display());
        std::process::exit(1);
    }
    for (i, seed) in seeds.iter().enumerate() {
        let path = dir.join(format!("seed-{i:02}"));
        if let Err(e) = fs::write(&path, seed) {
            eprintln!("fuzz_seeds: {}: {e}", path.display());
            std::process::exit(1);
        }
    }
    println!("{target}: {} seeds", seeds.len());
}
