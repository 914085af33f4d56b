//! The runtime of graphed: devices and buffers on three backends (host, wgpu, CUDA), kernel
//! launches, plans, and the record → lower → replay lifecycle shared by every backend.
//!
//! # Features
//!
//! - `cuda`: the CUDA backend (the driver and NVRTC are loaded at run time);
//! - `nccl`: collectives inside recorded steps (implies `cuda`);
//! - `testing`: test-only code, off by default — `testing` (run a body on every backend
//!   available) and the fault-injection and mutation hooks graphed's own tests use to break a
//!   safety mechanism on purpose. Without it the hooks do not exist and the runtime's calls
//!   into them are constants the compiler removes. Enable it for tests only, through a
//!   dev-dependency (`graphed-runtime = { version = "…", features = ["testing"] }`): cargo
//!   turns it on for test, example and bench builds and leaves a plain build without it.

extern crate self as graphed;

mod backend;
pub mod blas;
mod buffer;
mod builtin;
pub mod cast;
mod checked;
mod dag;
mod device;
#[cfg(feature = "nccl")]
pub mod dist;
mod dtype;
mod error;
mod faults;
mod holder;
mod host_exec;
mod host_mma;
mod host_subgroup;
mod kernel;
mod liveness;
pub mod nvrtc;
mod packed;
mod plan;
mod rebind;
mod state;
mod step;
#[cfg(feature = "testing")]
pub mod testing;

pub use backend::BackendKind;
pub use buffer::{Buffer, RawView};
pub use checked::DeviceOptions;
pub use device::{Device, Required};
#[cfg(feature = "nccl")]
pub use dist::{Communicator, DataParallel, ReduceOp};
pub use dtype::{bf16, f16, DType, Element, Scalar as ScalarValue};
pub use error::{Error, FaultKind, KernelFault, Result};
pub use holder::{
    AsInput, Body, CallArgs, CaptureKey, Config, Fallback, Graphed, InputArg, Out, Programmatic,
    StateKey, Stats,
};
pub use kernel::{
    CheckedForm, ErasedScalar, Grid, HostFn, IntoScalarArg, KernelArg, KernelDef, Launch,
    ParamInfo, ParamType, ScalarArg, MAX_WORKGROUPS_PER_DIMENSION,
};
pub use plan::{BufferRole, Plan, PlanBuffer, PlanOp};
pub use state::State;
pub use step::{Input, Output, Scalar, Step};

/// Used by code that `#[kernel]` and `#[graphed]` generate, and (with the `testing` feature)
/// by graphed's own tests; not a stable API.
#[doc(hidden)]
pub mod __private {
    // Without `testing`, `mutation` is a constant `false` (graphed-nn calls it on a step's
    // path; the call folds away).
    /// The runtime's cast kernels, for graphed's own NVRTC and naga checks.
    pub use crate::builtin::{cast_f32_to_half, cast_half_to_f32};
    pub use crate::faults::mutation;
    #[cfg(feature = "testing")]
    pub use crate::faults::{
        capture_retries, clear_capture_fault, clear_slot_alloc_failure, destroy_device_memory,
        drop_host_edges_into, inject_capture_escape, inject_capture_fault,
        inject_capture_invalidation, inject_replay_drift, inject_slot_alloc_failure,
        shuffle_host_order,
    };
    pub use crate::host_exec::*;
    pub use crate::host_mma::HostMma;
    pub use crate::host_subgroup::*;
    /// The steps of `#[kernel]`'s and `#[device]`'s expansion that receive a callee's
    /// definition (a `#[device]` function's macro calls them back).
    pub use graphed_macros::{__device_resume as device_resume, __kernel_resume as kernel_resume};
}
