//! `demo --workload rocr-copy`: the application is AMD's ROCr (Debian's
//! `libhsa-runtime-dev`) moving data through the simulated GPUs. A small C
//! program (`rocr_copy_probe.c`, compiled here) runs on the simulated
//! machine (kfd-sim-preload's `LD_PRELOAD` interposer runs `--topology`
//! inside it, its SDMA engines at 64 MiB/s so the copies take time): it
//! queues an 8 MiB host-to-VRAM copy and a VRAM-to-host copy that depends
//! on it with `hsa_amd_memory_async_copy`, and while they are in flight
//! CRIU (the host emulator with the plugin) checkpoints it, restores it on
//! the same machine as another host numbers it (`--seed`), where the
//! restored SDMA queues resume from where the checkpoint stopped them.
//! Then the program goes on from the checkpoint and finishes the copies
//! itself, and runs a GPU-to-GPU copy.
//!
//! Verified means: the checkpoint paused every copy queue mid-ring; on the
//! restored machine every queue finished its ring, VRAM and the host
//! buffer hold the source's bytes and both completion signals reached 0;
//! the program, going on from the checkpoint, ends the same way (its
//! `hsa_signal_wait` returns, its buffers hold the source's bytes).
//!
//! It needs ROCr's headers, a C compiler and `libkfd_sim_preload.so`
//! (`KFD_SIM_PRELOAD_LIB` names another): without them it says what to
//! install and exits 2. It never touches a real device or the host's
//! `/dev/shm`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, ExitCode};

use super::hsakmt::{compile_probe, gpu_pair, preload_lib_for, record, Machines};
use super::Args;

/// The ROCr program.
const PROBE_SOURCE: &str = include_str!("rocr_copy_probe.c");
/// MiB per copy, and the simulated SDMA rate that keeps them in flight.
const COPY_MIB: &str = "8";
const RATE: &str = "64M";

/// What the run found, for the report.
#[derive(Default)]
struct Summary {
    machines: Machines,
    gpu_map: BTreeMap<u32, u32>,
    saved: Vec<String>,
    restored: Vec<String>,
    results: Vec<String>,
}

/// Runs the rocr-copy workload: 0 verified, 1 not verified, 2 usage errors.
pub(super) fn run(args: &Args) -> ExitCode {
    let mut summary = Summary {
        machines: Machines::of(args),
        ..Summary::default()
    };
    match execute(args, &mut summary) {
        Ok(()) => {
            print(args, &summary, None);
            ExitCode::SUCCESS
        }
        Err(Failure::Usage(message)) => {
            eprintln!("amdgpu-criu demo: {message}");
            ExitCode::from(2)
        }
        Err(Failure::NotVerified(message)) => {
            print(args, &summary, Some(&message));
            eprintln!("amdgpu-criu demo: {message}");
            ExitCode::from(1)
        }
    }
}

enum Failure {
    Usage(String),
    NotVerified(String),
}

fn print(args: &Args, s: &Summary, error: Option<&str>) {
    if args.json {
        let mut value = s.machines.json("rocr-copy", &s.gpu_map, error);
        value.insert(
            "checkpoint".into(),
            serde_json::json!({ "queues": s.saved }),
        );
        value.insert(
            "restore".into(),
            serde_json::json!({ "queues": s.restored, "results": s.results }),
        );
        let mut value = serde_json::Value::Object(value);
        crate::json64::gpu_ids_to_hex(&mut value);
        println!("{value}");
        return;
    }
    s.machines.print_head(
        "rocr-copy (AMD's ROCr on kfd-sim, copies in flight at the checkpoint), 1 process",
    );
    for line in &s.saved {
        println!("checkpoint: {line}");
    }
    for line in &s.restored {
        println!("restored:   {line}");
    }
    for line in &s.results {
        println!("  {line}");
    }
    s.machines.print_tail(&s.gpu_map, "");
    println!(
        "verified: {}",
        if error.is_none() {
            "the copies finish after the restore with the source's bytes"
        } else {
            "no"
        }
    );
}

fn usage(message: impl Into<String>) -> Failure {
    Failure::Usage(message.into())
}

