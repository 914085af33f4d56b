//! Helpers of the kernel tests: random inputs, poisoned outputs, f64 references, tolerances.

pub use graphed_runtime::testing::{
    assert_close, assert_close_floor, floats, on_every_backend_own_wgpu as on_every_backend,
    poisoned, rng,
};

/// Odd sizes: not multiples of a workgroup or tile.
pub const SIZES: &[usize] = &[1, 7, 63, 65, 1000, 1023, 4097];

/// The per-invocation arrays of `source` (`float acc[16] = {};` in CUDA C, `var acc: array<f32, 16>`
/// in WGSL) and every index each is read or written at.
fn array_indices(source: &str, cuda: bool) -> Vec<(String, String)> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut names = Vec::new();
    for line in source.lines().map(str::trim) {
        let name = if cuda {
            ["float ", "int ", "gd_u32 ", "bool "]
                .iter()
                .find_map(|t| line.strip_prefix(t))
                .filter(|rest| rest.contains("] = {") || rest.ends_with("];"))
                .and_then(|rest| rest.split_once('['))
                .map(|(name, _)| name)
        } else {
            line.strip_prefix("var ")
                .filter(|rest| rest.contains(": array<"))
                .and_then(|rest| rest.split_once(':'))
                .map(|(name, _)| name)
        };
        if let Some(name) = name.filter(|n| n.chars().all(ident)) {
            names.push(name.to_string());
        }
    }
    let mut uses = Vec::new();
    for name in &names {
        let pat = format!("{name}[");
        for (at, _) in source.match_indices(&pat) {
            if source[..at].chars().next_back().is_some_and(ident) {
                continue; // a longer name ending in this one
            }
            let rest = &source[at + pat.len()..];
            let index = &rest[..rest.find(']').expect("an index ends with `]`")];
            uses.push((name.clone(), index.to_string()));
        }
    }
    uses
}

/// Asserts that `kernel`'s emitted CUDA C and WGSL declare at least `arrays` per-invocation
/// arrays and index every one only by literals (registers, not local memory).
pub fn assert_array_indices_literal(kernel: &str, cuda: &str, wgsl: &str, arrays: usize) {
    for (target, source, is_cuda) in [("CUDA", cuda, true), ("WGSL", wgsl, false)] {
        let uses = array_indices(source, is_cuda);
        let mut names: Vec<&str> = uses.iter().map(|(n, _)| n.as_str()).collect();
        names.sort();
        names.dedup();
        assert!(
            names.len() >= arrays,
            "{kernel} {target}: expected at least {arrays} per-invocation arrays, found {names:?}"
        );
        for (name, index) in &uses {
            let digits = index.strip_suffix('u').unwrap_or(index);
            assert!(
                !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()),
                "{kernel} {target}: {name}[{index}] is not a literal index"
            );
        }
    }
}
