//! GPU mapping speed: each topology onto a renumbered copy of itself
//! (accepted) and onto a copy with one weaker GPU (refused). Target: under
//! 10 ms for 64 GPUs, for both answers.

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]
#![forbid(unsafe_code)]

use benches::topology::{fixtures_root, map_cases};
use criterion::{criterion_group, criterion_main, Criterion};

use amdgpu_topology::mapping::map_topologies;
use amdgpu_topology::options::CheckOptions;

fn topology_map(c: &mut Criterion) {
    let options = CheckOptions::all();
    let mut group = c.benchmark_group("topology_map");
    for case in map_cases(fixtures_root().as_deref()) {
        group.bench_function(format!("{}/accept", case.name), |b| {
            b.iter(|| {
                let result = map_topologies(&case.checkpointed, &case.renumbered, &options)
                    .expect("an answer");
                assert!(result.compatible);
                result
            })
        });
        group.bench_function(format!("{}/refuse", case.name), |b| {
            b.iter(|| {
                let result =
                    map_topologies(&case.checkpointed, &case.weaker, &options).expect("an answer");
                assert!(!result.compatible);
                result
            })
        });
    }
    group.finish();
}

criterion_group!(benches, topology_map);
criterion_main!(benches);
