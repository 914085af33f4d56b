//! What the checked variants of the GPU targets share: the fault record, the numbering of
//! checked targets, and the kernel's identity in a record.
//!
//! In a checked variant every slice and workgroup-array index is compared with the length
//! before the access. Out of range, the first such access of the device (a compare-exchange
//! on word 0 of the fault record) writes [`RECORD_WORDS`] words: `1`, the kernel id
//! ([`kernel_id`]), the target ([`targets`]), the index and the length. The access itself is
//! made harmless: a read gives 0, a write or an atomic is dropped (an atomic's result is 0).
//! The invocation carries on rather than returning, so every invocation still reaches every
//! `barrier()` it reached before (an early return under an index check would be a barrier
//! under divergent control flow). The runtime reads the record at the next synchronisation.
//!
//! Per-invocation arrays are numbered after the workgroup arrays in [`targets`], the
//! kernel's first and then each helper's ([`helper_array_base`]); their
//! reads and writes go through each emitter's checked access (`checked_read` /
//! `checked_write` in `wgsl.rs` and `cuda.rs`) as workgroup arrays do.

use crate::kernel::ir::Kernel;

/// Words in the device's fault record: flag, kernel id, target, index, length, and three
/// reserved (a 32-byte record).
pub const RECORD_WORDS: u32 = 8;

/// The kernel's identity in a fault record: FNV-1a of its unchecked WGSL, which holds its
/// name, signature and body. Two kernels with one id have the same source, so the same
/// names: the report is right whichever the runtime finds.
pub fn kernel_id(unchecked_wgsl: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in unchecked_wgsl.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The names a fault record's target number stands for: every parameter in order (so a
/// slice's number is its parameter index), then the workgroup arrays in declaration order.
pub fn targets(k: &Kernel) -> Vec<String> {
    k.params
        .iter()
        .map(|p| p.name.clone())
        .chain(k.shared.iter().map(|s| source_name(&s.name).to_string()))
        .chain(k.arrays.iter().map(|a| a.source.clone()))
        .chain(
            k.helpers
                .iter()
                .flat_map(|f| f.arrays.iter().map(|a| a.source.clone())),
        )
        .collect()
}

/// The name a workgroup array has in the source (its emitted name without the checker's
/// `_N` suffix; a non-ASCII name keeps the checker's spelling), for fault messages.
pub fn source_name(mangled: &str) -> &str {
    match mangled.rsplit_once('_') {
        Some((base, n))
            if !base.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) =>
        {
            base
        }
        _ => mangled,
    }
}

/// The target number of workgroup array `s`.
pub fn shared_target(k: &Kernel, s: usize) -> usize {
    k.params.len() + s
}

/// The target number of per-invocation array `a` (after the workgroup arrays).
pub fn array_target(k: &Kernel, a: usize) -> usize {
    k.params.len() + k.shared.len() + a
}

/// The target number of the first per-invocation array of helper `h` (after the kernel's
/// and those of the helpers before it).
pub fn helper_array_base(k: &Kernel, h: usize) -> usize {
    array_target(k, k.arrays.len()) + k.helpers[..h].iter().map(|f| f.arrays.len()).sum::<usize>()
}
