//! The interpreter never panics: random instruction words that decode are
//! executed on waves with random registers over a memory where most
//! addresses fault; each must end in `Ok` or an error value.

mod support;

use gfx9_isa::exec::{CodeCache, Lds, Wave};
use gfx9_isa::{decode, Target};
use support::exec::{Mem, Ticks};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

const CODE: u64 = 0x20_0000_0000;
const DATA: u64 = 0x30_0000_0000;

#[test]
fn random_instructions_end_in_a_value_not_a_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut executed = 0;
    for round in 0..400_000u32 {
        let target = Target::ALL[round as usize % Target::ALL.len()];
        let mut bytes = [0u8; 12];
        for c in bytes.chunks_mut(8) {
            let r = rng.next().to_le_bytes();
            c.copy_from_slice(&r[..c.len()]);
        }
        let Ok(d) = decode(target, &bytes) else {
            continue;
        };
        let mut mem = Mem::new();
        mem.map(CODE, bytes[..d.len].to_vec());
        mem.map(DATA, vec![0; 1 << 16]);
        let mut w = Wave::new(target, CODE, 32, 8);
        for s in w.sregs.iter_mut() {
            // Mostly addresses inside DATA, sometimes anything.
            *s = if rng.next().is_multiple_of(4) {
                rng.next() as u32
            } else {
                (rng.next() % 0x8000) as u32
            };
        }
        for k in (0..w.sregs.len()).step_by(2) {
            if rng.next().is_multiple_of(2) {
                w.sregs[k + 1] = (DATA >> 32) as u32;
            }
        }
        w.set_exec(rng.next());
        for v in w.vgprs.iter_mut().chain(w.agprs.iter_mut()) {
            for (l, x) in v.iter_mut().enumerate() {
                *x = if l % 3 == 0 {
                    rng.next() as u32
                } else {
                    (rng.next() % 0x8000) as u32
                };
            }
        }
        let mut lds = Lds::new(1024);
        let _ = w.step(&mut CodeCache::new(), &mut mem, &mut lds, &Ticks::default());
        executed += 1;
    }
    assert!(executed > 50_000, "only {executed} random words decoded");
}
