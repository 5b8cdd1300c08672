//! What a restored application must show: its bytes, its saved and running queues, its shared buffers.

use super::*;

/// Everything a restored application must show, for each of its
/// processes; with a shared buffer, that both processes' imports are one
/// buffer again.
pub fn check_restored(served: &Served, app: &App, what: &str) {
    for p in &app.procs {
        check_process(served, p, &format!("{what}, pid {}", p.pid));
    }
    if let [parent, child] = &app.procs[..] {
        check_sharing(served, parent, child, what);
    }
    for p in &app.procs {
        let what = format!("{what}, pid {}", p.pid);
        check_saved_queues(served, app, p, &what);
        check_queues(served, p, &what);
    }
}

/// The checkpoint holds `p`'s queues where the GPU stood at the dump: in
/// the middle of their rings, at the read pointers of the gates (as the
/// simulator reads the private data of the process's KFD image).
pub fn check_saved_queues(served: &Served, app: &App, p: &Proc, what: &str) {
    let Some((sdma, aql)) = p.held else {
        return;
    };
    let store = amdgpu_image::DirStore::open_dir(app.path("images")).expect("the images");
    let image = amdgpu_image::ImageStore::list(&store)
        .expect("list the images")
        .iter()
        .filter(|n| matches!(n, amdgpu_image::ImageName::Kfd { .. }))
        .filter_map(|n| {
            amdgpu_image::ImageStore::read_message::<amdgpu_image::CriuKfd>(
                &store,
                n,
                amdgpu_image::ReadLimits::default(),
            )
            .ok()
            .flatten()
        })
        .find(|k| k.pid == p.pid)
        .unwrap_or_else(|| panic!("{what}: no KFD image of pid {}", p.pid));
    let devices = image
        .device_entries
        .iter()
        .filter(|d| d.gpu_id != 0)
        .count();
    let saved = kfd_sim::saved_queues(
        &image.priv_data,
        devices,
        image.bo_entries.len(),
        image.num_of_objects as usize,
        served.sim.config().max_gpu_instance,
    )
    .unwrap_or_else(|e| panic!("{what}: the image's queues: {e}"));
    // Kernel queue types: 0 compute, 1 SDMA.
    let at = |ty: u32| {
        saved
            .iter()
            .find(|q| q.queue_type == ty)
            .unwrap_or_else(|| panic!("{what}: no queue of type {ty} saved: {saved:?}"))
    };
    let (s, a) = (at(1), at(0));
    assert!(
        s.read_pointer == sdma && s.mid_ring() && a.read_pointer == aql && a.mid_ring(),
        "{what}: the checkpoint holds the queues at their gates (sdma {sdma}, aql {aql}): {saved:?}"
    );
}

/// How long the restored process may take over its queue checks: longer
/// than its own bound on each wait (`app.c`'s `WAIT_MS`, four waits), so a
/// queue that never resumes is the process's verdict, and a process that
/// hangs fails the test here (the [`App`] then kills it).
const QUEUE_CHECKS_BOUND: Duration = Duration::from_secs(90);

