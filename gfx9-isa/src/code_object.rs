//! Reading an AMDGPU code object (an ELF64 shared object, `EM_AMDGPU`)
//! far enough to run its kernels: the target from `e_flags`' machine
//! field, the loadable image its `PT_LOAD` segments make, and the symbol
//! table, where a kernel's descriptor is `<kernel>.kd` (LLVM's AMDGPUUsage,
//! "Code Object Format" and "Kernel Descriptor").
//!
//! Every offset and count is checked against the file: a truncated or
//! hostile file is an error naming what does not fit, never a panic, and
//! the image is bounded ([`MAX_IMAGE`]).

use crate::Target;

/// `EM_AMDGPU` (ELF `e_machine`).
const EM_AMDGPU: u16 = 224;
/// `PT_LOAD`.
const PT_LOAD: u32 = 1;
/// `SHT_SYMTAB`.
const SHT_SYMTAB: u32 = 2;
/// `EF_AMDGPU_MACH`: the processor in `e_flags`' low byte.
const EF_AMDGPU_MACH: u32 = 0xff;

/// The largest loaded image accepted: far above the largest code object
/// of AMD's libraries (a few MiB).
pub const MAX_IMAGE: u64 = 256 << 20;

/// Why a file is not a code object this crate can load.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodeObjectError {
    /// No ELF64 little-endian header.
    #[error("not an ELF64 little-endian file")]
    NotElf64,
    /// An ELF file for another machine.
    #[error("ELF machine {0} is not EM_AMDGPU (224)")]
    NotAmdgpu(u16),
    /// An AMDGPU processor this crate does not decode.
    #[error("EF_AMDGPU_MACH {0:#x} is not a gfx9 processor")]
    NotGfx9(u32),
    /// A table or string that runs past the end of the file.
    #[error("{what} at offset {offset:#x} runs past the end of the file ({len} bytes)")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Where.
        offset: u64,
        /// The file's length.
        len: usize,
    },
    /// Segments that would load into more than [`MAX_IMAGE`] bytes.
    #[error("the loaded image would be {0} bytes, more than the {MAX_IMAGE} accepted")]
    TooLarge(u64),
    /// A segment whose file size exceeds its memory size.
    #[error("PT_LOAD at {vaddr:#x} has {filesz} bytes in the file but {memsz} in memory")]
    BadSegment {
        /// The segment's address.
        vaddr: u64,
        /// Its size in the file.
        filesz: u64,
        /// Its size in memory.
        memsz: u64,
    },
}

/// A symbol of the code object's symbol table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    /// Its name (`<kernel>.kd` for a kernel descriptor).
    pub name: String,
    /// Its value: an offset in the loaded image.
    pub value: u64,
    /// Its size in bytes.
    pub size: u64,
}

/// A code object, checked to be an ELF64 AMDGPU file for a gfx9 target.
#[derive(Debug, Clone, Copy)]
pub struct CodeObject<'a> {
    elf: &'a [u8],
    target: Target,
}

fn bytes<'a>(
    elf: &'a [u8],
    at: u64,
    len: u64,
    what: &'static str,
) -> Result<&'a [u8], CodeObjectError> {
    let truncated = CodeObjectError::Truncated {
        what,
        offset: at,
        len: elf.len(),
    };
    let start = usize::try_from(at).map_err(|_| truncated.clone())?;
    let len = usize::try_from(len).map_err(|_| truncated.clone())?;
    elf.get(start..start.checked_add(len).ok_or(truncated.clone())?)
        .ok_or(truncated)
}

fn u16_at(elf: &[u8], at: u64, what: &'static str) -> Result<u16, CodeObjectError> {
    let b = bytes(elf, at, 2, what)?;
    Ok(u16::from_le_bytes([b[0], b[1]]))
}

