//! Render nodes found by device at restore (criu#2888): a process that uses
//! one GPU of a two-GPU machine is restored into a container whose
//! `/dev/dri` holds only that GPU's node, (a) under another name with the
//! same device number, (b) with another minor than the KFD topology says
//! (found by the PCI device of `/sys/class/drm/renderD*/device`), and (c)
//! not at all, which fails with an error naming the GPU and what was looked
//! for.

mod common;

use common::{device_vmas, gpu_files, hook_errno, kfd_image, vmas_of, Dirs};
use criu_plugin_amdgpu::log::{Capture, Level};
use kfd_sim::workload::{Profile, Workload, WorkloadDescription};
use kfd_sim::{DevDriNode, Pid, ProcessConfig, Sim, SimConfig};

struct Dumped {
    sim: Sim,
    pid: Pid,
    ids: Vec<u32>,
    dirs: Dirs,
    expected: WorkloadDescription,
    /// The GPU the process uses: gpu_id and render minor.
    gpu: (u32, u32),
}

/// A Basic workload in a container that sees the second GPU of pcie-2gpu,
/// dumped and gone.
fn dumped() -> Dumped {
    let sim = Sim::builtin("pcie-2gpu", SimConfig::default()).expect("machine");
    let gpu = sim.gpus()[1].clone();
    let pid = sim
        .spawn_process_with(ProcessConfig {
            visible_gpus: Some(vec![gpu.gpu_id]),
            ..ProcessConfig::default()
        })
        .unwrap();
    let mut app = Workload::launch_in(&sim, pid, &Profile::Basic).expect("launch");
    app.step().unwrap();
    let expected = app.describe().unwrap();
    let dirs = Dirs::new();
    let (files, ids) = gpu_files(&app);
    dirs.emulator(&sim, |_| {})
        .dump(pid, &files, &device_vmas(&sim))
        .expect("dump");
    drop(files);
    app.exit().unwrap();
    Dumped {
        sim,
        pid,
        ids,
        dirs,
        expected,
        gpu: (gpu.gpu_id, gpu.render_minor),
    }
}

fn restore_into(
    d: &Dumped,
    dev_dri: Vec<DevDriNode>,
) -> (Result<(), String>, Vec<(Level, String)>) {
    let vmas = vmas_of(&kfd_image(d.dirs.images.path()));
    let emulator = d.dirs.emulator(&d.sim, |c| {
        c.restore_visible_gpus = Some(vec![d.gpu.0]);
        c.restore_dev_dri = Some(dev_dri);
    });
    let capture = Capture::start();
    let result = match emulator.restore(d.pid, &d.ids, &vmas) {
        Ok(task) => {
            assert_eq!(task.resume_answer, 0);
            Workload::verify(&d.sim, d.pid, &d.expected).map_err(|e| e.to_string())
        }
        Err(e) => {
            let (hook, errno) = hook_errno(&e);
            Err(format!("{hook} {errno}"))
        }
    };
    (result, capture.lines())
}

#[test]
fn a_node_under_another_name_with_the_same_device_number() {
    let d = dumped();
    let (result, lines) = restore_into(
        &d,
        vec![DevDriNode {
            name: "gpu-of-this-pod".into(),
            minor: d.gpu.1,
            gpu_id: d.gpu.0,
        }],
    );
    result.unwrap_or_else(|e| panic!("{e}: {lines:#?}"));
    let expected = format!(
        "render node /dev/dri/gpu-of-this-pod is 226:{} (the topology's renderD{})",
        d.gpu.1, d.gpu.1
    );
    assert!(
        lines
            .iter()
            .any(|(l, t)| *l == Level::Info && t.contains(&expected)),
        "{lines:#?}"
    );
}

#[test]
fn a_node_with_another_minor_is_found_by_its_pci_device() {
    let d = dumped();
    let other_minor = 128; // the first GPU's minor on the host: renumbered
    assert_ne!(other_minor, d.gpu.1);
    let (result, lines) = restore_into(
        &d,
        vec![DevDriNode {
            name: format!("renderD{other_minor}"),
            minor: other_minor,
            gpu_id: d.gpu.0,
        }],
    );
    result.unwrap_or_else(|e| panic!("{e}: {lines:#?}"));
    assert!(
        lines.iter().any(|(l, t)| *l == Level::Info
            && t.contains(&format!(
                "render node /dev/dri/renderD{other_minor} (226:{other_minor}) is its PCI device"
            ))
            && t.contains(&format!("though the topology says renderD{}", d.gpu.1))),
        "{lines:#?}"
    );
}

#[test]
fn a_container_without_the_node_fails_naming_the_gpu_and_what_was_looked_for() {
    let d = dumped();
    let (result, lines) = restore_into(&d, Vec::new());
    let err = result.unwrap_err();
    assert!(err.starts_with("RESTORE_EXT_FILE"), "{err}");
    let expected = format!(
        "no render node for local GPU {:#x} in /dev/dri: looked for the character device 226:{} \
         (renderD{}) nor one whose /sys/class/drm/renderD*/device is",
        d.gpu.0, d.gpu.1, d.gpu.1
    );
    assert!(
        lines.iter().any(|(l, t)| *l == Level::Error
            && t.contains(&expected)
            && t.contains("it holds no render node")),
        "{lines:#?}"
    );
    // The same images restore where the node is (nothing was consumed).
    let (result, lines) = restore_into(
        &d,
        vec![DevDriNode {
            name: format!("renderD{}", d.gpu.1),
            minor: d.gpu.1,
            gpu_id: d.gpu.0,
        }],
    );
    result.unwrap_or_else(|e| panic!("{e}: {lines:#?}"));
}
