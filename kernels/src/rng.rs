//! Counter-based random numbers (Philox 4×32-10) whose seed and offset live in device memory,
//! and dropout on them.
//!
//! A generator's state is a `u32` buffer of four words: the 64-bit key (seed) and a 64-bit
//! offset. A draw of `n` numbers runs one kernel that reads the state and computes, for block
//! `b` of four outputs, `philox4x32_10(counter = [b, 0, offset_lo, offset_hi], key)`; a second,
//! one-invocation kernel then adds 1 to the offset. Since the offset is device memory, a
//! recorded step that draws numbers draws fresh ones on every replay, and replay and eager
//! runs see the same sequence: draw `i` of a generator uses offset `i`.

use graphed_macros::{device, kernel};
use graphed_runtime::{Buffer, Device, Grid, IntoScalarArg, Launch, Result, ScalarArg};

use crate::shape::{expect_len, u32_of, MAX_GROUPS};

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// Philox 4×32 with 10 rounds (Salmon et al., SC'11), on the host: the reference the kernels
/// are checked against, and the generator of initial weights.
pub fn philox4x32_10(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let [mut c0, mut c1, mut c2, mut c3] = ctr;
    let [mut k0, mut k1] = key;
    for _ in 0..10 {
        let p0 = M0 as u64 * c0 as u64;
        let p1 = M1 as u64 * c2 as u64;
        let (hi0, lo0) = ((p0 >> 32) as u32, p0 as u32);
        let (hi1, lo1) = ((p1 >> 32) as u32, p1 as u32);
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 = k0.wrapping_add(W0);
        k1 = k1.wrapping_add(W1);
    }
    [c0, c1, c2, c3]
}

/// A 32-bit word as a uniform float in `[0, 1)`: its top 24 bits times 2⁻²⁴.
pub fn word_to_uniform(w: u32) -> f32 {
    (w >> 8) as f32 * (1.0 / 16_777_216.0)
}

/// The first `n` words of draw `offset` of the generator with `seed` (host reference).
pub fn words_host(seed: u64, offset: u64, n: usize) -> Vec<u32> {
    let key = [seed as u32, (seed >> 32) as u32];
    (0..n.div_ceil(4))
        .flat_map(|b| philox4x32_10([b as u32, 0, offset as u32, (offset >> 32) as u32], key))
        .take(n)
        .collect()
}

/// The uniform floats of draw `offset` (host reference of [`Philox::uniform`]).
pub fn uniform_host(seed: u64, offset: u64, n: usize) -> Vec<f32> {
    words_host(seed, offset, n)
        .into_iter()
        .map(word_to_uniform)
        .collect()
}

/// The high 32 bits of the 64-bit product `a·b`, from 16-bit halves (the kernel language has
/// no `u64`).
#[device]
fn mul_hi(a: u32, b: u32) -> u32 {
    let al = a & 0xFFFFu32;
    let ah = a >> 16u32;
    let bl = b & 0xFFFFu32;
    let bh = b >> 16u32;
    let ll = al * bl;
    let lh = al * bh;
    let hl = ah * bl;
    let mid = (ll >> 16u32) + (lh & 0xFFFFu32) + (hl & 0xFFFFu32);
    ah * bh + (lh >> 16u32) + (hl >> 16u32) + (mid >> 16u32)
}

/// One 4-word Philox block per invocation (grid-stride over blocks), written as uniform
/// floats in `[0, 1)` (`mode == 0`), standard normals by Box–Muller on word pairs
/// (`mode == 1`), or a dropout mask (`mode == 2`: `mask = 1/(1 − p)` where the uniform is
/// `≥ p`, else 0, and `y = x·mask`). `state` is `[key_lo, key_hi, offset_lo, offset_hi]`.
#[kernel(workgroup = 256)]
pub fn philox_fill(mode: u32, p: f32, state: &[u32], x: &[f32], out: &mut [f32], y: &mut [f32]) {
    let n = out.len();
    let blocks = (n + 3) / 4;
    let key0 = state[0];
    let key1 = state[1];
    let off0 = state[2];
    let off1 = state[3];
    let stride = global_size().x;
    let mut blk = global_id().x;
    while blk < blocks {
        // The counter (block, 0, offset) and the key, ten rounds.
        let mut c = [blk, 0u32, off0, off1];
        let mut k0 = key0;
        let mut k1 = key1;
        for _round in 0..10u32 {
            let hi0 = mul_hi(0xD2511F53u32, c[0]);
            let lo0 = 0xD2511F53u32 * c[0];
            let hi1 = mul_hi(0xCD9E8D57u32, c[2]);
            let lo1 = 0xCD9E8D57u32 * c[2];
            c[0] = hi1 ^ c[1] ^ k0;
            c[1] = lo1;
            c[2] = hi0 ^ c[3] ^ k1;
            c[3] = lo0;
            k0 += 0x9E3779B9u32;
            k1 += 0xBB67AE85u32;
        }
        for lane in 0..4u32 {
            let i = blk * 4 + lane;
            if i < n {
                let w = c[lane];
                let u = ((w >> 8u32) as f32) * 0.000000059604645;
                if mode == 0 {
                    out[i] = u;
                } else if mode == 1 {
                    // Pair (0, 1) and (2, 3): radius from the even word, angle from the odd.
                    let we = c[lane & 2u32];
                    let wo = c[(lane & 2u32) + 1];
                    let u1 = (((we >> 8u32) + 1u32) as f32) * 0.000000059604645;
                    let u2 = ((wo >> 8u32) as f32) * 0.000000059604645;
                    let rad = sqrt(-2.0 * log(u1));
                    let theta = 6.2831855 * u2;
                    out[i] = if lane % 2 == 0 {
                        rad * cos(theta)
                    } else {
                        rad * sin(theta)
                    };
                } else {
                    let m = if u >= p { 1.0 / (1.0 - p) } else { 0.0 };
                    out[i] = m;
                    y[i] = x[i] * m;
                }
            }
        }
        blk += stride;
    }
}

