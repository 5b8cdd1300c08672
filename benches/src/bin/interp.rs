//! The gfx9 wavefront interpreter (`gfx9_isa::exec`): wave-instructions
//! per second on one core, on the kernels of
//! `gfx9-isa/test-programs/kernels.hip`.
//!
//! The kernels are built once at start with hipcc (device code only, one
//! code object per target, gfx90a and gfx900), loaded into a memory made
//! for the bench (a region table sorted by address, searched by binary
//! search after a check of the region hit last), and launched as a queue
//! engine would: every workgroup of the grid in turn through
//! `run_workgroup`, one thread. Each kernel runs once untimed (its code is
//! decoded then, into the cache every later launch shares: what is timed
//! is execution, not first-time decoding), then again and again until at
//! least `--secs` (default 1.0) seconds have passed; the count of
//! wave-instructions is the interpreter's own
//! (`WorkgroupOutcome::Completed`).
//!
//! Figures (`name=value`): per kernel and target
//! `interp_<kernel>_<target>_minst_per_s` (millions of wave-instructions
//! per second) and `..._wave_insts` (per launch); `interp_<target>_minst_per_s`
//! and `interp_overall_minst_per_s`, all instructions over all time.
//! `--cold` also prints `interp_cold_<target>_minst_per_s`: the first
//! launch of every kernel, decoding included.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, ExitCode};

use benches::output::line;
use gfx9_isa::code_object::CodeObject;
use gfx9_isa::exec::{
    run_workgroup, Access, AtomicOp, Clock, CodeCache, Dispatch, KernelDescriptor, MemFault,
    Memory, WorkgroupOutcome,
};
use gfx9_isa::Target;

/// Memory as allocations sorted by address; anything else faults.
struct Mem {
    /// (base, bytes), sorted by base, not overlapping.
    regions: Vec<(u64, Vec<u8>)>,
    /// The region the last access hit.
    last: usize,
    next: u64,
}

impl Mem {
    fn new() -> Mem {
        Mem {
            regions: Vec::new(),
            last: 0,
            next: 0x1_0000_0000,
        }
    }

    /// A zeroed allocation, 4 KiB aligned, with an unmapped gap after it.
    fn alloc(&mut self, size: usize) -> u64 {
        let addr = self.next;
        self.map(addr, vec![0; size.max(1)]);
        self.next = (addr + size as u64 + 0x2000).next_multiple_of(0x1000);
        addr
    }

    fn map(&mut self, addr: u64, bytes: Vec<u8>) {
        let at = self.regions.partition_point(|(b, _)| *b < addr);
        self.regions.insert(at, (addr, bytes));
    }

    #[inline]
    fn find(&mut self, addr: u64, len: usize, access: Access) -> Result<&mut [u8], MemFault> {
        let hit =
            |(base, bytes): &(u64, Vec<u8>)| addr >= *base && addr - *base < bytes.len() as u64;
        let k = if self.regions.get(self.last).is_some_and(hit) {
            self.last
        } else {
            let k = self.regions.partition_point(|(b, _)| *b <= addr);
            match k.checked_sub(1) {
                Some(k) if hit(&self.regions[k]) => k,
                _ => return Err(MemFault { addr, access }),
            }
        };
        self.last = k;
        let (base, bytes) = &mut self.regions[k];
        let off = (addr - *base) as usize;
        let end = *base + bytes.len() as u64;
        bytes
            .get_mut(off..off + len)
            .ok_or(MemFault { addr: end, access })
    }

    fn put(&mut self, addr: u64, data: &[u8]) {
        self.write(addr, data).expect("write into an allocation");
    }

    fn get(&mut self, addr: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.read(addr, &mut v).expect("read from an allocation");
        v
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
        let old = u32::from_le_bytes((&*s).try_into().expect("4 bytes"));
        s.copy_from_slice(&op.apply32(old, src, cmp).to_le_bytes());
        Ok(old)
    }
    fn atomic64(&mut self, addr: u64, op: AtomicOp, src: u64, cmp: u64) -> Result<u64, MemFault> {
        let s = self.find(addr, 8, Access::Atomic)?;
        let old = u64::from_le_bytes((&*s).try_into().expect("8 bytes"));
        s.copy_from_slice(&op.apply64(old, src, cmp).to_le_bytes());
        Ok(old)
    }
}

