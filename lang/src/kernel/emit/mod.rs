//! One emitter per target over the shared IR.

pub mod cuda;
pub mod host;
pub mod wgsl;
mod wgsl_device;
mod cuda_device;
pub mod host_device;
