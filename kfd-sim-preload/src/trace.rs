//! `KFD_SIM_PRELOAD_TRACE`: one stderr line per routed ioctl, with the
//! kernel's name for it and the answer, so a run shows every call AMD's
//! code made and how the simulator answered.

use std::ffi::{c_int, c_ulong};

/// amdkfd's ioctl names by number (`include/uapi/linux/kfd_ioctl.h`).
const KFD: &[&str] = &[
    "",
    "GET_VERSION",
    "CREATE_QUEUE",
    "DESTROY_QUEUE",
    "SET_MEMORY_POLICY",
    "GET_CLOCK_COUNTERS",
    "GET_PROCESS_APERTURES",
    "UPDATE_QUEUE",
    "CREATE_EVENT",
    "DESTROY_EVENT",
    "SET_EVENT",
    "RESET_EVENT",
    "WAIT_EVENTS",
    "DBG_REGISTER",
    "DBG_UNREGISTER",
    "DBG_ADDRESS_WATCH",
    "DBG_WAVE_CONTROL",
    "SET_SCRATCH_BACKING_VA",
    "GET_TILE_CONFIG",
    "SET_TRAP_HANDLER",
    "GET_PROCESS_APERTURES_NEW",
    "ACQUIRE_VM",
    "ALLOC_MEMORY_OF_GPU",
    "FREE_MEMORY_OF_GPU",
    "MAP_MEMORY_TO_GPU",
    "UNMAP_MEMORY_FROM_GPU",
    "SET_CU_MASK",
    "GET_QUEUE_WAVE_STATE",
    "GET_DMABUF_INFO",
    "IMPORT_DMABUF",
    "ALLOC_QUEUE_GWS",
    "SMI_EVENTS",
    "SVM",
    "SET_XNACK_MODE",
    "CRIU_OP",
    "AVAILABLE_MEMORY",
    "EXPORT_DMABUF",
    "RUNTIME_ENABLE",
    "DBG_TRAP",
];

/// amdgpu's driver-private ioctl name (`DRM_COMMAND_BASE` + `nr`).
fn amdgpu(nr: usize) -> &'static str {
    match nr {
        0x00 => "AMDGPU_GEM_CREATE",
        0x01 => "AMDGPU_GEM_MMAP",
        0x02 => "AMDGPU_CTX",
        0x03 => "AMDGPU_BO_LIST",
        0x04 => "AMDGPU_CS",
        0x05 => "AMDGPU_INFO",
        0x06 => "AMDGPU_GEM_METADATA",
        0x07 => "AMDGPU_GEM_WAIT_IDLE",
        0x08 => "AMDGPU_GEM_VA",
        0x09 => "AMDGPU_WAIT_CS",
        0x10 => "AMDGPU_GEM_OP",
        0x11 => "AMDGPU_GEM_USERPTR",
        0x12 => "AMDGPU_WAIT_FENCES",
        0x13 => "AMDGPU_VM",
        0x14 => "AMDGPU_FENCE_TO_HANDLE",
        0x15 => "AMDGPU_SCHED",
        _ => "?",
    }
}

/// The out-of-tree numbers of ROCm's own amdkfd (ROCm 5.x `kfd_ioctl.h`,
/// never upstream): ROCm 5.2's thunk asks for the debugger's version with
/// its DBG_TRAP at 0x82, which an upstream kernel answers `ENOTTY`.
fn rocm_kfd(nr: usize) -> Option<&'static str> {
    Some(match nr {
        0x80 => "ROCM_IPC_IMPORT_HANDLE",
        0x81 => "ROCM_IPC_EXPORT_HANDLE",
        0x82 => "ROCM_DBG_TRAP",
        0x83 => "ROCM_CROSS_MEMORY_COPY",
        0x84 => "ROCM_RLC_SPM",
        _ => return None,
    })
}

/// The name of ioctl `request` ("kfd GET_VERSION", "drm 0x09", ...).
pub(crate) fn name(request: c_ulong) -> String {
    let ty = (request >> 8) & 0xff;
    let nr = (request & 0xff) as usize;
    match ty {
        0x4b => format!(
            "kfd {}",
            KFD.get(nr)
                .filter(|n| !n.is_empty())
                .copied()
                .or_else(|| rocm_kfd(nr))
                .unwrap_or("?")
        ),
        0x64 if nr >= 0x40 => format!("drm {}", amdgpu(nr - 0x40)),
        0x64 => format!(
            "drm {}",
            match nr {
                0x00 => "VERSION",
                0x09 => "GEM_CLOSE",
                0x0c => "GET_CAP",
                0x2d => "PRIME_HANDLE_TO_FD",
                0x2e => "PRIME_FD_TO_HANDLE",
                _ => "?",
            }
        ),
        _ => "?".to_owned(),
    }
}

/// Logs one routed ioctl and its answer.
pub(crate) fn ioctl(request: c_ulong, ret: &std::io::Result<c_int>) {
    let answer = match ret {
        Ok(v) => v.to_string(),
        Err(e) => kfd::Errno(e.raw_os_error().unwrap_or(0)).to_string(),
    };
    eprintln!(
        "kfd-sim-preload: ioctl {} (nr {:#04x}) -> {answer}",
        name(request),
        request & 0xff
    );
}
