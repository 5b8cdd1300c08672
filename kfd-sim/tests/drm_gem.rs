//! Render-node GEM ioctls through `kfd::Driver`: dispatch rules, VERSION,
//! GEM_CREATE/CLOSE/MMAP/USERPTR, GEM_VA, GEM_OP, GEM_LIST_HANDLES,
//! GEM_CHANGE_HANDLE and PRIME, each with its success and error paths.

mod drm_support;

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use drm_support::{errno, open_again, open_render, render, sim_with, HostBuf};
use kfd::{Driver, FdKind};
use kfd_sim::FaultSpec;
use kfd_sys as k;

const MIB: u64 = 1 << 20;
const RWX: u32 =
    k::AMDGPU_VM_PAGE_READABLE | k::AMDGPU_VM_PAGE_WRITEABLE | k::AMDGPU_VM_PAGE_EXECUTABLE;

#[test]
fn dispatch_checks_type_number_and_render_permission() {
    let r = render();
    let mut v = k::kfd_ioctl_get_version_args::default();
    assert_eq!(
        errno(r.ioctl(k::AMDKFD_IOC_GET_VERSION, &mut v)),
        libc::ENOTTY
    );
    let mut raw = [0u8; 64];
    // An amdgpu command number with no ioctl behind it.
    let unknown = k::_IOWR::<[u8; 8]>(b'd', 0x40 + 0x3f);
    assert_eq!(errno(r.ioctl(unknown, &mut raw)), libc::EINVAL);
    // GEM_FLINK (0x0a) is not allowed on render nodes.
    let flink = k::_IOWR::<[u8; 8]>(b'd', 0x0a);
    assert_eq!(errno(r.ioctl(flink, &mut raw)), libc::EACCES);
}

#[test]
fn version_reports_amdgpu_and_true_string_lengths() {
    let r = render();
    let mut name = [0u8; 16];
    let mut desc = [0u8; 3];
    let mut v = k::drm_version {
        name_len: name.len(),
        name: name.as_mut_ptr() as usize,
        desc_len: desc.len(),
        desc: desc.as_mut_ptr() as usize,
        ..Default::default()
    };
    r.ioctl(k::DRM_IOCTL_VERSION, &mut v).unwrap();
    assert_eq!(
        (v.version_major, v.version_minor, v.version_patchlevel),
        (3, 58, 0)
    );
    assert_eq!(v.name_len, 6);
    assert_eq!(&name[..6], b"amdgpu");
    // A short buffer gets a prefix, the length reports the whole string.
    assert_eq!(v.desc_len, 7);
    assert_eq!(&desc, b"AMD");
    assert_eq!(v.date_len, 8);
}

#[test]
fn smaller_and_larger_argument_sizes_are_tolerated() {
    let r = render();
    // VERSION with only the first 16 bytes: major/minor/patch come back.
    let mut small = [0u8; 16];
    let req = k::_IOWR::<[u8; 16]>(b'd', 0x00);
    r.ioctl(req, &mut small).unwrap();
    assert_eq!(i32::from_ne_bytes(small[0..4].try_into().unwrap()), 3);
    assert_eq!(i32::from_ne_bytes(small[4..8].try_into().unwrap()), 58);
    // GEM_VA with the 64-byte ROCm layout (timeline syncobj fields) works.
    let h = r.gem_create(MIB, k::AMDGPU_GEM_DOMAIN_VRAM, 0).unwrap();
    let mut big = [0u8; 64];
    big[0..4].copy_from_slice(&h.to_ne_bytes());
    big[8..12].copy_from_slice(&k::AMDGPU_VA_OP_MAP.to_ne_bytes());
    big[12..16].copy_from_slice(&RWX.to_ne_bytes());
    big[16..24].copy_from_slice(&(64 * MIB).to_ne_bytes());
    big[32..40].copy_from_slice(&MIB.to_ne_bytes());
    let req = k::_IOW::<[u8; 64]>(b'd', 0x48);
    r.ioctl(req, &mut big).unwrap();
    // The mapping exists: mapping the same range again overlaps.
    assert_eq!(errno(r.map(h, 64 * MIB, MIB)), libc::EINVAL);
}

#[test]
fn direction_is_the_intersection_of_caller_and_kernel() {
    let r = render();
    // GEM_CREATE issued as write-only: the BO is made, nothing is copied back.
    let mut a = k::drm_amdgpu_gem_create_in {
        bo_size: 4096,
        alignment: 0,
        domains: k::AMDGPU_GEM_DOMAIN_GTT.into(),
        domain_flags: 0,
    };
    let write_only = k::_IOW::<k::drm_amdgpu_gem_create>(b'd', 0x40);
    r.ioctl(write_only, &mut a).unwrap();
    assert_eq!(a.bo_size, 4096);
    // The handle was 1: the next create gets 2.
    assert_eq!(r.gem_create(4096, k::AMDGPU_GEM_DOMAIN_GTT, 0).unwrap(), 2);
}

