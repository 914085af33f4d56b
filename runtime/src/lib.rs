//! The runtime of graphed: devices and buffers on three backends (host, wgpu, CUDA), kernel
//! launches, plans, and the record → lower → replay lifecycle shared by every backend.

extern crate self as graphed;

mod backend;
pub mod blas;
mod buffer;
mod builtin;
mod device;
#[cfg(feature = "nccl")]
pub mod dist;
mod dtype;
mod error;
mod faults;
mod holder;
mod host_exec;
mod kernel;
pub mod nvrtc;
mod plan;
mod state;
mod step;
pub mod testing;

pub use backend::BackendKind;
pub use buffer::{Buffer, RawView};
pub use device::{Device, Required};
#[cfg(feature = "nccl")]
pub use dist::{Communicator, DataParallel, ReduceOp};
pub use dtype::{DType, Element, Scalar as ScalarValue};
pub use error::{Error, FaultKind, KernelFault, Result};
pub use holder::{
    AsInput, Body, CallArgs, CaptureKey, Config, Fallback, Graphed, InputArg, Out, Stats,
};
pub use kernel::{
    ErasedScalar, Grid, HostFn, IntoScalarArg, KernelArg, KernelDef, Launch, ParamInfo, ParamType,
    ScalarArg, MAX_WORKGROUPS_PER_DIMENSION,
};
pub use plan::{BufferRole, Plan, PlanBuffer, PlanOp};
pub use state::State;
pub use step::{Input, Output, Scalar, Step};

/// Used by code that `#[kernel]` and `#[graphed]` generate; not a stable API.
#[doc(hidden)]
pub mod __private {
    pub use crate::faults::{
        capture_retries, clear_capture_fault, destroy_device_memory, inject_capture_escape,
        inject_capture_fault, inject_capture_invalidation, inject_replay_drift, mutation,
    };
    pub use crate::host_exec::*;
    /// The steps of `#[kernel]`'s and `#[device]`'s expansion that receive a callee's
    /// definition (a `#[device]` function's macro calls them back).
    pub use graphed_macros::{__device_resume as device_resume, __kernel_resume as kernel_resume};
}