fn u32_at(elf: &[u8], at: u64, what: &'static str) -> Result<u32, CodeObjectError> {
    let b = bytes(elf, at, 4, what)?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn u64_at(elf: &[u8], at: u64, what: &'static str) -> Result<u64, CodeObjectError> {
    let b = bytes(elf, at, 8, what)?;
    let mut w = [0u8; 8];
    w.copy_from_slice(b);
    Ok(u64::from_le_bytes(w))
}

/// Entry `index` of a table at `base` with entries of `size` bytes.
fn entry(base: u64, index: u64, size: u64) -> Result<u64, CodeObjectError> {
    index
        .checked_mul(size)
        .and_then(|o| base.checked_add(o))
        .ok_or(CodeObjectError::TooLarge(u64::MAX))
}

/// One `PT_LOAD` segment: (file offset, vaddr, file size, memory size).
type Load = (u64, u64, u64, u64);

impl<'a> CodeObject<'a> {
    /// Checks the ELF header of `elf`.
    pub fn parse(elf: &'a [u8]) -> Result<CodeObject<'a>, CodeObjectError> {
        if elf.len() < 64 || &elf[..4] != b"\x7fELF" || elf[4] != 2 || elf[5] != 1 {
            return Err(CodeObjectError::NotElf64);
        }
        let machine = u16_at(elf, 0x12, "e_machine")?;
        if machine != EM_AMDGPU {
            return Err(CodeObjectError::NotAmdgpu(machine));
        }
        let mach = u32_at(elf, 0x30, "e_flags")? & EF_AMDGPU_MACH;
        let target = Target::from_elf_mach(mach as u8).ok_or(CodeObjectError::NotGfx9(mach))?;
        Ok(CodeObject { elf, target })
    }

    /// The processor the code is for.
    pub fn target(&self) -> Target {
        self.target
    }

    fn loads(&self) -> Result<Vec<Load>, CodeObjectError> {
        let elf = self.elf;
        let phoff = u64_at(elf, 0x20, "e_phoff")?;
        let phentsize = u64::from(u16_at(elf, 0x36, "e_phentsize")?);
        let phnum = u64::from(u16_at(elf, 0x38, "e_phnum")?);
        let mut loads = Vec::new();
        for k in 0..phnum {
            let p = entry(phoff, k, phentsize)?;
            if u32_at(elf, p, "program header")? != PT_LOAD {
                continue;
            }
            let offset = u64_at(elf, p.saturating_add(8), "p_offset")?;
            let vaddr = u64_at(elf, p.saturating_add(0x10), "p_vaddr")?;
            let filesz = u64_at(elf, p.saturating_add(0x20), "p_filesz")?;
            let memsz = u64_at(elf, p.saturating_add(0x28), "p_memsz")?;
            if filesz > memsz {
                return Err(CodeObjectError::BadSegment {
                    vaddr,
                    filesz,
                    memsz,
                });
            }
            loads.push((offset, vaddr, filesz, memsz));
        }
        Ok(loads)
    }

    /// The loaded image: each `PT_LOAD` segment's bytes at its `p_vaddr`,
    /// zero elsewhere (`.bss` included), from address 0 to the end of the
    /// last segment. Loaded at a base address B, a symbol's value V is at
    /// B + V.
    pub fn image(&self) -> Result<Vec<u8>, CodeObjectError> {
        let loads = self.loads()?;
        let mut end = 0u64;
        for &(_, vaddr, _, memsz) in &loads {
            let seg_end = vaddr
                .checked_add(memsz)
                .ok_or(CodeObjectError::TooLarge(u64::MAX))?;
            end = end.max(seg_end);
        }
        if end > MAX_IMAGE {
            return Err(CodeObjectError::TooLarge(end));
        }
        let mut image = vec![0u8; end as usize];
        for (offset, vaddr, filesz, _) in loads {
            let data = bytes(self.elf, offset, filesz, "PT_LOAD segment")?;
            // vaddr + filesz <= vaddr + memsz <= end, checked above.
            image[vaddr as usize..(vaddr + filesz) as usize].copy_from_slice(data);
        }
        Ok(image)
    }

    /// The symbols of its `SHT_SYMTAB` sections.
    pub fn symbols(&self) -> Result<Vec<Symbol>, CodeObjectError> {
        let elf = self.elf;
        let shoff = u64_at(elf, 0x28, "e_shoff")?;
        let shentsize = u64::from(u16_at(elf, 0x3a, "e_shentsize")?);
        let shnum = u64::from(u16_at(elf, 0x3c, "e_shnum")?);
        let mut symbols = Vec::new();
        for k in 0..shnum {
            let sh = entry(shoff, k, shentsize)?;
            if u32_at(elf, sh.saturating_add(4), "section header")? != SHT_SYMTAB {
                continue;
            }
            let offset = u64_at(elf, sh.saturating_add(0x18), "sh_offset")?;
            let size = u64_at(elf, sh.saturating_add(0x20), "sh_size")?;
            let link = u64::from(u32_at(elf, sh.saturating_add(0x28), "sh_link")?);
            // Elf64_Sym is 24 bytes; a smaller sh_entsize cannot hold one.
            let entsize = u64_at(elf, sh.saturating_add(0x38), "sh_entsize")?.max(24);
            let strtab = u64_at(
                elf,
                entry(shoff, link, shentsize)?.saturating_add(0x18),
                "string table",
            )?;
            bytes(elf, offset, size, "symbol table")?;
            for e in 0..size / entsize {
                let sym = offset + e * entsize;
                let name_at = strtab
                    .checked_add(u64::from(u32_at(elf, sym, "st_name")?))
                    .ok_or(CodeObjectError::TooLarge(u64::MAX))?;
                let rest =
                    bytes(elf, name_at, 0, "symbol name").map(|_| &elf[name_at as usize..])?;
                let len = rest
                    .iter()
                    .position(|&c| c == 0)
                    .ok_or(CodeObjectError::Truncated {
                        what: "symbol name",
                        offset: name_at,
                        len: elf.len(),
                    })?;
                symbols.push(Symbol {
                    name: String::from_utf8_lossy(&rest[..len]).into_owned(),
                    value: u64_at(elf, sym.saturating_add(8), "st_value")?,
                    size: u64_at(elf, sym.saturating_add(16), "st_size")?,
                });
            }
        }
        Ok(symbols)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_not_a_gfx9_code_object_is_refused_by_name() {
        assert_eq!(
            CodeObject::parse(b"not an elf").unwrap_err(),
            CodeObjectError::NotElf64
        );
        let mut elf = vec![0u8; 64];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        elf[0x12] = 62; // EM_X86_64
        assert_eq!(
            CodeObject::parse(&elf).unwrap_err(),
            CodeObjectError::NotAmdgpu(62)
        );
        elf[0x12] = 224;
        elf[0x30] = 0x01; // EF_AMDGPU_MACH_R600_R600
        assert_eq!(
            CodeObject::parse(&elf).unwrap_err(),
            CodeObjectError::NotGfx9(1)
        );
    }

    #[test]
    fn tables_past_the_end_are_errors_not_panics() {
        let mut elf = vec![0u8; 64];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        elf[0x12] = 224;
        elf[0x30] = 0x3f; // EF_AMDGPU_MACH_AMDGCN_GFX90A
        let co = CodeObject::parse(&elf).expect("a gfx90a header");
        assert_eq!(co.target(), Target::Gfx90a);
        // One program header and one section header, both past the end.
        elf[0x20] = 0xf0;
        elf[0x36] = 56;
        elf[0x38] = 1;
        elf[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
        elf[0x3a] = 64;
        elf[0x3c] = 1;
        let co = CodeObject::parse(&elf).unwrap();
        assert!(matches!(
            co.image(),
            Err(CodeObjectError::Truncated {
                what: "program header",
                ..
            })
        ));
        assert!(co.symbols().is_err());
    }
}