#[test]
fn injected_faults_fail_the_named_ioctl_once() {
    let r = render();
    r.sim
        .inject("AMDGPU_GEM_CREATE:2=ENOMEM".parse::<FaultSpec>().unwrap());
    assert_eq!(r.gem_create(4096, k::AMDGPU_GEM_DOMAIN_GTT, 0).unwrap(), 1);
    assert_eq!(
        errno(r.gem_create(4096, k::AMDGPU_GEM_DOMAIN_GTT, 0)),
        libc::ENOMEM
    );
    assert_eq!(r.gem_create(4096, k::AMDGPU_GEM_DOMAIN_GTT, 0).unwrap(), 2);
}

#[test]
fn gem_create_validates_and_clears_vram() {
    let r = render();
    assert_eq!(
        errno(r.gem_create(4096, k::AMDGPU_GEM_DOMAIN_DOORBELL, 0)),
        libc::EINVAL
    );
    assert_eq!(errno(r.gem_create(4096, 0x100, 0)), libc::EINVAL);
    assert_eq!(
        errno(r.gem_create(
            4096,
            k::AMDGPU_GEM_DOMAIN_VRAM,
            k::AMDGPU_GEM_CREATE_CP_MQD_GFX9
        )),
        libc::EINVAL
    );
    assert_eq!(
        errno(r.gem_create(4096, k::AMDGPU_GEM_DOMAIN_VRAM, 1 << 40)),
        libc::EINVAL
    );
    assert_eq!(
        errno(r.gem_create(0, k::AMDGPU_GEM_DOMAIN_VRAM, 0)),
        libc::EINVAL
    );
    assert_eq!(
        errno(r.gem_create(4096, k::AMDGPU_GEM_DOMAIN_GDS, 0)),
        libc::ENOMEM
    );
    let h = r
        .gem_create(
            3 * 4096 + 1,
            k::AMDGPU_GEM_DOMAIN_VRAM,
            k::AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED,
        )
        .unwrap();
    assert_eq!(h, 1);
    let map = r.cpu_map(h, 4 * 4096);
    assert!(map.bytes().iter().all(|b| *b == 0), "new VRAM is cleared");
}

#[test]
fn gem_create_falls_back_from_vram_to_gtt() {
    let config = kfd_sim::SimConfig {
        system_memory_bytes: 1 << 44,
        ..Default::default()
    };
    let r = open_render(&drm_support::sim_with_config(1, 90010, config), 0);
    let vram = r.sim.gpus()[0].vram_bytes;
    // Larger than VRAM: placed in GTT rather than failing.
    let h = r
        .gem_create(vram + 4096, k::AMDGPU_GEM_DOMAIN_VRAM, 0)
        .unwrap();
    let mut info = k::drm_amdgpu_gem_create_in::default();
    let mut op = k::drm_amdgpu_gem_op {
        handle: h,
        op: k::AMDGPU_GEM_OP_GET_GEM_CREATE_INFO,
        value: &mut info as *mut k::drm_amdgpu_gem_create_in as u64,
        ..Default::default()
    };
    r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_OP, &mut op).unwrap();
    assert_eq!(
        info.domains,
        u64::from(k::AMDGPU_GEM_DOMAIN_VRAM | k::AMDGPU_GEM_DOMAIN_GTT)
    );
    // Larger than VRAM and GTT together: ENOMEM.
    assert_eq!(
        errno(r.gem_create(1 << 45, k::AMDGPU_GEM_DOMAIN_VRAM, 0)),
        libc::ENOMEM
    );
    // VRAM is used up by earlier BOs: the next VRAM request lands in GTT.
    r.close(h).unwrap();
    let all = r.gem_create(vram, k::AMDGPU_GEM_DOMAIN_VRAM, 0).unwrap();
    op.handle = r.gem_create(4096, k::AMDGPU_GEM_DOMAIN_VRAM, 0).unwrap();
    r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_OP, &mut op).unwrap();
    assert_eq!(
        info.domains,
        u64::from(k::AMDGPU_GEM_DOMAIN_VRAM | k::AMDGPU_GEM_DOMAIN_GTT)
    );
    r.close(all).unwrap();
    op.handle = r.gem_create(4096, k::AMDGPU_GEM_DOMAIN_VRAM, 0).unwrap();
    r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_OP, &mut op).unwrap();
    assert_eq!(info.domains, u64::from(k::AMDGPU_GEM_DOMAIN_VRAM));
}

