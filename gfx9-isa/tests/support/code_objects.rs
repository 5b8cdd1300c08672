//! Finding AMDGPU code objects: in clang offload bundles
//! (`__CLANG_OFFLOAD_BUNDLE__`, the layout of clang-offload-bundler's binary
//! format: magic, u64 entry count, then per entry u64 offset, u64 size, u64
//! triple length and the triple) inside a host binary's `.hip_fatbin`, and
//! as raw ELF images embedded in a shared library (ROCr's blit kernels).
//! Reads with bounded allocations: one code object at a time.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// One AMDGPU code object found in a file.
pub struct CodeObject {
    /// Where it came from (`file#bundle-entry` or `file@offset`).
    pub name: String,
    /// The ELF image.
    pub elf: Vec<u8>,
}

const BUNDLE_MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
/// Larger than any code object in the libraries (the largest rocSPARSE one
/// is a few MiB): a size above it is a corrupt header.
const MAX_CODE_OBJECT: u64 = 256 << 20;

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

/// The (offset, size, address) of an ELF64 file's section named `name`.
pub fn section(elf: &[u8], name: &str) -> Option<(usize, usize, u64)> {
    if elf.get(..4)? != b"\x7fELF" || *elf.get(4)? != 2 {
        return None;
    }
    let shoff = u64_at(elf, 0x28)? as usize;
    let shentsize = u16_at(elf, 0x3a)? as usize;
    let shnum = u16_at(elf, 0x3c)? as usize;
    let shstrndx = u16_at(elf, 0x3e)? as usize;
    let sh = |i: usize| shoff.checked_add(i.checked_mul(shentsize)?);
    let strtab = sh(shstrndx)?;
    let str_off = u64_at(elf, strtab + 0x18)? as usize;
    for i in 0..shnum {
        let h = sh(i)?;
        let name_off = u32_at(elf, h)? as usize;
        let start = str_off.checked_add(name_off)?;
        let n = elf.get(start..)?;
        let end = n.iter().position(|&c| c == 0)?;
        if &n[..end] == name.as_bytes() {
            let off = u64_at(elf, h + 0x18)? as usize;
            let size = u64_at(elf, h + 0x20)? as usize;
            elf.get(off..off.checked_add(size)?)?;
            return Some((off, size, u64_at(elf, h + 0x10)?));
        }
    }
    None
}

/// The section headers of a host ELF file, read from disk: (offset, size)
/// of `name`.
fn file_section(file: &mut File, name: &str) -> std::io::Result<Option<(u64, u64)>> {
    let mut head = [0u8; 64];
    file.seek(SeekFrom::Start(0))?;
    file.read_exact(&mut head)?;
    let shoff = u64_at(&head, 0x28).unwrap_or(0);
    let shentsize = u16_at(&head, 0x3a).unwrap_or(0) as u64;
    let shnum = u16_at(&head, 0x3c).unwrap_or(0) as u64;
    let shstrndx = u16_at(&head, 0x3e).unwrap_or(0) as u64;
    let mut table = vec![0u8; (shentsize * shnum).min(1 << 20) as usize];
    file.seek(SeekFrom::Start(shoff))?;
    file.read_exact(&mut table)?;
    let strtab = (shstrndx * shentsize) as usize;
    let (Some(str_off), Some(str_size)) =
        (u64_at(&table, strtab + 0x18), u64_at(&table, strtab + 0x20))
    else {
        return Ok(None);
    };
    let mut names = vec![0u8; str_size.min(1 << 20) as usize];
    file.seek(SeekFrom::Start(str_off))?;
    file.read_exact(&mut names)?;
    for i in 0..shnum as usize {
        let h = i * shentsize as usize;
        let Some(n) = u32_at(&table, h) else { break };
        let Some(rest) = names.get(n as usize..) else {
            continue;
        };
        let end = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
        if &rest[..end] == name.as_bytes() {
            return Ok(Some((
                u64_at(&table, h + 0x18).unwrap_or(0),
                u64_at(&table, h + 0x20).unwrap_or(0),
            )));
        }
    }
    Ok(None)
}

