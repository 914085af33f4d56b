//! Kernels the runtime itself launches (fills), written in the kernel language.

use graphed_macros::kernel;

/// Sets every element of `y` to the bits `value`.
#[kernel(workgroup = 256)]
pub fn fill_u32(value: u32, y: &mut [u32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = value;
    }
}
