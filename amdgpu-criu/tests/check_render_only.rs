//! `amdgpu-criu check` on a checkpoint of a process without `/dev/kfd`:
//! its render-only image is checked against the target machine with the
//! plugin's own rule, through the built binary.

use criu_host_emulator::{CriuEmulator, EmulatorConfig, TaskFile};
use kfd_sim::workload::render_only::RenderOnly;
use kfd_sim::{Sim, SimConfig};

mod cli;
use cli::run;

/// A render-only checkpoint of a process on an MI210 machine.
fn render_only_checkpoint() -> (tempfile::TempDir, u32) {
    let sim = Sim::builtin("single-gpu", SimConfig::default()).unwrap();
    let gpu = sim.gpus()[0].gpu_id;
    let app = RenderOnly::launch(&sim, &[gpu], 1).unwrap();
    let images = tempfile::tempdir().unwrap();
    let shm = tempfile::tempdir().unwrap();
    let files = vec![TaskFile {
        fd: app.render_fds()[0],
        id: 4,
    }];
    CriuEmulator::new(sim.clone(), images.path(), EmulatorConfig::new(shm.path()))
        .dump(app.pid(), &files, &[])
        .expect("dump");
    drop(files);
    app.exit().unwrap();
    (images, gpu)
}

#[test]
fn check_answers_for_a_render_only_checkpoint() {
    let (images, gpu) = render_only_checkpoint();
    let dir = images.path().to_str().unwrap();

    let out = run(&["check", dir, "--builtin", "single-gpu", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["compatible"], true);
    let r = &v["render_only"][0];
    assert_eq!(r["file"], "amdgpu-renderD-4.img");
    assert_eq!(r["gpu_id"], format!("{gpu:#06x}"));
    assert_eq!(r["candidates"].as_array().unwrap().len(), 1);

    let out = run(&["check", dir, "--builtin", "pcie-2gpu"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with(&format!(
            "amdgpu-renderD-4.img (render-only, renderD128, GPU {gpu:#06x}): not compatible\n"
        )),
        "{text}"
    );
    assert!(text.contains("device_id"), "{text}");
}
