//! Conformance suite of the kernel language: every construct, on every backend, against a
//! plain-Rust reference (exact integers, f64 or an f32 re-enactment of the same operation
//! order for floats), with each kernel's WGSL validated by naga and its CUDA C compiled by
//! NVRTC.
//!
//! Tolerances (stated per test, and summarised here):
//! - integer arithmetic, bit operations, shifts, casts, atomics, ids, control flow: bitwise;
//! - a single f32 `+ - *` per output, `abs min max clamp floor ceil round select`: bitwise;
//! - sums whose order the kernel fixes (the tree reduction): bitwise against an f32
//!   re-enactment of the same tree, and within 1e-6 (relative) of the f64 sum;
//! - a chain `acc += a * b` (the matrix product): 1e-5 relative error of the whole output
//!   against f64, since a GPU driver may contract it into FMAs;
//! - float `/`, `%`, `sqrt`, `rsqrt`, `fma` and transcendentals: a relative error of the whole
//!   output column, per function (see `MATH_TOL`), since WGSL allows drivers to compute them
//!   with a few ulp of error.

mod common;

use common::{floats, on_every_backend, rel_err, rng};
use graphed::prelude::*;
use graphed::KernelDef;
use rand::Rng;

/// Sizes that straddle workgroup boundaries.
const ODD_SIZES: &[usize] = &[1, 7, 63, 65, 1000, 1023];

const POISON_U32: u32 = 0xDEAD_BEEF;
/// A quiet NaN with a payload no computation produces, so NaN results still tell written
/// from unwritten.
const POISON_F32: f32 = f32::from_bits(0x7fde_ad00);
const POISON_I32: i32 = 0xDEAD_BEEFu32 as i32;

// ------------------------------------------------------------------------------ kernels

/// Per-workgroup sums by a tree reduction in workgroup memory.
#[kernel(workgroup = 256)]
pub fn reduce_sum(x: &[f32], partial: &mut [f32]) {
    let s = shared::<f32, 256>();
    let lid = local_id().x;
    let i = global_id().x;
    s[lid] = if i < x.len() { x[i] } else { 0.0 };
    barrier();
    let mut stride = workgroup_size().x / 2;
    while stride > 0 {
        if lid < stride {
            s[lid] += s[lid + stride];
        }
        barrier();
        stride = stride >> 1u32;
    }
    if lid == 0 {
        partial[workgroup_id().x] = s[0];
    }
}

/// `c = a × b` (row-major, `m × k` by `k × n`) through 16 × 16 tiles in workgroup memory.
#[kernel(workgroup = (16, 16))]
pub fn matmul_tiled(m: u32, n: u32, k: u32, a: &[f32], b: &[f32], c: &mut [f32]) {
    const T: u32 = 16;
    let ta = shared::<f32, 256>();
    let tb = shared::<f32, 256>();
    let row = global_id().y;
    let col = global_id().x;
    let ly = local_id().y;
    let lx = local_id().x;
    let mut acc = 0.0;
    let tiles = (k + T - 1) / T;
    for t in 0..tiles {
        let ak = t * T + lx;
        ta[ly * T + lx] = if row < m && ak < k {
            a[row * k + ak]
        } else {
            0.0
        };
        let bk = t * T + ly;
        tb[ly * T + lx] = if bk < k && col < n {
            b[bk * n + col]
        } else {
            0.0
        };
        barrier();
        for kk in 0..T {
            acc += ta[ly * T + kk] * tb[kk * T + lx];
        }
        barrier();
    }
    if row < m && col < n {
        c[row * n + col] = acc;
    }
}

/// Inclusive prefix sums of each workgroup's 64 elements (Hillis–Steele, double-buffered).
#[kernel(workgroup = 64)]
pub fn scan_i32(x: &[i32], y: &mut [i32]) {
    let a = shared::<i32, 64>();
    let b = shared::<i32, 64>();
    let lid = local_id().x;
    let i = global_id().x;
    a[lid] = if i < x.len() { x[i] } else { 0 };
    barrier();
    let mut offset = 1u32;
    let mut from_a = true;
    while offset < a.len() {
        if from_a {
            b[lid] = if lid >= offset {
                a[lid] + a[lid - offset]
            } else {
                a[lid]
            };
        } else {
            a[lid] = if lid >= offset {
                b[lid] + b[lid - offset]
            } else {
                b[lid]
            };
        }
        barrier();
        from_a = !from_a;
        offset *= 2;
    }
    if i < y.len() {
        y[i] = if from_a { a[lid] } else { b[lid] };
    }
}

/// Counts values into `bins` (which start at arbitrary counts).
#[kernel(workgroup = 64)]
pub fn histogram(x: &[u32], bins: &mut [u32]) {
    let i = global_id().x;
    if i < x.len() {
        let b = x[i] % bins.len();
        atomic_add(bins, b, 1u32);
    }
}

/// Order-independent atomics on `i32` and `u32`: max, min, add, sub, and, or, xor, load,
/// store.
#[kernel(workgroup = 64)]
pub fn atomic_mix(x: &[i32], ai: &mut [i32], au: &mut [u32], seen: &mut [u32]) {
    let i = global_id().x;
    if i >= x.len() {
        return;
    }
    let v = x[i];
    atomic_max(ai, 0, v);
    atomic_min(ai, 1, v);
    atomic_add(ai, 2, v);
    atomic_sub(ai, 3, v);
    let u = v as u32;
    atomic_max(au, 0, u);
    atomic_min(au, 1, u);
    atomic_and(au, 2, u | 0x0F0F_0F0F);
    atomic_or(au, 3, 1u32 << u);
    atomic_xor(au, 4, u);
    let constant = atomic_load(au, 5);
    seen[i] = constant;
    atomic_store(au, 6, 77u32);
    let old = atomic_add(au, 7, 2u32);
    // Every old value is even and below twice the count; flag any that is not.
    if old % 2 != 0 || old >= 2 * x.len() {
        atomic_or(au, 8, 1u32);
    }
}

/// Each invocation swaps its tag into one of the slots and records what it took out.
#[kernel(workgroup = 32)]
pub fn exchange(slots: &mut [u32], olds: &mut [u32], n: u32) {
    let i = global_id().x;
    if i < n {
        let old = atomic_exchange(slots, i % slots.len(), 1000u32 + i);
        olds[i] = old;
    }
}

/// A saturating add built from a compare-exchange retry loop.
#[kernel(workgroup = 64)]
pub fn cas_saturating_add(x: &[i32], cap: i32, acc: &mut [i32], tries: &mut [u32]) {
    let i = global_id().x;
    if i < x.len() {
        let slot = i % acc.len();
        let v = x[i];
        let mut n = 0u32;
        loop {
            let cur = atomic_load(acc, slot);
            let next = min(cur + v, cap);
            let prev = atomic_compare_exchange(acc, slot, cur, next);
            n += 1;
            if prev == cur {
                break;
            }
        }
        tries[i] = n;
    }
}

/// Integer semantics: wrapping, division and remainder by zero and `MIN / -1`, shifts by 32
/// or more (masked to 5 bits), bit operations, comparisons, compound assignment.
#[kernel(workgroup = 64)]
pub fn int_ops(a: &[i32], b: &[i32], oi: &mut [i32], ou: &mut [u32]) {
    const W: u32 = 20;
    let i = global_id().x;
    if i < a.len() {
        let x = a[i];
        let y = b[i];
        let ux = x as u32;
        let uy = y as u32;
        let o = i * W;
        oi[o] = x + y;
        oi[o + 1] = x - y;
        oi[o + 2] = x * y;
        oi[o + 3] = x / y;
        oi[o + 4] = x % y;
        oi[o + 5] = x << uy;
        oi[o + 6] = x >> uy;
        oi[o + 7] = -x;
        oi[o + 8] = abs(x);
        oi[o + 9] = min(x, y);
        oi[o + 10] = x.max(y);
        oi[o + 11] = clamp(x, -1000, 1000);
        oi[o + 12] = x & y;
        oi[o + 13] = x | y;
        oi[o + 14] = x ^ y;
        oi[o + 15] = !x;
        oi[o + 16] = x * 7 + i32::MIN - (y >> 3u32);
        let mut r = x;
        r += y;
        r *= 3;
        r -= i32::MAX;
        r /= y;
        r %= 1000;
        r <<= uy;
        r >>= 2u32;
        r &= -16;
        r |= 5;
        r ^= y;
        oi[o + 17] = r;
        oi[o + 18] = (x < y) as i32
            + 2 * (x <= y) as i32
            + 4 * (x > y) as i32
            + 8 * (x >= y) as i32
            + 16 * (x == y) as i32
            + 32 * (x != y) as i32;
        oi[o + 19] = i32::MIN / -1 + x / 0 + x % 0 - (x >> 32u32);
        ou[o] = ux + uy;
        ou[o + 1] = ux - uy;
        ou[o + 2] = ux * uy;
        ou[o + 3] = ux / uy;
        ou[o + 4] = ux % uy;
        ou[o + 5] = ux << uy;
        ou[o + 6] = ux >> uy;
        ou[o + 7] = ux.min(uy);
        ou[o + 8] = max(ux, uy);
        ou[o + 9] = clamp(ux, 10u32, 100000u32);
        ou[o + 10] = ux & uy;
        ou[o + 11] = ux | uy;
        ou[o + 12] = ux ^ uy;
        ou[o + 13] = !ux;
        ou[o + 14] = ux * 2654435761u32 + u32::MAX;
        let mut s = ux;
        s += uy;
        s *= 0x9E37_79B9;
        s -= 12345;
        s /= uy;
        s %= 65521;
        s <<= uy;
        s >>= uy + 1;
        s &= 0xFFFF_FFF0;
        s |= 3;
        s ^= ux;
        ou[o + 15] = s;
        ou[o + 16] = (ux < uy) as u32
            | ((ux <= uy) as u32) << 1u32
            | ((ux > uy) as u32) << 2u32
            | ((ux >= uy) as u32) << 3u32
            | ((ux == uy) as u32) << 4u32
            | ((ux != uy) as u32) << 5u32;
        ou[o + 17] = ux / 0u32 + ux % 0u32 + (ux << 32u32) + (ux >> 33u32);
        ou[o + 18] = 1u32 << 31u32 >> (uy & 31u32);
        ou[o + 19] = (-1i32 >> 31u32) as u32 ^ ux;
    }
}

/// `as` casts between `f32`, `i32`, `u32` and from `bool`.
#[kernel(workgroup = 64)]
pub fn casts(f: &[f32], si: &[i32], su: &[u32], of: &mut [f32], oi: &mut [i32], ou: &mut [u32]) {
    let i = global_id().x;
    if i < f.len() {
        let o = i * 4;
        oi[o] = f[i] as i32;
        ou[o] = f[i] as u32;
        of[o] = si[i] as f32;
        of[o + 1] = su[i] as f32;
        oi[o + 1] = su[i] as i32;
        ou[o + 1] = si[i] as u32;
        oi[o + 2] = (f[i] < 0.0) as i32 - (f[i] > 0.0) as i32;
        ou[o + 2] = (si[i] < 0) as u32 + 2u32 * (f[i] == f[i]) as u32;
        of[o + 2] = ((f[i] * 0.5) as i32) as f32;
        of[o + 3] = ((si[i] as f32) as i32) as f32;
        oi[o + 3] = (-f[i]) as i32;
        ou[o + 3] = (su[i] as f32) as u32;
    }
}

