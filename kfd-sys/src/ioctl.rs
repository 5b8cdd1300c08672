//! Linux ioctl request-code encoding (`<asm-generic/ioctl.h>`) as `const fn`.
//!
//! Every request code in this crate is computed here from direction, type byte, number
//! and the `size_of` of the argument type, exactly as the C `_IOC` macros do, so a
//! struct whose size changes changes its request code with it. The functions only
//! compute numbers; this module must never issue a system call.
//!
//! The encoding is the generic one used by x86, x86-64, arm, arm64, riscv, s390 and
//! loongarch. PowerPC, MIPS and SPARC use 3 direction bits and 13 size bits; those
//! variants are selected with `cfg(target_arch)` so the codes stay correct there.

#![allow(non_snake_case)]

/// Bits of the request code that hold the command number.
pub const _IOC_NRBITS: u32 = 8;
/// Bits of the request code that hold the type ("magic") byte.
pub const _IOC_TYPEBITS: u32 = 8;

/// Bits of the request code that hold the argument size.
#[cfg(not(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
)))]
pub const _IOC_SIZEBITS: u32 = 14;
/// Bits of the request code that hold the argument size.
#[cfg(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
))]
pub const _IOC_SIZEBITS: u32 = 13;

/// Bits of the request code that hold the transfer direction.
#[cfg(not(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
)))]
pub const _IOC_DIRBITS: u32 = 2;
/// Bits of the request code that hold the transfer direction.
#[cfg(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
))]
pub const _IOC_DIRBITS: u32 = 3;

/// Direction: no data transfer.
#[cfg(not(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
)))]
pub const _IOC_NONE: u32 = 0;
/// Direction: userspace writes, the kernel reads the argument.
#[cfg(not(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
)))]
pub const _IOC_WRITE: u32 = 1;
/// Direction: the kernel writes, userspace reads the argument.
#[cfg(not(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
)))]
pub const _IOC_READ: u32 = 2;

/// Direction: no data transfer.
#[cfg(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
))]
pub const _IOC_NONE: u32 = 1;
/// Direction: userspace writes, the kernel reads the argument.
#[cfg(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
))]
pub const _IOC_WRITE: u32 = 4;
/// Direction: the kernel writes, userspace reads the argument.
#[cfg(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
))]
pub const _IOC_READ: u32 = 2;

/// Bit position of the number field.
pub const _IOC_NRSHIFT: u32 = 0;
/// Bit position of the type field.
pub const _IOC_TYPESHIFT: u32 = _IOC_NRSHIFT + _IOC_NRBITS;
/// Bit position of the size field.
pub const _IOC_SIZESHIFT: u32 = _IOC_TYPESHIFT + _IOC_TYPEBITS;
/// Bit position of the direction field.
pub const _IOC_DIRSHIFT: u32 = _IOC_SIZESHIFT + _IOC_SIZEBITS;

/// Mask of the number field (after shifting down).
pub const _IOC_NRMASK: u32 = (1 << _IOC_NRBITS) - 1;
/// Mask of the type field (after shifting down).
pub const _IOC_TYPEMASK: u32 = (1 << _IOC_TYPEBITS) - 1;
/// Mask of the size field (after shifting down).
pub const _IOC_SIZEMASK: u32 = (1 << _IOC_SIZEBITS) - 1;
/// Mask of the direction field (after shifting down).
pub const _IOC_DIRMASK: u32 = (1 << _IOC_DIRBITS) - 1;

/// `_IOC(dir, type, nr, size)`: builds a request code from its four fields.
///
/// Evaluated in a `const` (as every request code of this crate is), an argument
/// size that does not fit the size field is a compile-time error.
pub const fn _IOC(dir: u32, ty: u8, nr: u8, size: usize) -> u32 {
    assert!(size <= _IOC_SIZEMASK as usize, "ioctl argument too large");
    (dir << _IOC_DIRSHIFT)
        | ((ty as u32) << _IOC_TYPESHIFT)
        | ((nr as u32) << _IOC_NRSHIFT)
        | ((size as u32) << _IOC_SIZESHIFT)
}

/// `_IO(type, nr)`: a request without an argument.
pub const fn _IO(ty: u8, nr: u8) -> u32 {
    _IOC(_IOC_NONE, ty, nr, 0)
}

/// `_IOR(type, nr, T)`: the kernel writes a `T` back to userspace.
pub const fn _IOR<T>(ty: u8, nr: u8) -> u32 {
    _IOC(_IOC_READ, ty, nr, core::mem::size_of::<T>())
}

/// `_IOW(type, nr, T)`: the kernel reads a `T` from userspace.
pub const fn _IOW<T>(ty: u8, nr: u8) -> u32 {
    _IOC(_IOC_WRITE, ty, nr, core::mem::size_of::<T>())
}

/// `_IOWR(type, nr, T)`: the kernel reads a `T` and writes it back.
pub const fn _IOWR<T>(ty: u8, nr: u8) -> u32 {
    _IOC(_IOC_READ | _IOC_WRITE, ty, nr, core::mem::size_of::<T>())
}

/// `_IOC_DIR(cmd)`: the direction bits of a request code.
pub const fn _IOC_DIR(cmd: u32) -> u32 {
    (cmd >> _IOC_DIRSHIFT) & _IOC_DIRMASK
}

/// `_IOC_TYPE(cmd)`: the type byte of a request code.
pub const fn _IOC_TYPE(cmd: u32) -> u8 {
    ((cmd >> _IOC_TYPESHIFT) & _IOC_TYPEMASK) as u8
}

/// `_IOC_NR(cmd)`: the command number of a request code.
pub const fn _IOC_NR(cmd: u32) -> u8 {
    ((cmd >> _IOC_NRSHIFT) & _IOC_NRMASK) as u8
}

/// `_IOC_SIZE(cmd)`: the argument size encoded in a request code.
pub const fn _IOC_SIZE(cmd: u32) -> usize {
    ((cmd >> _IOC_SIZESHIFT) & _IOC_SIZEMASK) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip() {
        let cmd = _IOC(_IOC_READ | _IOC_WRITE, b'K', 0x22, 56);
        assert_eq!(_IOC_DIR(cmd), _IOC_READ | _IOC_WRITE);
        assert_eq!(_IOC_TYPE(cmd), b'K');
        assert_eq!(_IOC_NR(cmd), 0x22);
        assert_eq!(_IOC_SIZE(cmd), 56);
        assert_eq!(_IO(b'd', 1), (b'd' as u32) << 8 | 1);
        assert_eq!(_IOC_SIZE(_IOR::<[u8; 12]>(b'd', 0)), 12);
        assert_eq!(_IOC_DIR(_IOW::<u64>(b'd', 0)), _IOC_WRITE);
    }
}
