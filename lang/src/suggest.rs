//! "Did you mean …?": the closest known name to a misspelt one, by edit distance.

/// The candidate closest to `name` when it is near enough to be a likely typo: at most one
/// edit for short names, a third of the length for longer ones. Ties go to the first.
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (name.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .filter(|c| *c != name)
        .map(|c| (distance(name, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// ` (did you mean `x`?)`, or nothing.
pub fn hint<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    closest(name, candidates)
        .map(|c| format!(" (did you mean `{c}`?)"))
        .unwrap_or_default()
}

/// Levenshtein distance over chars, with a transposition of neighbours counting as one edit.
fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

/// The kernel language's builtin functions (ids, math, atomics, statements).
pub const BUILTIN_FNS: &[&str] = &[
    "global_id",
    "local_id",
    "workgroup_id",
    "num_workgroups",
    "workgroup_size",
    "global_size",
    "abs",
    "min",
    "max",
    "clamp",
    "floor",
    "ceil",
    "round",
    "sqrt",
    "rsqrt",
    "exp",
    "exp2",
    "log",
    "ln",
    "log2",
    "pow",
    "powf",
    "sin",
    "cos",
    "tanh",
    "fma",
    "mul_add",
    "select",
    "atomic_add",
    "atomic_sub",
    "atomic_max",
    "atomic_min",
    "atomic_and",
    "atomic_or",
    "atomic_xor",
    "atomic_exchange",
    "atomic_compare_exchange",
    "atomic_load",
    "atomic_store",
    "barrier",
    "device_fence",
    "shared",
    "subgroup_size",
    "subgroup_invocation_id",
    "subgroup_add",
    "subgroup_max",
    "subgroup_min",
    "subgroup_shuffle",
    "subgroup_shuffle_xor",
    "subgroup_shuffle_up",
    "subgroup_shuffle_down",
    "mma_m16n8k16",
    "ldmatrix_x4",
    "ldmatrix_x4_trans",
    "copy_async",
    "copy_async_commit",
    "copy_async_wait",
];

/// Methods kernels accept (`x.len()` and the math functions).
pub const METHODS: &[&str] = &[
    "len", "abs", "min", "max", "clamp", "floor", "ceil", "round", "sqrt", "rsqrt", "exp", "exp2",
    "ln", "log2", "powf", "sin", "cos", "tanh", "mul_add", "step_by", "to_bits",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_names_are_suggested_and_far_ones_are_not() {
        assert_eq!(
            closest("global_idx", BUILTIN_FNS.iter().copied()),
            Some("global_id")
        );
        assert_eq!(
            closest("gloabl_id", BUILTIN_FNS.iter().copied()),
            Some("global_id")
        );
        assert_eq!(closest("sqr", BUILTIN_FNS.iter().copied()), Some("sqrt"));
        assert_eq!(
            closest("ldmatrix_4", BUILTIN_FNS.iter().copied()),
            Some("ldmatrix_x4")
        );
        assert_eq!(
            closest("atomic_ad", BUILTIN_FNS.iter().copied()),
            Some("atomic_add")
        );
        assert_eq!(closest("square", BUILTIN_FNS.iter().copied()), None);
        assert_eq!(closest("lne", METHODS.iter().copied()), Some("len"));
        assert_eq!(
            hint("tanhh", BUILTIN_FNS.iter().copied()),
            " (did you mean `tanh`?)"
        );
        assert_eq!(hint("frobnicate", BUILTIN_FNS.iter().copied()), "");
        assert_eq!(distance("ab", "ba"), 1);
        assert_eq!(distance("", "abc"), 3);
    }
}
