//! Kernels the runtime itself launches (fills, and the transfers of 16-bit views that do not
//! start or end on a 32-bit word), written in the kernel language.

use graphed_macros::{device, kernel};

/// Sets every element of `y` to the bits `value`.
#[kernel(workgroup = 256)]
pub fn fill_u32(value: u32, y: &mut [u32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = value;
    }
}

/// Sets the bits `mask` of each word of `y` to those of `pattern`, keeping the others; the
/// first word keeps also what `head` leaves out, the last what `tail` leaves out. A fill of a
/// 16-bit view: the words it covers, the halves at either end that belong to neighbours kept.
#[kernel(workgroup = 256)]
pub fn fill_halves(pattern: u32, head: u32, tail: u32, y: &mut [u32]) {
    let i = global_id().x;
    if i < y.len() {
        let mut m = 4294967295u32;
        if i == 0u32 {
            m = m & head;
        }
        if i + 1u32 == y.len() {
            m = m & tail;
        }
        if m == 4294967295u32 {
            y[i] = pattern;
        } else {
            y[i] = (y[i] & !m) | (pattern & m);
        }
    }
}

/// Copies `len` 16-bit elements from element `src_first` of the words `src` to element
/// `dst_first` of the words `dst` (elements counted from each view's first word, so each
/// `*_first` is 0 or 1): one invocation per word of `dst`, so no two write one word.
#[kernel(workgroup = 256)]
pub fn copy_halves(src_first: u32, dst_first: u32, len: u32, src: &[u32], dst: &mut [u32]) {
    let i = global_id().x;
    if i < dst.len() {
        let mut w = dst[i];
        for h in 0u32..2u32 {
            let e = i * 2u32 + h;
            if e >= dst_first && e < dst_first + len {
                let s = src_first + e - dst_first;
                let bits = (src[s / 2u32] >> (16u32 * (s % 2u32))) & 65535u32;
                let at = 16u32 * h;
                w = (w & !(65535u32 << at)) | (bits << at);
            }
        }
        dst[i] = w;
    }
}

/// Copies `len` 16-bit elements between element `src_first` and element `dst_first` of the
/// words `y` (views of one allocation that share a word): one invocation, element by
/// element, so the shared word is never read by one invocation while another writes it.
/// Source and destination elements do not overlap (the copy is checked), so order is free.
#[kernel(workgroup = 1)]
pub fn copy_halves_within(src_first: u32, dst_first: u32, len: u32, y: &mut [u32]) {
    if global_id().x == 0u32 {
        for k in 0u32..len {
            let s = src_first + k;
            let d = dst_first + k;
            let bits = (y[s / 2u32] >> (16u32 * (s % 2u32))) & 65535u32;
            let at = 16u32 * (d % 2u32);
            y[d / 2u32] = (y[d / 2u32] & !(65535u32 << at)) | (bits << at);
        }
    }
}

/// The bf16 bits (low half) nearest the f32 bits `b`, ties to even; NaN stays NaN (quietened),
/// past the largest bf16 rounds to ±∞.
#[device]
fn bf16_of_f32_bits(b: u32) -> u32 {
    if (b & 2147483647u32) > 2139095040u32 {
        return (b >> 16u32) | 64u32;
    }
    (b + 32767u32 + ((b >> 16u32) & 1u32)) >> 16u32
}

