//! Submission on a render node: contexts, BO lists, command submission
//! (CS) and fence waits (WAIT_CS).
//!
//! A CS is validated here with the kernel's checks in the kernel's order,
//! then handed to the GPU's SDMA engine as a job with a snapshot of the
//! file's VM; its fence is remembered per (context, ring) entity under the
//! sequence number CS returns. Only the DMA IP has rings in the simulator:
//! GFX and COMPUTE submissions fail the ring check (`EINVAL`). This module
//! never executes packets itself.

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use kfd_sys as k;

use super::{read_arg, vm_view, write_arg, Call, Context, Entity, Step, SCHED_JOBS};
use crate::hw::bo::BoId;
use crate::hw::sdma::{Deadline, Fence, Ib, Job, JobError, ShortDma};
use crate::kernel::copy_from_user;
use ::kfd::Errno;

/// `AMDGPU_VM_MAX_NUM_CTX`: context ids are below this.
const MAX_CTX: u32 = 4096;

/// Largest array the simulator copies in for one request (BO list entries,
/// CS chunks); the kernel's kvmalloc would fail long before.
const MAX_ARRAY_BYTES: u64 = 256 << 20;

fn done(v: c_int) -> Result<Step, Errno> {
    Ok(Step::Done(v))
}

/// Number of rings the simulator has for an IP type (`EINVAL` for an IP
/// type the kernel does not know).
fn rings(call: &Call<'_>, ip_type: u32) -> Result<u32, Errno> {
    if ip_type >= k::AMDGPU_HW_IP_NUM {
        return Err(Errno(libc::EINVAL));
    }
    Ok(if ip_type == k::AMDGPU_HW_IP_DMA {
        call.device().sdma.ring_count()
    } else {
        0
    })
}

/// `amdgpu_ctx_get_entity`'s checks: known IP, instance 0, ring in range.
fn check_entity(call: &Call<'_>, ip_type: u32, ip_instance: u32, ring: u32) -> Result<(), Errno> {
    let n = rings(call, ip_type)?;
    if ip_instance != 0 || ring >= n {
        return Err(Errno(libc::EINVAL));
    }
    Ok(())
}

fn valid_priority(p: i32) -> bool {
    matches!(
        p,
        k::AMDGPU_CTX_PRIORITY_VERY_LOW
            | k::AMDGPU_CTX_PRIORITY_LOW
            | k::AMDGPU_CTX_PRIORITY_NORMAL
            | k::AMDGPU_CTX_PRIORITY_HIGH
            | k::AMDGPU_CTX_PRIORITY_VERY_HIGH
    )
}