#[test]
fn gem_close_frees_and_rejects_unknown_handles() {
    let r = render();
    let before = r.sim.accounting();
    let h = r.gem_create(MIB, k::AMDGPU_GEM_DOMAIN_GTT, 0).unwrap();
    r.map(h, 2 * MIB, MIB).unwrap();
    r.close(h).unwrap();
    assert_eq!(errno(r.close(h)), libc::EINVAL);
    assert_eq!(errno(r.close(77)), libc::EINVAL);
    assert_eq!(r.sim.accounting(), before);
    // The handle's mapping left the VM with it.
    let h2 = r.gem_create(MIB, k::AMDGPU_GEM_DOMAIN_GTT, 0).unwrap();
    r.map(h2, 2 * MIB, MIB).unwrap();
}

#[test]
fn gem_mmap_gives_distinct_page_offsets_and_refuses_userptr_and_invisible() {
    let r = render();
    let a = r.gem_create(8192, k::AMDGPU_GEM_DOMAIN_GTT, 0).unwrap();
    let b = r.gem_create(4096, k::AMDGPU_GEM_DOMAIN_VRAM, 0).unwrap();
    let (oa, ob) = (r.mmap_offset(a).unwrap(), r.mmap_offset(b).unwrap());
    assert!(oa >= 1 << 32 && ob >= 1 << 32);
    assert_eq!((oa % 4096, ob % 4096), (0, 0));
    assert!(oa + 8192 <= ob || ob + 4096 <= oa);
    let c = r
        .gem_create(
            4096,
            k::AMDGPU_GEM_DOMAIN_VRAM,
            k::AMDGPU_GEM_CREATE_NO_CPU_ACCESS,
        )
        .unwrap();
    assert_eq!(errno(r.mmap_offset(c)), libc::EPERM);
    let host = HostBuf::new(4096, |_| 0);
    let u = r.userptr(&host).unwrap();
    assert_eq!(errno(r.mmap_offset(u)), libc::EPERM);
    assert_eq!(errno(r.mmap_offset(99)), libc::ENOENT);
}

#[test]
fn gem_userptr_rules() {
    let r = render();
    let host = HostBuf::new(2 * 4096, |_| 0);
    let mut a = k::drm_amdgpu_gem_userptr {
        addr: host.addr() + 16,
        size: 4096,
        flags: k::AMDGPU_GEM_USERPTR_REGISTER,
        handle: 0,
    };
    assert_eq!(
        errno(r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_USERPTR, &mut a)),
        libc::EINVAL
    );
    a.addr = host.addr();
    a.size = 100;
    assert_eq!(
        errno(r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_USERPTR, &mut a)),
        libc::EINVAL
    );
    a.size = 4096;
    a.flags = k::AMDGPU_GEM_USERPTR_REGISTER | 0x10;
    assert_eq!(
        errno(r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_USERPTR, &mut a)),
        libc::EINVAL
    );
    a.flags = k::AMDGPU_GEM_USERPTR_ANONONLY;
    assert_eq!(
        errno(r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_USERPTR, &mut a)),
        libc::EACCES
    );
    a.flags = k::AMDGPU_GEM_USERPTR_READONLY;
    r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_USERPTR, &mut a).unwrap();
    assert_eq!(a.handle, 1);
    // VALIDATE looks the pages up: nothing is mapped below mmap_min_addr.
    let mut low = k::drm_amdgpu_gem_userptr {
        addr: 0x1000,
        size: 0x1000,
        flags: k::AMDGPU_GEM_USERPTR_REGISTER | k::AMDGPU_GEM_USERPTR_VALIDATE,
        handle: 0,
    };
    assert_eq!(
        errno(r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_USERPTR, &mut low)),
        libc::EFAULT
    );
    // ANONONLY refuses file-backed memory (a BO's own CPU mapping).
    let bo = r.gem_create(4096, k::AMDGPU_GEM_DOMAIN_GTT, 0).unwrap();
    let map = r.cpu_map(bo, 4096);
    let mut file_backed = k::drm_amdgpu_gem_userptr {
        addr: map.bytes().as_ptr() as u64,
        size: 4096,
        flags: k::AMDGPU_GEM_USERPTR_ANONONLY
            | k::AMDGPU_GEM_USERPTR_REGISTER
            | k::AMDGPU_GEM_USERPTR_VALIDATE,
        handle: 0,
    };
    assert_eq!(
        errno(r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_USERPTR, &mut file_backed)),
        libc::EPERM
    );
    let before = r.sim.accounting();
    let pinned = r.userptr(&host).unwrap();
    assert!(r.sim.accounting() != before, "a userptr BO is accounted");
    r.close(pinned).unwrap();
    assert_eq!(r.sim.accounting(), before);
}

