//! Validation of single messages: each rule rejects what it should, names
//! the file and field, and accepts consistent images.

use amdgpu_image::{
    flags, CriuKfd, CriuRenderNode, DevIolink, DrmBoEntry, DrmVmEntry, Error, ImageName,
    KfdBoEntry, KfdDeviceEntry, PagesBo, ValidatedKfd, ValidatedRenderNode,
};

fn gpu(node_id: u32, gpu_id: u32, links: &[u32]) -> KfdDeviceEntry {
    KfdDeviceEntry {
        node_id,
        gpu_id,
        simd_count: 104,
        drm_render_minor: 127 + node_id,
        iolinks: links
            .iter()
            .map(|&n| DevIolink {
                r#type: 2,
                node_to_id: n,
            })
            .collect(),
        ..Default::default()
    }
}

fn bo(gpu_id: u32, addr: u64, size: u64, alloc_flags: u32) -> KfdBoEntry {
    KfdBoEntry {
        addr,
        size,
        offset: addr >> 8,
        alloc_flags,
        gpu_id,
        handle: flags::NO_HANDLE,
        content_checksum: None,
        ..Default::default()
    }
}

fn good_kfd() -> CriuKfd {
    CriuKfd {
        pid: 100,
        num_of_gpus: 2,
        num_of_cpus: 1,
        device_entries: vec![
            KfdDeviceEntry {
                node_id: 0,
                cpu_cores_count: 8,
                iolinks: vec![DevIolink {
                    r#type: 2,
                    node_to_id: 1,
                }],
                ..Default::default()
            },
            gpu(1, 0xaaaa, &[0, 2]),
            gpu(2, 0xbbbb, &[0, 1]),
        ],
        num_of_bos: 5,
        bo_entries: vec![
            bo(
                0xaaaa,
                0x1000_0000,
                0x20_0000,
                flags::KFD_VRAM | 0x8000_0000,
            ),
            bo(0xbbbb, 0x2000_0000, 0x1000, flags::KFD_GTT),
            bo(0xaaaa, 0x3000_0000, 0x1000, flags::KFD_DOORBELL),
            bo(0xaaaa, 0x4000_0000, 0x3000, flags::KFD_GTT),
            bo(0xbbbb, 0x5000_0000, 123, flags::KFD_USERPTR),
        ],
        num_of_objects: 0,
        shared_mem_size: 0,
        shared_mem_magic: 0,
        priv_data: vec![],
        producer: None,
        format_version: None,
        kfd_major_version: None,
        kfd_minor_version: None,
        kfd_required_minor: None,
        message_checksum: None,
        ..Default::default()
    }
}

