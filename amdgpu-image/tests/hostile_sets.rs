//! Hostile image sets: a corpus of damaged sets derived from one consistent
//! sample set (truncations at every boundary, bit flips, counts of 2^32,
//! overflowing sizes, gpu_ids that do not exist, pages files too short or too
//! long, checksum mismatches, absurd length headers). `verify_set` must
//! report each, naming the damaged file, without panicking; and the whole
//! corpus runs again in a child process under a small `RLIMIT_AS`, so no
//! input makes the reader allocate what the input does not justify.

use std::process::Command;

use amdgpu_image::fuzz_support::{write_sample_set, SampleSpec};
use amdgpu_image::{
    encode_for_writing, verify_set, CriuKfd, CriuRenderNode, ImageKind, ImageName, ImageStore,
    MemStore, ReadLimits, SetReport,
};

type Files = Vec<(ImageName, Vec<u8>)>;

/// A named edit of a decoded message.
type Edit<M> = (&'static str, Box<dyn Fn(&mut M)>);

fn sample() -> Files {
    let store = MemStore::new();
    write_sample_set(
        &store,
        SampleSpec {
            id: 1,
            gpus: 2,
            bos_per_gpu: 2,
            bo_pages: 2,
        },
    )
    .expect("sample set");
    store
        .list()
        .unwrap()
        .into_iter()
        .map(|n| {
            let bytes = store.get(&n).unwrap().to_vec();
            (n, bytes)
        })
        .collect()
}

fn store_of(files: &Files) -> MemStore {
    let store = MemStore::new();
    for (n, b) in files {
        store.insert(*n, b.clone());
    }
    store
}

fn verify(files: &Files) -> SetReport {
    let store = store_of(files);
    let a = verify_set(&store, ReadLimits::default()).expect("a memory store lists");
    let b = verify_set(&store, ReadLimits::default()).expect("a memory store lists");
    assert_eq!(a, b, "verify is not deterministic");
    a
}

/// `files` with `name`'s bytes replaced.
fn replaced(files: &Files, name: &ImageName, bytes: Vec<u8>) -> Files {
    files
        .iter()
        .map(|(n, b)| (*n, if n == name { bytes.clone() } else { b.clone() }))
        .collect()
}

/// Checks that the report of `files` has a problem of file `name`.
fn reported(case: &str, files: &Files, name: &ImageName) -> Result<(), String> {
    let report = verify(files);
    if report
        .problems
        .iter()
        .any(|p| p.file == name.to_string() && !p.message.is_empty())
    {
        Ok(())
    } else {
        Err(format!(
            "{case}: no problem of {name}: {:?}",
            report.problems
        ))
    }
}

fn framed(payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(payload);
    out
}

fn kfd_name() -> ImageName {
    ImageName::Kfd { id: 1 }
}

fn render_name() -> ImageName {
    ImageName::RenderNode { id: 2 }
}

fn decode<M: amdgpu_image::ImageMessage>(bytes: &[u8]) -> M {
    amdgpu_image::decode_message("sample", &bytes[8..]).expect("sample decodes")
}

/// Every damaged variant: `(case, files, the file a problem must name)`.
fn corpus(visit: &mut dyn FnMut(String, Files, ImageName)) {
    let base = sample();
    assert!(verify(&base).is_clean(), "{:?}", verify(&base).problems);

    for (name, bytes) in &base {
        // Truncations: every byte of messages; header bytes, page
        // boundaries and their neighbours of pages files.
        let cuts: Vec<usize> = if name.kind().holds_message() {
            (0..bytes.len()).collect()
        } else {
            let mut cuts: Vec<usize> = (0..=9).collect();
            for page in (8..bytes.len()).step_by(4096) {
                cuts.extend([page.saturating_sub(1), page, page + 1]);
            }
            cuts.push(bytes.len() - 1);
            cuts.retain(|&c| c < bytes.len());
            cuts
        };
        for cut in cuts {
            visit(
                format!("{name} cut to {cut} bytes"),
                replaced(&base, name, bytes[..cut].to_vec()),
                *name,
            );
        }
        // Too long: one byte and one page of trailing data.
        for extra in [1usize, 4096] {
            let mut longer = bytes.clone();
            longer.resize(bytes.len() + extra, 0x5a);
            visit(
                format!("{name} with {extra} trailing bytes"),
                replaced(&base, name, longer),
                *name,
            );
        }
        // Absurd length headers.
        // (1 GiB - 1 is just under the default read limit: the reader must
        // not allocate it up front.)
        for claim in [(1 << 30) - 1, u64::from(u32::MAX) + 1, 1 << 62, u64::MAX] {
            let mut lying = bytes.clone();
            lying[..8].copy_from_slice(&claim.to_le_bytes());
            visit(
                format!("{name} claiming {claim} bytes"),
                replaced(&base, name, lying),
                *name,
            );
        }
        // Bit flips in pages payloads are checksum mismatches.
        if matches!(name.kind(), ImageKind::Pages | ImageKind::DrmPages) {
            for at in (8..bytes.len()).step_by(97) {
                let mut flipped = bytes.clone();
                flipped[at] ^= 1 << (at % 8);
                visit(
                    format!("{name} bit flip at {at}"),
                    replaced(&base, name, flipped),
                    *name,
                );
            }
        }
    }

    // Hostile values in the KFD message.
    let kfd_bytes = &base.iter().find(|(n, _)| *n == kfd_name()).unwrap().1;
    let kfd: CriuKfd = decode(kfd_bytes);
    let mut edits: Vec<Edit<CriuKfd>> = vec![
        ("num_of_bos 2^32", Box::new(|m| m.num_of_bos = 1 << 32)),
        ("num_of_bos u64::MAX", Box::new(|m| m.num_of_bos = u64::MAX)),
        ("num_of_gpus 2^32-1", Box::new(|m| m.num_of_gpus = u32::MAX)),
        ("num_of_cpus 2^32-1", Box::new(|m| m.num_of_cpus = u32::MAX)),
        (
            "bo size u64::MAX",
            Box::new(|m| m.bo_entries[0].size = u64::MAX),
        ),
        (
            "bo addr + size overflows",
            Box::new(|m| m.bo_entries[0].addr = u64::MAX - 4095),
        ),
        ("bo size 0", Box::new(|m| m.bo_entries[0].size = 0)),
        (
            "bo on a gpu_id that does not exist",
            Box::new(|m| m.bo_entries[0].gpu_id = 0xdead),
        ),
        (
            "checksum mismatch",
            Box::new(|m| {
                let c = m.bo_entries[0].content_checksum.unwrap_or(0);
                m.bo_entries[0].content_checksum = Some(c ^ 1);
            }),
        ),
        (
            "duplicate gpu_id",
            Box::new(|m| {
                let first = m.device_entries.iter().position(|d| d.gpu_id != 0).unwrap();
                let last = m
                    .device_entries
                    .iter()
                    .rposition(|d| d.gpu_id != 0)
                    .unwrap();
                m.device_entries[last].gpu_id = m.device_entries[first].gpu_id;
            }),
        ),
        ("no device entries", Box::new(|m| m.device_entries.clear())),
    ];
    // A BO entry is dropped but counted (the pages layout no longer matches).
    edits.push((
        "a bo entry missing",
        Box::new(|m| {
            m.bo_entries.pop();
        }),
    ));
    // These two are noticed against the pages file of the BO's GPU, where
    // the contents no longer match what the KFD image says.
    let first_pages = ImageName::Pages {
        id: 1,
        gpu_id: kfd.bo_entries[0].gpu_id,
    };
    for (case, edit) in edits {
        let mut m = kfd.clone();
        edit(&mut m);
        let blamed = if matches!(case, "bo size 0" | "checksum mismatch") {
            first_pages
        } else {
            kfd_name()
        };
        visit(
            format!("kfd image: {case}"),
            replaced(&base, &kfd_name(), framed(&encode_for_writing(&m))),
            blamed,
        );
    }

    // Hostile values in the render-node message.
    let render_bytes = &base.iter().find(|(n, _)| *n == render_name()).unwrap().1;
    let render: CriuRenderNode = decode(render_bytes);
    let render_edits: Vec<Edit<CriuRenderNode>> = vec![
        (
            "gpu_id that does not exist",
            Box::new(|m| m.gpu_id = 0xdead),
        ),
        ("num_of_bos 2^32", Box::new(|m| m.num_of_bos = 1 << 32)),
    ];
    for (case, edit) in render_edits {
        let mut m = render.clone();
        edit(&mut m);
        visit(
            format!("render image: {case}"),
            replaced(&base, &render_name(), framed(&encode_for_writing(&m))),
            render_name(),
        );
    }

    // A pages file missing altogether.
    for (name, _) in base
        .iter()
        .filter(|(n, _)| matches!(n.kind(), ImageKind::Pages))
    {
        let without: Files = base.iter().filter(|(n, _)| n != name).cloned().collect();
        visit(format!("{name} missing"), without, *name);
    }
}

#[test]
fn verify_reports_every_damaged_set() {
    let mut failures = Vec::new();
    let mut cases = 0;
    corpus(&mut |case, files, name| {
        cases += 1;
        if let Err(e) = reported(&case, &files, &name) {
            failures.push(e);
        }
    });
    println!("{cases} damaged sets");
    assert!(cases > 500, "the corpus shrank to {cases} cases");
    assert!(
        failures.is_empty(),
        "{} unreported:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn bit_flips_in_messages_never_panic() {
    let base = sample();
    for (name, bytes) in base.iter().filter(|(n, _)| n.kind().holds_message()) {
        for bit in 0..bytes.len() * 8 {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            // Deterministic and panic-free; a flip may leave a valid
            // message (a changed property), so no problem is demanded.
            let report = verify(&replaced(&base, name, flipped));
            for p in &report.problems {
                assert!(
                    ImageName::parse(&p.file).is_ok(),
                    "problem names no image file: {p:?}"
                );
            }
        }
    }
}

/// Set by the parent for the child run under `RLIMIT_AS`.
const CHILD_ENV: &str = "AMDGPU_IMAGE_HOSTILE_CHILD";

#[test]
fn hostile_corpus_under_small_address_space_limit() {
    if std::env::var_os(CHILD_ENV).is_some() {
        // The child: every case again, in an address space where one
        // unjustified gigabyte allocation aborts the process. First, the
        // limit is in force.
        let mut probe: Vec<u8> = Vec::new();
        assert!(
            probe.try_reserve(1 << 30).is_err(),
            "RLIMIT_AS is not in force in the child"
        );
        let mut n = 0;
        corpus(&mut |_, files, _| {
            verify(&files);
            n += 1;
        });
        println!("child verified {n} damaged sets");
        return;
    }
    let exe = std::env::current_exe().expect("test binary path");
    // 768 MiB of address space: the test binary, its threads' stacks and the
    // sample sets fit; a length header taken at its word (up to 2^64 bytes)
    // or a count of 2^32 entries turned into an allocation does not.
    let limit_kib = 768 * 1024;
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {limit_kib} && exec \"$0\" \"$@\""))
        .arg(&exe)
        .args([
            "--exact",
            "hostile_corpus_under_small_address_space_limit",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(CHILD_ENV, "1")
        .status();
    match status {
        Ok(status) => assert!(
            status.success(),
            "the corpus failed under RLIMIT_AS {limit_kib} KiB: {status}"
        ),
        Err(e) => test_env::skip(format!("cannot run sh to set RLIMIT_AS: {e}")),
    }
}