/// This thread's CPU time in seconds: on a machine shared with other
/// work, the time the interpreter ran, not the time it waited for a CPU.
fn cpu_now() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec clock_gettime(2) writes into.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) == 0 };
    if !ok {
        return 0.0;
    }
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

/// A clock that ticks per read.
#[derive(Default)]
struct Ticks(std::cell::Cell<u64>);

impl Clock for Ticks {
    fn memtime(&self) -> u64 {
        self.0.set(self.0.get() + 1);
        self.0.get()
    }
    fn memrealtime(&self) -> u64 {
        self.memtime() / 4
    }
}

/// A code object loaded into memory: its target and symbols (address).
struct Loaded {
    target: Target,
    symbols: HashMap<String, u64>,
}

/// Loads an AMDGPU code object's image at `base`.
fn load(mem: &mut Mem, elf: &[u8], base: u64) -> Loaded {
    let co = CodeObject::parse(elf).expect("a gfx9 code object");
    mem.map(base, co.image().expect("the code object's image"));
    let symbols = co
        .symbols()
        .expect("the code object's symbols")
        .into_iter()
        .map(|s| (s.name, base + s.value))
        .collect();
    Loaded {
        target: co.target(),
        symbols,
    }
}

/// Kernel arguments at their natural alignment.
#[derive(Default)]
struct Args(Vec<u8>);

impl Args {
    fn push(mut self, bytes: &[u8]) -> Args {
        while !self.0.len().is_multiple_of(bytes.len()) {
            self.0.push(0);
        }
        self.0.extend_from_slice(bytes);
        self
    }
    fn i32(self, v: i32) -> Args {
        self.push(&v.to_le_bytes())
    }
    fn f32(self, v: f32) -> Args {
        self.push(&v.to_le_bytes())
    }
    fn ptr(self, v: u64) -> Args {
        self.push(&v.to_le_bytes())
    }
}

/// One kernel's launch, its buffers already in memory.
struct Launch {
    name: &'static str,
    symbol: &'static str,
    grid: [u32; 3],
    workgroup: [u16; 3],
    dynamic_lds: u32,
    args: Args,
}

fn bytes<T: Copy, const N: usize>(v: impl Iterator<Item = T>, f: fn(T) -> [u8; N]) -> Vec<u8> {
    v.flat_map(f).collect()
}

