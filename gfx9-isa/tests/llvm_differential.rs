//! Differential test against LLVM: every instruction of every gfx9 code
//! object in the system's ROCm libraries (rocRAND, rocSPARSE, ROCr's blit
//! kernels) and in the HIP programs of `test-programs/` is decoded, and each
//! decoded instruction's text is compared with `llvm-objdump-15`'s for the
//! same address. An unknown encoding or a mismatch fails the test; the
//! counts per code object and per format are printed.
//!
//! `llvm-objdump` runs on every code object except rocSPARSE's, of which it
//! runs on one bundle in 16 (rocSPARSE holds about 900 MiB of gfx9 code):
//! every rocSPARSE instruction is still decoded.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use gfx9_isa::{decode, Target};
use support::code_objects::{processor, section, CodeObject};

const OBJDUMP: &str = "llvm-objdump-15";
const LIBDIR: &str = "/usr/lib/x86_64-linux-gnu";

#[derive(Default)]
struct Tally {
    /// Instructions decoded, by format.
    by_format: BTreeMap<&'static str, u64>,
    objects: u64,
    decoded: u64,
    compared: u64,
    failures: Vec<String>,
}

impl Tally {
    fn fail(&mut self, what: String) {
        if self.failures.len() < 40 {
            self.failures.push(what);
        } else if self.failures.len() == 40 {
            self.failures.push("(more failures not shown)".into());
        }
    }
}

fn normalise(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// llvm-objdump's disassembly of `elf`: address -> text.
fn objdump(elf: &[u8], mcpu: &str) -> BTreeMap<u64, String> {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("code-object.o");
    std::fs::write(&path, elf).expect("write code object");
    let out = Command::new(OBJDUMP)
        .args(["-d", "-z", "--no-show-raw-insn"])
        .arg(format!("--mcpu={mcpu}"))
        .arg(&path)
        .output()
        .expect("run llvm-objdump-15");
    assert!(
        out.status.success(),
        "llvm-objdump failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut map = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(rest) = line.strip_prefix('\t') else {
            continue;
        };
        let Some((text, comment)) = rest.split_once("//") else {
            continue;
        };
        let addr = comment.trim().split(':').next().unwrap_or("");
        if let Ok(addr) = u64::from_str_radix(addr, 16) {
            map.insert(addr, normalise(text));
        }
    }
    map
}

/// Decodes every instruction of `co`'s `.text`; compares with llvm-objdump
/// when `compare`.
fn check(co: &CodeObject, compare: bool, tally: &mut Tally) -> (u64, u64) {
    let Some(mcpu) = processor(&co.elf) else {
        tally.fail(format!("{}: not a gfx9 code object (e_flags)", co.name));
        return (0, 0);
    };
    let target = Target::from_name(mcpu).expect("gfx9 processor");
    let Some((off, size, addr)) = section(&co.elf, ".text") else {
        tally.fail(format!("{}: no .text", co.name));
        return (0, 0);
    };
    let text = &co.elf[off..off + size];
    let llvm = if compare {
        objdump(&co.elf, mcpu)
    } else {
        BTreeMap::new()
    };
    let (mut decoded, mut compared) = (0, 0);
    let mut at = 0;
    while at < text.len() {
        let pc = addr + at as u64;
        match decode(target, &text[at..]) {
            Ok(d) => {
                decoded += 1;
                *tally.by_format.entry(d.inst.format_name()).or_default() += 1;
                if compare {
                    let mine = d.inst.to_string();
                    match llvm.get(&pc) {
                        Some(theirs) if *theirs == mine => compared += 1,
                        Some(theirs) => tally.fail(format!(
                            "{} {mcpu} {pc:#x} {:02x?}: llvm `{theirs}`, gfx9-isa `{mine}`",
                            co.name,
                            &text[at..(at + d.len).min(text.len())]
                        )),
                        None => tally.fail(format!(
                            "{} {mcpu} {pc:#x}: llvm has no instruction here, gfx9-isa `{mine}`",
                            co.name
                        )),
                    }
                }
                at += d.len;
            }
            Err(e) => {
                tally.fail(format!(
                    "{} {mcpu} {pc:#x} {:02x?}: {e} (llvm: {:?})",
                    co.name,
                    &text[at..(at + 8).min(text.len())],
                    llvm.get(&pc)
                ));
                at += 4;
            }
        }
    }
    tally.decoded += decoded;
    tally.compared += compared;
    (decoded, compared)
}

