//! Shape checks and launch-grid sizes shared by every op of the library (`u32_of` and
//! `expect_len` also serve ops built on it, such as the layers of `graphed-nn`).

use graphed_runtime::{Error, Result};

/// Invocations per workgroup of the library's one-dimensional kernels.
pub(crate) const WG: u32 = 256;

/// Most workgroups an elementwise (grid-stride) launch uses; past that each invocation loops.
pub(crate) const MAX_GROUPS: u32 = 4096;

/// Workgroups of 256 for a grid-stride launch over `n` elements: enough to cover them, at
/// most 4096, at least one (a launch over zero elements still runs, and does nothing).
pub fn groups(n: usize) -> u32 {
    (n.div_ceil(WG as usize) as u64).clamp(1, MAX_GROUPS as u64) as u32
}

/// `n` as a kernel's `u32` size argument.
pub fn u32_of(what: &str, n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::Shape(format!("{what} = {n} does not fit in a u32")))
}

/// Fails unless `len == want`.
pub fn expect_len(op: &str, name: &str, len: usize, want: usize) -> Result<()> {
    if len == want {
        Ok(())
    } else {
        Err(Error::Shape(format!(
            "{op}: `{name}` has {len} elements, expected {want}"
        )))
    }
}

/// Fails unless `len >= want`.
pub(crate) fn expect_at_least(op: &str, name: &str, len: usize, want: usize) -> Result<()> {
    if len >= want {
        Ok(())
    } else {
        Err(Error::Shape(format!(
            "{op}: `{name}` has {len} elements, needs at least {want}"
        )))
    }
}

/// Checks a product's operands: `m × n × k` with `a` of `m·k`, `b` of `k·n` and `c` of `m·n`
/// elements, every count a `u32`. Returns `m·n`.
pub(crate) fn expect_product(
    op: &str,
    (m, n, k): (usize, usize, usize),
    a: usize,
    b: usize,
    c: usize,
) -> Result<usize> {
    let (Some(mk), Some(kn), Some(mn)) = (m.checked_mul(k), k.checked_mul(n), m.checked_mul(n))
    else {
        return Err(Error::Shape(format!("{op}: {m}×{n}×{k} overflows")));
    };
    expect_len(op, "a", a, mk)?;
    expect_len(op, "b", b, kn)?;
    expect_len(op, "c", c, mn)?;
    for (what, v) in [("m·k", mk), ("k·n", kn), ("m·n", mn)] {
        u32_of(what, v)?;
    }
    Ok(mn)
}
