//! The MMU notifier of a simulated process's CPU address space:
//! [`Sim::cpu_unmapped`] (the VMA walk is `crate::kernel::address_space`).

use super::Sim;
use crate::kernel::Pid;

impl Sim {
    /// Process `pid` unmapped `[start, start+len)` of its CPU address
    /// space (`munmap`, or a `MAP_FIXED` mapping over it): the kernel's MMU
    /// notifier (`svm_range_cpu_invalidate_pagetables` with
    /// `MMU_NOTIFY_UNMAP`, then `svm_range_unmap_from_cpu` in `kfd_svm.c`)
    /// removes that part of every SVM range, splitting ranges it cuts.
    /// Nothing happens for a process without real CPU mappings
    /// (`ProcessConfig::host_address_space`) or without a KFD process.
    pub fn cpu_unmapped(&self, pid: Pid, start: u64, len: u64) {
        let mut st = self.lock();
        if !st.processes.get(&pid).is_some_and(|p| p.real_mm) {
            return;
        }
        if let Some(kfd) = st.kfd_mut(pid) {
            crate::amdkfd::svm::unmap_from_cpu(kfd, start, start.saturating_add(len));
        }
    }
}
