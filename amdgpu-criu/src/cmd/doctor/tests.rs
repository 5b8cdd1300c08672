use super::*;
use kfd_sim::{Sim, SimConfig};

fn env<'a>(driver: &'a dyn Driver, sim: &Sim) -> Env<'a> {
    Env {
        driver,
        sysfs_root: sim.sysfs_root(),
        topology_name: None,
        cap_eff: None,
        criu: None,
        criu_given: false,
        libs_dir_env: None,
    }
}

fn status(checks: &[Check], name: &str) -> (Status, String) {
    let c = checks.iter().find(|c| c.name == name).expect(name);
    (c.status, c.detail.clone())
}

#[test]
fn a_simulated_8_gpu_machine_passes_the_kernel_checks() {
    let sim = Sim::builtin("mi210-8gpu-2hive", SimConfig::default()).unwrap();
    let pid = sim.spawn_process().unwrap();
    let driver = sim.driver(pid);
    let checks = diagnose(&env(&driver, &sim));
    for name in [
        "kfd device",
        "kfd version",
        "permission",
        "topology",
        "gpu self-check",
        "render nodes",
        "gem mapping info",
    ] {
        let (s, detail) = status(&checks, name);
        assert_eq!(s, Status::Ok, "{name}: {detail}");
    }
    let (_, topo) = status(&checks, "topology");
    assert!(topo.ends_with(": 10 nodes, 8 GPUs, 2 XGMI hives"), "{topo}");
    let (_, render) = status(&checks, "render nodes");
    assert_eq!(render.matches("renderD").count(), 8, "{render}");
    let gpu = sim.gpus()[0].gpu_id;
    assert!(
        render.contains(&format!("-> gpu {}", gpu_id(gpu))),
        "{render}"
    );
    // No criu given: the CRIU checks fail or are skipped, never pass.
    assert_eq!(status(&checks, "criu").0, Status::Fail);
    assert_eq!(status(&checks, "plugin").0, Status::Skip);
}

#[test]
fn an_old_kfd_and_a_process_without_capabilities_fail() {
    let sim = Sim::builtin(
        "mi210-8gpu-2hive",
        SimConfig {
            kfd_minor_version: 7,
            ..SimConfig::default()
        },
    )
    .unwrap();
    let pid = sim.spawn_process().unwrap();
    sim.set_checkpoint_restore_capable(pid, false).unwrap();
    let driver = sim.driver(pid);
    let checks = diagnose(&env(&driver, &sim));
    let (s, detail) = status(&checks, "kfd version");
    assert_eq!(s, Status::Fail, "{detail}");
    assert!(detail.starts_with("KFD interface 1.7: "), "{detail}");
    let (s, detail) = status(&checks, "permission");
    assert_eq!(s, Status::Fail, "{detail}");
    assert!(detail.contains("EACCES"), "{detail}");
}

/// A kernel without /dev/kfd: every device lookup is ENOENT.
struct NoKfd;
// The trait's methods are `unsafe fn`s; these bodies touch no pointer.
#[allow(unsafe_code)]
impl Driver for NoKfd {
    fn open(&self, _: &Path, _: libc::c_int) -> io::Result<std::os::fd::OwnedFd> {
        Err(io::Error::from_raw_os_error(libc::ENOENT))
    }
    unsafe fn ioctl(
        &self,
        _: std::os::fd::BorrowedFd<'_>,
        _: u64,
        _: *mut std::ffi::c_void,
    ) -> io::Result<libc::c_int> {
        Err(io::Error::from_raw_os_error(libc::ENOTTY))
    }
    unsafe fn mmap(
        &self,
        _: *mut std::ffi::c_void,
        _: usize,
        _: libc::c_int,
        _: libc::c_int,
        _: std::os::fd::BorrowedFd<'_>,
        _: u64,
    ) -> io::Result<std::ptr::NonNull<std::ffi::c_void>> {
        Err(io::Error::from_raw_os_error(libc::ENODEV))
    }
    unsafe fn munmap(&self, _: std::ptr::NonNull<std::ffi::c_void>, _: usize) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EINVAL))
    }
    fn fd_kind(&self, _: std::os::fd::BorrowedFd<'_>) -> io::Result<kfd::FdKind> {
        Ok(kfd::FdKind::Other)
    }
    fn device_number(&self, _: &Path) -> io::Result<kfd::DeviceNumber> {
        Err(io::Error::from_raw_os_error(libc::ENOENT))
    }
}

#[test]
fn no_kfd_is_no_amd_gpu_driver() {
    let checks = diagnose(&Env {
        driver: &NoKfd,
        sysfs_root: PathBuf::from("/nonexistent/topology"),
        topology_name: None,
        cap_eff: Some(1 << CAP_SYS_ADMIN),
        criu: None,
        criu_given: false,
        libs_dir_env: None,
    });
    let (s, detail) = status(&checks, "kfd device");
    assert_eq!(s, Status::Fail);
    assert!(
        detail.starts_with("no /dev/kfd: no AMD GPU driver"),
        "{detail}"
    );
    assert_eq!(status(&checks, "kfd version").0, Status::Skip);
    let (s, detail) = status(&checks, "permission");
    assert_eq!(
        (s, detail.as_str()),
        (Status::Ok, "this process holds CAP_SYS_ADMIN")
    );
    assert_eq!(status(&checks, "topology").0, Status::Skip);
}

#[test]
fn elf_symbols_of_this_test_binary() {
    let me = std::env::current_exe().unwrap();
    // Not a symbol of this binary; reading it must still work.
    assert_eq!(
        elf_symbol_size(&me, "cr_plugin_ctl_nonexistent").unwrap(),
        None
    );
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk");
    std::fs::write(&junk, b"not an elf").unwrap();
    assert!(elf_symbol_size(&junk, "x").is_err());
}