fn check_all(
    source: &str,
    objects: &[CodeObject],
    compare: impl Fn(&CodeObject) -> bool,
    tally: &mut Tally,
) {
    for co in objects {
        let (d, c) = check(co, compare(co), tally);
        tally.objects += 1;
        if c > 0 {
            println!(
                "{source}: {} ({}): {d} decoded, {c} compared with llvm-objdump",
                co.name,
                processor(&co.elf).unwrap_or("?")
            );
        }
    }
}

fn report(source: &str, tally: &Tally) {
    assert!(tally.objects > 0, "{source}: no gfx9 code object found");
    println!(
        "{source}: {} code objects, {} instructions decoded, {} compared with llvm-objdump, {} mismatches",
        tally.objects,
        tally.decoded,
        tally.compared,
        tally.failures.len()
    );
    for (format, n) in &tally.by_format {
        println!("{source}:   {format:<10} {n}");
    }
    assert!(
        tally.failures.is_empty(),
        "{source}: {} failures:\n{}",
        tally.failures.len(),
        tally.failures.join("\n")
    );
}

fn run(source: &str, objects: &[CodeObject]) {
    let mut tally = Tally::default();
    check_all(source, objects, |_| true, &mut tally);
    report(source, &tally);
}

fn have_objdump() -> bool {
    if Command::new(OBJDUMP).arg("--version").output().is_ok() {
        return true;
    }
    test_env::skip("llvm-objdump-15 is not installed (apt-get install llvm-15)");
    false
}

fn library(name: &str, package: &str) -> Option<PathBuf> {
    let path = Path::new(LIBDIR).join(name);
    if path.exists() {
        return Some(path);
    }
    test_env::skip(format!(
        "{} is not installed (apt-get install {package})",
        path.display()
    ));
    None
}

#[test]
fn rocr_blit_kernels() {
    if !have_objdump() {
        return;
    }
    let Some(lib) = library("libhsa-runtime64.so.1", "libhsa-runtime64-1") else {
        return;
    };
    let objects: Vec<CodeObject> = support::code_objects::embedded(&lib)
        .expect("read ROCr")
        .into_iter()
        .filter(|co| processor(&co.elf).is_some())
        .collect();
    run("ROCr blit kernels", &objects);
}

#[test]
fn rocrand() {
    if !have_objdump() {
        return;
    }
    let Some(lib) = library("librocrand.so.1", "librocrand1") else {
        return;
    };
    let objects = support::code_objects::from_fatbin(&lib, |_, _| true).expect("read rocRAND");
    run("rocRAND", &objects);
}

#[test]
fn rocsparse() {
    if !have_objdump() {
        return;
    }
    let Some(lib) = library("librocsparse.so.0", "librocsparse0") else {
        return;
    };
    // A few bundles at a time, to hold only their code objects in memory.
    const CHUNK: usize = 8;
    let mut tally = Tally::default();
    let mut first = 0;
    loop {
        let mut last_seen = 0;
        let objects = support::code_objects::from_fatbin(&lib, |_, bundle| {
            last_seen = last_seen.max(bundle);
            (first..first + CHUNK).contains(&bundle)
        })
        .expect("read rocSPARSE");
        check_all(
            "rocSPARSE",
            &objects,
            |co| bundle_index(&co.name).is_multiple_of(16),
            &mut tally,
        );
        first += CHUNK;
        if first > last_seen {
            break;
        }
    }
    report("rocSPARSE", &tally);
}

fn bundle_index(name: &str) -> usize {
    name.split('#')
        .nth(1)
        .and_then(|r| r.split(':').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
fn hip_test_programs() {
    if !have_objdump() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let mut objects = Vec::new();
    let mut sources: Vec<String> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("test-programs"))
            .expect("test-programs")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".hip"))
            .collect();
    sources.sort();
    for source in &sources {
        let Some(exe) = support::hip::compile(dir.path(), source) else {
            return;
        };
        let found =
            support::code_objects::from_fatbin(&exe, |_, _| true).expect("read the HIP program");
        assert!(
            found.len() >= 2,
            "{source}: expected gfx90a and gfx900 code objects, found {}",
            found.len()
        );
        objects.extend(found);
    }
    run("HIP test programs", &objects);
}