#[test]
fn gem_va_range_alignment_overlap_and_unmap_rules() {
    let r = render();
    let h = r.gem_create(2 * MIB, k::AMDGPU_GEM_DOMAIN_VRAM, 0).unwrap();
    let map = k::AMDGPU_VA_OP_MAP;
    assert_eq!(
        errno(r.va(map, h, 0x8000, 0, 4096, RWX)),
        libc::EINVAL,
        "below 64 KiB"
    );
    assert_eq!(
        errno(r.va(map, h, 0x0000_8000_0000_0000, 0, 4096, RWX)),
        libc::EINVAL,
        "in the hole"
    );
    assert_eq!(
        errno(r.va(map, h, 0xFFFF_FFFF_FFFF_F000, 0, 4096, RWX)),
        libc::EINVAL,
        "top reserve"
    );
    assert_eq!(
        errno(r.va(map, h, MIB + 512, 0, 4096, RWX)),
        libc::EINVAL,
        "va alignment"
    );
    assert_eq!(
        errno(r.va(map, h, MIB, 100, 4096, RWX)),
        libc::EINVAL,
        "offset alignment"
    );
    assert_eq!(errno(r.va(map, h, MIB, 0, 0, RWX)), libc::EINVAL, "empty");
    assert_eq!(
        errno(r.va(map, h, MIB, 4096, 2 * MIB, RWX)),
        libc::EINVAL,
        "past the bo"
    );
    assert_eq!(
        errno(r.va(map, h, MIB, 0, 4096, 1 << 12)),
        libc::EINVAL,
        "unknown flag"
    );
    assert_eq!(
        errno(r.va(9, h, MIB, 0, 4096, RWX)),
        libc::EINVAL,
        "unknown op"
    );
    assert_eq!(
        errno(r.va(map, 42, MIB, 0, 4096, RWX)),
        libc::ENOENT,
        "unknown handle"
    );
    r.va(map, h, 4 * MIB, 0, 2 * MIB, RWX).unwrap();
    // A high (sign-extended) VA maps into the upper half.
    r.va(map, h, 0xFFFF_8000_0000_0000, 0, 4096, RWX).unwrap();
    for (va, size) in [
        (4 * MIB, 4096),
        (5 * MIB, MIB),
        (3 * MIB, 2 * MIB),
        (2 * MIB, 8 * MIB),
    ] {
        assert_eq!(
            errno(r.va(map, h, va, 0, size, RWX)),
            libc::EINVAL,
            "overlap {va:#x}+{size:#x}"
        );
    }
    let unmap = k::AMDGPU_VA_OP_UNMAP;
    assert_eq!(
        errno(r.va(unmap, h, 5 * MIB, 0, 4096, RWX)),
        libc::ENOENT,
        "not a mapping start"
    );
    let other = r.gem_create(4096, k::AMDGPU_GEM_DOMAIN_GTT, 0).unwrap();
    assert_eq!(
        errno(r.va(unmap, other, 4 * MIB, 0, 4096, RWX)),
        libc::ENOENT,
        "another bo's mapping"
    );
    r.va(unmap, h, 4 * MIB, 0, 2 * MIB, RWX).unwrap();
    assert_eq!(
        errno(r.va(unmap, h, 4 * MIB, 0, 2 * MIB, RWX)),
        libc::ENOENT
    );
    r.va(map, h, 5 * MIB, 0, MIB, RWX).unwrap();
    // REPLACE takes over a range; CLEAR empties one.
    r.va(k::AMDGPU_VA_OP_REPLACE, other, 5 * MIB, 0, 4096, RWX)
        .unwrap();
    r.va(k::AMDGPU_VA_OP_CLEAR, 0, 5 * MIB, 0, MIB, 0).unwrap();
    r.va(map, other, 5 * MIB, 0, 4096, RWX).unwrap();
}

fn mapping_info(
    r: &drm_support::Render,
    handle: u32,
    capacity: u32,
) -> (u32, Vec<k::drm_amdgpu_gem_vm_entry>) {
    let mut entries = vec![k::drm_amdgpu_gem_vm_entry::default(); capacity as usize];
    let mut op = k::drm_amdgpu_gem_op {
        handle,
        op: k::AMDGPU_GEM_OP_GET_MAPPING_INFO,
        value: entries.as_mut_ptr() as u64,
        num_entries: capacity,
        padding: 0,
    };
    r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_OP, &mut op).unwrap();
    (op.num_entries, entries)
}

