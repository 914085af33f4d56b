//! One emitter per target over the shared IR.

pub mod bounds;
pub mod cuda;
pub mod host;
pub mod wgsl;
