//! Shape checks of the layers (the kernel library keeps its own: these are the two the
//! layers need, with the same messages).

use graphed_runtime::{Error, Result};

/// `n` as a kernel's `u32` size argument.
pub(crate) fn u32_of(what: &str, n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::Shape(format!("{what} = {n} does not fit in a u32")))
}

/// Fails unless `len == want`.
pub(crate) fn expect_len(op: &str, name: &str, len: usize, want: usize) -> Result<()> {
    if len == want {
        Ok(())
    } else {
        Err(Error::Shape(format!(
            "{op}: `{name}` has {len} elements, expected {want}"
        )))
    }
}
