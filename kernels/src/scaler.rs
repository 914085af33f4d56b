//! Dynamic loss scaling inside a recorded step, with no host synchronisation: the overflow
//! check, the skipped optimizer update and the scale change all happen on the device, driven
//! by a device flag (PyTorch's `GradScaler` reads its flag on the host, so its step stays
//! outside the CUDA graph).
//!
//! Per step, in order (each one launch):
//! 1. [`LossScaler::scale`]: the loss gradient (e.g. `dlogits`) times the scale `S`, read from
//!    device memory, before the backward pass ([`LossScaler::scale_cast`]: and its 16-bit copy
//!    for a mixed-precision backward pass, in the same launch);
//! 2. [`LossScaler::unscale`]: every gradient times `1/S` (exact: `S` is a power of two),
//!    and, where any is `±∞` or NaN, the optimizer counter's `skip` word set
//!    ([`crate::optim`]: the update that follows then changes nothing, its step count
//!    included);
//! 3. the optimizer's update;
//! 4. [`LossScaler::update`]: on overflow `S ← S·backoff` and the good-step count reset,
//!    otherwise the count advanced and, after `growth_interval` good steps in a row,
//!    `S ← S·growth`; the `skip` word cleared for the next step.
//!
//! The state is two device words, the scale and the good-step count, passed to a step as
//! `#[state]` buffers; the constants (`ScalerConfig`) are kernel arguments.

use graphed_macros::kernel;
use graphed_runtime::{bf16, f16, Buffer, DType, Device, Element, Error, Grid, Launch, Result};

use crate::optim::COUNTER_WORDS;
use crate::shape::{expect_len, groups};

/// `y ← y · scale[0]`.
#[kernel(workgroup = 256)]
pub fn scale_by(scale: &[f32], y: &mut [f32]) {
    let s = scale[0];
    let stride = global_size().x;
    let mut i = global_id().x;
    while i < y.len() {
        y[i] = y[i] * s;
        i += stride;
    }
}

/// `y ← y · scale[0]` and its copy rounded to a 16-bit type, once per type: the loss
/// gradient scaled and cast for the first 16-bit product of the backward pass in one launch.
macro_rules! scale_by_cast_kernel {
    ($t:ident, $(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[kernel(workgroup = 256)]
        pub fn $name(scale: &[f32], y: &mut [f32], y16: &mut [$t]) {
            let s = scale[0];
            let stride = global_size().x;
            let mut i = global_id().x;
            while i < y.len() {
                let v = y[i] * s;
                y[i] = v;
                y16[i] = v as $t;
                i += stride;
            }
        }
    };
}

scale_by_cast_kernel!(
    bf16,
    /// `y ← y · scale[0]` as [`scale_by`](mod@scale_by), and `y16[i] = y[i]` rounded to `bf16`
    /// (to nearest even, as `graphed_runtime::cast::cast`).
    scale_by_cast_bf16
);
scale_by_cast_kernel!(
    f16,
    /// [`scale_by_cast_bf16`](mod@scale_by_cast_bf16) rounding to `f16` (overflow to ±∞).
    scale_by_cast_f16
);

/// `g ← g / scale[0]` (times the reciprocal); where any result is not finite, sets
/// `count[2]` (the optimizer counter's skip word) to 1.
#[kernel(workgroup = 256)]
pub fn unscale_check(scale: &[f32], g: &mut [f32], count: &mut [u32]) {
    let inv = 1.0 / scale[0];
    let stride = global_size().x;
    let mut bad = false;
    let mut i = global_id().x;
    while i < g.len() {
        let v = g[i] * inv;
        g[i] = v;
        // Beyond the largest finite f32 is ±∞; NaN fails every comparison, so counts too.
        if !(abs(v) <= 3.4028235e38) {
            bad = true;
        }
        i += stride;
    }
    if bad {
        atomic_or(count, 2u32, 1u32);
    }
}

/// One invocation: the scale's change after a step (module docs), and the skip word cleared.
#[kernel(workgroup = 1)]
pub fn scale_update(
    growth_interval: u32,
    growth: f32,
    backoff: f32,
    scale: &mut [f32],
    good: &mut [u32],
    count: &mut [u32],
) {
    if global_id().x == 0 {
        if count[2] != 0 {
            scale[0] = scale[0] * backoff;
            good[0] = 0;
            count[2] = 0;
        } else {
            let n = good[0] + 1;
            if n >= growth_interval {
                scale[0] = scale[0] * growth;
                good[0] = 0;
            } else {
                good[0] = n;
            }
        }
    }
}

/// The constants of a [`LossScaler`] (PyTorch's `GradScaler` defaults: `Default`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScalerConfig {
    /// The first scale (2¹⁶).
    pub init_scale: f32,
    /// Factor after `growth_interval` good steps in a row (2).
    pub growth: f32,
    /// Factor after an overflow (0.5).
    pub backoff: f32,
    /// Good steps in a row before the scale grows (2000).
    pub growth_interval: u32,
}

impl Default for ScalerConfig {
    fn default() -> Self {
        ScalerConfig {
            init_scale: 65536.0,
            growth: 2.0,
            backoff: 0.5,
            growth_interval: 2000,
        }
    }
}

