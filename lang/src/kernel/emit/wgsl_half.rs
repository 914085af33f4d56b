//! `f16` and `bf16` in WGSL. A 16-bit value is its bits in the low half of a `u32`, so moves,
//! `select` and parameters keep every bit (NaN payloads too) and no driver conversion rule
//! is involved: WGSL lets an `f32 → f16` conversion round either way and leaves overflow
//! undefined, so the conversions are integer code here, rounding to nearest with ties to
//! even, overflowing to infinity and quieting NaN exactly as the `half` crate on the host and
//! the CUDA prelude do (`check/half.rs` reduces every 16-bit operation to them).
//!
//! Storage follows the runtime's packing (element `e` of a buffer in half `e % 2` of word
//! `e / 2`; a view's offset counts elements):
//! - `f16` slices are `array<f16>` (`enable f16;`, so the adapter needs `shader-f16`): the
//!   hardware stores 16 bits, never touching the neighbouring element. Values cross between
//!   `f16` and the bits as exact conversions through `f32` (`f32(h)`, `f16(x)` of a value
//!   `f16` holds): naga 30 mistypes `bitcast` between `u32` and `vec2<f16>`;
//! - `bf16` slices (WGSL has no `bf16`) are words: a read is a shift; in a slice the kernel
//!   writes, the words are `atomic<u32>` and a write clears its half and sets it with two
//!   atomics (`atomicAnd`, `atomicOr`), so an invocation writing the other half of the word
//!   at the same time keeps its element.

use crate::kernel::ir::{ParamKind, Ty};

/// How a 16-bit slice is stored in WGSL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Layout {
    /// `array<f16>`.
    F16,
    /// `array<u32>`, read only.
    Words,
    /// `array<atomic<u32>>`, written by the kernel.
    AtomicWords,
}

/// The layout of a kernel parameter, when it is a 16-bit slice.
pub(super) fn slice_layout(kind: &ParamKind) -> Option<Layout> {
    match *kind {
        ParamKind::Slice { elem: Ty::F16, .. } => Some(Layout::F16),
        ParamKind::Slice {
            elem: Ty::BF16,
            mutable,
            ..
        } => Some(if mutable {
            Layout::AtomicWords
        } else {
            Layout::Words
        }),
        _ => None,
    }
}

impl Layout {
    /// The element type of the binding's array.
    pub(super) fn array_elem(self) -> &'static str {
        match self {
            Layout::F16 => "f16",
            Layout::Words => "u32",
            Layout::AtomicWords => "atomic<u32>",
        }
    }

    /// The bits (a `u32`) of element `e` (an element index expression) of array `arr`.
    pub(super) fn read(self, arr: &str, e: &str) -> String {
        match self {
            Layout::F16 => format!("gd_f32_to_f16(f32({arr}[{e}]))"),
            Layout::Words => format!("(({arr}[({e}) >> 1u] >> ((({e}) & 1u) << 4u)) & 0xffffu)"),
            Layout::AtomicWords => {
                format!("((atomicLoad(&{arr}[({e}) >> 1u]) >> ((({e}) & 1u) << 4u)) & 0xffffu)")
            }
        }
    }

    /// The statement writing bits `v` (a `u32` below 2^16) to element `e` of `arr`.
    pub(super) fn write(self, arr: &str, e: &str, v: &str) -> String {
        match self {
            Layout::F16 => format!("{arr}[{e}] = f16(gd_f16_to_f32({v}));"),
            Layout::Words => unreachable!("a slice the kernel writes is atomic words"),
            Layout::AtomicWords => format!(
                "{{ let gd_e = {e}; let gd_b = {v}; let gd_s = (gd_e & 1u) << 4u; atomicAnd(&{arr}[gd_e >> 1u], ~(0xffffu << gd_s)); atomicOr(&{arr}[gd_e >> 1u], gd_b << gd_s); }}"
            ),
        }
    }
}

