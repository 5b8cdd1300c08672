//! Running the kernels of a code object on the interpreter: a plain
//! in-memory implementation of the memory trait, the code object loaded
//! into it, and a launcher that sets up a dispatch and runs its
//! workgroups one after another with the interpreter's runner.

use std::collections::HashMap;

use gfx9_isa::code_object::CodeObject;
use gfx9_isa::exec::Access;
use gfx9_isa::exec::{
    run_workgroup, AqlDispatch, AtomicOp, Clock, CodeCache, Dispatch, KernelDescriptor, MemFault,
    Memory, WorkgroupOutcome,
};
use gfx9_isa::Target;

/// Memory as a list of allocations; anything else faults.
#[derive(Default)]
pub struct Mem {
    regions: Vec<(u64, Vec<u8>)>,
    next: u64,
}

impl Mem {
    /// An empty memory.
    pub fn new() -> Mem {
        Mem {
            regions: Vec::new(),
            next: 0x1_0000_0000,
        }
    }

    /// A zeroed allocation, 4 KiB aligned, with an unmapped gap after it.
    pub fn alloc(&mut self, size: usize) -> u64 {
        let addr = self.next;
        self.regions.push((addr, vec![0; size.max(1)]));
        self.next = (addr + size as u64 + 0x2000).next_multiple_of(0x1000);
        addr
    }

    /// An allocation at a fixed address.
    pub fn map(&mut self, addr: u64, bytes: Vec<u8>) {
        self.regions.push((addr, bytes));
    }

    fn find(&mut self, addr: u64, len: usize, access: Access) -> Result<&mut [u8], MemFault> {
        for (base, bytes) in &mut self.regions {
            if addr >= *base && addr - *base < bytes.len() as u64 {
                let off = (addr - *base) as usize;
                let end = *base + bytes.len() as u64;
                return bytes
                    .get_mut(off..off + len)
                    .ok_or(MemFault { addr: end, access });
            }
        }
        Err(MemFault { addr, access })
    }

    /// Writes `data` (which must be mapped).
    pub fn put(&mut self, addr: u64, data: &[u8]) {
        self.write(addr, data).expect("write into an allocation");
    }

    /// Reads `len` bytes (which must be mapped).
    pub fn get(&mut self, addr: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.read(addr, &mut v).expect("read from an allocation");
        v
    }

    /// Reads `n` dwords.
    pub fn get_u32s(&mut self, addr: u64, n: usize) -> Vec<u32> {
        self.get(addr, n * 4)
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    /// Reads `n` f32s.
    pub fn get_f32s(&mut self, addr: u64, n: usize) -> Vec<f32> {
        self.get_u32s(addr, n)
            .into_iter()
            .map(f32::from_bits)
            .collect()
    }

    /// Reads `n` qwords.
    pub fn get_u64s(&mut self, addr: u64, n: usize) -> Vec<u64> {
        self.get(addr, n * 8)
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }
}

impl Memory for Mem {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemFault> {
        let len = buf.len();
        buf.copy_from_slice(self.find(addr, len, Access::Read)?);
        Ok(())
    }
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemFault> {
        self.find(addr, data.len(), Access::Write)?
            .copy_from_slice(data);
        Ok(())
    }
    fn atomic32(&mut self, addr: u64, op: AtomicOp, src: u32, cmp: u32) -> Result<u32, MemFault> {
        let s = self.find(addr, 4, Access::Atomic)?;
        let old = u32::from_le_bytes((&*s).try_into().unwrap());
        s.copy_from_slice(&op.apply32(old, src, cmp).to_le_bytes());
        Ok(old)
    }
    fn atomic64(&mut self, addr: u64, op: AtomicOp, src: u64, cmp: u64) -> Result<u64, MemFault> {
        let s = self.find(addr, 8, Access::Atomic)?;
        let old = u64::from_le_bytes((&*s).try_into().unwrap());
        s.copy_from_slice(&op.apply64(old, src, cmp).to_le_bytes());
        Ok(old)
    }
}

/// A clock that ticks per read.
#[derive(Default)]
pub struct Ticks(std::cell::Cell<u64>);

impl Clock for Ticks {
    fn memtime(&self) -> u64 {
        self.0.set(self.0.get() + 1);
        self.0.get()
    }
    fn memrealtime(&self) -> u64 {
        self.memtime() / 4
    }
}

/// A code object loaded into memory.
pub struct Loaded {
    /// The code object's target.
    pub target: Target,
    /// Symbol name -> (address, size).
    pub symbols: HashMap<String, (u64, u64)>,
}

/// Loads an AMDGPU code object's image at `base`.
pub fn load(mem: &mut Mem, elf: &[u8], base: u64) -> Loaded {
    let co = CodeObject::parse(elf).expect("a gfx9 code object");
    mem.map(base, co.image().expect("the code object's image"));
    let symbols = co
        .symbols()
        .expect("the code object's symbols")
        .into_iter()
        .map(|s| (s.name, (base + s.value, s.size)))
        .collect();
    Loaded {
        target: co.target(),
        symbols,
    }
}

/// One kernel launch's parameters.
pub struct Launch<'a> {
    /// The mangled kernel name (the `.kd` symbol without `.kd`).
    pub kernel: &'a str,
    /// Grid size in work-items.
    pub grid: [u32; 3],
    /// Workgroup size.
    pub workgroup: [u16; 3],
    /// Dynamic LDS bytes.
    pub dynamic_lds: u32,
    /// The kernel argument block.
    pub kernargs: &'a [u8],
}