/// DRM_IOCTL_AMDGPU_CTX (`amdgpu_ctx_ioctl`). Invalid priorities are
/// treated as NORMAL, as the kernel does for compatibility.
pub(super) fn ctx(call: &mut Call<'_>, buf: &mut [u8]) -> Result<Step, Errno> {
    let args: k::drm_amdgpu_ctx_in = read_arg(buf);
    let _priority = if valid_priority(args.priority) {
        args.priority
    } else {
        k::AMDGPU_CTX_PRIORITY_NORMAL
    };
    let reset_now = call.device().reset_counter.load(Ordering::SeqCst);
    let file = call.file()?;
    match args.op {
        k::AMDGPU_CTX_OP_ALLOC_CTX => {
            if args.flags != 0 {
                return Err(Errno(libc::EINVAL));
            }
            let id = super::lowest_free(file.ctxs.keys().copied(), 1, MAX_CTX);
            let result = match id {
                Some(id) => {
                    file.ctxs.insert(
                        id,
                        Context {
                            guilty: Arc::new(AtomicBool::new(false)),
                            reset_base: reset_now,
                            entities: Default::default(),
                            stable_pstate: k::AMDGPU_CTX_STABLE_PSTATE_NONE,
                        },
                    );
                    Ok(id)
                }
                None => Err(Errno(libc::ENOSPC)),
            };
            write_arg(buf, 0, &result.unwrap_or(0));
            result.map(|_| Step::Done(0))
        }
        k::AMDGPU_CTX_OP_FREE_CTX => {
            if args.flags != 0 {
                return Err(Errno(libc::EINVAL));
            }
            file.ctxs.remove(&args.ctx_id).ok_or(Errno(libc::EINVAL))?;
            done(0)
        }
        k::AMDGPU_CTX_OP_QUERY_STATE | k::AMDGPU_CTX_OP_QUERY_STATE2 => {
            if args.flags != 0 {
                return Err(Errno(libc::EINVAL));
            }
            let ctx = file.ctxs.get(&args.ctx_id).ok_or(Errno(libc::EINVAL))?;
            let reset = ctx.reset_base != reset_now;
            let state = if args.op == k::AMDGPU_CTX_OP_QUERY_STATE {
                k::drm_amdgpu_ctx_out_state {
                    flags: 0,
                    hangs: 0,
                    reset_status: if reset {
                        k::AMDGPU_CTX_UNKNOWN_RESET
                    } else {
                        k::AMDGPU_CTX_NO_RESET
                    },
                }
            } else {
                let mut flags = 0;
                if reset {
                    flags |= k::AMDGPU_CTX_QUERY2_FLAGS_RESET;
                }
                if ctx.guilty.load(Ordering::SeqCst) {
                    flags |= k::AMDGPU_CTX_QUERY2_FLAGS_GUILTY;
                }
                k::drm_amdgpu_ctx_out_state {
                    flags,
                    hangs: 0,
                    reset_status: 0,
                }
            };
            write_arg(buf, 0, &state);
            done(0)
        }
        k::AMDGPU_CTX_OP_GET_STABLE_PSTATE | k::AMDGPU_CTX_OP_SET_STABLE_PSTATE => {
            let ctx = file.ctxs.get_mut(&args.ctx_id).ok_or(Errno(libc::EINVAL))?;
            if args.op == k::AMDGPU_CTX_OP_GET_STABLE_PSTATE {
                if args.flags != 0 {
                    return Err(Errno(libc::EINVAL));
                }
                let out = k::drm_amdgpu_ctx_out_pstate {
                    flags: ctx.stable_pstate,
                    _pad: 0,
                };
                write_arg(buf, 0, &out);
            } else {
                let pstate = args.flags & k::AMDGPU_CTX_STABLE_PSTATE_FLAGS_MASK;
                if args.flags & !k::AMDGPU_CTX_STABLE_PSTATE_FLAGS_MASK != 0
                    || pstate > k::AMDGPU_CTX_STABLE_PSTATE_PEAK
                {
                    return Err(Errno(libc::EINVAL));
                }
                ctx.stable_pstate = pstate;
            }
            done(0)
        }
        _ => Err(Errno(libc::EINVAL)),
    }
}

/// Copies a BO list entry array (`amdgpu_bo_create_list_entry_array`):
/// `count` entries of `entry_size` bytes each, of which the kernel reads
/// `min(entry_size, 8)` and zero-fills the rest.
fn read_bo_entries(
    ptr: u64,
    count: u32,
    entry_size: u32,
) -> Result<Vec<k::drm_amdgpu_bo_list_entry>, Errno> {
    let total = u64::from(count) * u64::from(entry_size);
    if total > MAX_ARRAY_BYTES {
        return Err(Errno(libc::ENOMEM));
    }
    let raw = copy_from_user(ptr, total as usize)?;
    let take = (entry_size as usize).min(std::mem::size_of::<k::drm_amdgpu_bo_list_entry>());
    Ok((0..count as usize)
        .map(|i| {
            let mut e = [0u8; 8];
            let start = i * entry_size as usize;
            e[..take].copy_from_slice(&raw[start..start + take]);
            read_arg::<k::drm_amdgpu_bo_list_entry>(&e)
        })
        .collect())
}

/// Resolves BO list entries to BOs (`amdgpu_bo_list_create`): an unknown
/// handle is `ENOENT`, a userptr BO of another process's memory `EPERM`.
fn resolve_entries(
    call: &mut Call<'_>,
    entries: &[k::drm_amdgpu_bo_list_entry],
) -> Result<Vec<BoId>, Errno> {
    let file = call.file()?;
    let ids = entries
        .iter()
        .map(|e| file.handle(e.bo_handle, libc::ENOENT).map(|g| g.bo))
        .collect::<Result<Vec<BoId>, Errno>>()?;
    let device = call.device();
    for id in &ids {
        let Some(bo) = call.st.bos.get(*id) else {
            continue;
        };
        if super::userptr_owner(call.st, device, bo).is_some_and(|owner| owner != call.caller) {
            return Err(Errno(libc::EPERM));
        }
    }
    Ok(ids)
}