/// The kernels of kernels.hip with inputs as the tests give them, at
/// sizes where the grid, not the launch, is the work.
fn launches(mem: &mut Mem) -> Vec<Launch> {
    let mut buf = |len: usize, init: Vec<u8>| {
        let a = mem.alloc(len);
        if !init.is_empty() {
            mem.put(a, &init);
        }
        a
    };
    let n = 16384usize;
    let fx = bytes((0..n).map(|i| i as f32 * 0.01 - 3.0), f32::to_le_bytes);
    let ix = bytes((0..n as i32).map(|i| (i * 7 % 101) - 50), i32::to_le_bytes);
    let (sx, sy) = (buf(n * 4, fx.clone()), buf(n * 4, fx.clone()));
    let (rin, rout) = (buf(n * 4, ix.clone()), buf(n / 256 * 4, Vec::new()));
    let atom = [8, 8, 4, 4].map(|len| buf(len, Vec::new()));
    let (shin, shout, shb) = (
        buf(n * 4, ix),
        buf(n * 4, Vec::new()),
        buf(n / 64 * 8, Vec::new()),
    );
    let scr = buf(1024 * 4, Vec::new());
    let m = 256usize;
    let mat = bytes(
        (0..m * m).map(|i| (i % 7) as f64 * 0.25 - 0.5),
        f64::to_le_bytes,
    );
    let vec = bytes((0..m).map(|i| 1.0 / (i + 1) as f64), f64::to_le_bytes);
    let (dm, dv, dr) = (buf(m * m * 8, mat), buf(m * 8, vec), buf(m * 8, Vec::new()));
    let tn = 4096usize;
    let (tx, ty, tyd) = (
        buf(tn * 4, fx[..tn * 4].to_vec()),
        buf(tn * 4, Vec::new()),
        buf(tn * 8, Vec::new()),
    );
    let (w, h) = (256u32, 128u32);
    let img = buf((w * h) as usize * 4, Vec::new());
    let (lin, lout) = (buf(n * 4, fx), buf(n * 4, Vec::new()));
    let hv = bytes(
        (0..n).map(|i| 0x3c00u16 + (i % 512) as u16),
        u16::to_le_bytes,
    );
    let (ha, hb, hc) = (
        buf(n * 2, hv.clone()),
        buf(n * 2, hv),
        buf(n * 2, Vec::new()),
    );
    let l = |name, symbol, grid, workgroup, dynamic_lds, args| Launch {
        name,
        symbol,
        grid,
        workgroup,
        dynamic_lds,
        args,
    };
    let n32 = n as u32;
    vec![
        l(
            "saxpy",
            "_Z5saxpyifPKfPf",
            [n32, 1, 1],
            [256, 1, 1],
            0,
            Args::default().i32(n as i32).f32(2.5).ptr(sx).ptr(sy),
        ),
        l(
            "reduce_lds",
            "_Z10reduce_ldsPKiPii",
            [n32, 1, 1],
            [256, 1, 1],
            0,
            Args::default().ptr(rin).ptr(rout).i32(n as i32),
        ),
        l(
            "atomics",
            "_Z7atomicsPiPyS_Pj",
            [4096, 1, 1],
            [256, 1, 1],
            0,
            Args::default()
                .ptr(atom[0])
                .ptr(atom[1])
                .ptr(atom[2])
                .ptr(atom[3]),
        ),
        l(
            "shuffles",
            "_Z8shufflesPKiPiPy",
            [n32, 1, 1],
            [64, 1, 1],
            0,
            Args::default().ptr(shin).ptr(shout).ptr(shb),
        ),
        l(
            "scratch_calls",
            "_Z13scratch_callsPii",
            [1024, 1, 1],
            [64, 1, 1],
            0,
            Args::default().ptr(scr).i32(48),
        ),
        l(
            "dgemv",
            "_Z5dgemvPKdS0_Pdi",
            [m as u32, 1, 1],
            [64, 1, 1],
            0,
            Args::default().ptr(dm).ptr(dv).ptr(dr).i32(m as i32),
        ),
        l(
            "transcendentals",
            "_Z15transcendentalsPKfPfPdi",
            [tn as u32, 1, 1],
            [256, 1, 1],
            0,
            Args::default().ptr(tx).ptr(ty).ptr(tyd).i32(tn as i32),
        ),
        l(
            "grid2d",
            "_Z6grid2dPfii",
            [w, h, 1],
            [16, 16, 1],
            0,
            Args::default().ptr(img).i32(w as i32).i32(h as i32),
        ),
        l(
            "dynamic_lds",
            "_Z11dynamic_ldsPKfPfi",
            [n32, 1, 1],
            [128, 1, 1],
            128 * 4,
            Args::default().ptr(lin).ptr(lout).i32(n as i32),
        ),
        l(
            "half_math",
            "_Z9half_mathPK6__halfS1_PS_i",
            [n32, 1, 1],
            [256, 1, 1],
            0,
            Args::default().ptr(ha).ptr(hb).ptr(hc).i32(n as i32),
        ),
    ]
}

/// The dispatch of `l` on `co` (kernarg block, packet and queue allocated).
fn dispatch(mem: &mut Mem, co: &Loaded, l: &Launch) -> Result<Dispatch, String> {
    let kd_addr = *co
        .symbols
        .get(&format!("{}.kd", l.symbol))
        .ok_or_else(|| format!("no kernel {}", l.symbol))?;
    let kd = KernelDescriptor::parse(&mem.get(kd_addr, 64)).map_err(|e| e.to_string())?;
    let kernarg = mem.alloc(l.args.0.len().max(kd.kernarg_size as usize).max(256));
    mem.put(kernarg, &l.args.0);
    let packet = mem.alloc(64);
    let queue = mem.alloc(256);
    let mut d = Dispatch::of_kernel(co.target, kd, kd_addr, l.grid, l.workgroup, l.dynamic_lds);
    d.kernarg_address = kernarg;
    d.dispatch_packet = packet;
    d.queue = queue;
    d.dispatch_id = 1;
    if d.scratch_wave_bytes > 0 {
        let total = d.scratch_wave_bytes * d.waves_in([0, 0, 0]) as u64;
        d.scratch_base = mem.alloc(total as usize);
        d.private_segment_buffer = Dispatch::scratch_descriptor(d.scratch_base);
    }
    mem.put(packet, &d.packet_bytes(0));
    Ok(d)
}

