//! Image benchmarks: decode + validate a `criu_kfd` of 100,000 BOs; verify a
//! pages file with checksums against a plain read of the same file; the
//! checksum alone. Prints the summary figures of `benches::image::measure`
//! at the end. A failed decode, read or verification aborts the bench (a
//! panic): a run that stopped at an error must not be timed as a fast one.

#![forbid(unsafe_code)]

use std::hint::black_box;
use std::time::Duration;

use amdgpu_image::{content_checksum, encode_message};
use benches::image::{
    decode_and_validate, kfd_with_bos, measure, raw_read, verify_pages, verify_pages_pipelined,
    write_pages_file,
};
use criterion::{Criterion, Throughput};

fn kfd_decode(c: &mut Criterion) {
    let payload = encode_message(&kfd_with_bos(100_000));
    let mut g = c.benchmark_group("kfd_image");
    g.sample_size(20);
    g.throughput(Throughput::Bytes(payload.len() as u64));
    g.bench_function("decode_validate_100k_bos", |b| {
        b.iter(|| {
            decode_and_validate(black_box(&payload))
                .map(|v| v.message().bo_entries.len())
                .unwrap_or_else(|e| panic!("kfd_image: decoding failed: {e}"))
        })
    });
    g.finish();
}

fn pages(c: &mut Criterion) {
    // Removed on every way out, a panic included.
    let dir = tempfile::Builder::new()
        .prefix("amdgpu-image-bench")
        .tempdir()
        .unwrap_or_else(|e| panic!("pages benches: a temporary directory: {e}"));
    let path = dir.path().join("amdgpu-pages-1-1000.img");
    let layout = write_pages_file(&path, 32, 2 << 20)
        .unwrap_or_else(|e| panic!("pages benches: writing the pages file: {e}"));
    let mut buf = vec![0u8; 1 << 20];
    let mut pipelined_buf = vec![0u8; 2 << 20];
    let mut g = c.benchmark_group("pages_64MiB");
    g.sample_size(20);
    g.measurement_time(Duration::from_secs(4));
    g.throughput(Throughput::Bytes(layout.total_len()));
    let file_len = std::fs::metadata(&path)
        .unwrap_or_else(|e| panic!("pages benches: {}: {e}", path.display()))
        .len();
    g.bench_function("raw_read", |b| {
        b.iter(|| {
            let read = raw_read(&path, &mut buf)
                .unwrap_or_else(|e| panic!("pages raw_read: {}: {e}", path.display()));
            assert_eq!(read, file_len, "pages raw_read: a short read");
        })
    });
    g.bench_function("verify_checksums", |b| {
        b.iter(|| {
            verify_pages(&path, &layout, &mut buf)
                .unwrap_or_else(|e| panic!("pages verify_checksums: {e}"))
        })
    });
    g.bench_function("verify_checksums_pipelined", |b| {
        b.iter(|| {
            verify_pages_pipelined(&path, &layout, &mut pipelined_buf)
                .unwrap_or_else(|e| panic!("pages verify_checksums_pipelined: {e}"))
        })
    });
    g.finish();

    let data = vec![0x5au8; 1 << 20];
    let mut g = c.benchmark_group("checksum");
    g.throughput(Throughput::Bytes(data.len() as u64));
    g.bench_function("1MiB", |b| b.iter(|| content_checksum(black_box(&data))));
    g.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    kfd_decode(&mut c);
    pages(&mut c);
    c.final_summary();
    let dir = tempfile::Builder::new()
        .prefix("amdgpu-image-figures")
        .tempdir()
        .unwrap_or_else(|e| panic!("image figures: a temporary directory: {e}"));
    let figures = measure(dir.path()).unwrap_or_else(|e| panic!("image figures: {e}"));
    println!("{figures}");
}