fn problems(msg: &CriuKfd) -> Vec<String> {
    ValidatedKfd::problems(5, msg)
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn consistent_image_validates_and_lays_out_pages() {
    let v = ValidatedKfd::new(5, good_kfd()).unwrap();
    assert_eq!(v.gpus().count(), 2);
    assert_eq!(v.cpus().count(), 1);
    let files = v.pages_files();
    assert_eq!(
        files[0].0,
        ImageName::Pages {
            id: 5,
            gpu_id: 0xaaaa
        }
    );
    // VRAM and GTT BOs of the GPU in bucket order; doorbell and userptr are not saved.
    assert_eq!(
        files[0].1.bos(),
        &[
            PagesBo {
                entry: 0,
                size: 0x20_0000,
                checksum: None
            },
            PagesBo {
                entry: 3,
                size: 0x3000,
                checksum: None
            }
        ]
    );
    assert_eq!(files[0].1.total_len(), 0x20_3000);
    assert_eq!(files[1].1.total_len(), 0x1000);
}

#[test]
fn counts_must_match_entries() {
    let mut m = good_kfd();
    m.num_of_bos = 1 << 32;
    m.num_of_gpus = 3;
    m.num_of_cpus = 0;
    let p = problems(&m);
    assert!(
        p.contains(
            &"amdgpu-kfd-5.img: criu_kfd.num_of_bos: is 4294967296 but the image has 5 bo entries"
                .into()
        ),
        "{p:?}"
    );
    assert!(
        p.iter()
            .any(|s| s.contains("criu_kfd.num_of_gpus: is 3 but the image has 2 gpu")),
        "{p:?}"
    );
    assert!(
        p.iter()
            .any(|s| s.contains("criu_kfd.num_of_cpus: is 0 but the image has 1 cpu")),
        "{p:?}"
    );
    assert!(matches!(ValidatedKfd::new(5, m), Err(Error::Invalid(v)) if v.len() == 3));
}

#[test]
fn bo_rules_name_the_entry_and_field() {
    let mut m = good_kfd();
    m.bo_entries[1].gpu_id = 0xcccc;
    m.bo_entries[2].addr = u64::MAX - 0x10;
    m.bo_entries[3].size = 0x3001;
    m.bo_entries[4].alloc_flags = flags::KFD_VRAM | flags::KFD_GTT;
    let p = problems(&m);
    assert!(
        p.contains(
            &"amdgpu-kfd-5.img: criu_kfd.bo_entries[1].gpu_id: 0xcccc is not a checkpointed gpu"
                .into()
        ),
        "{p:?}"
    );
    assert!(
        p.iter().any(
            |s| s.starts_with("amdgpu-kfd-5.img: criu_kfd.bo_entries[2].size: addr")
                && s.ends_with("overflows")
        ),
        "{p:?}"
    );
    assert!(
        p.iter()
            .any(|s| s.contains("bo_entries[3].size: 0x3001 is not a multiple")),
        "{p:?}"
    );
    assert!(
        p.iter()
            .any(|s| s
                .contains("bo_entries[4].alloc_flags: 0x3 does not name exactly one memory type")),
        "{p:?}"
    );
    assert!(
        p.iter()
            .any(|s| s.contains("bo_entries[4].size: 0x7b is not a multiple")),
        "{p:?}"
    );
    assert_eq!(p.len(), 5, "{p:?}");
}

#[test]
fn userptr_sizes_need_not_be_page_multiples() {
    let m = good_kfd();
    assert_eq!(m.bo_entries[4].size, 123);
    assert!(problems(&m).is_empty());
}

#[test]
fn device_rules() {
    let mut m = good_kfd();
    m.device_entries[2].gpu_id = 0xaaaa;
    m.device_entries[1].iolinks[1].node_to_id = 9;
    m.device_entries[0].node_id = 2;
    let p = problems(&m);
    assert!(
        p.iter()
            .any(|s| s.contains("device_entries[2].gpu_id: gpu id 0xaaaa appears twice")),
        "{p:?}"
    );
    assert!(
        p.iter().any(|s| s
            .contains("device_entries[1].iolinks[1].node_to_id: no device entry has node id 9")),
        "{p:?}"
    );
    assert!(
        p.iter()
            .any(|s| s.contains("device_entries[2].node_id: node id 2 appears twice")),
        "{p:?}"
    );

    let mut m = good_kfd();
    m.device_entries[1].cpu_cores_count = 4;
    m.device_entries[0].cpu_cores_count = 0;
    let p = problems(&m);
    assert!(
        p.iter()
            .any(|s| s.contains("device_entries[1].cpu_cores_count")),
        "{p:?}"
    );
    assert!(
        p.iter()
            .any(|s| s.contains("device_entries[0].gpu_id: 0 on an entry without cpu cores")),
        "{p:?}"
    );
}

#[test]
fn checksums_only_on_saved_bos_and_pages_totals_fit() {
    let mut m = good_kfd();
    m.bo_entries[2].content_checksum = Some(1);
    m.bo_entries[0].size = !0xfff;
    m.bo_entries[0].addr = 0;
    m.bo_entries[3].addr = 0;
    let p = problems(&m);
    assert!(
        p.iter().any(|s| s
            .contains("bo_entries[2].content_checksum: set on a bo whose contents are not saved")),
        "{p:?}"
    );
    assert!(p.iter().any(|s| s.contains("bo_entries[3].size: the gpu's pages file would exceed 2^64 bytes")), "{p:?}");
}

#[test]
fn newer_format_is_reported() {
    let mut m = good_kfd();
    m.format_version = Some(99);
    let p = problems(&m);
    assert!(
        p.iter()
            .any(|s| s.contains("criu_kfd.format_version: 99 is newer")),
        "{p:?}"
    );
}

fn good_render() -> CriuRenderNode {
    CriuRenderNode {
        gpu_id: 0xaaaa,
        id: 7,
        drm_render_minor: 128,
        num_of_bos: 2,
        bo_entries: vec![
            DrmBoEntry {
                addr: 0x10_0000,
                size: 0x2000,
                preferred_domains: flags::GEM_DOMAIN_VRAM,
                handle: 1,
                num_of_vms: 1,
                vm_entries: vec![DrmVmEntry {
                    addr: 0x10_0000,
                    size: 0x2000,
                    offset: 0,
                    flags: 0,
                }],
                ..Default::default()
            },
            DrmBoEntry {
                size: 0x1000,
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
    }
}

#[test]
fn render_node_rules() {
    let v = ValidatedRenderNode::new(7, good_render()).unwrap();
    let (name, layout) = v.drm_pages(0).unwrap();
    assert_eq!(name.to_string(), "amdgpu-drm-pages-7-128-0000.img");
    assert_eq!(layout.total_len(), 0x2000);
    assert!(v.message().bo_entries[0].restore_needs_contents());
    assert!(!v.message().bo_entries[1].restore_needs_contents());
    assert!(v.drm_pages(2).is_none());

    let mut m = good_render();
    m.gpu_id = 0;
    m.num_of_bos = 3;
    m.bo_entries[0].num_of_vms = 2;
    m.bo_entries[0].vm_entries[0].offset = 0x1000;
    m.bo_entries[1].size = 0x1800;
    let p: Vec<String> = ValidatedRenderNode::problems(7, &m)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        p.contains(
            &"amdgpu-renderD-7.img: criu_render_node.gpu_id: is 0, not a gpu (and no device \
              entry describes the gpu)"
                .into()
        ),
        "{p:?}"
    );
    assert!(
        p.iter()
            .any(|s| s.contains("criu_render_node.num_of_bos: is 3 but the image has 2")),
        "{p:?}"
    );
    assert!(
        p.iter()
            .any(|s| s.contains("bo_entries[0].num_of_vms: is 2 but the bo has 1")),
        "{p:?}"
    );
    assert!(
        p.iter().any(|s| s
            .contains("bo_entries[0].vm_entries[0].offset: mapping 0x1000+0x2000 extends past")),
        "{p:?}"
    );
    assert!(
        p.iter()
            .any(|s| s.contains("bo_entries[1].size: 0x1800 is not a multiple")),
        "{p:?}"
    );
    assert_eq!(p.len(), 5, "{p:?}");
}

/// A render-only image (gpu_id 0) is valid with a device entry of a GPU
/// that names the node's render minor, and only then.
#[test]
fn render_only_rules() {
    let mut m = good_render();
    m.gpu_id = 0;
    m.device = Some(gpu(1, 0x4a1b, &[0]));
    assert_eq!(m.device.as_ref().unwrap().drm_render_minor, 128);
    let v = ValidatedRenderNode::new(7, m.clone()).expect("a render-only image");
    assert!(v.message().is_render_only());

    let mut bad = m.clone();
    let device = bad.device.as_mut().unwrap();
    device.gpu_id = 0;
    device.drm_render_minor = 130;
    let p: Vec<String> = ValidatedRenderNode::problems(7, &bad)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        p,
        vec![
            "amdgpu-renderD-7.img: criu_render_node.device.gpu_id: is 0: the device entry \
             does not describe a gpu"
                .to_owned(),
            "amdgpu-renderD-7.img: criu_render_node.device.drm_render_minor: is 130 but the \
             node is renderD128"
                .to_owned(),
        ]
    );

    // A KFD-mapped image may carry the device entry too.
    let mut mapped = m;
    mapped.gpu_id = 0xaaaa;
    assert!(!ValidatedRenderNode::new(7, mapped)
        .unwrap()
        .message()
        .is_render_only());
}

/// A render-node image whose BOs reference chunks stored elsewhere names
/// its GPU in tag 152 with `gpu_id` 0 (so the C plugin refuses it); the
/// validated message has the GPU back in `gpu_id`. Every other combination
/// is a problem, as are parent references without the parent's dump id.
#[test]
fn render_images_with_references_name_their_gpu_in_tag_152() {
    let with_sources = |sources: &[u8]| {
        let mut m = good_render();
        m.chunk_size = Some(0x1000);
        m.bo_entries[0].chunk_digests = Some(amdgpu_image::chunks::encode_digests(&[1, 2]));
        m.bo_entries[0].chunk_sources = Some(sources.to_vec());
        m
    };
    let problems = |m: &CriuRenderNode| -> Vec<String> {
        ValidatedRenderNode::problems(7, m)
            .iter()
            .map(ToString::to_string)
            .collect()
    };

    let mut m = with_sources(&[0, 1]);
    m.gpu_id = 0;
    m.referencing_gpu_id = Some(0xaaaa);
    let v = ValidatedRenderNode::new(7, m.clone()).unwrap();
    assert_eq!(v.message().gpu_id, 0xaaaa);
    assert!(v.has_references() && !v.message().is_render_only());
    // Only the chunk stored here is in the file; a reader ignoring the
    // chunk fields expects the whole BO.
    assert_eq!(v.drm_pages(0).unwrap().1.total_len(), 0x1000);
    assert_eq!(v.compat_drm_pages(0).unwrap().1.total_len(), 0x2000);
    let standalone = v.into_standalone_message();
    assert_eq!(standalone.gpu_id, 0xaaaa);
    assert!(standalone.referencing_gpu_id.is_none());
    assert!(standalone.bo_entries[0].chunk_sources.is_none());

    // References with the GPU in gpu_id: the C plugin would restore zeros.
    let p = problems(&with_sources(&[0, 1]));
    assert!(
        p.iter()
            .any(|s| s.contains("criu_render_node.gpu_id: is 0xaaaa in an image whose bos")),
        "{p:?}"
    );
    // Both set, or tag 152 naming no GPU.
    let mut both = with_sources(&[0, 1]);
    both.referencing_gpu_id = Some(0xaaaa);
    assert!(problems(&both)
        .iter()
        .any(|s| s.contains("referencing_gpu_id: is set but gpu_id is 0xaaaa")));
    m.referencing_gpu_id = Some(0);
    assert!(problems(&m)
        .iter()
        .any(|s| s.contains("referencing_gpu_id: is 0, not a gpu")));
    // Chunks from the parent need the parent's dump id.
    let mut parent = with_sources(&[2, 0]);
    parent.gpu_id = 0;
    parent.referencing_gpu_id = Some(0xaaaa);
    assert!(problems(&parent)
        .iter()
        .any(|s| s.contains("criu_render_node.parent_dump_id: bos reference the parent")));
    parent.parent_dump_id = Some(vec![7; 16]);
    assert_eq!(problems(&parent), Vec::<String>::new());
    // Sources that do not fit the digests are named.
    let mut bad = with_sources(&[0]);
    bad.gpu_id = 0;
    bad.referencing_gpu_id = Some(0xaaaa);
    assert!(problems(&bad)
        .iter()
        .any(|s| s.contains("bo_entries[0].chunk_digests: 1 chunk sources for 2 chunks")));
}

#[test]
fn hsakmt_shared_memory_sizes_are_bounded() {
    // What libhsakmt makes (its 8-byte shared table) and the range around
    // it validate; a size that cannot hold the magic, or that restore would
    // create as a huge shared-memory object, does not.
    for ok in [0, 4, 8, 4096, amdgpu_image::validate::MAX_SHARED_MEM_SIZE] {
        let mut msg = good_kfd();
        msg.shared_mem_size = ok;
        assert_eq!(problems(&msg), Vec::<String>::new(), "{ok}");
    }
    for bad in [
        1,
        3,
        amdgpu_image::validate::MAX_SHARED_MEM_SIZE + 1,
        1 << 40,
        u64::MAX,
    ] {
        let mut msg = good_kfd();
        msg.shared_mem_size = bad;
        let p = problems(&msg);
        assert!(
            p.len() == 1 && p[0].starts_with("amdgpu-kfd-5.img: criu_kfd.shared_mem_size: "),
            "{bad}: {p:?}"
        );
    }
}