/// Adds 1 to the 64-bit offset of a Philox state (one invocation).
#[kernel(workgroup = 1)]
pub fn philox_advance(state: &mut [u32]) {
    let lo = state[2] + 1u32;
    state[2] = lo;
    if lo == 0 {
        state[3] = state[3] + 1u32;
    }
}

/// A Philox 4×32-10 generator whose seed and offset live in a device buffer.
#[derive(Clone, Debug)]
pub struct Philox {
    state: Buffer<u32>,
}

impl Philox {
    /// A generator with `seed`, at offset 0.
    pub fn new(dev: &Device, seed: u64) -> Result<Philox> {
        let state = dev.upload(&[seed as u32, (seed >> 32) as u32, 0, 0])?;
        Ok(Philox { state })
    }

    /// A generator over an existing state buffer (4 words: key lo/hi, offset lo/hi), e.g. a
    /// step's `#[state]` buffer.
    pub fn from_state(state: Buffer<u32>) -> Result<Philox> {
        expect_len("Philox", "state", state.len(), 4)?;
        Ok(Philox { state })
    }

    /// The state buffer.
    pub fn state(&self) -> &Buffer<u32> {
        &self.state
    }

    /// Reads the seed and the offset of the next draw (a host read: not inside a step).
    pub fn position(&self) -> Result<(u64, u64)> {
        let s = self.state.to_host()?;
        Ok((
            s[0] as u64 | (s[1] as u64) << 32,
            s[2] as u64 | (s[3] as u64) << 32,
        ))
    }

    fn draw<C: Launch + ?Sized>(
        &mut self,
        cx: &C,
        mode: u32,
        p: ScalarArg<f32>,
        x: &Buffer<f32>,
        out: &mut Buffer<f32>,
        y: &mut Buffer<f32>,
    ) -> Result<()> {
        let n = u32_of("length", out.len())? as usize;
        let blocks = n.div_ceil(4);
        let g = blocks.div_ceil(256).clamp(1, MAX_GROUPS as usize) as u32;
        philox_fill::launch(cx, Grid::workgroups(g), mode, p, &self.state, x, out, y)?;
        philox_advance::launch(cx, Grid::workgroups(1), &mut self.state)
    }

    /// Fills `out` with uniform floats in `[0, 1)` and advances the offset (two launches).
    pub fn uniform<C: Launch + ?Sized>(&mut self, cx: &C, out: &mut Buffer<f32>) -> Result<()> {
        let (x, mut y) = (out.slice(0..0)?, out.slice(out.len()..out.len())?);
        self.draw(cx, 0, ScalarArg::from(0.0), &x, out, &mut y)
    }

    /// Fills `out` with standard normal floats (Box–Muller) and advances the offset.
    pub fn normal<C: Launch + ?Sized>(&mut self, cx: &C, out: &mut Buffer<f32>) -> Result<()> {
        let (x, mut y) = (out.slice(0..0)?, out.slice(out.len()..out.len())?);
        self.draw(cx, 1, ScalarArg::from(0.0), &x, out, &mut y)
    }

    /// Dropout with drop probability `p` (a constant or a per-step scalar): `mask = 1/(1 − p)`
    /// where a uniform draw is `≥ p`, else 0; `y = x·mask`. The mask is kept for
    /// [`dropout_backward`]. Two launches.
    pub fn dropout<C: Launch + ?Sized>(
        &mut self,
        cx: &C,
        p: impl IntoScalarArg<f32>,
        x: &Buffer<f32>,
        y: &mut Buffer<f32>,
        mask: &mut Buffer<f32>,
    ) -> Result<()> {
        expect_len("dropout", "y", y.len(), x.len())?;
        expect_len("dropout", "mask", mask.len(), x.len())?;
        self.draw(cx, 2, p.into_scalar_arg(), x, mask, y)
    }
}

/// Backward of dropout: `dx = dy·mask`, the elementwise product: `dropout_backward(cx, dy,
/// mask, dx)` is [`mul`](crate::elementwise::mul)`(cx, dy, mask, dx)`.
#[doc(inline)]
pub use crate::elementwise::mul as dropout_backward;

impl From<Philox> for Buffer<u32> {
    fn from(p: Philox) -> Buffer<u32> {
        p.state
    }
}

/// Host-side uniform numbers for initial weights: `n` floats in `[lo, hi)` from draw
/// `offset` of `seed`: [`uniform_host`] mapped to the range (graphed-nn's `Mlp::new`
/// initialises its weights with it).
pub fn uniform_range_host(seed: u64, offset: u64, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    uniform_host(seed, offset, n)
        .into_iter()
        .map(|u| lo + (hi - lo) * u)
        .collect()
}
