//! The runtime's error type: every failure is a value, never a panic.

use std::fmt;

/// Result with the runtime's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A fault raised by a kernel on the host backend, or on a GPU backend in checked mode
/// ([`crate::DeviceOptions::checked`]; reported at the next synchronisation there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelFault {
    /// The kernel's name.
    pub kernel: &'static str,
    /// The slice parameter or workgroup array accessed (the loop variable for a bad step).
    pub target: &'static str,
    /// What went wrong.
    pub kind: FaultKind,
}

/// The kinds of [`KernelFault`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultKind {
    /// An element index at or past the slice's length.
    OutOfBounds {
        /// The index accessed.
        index: u32,
        /// The slice's length.
        len: u32,
    },
    /// A view that does not fit its allocation.
    BadView,
    /// Some invocations of a workgroup finished while others waited at `barrier()`.
    DivergentBarrier,
    /// A `for` loop's run-time `step_by` step below 1 (`target` names the loop variable).
    /// GPU targets run no iteration of such a loop instead.
    BadStep {
        /// The step.
        step: i64,
    },
}

impl fmt::Display for KernelFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            FaultKind::OutOfBounds { index, len } => write!(
                f,
                "kernel `{}`: index {index} is out of bounds for `{}` of length {len}",
                self.kernel, self.target
            ),
            FaultKind::BadView => write!(f, "kernel `{}`: the view bound to `{}` does not fit its buffer", self.kernel, self.target),
            FaultKind::DivergentBarrier => write!(
                f,
                "kernel `{}`: some invocations of a workgroup returned while others waited at `barrier()`",
                self.kernel
            ),
            FaultKind::BadStep { step } => write!(
                f,
                "kernel `{}`: the loop over `{}` has step_by({step}); a step must be at least 1 \
                 (Rust's step_by takes a usize and panics on 0)",
                self.kernel, self.target
            ),
        }
    }
}

impl std::error::Error for KernelFault {}