#[test]
fn gem_op_create_info_placement_and_mapping_info() {
    let r = render();
    let h = r
        .gem_create(
            MIB,
            k::AMDGPU_GEM_DOMAIN_VRAM,
            k::AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED,
        )
        .unwrap();
    let mut info = k::drm_amdgpu_gem_create_in::default();
    let mut op = k::drm_amdgpu_gem_op {
        handle: h,
        op: k::AMDGPU_GEM_OP_GET_GEM_CREATE_INFO,
        value: &mut info as *mut k::drm_amdgpu_gem_create_in as u64,
        ..Default::default()
    };
    r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_OP, &mut op).unwrap();
    assert_eq!(info.bo_size, MIB);
    assert_eq!(info.alignment, 4096);
    assert_eq!(info.domains, u64::from(k::AMDGPU_GEM_DOMAIN_VRAM));
    assert_eq!(info.domain_flags, k::AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED);

    op.op = k::AMDGPU_GEM_OP_SET_PLACEMENT;
    op.value = u64::from(k::AMDGPU_GEM_DOMAIN_GTT | k::AMDGPU_GEM_DOMAIN_GDS);
    r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_OP, &mut op).unwrap();
    op.op = k::AMDGPU_GEM_OP_GET_GEM_CREATE_INFO;
    op.value = &mut info as *mut k::drm_amdgpu_gem_create_in as u64;
    r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_OP, &mut op).unwrap();
    assert_eq!(info.domains, u64::from(k::AMDGPU_GEM_DOMAIN_GTT));

    let host = HostBuf::new(4096, |_| 0);
    let u = r.userptr(&host).unwrap();
    let mut place = k::drm_amdgpu_gem_op {
        handle: u,
        op: k::AMDGPU_GEM_OP_SET_PLACEMENT,
        value: u64::from(k::AMDGPU_GEM_DOMAIN_GTT),
        ..Default::default()
    };
    assert_eq!(
        errno(r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_OP, &mut place)),
        libc::EPERM
    );
    place.op = 7;
    assert_eq!(
        errno(r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_OP, &mut place)),
        libc::EINVAL
    );
    place.handle = 99;
    assert_eq!(
        errno(r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_OP, &mut place)),
        libc::ENOENT
    );

    assert_eq!(mapping_info(&r, h, 4).0, 0);
    let mut padded = k::drm_amdgpu_gem_op {
        handle: h,
        op: k::AMDGPU_GEM_OP_GET_MAPPING_INFO,
        padding: 1,
        ..Default::default()
    };
    assert_eq!(
        errno(r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_OP, &mut padded)),
        libc::EINVAL
    );
    r.va(k::AMDGPU_VA_OP_MAP, h, 8 * MIB, 4096, 8192, RWX)
        .unwrap();
    r.va(
        k::AMDGPU_VA_OP_MAP,
        h,
        2 * MIB,
        0,
        4096,
        k::AMDGPU_VM_PAGE_READABLE,
    )
    .unwrap();
    // Too small an array: only the count comes back.
    let (n, entries) = mapping_info(&r, h, 1);
    assert_eq!(n, 2);
    assert_eq!(entries[0], k::drm_amdgpu_gem_vm_entry::default());
    let (n, entries) = mapping_info(&r, h, 4);
    assert_eq!(n, 2);
    assert_eq!(
        (entries[0].addr, entries[0].size, entries[0].offset),
        (2 * MIB, 4096, 0)
    );
    assert_eq!(
        (entries[1].addr, entries[1].size, entries[1].offset),
        (8 * MIB, 8192, 4096)
    );
    // Flags are PTE bits: readable 1<<5, writeable 1<<6, executable 1<<4.
    assert_eq!(entries[0].flags, 1 << 5);
    assert_eq!(entries[1].flags, (1 << 5) | (1 << 6) | (1 << 4));
}

fn list_handles(
    r: &drm_support::Render,
    capacity: u32,
) -> (u32, Vec<k::drm_amdgpu_gem_list_handles_entry>) {
    let mut entries = vec![k::drm_amdgpu_gem_list_handles_entry::default(); capacity as usize];
    let mut a = k::drm_amdgpu_gem_list_handles {
        entries: entries.as_mut_ptr() as u64,
        num_entries: capacity,
        padding: 0,
    };
    r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_LIST_HANDLES, &mut a)
        .unwrap();
    (a.num_entries, entries)
}