/// The queue work `p` held at its gates before the dump finishes after the
/// restore, from the read pointers the checkpoint saved, and new work the
/// restored process submits runs (see `app.c`): the test asks the process
/// to check through mailbox word 2, waits until the process waits on its
/// SDMA event (the wait of CRIU issue 2663's shape: it ends only if the
/// queue resumes where it stopped and the event is delivered), opens the
/// gates through the simulator and waits for the process's verdict. Every
/// wait is bounded.
pub fn check_queues(served: &Served, p: &Proc, what: &str) {
    if p.gates.is_empty() {
        return;
    }
    let pid = Pid(p.pid);
    let workload = Workload::attach(&served.sim, pid);
    let described = workload.describe().expect("describe the restored process");
    let bo_at = |va: u64, len: u64| {
        described
            .bos
            .iter()
            .find(|d| d.va <= va && va + len <= d.va + d.size)
            .unwrap_or_else(|| panic!("{what}: no BO holds {len} bytes at {va:#x}"))
    };
    let mailbox = bo_at(p.mailbox, 24);
    workload
        .write_bo(mailbox.handle, 16, &1u64.to_le_bytes())
        .unwrap();
    let queues = p.dir.join("queues");
    let verdict = || fs::read_to_string(&queues).unwrap_or_default();
    assert!(
        wait_for(Duration::from_secs(20), || !verdict().is_empty()),
        "{what}: the process never took up the request to check its queues\n{}",
        fs::read_to_string(p.dir.join("app.out")).unwrap_or_default()
    );
    for gate in &p.gates {
        let bo = bo_at(gate.va, gate.size as u64);
        workload
            .write_bo(
                bo.handle,
                gate.va - bo.va,
                &gate.value.to_le_bytes()[..gate.size],
            )
            .unwrap();
    }
    let done = wait_for(QUEUE_CHECKS_BOUND, || verdict().starts_with("done"));
    let said = verdict();
    assert!(
        done && said.trim() == "done ok",
        "{what}: the restored queues, as the process found them: {:?} (within {} s); the engines: {:?}",
        said.trim(),
        QUEUE_CHECKS_BOUND.as_secs(),
        served.sim.queue_statuses(pid)
    );
    if let Some((sdma, aql)) = p.held {
        println!(
            "  queues resumed at their saved read pointers (sdma {sdma}, aql {aql}): held work done, \
             its event delivered, new SDMA copies and AQL/PM4 packets done"
        );
    }
}

/// What one restored process must show: its heartbeat goes on, its BOs
/// hold their bytes, its queues run (panics naming `what` otherwise).
pub fn check_process(served: &Served, p: &Proc, what: &str) {
    let pid = Pid(p.pid);
    p.assert_beats_on(what);
    let state = served
        .sim
        .kfd_state(pid)
        .unwrap_or_else(|| panic!("{what}: no KFD process"));
    assert!(
        !state.queues_paused && state.queues_running() && state.resumed == 1,
        "{what}: the queues run after the restore: {state:?}"
    );
    assert_eq!(
        state.queues, p.queues,
        "{what}: its queues restored: {state:?}"
    );
    assert_eq!(
        state.events, p.events,
        "{what}: its events restored: {state:?}"
    );
    // Every filled BO holds its bytes, as the simulator reads them.
    let wrong = bo_mismatches(served, p).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        wrong.is_empty(),
        "{what}: {}",
        wrong
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    );
    let workload = Workload::attach(&served.sim, pid);
    let described = workload.describe().expect("describe the restored process");
    // The mailbox: the process's writes reach the simulator...
    let mailbox = described
        .bos
        .iter()
        .find(|d| d.va == p.mailbox)
        .expect("the mailbox BO");
    let word = |offset: u64| {
        let b = workload.read_bo(mailbox.handle, offset, 8).unwrap();
        u64::from_le_bytes(b.try_into().unwrap())
    };
    let first = word(0);
    let moved = wait_for(Duration::from_secs(10), || word(0) > first + 2);
    assert!(
        moved,
        "{what}: the process's writes to its mapping no longer reach the BO (beat {first} stays)"
    );
    // ...and the simulator's writes reach the process, which then checks
    // every BO through its own mappings.
    let magic: u64 = 0x5eed_0000 + u64::from(p.pid);
    workload
        .write_bo(mailbox.handle, 8, &magic.to_le_bytes())
        .unwrap();
    let want = format!("seen={magic:#x} verify=");
    let mut last = String::new();
    let seen = wait_for(Duration::from_secs(10), || {
        last = p.heartbeat().last().cloned().unwrap_or_default();
        last.contains(&want)
    });
    assert!(
        seen,
        "{what}: the process does not see the simulator's write to its mapping: {last}"
    );
    assert!(
        last.ends_with("verify=ok"),
        "{what}: the process's own view of its BOs: {last}"
    );
}

