//! The KFD process (`struct kfd_process`) and its per-device data (`pdd`):
//! allocations (IDR), eviction counts, the CRIU flags, queues, events and SVM
//! ranges. This module holds state and the small invariants around it; the
//! ioctl handlers in the sibling modules implement the kernel's rules, and
//! this module never decides an errno.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use crate::hw::bo::{BoId, Memfd};
use crate::kernel::{FileKey, Gpu, Pid, State};

/// One allocation in a pdd's IDR (`struct kgd_mem`).
#[derive(Debug, Clone)]
pub(crate) struct KfdMem {
    /// The BO.
    pub(crate) bo: BoId,
    /// GPU VA the allocation was made at (0 allowed).
    pub(crate) va: u64,
    /// Real BO size (halved for AQL_QUEUE_MEM).
    pub(crate) size: u64,
    /// `KFD_IOC_ALLOC_MEM_FLAGS_*` as allocated (imports: domain|WRITABLE|EXECUTABLE).
    pub(crate) flags: u32,
    /// Pdd indices the allocation is GPU-mapped on.
    pub(crate) mapped: BTreeSet<usize>,
    /// CPU address of a USERPTR allocation, else 0.
    pub(crate) user_addr: u64,
    /// Made by IMPORT_DMABUF.
    pub(crate) imported: bool,
}

/// Per-device data of a KFD process (`struct kfd_process_device`).
#[derive(Debug)]
pub(crate) struct Pdd {
    /// GPU index.
    pub(crate) gpu: usize,
    /// The gpu_id userspace uses for this device (the actual id until a CRIU
    /// RESTORE rewrites it).
    pub(crate) user_gpu_id: u32,
    /// The render file whose VM is this pdd's compute VM.
    pub(crate) drm_file: Option<FileKey>,
    /// The simulator's own reference to that file (the kernel's `get_file`).
    pub(crate) drm_file_ref: Option<OwnedFd>,
    /// Allocations by IDR slot.
    pub(crate) idr: BTreeMap<u32, KfdMem>,
    /// Queue eviction level (queues run only at 0).
    pub(crate) eviction: u32,
    /// The process's doorbell slice on this GPU.
    pub(crate) doorbell_page: Option<Arc<Memfd>>,
    /// Doorbell ids in use.
    pub(crate) doorbell_ids: BTreeSet<u32>,
    /// SDMA queue ids in use.
    pub(crate) sdma_ids: BTreeSet<u32>,
    /// VRAM allocated by this process on this GPU.
    pub(crate) vram_usage: u64,
    /// SET_SCRATCH_BACKING_VA.
    pub(crate) scratch_backing_va: u64,
    /// SET_TRAP_HANDLER (tba, tma).
    pub(crate) trap_handler: (u64, u64),
    /// SET_MEMORY_POLICY (default, alternate, base, size).
    pub(crate) memory_policy: (u32, u32, u64, u64),
    /// KFD mappings in this pdd's VM: start VA → (end VA, owning pdd, slot).
    pub(crate) vm_maps: BTreeMap<u64, (u64, usize, u32)>,
}

impl Pdd {
    /// The KFD mapping in this VM that intersects `[va, end)`, if any.
    pub(crate) fn vm_overlap(&self, va: u64, end: u64) -> Option<(usize, u32)> {
        if let Some((_, &(e, pdd, slot))) = self.vm_maps.range(..va.saturating_add(1)).next_back() {
            if e > va {
                return Some((pdd, slot));
            }
        }
        self.vm_maps
            .range(va..end)
            .next()
            .map(|(_, &(_, pdd, slot))| (pdd, slot))
    }

    /// The lowest free IDR slot (`idr_alloc(…, 0, 0)`).
    pub(crate) fn free_slot(&self) -> Option<u32> {
        // Slots 0..len all taken (the largest is len - 1): the next one,
        // found without walking the IDR (kfdtest's MMapLarge allocates
        // thousands of BOs in a row).
        let dense = self
            .idr
            .last_key_value()
            .is_none_or(|(&last, _)| last as usize + 1 == self.idr.len());
        let want = if dense {
            u32::try_from(self.idr.len()).ok()?
        } else {
            let mut want = 0u32;
            for &slot in self.idr.keys() {
                if slot != want {
                    break;
                }
                want = want.checked_add(1)?;
            }
            want
        };
        (want < i32::MAX as u32).then_some(want)
    }
}

/// A user-mode queue.
#[derive(Debug, Clone)]
pub(crate) struct Queue {
    pub(crate) q_id: u32,
    /// Pdd index.
    pub(crate) pdd: usize,
    /// Kernel queue type (`KFD_QUEUE_TYPE_*`: 0 compute, 1 SDMA, 4 SDMA_XGMI).
    pub(crate) ktype: u32,
    /// Kernel queue format (0 PM4, 1 AQL).
    pub(crate) format: u32,
    pub(crate) ring_base: u64,
    pub(crate) ring_size: u64,
    pub(crate) read_ptr: u64,
    pub(crate) write_ptr: u64,
    pub(crate) priority: u32,
    pub(crate) percent: u32,
    pub(crate) doorbell_id: u32,
    pub(crate) sdma_id: u32,
    pub(crate) eop_addr: u64,
    pub(crate) eop_size: u32,
    pub(crate) ctx_save_addr: u64,
    pub(crate) ctx_save_size: u32,
    pub(crate) gws: bool,
    pub(crate) cu_mask: Vec<u32>,
    /// The memory queue descriptor (one per XCC for compute queues).
    pub(crate) mqd: Vec<u8>,
    /// The saved control stack (compute queues).
    pub(crate) ctl_stack: Vec<u8>,
}