/// Math builtins as functions and as methods; `out[k * n + i]` is function `k` of element `i`.
#[kernel(workgroup = 64)]
pub fn math(x: &[f32], y: &[f32], p: &[f32], out: &mut [f32]) {
    let i = global_id().x;
    let n = x.len();
    if i < n {
        let v = x[i];
        let w = y[i];
        let q = p[i];
        out[i] = abs(v);
        out[n + i] = min(v, w);
        out[2 * n + i] = v.max(w);
        out[3 * n + i] = clamp(v, -0.5, 0.75);
        out[4 * n + i] = floor(v);
        out[5 * n + i] = v.ceil();
        out[6 * n + i] = round(v);
        out[7 * n + i] = select(v < w, v, w * 2.0);
        out[8 * n + i] = sqrt(q);
        out[9 * n + i] = q.rsqrt();
        out[10 * n + i] = exp(v);
        out[11 * n + i] = v.exp2();
        out[12 * n + i] = log(q);
        out[13 * n + i] = q.log2();
        out[14 * n + i] = pow(q, w);
        out[15 * n + i] = sin(v * 3.0);
        out[16 * n + i] = (v * 3.0).cos();
        out[17 * n + i] = tanh(v * 2.0);
        out[18 * n + i] = fma(v, w, q);
        out[19 * n + i] = v.mul_add(q, w);
        out[20 * n + i] = q.ln() + q.powf(0.5);
    }
}

/// Single f32 operations (exact per IEEE 754) and the ones drivers may round loosely.
#[kernel(workgroup = 64)]
pub fn float_ops(a: &[f32], b: &[f32], exact: &mut [f32], loose: &mut [f32], cmp: &mut [u32]) {
    let i = global_id().x;
    if i < a.len() {
        let x = a[i];
        let y = b[i];
        let o = i * 5;
        exact[o] = x + y;
        exact[o + 1] = x - y;
        exact[o + 2] = x * y;
        exact[o + 3] = -x;
        let mut c = x;
        c *= 0.5;
        c += 2.0;
        c -= y;
        exact[o + 4] = c;
        loose[i * 3] = x / y;
        loose[i * 3 + 1] = x % y;
        let mut d = x;
        d /= y;
        d %= 1.5;
        loose[i * 3 + 2] = d;
        cmp[i] = (x < y) as u32
            | ((x <= y) as u32) << 1u32
            | ((x > y) as u32) << 2u32
            | ((x >= y) as u32) << 3u32
            | ((x == y) as u32) << 4u32
            | ((x != y) as u32) << 5u32;
    }
}

/// A grid-stride loop (fewer invocations than elements) over views at element offsets.
#[kernel(workgroup = 32)]
pub fn grid_stride(a: &[f32], b: &[f32], y: &mut [f32]) {
    let stride = global_size().x;
    for j in (global_id().x..y.len()).step_by(stride) {
        y[j] = a[j] * b[j];
    }
}

/// `while`, `loop`, `break`, `continue`, `for` with `step_by` and over `i32`, `if` as a value
/// (with statements in its branches, and nested), and early `return`.
#[kernel(workgroup = 32)]
pub fn control_flow(x: &[u32], out: &mut [u32]) {
    let i = global_id().x;
    if i >= x.len() {
        return;
    }
    let v = x[i];
    let o = i * 6;
    // Collatz steps.
    let mut n = v % 1000 + 1;
    let mut steps = 0u32;
    while n != 1 {
        n = if n % 2 == 0 { n / 2 } else { 3 * n + 1 };
        steps += 1;
    }
    out[o] = steps;
    // Sum of the odd decimal digits.
    let mut k = v;
    let mut odd = 0u32;
    loop {
        if k == 0 {
            break;
        }
        let d = k % 10;
        k /= 10;
        if d % 2 == 0 {
            continue;
        }
        odd += d;
    }
    out[o + 1] = odd;
    let mut s = 0u32;
    for j in (v % 7..50u32).step_by(3) {
        if j % 5 == 0 {
            continue;
        }
        s += j;
        if s > 200 {
            break;
        }
    }
    out[o + 2] = s;
    let cls = if v % 3 == 0 {
        let t = v / 3;
        t % 100 + 1
    } else if v % 3 == 1 {
        let mut q = 0u32;
        for j in 0..(v % 5) {
            q += j;
        }
        q + 200
    } else {
        300
    };
    out[o + 3] = cls;
    let mut signed = 0i32;
    for j in -5..(v % 9) as i32 - 3 {
        signed += j * j * if j < 0 { -1 } else { 1 };
    }
    out[o + 4] = signed as u32;
    out[o + 5] = 1;
    if v % 4 == 0 {
        return;
    }
    out[o + 5] = 2;
}

/// Writes every id builtin, in a 3D workgroup over a 3D grid.
#[kernel(workgroup = (4, 2, 3))]
pub fn ids_3d(out: &mut [u32]) {
    let g = global_id();
    let gs = global_size();
    let lin = g.x + gs.x * (g.y + gs.y * g.z);
    let o = lin * 18;
    out[o] = g.x;
    out[o + 1] = g.y;
    out[o + 2] = g.z;
    out[o + 3] = local_id().x;
    out[o + 4] = local_id().y;
    out[o + 5] = local_id().z;
    out[o + 6] = workgroup_id().x;
    out[o + 7] = workgroup_id().y;
    out[o + 8] = workgroup_id().z;
    out[o + 9] = num_workgroups().x;
    out[o + 10] = num_workgroups().y;
    out[o + 11] = num_workgroups().z;
    out[o + 12] = workgroup_size().x;
    out[o + 13] = workgroup_size().y;
    out[o + 14] = workgroup_size().z;
    out[o + 15] = gs.x;
    out[o + 16] = gs.y;
    out[o + 17] = gs.z;
}

/// `bool` parameters and operators (`&&`, `||`, `!`, `&`, `|`, `^`, `==`, `!=`), `select`
/// and `if` over bools.
#[kernel(workgroup = 64)]
pub fn bool_logic(flip: bool, x: &[u32], out: &mut [u32]) {
    let i = global_id().x;
    if i < x.len() {
        let a = x[i] & 1 == 1;
        let b = x[i] & 2 == 2;
        let c = (x[i] & 4 == 4) != flip;
        let mut m = a ^ b;
        m &= c | a;
        m |= !b && c;
        m ^= a == c;
        let bits = (a && b) as u32
            | ((a || c) as u32) << 1u32
            | ((!a) as u32) << 2u32
            | ((a & c) as u32) << 3u32
            | ((b | c) as u32) << 4u32
            | ((a ^ c) as u32) << 5u32
            | ((a != b) as u32) << 6u32
            | (m as u32) << 7u32
            | (select(c, a, b) as u32) << 8u32
            | ((if a { b } else { c }) as u32) << 9u32;
        out[i] = bits;
    }
}

/// Constant expressions whose values overflow, leave a function's domain or divide by zero:
/// naga evaluates constant WGSL expressions at shader creation and rejects such results, so
/// the emitter must keep them from its constant evaluator; all targets must give Rust's
/// values.
#[kernel(workgroup = 1)]
pub fn constants(seed: i32, of: &mut [f32], oi: &mut [i32], ou: &mut [u32]) {
    const BIG: i32 = i32::MAX;
    let zero = 0;
    let forty = 40u32;
    of[0] = f32::MAX * 2.0;
    of[1] = 1.0 / 0.0;
    of[2] = -1.0 / 0.0;
    of[3] = 0.0 / 0.0;
    of[4] = sqrt(-1.0);
    of[5] = log(0.0);
    of[6] = exp(100.0);
    of[7] = f32::INFINITY - f32::INFINITY;
    of[8] = f32::MIN_POSITIVE * 0.5;
    of[9] = -0.0;
    of[10] = 1.0 % 0.0;
    of[11] = 3.0 % f32::INFINITY;
    of[12] = 1e30 * 1e10 - f32::MAX;
    of[13] = pow(-2.0, 0.5);
    of[14] = rsqrt(0.0);
    of[15] = (seed as f32) / 0.0;
    of[16] = exp2(2147483647 as f32);
    oi[0] = i32::MAX + 1;
    oi[1] = i32::MIN / -1;
    oi[2] = 7 / 0;
    oi[3] = 7 % 0;
    oi[4] = i32::MIN % -1;
    oi[5] = 1 << 33u32;
    oi[6] = -i32::MIN;
    oi[7] = abs(i32::MIN);
    oi[8] = 1e10 as i32;
    oi[9] = (0.0 / 0.0) as i32;
    oi[10] = -1e10 as i32;
    oi[11] = BIG + 1;
    oi[12] = seed / zero + seed % zero;
    oi[13] = seed << forty;
    oi[14] = BIG * BIG;
    ou[0] = 0u32 - 1;
    ou[1] = u32::MAX * u32::MAX;
    ou[2] = 5u32 / 0;
    ou[3] = 5u32 % 0;
    ou[4] = 1u32 << 32u32;
    ou[5] = u32::MAX >> 35u32;
    ou[6] = -1.0 as u32;
    ou[7] = 1e10 as u32;
    ou[8] = f32::INFINITY as u32;
    ou[9] = (seed as u32) >> forty;
    ou[10] = 3u32 << 31u32;
}

/// Float builtins and operators on IEEE 754 special values (`out[k * n + i]` is operation `k`
/// of input `i`).
#[kernel(workgroup = 64)]
pub fn specials(x: &[f32], out: &mut [f32]) {
    let i = global_id().x;
    let n = x.len();
    if i < n {
        let v = x[i];
        out[i] = min(v, 1.0);
        out[n + i] = max(v, 1.0);
        out[2 * n + i] = clamp(v, 0.0, 1.0);
        out[3 * n + i] = abs(v);
        out[4 * n + i] = floor(v);
        out[5 * n + i] = sqrt(v);
        out[6 * n + i] = v * 0.0;
        out[7 * n + i] = v - v;
        out[8 * n + i] = 1.0 / v;
        out[9 * n + i] = exp(v);
        out[10 * n + i] = log(v);
        out[11 * n + i] = tanh(v);
        out[12 * n + i] = v * 0.5;
        out[13 * n + i] = round(v);
        out[14 * n + i] = ceil(v);
        out[15 * n + i] = select(v > 0.0, 1.0, select(v < 0.0, -1.0, v));
    }
}

/// `sin` and `cos` over a wide range of arguments.
#[kernel(workgroup = 64)]
pub fn trig(x: &[f32], out: &mut [f32]) {
    let i = global_id().x;
    if i < x.len() {
        out[2 * i] = sin(x[i]);
        out[2 * i + 1] = x[i].cos();
    }
}