/// Dynamic loss scaling over device state (module docs): the scale (1 word) and the count of
/// good steps since the last change (1 word).
#[derive(Clone, Debug)]
pub struct LossScaler {
    config: ScalerConfig,
    scale: Buffer<f32>,
    good: Buffer<u32>,
}

impl LossScaler {
    /// A scaler at `config.init_scale`, no good steps yet.
    pub fn new(dev: &Device, config: ScalerConfig) -> Result<LossScaler> {
        let good = dev.alloc::<u32>(1)?;
        good.fill(0)?;
        LossScaler::from_state(config, dev.upload(&[config.init_scale])?, good)
    }

    /// A scaler over existing state (e.g. a step's `#[state]` buffers): one `f32`, one `u32`.
    pub fn from_state(
        config: ScalerConfig,
        scale: Buffer<f32>,
        good: Buffer<u32>,
    ) -> Result<LossScaler> {
        expect_len("LossScaler", "scale", scale.len(), 1)?;
        expect_len("LossScaler", "good", good.len(), 1)?;
        if !(config.growth >= 1.0 && config.backoff > 0.0 && config.backoff < 1.0) {
            return Err(Error::Shape(format!(
                "LossScaler: growth {} must be at least 1 and backoff {} in (0, 1)",
                config.growth, config.backoff
            )));
        }
        Ok(LossScaler {
            config,
            scale,
            good,
        })
    }

    /// The constants.
    pub fn config(&self) -> ScalerConfig {
        self.config
    }

    /// The scale's device word.
    pub fn scale_buffer(&self) -> &Buffer<f32> {
        &self.scale
    }

    /// The good-step count's device word.
    pub fn good_steps_buffer(&self) -> &Buffer<u32> {
        &self.good
    }

    /// The current scale (a host read: not inside a step).
    pub fn current_scale(&self) -> Result<f32> {
        Ok(self.scale.to_host()?[0])
    }

    /// Multiplies the loss gradient `dloss` by the scale. One launch.
    pub fn scale<C: Launch + ?Sized>(&self, cx: &C, dloss: &mut Buffer<f32>) -> Result<()> {
        let g = Grid::workgroups(groups(dloss.len()));
        scale_by::launch(cx, g, &self.scale, dloss)
    }

    /// Multiplies the loss gradient `dloss` by the scale and writes its 16-bit copy `dloss16`
    /// (`bf16` or `f16`, the same length): bitwise [`LossScaler::scale`] followed by
    /// `graphed_runtime::cast::cast(dloss → dloss16)`, in one launch (but that on wgpu an
    /// `f16` NaN is the driver's: WGSL stores `f16` slices as `f16`).
    ///
    /// # Errors
    /// [`Error::Shape`] when the lengths differ; [`Error::Launch`] for a 16-bit type other
    /// than `bf16` and `f16`.
    pub fn scale_cast<C: Launch + ?Sized, H: Element>(
        &self,
        cx: &C,
        dloss: &mut Buffer<f32>,
        dloss16: &mut Buffer<H>,
    ) -> Result<()> {
        let op = "LossScaler::scale_cast";
        expect_len(op, "dloss16", dloss16.len(), dloss.len())?;
        let g = Grid::workgroups(groups(dloss.len()));
        match H::DTYPE {
            DType::BF16 => {
                let mut h = Buffer::<bf16>::try_from_view(dloss16.raw_view())?;
                scale_by_cast_bf16::launch(cx, g, &self.scale, dloss, &mut h)
            }
            DType::F16 => {
                let mut h = Buffer::<f16>::try_from_view(dloss16.raw_view())?;
                scale_by_cast_f16::launch(cx, g, &self.scale, dloss, &mut h)
            }
            other => Err(Error::Launch {
                kernel: op,
                reason: format!(
                    "a 16-bit copy of `{}`; it takes `bf16` or `f16`",
                    other.name()
                ),
            }),
        }
    }

    /// Divides every gradient by the scale and sets the skip word of the optimizer counter
    /// `count` ([`COUNTER_WORDS`] words) where one overflowed. One launch.
    pub fn unscale<C: Launch + ?Sized>(
        &self,
        cx: &C,
        grads: &mut Buffer<f32>,
        count: &mut Buffer<u32>,
    ) -> Result<()> {
        expect_len("LossScaler::unscale", "count", count.len(), COUNTER_WORDS)?;
        let g = Grid::workgroups(groups(grads.len()));
        unscale_check::launch(cx, g, &self.scale, grads, count)
    }

    /// After the optimizer's update: the scale's change and the skip word cleared. One launch.
    pub fn update<C: Launch + ?Sized>(&mut self, cx: &C, count: &mut Buffer<u32>) -> Result<()> {
        expect_len("LossScaler::update", "count", count.len(), COUNTER_WORDS)?;
        let c = self.config;
        scale_update::launch(
            cx,
            Grid::workgroups(1),
            c.growth_interval,
            c.growth,
            c.backoff,
            &mut self.scale,
            &mut self.good,
            count,
        )
    }
}