/// An event.
#[derive(Debug, Clone)]
pub(crate) struct Event {
    pub(crate) id: u32,
    pub(crate) etype: u32,
    pub(crate) auto_reset: bool,
    pub(crate) signaled: bool,
    /// Memory/hw exception data (32 bytes, the record's union).
    pub(crate) exception: [u8; 32],
}

/// Where the process's event signal page lives.
#[derive(Debug, Clone)]
pub(crate) enum SignalPage {
    /// Allocated by the kernel (mmapped through `/dev/kfd` at the events offset).
    Kernel(Arc<Memfd>),
    /// A user BO given by handle at the first CREATE_EVENT.
    User {
        /// The KFD handle (as passed, user gpu id in the high half).
        handle: u64,
        /// The BO.
        bo: BoId,
    },
}

/// An SVM range with its attributes (addresses in bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SvmRange {
    pub(crate) start: u64,
    pub(crate) size: u64,
    pub(crate) preferred_loc: u32,
    pub(crate) prefetch_loc: u32,
    pub(crate) flags: u32,
    pub(crate) granularity: u32,
    /// Per pdd index: ACCESS / ACCESS_IN_PLACE / NO_ACCESS attribute type.
    pub(crate) access: Vec<u32>,
}

/// A KFD process.
#[derive(Debug)]
pub(crate) struct KfdProcess {
    pub(crate) pdds: Vec<Pdd>,
    /// Set by PROCESS_INFO, cleared by UNPAUSE.
    pub(crate) queues_paused: bool,
    pub(crate) xnack: bool,
    pub(crate) queues: BTreeMap<u32, Queue>,
    pub(crate) events: BTreeMap<u32, Event>,
    pub(crate) signal_page: Option<SignalPage>,
    pub(crate) svm: Vec<SvmRange>,
    /// SVM records parsed by RESTORE, applied by RESUME.
    pub(crate) svm_pending: Vec<SvmRange>,
    /// Userptr MMU notifications blocked (RESTORE reached the BO stage and
    /// RESUME has not run yet).
    pub(crate) userptr_blocked: bool,
    /// Number of times RESUME ran (for observation).
    pub(crate) resumed: u32,
    /// WAIT_EVENTS calls blocked on this process's events.
    pub(crate) waits: super::waits::Waits,
    /// The address space its user addresses name (the caller's when it
    /// opened `/dev/kfd`): where a GPU reaches the memory of its SVM
    /// ranges.
    pub(crate) space: crate::kernel::Space,
}

impl KfdProcess {
    /// A KFD process seeing the GPUs at `visible` (indices into `gpus`).
    pub(crate) fn new(gpus: &[Gpu], visible: &[usize]) -> KfdProcess {
        KfdProcess {
            pdds: visible
                .iter()
                .map(|&g| Pdd {
                    gpu: g,
                    user_gpu_id: gpus[g].id(),
                    drm_file: None,
                    drm_file_ref: None,
                    idr: BTreeMap::new(),
                    eviction: 0,
                    doorbell_page: None,
                    doorbell_ids: BTreeSet::new(),
                    sdma_ids: BTreeSet::new(),
                    vram_usage: 0,
                    scratch_backing_va: 0,
                    trap_handler: (0, 0),
                    memory_policy: (0, 0, 0, 0),
                    vm_maps: BTreeMap::new(),
                })
                .collect(),
            queues_paused: false,
            xnack: false,
            queues: BTreeMap::new(),
            events: BTreeMap::new(),
            signal_page: None,
            svm: Vec::new(),
            svm_pending: Vec::new(),
            userptr_blocked: false,
            resumed: 0,
            waits: Default::default(),
            space: crate::kernel::current_space(),
        }
    }

    /// Raw fds the process's pdds hold on render files.
    pub(crate) fn own_fds(&self) -> impl Iterator<Item = i32> + '_ {
        self.pdds
            .iter()
            .filter_map(|p| p.drm_file_ref.as_ref().map(|f| f.as_raw_fd()))
    }

    /// The pdd index whose *user* gpu_id is `id` (0 never matches).
    pub(crate) fn pdd_by_user_id(&self, id: u32) -> Option<usize> {
        if id == 0 {
            return None;
        }
        self.pdds.iter().position(|p| p.user_gpu_id == id)
    }

    /// The pdd index of GPU index `gpu`.
    pub(crate) fn pdd_by_gpu(&self, gpu: usize) -> Option<usize> {
        self.pdds.iter().position(|p| p.gpu == gpu)
    }

    /// Whether the queues of pdd `i` run (no eviction level outstanding).
    pub(crate) fn queues_running(&self, pdd: usize) -> bool {
        self.pdds.get(pdd).is_some_and(|p| p.eviction == 0)
    }

    /// Tears the process down at exit: allocations freed, render-file VMs
    /// released, everything else dropped.
    pub(crate) fn teardown(self, st: &mut State, _pid: Pid) {
        for pdd in &self.pdds {
            for mem in pdd.idr.values() {
                st.bos.drop_handle(mem.bo);
            }
            if let Some(key) = pdd.drm_file {
                if let Some(r) = st.render_mut(key) {
                    r.kfd_vm_owner = None;
                }
            }
        }
    }
}
