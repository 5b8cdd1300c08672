//! AMD's thunk allocates, maps, creates queues and events, and frees them
//! against kfd-sim; after each stage the simulated kernel holds what the
//! real one would (spec/kernel.md): one BO per successful
//! ALLOC_MEMORY_OF_GPU not yet freed, the queues and events the thunk
//! created, pinned user pages only while a userptr BO lives, and no ioctl
//! the thunk made was refused.
//!
//! What the thunk itself answers without asking the kernel is checked as
//! the thunk's: `hsaKmtSetMemoryPolicy` is NOT_IMPLEMENTED on anything but
//! Kaveri ("legacy API useful on Kaveri only"; the thunk made the
//! SET_MEMORY_POLICY ioctl for the alternate aperture at open).

mod common;

use std::path::Path;

use common::{ioctl_ok, num, records, refused_ioctls, report, Scratch};

/// HSAKMT_STATUS_NOT_IMPLEMENTED.
const NOT_IMPLEMENTED: u64 = 10;

/// Checks one stage's report; returns its `state` record.
fn check_stage(machine: &str, out: &str, stage: &str) -> common::Record {
    let r = report(out, stage);
    let refused = refused_ioctls(r);
    assert!(
        refused.is_empty(),
        "{machine} {stage}: the simulator refused ioctls the thunk made: {refused:?}"
    );
    let state = records(r, "state")
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("{machine} {stage}: no state in the report"));
    let acc = &records(r, "accounting")[0];
    // One live BO per allocation not yet freed, as the kernel's IDR holds.
    let live = ioctl_ok(r, "kfd_ALLOC_MEMORY_OF_GPU") - ioctl_ok(r, "kfd_FREE_MEMORY_OF_GPU");
    assert_eq!(
        num(&state, "bos"),
        live,
        "{machine} {stage}: BOs held vs allocations not freed"
    );
    assert_eq!(num(acc, "live_bos"), live, "{machine} {stage}: accounting");
    let queues = ioctl_ok(r, "kfd_CREATE_QUEUE") - ioctl_ok(r, "kfd_DESTROY_QUEUE");
    assert_eq!(num(&state, "queues"), queues, "{machine} {stage}: queues");
    let events = ioctl_ok(r, "kfd_CREATE_EVENT") - ioctl_ok(r, "kfd_DESTROY_EVENT");
    assert_eq!(num(&state, "events"), events, "{machine} {stage}: events");
    assert_eq!(num(&state, "paused"), 0, "{machine} {stage}: queues run");
    assert!(
        state["vm_acquired"].split(',').all(|v| v == "1"),
        "{machine} {stage}: every GPU's VM is acquired: {state:?}"
    );
    state
}

fn run_memory(scratch: &Scratch, probe: &Path, machine: &str) {
    let run = common::run_preloaded(scratch, machine.as_ref(), probe, &["memory"]);
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && out.contains("\ndone\n"),
        "{machine}: the probe failed ({}):\n{out}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    let call = &records(&out, "call")[0];
    assert_eq!(call["name"], "hsaKmtSetMemoryPolicy");
    assert_eq!(num(call, "status"), NOT_IMPLEMENTED, "{machine}: {call:?}");
    let opened = check_stage(machine, &out, "opened");
    let r = report(&out, "opened");
    assert!(ioctl_ok(r, "kfd_SET_MEMORY_POLICY") >= 1, "{machine}: {r}");
    // The thunk's shared memory exists while KFD is open (8 bytes: the
    // perf table), in the private directory.
    let shm = &records(&out, "shm")[0];
    assert_eq!(num(shm, "size"), 8, "{machine}: {shm:?}");

    let built = check_stage(machine, &out, "built");
    assert_eq!(num(&built, "queues"), 2, "{machine}: compute + SDMA queue");
    assert_eq!(num(&built, "events"), 2, "{machine}");
    let r = report(&out, "built");
    let acc = &records(r, "accounting")[0];
    assert!(
        num(acc, "pinned_userptr_pages") >= 64,
        "{machine}: the 256 KiB userptr is pinned: {acc:?}"
    );
    assert!(ioctl_ok(r, "kfd_SET_XNACK_MODE") >= 1);
    assert_eq!(ioctl_ok(r, "kfd_GET_CLOCK_COUNTERS"), 1);
    assert_eq!(ioctl_ok(r, "kfd_SET_EVENT"), 1);
    let clock = &records(&out, "clock")[0];
    assert!(
        num(clock, "gpu") > 0 && num(clock, "frequency") > 0,
        "{clock:?}"
    );
    let queues = records(&out, "queue");
    assert_eq!(queues.len(), 2);
    assert!(queues.iter().all(|q| num(q, "doorbell") != 0), "{queues:?}");

    let destroyed = check_stage(machine, &out, "queues-destroyed");
    assert_eq!(num(&destroyed, "queues"), 0);
    assert_eq!(num(&destroyed, "events"), 0);

    let freed = check_stage(machine, &out, "freed");
    let r = report(&out, "freed");
    assert_eq!(
        num(&records(r, "accounting")[0], "pinned_userptr_pages"),
        0,
        "{machine}: userptr pages unpinned once freed"
    );
    // What the thunk keeps until the process ends: the doorbell page of
    // the GPU it made queues on and the events page.
    assert_eq!(
        num(&freed, "bos"),
        num(&opened, "bos") + 2,
        "{machine}: after freeing, the BOs of open + doorbell + events page"
    );
    check_stage(machine, &out, "closed");
}

#[test]
fn thunk_memory_queues_and_events_leave_the_kernel_state_the_kernel_would() {
    let scratch = Scratch::new();
    let Some(probe) = common::hsakmt_probe(&scratch) else {
        return;
    };
    let host_shm_before = Path::new("/dev/shm/hsakmt_shared_mem").exists();
    let mut machines = vec!["single-gpu".to_owned(), "mi210-8gpu-2hive".to_owned()];
    if let Some(fixtures) = common::fixtures() {
        for cap in ["mi300x-cpx-8gpu", "vega10-mi25-1gpu"] {
            machines.push(fixtures.join(cap).display().to_string());
        }
    }
    for machine in &machines {
        run_memory(&scratch, &probe, machine);
        println!("{machine}: thunk memory, queues and events checked");
    }
    assert_eq!(
        Path::new("/dev/shm/hsakmt_shared_mem").exists(),
        host_shm_before,
        "the host's /dev/shm is untouched"
    );
}
