//! The crate checked against the system C headers.
//!
//! One table per header set (below) names every struct with its fields, every enum
//! type, constant and request code the crate mirrors. From that table the test writes
//! a C probe, compiles it with the system `cc` against `/usr/include/linux/kfd_ioctl.h`
//! (KFD half) or libdrm's `drm.h` + `amdgpu_drm.h` (DRM half), runs it, and compares
//! every `sizeof`, `_Alignof`, field `offsetof` and field size, and every value, with
//! the Rust side (`size_of`, `align_of`, `offset_of!`, the constant). All mismatches are
//! collected and listed before the test fails. A third test checks that every public
//! item of the crate is either in these tables or, being newer than the installed
//! headers, checked against the specs in `tests/spec.rs`.

#![cfg(target_os = "linux")]

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::mem::{align_of, offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

use kfd_sys::*;

/// What a check compares; used for the summary counts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `sizeof`/`_Alignof` of a struct or union.
    Layout,
    /// `offsetof` or size of one field.
    Field,
    /// `sizeof` of an enum type.
    Enum,
    /// Value of a request code.
    Request,
    /// Value of a constant.
    Constant,
    /// Value of a function-like macro applied to sample arguments.
    Expr,
}

/// One number computed on both sides.
struct Check {
    kind: Kind,
    label: String,
    /// C expression for the value, printed as `unsigned long long`.
    c_value: String,
    /// C expression that is non-zero when the value fits the Rust type.
    c_fits: String,
    rust: u64,
}

/// The checks of one header set, plus the crate items they cover.
#[derive(Default)]
struct Table {
    checks: Vec<Check>,
    items: BTreeSet<String>,
    structs: usize,
    fields: usize,
}

impl Table {
    fn push(&mut self, kind: Kind, label: String, c_value: String, c_fits: String, rust: u64) {
        self.checks.push(Check {
            kind,
            label,
            c_value,
            c_fits,
            rust,
        });
    }

    fn layout(&mut self, name: &str, c_type: &str, size: usize, align: usize) {
        self.items.insert(name.to_owned());
        self.structs += 1;
        self.push(
            Kind::Layout,
            format!("sizeof({c_type})"),
            format!("sizeof({c_type})"),
            "1".into(),
            size as u64,
        );
        self.push(
            Kind::Layout,
            format!("_Alignof({c_type})"),
            format!("_Alignof({c_type})"),
            "1".into(),
            align as u64,
        );
    }

    /// A struct the crate extends past the installed header: C's size must equal the
    /// offset where the Rust-only tail starts.
    fn prefix_layout(&mut self, name: &str, c_type: &str, tail_offset: usize, align: usize) {
        self.items.insert(name.to_owned());
        self.structs += 1;
        self.push(
            Kind::Layout,
            format!("sizeof({c_type}) (installed prefix of the Rust struct)"),
            format!("sizeof({c_type})"),
            "1".into(),
            tail_offset as u64,
        );
        self.push(
            Kind::Layout,
            format!("_Alignof({c_type})"),
            format!("_Alignof({c_type})"),
            "1".into(),
            align as u64,
        );
    }

    /// An anonymous C union/struct member group: size given by a C expression, field
    /// offsets relative to `base`.
    fn anon_layout(&mut self, name: &str, c_size: &str, size: usize) {
        self.items.insert(name.to_owned());
        self.structs += 1;
        self.push(
            Kind::Layout,
            format!("size of the anonymous member mirrored by {name}: {c_size}"),
            c_size.to_owned(),
            "1".into(),
            size as u64,
        );
    }

    fn field(&mut self, c_type: &str, base: &str, field: &str, offset: usize, size: Option<usize>) {
        self.fields += 1;
        self.push(
            Kind::Field,
            format!("offsetof({c_type}, {field}){base}"),
            format!("offsetof({c_type}, {field}){base}"),
            "1".into(),
            offset as u64,
        );
        if let Some(size) = size {
            self.push(
                Kind::Field,
                format!("sizeof((({c_type}*)0)->{field})"),
                format!("sizeof((({c_type}*)0)->{field})"),
                "1".into(),
                size as u64,
            );
        }
    }

    fn enum_type(&mut self, name: &str, size: usize) {
        self.items.insert(name.to_owned());
        self.push(
            Kind::Enum,
            format!("sizeof(enum {name})"),
            format!("sizeof(enum {name})"),
            "1".into(),
            size as u64,
        );
    }

    fn value(&mut self, kind: Kind, name: &str, c_type: &str, rust: u64) {
        self.items.insert(name.to_owned());
        self.push(
            kind,
            name.to_owned(),
            format!("({c_type})({name})"),
            format!("(({name}) == ({c_type})({name}))"),
            rust,
        );
    }

    fn expr(&mut self, item: &str, c_expr: &str, rust: u64) {
        self.items.insert(item.to_owned());
        self.push(
            Kind::Expr,
            c_expr.to_owned(),
            c_expr.to_owned(),
            "1".into(),
            rust,
        );
    }

    fn count(&self, kind: Kind) -> usize {
        self.checks.iter().filter(|c| c.kind == kind).count()
    }
}

/// C type name of the Rust type of a constant, for the fit check.
trait CType {
    const C: &'static str;
}
impl CType for u8 {
    const C: &'static str = "__u8";
}
impl CType for u32 {
    const C: &'static str = "__u32";
}
impl CType for i32 {
    const C: &'static str = "__s32";
}
impl CType for u64 {
    const C: &'static str = "__u64";
}
impl CType for usize {
    const C: &'static str = "unsigned long";
}
fn c_type_of<T: CType>(_: &T) -> &'static str {
    T::C
}

/// Size of the field a raw-pointer projection points to.
fn size_of_pointee<S, F>(_: fn(*const S) -> *const F) -> usize {
    size_of::<F>()
}

macro_rules! field_size {
    ($name:ident, $f:ident) => {
        size_of_pointee::<$name, _>(|p| {
            // SAFETY: the closure is never called; only its return type is used.
            unsafe { &raw const (*p).$f }
        })
    };
}

/// `kw Name [= "C type"] [extends tail_field] { field [= "c_name"], ... } [flex field];`
macro_rules! structs {
    ($t:ident; $(
        $kw:ident $name:ident $(= $cty:literal)? $(extends $ext:ident)?
        { $( $f:ident $(= $cf:literal)? ),* $(,)? } $(flex $flex:ident)? ;
    )*) => {$(
        {
            let c_type: String = None::<&str>
                $(.or(Some($cty)))?
                .map(str::to_owned)
                .unwrap_or_else(|| format!("{} {}", stringify!($kw), stringify!($name)));
            let extended: Option<usize> = None $(.or(Some(offset_of!($name, $ext))))?;
            match extended {
                Some(tail) => $t.prefix_layout(stringify!($name), &c_type, tail, align_of::<$name>()),
                None => $t.layout(stringify!($name), &c_type, size_of::<$name>(), align_of::<$name>()),
            }
            $(
                let c_field = None::<&str> $(.or(Some($cf)))?.unwrap_or(stringify!($f));
                $t.field(&c_type, "", c_field, offset_of!($name, $f), Some(field_size!($name, $f)));
            )*
            $(
                $t.field(&c_type, "", stringify!($flex), offset_of!($name, $flex), None);
            )?
        }
    )*};
}

/// `kw Name in "C parent type" sized "C size expr" { field, ... };` for anonymous members.
macro_rules! anon_structs {
    ($t:ident; $(
        $kw:ident $name:ident in $parent:literal sized $csize:literal
        { $first:ident $(, $f:ident)* $(,)? } ;
    )*) => {$(
        {
            $t.anon_layout(stringify!($name), $csize, size_of::<$name>());
            let base = format!(" - offsetof({}, {})", $parent, stringify!($first));
            $t.field($parent, &base, stringify!($first), offset_of!($name, $first), Some(field_size!($name, $first)));
            $(
                $t.field($parent, &base, stringify!($f), offset_of!($name, $f), Some(field_size!($name, $f)));
            )*
        }
    )*};
}