/// Everything that can go wrong in graphed's runtime.
///
/// `Clone`, so a device that failed to open can report the same error to every later caller.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// A required backend is missing, or no backend could be opened.
    #[error("backend `{backend}` is unavailable: {reason}")]
    Unavailable {
        /// The backend asked for.
        backend: &'static str,
        /// Why, and what to install.
        reason: String,
    },
    /// A bad value of `GRAPHED_BACKEND`, `GRAPHED_REQUIRE`, `GRAPHED_WGPU_CHECKS` or
    /// `GRAPHED_CHECKED`.
    #[error("environment variable {var}={value:?} is not understood: {hint}")]
    BadEnv {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What is accepted.
        hint: &'static str,
    },
    /// A kernel's source was rejected by the backend's compiler.
    #[error("kernel `{kernel}` failed to compile for {backend}: {log}")]
    Compile {
        /// The kernel.
        kernel: &'static str,
        /// The backend.
        backend: &'static str,
        /// The compiler's log.
        log: String,
    },
    /// A kernel faulted on the host backend, or on a GPU backend in checked mode.
    #[error(transparent)]
    Fault(#[from] KernelFault),
    /// A launch was malformed (argument count, types, grid, aliasing).
    #[error("launch of `{kernel}`: {reason}")]
    Launch {
        /// The kernel.
        kernel: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// Buffer sizes or devices do not match.
    #[error("{0}")]
    Shape(String),
    /// A call's input does not match its static slot (length, dtype or device).
    #[error("input `{input}` does not match: {reason}")]
    InputMismatch {
        /// The parameter name.
        input: String,
        /// What differs.
        reason: String,
    },
    /// Reading device memory back inside a recording (the step would depend on a value that
    /// does not exist yet); the key falls back to eager.
    #[error("readback inside a recording: {0} (a recorded step cannot read device memory on the host; read outputs after `call()`)")]
    ReadbackInRecording(&'static str),
    /// Allocating device memory inside a recording; use `cx.output()` / `cx.workspace()`.
    #[error("allocation inside a recording: allocate step buffers with `cx.output(..)` or `cx.workspace(..)`, and state before the first call")]
    AllocationInRecording,
    /// A kernel launched on the device directly while the step was being recorded.
    #[error("kernel `{0}` was launched on the device while recording a step; launch it through the step context `cx`")]
    LaunchOutsideRecording(&'static str),
    /// A step's `call()` (or `eager()`) inside the body of a step being recorded: its work
    /// would run once, during recording, and never on replay. The outer key runs eagerly.
    #[error("step `{0}` was called inside the body of a step being recorded (its work would run once, while recording, and never on replay); call it before or after the outer step, or launch its kernels through the outer step's context")]
    NestedStep(&'static str),
    /// A static slot of a step (an output, workspace or input slot) used outside that step's
    /// body, e.g. through a clone kept past it: it may hold another step's values.
    #[error("`{what}` of a static slot of step `{step}` (an output, workspace or input slot) outside that step: it holds whatever the latest run left there; read outputs through the `Out` that `call()` returns (`to_host()`, `to_buffer()`), and do not keep clones of slots")]
    StepSlot {
        /// The step the slot belongs to.
        step: &'static str,
        /// What was attempted.
        what: &'static str,
    },
    /// A key could not be recorded and the holder's fallback policy is
    /// [`crate::Fallback::Error`] (or `GRAPHED_STRICT=1` is set): nothing ran.
    #[error("step `{step}` cannot be recorded for this key and eager fallback is off (Config::fallback or GRAPHED_STRICT): {reason}")]
    NotCapturable {
        /// The step.
        step: &'static str,
        /// Why it cannot be recorded.
        reason: String,
    },
    /// The drift sentinel found a replay that differs from an eager run of the same step
    /// from the same state ([`crate::Config::sentinel_every`]); the key runs eagerly now.
    #[error("drift: a replay of step `{step}` differs from its eager run at {buffer}[{index}] (replay bits {replay:#010x}, eager {eager:#010x}); key {key}; this key runs eagerly from now on")]
    Drift {
        /// The step.
        step: &'static str,
        /// The capture key, printed.
        key: String,
        /// The first differing buffer (`output i` or `state `name``).
        buffer: String,
        /// The first differing element.
        index: usize,
        /// The replay's bits there.
        replay: u32,
        /// The eager run's bits there.
        eager: u32,
    },
    /// Lowering a plan to a backend recording failed; the key runs eagerly.
    #[error("lowering to {backend} failed: {reason}")]
    Lower {
        /// The backend.
        backend: &'static str,
        /// Why.
        reason: String,
    },
    /// Waiting for the device failed; memory a recording pins is not released.
    #[error("drain failed on {backend}: {reason}")]
    Drain {
        /// The backend.
        backend: &'static str,
        /// Why.
        reason: String,
    },
    /// The device reported an error (validation, out of memory, lost device).
    #[error("{backend} device error: {reason}")]
    Device {
        /// The backend.
        backend: &'static str,
        /// The device's message.
        reason: String,
    },
    /// Out of device memory.
    #[error(
        "out of device memory on {backend}{}",
        .bytes.map(|b| format!(" allocating {b} bytes")).unwrap_or_default()
    )]
    OutOfMemory {
        /// The backend.
        backend: &'static str,
        /// Bytes asked for, where the failure was an allocation of known size (a driver can
        /// also run out while building a recording or loading a module).
        bytes: Option<u64>,
    },
    /// A request over a fixed limit of graphed, the backend or the adapter — not a lack of free
    /// memory: asking again will fail the same way.
    #[error("{what}: {asked} is over the limit of {limit} on {backend}")]
    Limit {
        /// The backend.
        backend: &'static str,
        /// What was counted and which limit applies, e.g. "bytes of one buffer (the adapter's
        /// `max_storage_buffer_binding_size`)".
        what: String,
        /// How much was asked for (wide enough to hold a count that overflows `u64`).
        asked: u128,
        /// The limit.
        limit: u128,
    },
    /// A kernel needs something the device does not have: WGSL's `f16` on an adapter without
    /// `shader-f16`.
    #[error("kernel `{kernel}` needs {feature}, which the {backend} adapter {adapter} does not have; {instead}")]
    Unsupported {
        /// The kernel.
        kernel: &'static str,
        /// The backend.
        backend: &'static str,
        /// The adapter, as [`crate::Device::adapter`] names it.
        adapter: String,
        /// What the kernel needs, e.g. "`f16` arithmetic (WGSL's `shader-f16` feature)".
        feature: &'static str,
        /// What to do instead.
        instead: &'static str,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first run of three words that appears twice in `text`, if any ("backend `cuda` is
    /// unavailable: backend `cuda` is unavailable: …" repeats its prefix).
    fn repeated_phrase(text: &str) -> Option<String> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let phrases: Vec<String> = words.windows(3).map(|w| w.join(" ")).collect();
        phrases
            .iter()
            .enumerate()
            .find(|(i, p)| phrases[i + 1..].contains(p))
            .map(|(_, p)| p.clone())
    }

    #[test]
    fn every_variant_says_what_happened_once() {
        let fault = KernelFault {
            kernel: "axpy",
            target: "y",
            kind: FaultKind::OutOfBounds { index: 9, len: 8 },
        };
        let cases: Vec<(Error, &str)> = vec![
            (
                Error::Unavailable { backend: "cuda", reason: "graphed was built without `--features cuda`".into() },
                "backend `cuda` is unavailable: graphed was built without `--features cuda`",
            ),
            (
                Error::BadEnv { var: "GRAPHED_BACKEND", value: "tpu".into(), hint: "one of host, wgpu, cuda" },
                "environment variable GRAPHED_BACKEND=\"tpu\" is not understood: one of host, wgpu, cuda",
            ),
            (
                Error::Compile { kernel: "axpy", backend: "wgpu", log: "unknown identifier `q`".into() },
                "kernel `axpy` failed to compile for wgpu: unknown identifier `q`",
            ),
            (Error::Fault(fault), "kernel `axpy`: index 9 is out of bounds for `y` of length 8"),
            (
                Error::Fault(KernelFault { kernel: "axpy", target: "y", kind: FaultKind::BadView }),
                "kernel `axpy`: the view bound to `y` does not fit its buffer",
            ),
            (
                Error::Fault(KernelFault { kernel: "tree", target: "s", kind: FaultKind::DivergentBarrier }),
                "kernel `tree`: some invocations of a workgroup returned while others waited at `barrier()`",
            ),
            (
                Error::Launch { kernel: "axpy", reason: "2 arguments for 3 parameters".into() },
                "launch of `axpy`: 2 arguments for 3 parameters",
            ),
            (Error::Shape("copy of 3 f32 into 4 f32".into()), "copy of 3 f32 into 4 f32"),
            (
                Error::InputMismatch { input: "x".into(), reason: "16 elements, the slot has 17".into() },
                "input `x` does not match: 16 elements, the slot has 17",
            ),
            (
                Error::ReadbackInRecording("Buffer::to_host"),
                "readback inside a recording: Buffer::to_host (a recorded step cannot read device memory on the host; read outputs after `call()`)",
            ),
            (
                Error::AllocationInRecording,
                "allocation inside a recording: allocate step buffers with `cx.output(..)` or `cx.workspace(..)`, and state before the first call",
            ),
            (
                Error::LaunchOutsideRecording("axpy"),
                "kernel `axpy` was launched on the device while recording a step; launch it through the step context `cx`",
            ),
            (
                Error::Lower { backend: "cuda", reason: "the capture escaped".into() },
                "lowering to cuda failed: the capture escaped",
            ),
            (
                Error::Drain { backend: "wgpu", reason: "device lost".into() },
                "drain failed on wgpu: device lost",
            ),
            (
                Error::Device { backend: "cuda", reason: "an illegal memory access".into() },
                "cuda device error: an illegal memory access",
            ),
            (
                Error::OutOfMemory { backend: "cuda", bytes: Some(1 << 40) },
                "out of device memory on cuda allocating 1099511627776 bytes",
            ),
            (
                Error::OutOfMemory { backend: "cuda", bytes: None },
                "out of device memory on cuda",
            ),
            (
                Error::Limit {
                    backend: "wgpu",
                    what: "bytes of one buffer (the adapter's `max_storage_buffer_binding_size`)".into(),
                    asked: 134_217_732,
                    limit: 134_217_728,
                },
                "bytes of one buffer (the adapter's `max_storage_buffer_binding_size`): 134217732 is over the limit of 134217728 on wgpu",
            ),
        ];
        for (err, want) in cases {
            let text = err.to_string();
            assert_eq!(text, want, "{err:?}");
            assert_eq!(repeated_phrase(&text), None, "{text}");
            // A clone says the same (a failed shared device hands its error to every caller).
            assert_eq!(err.clone().to_string(), text);
        }
        assert_eq!(
            repeated_phrase("backend `cuda` is unavailable: backend `cuda` is unavailable: x"),
            Some("backend `cuda` is".into())
        );
    }
}
