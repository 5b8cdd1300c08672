//! The amdgpu module parameters the simulated kernel runs with, as
//! `/sys/module/amdgpu/parameters/<name>` shows them: the kernel's defaults
//! (`amdgpu_drv.c`), and only those whose effect the simulator carries out.
//!
//! * `cwsr_enable` 1: compute queues get context save/restore areas (CREATE_QUEUE
//!   takes and checks them);
//! * `sched_policy` 0 (`KFD_SCHED_POLICY_HWS`): queues go to the hardware
//!   scheduler (no per-queue VMID or HQD assignment is visible);
//! * `noretry` -1: the per-chip default, retry faults off on GFX9 and later
//!   dGPUs, so a new KFD process has XNACK off;
//! * `no_system_mem_limit` N: KFD system-memory allocations are limited
//!   (`crate::amdkfd::mem_limit`);
//! * `mes` 0: no MES firmware scheduler (GFX9 chips have none);
//! * `emu_mode` 0: a real chip, not an emulator.
//!
//! This module is data: it never reads the host's parameters.

/// `(name, value as sysfs prints it)`, in name order.
pub const MODULE_PARAMETERS: &[(&str, &str)] = &[
    ("cwsr_enable", "1"),
    ("emu_mode", "0"),
    ("mes", "0"),
    ("no_system_mem_limit", "N"),
    ("noretry", "-1"),
    ("sched_policy", "0"),
];