macro_rules! enums {
    ($t:ident; $($name:ident),* $(,)?) => {$(
        $t.enum_type(stringify!($name), size_of::<$name>());
    )*};
}

macro_rules! values {
    ($t:ident, $kind:expr; $($name:ident),* $(,)?) => {$(
        $t.value($kind, stringify!($name), c_type_of(&$name), $name as u64);
    )*};
}

macro_rules! exprs {
    ($t:ident; $($item:ident : $c:literal => $r:expr),* $(,)?) => {$(
        $t.expr(stringify!($item), $c, ($r) as u64);
    )*};
}

/// Everything of `linux/kfd_ioctl.h` (1.11) the crate mirrors, plus the ioctl encoding.
fn kfd_table() -> Table {
    let mut t = Table::default();
    structs!(t;
        struct kfd_ioctl_get_version_args { major_version, minor_version };
        struct kfd_ioctl_create_queue_args {
            ring_base_address, write_pointer_address, read_pointer_address, doorbell_offset,
            ring_size, gpu_id, queue_type, queue_percentage, queue_priority, queue_id,
            eop_buffer_address, eop_buffer_size, ctx_save_restore_address,
            ctx_save_restore_size, ctl_stack_size
        };
        struct kfd_ioctl_destroy_queue_args { queue_id, pad };
        struct kfd_ioctl_update_queue_args {
            ring_base_address, queue_id, ring_size, queue_percentage, queue_priority
        };
        struct kfd_ioctl_set_cu_mask_args { queue_id, num_cu_mask, cu_mask_ptr };
        struct kfd_ioctl_get_queue_wave_state_args {
            ctl_stack_address, ctl_stack_used_size, save_area_used_size, queue_id, pad
        };
        struct kfd_ioctl_get_available_memory_args { available, gpu_id, pad };
        struct kfd_ioctl_set_memory_policy_args {
            alternate_aperture_base, alternate_aperture_size, gpu_id, default_policy,
            alternate_policy, pad
        };
        struct kfd_ioctl_get_clock_counters_args {
            gpu_clock_counter, cpu_clock_counter, system_clock_counter, system_clock_freq,
            gpu_id, pad
        };
        struct kfd_process_device_apertures {
            lds_base, lds_limit, scratch_base, scratch_limit, gpuvm_base, gpuvm_limit,
            gpu_id, pad
        };
        struct kfd_ioctl_get_process_apertures_args { process_apertures, num_of_nodes, pad };
        struct kfd_ioctl_get_process_apertures_new_args {
            kfd_process_device_apertures_ptr, num_of_nodes, pad
        };
        struct kfd_ioctl_dbg_register_args { gpu_id, pad };
        struct kfd_ioctl_dbg_unregister_args { gpu_id, pad };
        struct kfd_ioctl_dbg_address_watch_args { content_ptr, gpu_id, buf_size_in_bytes };
        struct kfd_ioctl_dbg_wave_control_args { content_ptr, gpu_id, buf_size_in_bytes };
        struct kfd_ioctl_create_event_args {
            event_page_offset, event_trigger_data, event_type, auto_reset, node_id,
            event_id, event_slot_index
        };
        struct kfd_ioctl_destroy_event_args { event_id, pad };
        struct kfd_ioctl_set_event_args { event_id, pad };
        struct kfd_ioctl_reset_event_args { event_id, pad };
        struct kfd_memory_exception_failure { NotPresent, ReadOnly, NoExecute, imprecise };
        struct kfd_hsa_memory_exception_data { failure, va, gpu_id, ErrorType };
        struct kfd_hsa_hw_exception_data { reset_type, reset_cause, memory_lost, gpu_id };
        struct kfd_event_data {
            exception_data = "memory_exception_data", kfd_event_data_ext, event_id, pad
        };
        struct kfd_ioctl_wait_events_args {
            events_ptr, num_events, wait_for_all, timeout, wait_result
        };
        struct kfd_ioctl_set_scratch_backing_va_args { va_addr, gpu_id, pad };
        struct kfd_ioctl_get_tile_config_args {
            tile_config_ptr, macro_tile_config_ptr, num_tile_configs, num_macro_tile_configs,
            gpu_id, gb_addr_config, num_banks, num_ranks
        };
        struct kfd_ioctl_set_trap_handler_args { tba_addr, tma_addr, gpu_id, pad };
        struct kfd_ioctl_acquire_vm_args { drm_fd, gpu_id };
        struct kfd_ioctl_alloc_memory_of_gpu_args {
            va_addr, size, handle, mmap_offset, gpu_id, flags
        };
        struct kfd_ioctl_free_memory_of_gpu_args { handle };
        struct kfd_ioctl_map_memory_to_gpu_args {
            handle, device_ids_array_ptr, n_devices, n_success
        };
        struct kfd_ioctl_unmap_memory_from_gpu_args {
            handle, device_ids_array_ptr, n_devices, n_success
        };
        struct kfd_ioctl_alloc_queue_gws_args { queue_id, num_gws, first_gws, pad };
        struct kfd_ioctl_get_dmabuf_info_args {
            size, metadata_ptr, metadata_size, gpu_id, flags, dmabuf_fd
        };
        struct kfd_ioctl_import_dmabuf_args { va_addr, handle, gpu_id, dmabuf_fd };
        struct kfd_ioctl_smi_events_args { gpuid, anon_fd };
        struct kfd_ioctl_criu_args {
            devices, bos, priv_data, priv_data_size, num_devices, num_bos, num_objects, pid, op
        };
        struct kfd_criu_device_bucket { user_gpu_id, actual_gpu_id, drm_fd, pad };
        struct kfd_criu_bo_bucket {
            addr, size, offset, restored_offset, gpu_id, alloc_flags, dmabuf_fd, pad
        };
        struct kfd_ioctl_svm_attribute { r#type = "type", value };
        struct kfd_ioctl_svm_args { start_addr, size, op, nattr } flex attrs;
        struct kfd_ioctl_set_xnack_mode_args { xnack_enabled };
    );
    anon_structs!(t;
        union kfd_event_data_exception in "struct kfd_event_data"
            sized "offsetof(struct kfd_event_data, kfd_event_data_ext)"
            { memory_exception_data, hw_exception_data };
    );
    enums!(t;
        kfd_smi_event, KFD_MIGRATE_TRIGGERS, KFD_QUEUE_EVICTION_TRIGGERS,
        KFD_SVM_UNMAP_TRIGGERS, kfd_criu_op, kfd_mmio_remap, kfd_ioctl_svm_op,
        kfd_ioctl_svm_location, kfd_ioctl_svm_attr_type,
    );
    values!(t, Kind::Request;
        AMDKFD_IOC_GET_VERSION, AMDKFD_IOC_CREATE_QUEUE, AMDKFD_IOC_DESTROY_QUEUE,
        AMDKFD_IOC_SET_MEMORY_POLICY, AMDKFD_IOC_GET_CLOCK_COUNTERS,
        AMDKFD_IOC_GET_PROCESS_APERTURES, AMDKFD_IOC_UPDATE_QUEUE, AMDKFD_IOC_CREATE_EVENT,
        AMDKFD_IOC_DESTROY_EVENT, AMDKFD_IOC_SET_EVENT, AMDKFD_IOC_RESET_EVENT,
        AMDKFD_IOC_WAIT_EVENTS, AMDKFD_IOC_DBG_REGISTER_DEPRECATED,
        AMDKFD_IOC_DBG_UNREGISTER_DEPRECATED, AMDKFD_IOC_DBG_ADDRESS_WATCH_DEPRECATED,
        AMDKFD_IOC_DBG_WAVE_CONTROL_DEPRECATED, AMDKFD_IOC_SET_SCRATCH_BACKING_VA,
        AMDKFD_IOC_GET_TILE_CONFIG, AMDKFD_IOC_SET_TRAP_HANDLER,
        AMDKFD_IOC_GET_PROCESS_APERTURES_NEW, AMDKFD_IOC_ACQUIRE_VM,
        AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, AMDKFD_IOC_FREE_MEMORY_OF_GPU,
        AMDKFD_IOC_MAP_MEMORY_TO_GPU, AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU,
        AMDKFD_IOC_SET_CU_MASK, AMDKFD_IOC_GET_QUEUE_WAVE_STATE, AMDKFD_IOC_GET_DMABUF_INFO,
        AMDKFD_IOC_IMPORT_DMABUF, AMDKFD_IOC_ALLOC_QUEUE_GWS, AMDKFD_IOC_SMI_EVENTS,
        AMDKFD_IOC_SVM, AMDKFD_IOC_SET_XNACK_MODE, AMDKFD_IOC_CRIU_OP,
        AMDKFD_IOC_AVAILABLE_MEMORY,
    );
    values!(t, Kind::Constant;
        KFD_IOCTL_MAJOR_VERSION, KFD_IOCTL_MINOR_VERSION,
        KFD_IOC_QUEUE_TYPE_COMPUTE, KFD_IOC_QUEUE_TYPE_SDMA, KFD_IOC_QUEUE_TYPE_COMPUTE_AQL,
        KFD_IOC_QUEUE_TYPE_SDMA_XGMI, KFD_MAX_QUEUE_PERCENTAGE, KFD_MAX_QUEUE_PRIORITY,
        KFD_MIN_QUEUE_RING_SIZE, KFD_IOC_CACHE_POLICY_COHERENT,
        KFD_IOC_CACHE_POLICY_NONCOHERENT, NUM_OF_SUPPORTED_GPUS, MAX_ALLOWED_NUM_POINTS,
        MAX_ALLOWED_AW_BUFF_SIZE, MAX_ALLOWED_WAC_BUFF_SIZE, KFD_INVALID_FD,
        KFD_IOC_EVENT_SIGNAL, KFD_IOC_EVENT_NODECHANGE, KFD_IOC_EVENT_DEVICESTATECHANGE,
        KFD_IOC_EVENT_HW_EXCEPTION, KFD_IOC_EVENT_SYSTEM_EVENT, KFD_IOC_EVENT_DEBUG_EVENT,
        KFD_IOC_EVENT_PROFILE_EVENT, KFD_IOC_EVENT_QUEUE_EVENT, KFD_IOC_EVENT_MEMORY,
        KFD_IOC_WAIT_RESULT_COMPLETE, KFD_IOC_WAIT_RESULT_TIMEOUT, KFD_IOC_WAIT_RESULT_FAIL,
        KFD_SIGNAL_EVENT_LIMIT, KFD_HW_EXCEPTION_WHOLE_GPU_RESET,
        KFD_HW_EXCEPTION_PER_ENGINE_RESET, KFD_HW_EXCEPTION_GPU_HANG, KFD_HW_EXCEPTION_ECC,
        KFD_MEM_ERR_NO_RAS, KFD_MEM_ERR_SRAM_ECC, KFD_MEM_ERR_POISON_CONSUMED,
        KFD_MEM_ERR_GPU_HANG, KFD_IOC_ALLOC_MEM_FLAGS_VRAM, KFD_IOC_ALLOC_MEM_FLAGS_GTT,
        KFD_IOC_ALLOC_MEM_FLAGS_USERPTR, KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL,
        KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP, KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE,
        KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE, KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC,
        KFD_IOC_ALLOC_MEM_FLAGS_NO_SUBSTITUTE, KFD_IOC_ALLOC_MEM_FLAGS_AQL_QUEUE_MEM,
        KFD_IOC_ALLOC_MEM_FLAGS_COHERENT, KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED,
        KFD_SMI_EVENT_NONE, KFD_SMI_EVENT_VMFAULT, KFD_SMI_EVENT_THERMAL_THROTTLE,
        KFD_SMI_EVENT_GPU_PRE_RESET, KFD_SMI_EVENT_GPU_POST_RESET,
        KFD_SMI_EVENT_MIGRATE_START, KFD_SMI_EVENT_MIGRATE_END,
        KFD_SMI_EVENT_PAGE_FAULT_START, KFD_SMI_EVENT_PAGE_FAULT_END,
        KFD_SMI_EVENT_QUEUE_EVICTION, KFD_SMI_EVENT_QUEUE_RESTORE,
        KFD_SMI_EVENT_UNMAP_FROM_GPU, KFD_SMI_EVENT_ALL_PROCESS,
        KFD_MIGRATE_TRIGGER_PREFETCH, KFD_MIGRATE_TRIGGER_PAGEFAULT_GPU,
        KFD_MIGRATE_TRIGGER_PAGEFAULT_CPU, KFD_MIGRATE_TRIGGER_TTM_EVICTION,
        KFD_QUEUE_EVICTION_TRIGGER_SVM, KFD_QUEUE_EVICTION_TRIGGER_USERPTR,
        KFD_QUEUE_EVICTION_TRIGGER_TTM, KFD_QUEUE_EVICTION_TRIGGER_SUSPEND,
        KFD_QUEUE_EVICTION_CRIU_CHECKPOINT, KFD_QUEUE_EVICTION_CRIU_RESTORE,
        KFD_SVM_UNMAP_TRIGGER_MMU_NOTIFY, KFD_SVM_UNMAP_TRIGGER_MMU_NOTIFY_MIGRATE,
        KFD_SVM_UNMAP_TRIGGER_UNMAP_FROM_CPU, KFD_SMI_EVENT_MSG_SIZE,
        KFD_CRIU_OP_PROCESS_INFO, KFD_CRIU_OP_CHECKPOINT, KFD_CRIU_OP_UNPAUSE,
        KFD_CRIU_OP_RESTORE, KFD_CRIU_OP_RESUME, KFD_MMIO_REMAP_HDP_MEM_FLUSH_CNTL,
        KFD_MMIO_REMAP_HDP_REG_FLUSH_CNTL, KFD_IOCTL_SVM_FLAG_HOST_ACCESS,
        KFD_IOCTL_SVM_FLAG_COHERENT, KFD_IOCTL_SVM_FLAG_HIVE_LOCAL, KFD_IOCTL_SVM_FLAG_GPU_RO,
        KFD_IOCTL_SVM_FLAG_GPU_EXEC, KFD_IOCTL_SVM_FLAG_GPU_READ_MOSTLY,
        KFD_IOCTL_SVM_FLAG_GPU_ALWAYS_MAPPED, KFD_IOCTL_SVM_OP_SET_ATTR,
        KFD_IOCTL_SVM_OP_GET_ATTR, KFD_IOCTL_SVM_LOCATION_SYSMEM,
        KFD_IOCTL_SVM_LOCATION_UNDEFINED, KFD_IOCTL_SVM_ATTR_PREFERRED_LOC,
        KFD_IOCTL_SVM_ATTR_PREFETCH_LOC, KFD_IOCTL_SVM_ATTR_ACCESS,
        KFD_IOCTL_SVM_ATTR_ACCESS_IN_PLACE, KFD_IOCTL_SVM_ATTR_NO_ACCESS,
        KFD_IOCTL_SVM_ATTR_SET_FLAGS, KFD_IOCTL_SVM_ATTR_CLR_FLAGS,
        KFD_IOCTL_SVM_ATTR_GRANULARITY, AMDKFD_IOCTL_BASE, AMDKFD_COMMAND_START,
        AMDKFD_COMMAND_END,
        // <asm-generic/ioctl.h>, through <linux/ioctl.h>.
        _IOC_NRBITS, _IOC_TYPEBITS, _IOC_SIZEBITS, _IOC_DIRBITS, _IOC_NRMASK, _IOC_TYPEMASK,
        _IOC_SIZEMASK, _IOC_DIRMASK, _IOC_NRSHIFT, _IOC_TYPESHIFT, _IOC_SIZESHIFT,
        _IOC_DIRSHIFT, _IOC_NONE, _IOC_WRITE, _IOC_READ,
    );
    exprs!(t;
        KFD_SMI_EVENT_MASK_FROM_INDEX: "KFD_SMI_EVENT_MASK_FROM_INDEX(1)"
            => KFD_SMI_EVENT_MASK_FROM_INDEX(1),
        KFD_SMI_EVENT_MASK_FROM_INDEX: "KFD_SMI_EVENT_MASK_FROM_INDEX(KFD_SMI_EVENT_ALL_PROCESS)"
            => KFD_SMI_EVENT_MASK_FROM_INDEX(KFD_SMI_EVENT_ALL_PROCESS),
        _IOC: "_IOC(_IOC_READ, 'K', 0x7f, 0x3fff)" => _IOC(_IOC_READ, b'K', 0x7f, 0x3fff),
        _IO: "_IO('K', 0x42)" => _IO(b'K', 0x42),
        _IOR: "_IOR('K', 1, struct kfd_process_device_apertures)"
            => _IOR::<kfd_process_device_apertures>(b'K', 1),
        _IOW: "_IOW('K', 2, struct kfd_ioctl_svm_args)" => _IOW::<kfd_ioctl_svm_args>(b'K', 2),
        _IOWR: "_IOWR('K', 3, struct kfd_event_data)" => _IOWR::<kfd_event_data>(b'K', 3),
        _IOC_DIR: "_IOC_DIR(AMDKFD_IOC_CRIU_OP)" => _IOC_DIR(AMDKFD_IOC_CRIU_OP),
        _IOC_TYPE: "_IOC_TYPE(AMDKFD_IOC_CRIU_OP)" => _IOC_TYPE(AMDKFD_IOC_CRIU_OP),
        _IOC_NR: "_IOC_NR(AMDKFD_IOC_CRIU_OP)" => _IOC_NR(AMDKFD_IOC_CRIU_OP),
        _IOC_SIZE: "_IOC_SIZE(AMDKFD_IOC_CRIU_OP)" => _IOC_SIZE(AMDKFD_IOC_CRIU_OP),
        _IOC_DIR: "_IOC_DIR(AMDKFD_IOC_FREE_MEMORY_OF_GPU)"
            => _IOC_DIR(AMDKFD_IOC_FREE_MEMORY_OF_GPU),
    );
    t
}

/// The `drm.h` / `amdgpu_drm.h` subset the crate mirrors, as installed (libdrm).
fn drm_table() -> Table {
    let mut t = Table::default();
    structs!(t;
        struct drm_version {
            version_major, version_minor, version_patchlevel, name_len, name, date_len, date,
            desc_len, desc
        };
        struct drm_gem_close { handle, pad };
        struct drm_prime_handle { handle, flags, fd };
        struct drm_amdgpu_gem_create_in { bo_size, alignment, domains, domain_flags };
        struct drm_amdgpu_gem_create_out { handle, _pad };
        union drm_amdgpu_gem_create { r#in = "in", out };
        struct drm_amdgpu_bo_list_in {
            operation, list_handle, bo_number, bo_info_size, bo_info_ptr
        };
        struct drm_amdgpu_bo_list_entry { bo_handle, bo_priority };
        struct drm_amdgpu_bo_list_out { list_handle, _pad };
        union drm_amdgpu_bo_list { r#in = "in", out };
        struct drm_amdgpu_ctx_in { op, flags, ctx_id, priority };
        struct drm_amdgpu_ctx_out_alloc = "__typeof__(((union drm_amdgpu_ctx_out*)0)->alloc)"
            { ctx_id, _pad };
        struct drm_amdgpu_ctx_out_state = "__typeof__(((union drm_amdgpu_ctx_out*)0)->state)"
            { flags, hangs, reset_status };
        struct drm_amdgpu_ctx_out_pstate = "__typeof__(((union drm_amdgpu_ctx_out*)0)->pstate)"
            { flags, _pad };
        union drm_amdgpu_ctx_out { alloc, state, pstate };
        union drm_amdgpu_ctx { r#in = "in", out };
        struct drm_amdgpu_gem_metadata_data
            = "__typeof__(((struct drm_amdgpu_gem_metadata*)0)->data)"
            { flags, tiling_info, data_size_bytes, data };
        struct drm_amdgpu_gem_metadata { handle, op, data };
        struct drm_amdgpu_gem_userptr { addr, size, flags, handle };
        struct drm_amdgpu_gem_mmap_in { handle, _pad };
        struct drm_amdgpu_gem_mmap_out { addr_ptr };
        union drm_amdgpu_gem_mmap { r#in = "in", out };
        struct drm_amdgpu_wait_cs_in { handle, timeout, ip_type, ip_instance, ring, ctx_id };
        struct drm_amdgpu_wait_cs_out { status };
        union drm_amdgpu_wait_cs { r#in = "in", out };
        struct drm_amdgpu_gem_op extends num_entries { handle, op, value };
        struct drm_amdgpu_gem_va {
            handle, _pad, operation, flags, va_address, offset_in_bo, map_size
        };
        struct drm_amdgpu_cs_chunk { chunk_id, length_dw, chunk_data };
        struct drm_amdgpu_cs_in { ctx_id, bo_list_handle, num_chunks, flags, chunks };
        struct drm_amdgpu_cs_out { handle };
        union drm_amdgpu_cs { r#in = "in", out };
        struct drm_amdgpu_cs_chunk_ib {
            _pad, flags, va_start, ib_bytes, ip_type, ip_instance, ring
        };
        struct drm_amdgpu_cs_chunk_dep { ip_type, ip_instance, ring, ctx_id, handle };
        struct drm_amdgpu_cs_chunk_fence { handle, offset };
        struct drm_amdgpu_cs_chunk_syncobj { handle, flags, point };
        union drm_amdgpu_cs_chunk_data = "struct drm_amdgpu_cs_chunk_data"
            { ib_data, fence_data };
        struct drm_amdgpu_query_fw { fw_type, ip_instance, index, _pad };
        struct drm_amdgpu_info_mode_crtc
            = "__typeof__(((struct drm_amdgpu_info*)0)->mode_crtc)" { id, _pad };
        struct drm_amdgpu_info_query_hw_ip
            = "__typeof__(((struct drm_amdgpu_info*)0)->query_hw_ip)"
            { r#type = "type", ip_instance };
        struct drm_amdgpu_info_read_mmr_reg
            = "__typeof__(((struct drm_amdgpu_info*)0)->read_mmr_reg)"
            { dword_offset, count, instance, flags };
        struct drm_amdgpu_info_vbios_info
            = "__typeof__(((struct drm_amdgpu_info*)0)->vbios_info)"
            { r#type = "type", offset };
        struct drm_amdgpu_info_sensor_info
            = "__typeof__(((struct drm_amdgpu_info*)0)->sensor_info)" { r#type = "type" };
        struct drm_amdgpu_info_video_cap
            = "__typeof__(((struct drm_amdgpu_info*)0)->video_cap)" { r#type = "type" };
        struct drm_amdgpu_info {
            return_pointer, return_size, query, request = "read_mmr_reg"
        };
        struct drm_amdgpu_info_firmware { ver, feature };
        struct drm_amdgpu_info_vram_gtt { vram_size, vram_cpu_accessible_size, gtt_size };
        struct drm_amdgpu_heap_info {
            total_heap_size, usable_heap_size, heap_usage, max_allocation
        };
        struct drm_amdgpu_memory_info { vram, cpu_accessible_vram, gtt };
        struct drm_amdgpu_info_device {
            device_id, chip_rev, external_rev, pci_rev, family, num_shader_engines,
            num_shader_arrays_per_engine, gpu_counter_freq, max_engine_clock,
            max_memory_clock, cu_active_number, cu_ao_mask, cu_bitmap,
            enabled_rb_pipes_mask, num_rb_pipes, num_hw_gfx_contexts, _pad, ids_flags,
            virtual_address_offset, virtual_address_max, virtual_address_alignment,
            pte_fragment_size, gart_page_size, ce_ram_size, vram_type, vram_bit_width,
            vce_harvest_config, gc_double_offchip_lds_buf, prim_buf_gpu_addr,
            pos_buf_gpu_addr, cntl_sb_buf_gpu_addr, param_buf_gpu_addr, prim_buf_size,
            pos_buf_size, cntl_sb_buf_size, param_buf_size, wave_front_size,
            num_shader_visible_vgprs, num_cu_per_sh, num_tcc_blocks, gs_vgt_table_depth,
            gs_prim_buffer_depth, max_gs_waves_per_vgt, _pad1, cu_ao_bitmap, high_va_offset,
            high_va_max, pa_sc_tile_steering_override, tcc_disabled_mask
        };
        struct drm_amdgpu_info_hw_ip {
            hw_ip_version_major, hw_ip_version_minor, capabilities_flags, ib_start_alignment,
            ib_size_alignment, available_rings, _pad
        };
    );
    anon_structs!(t;
        union drm_amdgpu_info_request in "struct drm_amdgpu_info"
            sized "sizeof(struct drm_amdgpu_info) - offsetof(struct drm_amdgpu_info, mode_crtc)"
            { mode_crtc, query_hw_ip, read_mmr_reg, query_fw, vbios_info, sensor_info, video_cap };
    );
    values!(t, Kind::Request;
        DRM_IOCTL_VERSION, DRM_IOCTL_GEM_CLOSE, DRM_IOCTL_PRIME_HANDLE_TO_FD,
        DRM_IOCTL_PRIME_FD_TO_HANDLE, DRM_IOCTL_AMDGPU_GEM_CREATE, DRM_IOCTL_AMDGPU_GEM_MMAP,
        DRM_IOCTL_AMDGPU_CTX, DRM_IOCTL_AMDGPU_BO_LIST, DRM_IOCTL_AMDGPU_CS,
        DRM_IOCTL_AMDGPU_INFO, DRM_IOCTL_AMDGPU_GEM_VA, DRM_IOCTL_AMDGPU_WAIT_CS,
        DRM_IOCTL_AMDGPU_GEM_USERPTR, DRM_IOCTL_AMDGPU_GEM_METADATA,
    );
    // The crate's GEM_OP argument is the 24-byte upstream layout; the installed header's
    // request code must equal ours re-encoded with the installed 16-byte size.
    t.push(
        Kind::Request,
        "DRM_IOCTL_AMDGPU_GEM_OP (installed 16-byte form)".into(),
        "(__u32)(DRM_IOCTL_AMDGPU_GEM_OP)".into(),
        "1".into(),
        u64::from(_IOC(
            _IOC_DIR(DRM_IOCTL_AMDGPU_GEM_OP),
            _IOC_TYPE(DRM_IOCTL_AMDGPU_GEM_OP),
            _IOC_NR(DRM_IOCTL_AMDGPU_GEM_OP),
            offset_of!(drm_amdgpu_gem_op, num_entries),
        )),
    );
    t.items.insert("DRM_IOCTL_AMDGPU_GEM_OP".into());
    values!(t, Kind::Constant;
        DRM_IOCTL_BASE, DRM_COMMAND_BASE, DRM_COMMAND_END, DRM_RDWR, DRM_CLOEXEC,
        DRM_AMDGPU_GEM_CREATE, DRM_AMDGPU_GEM_MMAP, DRM_AMDGPU_CTX, DRM_AMDGPU_BO_LIST,
        DRM_AMDGPU_CS, DRM_AMDGPU_INFO, DRM_AMDGPU_GEM_METADATA, DRM_AMDGPU_GEM_WAIT_IDLE,
        DRM_AMDGPU_GEM_VA, DRM_AMDGPU_WAIT_CS, DRM_AMDGPU_GEM_OP, DRM_AMDGPU_GEM_USERPTR,
        DRM_AMDGPU_WAIT_FENCES, DRM_AMDGPU_VM, DRM_AMDGPU_FENCE_TO_HANDLE, DRM_AMDGPU_SCHED,
        AMDGPU_GEM_DOMAIN_CPU, AMDGPU_GEM_DOMAIN_GTT, AMDGPU_GEM_DOMAIN_VRAM,
        AMDGPU_GEM_DOMAIN_GDS, AMDGPU_GEM_DOMAIN_GWS, AMDGPU_GEM_DOMAIN_OA,
        AMDGPU_GEM_DOMAIN_MASK, AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED,
        AMDGPU_GEM_CREATE_NO_CPU_ACCESS, AMDGPU_GEM_CREATE_CPU_GTT_USWC,
        AMDGPU_GEM_CREATE_VRAM_CLEARED, AMDGPU_GEM_CREATE_VRAM_CONTIGUOUS,
        AMDGPU_GEM_CREATE_VM_ALWAYS_VALID, AMDGPU_GEM_CREATE_EXPLICIT_SYNC,
        AMDGPU_GEM_CREATE_CP_MQD_GFX9, AMDGPU_GEM_CREATE_VRAM_WIPE_ON_RELEASE,
        AMDGPU_GEM_CREATE_ENCRYPTED, AMDGPU_GEM_CREATE_PREEMPTIBLE, AMDGPU_BO_LIST_OP_CREATE,
        AMDGPU_BO_LIST_OP_DESTROY, AMDGPU_BO_LIST_OP_UPDATE, AMDGPU_CTX_OP_ALLOC_CTX,
        AMDGPU_CTX_OP_FREE_CTX, AMDGPU_CTX_OP_QUERY_STATE, AMDGPU_CTX_OP_QUERY_STATE2,
        AMDGPU_CTX_OP_GET_STABLE_PSTATE, AMDGPU_CTX_OP_SET_STABLE_PSTATE, AMDGPU_CTX_NO_RESET,
        AMDGPU_CTX_GUILTY_RESET, AMDGPU_CTX_INNOCENT_RESET, AMDGPU_CTX_UNKNOWN_RESET,
        AMDGPU_CTX_QUERY2_FLAGS_RESET, AMDGPU_CTX_QUERY2_FLAGS_VRAMLOST,
        AMDGPU_CTX_QUERY2_FLAGS_GUILTY, AMDGPU_CTX_QUERY2_FLAGS_RAS_CE,
        AMDGPU_CTX_QUERY2_FLAGS_RAS_UE, AMDGPU_CTX_PRIORITY_UNSET,
        AMDGPU_CTX_PRIORITY_VERY_LOW, AMDGPU_CTX_PRIORITY_LOW, AMDGPU_CTX_PRIORITY_NORMAL,
        AMDGPU_CTX_PRIORITY_HIGH, AMDGPU_CTX_PRIORITY_VERY_HIGH,
        AMDGPU_CTX_STABLE_PSTATE_FLAGS_MASK, AMDGPU_CTX_STABLE_PSTATE_NONE,
        AMDGPU_CTX_STABLE_PSTATE_STANDARD, AMDGPU_CTX_STABLE_PSTATE_MIN_SCLK,
        AMDGPU_CTX_STABLE_PSTATE_MIN_MCLK, AMDGPU_CTX_STABLE_PSTATE_PEAK,
        AMDGPU_GEM_USERPTR_READONLY, AMDGPU_GEM_USERPTR_ANONONLY, AMDGPU_GEM_USERPTR_VALIDATE,
        AMDGPU_GEM_USERPTR_REGISTER, AMDGPU_GEM_METADATA_OP_SET_METADATA,
        AMDGPU_GEM_METADATA_OP_GET_METADATA, AMDGPU_GEM_OP_GET_GEM_CREATE_INFO,
        AMDGPU_GEM_OP_SET_PLACEMENT, AMDGPU_VA_OP_MAP, AMDGPU_VA_OP_UNMAP, AMDGPU_VA_OP_CLEAR,
        AMDGPU_VA_OP_REPLACE, AMDGPU_VM_DELAY_UPDATE, AMDGPU_VM_PAGE_READABLE,
        AMDGPU_VM_PAGE_WRITEABLE, AMDGPU_VM_PAGE_EXECUTABLE, AMDGPU_VM_PAGE_PRT,
        AMDGPU_VM_MTYPE_MASK, AMDGPU_VM_MTYPE_DEFAULT, AMDGPU_VM_MTYPE_NC, AMDGPU_VM_MTYPE_WC,
        AMDGPU_VM_MTYPE_CC, AMDGPU_VM_MTYPE_UC, AMDGPU_VM_MTYPE_RW, AMDGPU_HW_IP_GFX,
        AMDGPU_HW_IP_COMPUTE, AMDGPU_HW_IP_DMA, AMDGPU_HW_IP_UVD, AMDGPU_HW_IP_VCE,
        AMDGPU_HW_IP_UVD_ENC, AMDGPU_HW_IP_VCN_DEC, AMDGPU_HW_IP_VCN_ENC,
        AMDGPU_HW_IP_VCN_JPEG, AMDGPU_HW_IP_NUM, AMDGPU_HW_IP_INSTANCE_MAX_COUNT,
        AMDGPU_CHUNK_ID_IB, AMDGPU_CHUNK_ID_FENCE, AMDGPU_CHUNK_ID_DEPENDENCIES,
        AMDGPU_CHUNK_ID_SYNCOBJ_IN, AMDGPU_CHUNK_ID_SYNCOBJ_OUT, AMDGPU_CHUNK_ID_BO_HANDLES,
        AMDGPU_CHUNK_ID_SCHEDULED_DEPENDENCIES, AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_WAIT,
        AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_SIGNAL, AMDGPU_IB_FLAG_CE, AMDGPU_IB_FLAG_PREAMBLE,
        AMDGPU_IB_FLAG_PREEMPT, AMDGPU_IB_FLAG_TC_WB_NOT_INVALIDATE,
        AMDGPU_IB_FLAG_RESET_GDS_MAX_WAVE_ID, AMDGPU_IB_FLAGS_SECURE,
        AMDGPU_IB_FLAG_EMIT_MEM_SYNC, AMDGPU_IDS_FLAGS_FUSION, AMDGPU_IDS_FLAGS_PREEMPTION,
        AMDGPU_IDS_FLAGS_TMZ, AMDGPU_INFO_ACCEL_WORKING, AMDGPU_INFO_CRTC_FROM_ID,
        AMDGPU_INFO_HW_IP_INFO, AMDGPU_INFO_HW_IP_COUNT, AMDGPU_INFO_TIMESTAMP,
        AMDGPU_INFO_FW_VERSION, AMDGPU_INFO_NUM_BYTES_MOVED, AMDGPU_INFO_VRAM_USAGE,
        AMDGPU_INFO_GTT_USAGE, AMDGPU_INFO_GDS_CONFIG, AMDGPU_INFO_VRAM_GTT,
        AMDGPU_INFO_READ_MMR_REG, AMDGPU_INFO_DEV_INFO, AMDGPU_INFO_VIS_VRAM_USAGE,
        AMDGPU_INFO_NUM_EVICTIONS, AMDGPU_INFO_MEMORY, AMDGPU_INFO_VCE_CLOCK_TABLE,
        AMDGPU_INFO_VBIOS, AMDGPU_INFO_NUM_HANDLES, AMDGPU_INFO_SENSOR,
        AMDGPU_INFO_NUM_VRAM_CPU_PAGE_FAULTS, AMDGPU_INFO_VRAM_LOST_COUNTER,
        AMDGPU_INFO_RAS_ENABLED_FEATURES, AMDGPU_INFO_VIDEO_CAPS, AMDGPU_INFO_FW_VCE, AMDGPU_INFO_FW_UVD, AMDGPU_INFO_FW_GMC, AMDGPU_INFO_FW_GFX_ME, AMDGPU_INFO_FW_GFX_PFP, AMDGPU_INFO_FW_GFX_CE, AMDGPU_INFO_FW_GFX_RLC, AMDGPU_INFO_FW_GFX_MEC, AMDGPU_INFO_FW_SMC, AMDGPU_INFO_FW_SDMA, AMDGPU_INFO_FW_SOS, AMDGPU_INFO_FW_ASD, AMDGPU_INFO_FW_VCN, AMDGPU_INFO_FW_GFX_RLC_RESTORE_LIST_CNTL, AMDGPU_INFO_FW_GFX_RLC_RESTORE_LIST_GPM_MEM, AMDGPU_INFO_FW_GFX_RLC_RESTORE_LIST_SRM_MEM, AMDGPU_INFO_FW_DMCU, AMDGPU_INFO_FW_TA, AMDGPU_INFO_FW_DMCUB, AMDGPU_INFO_FW_TOC, AMDGPU_INFO_VBIOS_SIZE, AMDGPU_INFO_VBIOS_IMAGE, AMDGPU_INFO_VBIOS_INFO, AMDGPU_INFO_SENSOR_GFX_SCLK, AMDGPU_INFO_SENSOR_GFX_MCLK, AMDGPU_INFO_SENSOR_GPU_TEMP, AMDGPU_INFO_SENSOR_GPU_LOAD, AMDGPU_INFO_SENSOR_GPU_AVG_POWER, AMDGPU_INFO_SENSOR_VDDNB, AMDGPU_INFO_SENSOR_VDDGFX, AMDGPU_INFO_SENSOR_STABLE_PSTATE_GFX_SCLK, AMDGPU_INFO_SENSOR_STABLE_PSTATE_GFX_MCLK, AMDGPU_INFO_RAS_ENABLED_UMC, AMDGPU_INFO_RAS_ENABLED_SDMA, AMDGPU_INFO_RAS_ENABLED_GFX, AMDGPU_INFO_RAS_ENABLED_MMHUB, AMDGPU_INFO_RAS_ENABLED_ATHUB, AMDGPU_INFO_RAS_ENABLED_PCIE, AMDGPU_INFO_RAS_ENABLED_HDP, AMDGPU_INFO_RAS_ENABLED_XGMI, AMDGPU_INFO_RAS_ENABLED_DF, AMDGPU_INFO_RAS_ENABLED_SMN, AMDGPU_INFO_RAS_ENABLED_SEM, AMDGPU_INFO_RAS_ENABLED_MP0, AMDGPU_INFO_RAS_ENABLED_MP1, AMDGPU_INFO_RAS_ENABLED_FUSE, AMDGPU_INFO_VIDEO_CAPS_DECODE, AMDGPU_INFO_VIDEO_CAPS_ENCODE, AMDGPU_INFO_MMR_SE_INDEX_SHIFT, AMDGPU_INFO_MMR_SE_INDEX_MASK, AMDGPU_INFO_MMR_SH_INDEX_SHIFT, AMDGPU_INFO_MMR_SH_INDEX_MASK, AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_MPEG2, AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_MPEG4, AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_VC1, AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_MPEG4_AVC, AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_HEVC, AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_JPEG, AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_VP9, AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_AV1, AMDGPU_INFO_VIDEO_CAPS_CODEC_IDX_COUNT,
        AMDGPU_VRAM_TYPE_UNKNOWN, AMDGPU_VRAM_TYPE_GDDR1, AMDGPU_VRAM_TYPE_DDR2,
        AMDGPU_VRAM_TYPE_GDDR3, AMDGPU_VRAM_TYPE_GDDR4, AMDGPU_VRAM_TYPE_GDDR5,
        AMDGPU_VRAM_TYPE_HBM, AMDGPU_VRAM_TYPE_DDR3, AMDGPU_VRAM_TYPE_DDR4,
        AMDGPU_VRAM_TYPE_GDDR6, AMDGPU_VRAM_TYPE_DDR5, AMDGPU_FAMILY_UNKNOWN,
        AMDGPU_FAMILY_SI, AMDGPU_FAMILY_CI, AMDGPU_FAMILY_KV, AMDGPU_FAMILY_VI,
        AMDGPU_FAMILY_CZ, AMDGPU_FAMILY_AI, AMDGPU_FAMILY_RV, AMDGPU_FAMILY_NV,
        AMDGPU_FAMILY_VGH, AMDGPU_FAMILY_YC,
    );
    t
}

/// Items newer than the installed headers (or kernel-internal), with no C definition
/// to probe; `tests/spec.rs` checks each against the specs.
const NOT_IN_INSTALLED_HEADERS: &[&str] = &[
    // kfd_ioctl.h after 1.11, and kfd_priv.h.
    "KFD_IOC_QUEUE_TYPE_SDMA_BY_ENG_ID",
    "KFD_INVALID_GPUID",
    "KFD_INVALID_QUEUEID",
    "KFD_IOC_ALLOC_MEM_FLAGS_EXT_COHERENT",
    "KFD_IOC_ALLOC_MEM_FLAGS_CONTIGUOUS_BEST_EFFORT",
    "kfd_ioctl_export_dmabuf_args",
    "AMDKFD_IOC_EXPORT_DMABUF",
    "KFD_IOCTL_SVM_FLAG_EXT_COHERENT",
    "KFD_MMAP_TYPE_SHIFT",
    "KFD_MMAP_TYPE_MASK",
    "KFD_MMAP_TYPE_DOORBELL",
    "KFD_MMAP_TYPE_EVENTS",
    "KFD_MMAP_TYPE_RESERVED_MEM",
    "KFD_MMAP_TYPE_MMIO",
    "KFD_MMAP_GPU_ID_SHIFT",
    "KFD_MMAP_GPU_ID_MASK",
    "KFD_MMAP_OFFSET_VALUE_MASK",
    "KFD_MMAP_GPU_ID",
    "KFD_MMAP_GET_GPU_ID",
    "KFD_CRIU_PRIV_VERSION",
    "kfd_criu_object_type",
    "KFD_CRIU_OBJECT_TYPE_QUEUE",
    "KFD_CRIU_OBJECT_TYPE_EVENT",
    "KFD_CRIU_OBJECT_TYPE_SVM_RANGE",
    // drm.h / amdgpu_drm.h newer than libdrm 2.4.114, and DRM internals.
    "drm_gem_change_handle",
    "DRM_IOCTL_GEM_CHANGE_HANDLE",
    "DRM_FILE_PAGE_OFFSET_START",
    "DRM_AMDGPU_GEM_LIST_HANDLES",
    "DRM_IOCTL_AMDGPU_GEM_LIST_HANDLES",
    "drm_amdgpu_gem_list_handles",
    "drm_amdgpu_gem_list_handles_entry",
    "AMDGPU_GEM_LIST_HANDLES_FLAG_IS_IMPORT",
    "AMDGPU_GEM_OP_GET_MAPPING_INFO",
    "drm_amdgpu_gem_vm_entry",
    "AMDGPU_GEM_DOMAIN_DOORBELL",
    "AMDGPU_GEM_DOMAIN_MMIO_REMAP",
    "AMDGPU_VM_PAGE_NOALLOC",
    "AMDGPU_CHUNK_ID_CP_GFX_SHADOW",
    "AMDGPU_FAMILY_GC_11_0_0",
    "AMDGPU_FAMILY_GC_11_0_1",
    "AMDGPU_FAMILY_GC_10_3_6",
    "AMDGPU_FAMILY_GC_11_5_0",
    "AMDGPU_FAMILY_GC_10_3_7",
    "AMDGPU_FAMILY_GC_12_0_0",
    // sdma.rs: kernel driver packet headers, not uapi.
    "SDMA_OP_NOP",
    "SDMA_OP_COPY",
    "SDMA_SUBOP_COPY_LINEAR",
    "SDMA_PKT_HEADER_op_mask",
    "SDMA_PKT_HEADER_op_shift",
    "SDMA_PKT_HEADER_sub_op_mask",
    "SDMA_PKT_HEADER_sub_op_shift",
    "SDMA_PKT_COPY_LINEAR_COUNT_count_mask",
    "SDMA_PKT_COPY_LINEAR_COUNT_count_shift",
    "SDMA_PKT_NOP_HEADER_count_mask",
    "SDMA_PKT_NOP_HEADER_count_shift",
    "SDMA_CIK_COPY_MAX_BYTES",
    "SDMA_V2_4_COPY_MAX_BYTES",
    "SDMA_V3_0_COPY_MAX_BYTES",
    "SDMA_V4_COPY_MAX_BYTES",
    "SI_DMA_COPY_MAX_BYTES",
    "SDMA_IB_ALIGNMENT",
    "SDMA_IB_PAD_DWORDS",
    "SDMA_PKT_COPY_LINEAR_HEADER_OP",
    "SDMA_PKT_COPY_LINEAR_HEADER_SUB_OP",
    "SDMA_PKT_COPY_LINEAR_COUNT_COUNT",
    "SDMA_PKT_NOP_HEADER_COUNT",
    "sdma_pkt_copy_linear",
    "SDMA_PKT_COPY_LINEAR_DWORDS",
    // sdma.rs: the packets user-mode SDMA queues carry (kfd-sim executes them).
    "SDMA_ATOMIC_ADD64",
    "SDMA_OP_ATOMIC",
    "SDMA_OP_COND_EXE",
    "SDMA_OP_CONST_FILL",
    "SDMA_OP_FENCE",
    "SDMA_OP_GCR",
    "SDMA_OP_INDIRECT",
    "SDMA_OP_POLL_REGMEM",
    "SDMA_OP_PRE_EXE",
    "SDMA_OP_PTEPDE",
    "SDMA_OP_SEM",
    "SDMA_OP_SRBM_WRITE",
    "SDMA_OP_TIMESTAMP",
    "SDMA_OP_TRAP",
    "SDMA_OP_WRITE",
    "SDMA_PKT_COPY_LINEAR_HEADER_broadcast_shift",
    "SDMA_PKT_POLL_REGMEM_HEADER_func_shift",
    "SDMA_PKT_POLL_REGMEM_HEADER_hdp_flush_shift",
    "SDMA_PKT_POLL_REGMEM_HEADER_mem_poll_shift",
    "SDMA_POLL_RETRY_FOREVER",
    "SDMA_SUBOP_COPY_LINEAR_RECT",
    "SDMA_SUBOP_TIMESTAMP_GET",
    "SDMA_SUBOP_TIMESTAMP_GET_GLOBAL",
    "SDMA_SUBOP_TIMESTAMP_SET",
    "SDMA_SUBOP_USER_GCR",
    "SDMA_SUBOP_WRITE_LINEAR",
    // pm4.rs: amdkfd kfd_pm4_opcodes.h, amdgpu soc15d.h, kfdtest headers.
    "EVENT_INDEX_CS_PARTIAL_FLUSH",
    "EVENT_INDEX_END_OF_PIPE",
    "IT_ACQUIRE_MEM",
    "IT_DISPATCH_DIRECT",
    "IT_DISPATCH_INDIRECT",
    "IT_EVENT_WRITE",
    "IT_EVENT_WRITE_EOP",
    "IT_INDIRECT_BUFFER",
    "IT_NOP",
    "IT_RELEASE_MEM",
    "IT_SET_SH_REG",
    "IT_WAIT_REG_MEM",
    "IT_WRITE_DATA",
    "MMCOMPUTE_PGM_LO",
    "PERSISTENT_SPACE_START",
    "PM4_COUNT_MASK",
    "PM4_COUNT_SHIFT",
    "PM4_NOP_ONE_DWORD_COUNT",
    "PM4_OPCODE_MASK",
    "PM4_OPCODE_SHIFT",
    "PM4_TYPE_SHIFT",
];

/// Writes, compiles and runs the probe; returns one `(value, fits)` per check.
fn run_probe(
    dir: &Path,
    name: &str,
    include_dirs: &[PathBuf],
    headers: &[&str],
    checks: &[Check],
) -> Result<Vec<(u64, bool)>, String> {
    let mut src = String::from("#include <stdio.h>\n#include <stddef.h>\n");
    for h in headers {
        writeln!(src, "#include <{h}>").unwrap();
    }
    src.push_str("int main(void) {\n");
    for c in checks {
        writeln!(
            src,
            "    printf(\"%llu %d\\n\", (unsigned long long)({}), (int)!!({}));",
            c.c_value, c.c_fits
        )
        .unwrap();
    }
    src.push_str("    return 0;\n}\n");
    let c_path = dir.join(format!("{name}.c"));
    let exe_path = dir.join(name);
    std::fs::write(&c_path, &src).map_err(|e| format!("write {}: {e}", c_path.display()))?;
    let mut cc = Command::new("cc");
    cc.arg("-std=gnu11").arg("-w");
    for d in include_dirs {
        cc.arg("-I").arg(d);
    }
    let out = cc
        .arg("-o")
        .arg(&exe_path)
        .arg(&c_path)
        .output()
        .map_err(|e| format!("run cc: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cc failed on {}:\n{}",
            c_path.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let out = Command::new(&exe_path)
        .output()
        .map_err(|e| format!("run {}: {e}", exe_path.display()))?;
    if !out.status.success() {
        return Err(format!(
            "probe {} exited with {}",
            exe_path.display(),
            out.status
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let values: Vec<(u64, bool)> = text
        .lines()
        .map(|line| {
            let (v, fits) = line
                .split_once(' ')
                .ok_or_else(|| format!("bad probe line {line:?}"))?;
            let v = v
                .parse::<u64>()
                .map_err(|e| format!("bad probe value {v:?}: {e}"))?;
            Ok((v, fits == "1"))
        })
        .collect::<Result<_, String>>()?;
    if values.len() != checks.len() {
        return Err(format!(
            "probe printed {} values for {} checks",
            values.len(),
            checks.len()
        ));
    }
    Ok(values)
}

/// Compares, prints the summary and returns the mismatch descriptions.
fn compare(title: &str, table: &Table, values: &[(u64, bool)]) -> Vec<String> {
    let mut bad = Vec::new();
    for (check, &(c, fits)) in table.checks.iter().zip(values) {
        if c != check.rust {
            bad.push(format!(
                "{}: C {}, Rust {}",
                check.label,
                show(c),
                show(check.rust)
            ));
        } else if !fits {
            bad.push(format!(
                "{}: C value {c:#x} does not fit the Rust type",
                check.label
            ));
        }
    }
    println!(
        "{title}: compared {} structs/unions ({} size/align checks), {} fields ({} offset/size checks), \
         {} enum types, {} request codes, {} constants, {} macro expressions; {} checks, {} mismatches",
        table.structs,
        table.count(Kind::Layout),
        table.fields,
        table.count(Kind::Field),
        table.count(Kind::Enum),
        table.count(Kind::Request),
        table.count(Kind::Constant),
        table.count(Kind::Expr),
        table.checks.len(),
        bad.len()
    );
    bad
}

/// A probe value in decimal and hex, and as a signed number when it looks negative.
fn show(v: u64) -> String {
    if v >> 63 == 1 {
        format!("{v:#x} (signed {})", v as i64)
    } else {
        format!("{v} ({v:#x})")
    }
}

fn have_cc() -> bool {
    Command::new("cc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn kfd_ioctl_h_matches_rust() {
    let header = Path::new("/usr/include/linux/kfd_ioctl.h");
    if !header.exists() {
        test_env::skip(format!(
            "{} not found (install linux-libc-dev)",
            header.display()
        ));
        return;
    }
    if !have_cc() {
        test_env::skip("no C compiler `cc` on PATH (install gcc)");
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("kfd-sys-abi-")
        .tempdir()
        .unwrap();
    // kfd_ioctl.h includes <drm/drm.h> only for the __u32 family and the _IOC macros;
    // Debian ships no /usr/include/drm, so a shim provides exactly those.
    std::fs::create_dir(dir.path().join("drm")).unwrap();
    std::fs::write(
        dir.path().join("drm/drm.h"),
        "#include <linux/types.h>\n#include <linux/ioctl.h>\n",
    )
    .unwrap();
    let table = kfd_table();
    let values = run_probe(
        dir.path(),
        "kfd_probe",
        &[dir.path().to_path_buf()],
        &["linux/ioctl.h", "linux/kfd_ioctl.h"],
        &table.checks,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let bad = compare("kfd_ioctl.h", &table, &values);
    assert!(
        bad.is_empty(),
        "{} mismatches with kfd_ioctl.h:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn drm_headers_match_rust() {
    let libdrm = Path::new("/usr/include/libdrm");
    if !libdrm.join("amdgpu_drm.h").exists() || !libdrm.join("drm.h").exists() {
        test_env::skip(format!(
            "{}/drm.h or amdgpu_drm.h not found; install libdrm-dev to check the DRM half",
            libdrm.display()
        ));
        return;
    }
    if !have_cc() {
        test_env::skip("no C compiler `cc` on PATH (install gcc)");
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("kfd-sys-abi-")
        .tempdir()
        .unwrap();
    let table = drm_table();
    let values = run_probe(
        dir.path(),
        "drm_probe",
        &[libdrm.to_path_buf()],
        &["fcntl.h", "linux/ioctl.h", "drm.h", "amdgpu_drm.h"],
        &table.checks,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let bad = compare("drm.h + amdgpu_drm.h", &table, &values);
    assert!(
        bad.is_empty(),
        "{} mismatches with the libdrm headers:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// Public item names declared in the crate's sources.
fn crate_items() -> BTreeSet<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut items = BTreeSet::new();
    // Every module of the crate but the crate root and the layout checks,
    // so that a new module cannot go unchecked.
    let mut files: Vec<_> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .filter(|p| !["lib.rs", "layout.rs"].contains(&p.file_name().unwrap().to_str().unwrap()))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for line in text.lines() {
            let line = line.trim_start();
            for prefix in [
                "pub const fn ",
                "pub const ",
                "pub struct ",
                "pub union ",
                "pub type ",
            ] {
                if let Some(rest) = line.strip_prefix(prefix) {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    items.insert(name);
                    break;
                }
            }
        }
    }
    items
}

#[test]
fn every_item_is_checked() {
    let probed: BTreeSet<String> = kfd_table()
        .items
        .union(&drm_table().items)
        .cloned()
        .collect();
    let spec_text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/spec.rs"))
            .unwrap();
    let mut unchecked = Vec::new();
    for item in crate_items() {
        let spec_only = NOT_IN_INSTALLED_HEADERS.contains(&item.as_str());
        if probed.contains(&item) {
            assert!(
                !spec_only,
                "{item} is both probed and listed as not in the installed headers"
            );
        } else if !spec_only {
            unchecked.push(format!("{item}: in neither probe table"));
        } else if !spec_text.contains(&item) {
            unchecked.push(format!(
                "{item}: not in the installed headers and not checked in tests/spec.rs"
            ));
        }
    }
    println!(
        "crate items: {} probed against C headers, {} checked against the specs, {} unchecked",
        probed.len(),
        NOT_IN_INSTALLED_HEADERS.len(),
        unchecked.len()
    );
    assert!(
        unchecked.is_empty(),
        "unchecked crate items:\n{}",
        unchecked.join("\n")
    );
}
