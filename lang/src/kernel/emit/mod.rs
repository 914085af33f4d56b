//! One emitter per target over the shared IR.

pub mod bounds;
pub mod cuda;
mod cuda_device;
pub mod host;
pub mod host_device;
mod mma;
mod subgroup;
pub mod wgsl;
mod wgsl_device;
mod wgsl_half;
