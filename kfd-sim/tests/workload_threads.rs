//! Several simulated applications and their CRIU round trips running on
//! host threads at once against one simulator: the simulator is shared state
//! behind one lock, and concurrent use must neither deadlock nor mix up
//! processes.

mod kfd_support;

use std::sync::Barrier;

use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{Sim, SimConfig};
use kfd_support::*;

#[test]
fn concurrent_round_trips_stay_independent() {
    let sim = Sim::synthetic(2, SimConfig::default()).unwrap();
    let threads = 4;
    let barrier = Barrier::new(threads);
    let results: Vec<(u64, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let sim = &sim;
                let barrier = &barrier;
                s.spawn(move || {
                    let profile = Profile::PyTorchLike {
                        bos_per_gpu: 20 + t * 5,
                        max_bo_bytes: 64 * KIB,
                    };
                    let mut w = Workload::launch(sim, &profile).unwrap();
                    barrier.wait();
                    for _ in 0..3 {
                        w.step().unwrap();
                    }
                    let (pid, desc, _r) = checkpoint_restore(sim, w);
                    Workload::verify(sim, pid, &desc).unwrap();
                    let mut r = Workload::attach(sim, pid);
                    r.step().unwrap();
                    let restored = r.fingerprint().unwrap();
                    let mut u = Workload::launch(sim, &profile).unwrap();
                    for _ in 0..4 {
                        u.step().unwrap();
                    }
                    (restored, u.fingerprint().unwrap())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (t, (restored, uninterrupted)) in results.iter().enumerate() {
        assert_eq!(restored, uninterrupted, "thread {t}");
    }
    let distinct: std::collections::BTreeSet<u64> = results.iter().map(|r| r.0).collect();
    assert_eq!(
        distinct.len(),
        threads,
        "each profile differs, so each result does"
    );
}
