//! ROCr (libhsa-runtime64) and rocminfo on kfd-sim.
//!
//! * rocminfo prints one agent per simulated node: the CPUs, and each GPU
//!   with its gfx target, compute units and a VRAM pool of the bank's
//!   size, for the 8-GPU MI210 machines (built-in and captured). On the
//!   MI300X capture, Debian's ROCr 5.2 predates gfx942 and creates no GPU
//!   agent ("The GPU node has an unrecognized id"): that is AMD's runtime's
//!   limit, checked as such.
//! * ROCr initialises, lists agents and pools, allocates and frees on every
//!   GPU, creates and destroys a queue and a signal.
//! * `hsa_amd_memory_async_copy` host to VRAM, VRAM to host and GPU to GPU
//!   completes with the right bytes, waited on with
//!   `hsa_signal_wait_scacquire`: the simulated SDMA engines consume the
//!   rings ROCr fills, and the test records what ROCr 5.2 puts on an SDMA
//!   queue for a copy (an HDP flush, linear copies of at most 0x3fffe0
//!   bytes, the signal's decrement as an ATOMIC ADD64 of -1, a FENCE of the
//!   signal's event id into its mailbox, a TRAP with that id).
//! * The one ioctl the simulator refuses is the one an upstream kernel
//!   refuses: ROCm 5.2's thunk asks for the debugger version with ROCm's
//!   out-of-tree DBG_TRAP number (0x82); upstream amdkfd answers `ENOTTY`
//!   (no such ioctl) and the thunk reads that as "debugger not supported".

mod common;

/// The ROCr program `amdgpu-criu demo --workload rocr-copy` runs too.
const COPY_PROBE: &str = "../amdgpu-criu/src/cmd/demo/rocr_copy_probe.c";

use std::path::Path;

use common::{num, records, refused_ioctls, Scratch};
use kfd_sim::Sim;

/// The output of a probe run on `machine` that exited 0 with every HSA
/// call successful.
fn succeeded(machine: &str, run: &std::process::Output) -> String {
    let out = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{machine}: {}\n{out}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    for step in records(&out, "step") {
        assert_eq!(num(&step, "status"), 0, "{machine}: {step:?}");
    }
    out
}

/// One agent of rocminfo's output: its `  Key: value` lines.
type Agent = Vec<(String, String)>;

fn agents(text: &str) -> Vec<Agent> {
    let mut out: Vec<Agent> = Vec::new();
    let mut in_agent = false;
    for line in text.lines() {
        if line.starts_with("Agent ") {
            out.push(Vec::new());
            in_agent = true;
            continue;
        }
        if !in_agent {
            continue;
        }
        if let Some((k, v)) = line.split_once(':') {
            out.last_mut()
                .expect("an agent")
                .push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    out
}

fn field<'a>(agent: &'a Agent, key: &str) -> &'a str {
    agent
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("agent without {key}: {agent:?}"))
}

/// The gfx target ROCr names a GPU by: `gfx` + major + minor and stepping
/// in hex (90010 -> gfx90a).
fn gfx_name(version: u64) -> String {
    format!(
        "gfx{}{:x}{:x}",
        version / 10000,
        version / 100 % 100,
        version % 100
    )
}

fn rocminfo_available() -> bool {
    if Path::new("/usr/bin/rocminfo").is_file() {
        true
    } else {
        common::skip("rocminfo is not installed (apt-get install rocminfo)");
        false
    }
}

