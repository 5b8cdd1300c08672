//! Resource accounting: what the simulated kernel holds right now, so tests
//! can assert that a checkpoint or restore leaked nothing (no forgotten
//! dma-buf fd, no orphaned BO, no stale mapping).
//!
//! Numbers are gathered by [`crate::Sim::accounting`] after closed files and
//! fd-only BOs were collected. This module only counts; it never frees.

use crate::kernel::{FileKey, OpenFile, Shared, State};

/// A snapshot of live simulator resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Accounting {
    /// Open fds (in the host process) referring to `/dev/kfd` files.
    pub kfd_fds: usize,
    /// Open fds referring to render-node files.
    pub render_fds: usize,
    /// Open fds referring to dma-bufs of simulated BOs.
    pub dmabuf_fds: usize,
    /// Live buffer objects (KFD and GEM).
    pub live_bos: usize,
    /// Their total size in bytes.
    pub live_bo_bytes: u64,
    /// Host pages pinned by valid USERPTR BOs.
    pub pinned_userptr_pages: u64,
    /// CPU mappings made through the driver's `mmap` and not unmapped.
    pub cpu_mappings: usize,
    /// Live KFD processes.
    pub kfd_processes: usize,
    /// User queues across all KFD processes.
    pub queues: usize,
    /// Events across all KFD processes.
    pub events: usize,
}

impl Accounting {
    /// All simulator fds: kfd + render + dma-buf.
    pub fn open_fds(&self) -> usize {
        self.kfd_fds + self.render_fds + self.dmabuf_fds
    }

    pub(crate) fn gather(_shared: &Shared, st: &State, open: &[FileKey]) -> Accounting {
        let mut a = Accounting::default();
        for key in open {
            match st.files.get(key) {
                Some(OpenFile::Kfd(_)) => a.kfd_fds += 1,
                Some(OpenFile::Render(_)) => a.render_fds += 1,
                None => {}
            }
        }
        a.dmabuf_fds = st.bos.count_dmabuf_fds(open);
        a.live_bos = st.bos.len();
        for bo in st.bos.iter() {
            a.live_bo_bytes += bo.size;
            a.pinned_userptr_pages += bo.pinned_pages();
        }
        a.cpu_mappings = st.cpu_maps.len() + st.remote_maps.len();
        for p in st.processes.values() {
            if let Some(k) = &p.kfd {
                a.kfd_processes += 1;
                a.queues += k.queues.len();
                a.events += k.events.len();
            }
        }
        a
    }
}
