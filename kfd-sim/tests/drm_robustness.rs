//! Generated arguments for every render-node ioctl: whatever the values,
//! the simulated kernel answers with success or an errno, never a panic or
//! a hang. User pointers are left null (or point at real buffers), as the
//! `kfd::Driver::ioctl` contract requires valid pointers.

mod drm_support;

use drm_support::render;
use kfd_sys as k;

/// xorshift64*: deterministic values for the generated arguments.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Small values most of the time (so handles and ids hit), anything
    /// otherwise.
    fn value(&mut self) -> u64 {
        let r = self.next();
        match r % 4 {
            0 => r >> 60,
            1 => (r >> 32) % 0x1_0000 * 4096,
            2 => (r >> 8) % 8,
            _ => self.next(),
        }
    }

    fn u32(&mut self) -> u32 {
        self.value() as u32
    }
}

#[test]
fn generated_arguments_never_panic() {
    let r = render();
    let mut g = Gen(0x0123_4567_89AB_CDEF);
    // Give the handle and context spaces something to hit.
    for _ in 0..3 {
        r.gem_create(4096, k::AMDGPU_GEM_DOMAIN_GTT, 0).unwrap();
        r.ctx_alloc().unwrap();
    }
    let mut answered = 0;
    for _ in 0..2000 {
        let result = match g.next() % 12 {
            0 => {
                let mut a = k::drm_amdgpu_gem_create_in {
                    bo_size: g.value() % (1 << 32),
                    alignment: g.value(),
                    domains: g.value(),
                    domain_flags: g.value(),
                };
                r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_CREATE, &mut a)
            }
            1 => {
                let mut a = k::drm_gem_close {
                    handle: g.u32(),
                    pad: g.u32(),
                };
                r.ioctl(k::DRM_IOCTL_GEM_CLOSE, &mut a)
            }
            2 => {
                let mut a = k::drm_amdgpu_gem_mmap_in {
                    handle: g.u32(),
                    _pad: g.u32(),
                };
                r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_MMAP, &mut a)
            }
            3 => {
                let mut a = k::drm_amdgpu_ctx_in {
                    op: g.u32(),
                    flags: g.u32(),
                    ctx_id: g.u32(),
                    priority: g.u32() as i32,
                };
                r.ioctl(k::DRM_IOCTL_AMDGPU_CTX, &mut a)
            }
            4 => {
                let mut a = k::drm_amdgpu_gem_va {
                    handle: g.u32(),
                    _pad: 0,
                    operation: g.u32(),
                    flags: g.u32(),
                    va_address: g.value(),
                    offset_in_bo: g.value(),
                    map_size: g.value(),
                };
                r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_VA, &mut a)
            }
            5 => {
                // Never an infinite wait: no job is ever submitted here, so
                // every fence is unknown or done anyway.
                let mut a = k::drm_amdgpu_wait_cs_in {
                    handle: g.value(),
                    timeout: g.value(),
                    ip_type: g.u32(),
                    ip_instance: g.u32(),
                    ring: g.u32(),
                    ctx_id: g.u32(),
                };
                r.ioctl(k::DRM_IOCTL_AMDGPU_WAIT_CS, &mut a)
            }
            6 => {
                let mut a = k::drm_amdgpu_gem_op {
                    handle: g.u32(),
                    op: g.u32(),
                    value: if g.next().is_multiple_of(2) {
                        0
                    } else {
                        u64::from(k::AMDGPU_GEM_DOMAIN_GTT)
                    },
                    num_entries: g.u32(),
                    padding: g.u32(),
                };
                // SET_PLACEMENT reads `value` as domains; the other ops would
                // use it as a pointer, which is null or rejected here.
                if a.op != k::AMDGPU_GEM_OP_SET_PLACEMENT {
                    a.value = 0;
                }
                r.ioctl(k::DRM_IOCTL_AMDGPU_GEM_OP, &mut a)
            }
            7 => {
                let mut a = k::drm_gem_change_handle {
                    handle: g.u32(),
                    new_handle: g.u32(),
                };
                r.ioctl(k::DRM_IOCTL_GEM_CHANGE_HANDLE, &mut a)
            }
            8 => {
                let mut a = k::drm_amdgpu_bo_list_in {
                    operation: g.u32(),
                    list_handle: g.u32(),
                    bo_number: 0,
                    bo_info_size: g.u32(),
                    bo_info_ptr: 0,
                };
                r.ioctl(k::DRM_IOCTL_AMDGPU_BO_LIST, &mut a)
            }
            9 => {
                let mut a = k::drm_amdgpu_cs_in {
                    ctx_id: g.u32(),
                    bo_list_handle: g.u32(),
                    num_chunks: if g.next().is_multiple_of(2) {
                        0
                    } else {
                        g.u32()
                    },
                    flags: g.u32(),
                    chunks: 0,
                };
                r.ioctl(k::DRM_IOCTL_AMDGPU_CS, &mut a)
            }
            10 => {
                let mut out = [0u8; 512];
                let mut a = [0u8; 32];
                a[0..8].copy_from_slice(&(out.as_mut_ptr() as u64).to_ne_bytes());
                a[8..12].copy_from_slice(&(g.u32() % 513).to_ne_bytes());
                a[12..16].copy_from_slice(&(g.u32() % 0x30).to_ne_bytes());
                a[16..20].copy_from_slice(&g.u32().to_ne_bytes());
                a[20..24].copy_from_slice(&g.u32().to_ne_bytes());
                r.ioctl(k::DRM_IOCTL_AMDGPU_INFO, &mut a)
            }
            _ => {
                let mut a = k::drm_prime_handle {
                    handle: g.u32(),
                    flags: g.u32(),
                    fd: -1,
                };
                r.ioctl(k::DRM_IOCTL_PRIME_FD_TO_HANDLE, &mut a)
            }
        };
        if let Err(e) = result {
            assert!(e.raw_os_error().is_some(), "{e}");
        } else {
            answered += 1;
        }
    }
    // Some calls must succeed, or the generator never reached the handlers.
    assert!(answered > 0);
}