fn export(r: &drm_support::Render, handle: u32, flags: u32) -> std::io::Result<OwnedFd> {
    let mut p = k::drm_prime_handle {
        handle,
        flags,
        fd: -1,
    };
    r.ioctl(k::DRM_IOCTL_PRIME_HANDLE_TO_FD, &mut p)?;
    // SAFETY: PRIME_HANDLE_TO_FD succeeded: `fd` is a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(p.fd) })
}

fn import(r: &drm_support::Render, fd: i32) -> std::io::Result<u32> {
    let mut p = k::drm_prime_handle {
        handle: 0,
        flags: 0,
        fd,
    };
    r.ioctl(k::DRM_IOCTL_PRIME_FD_TO_HANDLE, &mut p)?;
    Ok(p.handle)
}

#[test]
fn gem_list_handles_capacity_count_and_import_flag() {
    let sim = sim_with(2, 90010);
    let r0 = open_render(&sim, 0);
    let r1 = open_render(&sim, 1);
    assert_eq!(list_handles(&r1, 0).0, 0);
    let a = r1
        .gem_create(
            MIB,
            k::AMDGPU_GEM_DOMAIN_VRAM,
            k::AMDGPU_GEM_CREATE_NO_CPU_ACCESS,
        )
        .unwrap();
    let shared = r0.gem_create(8192, k::AMDGPU_GEM_DOMAIN_GTT, 0).unwrap();
    let fd = export(&r0, shared, k::DRM_CLOEXEC).unwrap();
    let b = import(&r1, fd.as_raw_fd()).unwrap();
    let (n, entries) = list_handles(&r1, 1);
    assert_eq!(n, 2);
    assert_eq!(
        entries[0].gem_handle, 0,
        "nothing copied when the array is too small"
    );
    let (n, entries) = list_handles(&r1, 3);
    assert_eq!(n, 2);
    assert_eq!(
        (entries[0].gem_handle, entries[0].flags, entries[0].size),
        (a, 0, MIB)
    );
    assert_eq!(
        entries[0].preferred_domains,
        u64::from(k::AMDGPU_GEM_DOMAIN_VRAM)
    );
    assert_eq!(entries[0].alloc_flags, k::AMDGPU_GEM_CREATE_NO_CPU_ACCESS);
    assert_eq!(entries[0].alignment, 1, "alignment in pages");
    assert_eq!(entries[1].gem_handle, b);
    assert_eq!(entries[1].flags, k::AMDGPU_GEM_LIST_HANDLES_FLAG_IS_IMPORT);
    assert_eq!(entries[1].size, 8192);
}

#[test]
fn gem_change_handle_moves_a_handle() {
    let r = render();
    let a = r.gem_create(4096, k::AMDGPU_GEM_DOMAIN_GTT, 0).unwrap();
    let b = r.gem_create(4096, k::AMDGPU_GEM_DOMAIN_GTT, 0).unwrap();
    let offset = r.mmap_offset(a).unwrap();
    let mut c = k::drm_gem_change_handle {
        handle: a,
        new_handle: 100,
    };
    r.ioctl(k::DRM_IOCTL_GEM_CHANGE_HANDLE, &mut c).unwrap();
    assert_eq!(errno(r.mmap_offset(a)), libc::ENOENT);
    assert_eq!(r.mmap_offset(100).unwrap(), offset);
    c = k::drm_gem_change_handle {
        handle: 100,
        new_handle: b,
    };
    assert_eq!(
        errno(r.ioctl(k::DRM_IOCTL_GEM_CHANGE_HANDLE, &mut c)),
        libc::ENOSPC
    );
    c = k::drm_gem_change_handle {
        handle: 100,
        new_handle: 1 << 31,
    };
    assert_eq!(
        errno(r.ioctl(k::DRM_IOCTL_GEM_CHANGE_HANDLE, &mut c)),
        libc::EINVAL
    );
    c = k::drm_gem_change_handle {
        handle: 5,
        new_handle: 6,
    };
    assert_eq!(
        errno(r.ioctl(k::DRM_IOCTL_GEM_CHANGE_HANDLE, &mut c)),
        libc::ENOENT
    );
    c = k::drm_gem_change_handle {
        handle: 100,
        new_handle: 100,
    };
    r.ioctl(k::DRM_IOCTL_GEM_CHANGE_HANDLE, &mut c).unwrap();
    // The freed number is reused, and a re-import finds the moved handle.
    assert_eq!(r.gem_create(4096, k::AMDGPU_GEM_DOMAIN_GTT, 0).unwrap(), 1);
    let fd = export(&r, 100, 0).unwrap();
    assert_eq!(import(&r, fd.as_raw_fd()).unwrap(), 100);
}