/// DRM_IOCTL_AMDGPU_BO_LIST (`amdgpu_bo_list_ioctl`).
pub(super) fn bo_list(call: &mut Call<'_>, buf: &mut [u8]) -> Result<Step, Errno> {
    let args: k::drm_amdgpu_bo_list_in = read_arg(buf);
    // The kernel copies the entry array before looking at the operation.
    let entries = read_bo_entries(args.bo_info_ptr, args.bo_number, args.bo_info_size)?;
    let handle = match args.operation {
        k::AMDGPU_BO_LIST_OP_CREATE => {
            let bos = resolve_entries(call, &entries)?;
            let file = call.file()?;
            let id = super::lowest_free(file.bo_lists.keys().copied(), 1, i32::MAX as u32)
                .ok_or(Errno(libc::ENOSPC))?;
            file.bo_lists.insert(id, bos);
            id
        }
        k::AMDGPU_BO_LIST_OP_DESTROY => {
            call.file()?.bo_lists.remove(&args.list_handle);
            0
        }
        k::AMDGPU_BO_LIST_OP_UPDATE => {
            let bos = resolve_entries(call, &entries)?;
            let list = call
                .file()?
                .bo_lists
                .get_mut(&args.list_handle)
                .ok_or(Errno(libc::ENOENT))?;
            *list = bos;
            args.list_handle
        }
        _ => return Err(Errno(libc::EINVAL)),
    };
    buf[..std::mem::size_of::<k::drm_amdgpu_bo_list>()].fill(0);
    write_arg(buf, 0, &handle);
    done(0)
}

/// One dependency of a CS (`drm_amdgpu_cs_chunk_dep`).
struct Dependency {
    dep: k::drm_amdgpu_cs_chunk_dep,
}

/// Looks up the fence of sequence `seq` (`u64::MAX` = the latest) of an
/// entity (`amdgpu_ctx_get_fence`): `EINVAL` for a sequence not yet
/// submitted, `None` when it is too old to remember (then it is done).
fn entity_fence(entity: Option<&Entity>, seq: u64) -> Result<Option<Arc<Fence>>, Errno> {
    let sequence = entity.map_or(1, |e| e.sequence);
    let seq = if seq == u64::MAX { sequence - 1 } else { seq };
    if seq >= sequence {
        return Err(Errno(libc::EINVAL));
    }
    if seq + SCHED_JOBS < sequence {
        return Ok(None);
    }
    Ok(entity.and_then(|e| e.fences.get(&seq).cloned()))
}

/// What pass 1 of a CS collects from its chunks.
#[derive(Default)]
struct Chunks {
    ibs: Vec<Ib>,
    entity: Option<(u32, u32)>,
    inline_list: Option<Vec<BoId>>,
    user_fence: Option<(BoId, u64)>,
    dependencies: Vec<Dependency>,
}

fn chunk_array<T: zerocopy::FromBytes>(data: &[u8]) -> Vec<T> {
    data.chunks_exact(std::mem::size_of::<T>())
        .map(read_arg::<T>)
        .collect()
}