/// The buffer behind process `pid`'s handle of the shared buffer.
pub fn shared_buffer(served: &Served, pid: u32, shared: SharedBo, what: &str) -> u64 {
    let buffers = served.sim.render_buffers(Pid(pid));
    let b = buffers
        .iter()
        .find(|b| b.render_minor == shared.minor && b.handle == shared.handle)
        .unwrap_or_else(|| {
            panic!(
                "{what}: pid {pid} has no handle {} on renderD{}: {buffers:?}",
                shared.handle, shared.minor
            )
        });
    assert_eq!(b.size, shared.size, "{what}: the shared buffer's size");
    b.buffer
}

/// The two processes' handles of the shared buffer name one buffer again,
/// which holds what the parent wrote.
pub fn check_sharing(served: &Served, parent: &Proc, child: &Proc, what: &str) {
    let (Some(ps), Some(cs)) = (parent.shared, child.shared) else {
        panic!(
            "{what}: a process of the tree lists no shared buffer (parent {}: {:?}, child {}: {:?})",
            parent.pid, parent.shared, child.pid, child.shared
        );
    };
    let seed = parent
        .bos
        .iter()
        .find(|b| b.kind == "shared-cpu")
        .expect("the parent's record of the shared buffer")
        .seed;
    let ours = shared_buffer(served, parent.pid, ps, what);
    let theirs = shared_buffer(served, child.pid, cs, what);
    assert_eq!(
        ours, theirs,
        "{what}: the parent's buffer and the child's import are one buffer after the restore"
    );
    let held = served.sim.read_buffer(ours, 0, ps.size as usize);
    let want = pattern(seed, ps.size);
    assert!(
        held.as_deref() == Some(&want[..]),
        "{what}: the shared buffer holds what the parent wrote (first bytes {:02x?}, want {:02x?}; \
         first difference at {:?})",
        held.as_ref().map(|h| &h[..16]),
        &want[..16],
        held.as_ref().and_then(|h| h.iter().zip(&want).position(|(a, b)| a != b))
    );
}

/// Kills the restored application and waits until the simulator holds
/// nothing of it.
pub fn finish(served: &Served, app: &mut App, what: &str) {
    for p in &app.procs {
        kill(p.pid);
    }
    assert!(
        wait_for(Duration::from_secs(10), || app.all_gone()),
        "{what}: the application does not die"
    );
    served.assert_empty(&format!("{what}, after the application's end"));
}

/// The C plugin names itself in CRIU's inventory (which CRIU 4.1 and
/// later check at restore) only from `HANDLE_DEVICE_VMA`, when CRIU meets
/// a mapping of a GPU device; here the process's BO mappings are memfds
/// (see the module docs), so its dumps list no plugin and both plugins
/// would stay out of their restore. The test lists it, as a dump of a
/// process with device mappings does.
pub fn list_c_plugin_in_inventory(app: &App) {
    let path = app.path("images/inventory.img");
    let image = fs::read(&path).expect("inventory.img");
    let listed = harness::inventory::plugins(&image).unwrap_or_default();
    assert!(
        !listed.iter().any(|p| p == "amdgpu_plugin"),
        "a dump without device VMAs lists the C plugin after all: {listed:?}; this step is no longer needed"
    );
    let mut plugins: Vec<&str> = listed.iter().map(String::as_str).collect();
    plugins.push("amdgpu_plugin");
    fs::write(&path, harness::inventory::with_plugins(&image, &plugins))
        .expect("rewrite inventory.img");
}

/// The restored process's GPUs: (checkpointed gpu_id it still sees, local
/// gpu_id it runs on).
pub fn gpu_map(served: &Served, app: &App) -> Vec<(u32, u32)> {
    let mut map = served
        .sim
        .kfd_state(Pid(app.pid()))
        .expect("the restored KFD process")
        .gpu_ids;
    map.sort_unstable();
    map
}

/// The bytes of the plugin's pages files in an images directory.
pub fn gpu_pages_bytes(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("amdgpu-pages-"))
        .map(|e| e.metadata().unwrap().len())
        .sum()
}
