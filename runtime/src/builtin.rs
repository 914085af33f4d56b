//! Kernels the runtime itself launches (fills, and the transfers of 16-bit views that do not
//! start or end on a 32-bit word), written in the kernel language.

use graphed_macros::kernel;

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