/// rocminfo on `machine`: every node an agent, GPUs as the topology says.
fn rocminfo_shows(scratch: &Scratch, machine: &str, sim: &Sim, gpu_agents_expected: bool) {
    let run = common::run_preloaded(
        scratch,
        machine.as_ref(),
        Path::new("/usr/bin/rocminfo"),
        &[],
    );
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{machine}: rocminfo failed ({}):\n{out}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(out.contains("ROCk module is loaded"), "{out}");
    let agents = agents(&out);
    let topology = sim.topology();
    let cpus: Vec<_> = agents
        .iter()
        .filter(|a| field(a, "Device Type") == "CPU")
        .collect();
    let gpus: Vec<_> = agents
        .iter()
        .filter(|a| field(a, "Device Type") == "GPU")
        .collect();
    let cpu_nodes = topology
        .nodes
        .iter()
        .filter(|n| n.prop("cpu_cores_count") > 0)
        .count();
    assert_eq!(cpus.len(), cpu_nodes, "{machine}: CPU agents");
    if !gpu_agents_expected {
        assert!(gpus.is_empty());
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(
            err.contains("The GPU node has an unrecognized id"),
            "{machine}: ROCr 5.2 names why it made no GPU agent:\n{err}"
        );
        println!(
            "{machine}: {} CPU agents; ROCr 5.2 does not know this GPU",
            cpus.len()
        );
        return;
    }
    let gpu_nodes: Vec<_> = topology.gpus().collect();
    assert_eq!(gpus.len(), gpu_nodes.len(), "{machine}: GPU agents");
    for agent in gpus {
        let node: u32 = field(agent, "Node").parse().expect("a node number");
        let topo = gpu_nodes
            .iter()
            .find(|n| n.id == node)
            .unwrap_or_else(|| panic!("{machine}: agent of node {node} is no GPU node"));
        assert_eq!(
            field(agent, "Name"),
            gfx_name(topo.prop("gfx_target_version")),
            "{machine} node {node}"
        );
        let cus = topo.prop("simd_count") / topo.prop("simd_per_cu").max(1);
        assert_eq!(
            field(agent, "Compute Unit"),
            cus.to_string(),
            "{machine} node {node}"
        );
        // The first pool is the VRAM bank (GLOBAL, COARSE GRAINED), in KB.
        let (vram, _) = topo.vram().expect("a GPU node with VRAM");
        let size = field(agent, "Size");
        assert!(
            size.starts_with(&format!("{}(", vram / 1024)),
            "{machine} node {node}: VRAM pool {size}, bank {vram} bytes"
        );
    }
    println!(
        "{machine}: rocminfo shows {} CPU and {} GPU agents",
        cpus.len(),
        gpu_nodes.len()
    );
}

#[test]
fn rocminfo_prints_the_simulated_agents() {
    if !rocminfo_available() {
        return;
    }
    let scratch = Scratch::new();
    let mut cases: Vec<(String, bool)> = vec![("mi210-8gpu-2hive".to_owned(), true)];
    // The captured MI210 machine is not here: the capture has no caches/
    // and the simulator lists none, where a kernel always lists a GPU's
    // caches (kfd_crat.c's per-ASIC tables); ROCr asserts "GPU cache info
    // missing" on such a node. The thunk test covers that capture.
    if let Some(fixtures) = common::fixtures() {
        cases.push((
            fixtures.join("mi300x-cpx-8gpu").display().to_string(),
            false,
        ));
    }
    for (machine, gpu_agents) in cases {
        let sim = match Path::new(&machine).is_dir() {
            true => Sim::from_sysfs(Path::new(&machine), Default::default()),
            false => Sim::builtin(&machine, Default::default()),
        }
        .unwrap_or_else(|e| panic!("{machine}: {e}"));
        rocminfo_shows(&scratch, &machine, &sim, gpu_agents);
    }
}

#[test]
fn rocr_allocates_from_every_gpu_and_creates_a_queue() {
    let scratch = Scratch::new();
    let Some(probe) = common::rocr_program(&scratch, "tests/rocr_probe.c") else {
        return;
    };
    for machine in ["single-gpu", "mi210-8gpu-2hive"] {
        let sim = Sim::builtin(machine, Default::default()).unwrap();
        let run = common::run_preloaded(&scratch, machine.as_ref(), &probe, &[]);
        let out = succeeded(machine, &run);
        let gpus = sim.gpus().len();
        assert_eq!(num(&records(&out, "gpus")[0], "count"), gpus as u64);
        let allocs = records(&out, "step")
            .into_iter()
            .filter(|s| s["name"] == "hsa_amd_memory_pool_allocate")
            .count();
        assert_eq!(allocs, gpus, "{machine}: one VRAM allocation per GPU");
        let queue = common::report(&out, "queue");
        let state = &records(queue, "state")[0];
        assert!(num(state, "queues") >= 1, "{machine}: {state:?}");
        for stage in ["allocated", "queue", "signal"] {
            let refused = refused_ioctls(common::report(&out, stage));
            assert!(
                refused.iter().all(|r| r == "kfd_ROCM_DBG_TRAP: ENOTTY:1"),
                "{machine} {stage}: refused {refused:?}"
            );
        }
        println!("{machine}: ROCr allocated on {gpus} GPUs and made a queue");
    }
}

