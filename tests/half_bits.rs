//! The bits of `f16` and `bf16` values in the kernel language, on every backend:
//! `x.to_bits()` (the 16 bits as a `u32`, zero-extended) and `f16::from_bits(w)` /
//! `bf16::from_bits(w)` (the value of the low 16 bits of a `u32`, the high 16 ignored).
//! Nothing is converted, so every pattern — NaN payloads, subnormals, infinities — comes
//! back bitwise; checked on random words and the special patterns.

mod common;

use common::{on_every_backend, rng};
use graphed::prelude::*;
use graphed::BackendKind;
use rand::Rng;

/// Two 16-bit values packed in one word, `lo` in the low half (a fragment register's pair).
#[device]
fn pack2_bf16(lo: bf16, hi: bf16) -> u32 {
    lo.to_bits() | (hi.to_bits() << 16u32)
}

/// Per word `w[i]`: `y[i]` is the `bf16` of its low half; `z[3i]` is that value's bits (the
/// high half must be dropped), `z[3i + 1]` the word rebuilt from its halves through a
/// helper, `z[3i + 2]` the bits of `x[i]` (zero-extended: nothing above bit 15).
#[kernel(workgroup = 64)]
pub fn bits_bf16(w: &[u32], x: &[bf16], y: &mut [bf16], z: &mut [u32]) {
    let i = global_id().x;
    if i < w.len() {
        let lo = bf16::from_bits(w[i]);
        y[i] = lo;
        z[3 * i] = lo.to_bits();
        z[3 * i + 1] = pack2_bf16(lo, bf16::from_bits(w[i] >> 16u32));
        z[3 * i + 2] = x[i].to_bits();
    }
}

/// [`bits_bf16`] for `f16`, the helper's packing written inline.
#[kernel(workgroup = 64)]
pub fn bits_f16(w: &[u32], x: &[f16], y: &mut [f16], z: &mut [u32]) {
    let i = global_id().x;
    if i < w.len() {
        let lo = f16::from_bits(w[i]);
        y[i] = lo;
        z[3 * i] = lo.to_bits();
        z[3 * i + 1] = lo.to_bits() | (f16::from_bits(w[i] >> 16u32).to_bits() << 16u32);
        z[3 * i + 2] = x[i].to_bits();
    }
}

const ALL: &[&graphed::KernelDef] = &[&bits_bf16::DEF, &bits_f16::DEF];

/// Random words, with the special patterns of both types in both halves.
fn words(rng: &mut impl Rng) -> Vec<u32> {
    let special: [u16; 10] = [
        0x0000, 0x8000, 0x0001, 0x7f80, 0xff80, 0x7fc1, 0x7c00, 0x7e01, 0xfc01, 0x03ff,
    ];
    let mut v: Vec<u32> = special
        .iter()
        .flat_map(|&a| special.iter().map(move |&b| a as u32 | (b as u32) << 16))
        .collect();
    v.extend((0..157).map(|_| rng.random::<u32>()));
    v
}

/// Whether `dev` keeps a NaN's payload through an `f16` slice (see `tests/half_lang.rs`:
/// wgpu's `array<f16>` crosses to the kernel's bits through `f32`, which may canonicalise it).
fn f16_slice_keeps_nan(dev: &Device) -> bool {
    dev.kind() != BackendKind::Wgpu
}

fn run<T: graphed::Element>(
    dev: &Device,
    w: &[u32],
    x: &[T],
    launch: impl Fn(&Device, &Buffer<u32>, &Buffer<T>, &mut Buffer<T>, &mut Buffer<u32>),
) -> (Vec<T>, Vec<u32>) {
    let wb = dev.upload(w).unwrap();
    let xb = dev.upload(x).unwrap();
    let mut y = dev.alloc::<T>(w.len()).unwrap();
    let mut z = dev.upload(&vec![0xdead_beefu32; 3 * w.len()]).unwrap();
    launch(dev, &wb, &xb, &mut y, &mut z);
    (y.to_host().unwrap(), z.to_host().unwrap())
}

fn check(dev: &Device, what: &str, w: &[u32], x: &[u16], y: &[u16], z: &[u32], y_nan_loose: bool) {
    let is_nan = |b: u16| b & 0x7c00 == 0x7c00 && b & 0x03ff != 0;
    for i in 0..w.len() {
        let lo = (w[i] & 0xffff) as u16;
        let case = format!("[{}] {what} word {i} ({:#010x})", dev.kind(), w[i]);
        assert!(
            y[i] == lo || (y_nan_loose && is_nan(lo) && is_nan(y[i])),
            "{case}: from_bits stored {:#06x}, want {lo:#06x}",
            y[i]
        );
        assert_eq!(z[3 * i], lo as u32, "{case}: from_bits then to_bits");
        assert_eq!(
            z[3 * i + 1],
            w[i],
            "{case}: the word rebuilt from its halves"
        );
        assert_eq!(
            z[3 * i + 2],
            x[i] as u32,
            "{case}: to_bits of a slice element"
        );
    }
}

#[test]
fn kernels_validate_and_compile() {
    common::assert_wgsl_valid(ALL);
    common::assert_cuda_compiles(ALL);
    assert!(!bits_bf16::DEF.needs_shader_f16());
}

#[test]
fn bf16_bits_round_trip_on_every_backend() {
    let mut r = rng("bits_bf16");
    let w = words(&mut r);
    // Slice elements: every pattern, NaN payloads and subnormals included.
    let x: Vec<bf16> = w
        .iter()
        .map(|&v| bf16::from_bits((v >> 8) as u16))
        .collect();
    on_every_backend(|dev| {
        let (y, z) = run(dev, &w, &x, |dev, w, x, y, z| {
            bits_bf16::launch(dev, w.len(), w, x, y, z).unwrap()
        });
        let xb: Vec<u16> = x.iter().map(|v| v.to_bits()).collect();
        let yb: Vec<u16> = y.iter().map(|v| v.to_bits()).collect();
        check(dev, "bf16", &w, &xb, &yb, &z, false);
    });
}

#[test]
fn f16_bits_round_trip_on_every_backend() {
    let mut r = rng("bits_f16");
    let w = words(&mut r);
    on_every_backend(|dev| {
        // NaN-free slice elements where the slice may canonicalise a NaN on the way in.
        let x: Vec<f16> = w
            .iter()
            .map(|&v| f16::from_bits((v >> 8) as u16))
            .map(|h| {
                if h.is_nan() && !f16_slice_keeps_nan(dev) {
                    f16::from_bits(h.to_bits() & 0x83ff)
                } else {
                    h
                }
            })
            .collect();
        let (y, z) = run(dev, &w, &x, |dev, w, x, y, z| {
            bits_f16::launch(dev, w.len(), w, x, y, z).unwrap()
        });
        let xb: Vec<u16> = x.iter().map(|v| v.to_bits()).collect();
        let yb: Vec<u16> = y.iter().map(|v| v.to_bits()).collect();
        check(dev, "f16", &w, &xb, &yb, &z, !f16_slice_keeps_nan(dev));
    });
}

/// The helper's Rust form (for the CPU) packs as the kernels do.
#[test]
fn the_helper_packs_on_the_cpu() {
    let (lo, hi) = (bf16::from_bits(0x3f80), bf16::from_bits(0xffc1));
    assert_eq!(pack2_bf16(lo, hi), 0xffc1_3f80);
}
