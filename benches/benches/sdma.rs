//! The simulated SDMA engine through the `kfd` copy engine, unthrottled and
//! without file I/O: a 64 MiB BO into two 32 MiB staging buffers and back.
//! This is the simulator's share of every checkpoint and restore figure.
//! A failed setup or pass aborts the bench (a panic): a pass that stopped
//! early must not be timed as a fast one.

#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use benches::transfer::{Fill, Machine, SdmaRig};
use criterion::{Criterion, Throughput};

fn sdma(c: &mut Criterion) {
    const BYTES: u64 = 64 << 20;
    let machine = Machine::build(1, BYTES, BYTES, Fill::Dense)
        .unwrap_or_else(|e| panic!("sdma benches: building the machine: {e}"));
    let gpu = machine
        .sim
        .gpus()
        .first()
        .map(|g| g.gpu_id)
        .expect("sdma benches: the simulated machine has a GPU");
    let mut rig = SdmaRig::new(&machine, gpu)
        .unwrap_or_else(|e| panic!("sdma benches: setting up the copy engine: {e}"));
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
                    let moved = rig
                        .pass(to_bo)
                        .unwrap_or_else(|e| panic!("sdma {name}: a pass failed: {e}"));
                    assert_eq!(moved, BYTES, "sdma {name}: a pass moved {moved} bytes");
                }
                start.elapsed()
            })
        });
    }
    g.finish();
    rig.close()
        .unwrap_or_else(|e| panic!("sdma benches: closing the copy engine: {e}"));
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    sdma(&mut c);
    c.final_summary();
}