/// One packet of the report's trace.
struct Packet {
    queue: u64,
    name: String,
    dwords: Vec<u32>,
}

fn packets(report: &str) -> Vec<Packet> {
    records(report, "packet")
        .into_iter()
        .map(|r| Packet {
            queue: num(&r, "queue"),
            name: r["name"].clone(),
            dwords: r["dwords"]
                .split(',')
                .map(|d| u32::from_str_radix(d, 16).expect("hex dwords"))
                .collect(),
        })
        .collect()
}

/// Checks one copy's packets as ROCr 5.2 submits them on GFX9 (BlitSdmaV4:
/// `SubmitCommand` with no dependencies and an interrupt signal) and
/// returns them as a recording.
fn rocr_copy_packets(queue: &[&Packet], bytes: u64) -> String {
    let names: Vec<&str> = queue.iter().map(|p| p.name.as_str()).collect();
    let copies = bytes.div_ceil(0x3f_ffe0) as usize;
    let mut expected = vec!["POLL_REGMEM"];
    expected.extend(std::iter::repeat_n("COPY", copies));
    expected.extend(["ATOMIC", "FENCE", "TRAP"]);
    assert_eq!(names, expected, "ROCr's packets for one {bytes}-byte copy");
    // The HDP flush: sdma_registers.h's hdp_flush_cmd.
    assert_eq!(queue[0].dwords, [8, 0, 0x8000_0000, 0, 0, 0]);
    let mut moved = 0u64;
    for c in &queue[1..=copies] {
        // COPY LINEAR with COUNT = bytes - 1 (SizeToCountOffset -1).
        assert_eq!(c.dwords[0], 1);
        moved += u64::from(c.dwords[1]) + 1;
    }
    assert_eq!(moved, bytes, "the copies cover the range once");
    let atomic = &queue[copies + 1];
    assert_eq!(atomic.dwords[0] >> 25, 47, "ATOMIC ADD64");
    assert_eq!(
        (atomic.dwords[3], atomic.dwords[4]),
        (u32::MAX, u32::MAX),
        "adds -1"
    );
    let fence = &queue[copies + 2];
    let trap = &queue[copies + 3];
    assert_eq!(
        fence.dwords[3], trap.dwords[1],
        "fences the event id it traps"
    );
    queue
        .iter()
        .map(|p| {
            let dw: Vec<String> = p.dwords.iter().map(|d| format!("{d:08x}")).collect();
            format!("  {:<12} {}", p.name, dw.join(" "))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn rocr_async_copies_complete_with_the_right_bytes() {
    let scratch = Scratch::new();
    let Some(probe) = common::rocr_program(&scratch, COPY_PROBE) else {
        return;
    };
    for (machine, peers) in [("single-gpu", false), ("mi210-8gpu-2hive", true)] {
        let run = common::run_preloaded_with(
            &scratch,
            machine.as_ref(),
            &probe,
            &["8"],
            &[("KFD_SIM_PACKET_TRACE", "1")],
        );
        let out = succeeded(machine, &run);
        let copies = records(&out, "copy");
        assert_eq!(copies.len(), if peers { 4 } else { 2 }, "{machine}: {out}");
        for c in &copies {
            assert_eq!(
                c["signal"], "0",
                "{machine}: the completion signal reached 0: {c:?}"
            );
        }
        let verified = records(&out, "verify");
        assert_eq!(verified.len(), if peers { 2 } else { 1 });
        for v in &verified {
            assert_eq!(v["ok"], "1", "{machine}: the bytes arrived intact: {v:?}");
        }
        let report = common::report(&out, "copied");
        let engines = records(report, "engine");
        assert!(
            !engines.is_empty(),
            "{machine}: the report lists the queues' engines"
        );
        for q in engines {
            assert!(!q["state"].starts_with("hung"), "{machine}: {q:?}");
        }
        let trace = packets(report);
        let mut queues: Vec<u64> = trace.iter().map(|p| p.queue).collect();
        queues.sort_unstable();
        queues.dedup();
        // Each copy went to an SDMA queue of its own direction or peer.
        assert_eq!(queues.len(), copies.len(), "{machine}: one queue per copy");
        let first: Vec<&Packet> = trace.iter().filter(|p| p.queue == queues[0]).collect();
        let recording = rocr_copy_packets(&first, 8 << 20);
        for q in &queues[1..] {
            let pkts: Vec<&Packet> = trace.iter().filter(|p| p.queue == *q).collect();
            rocr_copy_packets(&pkts, 8 << 20);
        }
        println!("{machine}: ROCr 5.2's SDMA packets for an 8 MiB host-to-VRAM copy:\n{recording}");
        assert!(
            refused_ioctls(report)
                .iter()
                .all(|r| r == "kfd_ROCM_DBG_TRAP: ENOTTY:1"),
            "{machine}: refused {:?}",
            refused_ioctls(report)
        );
    }
}

/// ROCr with copies in flight is checkpointed: the dump pauses its SDMA
/// queues mid-ring (the saved queue state says where), the restore on a
/// renumbered machine resumes them from there and every queued copy
/// finishes with the right bytes and a completed signal; this process then
/// goes on from the checkpoint and ends the same way.
#[test]
fn rocr_copies_checkpointed_in_flight_finish_after_the_restore() {
    let scratch = Scratch::new();
    let Some(probe) = common::rocr_program(&scratch, COPY_PROBE) else {
        return;
    };
    let dirs: Vec<std::path::PathBuf> = ["first", "second", "restore-shm"]
        .iter()
        .map(|d| {
            let p = scratch.dir.path().join(d);
            std::fs::create_dir(&p).unwrap();
            p
        })
        .collect();
    let args: Vec<&str> = std::iter::once("8")
        .chain(std::iter::once("busy"))
        .chain(dirs.iter().map(|d| d.to_str().unwrap()))
        .collect();
    let machine = "mi210-8gpu-2hive";
    // 8 MiB copies at 64 MiB/s: each takes 125 ms, so both are in the
    // rings when the checkpoint comes right after their submission.
    let run = common::run_preloaded_with(
        &scratch,
        machine.as_ref(),
        &probe,
        &args,
        &[("KFD_SIM_SDMA_BANDWIDTH", "64M")],
    );
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{}\n{out}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(out.contains("checkpoint-end status=0"), "{out}");
    let saved = records(&out, "busy saved");
    assert_eq!(saved.len(), 2, "the two copy queues: {out}");
    for q in &saved {
        assert_eq!(q["mid_ring"], "1", "paused mid-ring: {q:?}");
    }
    for q in records(&out, "busy restored") {
        assert_eq!(
            q["settled"], "1",
            "the restored queue finished its ring: {q:?}"
        );
        assert_eq!(q["rptr"], q["wptr"]);
    }
    let source = &records(&out, "source")[0]["hash"];
    let ranges: Vec<_> = records(&out, "busy")
        .into_iter()
        .filter(|r| r.contains_key("range"))
        .collect();
    assert_eq!(ranges.len(), 4);
    // VRAM and the host buffer the copies wrote hold the source's bytes on
    // the restored machine; both completion signals reached 0.
    assert_eq!(
        (&ranges[0]["hash"], &ranges[1]["hash"]),
        (source, source),
        "{out}"
    );
    assert_eq!(
        (&ranges[2]["value"][..], &ranges[3]["value"][..]),
        ("0", "0")
    );
    // This process, going on from the checkpoint, ends the same way.
    for c in records(&out, "copy") {
        assert_eq!(c["signal"], "0", "{c:?}");
    }
    let verified = records(&out, "verify");
    assert!(
        verified
            .iter()
            .all(|v| v["ok"] == "1" && &v["hash"] == source),
        "{verified:?}"
    );
    println!(
        "{}",
        out.lines()
            .filter(|l| l.starts_with("busy"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
