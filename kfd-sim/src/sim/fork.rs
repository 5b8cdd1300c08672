//! `fork(2)` of a simulated process: [`Sim::fork_process`].
//!
//! The kernel makes a forked child a process of its own with a new
//! `mm_struct`. amdkfd finds or creates its `kfd_process` by `mm`
//! (`kfd_create_process` in `kfd_process.c`, called from `kfd_open`), so the
//! child has none until it opens `/dev/kfd` itself, and that open creates a
//! new one with no VMs acquired, no BOs, queues or events. The `/dev/kfd`
//! file the child inherits still belongs to the parent's process:
//! `kfd_ioctl` (`kfd_chardev.c`) refuses it with `EBADF` because
//! `process->lead_thread != current->group_leader` (the ptrace-parent
//! exception aside), which the simulator's dispatch already applies by
//! comparing the file's owner with the caller. Inherited render-node files
//! stay the same DRM files (their GEM handles and the VM a KFD process may
//! have made its own), as any inherited file does.
//!
//! This module never copies KFD or DRM state from the parent: the child
//! starts with the fork-inherited attributes only.
//!
//! A host process that runs a simulator inside itself and forks
//! ([`Sim::hold_for_fork`], [`Sim::after_host_fork`]) gives its child a copy
//! of the simulator's memory but none of its threads: a lock one of them
//! held at the fork would stay taken in the child for good.

use super::Sim;
use crate::kernel::{Pid, Process, SimError};

use crate::hw::Held;

/// Every lock of a simulator that its own threads (queue engines, the
/// doorbell watcher, SDMA workers) or a caller outside the simulator's
/// state lock may take, held until dropped: [`Sim::hold_for_fork`].
pub struct ForkHold<'a> {
    _held: Vec<Box<dyn Held + 'a>>,
}

impl std::fmt::Debug for ForkHold<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForkHold")
            .field("locks", &self._held.len())
            .finish()
    }
}

impl Sim {
    /// Creates the child of a `fork(2)` of `parent` and returns its pid.
    ///
    /// The child inherits what `fork` copies: capabilities, the device
    /// cgroup (the GPUs it may see), the mount namespace's `/dev/dri`, the
    /// command name, whether it may be ptraced, the cgroup freezer, the
    /// fd table (the simulator's record of which fds name device files) and
    /// whether its addresses are a host process's CPU mappings (a copy of
    /// the parent's, as fork's new `mm` is).
    /// It gets no KFD process (the parent's is bound to the parent's
    /// `mm`), is traced by nobody (ptrace is not inherited) and is not a
    /// host process.
    pub fn fork_process(&self, parent: Pid) -> Result<Pid, SimError> {
        let mut st = self.lock();
        let p = st
            .processes
            .get(&parent)
            .ok_or(SimError::NoSuchProcess(parent))?;
        let child = Process {
            instance: 0,
            capable: p.capable,
            ptrace_parent: None,
            visible: p.visible.clone(),
            dev_dri: p.dev_dri.clone(),
            kfd: None,
            comm: p.comm.clone(),
            ptrace_stopped: false,
            ptrace_allowed: p.ptrace_allowed,
            fds: p.fds.clone(),
            frozen: p.frozen.clone(),
            host: false,
            real_mm: p.real_mm,
            // A simulated child has no pid namespace of its own here.
            ns_pid: None,
        };
        let pid = st.next_free_pid();
        let child = Process {
            instance: st.take_instance(),
            ..child
        };
        st.processes.insert(pid, child);
        Ok(pid)
    }

    /// Takes every lock of the simulator that its threads, or callers of
    /// it, may hold (the state lock first, as the simulator nests them)
    /// and holds them until the result is dropped: for a host process
    /// about to `fork(2)` (a `pthread_atfork` prepare handler), so the
    /// child's copy of the simulator has none of them taken by a thread
    /// the child does not have. Drop it in the parent and in the child
    /// (the child then calls [`Sim::after_host_fork`]). Waits for the
    /// simulator's calls in progress to end; never call it while a
    /// simulator call is in progress on this thread.
    pub fn hold_for_fork(&self) -> ForkHold<'_> {
        let mut held: Vec<Box<dyn Held + '_>> = vec![Box::new(self.lock())];
        self.shared.exec.hold_for_fork(&mut held);
        for gpu in &self.shared.gpus {
            gpu.drm.sdma.hold_for_fork(&mut held);
        }
        ForkHold { _held: held }
    }

    /// This host process is the child of a `fork(2)` of the process that
    /// built the simulator (an interposer's copy of the machine): the
    /// parent's SDMA ring workers and doorbell watcher are not threads of
    /// this process, so they are forgotten and the next submission or
    /// queue starts new ones. Call it once in the child, before any other
    /// call.
    pub fn after_host_fork(&self) {
        for gpu in &self.shared.gpus {
            gpu.drm.sdma.forget_workers_after_fork();
        }
        self.shared.exec.after_host_fork();
    }
}