/// Runs every workgroup of `d`; the wave-instructions executed.
fn run(d: &Dispatch, mem: &mut Mem, cache: &mut CodeCache, clock: &Ticks) -> Result<u64, String> {
    let counts = d.workgroups();
    let mut total = 0;
    for z in 0..counts[2] {
        for y in 0..counts[1] {
            for x in 0..counts[0] {
                match run_workgroup(d, [x, y, z], mem, cache, clock, 0, 1 << 32) {
                    Ok(WorkgroupOutcome::Completed { instructions }) => total += instructions,
                    Ok(other) => return Err(format!("workgroup {:?}: {other:?}", [x, y, z])),
                    Err(e) => return Err(e.to_string()),
                }
            }
        }
    }
    Ok(total)
}

/// The code objects of kernels.hip, one per target, built into `dir`.
fn build(dir: &Path) -> Result<Vec<Vec<u8>>, String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../gfx9-isa/test-programs/kernels.hip");
    let out = Command::new("hipcc")
        .args(["--offload-arch=gfx90a", "--offload-arch=gfx900"])
        .args(["--cuda-device-only", "--no-gpu-bundle-output", "-c", "-O2"])
        .arg(&src)
        .current_dir(dir)
        .env("TMPDIR", dir)
        .output()
        .map_err(|e| format!("hipcc cannot run ({e}): apt-get install hipcc"))?;
    if !out.status.success() {
        return Err(format!(
            "hipcc failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    ["gfx90a", "gfx900"]
        .iter()
        .map(|t| {
            let p = dir.join(format!("kernels-hip-amdgcn-amd-amdhsa-{t}.out"));
            std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))
        })
        .collect()
}

fn main() -> ExitCode {
    let mut secs = 1.0;
    let mut cold = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--secs" => secs = args.next().and_then(|s| s.parse().ok()).unwrap_or(secs),
            "--cold" => cold = true,
            _ => {
                eprintln!("usage: interp [--secs S] [--cold]");
                return ExitCode::from(2);
            }
        }
    }
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("temp dir: {e}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!("building kernels.hip with hipcc ...");
    let objects = match build(dir.path()) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let (mut all_insts, mut all_secs) = (0u64, 0f64);
    for elf in &objects {
        let mut mem = Mem::new();
        let co = load(&mut mem, elf, 0x7000_0000_0000);
        let kernels = launches(&mut mem);
        let clock = Ticks::default();
        let (mut t_insts, mut t_secs) = (0u64, 0f64);
        let (mut c_insts, mut c_secs) = (0u64, 0f64);
        for l in &kernels {
            let name = format!("interp_{}_{}", l.name, co.target);
            let d = match dispatch(&mut mem, &co, l) {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("{name}: {e}");
                    continue;
                }
            };
            // The first launch decodes the kernel's code.
            let mut cache = CodeCache::new();
            let started = cpu_now();
            let per_launch = match run(&d, &mut mem, &mut cache, &clock) {
                Ok(n) => n,
                Err(e) => {
                    eprintln!("{name}: {e}");
                    continue;
                }
            };
            c_secs += cpu_now() - started;
            c_insts += per_launch;
            let (mut insts, started) = (0u64, cpu_now());
            while insts == 0 || cpu_now() - started < secs {
                match run(&d, &mut mem, &mut cache, &clock) {
                    Ok(n) => insts += n,
                    Err(e) => {
                        eprintln!("{name}: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            }
            let s = cpu_now() - started;
            line(&format!("{name}_wave_insts"), per_launch);
            line(
                &format!("{name}_minst_per_s"),
                format!("{:.2}", insts as f64 / s / 1e6),
            );
            t_insts += insts;
            t_secs += s;
        }
        line(
            &format!("interp_{}_minst_per_s", co.target),
            format!("{:.2}", t_insts as f64 / t_secs / 1e6),
        );
        if cold {
            line(
                &format!("interp_cold_{}_minst_per_s", co.target),
                format!("{:.2}", c_insts as f64 / c_secs / 1e6),
            );
        }
        all_insts += t_insts;
        all_secs += t_secs;
    }
    line(
        "interp_overall_minst_per_s",
        format!("{:.2}", all_insts as f64 / all_secs / 1e6),
    );
    ExitCode::SUCCESS
}