/// Pass 1 (`amdgpu_cs_pass1`): copy and check every chunk.
fn parse_chunks(call: &mut Call<'_>, args: &k::drm_amdgpu_cs_in) -> Result<Chunks, Errno> {
    let n = u64::from(args.num_chunks);
    if n * 8 > MAX_ARRAY_BYTES {
        return Err(Errno(libc::ENOMEM));
    }
    let pointers: Vec<u64> = chunk_array(&copy_from_user(args.chunks, (n * 8) as usize)?);
    let mut out = Chunks::default();
    for ptr in pointers {
        let chunk: k::drm_amdgpu_cs_chunk = read_arg(&copy_from_user(
            ptr,
            std::mem::size_of::<k::drm_amdgpu_cs_chunk>(),
        )?);
        let size = u64::from(chunk.length_dw) * 4;
        if size > MAX_ARRAY_BYTES {
            return Err(Errno(libc::ENOMEM));
        }
        let data = copy_from_user(chunk.chunk_data, size as usize)?;
        match chunk.chunk_id {
            k::AMDGPU_CHUNK_ID_IB => {
                if data.len() < std::mem::size_of::<k::drm_amdgpu_cs_chunk_ib>() {
                    return Err(Errno(libc::EINVAL));
                }
                let ib: k::drm_amdgpu_cs_chunk_ib = read_arg(&data);
                check_entity(call, ib.ip_type, ib.ip_instance, ib.ring)?;
                let entity = (ib.ip_type, ib.ring);
                // Gang submission across rings is not simulated.
                if out.entity.is_some_and(|e| e != entity) {
                    return Err(Errno(libc::EINVAL));
                }
                out.entity = Some(entity);
                out.ibs.push(Ib {
                    va: ib.va_start,
                    bytes: ib.ib_bytes,
                });
            }
            k::AMDGPU_CHUNK_ID_FENCE => {
                if data.len() < std::mem::size_of::<k::drm_amdgpu_cs_chunk_fence>() {
                    return Err(Errno(libc::EINVAL));
                }
                let f: k::drm_amdgpu_cs_chunk_fence = read_arg(&data);
                let gem = call.file()?.handle(f.handle, libc::EINVAL)?;
                let bo = call.st.bos.get(gem.bo).ok_or(Errno(libc::EINVAL))?;
                if bo.size != super::va::GPU_PAGE || u64::from(f.offset) > bo.size - 8 {
                    return Err(Errno(libc::EINVAL));
                }
                if bo.domain == crate::hw::bo::Domain::UserPtr {
                    return Err(Errno(libc::EINVAL));
                }
                out.user_fence = Some((gem.bo, u64::from(f.offset)));
            }
            k::AMDGPU_CHUNK_ID_BO_HANDLES => {
                if data.len() < std::mem::size_of::<k::drm_amdgpu_bo_list_in>() {
                    return Err(Errno(libc::EINVAL));
                }
                if out.inline_list.is_some() {
                    return Err(Errno(libc::EINVAL));
                }
                let list: k::drm_amdgpu_bo_list_in = read_arg(&data);
                let entries = read_bo_entries(list.bo_info_ptr, list.bo_number, list.bo_info_size)?;
                out.inline_list = Some(resolve_entries(call, &entries)?);
            }
            k::AMDGPU_CHUNK_ID_DEPENDENCIES | k::AMDGPU_CHUNK_ID_SCHEDULED_DEPENDENCIES => {
                out.dependencies.extend(
                    chunk_array::<k::drm_amdgpu_cs_chunk_dep>(&data)
                        .into_iter()
                        .map(|dep| Dependency { dep }),
                );
            }
            k::AMDGPU_CHUNK_ID_SYNCOBJ_IN | k::AMDGPU_CHUNK_ID_SYNCOBJ_OUT => {
                // The simulator has no syncobjs: any handle is unknown.
                if data.len() >= 4 {
                    return Err(Errno(libc::EINVAL));
                }
            }
            k::AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_WAIT
            | k::AMDGPU_CHUNK_ID_SYNCOBJ_TIMELINE_SIGNAL => {
                if data.len() >= std::mem::size_of::<k::drm_amdgpu_cs_chunk_syncobj>() {
                    return Err(Errno(libc::EINVAL));
                }
            }
            // A GFX shadow hint; there is no GFX ring to apply it to.
            k::AMDGPU_CHUNK_ID_CP_GFX_SHADOW => {}
            _ => return Err(Errno(libc::EINVAL)),
        }
    }
    Ok(out)
}

