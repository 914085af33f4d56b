//! One emitter per target over the shared IR.

pub mod cuda;
pub mod host;
pub mod wgsl;