#[test]
fn prime_export_and_import_share_the_object() {
    let sim = sim_with(1, 90010);
    let r = open_render(&sim, 0);
    let h = r
        .gem_create(
            2 * 4096,
            k::AMDGPU_GEM_DOMAIN_VRAM,
            k::AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED,
        )
        .unwrap();
    assert_eq!(
        errno(export(&r, h, 0x4)),
        libc::EINVAL,
        "unknown export flag"
    );
    assert_eq!(errno(export(&r, 55, 0)), libc::ENOENT);
    let host = HostBuf::new(4096, |_| 0);
    let u = r.userptr(&host).unwrap();
    assert_eq!(
        errno(export(&r, u, 0)),
        libc::EPERM,
        "userptr bos cannot be exported"
    );

    let fd = export(&r, h, k::DRM_CLOEXEC | k::DRM_RDWR).unwrap();
    assert_eq!(r.drv.fd_kind(fd.as_fd()).unwrap(), FdKind::DmaBuf);
    // SAFETY: lseek on an fd we own.
    let end = unsafe { libc::lseek(fd.as_raw_fd(), 0, libc::SEEK_END) };
    assert_eq!(end, 2 * 4096);
    // Same file: the same handle back.
    assert_eq!(import(&r, fd.as_raw_fd()).unwrap(), h);
    // Another file of the same device: a new handle on the same object.
    let other_fd = open_again(&sim, &r.drv, 0);
    let other = drm_support::Render {
        sim: sim.clone(),
        drv: r.drv.clone(),
        fd: other_fd,
    };
    let h2 = import(&other, fd.as_raw_fd()).unwrap();
    assert_eq!(import(&other, fd.as_raw_fd()).unwrap(), h2);
    let mut mine = r.cpu_map(h, 4096);
    mine.bytes_mut()[..5].copy_from_slice(b"hello");
    let theirs = other.cpu_map(h2, 4096);
    assert_eq!(&theirs.bytes()[..5], b"hello");

    assert_eq!(errno(import(&r, 9999)), libc::EBADF);
    let (p0, p1) = {
        let mut fds = [0; 2];
        // SAFETY: `fds` is a writable array of two ints.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: pipe(2) succeeded: both fds are new and ours.
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
    };
    assert_eq!(
        errno(import(&r, p0.as_raw_fd())),
        libc::EINVAL,
        "not a dma-buf"
    );
    drop(p1);
}

#[test]
fn foreign_imports_get_their_own_offset_on_the_importing_gpu() {
    let sim = sim_with(2, 90010);
    let r0 = open_render(&sim, 0);
    let r1 = open_render(&sim, 1);
    // Both GPUs hand out their first offsets from the same start.
    let local = r1.gem_create(8192, k::AMDGPU_GEM_DOMAIN_GTT, 0).unwrap();
    let shared = r0.gem_create(8192, k::AMDGPU_GEM_DOMAIN_GTT, 0).unwrap();
    assert_eq!(
        r0.mmap_offset(shared).unwrap(),
        r1.mmap_offset(local).unwrap()
    );
    let fd = export(&r0, shared, k::DRM_CLOEXEC | k::DRM_RDWR).unwrap();
    let imported = import(&r1, fd.as_raw_fd()).unwrap();
    let offset = r1.mmap_offset(imported).unwrap();
    assert_ne!(offset, r1.mmap_offset(local).unwrap());
    assert_eq!(r1.mmap_offset(imported).unwrap(), offset, "stable");
    let mut theirs = r0.cpu_map(shared, 8192);
    theirs.bytes_mut()[4096..4100].copy_from_slice(b"peer");
    let mine = r1.cpu_map(imported, 8192);
    assert_eq!(&mine.bytes()[4096..4100], b"peer");
    let local_map = r1.cpu_map(local, 8192);
    assert!(
        local_map.bytes().iter().all(|b| *b == 0),
        "the local bo is untouched"
    );
}