/// DRM_IOCTL_AMDGPU_CS (`amdgpu_cs_ioctl`): returns the job's sequence
/// number in `out.handle`.
pub(super) fn cs(call: &mut Call<'_>, buf: &mut [u8]) -> Result<Step, Errno> {
    let args: k::drm_amdgpu_cs_in = read_arg(buf);
    if args.num_chunks == 0 {
        return Err(Errno(libc::EINVAL));
    }
    let ctx = call
        .file()?
        .ctxs
        .get(&args.ctx_id)
        .ok_or(Errno(libc::EINVAL))?;
    if ctx.guilty.load(Ordering::SeqCst) {
        return Err(Errno(libc::ECANCELED));
    }
    let chunks = parse_chunks(call, &args)?;
    let Some(entity_key) = chunks.entity else {
        return Err(Errno(libc::EINVAL));
    };
    // Pass 2 (`amdgpu_cs_parser_bos`, `amdgpu_cs_pass2`).
    if args.bo_list_handle != 0 {
        if chunks.inline_list.is_some() {
            return Err(Errno(libc::EINVAL));
        }
        if !call.file()?.bo_lists.contains_key(&args.bo_list_handle) {
            return Err(Errno(libc::ENOENT));
        }
    }
    let mut dependencies = Vec::new();
    for Dependency { dep } in &chunks.dependencies {
        check_entity(call, dep.ip_type, dep.ip_instance, dep.ring)?;
        let file = call.file()?;
        let other = file.ctxs.get(&dep.ctx_id).ok_or(Errno(libc::EINVAL))?;
        let entity = other.entities.get(&(dep.ip_type, dep.ring));
        if let Some(fence) = entity_fence(entity, dep.handle)? {
            dependencies.push(fence);
        }
    }
    // `amdgpu_ctx_wait_prev_fence`: at most SCHED_JOBS jobs in flight per entity.
    {
        let file = call.file()?;
        let ctx = file.ctxs.get(&args.ctx_id).ok_or(Errno(libc::EINVAL))?;
        if let Some(entity) = ctx.entities.get(&entity_key) {
            let oldest = entity.sequence.saturating_sub(SCHED_JOBS);
            if let Some(fence) = entity.fences.get(&oldest) {
                if fence.outcome().is_none() {
                    return Ok(Step::Retry(Arc::clone(fence)));
                }
            }
        }
    }
    let user_fence = match chunks.user_fence {
        Some((id, offset)) => {
            let bo = call.st.bos.get(id).ok_or(Errno(libc::EINVAL))?;
            super::bo_memory(bo, super::UserptrAccess::Direct).map(|m| (m, offset))
        }
        None => None,
    };
    let short_dma = crate::kernel::fault::short_dma(call.st).map(|e| ShortDma { errno: e.0 });
    let key = call.key;
    let view = {
        let st: &crate::kernel::State = call.st;
        let file = match st.files.get(&key) {
            Some(crate::kernel::OpenFile::Render(r)) => &r.drm,
            _ => return Err(Errno(libc::EBADF)),
        };
        vm_view(
            st,
            &call.shared.gpus[call.gpu].drm,
            file,
            key,
            super::UserptrAccess::Direct,
        )
    };
    let reset_counter = Arc::clone(&call.device().reset_counter);
    let file = call.file()?;
    let ctx = file.ctxs.get_mut(&args.ctx_id).ok_or(Errno(libc::EINVAL))?;
    let guilty = Arc::clone(&ctx.guilty);
    let entity = ctx.entities.entry(entity_key).or_default();
    let seq = entity.sequence;
    entity.sequence += 1;
    let fence = Fence::new();
    entity.fences.insert(seq, Arc::clone(&fence));
    entity.fences.retain(|s, _| s + SCHED_JOBS >= seq);
    let job = Job {
        ibs: chunks.ibs,
        vm: Arc::new(view),
        fence,
        short_dma,
        dependencies,
        on_done: Some(Box::new(
            move |outcome: &Result<(), JobError>| match outcome {
                Ok(()) => {
                    if let Some((memory, offset)) = user_fence {
                        // The fence write is the engine's own; a failure here
                        // means the BO shrank, which cannot happen.
                        let _ = memory.write_at(offset, &seq.to_le_bytes());
                    }
                }
                Err(e) if e.is_hang() => {
                    guilty.store(true, Ordering::SeqCst);
                    reset_counter.fetch_add(1, Ordering::SeqCst);
                }
                Err(_) => {}
            },
        )),
    };
    call.device().sdma.submit(entity_key.1, job);
    write_arg(buf, 0, &seq);
    done(0)
}

/// After a WAIT_CS wait: `EINVAL`-free outcomes become `status`.
fn finish_wait(buf: &mut [u8], outcome: Option<Result<(), JobError>>) -> Result<c_int, Errno> {
    match outcome {
        Some(Err(e)) => Err(Errno(e.errno())),
        Some(Ok(())) => {
            buf[..std::mem::size_of::<k::drm_amdgpu_wait_cs>()].fill(0);
            Ok(0)
        }
        None => {
            buf[..std::mem::size_of::<k::drm_amdgpu_wait_cs>()].fill(0);
            write_arg(buf, 0, &1u64);
            Ok(0)
        }
    }
}

/// DRM_IOCTL_AMDGPU_WAIT_CS (`amdgpu_cs_wait_ioctl`): absolute
/// CLOCK_MONOTONIC timeout (top bit set = forever, past = poll); status 0
/// when done, 1 when still busy; a fence that failed returns its error.
pub(super) fn wait_cs(call: &mut Call<'_>, buf: &mut [u8]) -> Result<Step, Errno> {
    let args: k::drm_amdgpu_wait_cs_in = read_arg(buf);
    if !call.file()?.ctxs.contains_key(&args.ctx_id) {
        return Err(Errno(libc::EINVAL));
    }
    check_entity(call, args.ip_type, args.ip_instance, args.ring)?;
    let file = call.file()?;
    let ctx = file.ctxs.get(&args.ctx_id).ok_or(Errno(libc::EINVAL))?;
    match entity_fence(ctx.entities.get(&(args.ip_type, args.ring)), args.handle)? {
        None => {
            finish_wait(buf, Some(Ok(())))?;
            done(0)
        }
        Some(fence) => Ok(Step::Wait {
            fence,
            deadline: Deadline::from_monotonic_ns(args.timeout),
            finish: finish_wait,
        }),
    }
}