fn execute(args: &Args, summary: &mut Summary) -> Result<(), Failure> {
    if args.size.is_some() || args.restore_topology.is_some() || !args.inject.is_empty() {
        return Err(usage(
            "--size, --restore-topology and --inject do not apply to --workload rocr-copy: the program copies 8 MiB and restores on the checkpointing machine as another host numbers it (--seed)",
        ));
    }
    if !Path::new("/usr/include/hsa/hsa.h").is_file() {
        return Err(usage(
            "--workload rocr-copy needs AMD's ROCr and its headers: apt-get install libhsa-runtime64-1 libhsa-runtime-dev",
        ));
    }
    let lib = preload_lib_for("rocr-copy").map_err(usage)?;
    let scratch = super::cleanup::temporary_dir("amdgpu-criu-demo-rocr").map_err(usage)?;
    // The checkpoint is the image set at --dir (or kept with --keep), as
    // every workload keeps it.
    let images = match &args.dir {
        Some(dir) => super::images::given_dir(dir).map_err(usage)?,
        None => scratch.path().join("checkpoint"),
    };
    let dirs: Vec<_> = [images.clone()]
        .into_iter()
        .chain(
            ["unused", "shm", "restore-shm"]
                .iter()
                .map(|d| scratch.path().join(d)),
        )
        .collect();
    for d in &dirs {
        std::fs::create_dir_all(d)
            .map_err(|e| usage(format!("cannot create {}: {e}", d.display())))?;
    }
    let probe = compile_probe(
        scratch.path(),
        "rocr_copy_probe",
        PROBE_SOURCE,
        "-lhsa-runtime64",
        "rocr-copy",
    )
    .map_err(usage)?;
    let run = Command::new(&probe)
        .args([COPY_MIB, "busy"])
        .args([&dirs[0], &dirs[1], &dirs[3]])
        .env("LD_PRELOAD", &lib)
        .env("KFD_SIM_MACHINE", &args.topology)
        .env("KFD_SIM_SHM_DIR", &dirs[2])
        .env("KFD_SIM_PRELOAD_RENUMBER_SEED", args.seed.to_string())
        .env("KFD_SIM_SDMA_BANDWIDTH", RATE)
        .env_remove("KFD_SIM_PACKET_TRACE")
        .output()
        .map_err(|e| usage(format!("running {}: {e}", probe.display())))?;
    let out = String::from_utf8_lossy(&run.stdout).into_owned();
    summary.machines.images = match (&args.dir, args.keep) {
        (Some(_), _) => Some(images),
        (None, true) => Some(scratch.keep().join("checkpoint")),
        (None, false) => None,
    };
    if !run.status.success() || !out.contains("checkpoint-end status=0") {
        let why = out
            .lines()
            .find_map(|l| l.strip_prefix("checkpoint error="))
            .map(|e| e.replace('_', " "))
            .unwrap_or_else(|| {
                format!(
                    "the ROCr program failed ({}): {}",
                    run.status,
                    String::from_utf8_lossy(&run.stderr).trim()
                )
            });
        return Err(Failure::NotVerified(why));
    }
    verify(&out, summary).map_err(Failure::NotVerified)
}

fn verify(out: &str, summary: &mut Summary) -> Result<(), String> {
    let lines = |prefix: &str| -> Vec<BTreeMap<String, String>> {
        out.lines()
            .filter(|l| l.starts_with(prefix))
            .map(record)
            .collect()
    };
    let get = |r: &BTreeMap<String, String>, k: &str| r.get(k).cloned().unwrap_or_default();
    for r in lines("checkpoint machine") {
        if let Some((from, to)) = gpu_pair(&r) {
            summary.gpu_map.insert(from, to);
        }
    }
    let source = lines("source")
        .first()
        .map(|r| get(r, "hash"))
        .ok_or("the program printed no source hash")?;
    let saved = lines("busy saved");
    if saved.is_empty() {
        return Err("the checkpoint saved no queue".into());
    }
    for q in &saved {
        summary.saved.push(format!(
            "sdma queue {} paused at read pointer {} of {}",
            get(q, "queue"),
            get(q, "rptr"),
            get(q, "wptr")
        ));
        if get(q, "mid_ring") != "1" {
            return Err(format!("queue {} was not paused mid-ring", get(q, "queue")));
        }
    }
    for q in lines("busy restored") {
        summary.restored.push(format!(
            "sdma queue {} resumed and ran to {} of {}",
            get(&q, "queue"),
            get(&q, "rptr"),
            get(&q, "wptr")
        ));
        if get(&q, "settled") != "1" {
            return Err(format!(
                "restored queue {} did not finish its ring",
                get(&q, "queue")
            ));
        }
    }
    let ranges: Vec<_> = lines("busy range");
    let hashes: Vec<String> = ranges.iter().map(|r| get(r, "hash")).collect();
    if hashes.len() != 4 || hashes[0] != source || hashes[1] != source {
        return Err(
            "on the restored machine VRAM or the host buffer lacks the source's bytes".into(),
        );
    }
    if ranges[2..].iter().any(|r| get(r, "value") != "0") {
        return Err("on the restored machine a completion signal did not reach 0".into());
    }
    summary
        .restored
        .push("VRAM and host buffer hold the source's bytes, both signals at 0".into());
    for c in lines("copy ") {
        if get(&c, "signal") != "0" {
            return Err(format!(
                "the program's {} copy did not complete",
                get(&c, "name")
            ));
        }
        summary.results.push(format!(
            "{} copy of {} bytes completed in {} ms",
            get(&c, "name"),
            get(&c, "bytes"),
            get(&c, "ms")
        ));
    }
    for v in lines("verify ") {
        if get(&v, "ok") != "1" || get(&v, "hash") != source {
            return Err(format!(
                "the program's {} copy moved the wrong bytes",
                get(&v, "name")
            ));
        }
    }
    summary.results.push(
        "the program, going on from the checkpoint, ends as the restored one: same bytes".into(),
    );
    Ok(())
}