/// The helper converting `from` to `to` (one of them `f32`, the other 16-bit).
pub(super) fn conversion(from: Ty, to: Ty) -> &'static str {
    match (from, to) {
        (Ty::F32, Ty::F16) => "gd_f32_to_f16",
        (Ty::F32, _) => "gd_f32_to_bf16",
        (Ty::F16, _) => "gd_f16_to_f32",
        _ => "gd_bf16_to_f32",
    }
}

/// The source of a conversion helper named by [`conversion`].
pub(super) fn helper_source(name: &str) -> Option<&'static str> {
    Some(match name {
        // Normal results round at bit 13 by adding just under half an ulp plus the ulp's
        // low bit; results below 2^-14 shift the significand right and round the remainder.
        "gd_f32_to_f16" => {
            "fn gd_f32_to_f16(x: f32) -> u32 {
    let u = bitcast<u32>(x);
    let s = (u >> 16u) & 0x8000u;
    let a = u & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return s | 0x7e00u | ((a >> 13u) & 0x3ffu);
    }
    if (a >= 0x477ff000u) {
        return s | 0x7c00u;
    }
    if (a >= 0x38800000u) {
        return s | ((a + 0xfffu + ((a >> 13u) & 1u) - 0x38000000u) >> 13u);
    }
    if (a <= 0x33000000u) {
        return s;
    }
    let m = (a & 0x7fffffu) | 0x800000u;
    let sh = 126u - (a >> 23u);
    let q = m >> sh;
    let r = m & ((1u << sh) - 1u);
    let h = 1u << (sh - 1u);
    return s | (q + select(0u, 1u, r > h || (r == h && (q & 1u) == 1u)));
}
"
        }
        // Subnormals are `m * 2^-24`, exact in `f32` (and normal there, so no driver's
        // flush-to-zero touches them). The three cases are computed and picked by `select`,
        // without branches: the portable MMA widens 128 values a call, and a tiled product's
        // 64 calls of an `if` form made lavapipe's LLVM spend minutes on one shader (the
        // 128×128 `f16` product had not compiled after 210 s; with `select` it takes 89 s, as
        // `bf16` does: 87 s).
        "gd_f16_to_f32" => {
            "fn gd_f16_to_f32(h: u32) -> f32 {
    let s = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    let special = s | 0x7f800000u | select(0u, 0x400000u | (m << 13u), m != 0u);
    let sub = s | bitcast<u32>(f32(m) * bitcast<f32>(0x33800000u));
    let norm = s | ((e + 112u) << 23u) | (m << 13u);
    return bitcast<f32>(select(select(norm, sub, e == 0u), special, e == 0x1fu));
}
"
        }
        "gd_f32_to_bf16" => {
            "fn gd_f32_to_bf16(x: f32) -> u32 {
    let u = bitcast<u32>(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (u >> 16u) | 0x40u;
    }
    return (u + 0x7fffu + ((u >> 16u) & 1u)) >> 16u;
}
"
        }
        "gd_bf16_to_f32" => {
            "fn gd_bf16_to_f32(h: u32) -> f32 {
    return bitcast<f32>(select(h, h | 0x40u, (h & 0x7fffu) > 0x7f80u) << 16u);
}
"
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::helper_source;

    /// The widening helpers run 128 times in each call of the portable MMA, so they stay
    /// branch-free: with an `if` in `gd_f16_to_f32`, lavapipe took minutes to compile one
    /// tiled `f16` product (see the helper's comment). Their results are checked bitwise, for
    /// every bit pattern, by `tests/half_lang.rs`.
    #[test]
    fn the_widening_helpers_have_no_branches() {
        for name in ["gd_f16_to_f32", "gd_bf16_to_f32"] {
            let src = helper_source(name).expect(name);
            assert!(src.starts_with(&format!("fn {name}(")), "{src}");
            let body = &src[src.find('{').unwrap()..];
            for word in ["if", "else", "switch", "loop", "for", "while"] {
                let branches = body
                    .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                    .filter(|w| *w == word)
                    .count();
                assert_eq!(branches, 0, "`{word}` in {name}:\n{src}");
            }
            assert!(body.contains("select("), "{src}");
        }
        assert!(helper_source("gd_no_such_helper").is_none());
    }
}
