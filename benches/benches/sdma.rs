//! The simulated SDMA engine through the `kfd` copy engine, unthrottled and
//! without file I/O: a 64 MiB BO into two 32 MiB staging buffers and back.
//! This is the simulator's share of every checkpoint and restore figure.

#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use benches::transfer::{Fill, Machine, SdmaRig};
use criterion::{Criterion, Throughput};

fn sdma(c: &mut Criterion) {
    const BYTES: u64 = 64 << 20;
    let machine = match Machine::build(1, BYTES, BYTES, Fill::Dense) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("skipped sdma benches: {e}");
            return;
        }
    };
    let Some(gpu) = machine.sim.gpus().first().map(|g| g.gpu_id) else {
        eprintln!("skipped sdma benches: the machine has no GPU");
        return;
    };
    let mut rig = match SdmaRig::new(&machine, gpu) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("skipped sdma benches: {e}");
            return;
        }
    };
    let mut g = c.benchmark_group("sdma");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(5));
    g.throughput(Throughput::Bytes(BYTES));
    for (name, to_bo) in [
        ("bo_to_staging_64mib", false),
        ("staging_to_bo_64mib", true),
    ] {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    if let Err(e) = rig.pass(to_bo) {
                        eprintln!("sdma pass failed: {e}");
                        break;
                    }
                }
                start.elapsed()
            })
        });
    }
    g.finish();
    if let Err(e) = rig.close() {
        eprintln!("closing the copy engine: {e}");
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    sdma(&mut c);
    c.final_summary();
}