#[test]
fn gem_userptr_high_water_mark_counts_live_pinned_userptr_bos_per_gpu() {
    let sim = sim_with(2, 90010);
    let r = open_render(&sim, 0);
    let gpu0 = sim.gpus()[0].gpu_id;
    let gpu1 = sim.gpus()[1].gpu_id;
    assert_eq!(sim.gem_userptr_peak_bytes(gpu0), Some(0));
    let a = HostBuf::new(2 * MIB as usize, |_| 0);
    let b = HostBuf::new(MIB as usize, |_| 0);
    let c = HostBuf::new(MIB as usize, |_| 0);
    let ha = r.userptr(&a).unwrap();
    let hb = r.userptr(&b).unwrap();
    assert_eq!(sim.gem_userptr_peak_bytes(gpu0), Some(3 * MIB));
    // Freed BOs no longer count: a new one after a close stays below the peak.
    r.close(ha).unwrap();
    let hc = r.userptr(&c).unwrap();
    assert_eq!(sim.gem_userptr_peak_bytes(gpu0), Some(3 * MIB));
    // GEM BOs in VRAM/GTT are not staging memory; other GPUs are separate.
    r.gem_create(4 * MIB, k::AMDGPU_GEM_DOMAIN_GTT, 0).unwrap();
    assert_eq!(sim.gem_userptr_peak_bytes(gpu0), Some(3 * MIB));
    assert_eq!(sim.gem_userptr_peak_bytes(gpu1), Some(0));
    assert_eq!(sim.gem_userptr_peak_bytes(0xdead), None);
    r.close(hb).unwrap();
    r.close(hc).unwrap();
}

/// amdgpu_gem_metadata_ioctl (amdgpu_gem.c) stores a BO's tiling flags and
/// up to 256 bytes of opaque metadata (amdgpu_bo_set_metadata) and returns
/// them (amdgpu_bo_get_metadata); KFD's GET_DMABUF_INFO hands the same
/// metadata to an importer (amdgpu_amdkfd_get_dmabuf_info), EINVAL when the
/// importer's buffer is too small.
#[test]
fn gem_metadata_is_kept_with_the_bo_and_reaches_kfd_importers() {
    let r = render();
    let h = r.gem_create(4096, k::AMDGPU_GEM_DOMAIN_VRAM, 0).unwrap();
    let text = b"This data is really meta.\0";
    let mut set = k::drm_amdgpu_gem_metadata {
        handle: h,
        op: k::AMDGPU_GEM_METADATA_OP_SET_METADATA,
        ..Default::default()
    };
    set.data.flags = 7;
    set.data.tiling_info = 0x55;
    set.data.data_size_bytes = text.len() as u32;
    for (i, b) in text.iter().enumerate() {
        set.data.data[i / 4] |= u32::from(*b) << (8 * (i % 4));
    }
    r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_METADATA, &mut set).unwrap();
    let mut get = k::drm_amdgpu_gem_metadata {
        handle: h,
        op: k::AMDGPU_GEM_METADATA_OP_GET_METADATA,
        ..Default::default()
    };
    r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_METADATA, &mut get).unwrap();
    assert_eq!(get.data, set.data);
    // Too much data, an unknown handle.
    let mut big = set;
    big.data.data_size_bytes = 257;
    assert_eq!(
        errno(r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_METADATA, &mut big)),
        libc::EINVAL
    );
    let mut unknown = get;
    unknown.handle = 0x999;
    assert_eq!(
        errno(r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_METADATA, &mut unknown)),
        libc::ENOENT
    );

    // The dma-buf's importer reads it through KFD.
    let mut prime = k::drm_prime_handle {
        handle: h,
        flags: k::DRM_CLOEXEC | k::DRM_RDWR,
        fd: -1,
    };
    r.ioctl(k::DRM_IOCTL_PRIME_HANDLE_TO_FD, &mut prime)
        .unwrap();
    let kfd = r
        .drv
        .open("/dev/kfd".as_ref(), libc::O_RDWR | libc::O_CLOEXEC)
        .unwrap();
    let mut buf = [0u8; 64];
    let mut info = k::kfd_ioctl_get_dmabuf_info_args {
        metadata_ptr: buf.as_mut_ptr() as u64,
        metadata_size: buf.len() as u32,
        dmabuf_fd: prime.fd as u32,
        ..Default::default()
    };
    drm_support::ioctl(&r.drv, &kfd, k::AMDKFD_IOC_GET_DMABUF_INFO, &mut info).unwrap();
    assert_eq!(info.metadata_size as usize, text.len());
    assert_eq!(&buf[..text.len()], text);
    assert_eq!(info.size, 4096);
    info.metadata_size = 8;
    assert_eq!(
        errno(drm_support::ioctl(
            &r.drv,
            &kfd,
            k::AMDKFD_IOC_GET_DMABUF_INFO,
            &mut info
        )),
        libc::EINVAL
    );
    // SAFETY: the dma-buf fd was installed in this process for this test.
    unsafe { libc::close(prime.fd) };
    // A size of 0 drops the metadata, keeps the tiling flags.
    set.data.data_size_bytes = 0;
    r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_METADATA, &mut set).unwrap();
    r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_METADATA, &mut get).unwrap();
    assert_eq!((get.data.data_size_bytes, get.data.tiling_info), (0, 0x55));
}