/// The f16 bits (low half) nearest the f32 bits `b`, ties to even: subnormals, ±∞ past 65504,
/// signed zero below half the smallest subnormal; NaN stays NaN (quietened, payload's top kept).
#[device]
fn f16_of_f32_bits(b: u32) -> u32 {
    let sign = (b >> 16u32) & 32768u32;
    let e = (b >> 23u32) & 255u32;
    let man = b & 8388607u32;
    if e == 255u32 {
        let quiet = if man != 0u32 { 512u32 } else { 0u32 };
        return sign | 31744u32 | quiet | (man >> 13u32);
    }
    // The f16 exponent field of a normal result, biased by 15 (+ 112 so it stays unsigned).
    if e >= 143u32 {
        return sign | 31744u32;
    }
    if e <= 112u32 {
        // Subnormal f16 (or zero): the significand with its hidden bit, shifted right by
        // 126 − e (≥ 14), rounded to nearest even on the bits shifted out.
        let shift = 126u32 - e;
        if shift > 24u32 {
            return sign;
        }
        let full = man | 8388608u32;
        let kept = full >> shift;
        let half = 1u32 << (shift - 1u32);
        let rest = full & ((half << 1u32) - 1u32);
        let up = rest > half || (rest == half && (kept & 1u32) == 1u32);
        return sign | (kept + select(up, 1u32, 0u32));
    }
    let base = sign | ((e - 112u32) << 10u32) | (man >> 13u32);
    let rest = man & 8191u32;
    let up = rest > 4096u32 || (rest == 4096u32 && (base & 1u32) == 1u32);
    // A carry out of the significand moves to the next exponent (65520 and up: +∞).
    base + select(up, 1u32, 0u32)
}

/// The f32 bits of the f16 bits `h` (exact; NaN quietened).
#[device]
fn f32_bits_of_f16(h: u32) -> u32 {
    let sign = (h & 32768u32) << 16u32;
    let e = (h >> 10u32) & 31u32;
    let m = h & 1023u32;
    if e == 31u32 {
        let quiet = if m != 0u32 { 4194304u32 } else { 0u32 };
        return sign | 2139095040u32 | quiet | (m << 13u32);
    }
    if e == 0u32 {
        if m == 0u32 {
            return sign;
        }
        // Subnormal: normalise so the hidden bit (1 << 10) is set.
        let mut k = 0u32;
        let mut v = m;
        while (v & 1024u32) == 0u32 {
            v = v << 1u32;
            k += 1u32;
        }
        return sign | ((113u32 - k) << 23u32) | ((v & 1023u32) << 13u32);
    }
    sign | ((e + 112u32) << 23u32) | (m << 13u32)
}

/// The f32 bits of the bf16 bits `h` (exact; NaN quietened).
#[device]
fn f32_bits_of_bf16(h: u32) -> u32 {
    if (h & 32767u32) > 32640u32 {
        return (h | 64u32) << 16u32;
    }
    h << 16u32
}

/// `len` f32 values (their bits, `src`) rounded into the 16-bit words `dst` from its first
/// element: bf16 when `to_bf16`, else f16. Each invocation does words `global_id().x`,
/// `+ global_size().x`, … (any grid covers any length); the high half of a last word past
/// `len` is kept.
#[kernel(workgroup = 256)]
pub fn cast_f32_to_half(to_bf16: bool, len: u32, src: &[u32], dst: &mut [u32]) {
    let mut i = global_id().x;
    while i < dst.len() {
        let mut w = 0u32;
        for h in 0u32..2u32 {
            let e = i * 2u32 + h;
            let bits = if e < len {
                if to_bf16 {
                    bf16_of_f32_bits(src[e])
                } else {
                    f16_of_f32_bits(src[e])
                }
            } else {
                (dst[i] >> (16u32 * h)) & 65535u32
            };
            w = w | (bits << (16u32 * h));
        }
        dst[i] = w;
        i += global_size().x;
    }
}

/// `dst.len()` 16-bit values (bf16 when `from_bf16`, else f16) of the words `src`, from its
/// first element, widened into the f32 bits `dst` (a grid-stride loop, as above).
#[kernel(workgroup = 256)]
pub fn cast_half_to_f32(from_bf16: bool, src: &[u32], dst: &mut [u32]) {
    let mut i = global_id().x;
    while i < dst.len() {
        let h = (src[i / 2u32] >> (16u32 * (i % 2u32))) & 65535u32;
        dst[i] = if from_bf16 {
            f32_bits_of_bf16(h)
        } else {
            f32_bits_of_f16(h)
        };
        i += global_size().x;
    }
}