/// `for` over `(a..b).step_by(s)` at the edges of `i32` and `u32`: ends at the type's limits
/// and steps that pass the end, so the loop stops where `j + s` would overflow (as in Rust)
/// instead of wrapping around. Outputs per case: iterations and a hash of the values, for
/// the `i32` loop and the `u32` loop; then the same for four loops with constant steps. Each
/// loop leaves after 100 iterations, so a loop that wraps shows as a wrong count, not a hang.
#[kernel(workgroup = 64)]
pub fn step_by_edges(
    a: &[i32],
    b: &[i32],
    s: &[i32],
    ua: &[u32],
    ub: &[u32],
    us: &[u32],
    out: &mut [u32],
) {
    let i = global_id().x;
    if i < a.len() {
        let mut n = 0u32;
        let mut h = 0u32;
        for j in (a[i]..b[i]).step_by(s[i]) {
            n += 1;
            h = h * 31 + j as u32;
            if n == 100 {
                break;
            }
        }
        out[i * 4] = n;
        out[i * 4 + 1] = h;
        let mut un = 0u32;
        let mut uh = 0u32;
        for j in (ua[i]..ub[i]).step_by(us[i]) {
            un += 1;
            uh = uh * 31 + j;
            if un == 100 {
                break;
            }
        }
        out[i * 4 + 2] = un;
        out[i * 4 + 3] = uh;
    }
    if i == 0 {
        let o = a.len() * 4;
        let mut n = 0u32;
        let mut h = 0u32;
        for j in (0..i32::MAX).step_by(1i32 << 30u32) {
            n += 1;
            h = h * 31 + j as u32;
            if n == 100 {
                break;
            }
        }
        out[o] = n;
        out[o + 1] = h;
        n = 0u32;
        h = 0u32;
        for j in (i32::MIN..i32::MAX).step_by(i32::MAX) {
            n += 1;
            h = h * 31 + j as u32;
            if n == 100 {
                break;
            }
        }
        out[o + 2] = n;
        out[o + 3] = h;
        n = 0u32;
        h = 0u32;
        for j in (0u32..u32::MAX).step_by(0x8000_0000u32) {
            n += 1;
            h = h * 31 + j;
            if n == 100 {
                break;
            }
        }
        out[o + 4] = n;
        out[o + 5] = h;
        n = 0u32;
        h = 0u32;
        for j in ((u32::MAX - 5)..u32::MAX).step_by(3u32) {
            n += 1;
            h = h * 31 + j;
            if n == 100 {
                break;
            }
        }
        out[o + 6] = n;
        out[o + 7] = h;
    }
}

/// `(0..n).step_by(s)` with run-time steps that may be 0 or negative: a fault on the host,
/// no iterations on GPU targets. Writes the iterations of the `i32` and the `u32` loop.
#[kernel(workgroup = 64)]
pub fn step_by_run_time(n: i32, s: i32, us: u32, out: &mut [u32]) {
    if global_id().x == 0 {
        let mut c = 0u32;
        for _j in (0..n).step_by(s) {
            c += 1;
            if c == 100 {
                break;
            }
        }
        out[0] = c;
        let mut uc = 0u32;
        for _j in (0u32..n as u32).step_by(us) {
            uc += 1;
            if uc == 100 {
                break;
            }
        }
        out[1] = uc;
    }
}

/// An LCG stepped `n` times in one loop, so no compiler can skip the iterations.
#[kernel(workgroup = 64)]
pub fn long_loop(n: u32, out: &mut [u32]) {
    if global_id().x == 0 {
        let mut v = 1u32;
        for _i in 0..n {
            v = v * 1664525 + 1013904223;
        }
        out[0] = v;
    }
}

/// Every kernel of this file, for the naga and NVRTC checks.
fn all_kernels() -> Vec<&'static KernelDef> {
    vec![
        &reduce_sum::DEF,
        &matmul_tiled::DEF,
        &scan_i32::DEF,
        &histogram::DEF,
        &atomic_mix::DEF,
        &exchange::DEF,
        &cas_saturating_add::DEF,
        &int_ops::DEF,
        &casts::DEF,
        &math::DEF,
        &float_ops::DEF,
        &grid_stride::DEF,
        &control_flow::DEF,
        &step_by_edges::DEF,
        &step_by_run_time::DEF,
        &long_loop::DEF,
        &ids_3d::DEF,
        &bool_logic::DEF,
        &constants::DEF,
        &specials::DEF,
        &trig::DEF,
    ]
}

// ------------------------------------------------------------------------------ source checks