/// Launches a kernel and runs all its workgroups; panics naming the
/// outcome if one does not complete. Returns the wave-instructions run.
pub fn launch(mem: &mut Mem, co: &Loaded, l: &Launch<'_>) -> u64 {
    let (kd_addr, _) = co.symbols[&format!("{}.kd", l.kernel)];
    let kd = KernelDescriptor::parse(&mem.get(kd_addr, 64)).expect("kernel descriptor");
    let kernarg = mem.alloc(l.kernargs.len().max(kd.kernarg_size as usize).max(256));
    mem.put(kernarg, l.kernargs);
    let packet = mem.alloc(64);
    let queue = mem.alloc(256);
    let mut d = Dispatch::of_kernel(co.target, kd, kd_addr, l.grid, l.workgroup, l.dynamic_lds);
    d.kernarg_address = kernarg;
    d.dispatch_packet = packet;
    d.queue = queue;
    d.dispatch_id = 1;
    let counts = d.workgroups();
    let waves_per_group = d.waves_in([0, 0, 0]) as u64;
    if d.scratch_wave_bytes > 0 {
        let total = d.scratch_wave_bytes * waves_per_group;
        d.scratch_base = mem.alloc(total as usize);
        d.private_segment_buffer = Dispatch::scratch_descriptor(d.scratch_base);
    }
    mem.put(packet, &d.packet_bytes(0));
    // As a queue engine does: the dispatch from the packet in memory.
    let aql = AqlDispatch::parse(&mem.get(packet, 64)).expect("aql packet");
    assert_eq!((aql.grid, aql.workgroup), (d.grid, d.workgroup));
    d.group_segment_size = aql.group_segment_size;
    d.kernarg_address = aql.kernarg_address;
    let mut cache = CodeCache::new();
    let clock = Ticks::default();
    let mut total = 0;
    let started = std::time::Instant::now();
    for z in 0..counts[2] {
        for y in 0..counts[1] {
            for x in 0..counts[0] {
                let out = run_workgroup(&d, [x, y, z], mem, &mut cache, &clock, 0, 50_000_000)
                    .expect("dispatch setup");
                match out {
                    WorkgroupOutcome::Completed { instructions } => total += instructions,
                    other => panic!(
                        "{} on {}: workgroup {:?}: {other:?}",
                        l.kernel,
                        co.target,
                        [x, y, z]
                    ),
                }
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{} on {}: {total} wave-instructions in {:.3} s ({:.1} M/s)",
        l.kernel,
        co.target,
        secs,
        total as f64 / secs / 1e6
    );
    total
}

/// Kernel arguments laid out as the code object's ABI does: each value at
/// its natural alignment.
#[derive(Default)]
pub struct Args(pub Vec<u8>);

impl Args {
    fn align(&mut self, a: usize) {
        while !self.0.len().is_multiple_of(a) {
            self.0.push(0);
        }
    }
    /// Appends an i32.
    pub fn i32(mut self, v: i32) -> Args {
        self.align(4);
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends an f32.
    pub fn f32(mut self, v: f32) -> Args {
        self.align(4);
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends a pointer.
    pub fn ptr(mut self, v: u64) -> Args {
        self.align(8);
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
}
