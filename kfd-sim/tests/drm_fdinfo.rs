//! A render file's fdinfo as amdgpu prints it (Linux 6.13+): the drm core's
//! keys, amdgpu's `drm_print_memory_stats` block per placement and its
//! legacy keys, counting the BOs of the file's VM (its GEM handles, once
//! each) and the VM's page tables.

mod drm_support;

use drm_support::render;
use kfd::{GemCreate, RenderNode};
use kfd_sys as k;

/// The value of `key` in `text`, in bytes.
fn bytes(text: &str, key: &str) -> u64 {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key} in {text}"));
    let value = line.trim_start_matches(':').trim();
    match value.split_once(' ') {
        Some((n, "KiB")) => n.parse::<u64>().unwrap() << 10,
        Some((n, "MiB")) => n.parse::<u64>().unwrap() << 20,
        _ => value.parse().unwrap(),
    }
}

#[test]
fn the_fdinfo_of_a_render_file_counts_its_vm() {
    let r = render();
    let node = RenderNode::from_fd(&r.drv, std::os::fd::AsFd::as_fd(&r.fd));
    let empty = node.fdinfo().unwrap();
    for key in [
        "pos:\t",
        "flags:\t",
        "drm-driver:\tamdgpu\n",
        "drm-client-id:\t",
        "drm-pdev:\t",
        "pasid:\t",
        "drm-total-cpu:\t",
        "drm-total-gtt:\t",
        "drm-total-vram:\t",
        "drm-resident-vram:\t",
        "drm-total-doorbell:\t",
        "drm-memory-gtt: \t",
    ] {
        assert!(empty.contains(key), "{key:?} in {empty}");
    }
    // The root page directory alone.
    assert_eq!(bytes(&empty, "drm-total-vram"), 4096);
    assert_eq!(bytes(&empty, "drm-total-gtt"), 0);

    let bo = node
        .gem_create(&GemCreate {
            size: 3 << 20,
            alignment: 4096,
            domains: u64::from(k::AMDGPU_GEM_DOMAIN_VRAM),
            flags: 0,
        })
        .unwrap();
    let created = node.fdinfo().unwrap();
    assert_eq!(bytes(&created, "drm-total-vram"), (3 << 20) + 4096);
    assert_eq!(bytes(&created, "drm-memory-vram"), (3 << 20) + 4096);
    // Mapped across a 2 MiB boundary: two page-table blocks, a directory
    // of each higher level.
    node.gem_va_map(
        bo,
        1 << 30,
        0,
        3 << 20,
        k::AMDGPU_VM_PAGE_READABLE | k::AMDGPU_VM_PAGE_WRITEABLE,
    )
    .unwrap();
    let mapped = node.fdinfo().unwrap();
    assert_eq!(
        bytes(&mapped, "drm-total-vram"),
        (3 << 20) + 4096 * (1 + 2 + 1 + 1)
    );
    node.gem_close(bo).unwrap();
    let closed = node.fdinfo().unwrap();
    assert_eq!(bytes(&closed, "drm-total-vram"), 4096);
}