/// Every bundle entry for a gfx9 target in `path`'s `.hip_fatbin`.
pub fn from_fatbin(
    path: &Path,
    mut keep: impl FnMut(&str, usize) -> bool,
) -> std::io::Result<Vec<CodeObject>> {
    let mut file = File::open(path)?;
    let Some((start, size)) = file_section(&mut file, ".hip_fatbin")? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    let mut at = start;
    let end = start + size;
    let mut bundle = 0;
    // Bundles are aligned to 4096 bytes in the section (clang's
    // `.hip_fatbin` alignment); walk from one to the next by the extent of
    // the last entry.
    while at + 32 <= end {
        let mut head = [0u8; 32];
        file.seek(SeekFrom::Start(at))?;
        file.read_exact(&mut head)?;
        if &head[..24] != BUNDLE_MAGIC {
            at += 4096 - (at - start) % 4096;
            continue;
        }
        let count = u64_at(&head, 24).unwrap_or(0).min(64);
        let mut entries = Vec::new();
        let mut table = vec![0u8; 4096];
        let n = file.read(&mut table)?;
        table.truncate(n);
        let mut p = 0;
        let mut extent = at + 32;
        for _ in 0..count {
            let (Some(off), Some(sz), Some(tl)) = (
                u64_at(&table, p),
                u64_at(&table, p + 8),
                u64_at(&table, p + 16),
            ) else {
                break;
            };
            let Some(triple) = table.get(p + 24..p + 24 + tl as usize) else {
                break;
            };
            let triple = String::from_utf8_lossy(triple).into_owned();
            p += 24 + tl as usize;
            extent = extent.max(at + off + sz);
            entries.push((off, sz, triple));
        }
        for (off, sz, triple) in entries {
            if sz == 0 || sz > MAX_CODE_OBJECT || !triple.contains("gfx9") || !keep(&triple, bundle)
            {
                continue;
            }
            let mut elf = vec![0u8; sz as usize];
            file.seek(SeekFrom::Start(at + off))?;
            file.read_exact(&mut elf)?;
            out.push(CodeObject {
                name: format!("{}#{bundle}:{triple}", path.display()),
                elf,
            });
        }
        bundle += 1;
        at = extent.max(at + 32);
    }
    Ok(out)
}

/// AMDGPU ELF images (EM_AMDGPU = 224) embedded whole in `path`, as ROCr
/// embeds its blit kernels.
pub fn embedded(path: &Path) -> std::io::Result<Vec<CodeObject>> {
    let data = std::fs::read(path)?;
    let mut out = Vec::new();
    let mut at = 1;
    while let Some(pos) = data
        .get(at..)
        .and_then(|d| d.windows(4).position(|w| w == b"\x7fELF"))
    {
        let start = at + pos;
        at = start + 4;
        let elf = &data[start..];
        if u16_at(elf, 18) != Some(224) {
            continue;
        }
        // The image's extent: the end of its section header table.
        let (Some(shoff), Some(ent), Some(num)) =
            (u64_at(elf, 0x28), u16_at(elf, 0x3a), u16_at(elf, 0x3c))
        else {
            continue;
        };
        let len = shoff as usize + ent as usize * num as usize;
        if let Some(image) = elf.get(..len) {
            out.push(CodeObject {
                name: format!("{}@{start:#x}", path.display()),
                elf: image.to_vec(),
            });
        }
    }
    Ok(out)
}

/// The processor name of a code object (`EF_AMDGPU_MACH`, LLVM AMDGPUUsage).
pub fn processor(elf: &[u8]) -> Option<&'static str> {
    let flags = u32_at(elf, 0x30)?;
    Some(match flags & 0xff {
        0x2c => "gfx900",
        0x2d => "gfx902",
        0x2e => "gfx904",
        0x2f => "gfx906",
        0x30 => "gfx908",
        0x31 => "gfx909",
        0x32 => "gfx90c",
        0x3f => "gfx90a",
        0x40 => "gfx940",
        0x4b => "gfx941",
        0x4c => "gfx942",
        _ => return None,
    })
}