#[test]
fn every_kernel_wgsl_is_valid_per_naga() {
    use naga::valid::{Capabilities, ValidationFlags, Validator};
    let mut failures = Vec::new();
    // Both variants: the unchecked source and the checked one (`GRAPHED_CHECKED`).
    for (k, src, variant) in all_kernels()
        .into_iter()
        .flat_map(|k| [(k, k.wgsl, ""), (k, k.checked.wgsl, " (checked)")])
    {
        match naga::front::wgsl::parse_str(src) {
            Err(e) => failures.push(format!(
                "{}{variant}: WGSL parse error:\n{}",
                k.name,
                e.emit_to_string(src)
            )),
            Ok(module) => {
                if let Err(e) =
                    Validator::new(ValidationFlags::all(), Capabilities::all()).validate(&module)
                {
                    failures.push(format!(
                        "{}{variant}: WGSL validation error:\n{}",
                        k.name,
                        e.emit_to_string(src)
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn every_kernel_cuda_compiles_with_nvrtc() {
    if !common::nvrtc_enabled() {
        return;
    }
    let mut failures = Vec::new();
    for k in all_kernels() {
        // Both variants: the unchecked source and the checked one (`GRAPHED_CHECKED`).
        for (ptx, src) in [
            (graphed::nvrtc::compile(k, "compute_80"), k.cuda),
            (
                graphed::nvrtc::compile_checked(k, "compute_80"),
                k.checked.cuda,
            ),
        ] {
            match ptx {
                Ok(ptx) => assert!(
                    ptx.contains(&format!(".entry {}", k.name)),
                    "{}: no entry point in the PTX",
                    k.name
                ),
                Err(e) => failures.push(format!("{}: {e}\n{src}", k.name)),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

// ------------------------------------------------------------------------------ known issues

/// A driver behaviour that differs from the kernel language's meaning and that no emitter
/// can change (the driver is allowed it): recorded as data, with the backend, the adapters and
/// the reason, so the rest of the check still runs and a note is printed on every run.
struct KnownIssue {
    backend: graphed::BackendKind,
    /// Substrings of the adapter's name (`Device::adapter()`).
    adapters: &'static [&'static str],
    /// The check it affects, `kernel/output` (empty: every check).
    check: &'static str,
    /// Whether it affects an element, given the element's float inputs and expected value.
    applies: fn(&[f32], f32) -> bool,
    reason: &'static str,
}

const WGPU: graphed::BackendKind = graphed::BackendKind::Wgpu;

/// Whether `v` is subnormal (nonzero and below `f32::MIN_POSITIVE` in magnitude).
fn subnormal(v: f32) -> bool {
    v.is_subnormal()
}

/// Lavapipe (llvmpipe) and NVIDIA's Vulkan driver compile shaders assuming no infinities,
/// NaNs or signed zeros occur, and NVIDIA's also flushes subnormals to zero: WGSL allows all
/// of it, and naga does not ask SPIR-V to preserve them. Lavapipe also approximates some
/// transcendentals loosely near zero. Host and CUDA keep IEEE 754 semantics.
const KNOWN_ISSUES: &[KnownIssue] = &[
    KnownIssue {
        backend: WGPU,
        adapters: &["llvmpipe", "NVIDIA"],
        check: "specials/v*0",
        applies: |x, _| !x[0].is_finite() || x[0].is_sign_negative(),
        reason: "`v * 0.0` is folded to +0.0, so inf * 0 is not NaN and -x * 0 is not -0",
    },
    KnownIssue {
        backend: WGPU,
        adapters: &["llvmpipe", "NVIDIA"],
        check: "specials/v-v",
        applies: |x, _| !x[0].is_finite(),
        reason: "`v - v` is folded to 0.0, so inf - inf is not NaN",
    },
    KnownIssue {
        backend: WGPU,
        adapters: &["llvmpipe"],
        check: "specials/log",
        applies: |x, _| x[0] > 0.0 && subnormal(x[0]),
        reason: "`log` of a subnormal is off by several units (log(1e-40) = -88.02, not -92.10)",
    },
    KnownIssue {
        backend: WGPU,
        adapters: &["llvmpipe"],
        check: "specials/tanh",
        applies: |x, _| x[0] != 0.0 && x[0].abs() < 1e-2,
        reason: "`tanh` keeps an absolute error of up to 3e-8, so for |x| < 1e-2 the relative \
                 error exceeds 1e-6 and below 3e-8 the result is about ±2^-25 instead of x",
    },
    KnownIssue {
        backend: WGPU,
        adapters: &["llvmpipe"],
        check: "constants/of[15]",
        applies: |_, _| true,
        reason: "a run-time value divided by a literal 0.0 is undefined under the finite-math \
                 assumption: the store is dropped and the element keeps its old value",
    },
    KnownIssue {
        backend: WGPU,
        adapters: &["NVIDIA"],
        check: "float_ops/loose",
        applies: |x, _| x[1].abs() >= 2f32.powi(126),
        reason: "`x / y` is `x * (1 / y)`, and for |y| >= 2^126 the subnormal `1 / y` is flushed \
                 to zero: f32::MAX / f32::MAX is 0, not 1 (and `%` follows)",
    },
    KnownIssue {
        backend: WGPU,
        adapters: &["llvmpipe"],
        check: "long_loop",
        applies: |_, _| true,
        reason: "each invocation gets about 65,535 loop iterations in all, over all its loops \
                 (gallivm's loop limiter), and past them leaves every loop after one \
                 iteration, silently; the library's kernels keep below it (`matmul` splits \
                 `k` and `reduce_rows` splits rows past 16,384: `matmul_and_reduce_rows_past_\
                 the_lavapipe_loop_cap`)",
    },
    KnownIssue {
        backend: WGPU,
        adapters: &["NVIDIA"],
        check: "",
        applies: |x, want| x.iter().any(|v| subnormal(*v)) || subnormal(want),
        reason: "subnormal f32 values are flushed to zero, as inputs and as results, in \
                 arithmetic and comparisons",
    },
];

/// The known issue that covers `check` of an element with float inputs `inputs` and
/// expected value `want` on `dev`, if any.
fn known_issue(
    dev: &Device,
    check: &str,
    inputs: &[f32],
    want: f32,
) -> Option<&'static KnownIssue> {
    let adapter = dev.adapter();
    KNOWN_ISSUES.iter().find(|k| {
        dev.kind() == k.backend
            && k.adapters.iter().any(|a| adapter.contains(a))
            && (k.check.is_empty() || check == k.check)
            && (k.applies)(inputs, want)
    })
}

/// Prints a note for an element a known issue covers (or says that it did not reproduce).
fn note_known(issue: &KnownIssue, check: &str, detail: &str, reproduced: bool) {
    eprintln!(
        "note: known issue on {:?}: {check}: {detail} ({}){}",
        issue.adapters,
        issue.reason,
        if reproduced {
            ""
        } else {
            "; did not reproduce"
        }
    );
}

/// Replaces in `got` every element that a known issue covers on `dev` with its expected
/// value, printing a note, so the comparison that follows checks all the others.
/// `element(i)` gives element `i`'s float inputs and its expected value as an `f32`.
fn exempt_known<T: Copy + PartialEq + std::fmt::Debug>(
    dev: &Device,
    check: &str,
    got: &mut [T],
    want: &[T],
    element: impl Fn(usize) -> (Vec<f32>, f32),
) {
    for i in 0..got.len() {
        let (inputs, w) = element(i);
        if let Some(issue) = known_issue(dev, check, &inputs, w) {
            let detail = format!("[{i}] of {inputs:?}: got {:?}, want {:?}", got[i], want[i]);
            note_known(issue, check, &detail, got[i] != want[i]);
            got[i] = want[i];
        }
    }
}

// ------------------------------------------------------------------------------ helpers

/// A buffer of `n` copies of `poison`, so elements a kernel fails to write are caught.
fn poisoned<T: graphed::Element>(dev: &Device, n: usize, poison: T) -> Buffer<T> {
    dev.upload(&vec![poison; n]).unwrap()
}

/// Panics with how many elements differ and the first few, when any do.
fn report(what: &str, total: usize, bad: &[String]) {
    if !bad.is_empty() {
        let shown: Vec<&str> = bad.iter().take(6).map(String::as_str).collect();
        panic!(
            "{what}: {} of {total} elements differ:\n  {}",
            bad.len(),
            shown.join("\n  ")
        );
    }
}

/// Bitwise comparison of f32 slices (any NaN matches any NaN other than the poison: no
/// target specifies NaN payloads or signs).
fn assert_bits_f32(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    let bad: Vec<String> = got
        .iter()
        .zip(want)
        .enumerate()
        .filter(|(_, (g, w))| {
            let same_nan = g.is_nan() && w.is_nan() && g.to_bits() != POISON_F32.to_bits();
            g.to_bits() != w.to_bits() && !same_nan
        })
        .map(|(i, (g, w))| {
            format!(
                "[{i}]: got {g:e} ({:#010x}), want {w:e} ({:#010x})",
                g.to_bits(),
                w.to_bits()
            )
        })
        .collect();
    report(what, got.len(), &bad);
}

/// Relative error of the whole output within `tol` over the elements whose reference is
/// finite; elements whose reference is infinite or NaN must be the same infinity or a NaN.
fn assert_close(got: &[f32], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    let (mut g, mut w, mut bad) = (Vec::new(), Vec::new(), Vec::new());
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        let ok = if b.is_finite() {
            g.push(*a);
            w.push(*b);
            a.is_finite()
        } else if b.is_nan() {
            a.is_nan() && a.to_bits() != POISON_F32.to_bits()
        } else {
            *a as f64 == *b
        };
        if !ok {
            bad.push(format!("[{i}]: got {a:e}, want {b:e}"));
        }
    }
    report(what, got.len(), &bad);
    let e = rel_err(&g, &w);
    if e > tol {
        let mut worst: Vec<usize> = (0..got.len()).filter(|&i| want[i].is_finite()).collect();
        worst.sort_by(|&i, &j| {
            let d = |k: usize| (got[k] as f64 - want[k]).abs();
            d(j).total_cmp(&d(i))
        });
        let shown: Vec<String> = worst
            .iter()
            .take(3)
            .map(|&i| format!("[{i}]: got {:e}, want {:e}", got[i], want[i]))
            .collect();
        panic!(
            "{what}: relative error {e:e} > {tol:e}; largest differences:\n  {}",
            shown.join("\n  ")
        );
    }
}

/// Exact comparison; `ctx(i)` describes the inputs of element `i`.
fn assert_exact<T: PartialEq + std::fmt::Debug>(
    got: &[T],
    want: &[T],
    what: &str,
    ctx: impl Fn(usize) -> String,
) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    let bad: Vec<String> = (0..got.len())
        .filter(|&i| got[i] != want[i])
        .map(|i| format!("[{i}]: got {:?}, want {:?} ({})", got[i], want[i], ctx(i)))
        .collect();
    report(what, got.len(), &bad);
}

// ------------------------------------------------------------------------------ shared memory

#[test]
fn reduce_sum_tree_reduction_in_workgroup_memory() {
    // Tolerance: bitwise against the same tree of f32 additions; 1e-6 relative to the f64 sum.
    let mut r = rng("reduce_sum");
    on_every_backend(|dev| {
        for &n in ODD_SIZES.iter().chain(&[4097]) {
            let x = floats(&mut r, n, 0.5, 1.5);
            let groups = n.div_ceil(256);
            let xb = dev.upload(&x).unwrap();
            let mut pb = poisoned(dev, groups, POISON_F32);
            reduce_sum::launch(dev, Grid::workgroups(groups as u32), &xb, &mut pb).unwrap();
            let got = pb.to_host().unwrap();
            for (g, got) in got.iter().enumerate() {
                let mut s: Vec<f32> = (0..256)
                    .map(|l| x.get(g * 256 + l).copied().unwrap_or(0.0))
                    .collect();
                let mut stride = 128;
                while stride > 0 {
                    for l in 0..stride {
                        s[l] += s[l + stride];
                    }
                    stride >>= 1;
                }
                assert_bits_f32(&[*got], &[s[0]], &format!("n={n} workgroup {g}"));
                let exact: f64 = x[g * 256..n.min((g + 1) * 256)]
                    .iter()
                    .map(|v| *v as f64)
                    .sum();
                let e = ((*got as f64 - exact) / exact).abs();
                assert!(e < 1e-6, "n={n} workgroup {g}: relative error {e:e}");
            }
        }
    });
}

#[test]
fn matmul_tiled_16x16_workgroups_on_a_2d_grid() {
    // Tolerance: 1e-5 relative error of the whole output against f64 (a driver may contract
    // `acc += a * b` into FMAs); on the host, bitwise against sequential f32 accumulation.
    let mut r = rng("matmul_tiled");
    on_every_backend(|dev| {
        for (m, n, k) in [
            (1, 1, 1),
            (7, 63, 65),
            (33, 17, 16),
            (20, 31, 100),
            (64, 48, 3),
        ] {
            let a = floats(&mut r, m * k, -1.0, 1.0);
            let b = floats(&mut r, k * n, -1.0, 1.0);
            let ab = dev.upload(&a).unwrap();
            let bb = dev.upload(&b).unwrap();
            let mut cb = poisoned(dev, m * n, POISON_F32);
            let grid = Grid::workgroups_2d(n.div_ceil(16) as u32, m.div_ceil(16) as u32);
            matmul_tiled::launch(dev, grid, m as u32, n as u32, k as u32, &ab, &bb, &mut cb)
                .unwrap();
            let got = cb.to_host().unwrap();
            let mut want = vec![0.0f64; m * n];
            let mut seq = vec![0.0f32; m * n];
            for i in 0..m {
                for j in 0..n {
                    for t in 0..k {
                        want[i * n + j] += a[i * k + t] as f64 * b[t * n + j] as f64;
                        seq[i * n + j] += a[i * k + t] * b[t * n + j];
                    }
                }
            }
            let e = rel_err(&got, &want);
            assert!(e < 1e-5, "{m}x{k} by {k}x{n}: relative error {e:e}");
            if dev.kind() == graphed::BackendKind::Host {
                assert_bits_f32(&got, &seq, &format!("{m}x{k} by {k}x{n} on the host"));
            }
        }
    });
}

#[test]
fn scan_i32_with_barriers_in_a_loop() {
    // Tolerance: exact (wrapping i32 sums).
    let mut r = rng("scan_i32");
    on_every_backend(|dev| {
        for &n in ODD_SIZES {
            let x: Vec<i32> = (0..n).map(|_| r.random()).collect();
            let xb = dev.upload(&x).unwrap();
            let mut yb = poisoned(dev, n, POISON_I32);
            scan_i32::launch(dev, Grid::threads(n), &xb, &mut yb).unwrap();
            let mut want = vec![0i32; n];
            for (i, w) in want.iter_mut().enumerate() {
                let start = i / 64 * 64;
                *w = x[start..=i].iter().fold(0i32, |s, v| s.wrapping_add(*v));
            }
            assert_exact(&yb.to_host().unwrap(), &want, &format!("n={n}"), |i| {
                format!("x[{i}] = {}", x[i])
            });
        }
    });
}

// ------------------------------------------------------------------------------ atomics

#[test]
fn histogram_with_atomic_add() {
    // Tolerance: exact. Bins start at random counts, so a kernel that overwrites is caught.
    let mut r = rng("histogram");
    on_every_backend(|dev| {
        for &n in ODD_SIZES.iter().chain(&[5000]) {
            let x: Vec<u32> = (0..n).map(|_| r.random()).collect();
            let start: Vec<u32> = (0..37).map(|_| r.random_range(0..1000)).collect();
            let xb = dev.upload(&x).unwrap();
            let mut bins = dev.upload(&start).unwrap();
            histogram::launch(dev, Grid::threads(n), &xb, &mut bins).unwrap();
            let mut want = start.clone();
            for v in &x {
                want[(*v % 37) as usize] += 1;
            }
            assert_exact(&bins.to_host().unwrap(), &want, &format!("n={n}"), |_| {
                String::new()
            });
        }
    });
}

#[test]
fn atomic_max_min_add_sub_and_or_xor_load_store() {
    // Tolerance: exact (every operation here is order-independent).
    let mut r = rng("atomic_mix");
    on_every_backend(|dev| {
        for &n in ODD_SIZES {
            let x: Vec<i32> = (0..n).map(|_| r.random()).collect();
            let ai0: Vec<i32> = vec![i32::MIN + 5, i32::MAX - 5, r.random(), r.random()];
            let au0: Vec<u32> = vec![
                3,
                u32::MAX - 3,
                r.random::<u32>() | 0xF000_000F,
                r.random::<u32>() & 0x0000_FF00,
                r.random(),
                r.random(),
                POISON_U32,
                0,
                0,
            ];
            let xb = dev.upload(&x).unwrap();
            let mut ai = dev.upload(&ai0).unwrap();
            let mut au = dev.upload(&au0).unwrap();
            let mut seen = poisoned(dev, n, POISON_U32);
            atomic_mix::launch(dev, Grid::threads(n), &xb, &mut ai, &mut au, &mut seen).unwrap();
            let u = || x.iter().map(|v| *v as u32);
            let want_i = vec![
                x.iter().copied().fold(ai0[0], i32::max),
                x.iter().copied().fold(ai0[1], i32::min),
                x.iter().fold(ai0[2], |s, v| s.wrapping_add(*v)),
                x.iter().fold(ai0[3], |s, v| s.wrapping_sub(*v)),
            ];
            let want_u = vec![
                u().fold(au0[0], u32::max),
                u().fold(au0[1], u32::min),
                u().fold(au0[2], |s, v| s & (v | 0x0F0F_0F0F)),
                u().fold(au0[3], |s, v| s | (1 << (v & 31))),
                u().fold(au0[4], |s, v| s ^ v),
                au0[5],
                77,
                2 * n as u32,
                0,
            ];
            let what = format!("n={n}");
            assert_exact(&ai.to_host().unwrap(), &want_i, &what, |i| {
                format!("ai[{i}]")
            });
            assert_exact(&au.to_host().unwrap(), &want_u, &what, |i| {
                format!("au[{i}]")
            });
            assert_exact(&seen.to_host().unwrap(), &vec![au0[5]; n], &what, |i| {
                format!("seen[{i}]")
            });
        }
    });
}

#[test]
fn atomic_exchange_hands_every_value_on_exactly_once() {
    // Tolerance: exact, as multisets per slot (the order of the swaps is the GPU's choice).
    let mut r = rng("exchange");
    on_every_backend(|dev| {
        for &n in ODD_SIZES {
            let k = 5;
            let init: Vec<u32> = (0..k).map(|_| r.random_range(1..1000)).collect();
            let mut slots = dev.upload(&init).unwrap();
            let mut olds = poisoned(dev, n, POISON_U32);
            exchange::launch(dev, Grid::threads(n), &mut slots, &mut olds, n as u32).unwrap();
            let fin = slots.to_host().unwrap();
            let olds = olds.to_host().unwrap();
            for j in 0..k {
                let mut put: Vec<u32> = std::iter::once(init[j])
                    .chain((j..n).step_by(k).map(|i| 1000 + i as u32))
                    .collect();
                let mut took: Vec<u32> = std::iter::once(fin[j])
                    .chain((j..n).step_by(k).map(|i| olds[i]))
                    .collect();
                put.sort_unstable();
                took.sort_unstable();
                assert_eq!(took, put, "n={n} slot {j}: values taken out vs put in");
            }
        }
    });
}

#[test]
fn compare_exchange_retry_loop() {
    // Tolerance: exact. A saturating add of non-negative values is order-independent.
    let mut r = rng("cas_saturating_add");
    on_every_backend(|dev| {
        for &n in ODD_SIZES {
            let cap = 50_000;
            let x: Vec<i32> = (0..n).map(|_| r.random_range(0..1000)).collect();
            let init: Vec<i32> = (0..3).map(|_| r.random_range(0..100)).collect();
            let xb = dev.upload(&x).unwrap();
            let mut acc = dev.upload(&init).unwrap();
            let mut tries = poisoned(dev, n, 0u32);
            cas_saturating_add::launch(dev, Grid::threads(n), &xb, cap, &mut acc, &mut tries)
                .unwrap();
            let mut want = init.clone();
            for (i, v) in x.iter().enumerate() {
                want[i % 3] = (want[i % 3] + v).min(cap);
            }
            assert_exact(&acc.to_host().unwrap(), &want, &format!("n={n}"), |i| {
                format!("slot {i}")
            });
            let tries = tries.to_host().unwrap();
            assert!(
                tries.iter().all(|t| *t >= 1),
                "n={n}: an invocation never tried"
            );
            if dev.kind() == graphed::BackendKind::Host {
                assert!(
                    tries.iter().all(|t| *t == 1),
                    "the host runs invocations in turn"
                );
            }
        }
    });
}

// ------------------------------------------------------------------------------ integers and casts

fn div_i32(a: i32, b: i32) -> i32 {
    if b == 0 {
        a
    } else {
        a.wrapping_div(b)
    }
}
fn rem_i32(a: i32, b: i32) -> i32 {
    if b == 0 {
        0
    } else {
        a.wrapping_rem(b)
    }
}
fn div_u32(a: u32, b: u32) -> u32 {
    a.checked_div(b).unwrap_or(a)
}
fn rem_u32(a: u32, b: u32) -> u32 {
    a.checked_rem(b).unwrap_or(0)
}

/// What `int_ops` computes for one pair, in plain Rust.
fn int_ops_ref(x: i32, y: i32) -> ([i32; 20], [u32; 20]) {
    let (ux, uy) = (x as u32, y as u32);
    let mut r = x;
    r = r.wrapping_add(y);
    r = r.wrapping_mul(3);
    r = r.wrapping_sub(i32::MAX);
    r = div_i32(r, y);
    r = rem_i32(r, 1000);
    r = r.wrapping_shl(uy);
    r >>= 2;
    r &= -16;
    r |= 5;
    r ^= y;
    let mut s = ux;
    s = s.wrapping_add(uy);
    s = s.wrapping_mul(0x9E37_79B9);
    s = s.wrapping_sub(12345);
    s = div_u32(s, uy);
    s = rem_u32(s, 65521);
    s = s.wrapping_shl(uy);
    s = s.wrapping_shr(uy.wrapping_add(1));
    s &= 0xFFFF_FFF0;
    s |= 3;
    s ^= ux;
    let bits = |v: [bool; 6]| {
        v.iter()
            .enumerate()
            .map(|(i, b)| (*b as u32) << i)
            .sum::<u32>()
    };
    let cmp_i = bits([x < y, x <= y, x > y, x >= y, x == y, x != y]);
    let cmp_u = bits([ux < uy, ux <= uy, ux > uy, ux >= uy, ux == uy, ux != uy]);
    (
        [
            x.wrapping_add(y),
            x.wrapping_sub(y),
            x.wrapping_mul(y),
            div_i32(x, y),
            rem_i32(x, y),
            x.wrapping_shl(uy),
            x.wrapping_shr(uy),
            x.wrapping_neg(),
            x.wrapping_abs(),
            x.min(y),
            x.max(y),
            x.clamp(-1000, 1000),
            x & y,
            x | y,
            x ^ y,
            !x,
            x.wrapping_mul(7)
                .wrapping_add(i32::MIN)
                .wrapping_sub(y >> 3),
            r,
            cmp_i as i32,
            i32::MIN,
        ],
        [
            ux.wrapping_add(uy),
            ux.wrapping_sub(uy),
            ux.wrapping_mul(uy),
            div_u32(ux, uy),
            rem_u32(ux, uy),
            ux.wrapping_shl(uy),
            ux.wrapping_shr(uy),
            ux.min(uy),
            ux.max(uy),
            ux.clamp(10, 100000),
            ux & uy,
            ux | uy,
            ux ^ uy,
            !ux,
            ux.wrapping_mul(2654435761).wrapping_add(u32::MAX),
            s,
            cmp_u,
            ux.wrapping_add(ux).wrapping_add(ux >> 1),
            (1u32 << 31) >> (uy & 31),
            !ux,
        ],
    )
}

/// Values where integer semantics differ between languages.
const INT_EDGES: &[i32] = &[
    0,
    1,
    -1,
    2,
    -2,
    3,
    31,
    32,
    33,
    63,
    64,
    -32,
    1000,
    -1001,
    0x5555_5555,
    i32::MIN,
    i32::MIN + 1,
    i32::MAX,
];

#[test]
fn integer_semantics_wrap_divide_shift_compare() {
    // Tolerance: bitwise. Every pair of edge values, then random pairs.
    let mut r = rng("int_ops");
    on_every_backend(|dev| {
        let mut a = Vec::new();
        let mut b = Vec::new();
        for x in INT_EDGES {
            for y in INT_EDGES {
                a.push(*x);
                b.push(*y);
            }
        }
        while a.len() < 1023 {
            a.push(r.random());
            b.push(if r.random_bool(0.3) {
                r.random_range(-40..40)
            } else {
                r.random()
            });
        }
        for n in [1, 65, a.len()] {
            let ab = dev.upload(&a[..n]).unwrap();
            let bb = dev.upload(&b[..n]).unwrap();
            let mut oi = poisoned(dev, n * 20, POISON_I32);
            let mut ou = poisoned(dev, n * 20, POISON_U32);
            int_ops::launch(dev, Grid::threads(n), &ab, &bb, &mut oi, &mut ou).unwrap();
            let (mut wi, mut wu) = (Vec::new(), Vec::new());
            for i in 0..n {
                let (ri, ru) = int_ops_ref(a[i], b[i]);
                wi.extend(ri);
                wu.extend(ru);
            }
            let ctx =
                |i: usize| format!("output {} of x = {}, y = {}", i % 20, a[i / 20], b[i / 20]);
            assert_exact(&oi.to_host().unwrap(), &wi, &format!("i32, n={n}"), ctx);
            assert_exact(&ou.to_host().unwrap(), &wu, &format!("u32, n={n}"), ctx);
        }
    });
}

/// What `casts` computes for one element, in plain Rust (`as` saturates, as the kernel
/// language defines).
fn casts_ref(f: f32, si: i32, su: u32) -> ([f32; 4], [i32; 4], [u32; 4]) {
    (
        [
            si as f32,
            su as f32,
            ((f * 0.5) as i32) as f32,
            ((si as f32) as i32) as f32,
        ],
        [
            f as i32,
            su as i32,
            (f < 0.0) as i32 - (f > 0.0) as i32,
            (-f) as i32,
        ],
        [
            f as u32,
            si as u32,
            (si < 0) as u32 + 2 * !f.is_nan() as u32,
            (su as f32) as u32,
        ],
    )
}

#[test]
fn casts_saturate_round_and_reinterpret() {
    // Tolerance: bitwise. Floats beyond the integer range saturate, negatives go to 0 as
    // `u32`, and int → float rounds to nearest even.
    let mut r = rng("casts");
    on_every_backend(|dev| {
        let mut f: Vec<f32> = vec![
            0.0,
            -0.0,
            0.49,
            0.5,
            -0.5,
            1.5,
            -1.5,
            2.5,
            -2.5,
            3.99,
            -3.99,
            -1.0,
            -0.99,
            1e10,
            -1e10,
            2147483520.0,
            2147483648.0,
            -2147483648.0,
            -2147483904.0,
            4294967040.0,
            4294967296.0,
            16777217.0,
            f32::MAX,
            f32::MIN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            1e-40,
            -1e-40,
        ];
        let mut si: Vec<i32> = vec![0, 1, -1, i32::MIN, i32::MAX, 16777217, -16777217, 16777219];
        let mut su: Vec<u32> = vec![0, 1, u32::MAX, 1 << 31, 16777217, 0xFFFF_FF80, 0xFFFF_FF7F];
        let n = 1000;
        while f.len() < n {
            f.push(r.random_range(-5e9f32..5e9));
        }
        while si.len() < n {
            si.push(r.random());
        }
        while su.len() < n {
            su.push(r.random());
        }
        let fb = dev.upload(&f).unwrap();
        let sib = dev.upload(&si).unwrap();
        let sub = dev.upload(&su).unwrap();
        let mut of = poisoned(dev, n * 4, POISON_F32);
        let mut oi = poisoned(dev, n * 4, POISON_I32);
        let mut ou = poisoned(dev, n * 4, POISON_U32);
        casts::launch(
            dev,
            Grid::threads(n),
            &fb,
            &sib,
            &sub,
            &mut of,
            &mut oi,
            &mut ou,
        )
        .unwrap();
        let (mut wf, mut wi, mut wu) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..n {
            let (a, b, c) = casts_ref(f[i], si[i], su[i]);
            wf.extend(a);
            wi.extend(b);
            wu.extend(c);
        }
        let ctx = |i: usize| {
            let e = i / 4;
            format!(
                "output {} of f = {:e}, si = {}, su = {}",
                i % 4,
                f[e],
                si[e],
                su[e]
            )
        };
        let (mut oi, mut ou, mut of) = (
            oi.to_host().unwrap(),
            ou.to_host().unwrap(),
            of.to_host().unwrap(),
        );
        exempt_known(dev, "casts/i32", &mut oi, &wi, |i| (vec![f[i / 4]], 0.0));
        exempt_known(dev, "casts/u32", &mut ou, &wu, |i| (vec![f[i / 4]], 0.0));
        exempt_known(dev, "casts/f32", &mut of, &wf, |i| (vec![f[i / 4]], wf[i]));
        assert_exact(&oi, &wi, "i32 outputs", ctx);
        assert_exact(&ou, &wu, "u32 outputs", ctx);
        assert_bits_f32(&of, &wf, "f32 outputs");
    });
}

// ------------------------------------------------------------------------------ floats

/// Per function of `math`: its name, and the largest relative error of its whole output
/// column against f64 (`0.0`: bitwise against Rust's f32 result).
const MATH_TOL: &[(&str, f64)] = &[
    ("abs", 0.0),
    ("min", 0.0),
    ("max", 0.0),
    ("clamp", 0.0),
    ("floor", 0.0),
    ("ceil", 0.0),
    ("round", 0.0),
    ("select", 0.0),
    ("sqrt", 1e-6),
    ("rsqrt", 1e-6),
    ("exp", 1e-6),
    ("exp2", 1e-6),
    ("log", 1e-6),
    ("log2", 1e-6),
    // exp2(y * log2(x)) with hardware approximations magnifies their error by |y log2 x|
    // (NVIDIA's Vulkan driver: 1.5e-6 here).
    ("pow", 1e-5),
    ("sin", 1e-6),
    ("cos", 1e-6),
    ("tanh", 1e-6),
    ("fma", 1e-7),
    ("mul_add", 1e-7),
    ("ln + powf", 1e-6),
];

// The kernel's `clamp` is `max` then `min`, which differs from `f32::clamp` for NaN.
#[allow(clippy::manual_clamp)]
#[test]
fn math_builtins_as_functions_and_methods() {
    // Tolerance: see `MATH_TOL`.
    let mut r = rng("math");
    on_every_backend(|dev| {
        for n in [7, 1023] {
            let mut x = floats(&mut r, n, -4.0, 4.0);
            // Halves, for `round` (ties to even) and `floor`/`ceil` at integers.
            for (i, v) in [0.5f32, -0.5, 1.5, 2.5, -2.5, 3.0, -3.0].iter().enumerate() {
                if i < n {
                    x[i] = *v;
                }
            }
            let y = floats(&mut r, n, -4.0, 4.0);
            let p = floats(&mut r, n, 0.01, 10.0);
            let (xb, yb, pb) = (
                dev.upload(&x).unwrap(),
                dev.upload(&y).unwrap(),
                dev.upload(&p).unwrap(),
            );
            let mut out = poisoned(dev, n * MATH_TOL.len(), POISON_F32);
            math::launch(dev, Grid::threads(n), &xb, &yb, &pb, &mut out).unwrap();
            let out = out.to_host().unwrap();
            for (k, (name, tol)) in MATH_TOL.iter().enumerate() {
                let got = &out[k * n..(k + 1) * n];
                let what = format!("{name}, n={n}");
                if *tol == 0.0 {
                    let want: Vec<f32> = (0..n)
                        .map(|i| {
                            let (v, w) = (x[i], y[i]);
                            match *name {
                                "abs" => v.abs(),
                                "min" => v.min(w),
                                "max" => v.max(w),
                                "clamp" => v.max(-0.5).min(0.75),
                                "floor" => v.floor(),
                                "ceil" => v.ceil(),
                                "round" => v.round_ties_even(),
                                "select" => {
                                    if v < w {
                                        v
                                    } else {
                                        w * 2.0
                                    }
                                }
                                _ => unreachable!(),
                            }
                        })
                        .collect();
                    assert_bits_f32(got, &want, &what);
                } else {
                    let want: Vec<f64> = (0..n)
                        .map(|i| {
                            let (v, w, q) = (x[i] as f64, y[i] as f64, p[i] as f64);
                            match *name {
                                "sqrt" => q.sqrt(),
                                "rsqrt" => 1.0 / q.sqrt(),
                                "exp" => v.exp(),
                                "exp2" => v.exp2(),
                                "log" => q.ln(),
                                "log2" => q.log2(),
                                "pow" => q.powf(w),
                                "sin" => (x[i] * 3.0) as f64,
                                "cos" => (x[i] * 3.0) as f64,
                                "tanh" => (x[i] * 2.0) as f64,
                                "fma" => v * w + q,
                                "mul_add" => v * q + w,
                                "ln + powf" => q.ln() + q.sqrt(),
                                _ => unreachable!(),
                            }
                        })
                        .map(|v| match *name {
                            "sin" => v.sin(),
                            "cos" => v.cos(),
                            "tanh" => v.tanh(),
                            _ => v,
                        })
                        .collect();
                    let e = rel_err(got, &want);
                    assert!(e <= *tol, "{what}: relative error {e:e} > {tol:e}");
                }
            }
        }
    });
}

#[test]
fn sin_cos_error_grows_with_the_argument() {
    // Tolerance: absolute error 2e-6 + 4e-7 × |x| per element against f64. GPU drivers reduce
    // the argument with f32 precision (NVIDIA's Vulkan driver's error is about |x| × 2^-23),
    // so for large |x| only the tolerance is meaningful, not the value.
    use std::f32::consts::PI;
    let mut r = rng("trig");
    on_every_backend(|dev| {
        let mut x: Vec<f32> = vec![0.0, -0.0, 1e-3, -1e-3, 0.5, PI, -PI, 1e3, -1e5];
        while x.len() < 1000 {
            let m: f32 = r.random_range(-1.0..1.0);
            x.push(m * 10f32.powi(r.random_range(-2..7)));
        }
        let xb = dev.upload(&x).unwrap();
        let mut out = poisoned(dev, 2 * x.len(), POISON_F32);
        trig::launch(dev, Grid::threads(x.len()), &xb, &mut out).unwrap();
        let got = out.to_host().unwrap();
        let mut bad = Vec::new();
        for (i, v) in x.iter().enumerate() {
            let v64 = *v as f64;
            for (k, want) in [v64.sin(), v64.cos()].into_iter().enumerate() {
                let g = got[2 * i + k] as f64;
                let tol = 2e-6 + 4e-7 * v64.abs();
                // NaN (or the poison) fails too.
                let close = (g - want).abs() <= tol;
                if !close {
                    let f = ["sin", "cos"][k];
                    bad.push(format!("{f}({v:e}): got {g:e}, want {want:e}"));
                }
            }
        }
        report("sin/cos", 2 * x.len(), &bad);
    });
}

#[test]
fn float_arithmetic_exact_and_loose() {
    // Tolerance: `+ - *` and negation bitwise (one rounding each; `c * 0.5` is exact, so a
    // contraction into an FMA cannot change `c`); `/` and `%` 1e-6 relative error of the
    // whole output (drivers may divide with 2.5 ulp); comparisons bitwise.
    let mut r = rng("float_ops");
    on_every_backend(|dev| {
        for &n in ODD_SIZES {
            let mut a = floats(&mut r, n, -100.0, 100.0);
            let mut b: Vec<f32> = (0..n)
                .map(|_| {
                    let m = r.random_range(0.5f32..100.0);
                    if r.random_bool(0.5) {
                        m
                    } else {
                        -m
                    }
                })
                .collect();
            // IEEE 754 special cases: signed zeros, infinities, NaN, subnormals.
            let special = [
                (0.0, 0.0),
                (-0.0, 0.0),
                (0.0, -0.0),
                (1.0, 0.0),
                (-1.0, 0.0),
                (f32::INFINITY, 2.0),
                (f32::NEG_INFINITY, f32::INFINITY),
                (f32::NAN, 1.0),
                (1.0, f32::NAN),
                (1e-40, 3.0),
                (-1e-40, 1e-40),
                (f32::MAX, f32::MAX),
                (3.0, f32::INFINITY),
            ];
            if n > 63 {
                for (i, (x, y)) in special.iter().enumerate() {
                    a[i] = *x;
                    b[i] = *y;
                }
            }
            let (ab, bb) = (dev.upload(&a).unwrap(), dev.upload(&b).unwrap());
            let mut exact = poisoned(dev, n * 5, POISON_F32);
            let mut loose = poisoned(dev, n * 3, POISON_F32);
            let mut cmp = poisoned(dev, n, POISON_U32);
            float_ops::launch(
                dev,
                Grid::threads(n),
                &ab,
                &bb,
                &mut exact,
                &mut loose,
                &mut cmp,
            )
            .unwrap();
            let mut we = Vec::new();
            let mut wl = Vec::new();
            let mut wc = Vec::new();
            for i in 0..n {
                let (x, y) = (a[i], b[i]);
                we.extend([x + y, x - y, x * y, -x, x * 0.5 + 2.0 - y]);
                let q = x as f64 / y as f64;
                wl.extend([q, x as f64 % y as f64, ((x / y) % 1.5) as f64]);
                let bits = [x < y, x <= y, x > y, x >= y, x == y, x != y];
                wc.push(
                    bits.iter()
                        .enumerate()
                        .map(|(k, v)| (*v as u32) << k)
                        .sum::<u32>(),
                );
            }
            let what = format!("n={n}");
            let (mut exact, mut loose, mut cmp) = (
                exact.to_host().unwrap(),
                loose.to_host().unwrap(),
                cmp.to_host().unwrap(),
            );
            let pair = |i: usize| vec![a[i], b[i]];
            exempt_known(dev, "float_ops/exact", &mut exact, &we, |i| {
                (pair(i / 5), we[i])
            });
            let wl32: Vec<f32> = wl.iter().map(|v| *v as f32).collect();
            exempt_known(dev, "float_ops/loose", &mut loose, &wl32, |i| {
                (pair(i / 3), wl32[i])
            });
            exempt_known(dev, "float_ops/cmp", &mut cmp, &wc, |i| (pair(i), 0.0));
            assert_bits_f32(&exact, &we, &what);
            assert_close(&loose, &wl, 1e-6, &format!("{what}, / and %"));
            assert_exact(&cmp, &wc, &what, |i| format!("{} vs {}", a[i], b[i]));
        }
    });
}

#[test]
fn grid_stride_loop_over_views_at_offsets() {
    // Tolerance: bitwise (one multiplication per element). Elements outside the view keep
    // their poison.
    let mut r = rng("grid_stride");
    on_every_backend(|dev| {
        for &n in ODD_SIZES {
            let a = floats(&mut r, n + 10, -10.0, 10.0);
            let b = floats(&mut r, n + 10, -10.0, 10.0);
            let (ab, bb) = (dev.upload(&a).unwrap(), dev.upload(&b).unwrap());
            let whole = poisoned(dev, n + 14, POISON_F32);
            let mut y = whole.slice(7..7 + n).unwrap();
            // 3 workgroups of 32: most invocations handle several elements.
            grid_stride::launch(
                dev,
                Grid::workgroups(3),
                &ab.slice(3..3 + n).unwrap(),
                &bb.slice(5..5 + n).unwrap(),
                &mut y,
            )
            .unwrap();
            let got = whole.to_host().unwrap();
            let mut want = vec![POISON_F32; n + 14];
            for j in 0..n {
                want[7 + j] = a[3 + j] * b[5 + j];
            }
            assert_bits_f32(&got, &want, &format!("n={n}"));
        }
    });
}

// ------------------------------------------------------------------------------ control flow, ids, bools

fn control_flow_ref(v: u32) -> [u32; 6] {
    let mut n = v % 1000 + 1;
    let mut steps = 0;
    while n != 1 {
        n = if n % 2 == 0 { n / 2 } else { 3 * n + 1 };
        steps += 1;
    }
    let mut k = v;
    let mut odd = 0;
    while k != 0 {
        let d = k % 10;
        k /= 10;
        if d % 2 == 1 {
            odd += d;
        }
    }
    let mut s = 0;
    for j in (v % 7..50).step_by(3) {
        if j % 5 == 0 {
            continue;
        }
        s += j;
        if s > 200 {
            break;
        }
    }
    let cls = match v % 3 {
        0 => v / 3 % 100 + 1,
        1 => (0..v % 5).sum::<u32>() + 200,
        _ => 300,
    };
    let signed: i32 = (-5..(v % 9) as i32 - 3)
        .map(|j| j * j * if j < 0 { -1 } else { 1 })
        .sum();
    [
        steps,
        odd,
        s,
        cls,
        signed as u32,
        if v % 4 == 0 { 1 } else { 2 },
    ]
}

#[test]
fn control_flow_while_loop_break_continue_return_if_value() {
    // Tolerance: exact.
    let mut r = rng("control_flow");
    on_every_backend(|dev| {
        for &n in ODD_SIZES {
            let mut x: Vec<u32> = (0..n).map(|_| r.random()).collect();
            for (i, v) in [0u32, 1, 2, 3, 4, 11, 999, u32::MAX].iter().enumerate() {
                if i < n {
                    x[i] = *v;
                }
            }
            let xb = dev.upload(&x).unwrap();
            let mut out = poisoned(dev, n * 6, POISON_U32);
            control_flow::launch(dev, Grid::threads(n), &xb, &mut out).unwrap();
            let want: Vec<u32> = x.iter().flat_map(|v| control_flow_ref(*v)).collect();
            assert_exact(&out.to_host().unwrap(), &want, &format!("n={n}"), |i| {
                format!("output {} of x = {}", i % 6, x[i / 6])
            });
        }
    });
}

/// Iterations and a hash of the values of `(a..b).step_by(s)` as Rust runs it, capped at 100
/// iterations as the kernel is.
fn step_by_ref<T: Copy>(it: impl Iterator<Item = T>, bits: impl Fn(T) -> u32) -> [u32; 2] {
    let (mut n, mut h) = (0u32, 0u32);
    for j in it.take(100) {
        n += 1;
        h = h.wrapping_mul(31).wrapping_add(bits(j));
    }
    [n, h]
}

#[test]
fn step_by_stops_where_the_next_value_would_overflow() {
    // Tolerance: exact.
    let mut r = rng("step_by_edges");
    let mut cases: Vec<(i32, i32, i32, u32, u32, u32)> = vec![
        (0, i32::MAX, 1 << 30, 0, u32::MAX, 1 << 31),
        (i32::MIN, i32::MAX, i32::MAX, u32::MAX - 5, u32::MAX, 3),
        (i32::MAX - 10, i32::MAX, 3, u32::MAX - 1, u32::MAX, 1),
        (i32::MIN, i32::MIN + 1, i32::MAX, 0, 1, u32::MAX),
        (-7, 20, 4, 7, 20, 4),
        (5, 5, 1, 5, 5, 1),
        (10, 0, 2, 10, 0, 2),
        (i32::MIN, 0, i32::MAX, 1, u32::MAX, u32::MAX - 1),
        (-3, i32::MAX, i32::MAX - 1, 3, u32::MAX, u32::MAX / 2),
    ];
    for _ in 0..200 {
        let (a, b): (i32, i32) = (r.random(), r.random());
        let (ua, ub): (u32, u32) = (r.random(), r.random());
        let s = r.random_range(1..=i32::MAX);
        let us = r.random_range(1..=u32::MAX);
        cases.push((a, b, s, ua, ub, us));
    }
    let want: Vec<u32> = cases
        .iter()
        .flat_map(|&(a, b, s, ua, ub, us)| {
            let signed = step_by_ref((a..b).step_by(s as usize), |j| j as u32);
            let unsigned = step_by_ref((ua..ub).step_by(us as usize), |j| j);
            [signed, unsigned].concat()
        })
        .chain(step_by_ref((0..i32::MAX).step_by(1 << 30), |j| j as u32))
        .chain(step_by_ref(
            (i32::MIN..i32::MAX).step_by(i32::MAX as usize),
            |j| j as u32,
        ))
        .chain(step_by_ref((0..u32::MAX).step_by(1 << 31), |j| j))
        .chain(step_by_ref((u32::MAX - 5..u32::MAX).step_by(3), |j| j))
        .collect();
    // The first constant case as the issue states it: 0 and 2^30, then 2^31 overflows.
    assert_eq!(
        &want[want.len() - 8..want.len() - 6],
        &[2, (1 << 30) as u32]
    );
    on_every_backend(|dev| {
        let a = dev
            .upload(&cases.iter().map(|c| c.0).collect::<Vec<_>>())
            .unwrap();
        let b = dev
            .upload(&cases.iter().map(|c| c.1).collect::<Vec<_>>())
            .unwrap();
        let s = dev
            .upload(&cases.iter().map(|c| c.2).collect::<Vec<_>>())
            .unwrap();
        let ua = dev
            .upload(&cases.iter().map(|c| c.3).collect::<Vec<_>>())
            .unwrap();
        let ub = dev
            .upload(&cases.iter().map(|c| c.4).collect::<Vec<_>>())
            .unwrap();
        let us = dev
            .upload(&cases.iter().map(|c| c.5).collect::<Vec<_>>())
            .unwrap();
        let mut out = poisoned(dev, want.len(), POISON_U32);
        step_by_edges::launch(
            dev,
            Grid::threads(cases.len()),
            &a,
            &b,
            &s,
            &ua,
            &ub,
            &us,
            &mut out,
        )
        .unwrap();
        assert_exact(&out.to_host().unwrap(), &want, "step_by", |i| {
            let what = ["i32 count", "i32 hash", "u32 count", "u32 hash"][i % 4];
            match cases.get(i / 4) {
                Some(c) => format!("{what} of {c:?}"),
                None => format!("constant-step loop {}", (i - cases.len() * 4) / 2),
            }
        });
    });
}

#[test]
fn step_by_zero_or_negative_at_run_time_faults_on_the_host_and_runs_no_iteration_on_gpus() {
    // Tolerance: exact.
    on_every_backend(|dev| {
        // Positive steps still run as in Rust.
        let mut out = poisoned(dev, 2, POISON_U32);
        step_by_run_time::launch(dev, 1, 10, 3, 4u32, &mut out).unwrap();
        assert_eq!(out.to_host().unwrap(), [4, 3], "steps 3 and 4 over 0..10");
        for (s, us, which) in [
            (0, 1u32, "i32"),
            (-2, 1, "i32"),
            (i32::MIN, 1, "i32"),
            (3, 0, "u32"),
        ] {
            let mut out = poisoned(dev, 2, POISON_U32);
            let r = step_by_run_time::launch(dev, 1, 10, s, us, &mut out);
            if dev.kind() == graphed::BackendKind::Host {
                let step = if which == "i32" { s as i64 } else { us as i64 };
                match r {
                    Err(graphed::Error::Fault(f)) => {
                        assert_eq!(f.kernel, "step_by_run_time");
                        assert_eq!(f.kind, graphed::FaultKind::BadStep { step }, "{f}");
                        let msg = f.to_string();
                        assert!(
                            msg.contains(&format!("step_by({step})")) && msg.contains("at least 1"),
                            "{msg}"
                        );
                    }
                    other => panic!("step ({s}, {us}): want a BadStep fault, got {other:?}"),
                }
            } else {
                r.unwrap();
                // A step below 1 runs no iteration; the other loop runs as in Rust.
                let count = |step: i64| {
                    if step < 1 {
                        0
                    } else {
                        10u32.div_ceil(step as u32)
                    }
                };
                let want = [count(s as i64), count(us as i64)];
                assert_eq!(
                    out.to_host().unwrap(),
                    want,
                    "step ({s}, {us}): no iterations"
                );
            }
        }
    });
}

#[test]
fn lavapipe_cuts_long_loops_short_as_a_known_issue() {
    // Tolerance: exact, except where `KNOWN_ISSUES` covers the adapter (reported).
    on_every_backend(|dev| {
        let n = 100_000u32;
        let want = (0..n).fold(1u32, |v, _| {
            v.wrapping_mul(1664525).wrapping_add(1013904223)
        });
        let mut out = poisoned(dev, 1, POISON_U32);
        long_loop::launch(dev, 1, n, &mut out).unwrap();
        let mut got = out.to_host().unwrap();
        exempt_known(dev, "long_loop", &mut got, &[want], |_| (vec![], 0.0));
        assert_eq!(got, [want], "{n} iterations");
    });
}

/// `Σ_k a[r, k]·b[k, c]` in f64.
fn matmul_f64(m: usize, n: usize, k: usize, a: &[f32], b: &[f32]) -> Vec<f64> {
    let mut c = vec![0.0f64; m * n];
    for r in 0..m {
        for kk in 0..k {
            let av = a[r * k + kk] as f64;
            for j in 0..n {
                c[r * n + j] += av * b[kk * n + j] as f64;
            }
        }
    }
    c
}

#[test]
fn matmul_and_reduce_rows_past_the_lavapipe_loop_cap() {
    // The library's kernels must not meet the `long_loop` known issue: exact on sums of ones,
    // else within 1e-5 (relative, whole output) of f64, on every backend.
    use graphed::kernels::elementwise::Act;
    use graphed::kernels::matmul::{matmul, matmul_row_sums, Epilogue, Gemm, Tile};
    use graphed::kernels::reduce::{reduce_rows, Reduce};
    let mut r = rng("loop_cap");
    on_every_backend(|dev| {
        // The issue's product: 1×1×65536 of ones, on both tilings.
        for tile in [Tile::Auto, Tile::T64] {
            let k = 65_536;
            let ones = dev.upload(&vec![1.0f32; k]).unwrap();
            let mut c = poisoned(dev, 1, POISON_F32);
            let g = Gemm::nn(1, 1, k).with_tile(tile);
            matmul(dev, g, &ones, &ones, &mut c, &Epilogue::none()).unwrap();
            assert_eq!(c.to_host().unwrap(), [k as f32], "{g:?} of ones");
        }
        // Random factors with a bias, an activation and accumulation, with the row sums.
        for (m, n, k, tile) in [(3, 5, 70_001, Tile::Auto), (2, 67, 65_600, Tile::T64)] {
            let a = floats(&mut r, m * k, 0.0, 1.0);
            let b = floats(&mut r, k * n, 0.0, 1.0);
            let bias = floats(&mut r, n, -1.0, 1.0);
            let c0 = floats(&mut r, m * n, -1.0, 1.0);
            let db0 = floats(&mut r, m, -1.0, 1.0);
            let p = matmul_f64(m, n, k, &a, &b);
            let want: Vec<f64> = (0..m * n)
                .map(|i| (p[i] + bias[i % n] as f64).max(0.0) + c0[i] as f64)
                .collect();
            let want_db: Vec<f64> = (0..m)
                .map(|row| {
                    let s: f64 = a[row * k..(row + 1) * k].iter().map(|&v| v as f64).sum();
                    s + db0[row] as f64
                })
                .collect();
            // `op(A) = A` is `m × k`, so its row sums are the sums of `a`'s rows.
            let (ab, bb, biasb) = (
                dev.upload(&a).unwrap(),
                dev.upload(&b).unwrap(),
                dev.upload(&bias).unwrap(),
            );
            let mut cb = dev.upload(&c0).unwrap();
            let mut dbb = dev.upload(&db0).unwrap();
            let g = Gemm::nn(m, n, k).with_tile(tile);
            let epi = Epilogue::bias_act(&biasb, Act::Relu).accumulate(true);
            matmul_row_sums(dev, g, &ab, &bb, &mut cb, &mut dbb, &epi).unwrap();
            assert_close(&cb.to_host().unwrap(), &want, 1e-5, &format!("{g:?}: C"));
            assert_close(
                &dbb.to_host().unwrap(),
                &want_db,
                1e-5,
                &format!("{g:?}: row sums"),
            );
        }
        // The issue's reduction: one row of 2^24 ones; then rows of 2^17 + 3 random values.
        let cols = 1 << 24;
        let x = dev.upload(&vec![1.0f32; cols]).unwrap();
        let mut out = poisoned(dev, 1, POISON_F32);
        reduce_rows(dev, Reduce::Sum, &x, cols, &mut out).unwrap();
        assert_eq!(out.to_host().unwrap(), [cols as f32], "Σ of 2^24 ones");
        let (rows, cols) = (3, (1 << 17) + 3);
        let xs = floats(&mut r, rows * cols, -1.0, 1.0);
        let x = dev.upload(&xs).unwrap();
        for op in [
            Reduce::Sum,
            Reduce::Mean,
            Reduce::Max,
            Reduce::SumSq,
            Reduce::L2,
        ] {
            let mut out = poisoned(dev, rows, POISON_F32);
            reduce_rows(dev, op, &x, cols, &mut out).unwrap();
            let want: Vec<f64> = xs.chunks(cols).map(|row| op.eval_f64(row)).collect();
            assert_close(
                &out.to_host().unwrap(),
                &want,
                1e-5,
                &format!("reduce_rows({op:?}) of {rows}×{cols}"),
            );
        }
    });
}

#[test]
fn ids_in_a_3d_workgroup_on_a_3d_grid() {
    // Tolerance: exact.
    on_every_backend(|dev| {
        for g in [[3u32, 2, 2], [1, 1, 1], [2, 3, 1]] {
            let wg = [4u32, 2, 3];
            let gs = [g[0] * wg[0], g[1] * wg[1], g[2] * wg[2]];
            let total = (gs[0] * gs[1] * gs[2]) as usize;
            let mut out = poisoned(dev, total * 18, POISON_U32);
            ids_3d::launch(dev, Grid::workgroups_3d(g[0], g[1], g[2]), &mut out).unwrap();
            let mut want = vec![0u32; total * 18];
            for z in 0..gs[2] {
                for y in 0..gs[1] {
                    for x in 0..gs[0] {
                        let gid = [x, y, z];
                        let lin = (x + gs[0] * (y + gs[1] * z)) as usize;
                        let w = &mut want[lin * 18..lin * 18 + 18];
                        for d in 0..3 {
                            w[d] = gid[d];
                            w[3 + d] = gid[d] % wg[d];
                            w[6 + d] = gid[d] / wg[d];
                            w[9 + d] = g[d];
                            w[12 + d] = wg[d];
                            w[15 + d] = gs[d];
                        }
                    }
                }
            }
            assert_exact(
                &out.to_host().unwrap(),
                &want,
                &format!("grid {g:?}"),
                |i| format!("invocation {}, output {}", i / 18, i % 18),
            );
        }
    });
}

#[test]
fn bool_parameters_and_operators() {
    // Tolerance: exact.
    let mut r = rng("bool_logic");
    on_every_backend(|dev| {
        for flip in [false, true] {
            let n = 65;
            let mut x: Vec<u32> = (0..n).map(|_| r.random()).collect();
            for (i, v) in x.iter_mut().take(8).enumerate() {
                *v = (*v & !7) | i as u32;
            }
            let xb = dev.upload(&x).unwrap();
            let mut out = poisoned(dev, n, POISON_U32);
            bool_logic::launch(dev, Grid::threads(n), flip, &xb, &mut out).unwrap();
            let want: Vec<u32> = x
                .iter()
                .map(|v| {
                    let a = v & 1 == 1;
                    let b = v & 2 == 2;
                    let c = (v & 4 == 4) != flip;
                    let mut m = a ^ b;
                    m &= c | a;
                    m |= !b && c;
                    m ^= a == c;
                    let bits = [
                        a && b,
                        a || c,
                        !a,
                        a & c,
                        b | c,
                        a ^ c,
                        a != b,
                        m,
                        if c { a } else { b },
                        if a { b } else { c },
                    ];
                    bits.iter().enumerate().map(|(k, b)| (*b as u32) << k).sum()
                })
                .collect();
            assert_exact(
                &out.to_host().unwrap(),
                &want,
                &format!("flip={flip}"),
                |i| format!("x = {}", x[i]),
            );
        }
    });
}

#[test]
fn constant_expressions_keep_rust_semantics() {
    // Tolerance: bitwise (NaN matches any NaN).
    let mut r = rng("constants");
    on_every_backend(|dev| {
        let seed: i32 = r.random_range(1..1000);
        let mut of = poisoned(dev, 17, POISON_F32);
        let mut oi = poisoned(dev, 15, POISON_I32);
        let mut ou = poisoned(dev, 11, POISON_U32);
        constants::launch(dev, Grid::workgroups(1), seed, &mut of, &mut oi, &mut ou).unwrap();
        let f_max = f32::MAX;
        let want_f = [
            f_max * 2.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::NAN,
            f32::NEG_INFINITY,
            f32::INFINITY,
            f32::NAN,
            f32::MIN_POSITIVE * 0.5,
            -0.0,
            f32::NAN,
            3.0,
            f32::INFINITY,
            f32::NAN,
            f32::INFINITY,
            f32::INFINITY,
            f32::INFINITY,
        ];
        let want_i = [
            i32::MIN,
            i32::MIN,
            7,
            0,
            0,
            2,
            i32::MIN,
            i32::MIN,
            i32::MAX,
            0,
            i32::MIN,
            i32::MIN,
            seed,
            seed << 8,
            1,
        ];
        let want_u = [
            u32::MAX,
            1,
            5,
            0,
            1,
            u32::MAX >> 3,
            0,
            u32::MAX,
            u32::MAX,
            (seed as u32) >> 8,
            0x8000_0000,
        ];
        let mut of = of.to_host().unwrap();
        if let Some(issue) = known_issue(dev, "constants/of[15]", &[], want_f[15]) {
            let detail = format!("(seed as f32) / 0.0: got {:e}", of[15]);
            note_known(issue, "constants/of[15]", &detail, of[15] != want_f[15]);
            of[15] = want_f[15];
        }
        assert_bits_f32(&of, &want_f, "f32 constants");
        assert_exact(&oi.to_host().unwrap(), &want_i, "i32 constants", |_| {
            String::new()
        });
        assert_exact(&ou.to_host().unwrap(), &want_u, "u32 constants", |_| {
            String::new()
        });
    });
}

/// How `ieee_special_values_through_builtins` checks one operation of `specials`.
#[derive(Clone, Copy)]
enum Check {
    /// Bitwise.
    Exact,
    /// Infinities, NaN and zeros (with their sign) exactly; other values within this
    /// relative error per element.
    Close(f64),
}

/// Operations of `specials`, in output order.
const SPECIAL_OPS: &[(&str, Check)] = &[
    ("min", Check::Exact),
    ("max", Check::Exact),
    ("clamp", Check::Exact),
    ("abs", Check::Exact),
    ("floor", Check::Exact),
    ("sqrt", Check::Close(3e-7)),
    ("v*0", Check::Exact),
    ("v-v", Check::Exact),
    ("1/v", Check::Close(3e-7)),
    ("exp", Check::Close(1e-6)),
    ("log", Check::Close(1e-6)),
    ("tanh", Check::Close(1e-6)),
    ("v*0.5", Check::Exact),
    ("round", Check::Exact),
    ("ceil", Check::Exact),
    ("sign", Check::Exact),
];

// The kernel's `clamp` is `max` then `min`, which differs from `f32::clamp` for NaN.
#[allow(clippy::manual_clamp)]
#[test]
fn ieee_special_values_through_builtins() {
    // Tolerance: per operation, see `SPECIAL_OPS`; NaN matches any NaN. Elements listed in
    // `KNOWN_ISSUES` for the adapter are reported, not checked.
    let x: Vec<f32> = vec![
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        0.0,
        -0.0,
        1e-40,
        -1e-40,
        f32::MIN_POSITIVE,
        f32::MAX,
        -f32::MAX,
        -0.4,
        -1.0,
        0.3,
        2.5,
        1e-3,
    ];
    let n = x.len();
    on_every_backend(|dev| {
        let xb = dev.upload(&x).unwrap();
        let mut out = poisoned(dev, n * SPECIAL_OPS.len(), POISON_F32);
        specials::launch(dev, Grid::threads(n), &xb, &mut out).unwrap();
        let got = out.to_host().unwrap();
        let mut bad = Vec::new();
        for (k, (op, check)) in SPECIAL_OPS.iter().enumerate() {
            for (i, &v) in x.iter().enumerate() {
                let want = match *op {
                    "min" => v.min(1.0),
                    "max" => v.max(1.0),
                    "clamp" => v.max(0.0).min(1.0),
                    "abs" => v.abs(),
                    "floor" => v.floor(),
                    "sqrt" => v.sqrt(),
                    "v*0" => v * 0.0,
                    "v-v" => v - v,
                    "1/v" => 1.0 / v,
                    "exp" => v.exp(),
                    "log" => v.ln(),
                    "tanh" => v.tanh(),
                    "v*0.5" => v * 0.5,
                    "round" => v.round_ties_even(),
                    "ceil" => v.ceil(),
                    "sign" => {
                        if v > 0.0 {
                            1.0
                        } else if v < 0.0 {
                            -1.0
                        } else {
                            v
                        }
                    }
                    _ => unreachable!(),
                };
                let g = got[k * n + i];
                let ok = if g.is_nan() || want.is_nan() {
                    g.is_nan() && want.is_nan() && g.to_bits() != POISON_F32.to_bits()
                } else if ["min", "max", "clamp"].contains(op) && g == 0.0 && want == 0.0 {
                    // IEEE 754 leaves the sign of min/max of two zeros open.
                    true
                } else {
                    match check {
                        Check::Exact => g.to_bits() == want.to_bits(),
                        Check::Close(tol) => {
                            if want.is_finite() && want != 0.0 {
                                ((g as f64 - want as f64) / want as f64).abs() <= *tol
                            } else {
                                g.to_bits() == want.to_bits()
                            }
                        }
                    }
                };
                let check_name = format!("specials/{op}");
                if let Some(issue) = known_issue(dev, &check_name, &[v], want) {
                    let detail = format!("of {v:e}: got {g:e}, Rust gives {want:e}");
                    note_known(issue, &check_name, &detail, !ok);
                    continue;
                }
                if !ok {
                    bad.push(format!(
                        "{op}({v:e}): got {g:e} ({:#010x}), want {want:e}",
                        g.to_bits()
                    ));
                }
            }
        }
        assert!(
            bad.is_empty(),
            "{} differ:\n  {}",
            bad.len(),
            bad.join("\n  ")
        );
    });
}
