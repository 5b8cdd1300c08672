//! Dump and restore through the emulated CRIU on simulated copies of real
//! machines (the topology captures in the shared fixtures): every GPU's
//! contents move in parallel and the restored process matches its
//! checkpoint.

mod common;

use std::path::{Path, PathBuf};

use common::{device_vmas, gpu_files, kfd_image, vmas_of, Dirs};
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{Sim, SimConfig};

/// `../shared/fixtures/topology` next to the workspace root.
fn fixtures() -> Option<PathBuf> {
    let mut dir = Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf();
    loop {
        let manifest = dir.join("Cargo.toml");
        if std::fs::read_to_string(&manifest).is_ok_and(|m| m.contains("[workspace]")) {
            let fixtures = dir.join("../shared/fixtures/topology");
            return fixtures.is_dir().then_some(fixtures);
        }
        if !dir.pop() {
            return None;
        }
    }
}

/// A simulator for a captured machine; captures without gpu_ids or memory
/// banks get them filled in as the kernel would. Why not, when the capture
/// does not parse or the simulator refuses it.
fn machine(root: &Path) -> Result<Sim, String> {
    let mut system = amdgpu_topology::parse(root)
        .map_err(|e| format!("the capture does not parse: {e}"))?
        .system;
    amdgpu_topology::synthesize::synthesize_missing(&mut system);
    Sim::new(system, SimConfig::default())
        .map_err(|e| format!("the simulator cannot model the capture: {e}"))
}

#[test]
fn captured_multi_gpu_machines_round_trip() {
    let Some(fixtures) = fixtures() else {
        test_env::skip("../shared/fixtures/topology not found");
        return;
    };
    let mut tried = 0;
    // Every capture named here is one the test claims to cover: one the
    // simulator cannot model is a failure, not a capture left out.
    const CAPTURES: [&str; 2] = ["mi210-8gpu-xgmi-2hives", "mi308x-cpx-8gpu"];
    for name in CAPTURES {
        let sim = machine(&fixtures.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        tried += 1;
        let mut app = Workload::launch(&sim, &Profile::Basic).expect("launch");
        app.step().expect("step");
        let expected = app.describe().unwrap();
        let dirs = Dirs::new();
        let emulator = dirs.emulator(&sim, |_| {});
        let (files, ids) = gpu_files(&app);
        emulator
            .dump(app.pid(), &files, &device_vmas(&sim))
            .unwrap_or_else(|e| panic!("{name}: dump: {e}"));
        let pid = app.pid();
        drop(files);
        app.exit().unwrap();
        let image = kfd_image(dirs.images.path());
        assert_eq!(image.num_of_gpus as usize, sim.gpus().len(), "{name}");
        let task = emulator
            .restore(pid, &ids, &vmas_of(&image))
            .unwrap_or_else(|e| panic!("{name}: restore: {e}"));
        assert_eq!(task.resume_answer, 0, "{name}");
        Workload::verify(&sim, pid, &expected)
            .unwrap_or_else(|e| panic!("{name}: restored state differs: {e}"));
    }
    assert!(tried > 0, "no fixture could be simulated");
    assert_eq!(
        tried,
        CAPTURES.len(),
        "every capture is dumped and restored"
    );
}
