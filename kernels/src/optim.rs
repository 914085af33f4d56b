//! Capturable optimizers over one flat parameter buffer: SGD with momentum, Adam and AdamW
//! (PyTorch's update rules), and gradient-norm clipping, all without a host read.
//!
//! # The step counter
//!
//! Each optimizer keeps its step count in device memory, so a recorded step replays with the
//! right bias corrections. One launch both advances it and updates every parameter. The
//! count is three `u32` words, `[arrivals, steps, skip]`; while `skip` is not 0 an update
//! changes nothing (parameters, moments and count stay as they are): a loss scaler's overflow
//! check sets it inside the recorded step and its update clears it ([`crate::scaler`]). The optimizer always launches the same
//! number `G ≤ 1024` of workgroups (fixed at construction); invocation 0 of each adds 1 to
//! `arrivals` atomically and takes `t = old / G + 1`. All `G` adds of step `s` return values
//! in `[(s−1)·G, s·G)`, whatever their order, so every workgroup agrees on `t = s`. Past
//! `t = 2²⁰` a workgroup takes the add back and uses `t = 2²⁰`, so `arrivals` stays below
//! `2²⁰·G + G ≤ 2³⁰ + 1024` and never wraps (bias corrections `1 − βᵗ` are 1 in `f32` long
//! before, for any β ≤ 0.99999). Workgroup 0 also adds 1 to `steps`, the exact count that
//! [`Adam::steps`] reads.
//!
//! An update in segments ([`Adam::step_segments`]: one launch per range of parameters, e.g. a
//! layer's, so each can run as soon as its gradients are complete) counts the step in its
//! first launch, the *lead*, as above, with the `G` workgroups. Every later launch *follows*:
//! it runs after the lead (all of them write the counter, so a recording orders them, and
//! eager launches run in order), reads `t = min(steps, 2²⁰)` and the skip word, and advances
//! nothing, so it may take as many workgroups as its own range needs. The counter's words
//! move as for one launch, and where they were only ever moved by these launches, `steps` is
//! the lead's `t` (below the cap), so the bits are those of one launch.
//!
//! Scalars (`lr`, betas, `eps`, weight decay, momentum) are kernel arguments, so each can be a
//! per-step scalar of a recorded step.

use graphed_macros::{device, kernel};
use std::ops::Range;

use graphed_runtime::{Buffer, Device, Error, Grid, IntoScalarArg, Launch, Result, ScalarArg};

use crate::reduce::{first_pass_groups, reduce_all, tree_sum};
use crate::shape::{expect_len, groups, u32_of};

/// Words of an optimizer's step counter: `[arrivals, steps, skip]` (module docs).
pub const COUNTER_WORDS: usize = 3;

/// Most workgroups an optimizer launch uses (each invocation then loops over its share).
const MAX_OPT_GROUPS: usize = 1024;

/// Advances the step counter `count` (module docs) and gives every invocation of the
/// workgroup the step number `t`: invocation `lid == 0` of each workgroup takes it and shares
/// it through `st`. In a `lead` launch (one launch, or the first of a segmented update) each
/// of the `groups` workgroups arrives and workgroup `wg == 0` counts the step; a launch that
/// follows reads the step the lead counted. Called by the whole workgroup together, once per
/// launch. Where the counter's skip word is set (an overflow found by the loss scaler), it
/// advances nothing and gives 0: the launch must change nothing.
#[device]
fn step_number(
    count: &mut [u32],
    st: &mut [u32; 1],
    lid: u32,
    wg: u32,
    groups: u32,
    lead: bool,
) -> u32 {
    // One invocation per workgroup reads the skip word (it does not change during the launch,
    // so every workgroup reads one value) and shares the step (0: skipped) through `st`: an
    // atomic read by every invocation serialises on the one word (on the H200 it doubled an
    // AdamW step over 269k parameters, 5.9 → 12.0 µs).
    if lid == 0 {
        let mut t = 0u32;
        let skip = atomic_load(count, 2u32);
        if skip == 0u32 && !lead {
            let steps = atomic_load(count, 1u32);
            t = min(steps, 1048576u32);
        }
        if skip == 0u32 && lead {
            let old = atomic_add(count, 0u32, 1u32);
            t = old / groups + 1u32;
            if t > 1048576u32 {
                atomic_sub(count, 0u32, 1u32);
                t = 1048576u32;
            }
            if wg == 0 {
                atomic_add(count, 1u32, 1u32);
            }
        }
        st[0] = t;
    }
    barrier();
    st[0]
}

/// Parameters an invocation of [`adam_step`] updates in one pass (its loads all in flight).
const ADAM_PER_PASS: usize = 8;

/// The fixed workgroup count of an optimizer over `n` parameters whose kernel updates `per`
/// parameters an invocation in a pass: enough for one pass over all of them, up to
/// [`MAX_OPT_GROUPS`]. (Adam took one workgroup per 256 parameters before, so over MLP-S's
/// 269k parameters seven of an invocation's eight loads were empty.)
fn opt_groups(n: usize, per: usize) -> u32 {
    n.div_ceil(256 * per).clamp(1, MAX_OPT_GROUPS) as u32
}

/// Adam (`decoupled == false`: L2 weight decay added to the gradient) or AdamW (`true`:
/// `p ← p·(1 − lr·wd)` first), as PyTorch's `torch.optim.Adam`/`AdamW`:
/// `m ← m + (1 − β₁)(g − m)`, `v ← β₂·v + (1 − β₂)·g²`,
/// `p ← p − lr/(1 − β₁ᵗ) · m / (√v / √(1 − β₂ᵗ) + eps)`, the bias corrections computed
/// to a few ulp from `t`. `m` and `v` are the moments of `p` (each `p.len()` long); `count`
/// is the step counter (module docs); `lead` is true for one launch over all parameters
/// and for the first launch of an update in segments, false for the launches that follow
/// it (module docs).
#[kernel(workgroup = 256)]
pub fn adam_step(
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    wd: f32,
    decoupled: bool,
    lead: bool,
    p: &mut [f32],
    g: &[f32],
    m: &mut [f32],
    v: &mut [f32],
    count: &mut [u32],
) {
    let st = shared::<u32, 1>();
    let n = p.len();
    // Eight elements a pass, `total` apart (each load coalesced), all loads before any
    // store: the update is memory-bound, and more loads in flight per invocation ran
    // MLP-M's 4.2M parameters faster on the H200 (45.3 µs with one element a pass, 39.2
    // with four; BENCHMARKS.md, session of 2026-12-02b). No index wraps: the moments' 2n
    // elements fit in a u32 (checked when built), so n < 2^31 and `base + 7·total` stays
    // below 2^32 (`total` is at most 2^18 invocations). The first pass's loads are issued
    // before the step counter's atomics, whose round trips (every workgroup adds to one
    // word) they then overlap.
    let total = global_size().x;
    let mut base = global_id().x;
    let mut gs = [0.0f32; 8];
    let mut ps = [0.0f32; 8];
    let mut ms = [0.0f32; 8];
    let mut vs = [0.0f32; 8];
    for j in 0..8u32 {
        let i = base + j * total;
        if i < n {
            gs[j] = g[i];
            ps[j] = p[i];
            ms[j] = m[i];
            vs[j] = v[i];
        }
    }
    let t = step_number(
        count,
        st,
        local_id().x,
        workgroup_id().x,
        num_workgroups().x,
        lead,
    );
    if t == 0u32 {
        return; // the skip word is set: this step changes nothing
    }
    // Bias corrections 1 − βᵗ by binary powering of (1 − β): with q = 1 − βᵏ,
    // 1 − β²ᵏ = q(2 − q) and 1 − βᵃ⁺ᵇ = qa + qb(1 − qa), which never subtract nearly equal
    // numbers (1 − pow(β, t) loses digits, and GPU `pow` is exp2(t·log2 β) with a poor
    // log2 near 1).
    let mut e = t;
    let mut q1 = 1.0 - beta1;
    let mut q2 = 1.0 - beta2;
    let mut bc1 = 0.0;
    let mut bc2 = 0.0;
    while e > 0 {
        if (e & 1u32) == 1u32 {
            bc1 = bc1 + q1 * (1.0 - bc1);
            bc2 = bc2 + q2 * (1.0 - bc2);
        }
        q1 = q1 * (2.0 - q1);
        q2 = q2 * (2.0 - q2);
        e = e >> 1u32;
    }
    let step = lr / bc1;
    let bc2s = sqrt(bc2);
    while base < n {
        for j in 0..8u32 {
            let i = base + j * total;
            if i < n {
                let mut gi = gs[j];
                let mut pi = ps[j];
                if decoupled {
                    pi = pi * (1.0 - lr * wd);
                } else {
                    gi = gi + wd * pi;
                }
                let m0 = ms[j];
                let mi = m0 + (1.0 - beta1) * (gi - m0);
                let vi = vs[j] * beta2 + (1.0 - beta2) * gi * gi;
                m[i] = mi;
                v[i] = vi;
                let denom = sqrt(vi) / bc2s + eps;
                p[i] = pi - step * (mi / denom);
            }
        }
        base += 8u32 * total;
        // The next pass's loads (none past the end).
        for j in 0..8u32 {
            let i = base + j * total;
            if i < n {
                gs[j] = g[i];
                ps[j] = p[i];
                ms[j] = m[i];
                vs[j] = v[i];
            }
        }
    }
}

/// SGD as PyTorch's `torch.optim.SGD`: `d = g + wd·p`; with momentum `μ ≠ 0`,
/// `b ← d` on the first step, else `b ← μ·b + (1 − dampening)·d`, and `d = d + μ·b`
/// (Nesterov) or `d = b`; then `p ← p − lr·d`. `count` is the step counter (module docs).
#[kernel(workgroup = 256)]
pub fn sgd_step(
    lr: f32,
    momentum: f32,
    dampening: f32,
    wd: f32,
    nesterov: bool,
    p: &mut [f32],
    g: &[f32],
    buf: &mut [f32],
    count: &mut [u32],
) {
    let st = shared::<u32, 1>();
    let step = step_number(
        count,
        st,
        local_id().x,
        workgroup_id().x,
        num_workgroups().x,
        true,
    );
    if step == 0u32 {
        return; // the skip word is set: this step changes nothing
    }
    let first = step == 1u32;
    let n = p.len();
    let stride = global_size().x;
    let mut i = global_id().x;
    while i < n {
        let pi = p[i];
        let mut d = g[i];
        if wd != 0.0 {
            d = d + wd * pi;
        }
        if momentum != 0.0 {
            let b = if first {
                d
            } else {
                momentum * buf[i] + (1.0 - dampening) * d
            };
            buf[i] = b;
            if nesterov {
                d = d + momentum * b;
            } else {
                d = b;
            }
        }
        p[i] = pi - lr * d;
        i += stride;
    }
}

/// Scales `g` by `min(max_norm / (‖g‖ + 1e-6), 1)`, where `‖g‖² = Σ partials` (tree order)
/// and every workgroup computes the same `‖g‖`; workgroup 0 writes it to `norm[0]`.
#[kernel(workgroup = 256)]
pub fn clip_scale(max_norm: f32, partials: &[f32], g: &mut [f32], norm: &mut [f32]) {
    let s = shared::<f32, 256>();
    let t = local_id().x;
    s[t] = if t < partials.len() { partials[t] } else { 0.0 };
    let sq = tree_sum(s, t);
    let total = sqrt(sq);
    let coef = min(max_norm / (total + 0.000001), 1.0);
    if global_id().x == 0 {
        norm[0] = total;
    }
    let n = g.len();
    let stride = global_size().x;
    let mut i = global_id().x;
    while i < n {
        g[i] = g[i] * coef;
        i += stride;
    }
}

fn check_pair(op: &str, n: usize, params: &Buffer<f32>, grads: &Buffer<f32>) -> Result<()> {
    expect_len(op, "params", params.len(), n)?;
    expect_len(op, "grads", grads.len(), n)?;
    Ok(())
}

/// The public `count()` and `steps()` of an optimizer holding a [`Counter`] as `counter`.
macro_rules! counter_accessors {
    () => {
        /// The step counter, `[arrivals, steps, skip]` (module docs).
        pub fn count(&self) -> &Buffer<u32> {
            &self.counter.count
        }

        /// Steps taken so far (a host read: not inside a step).
        pub fn steps(&self) -> Result<u32> {
            self.counter.steps()
        }
    };
}

/// What every optimizer keeps besides its moments: how many parameters it updates, its
/// fixed workgroup count and its step counter (module docs).
#[derive(Clone, Debug)]
struct Counter {
    n: usize,
    groups: u32,
    count: Buffer<u32>,
}

impl Counter {
    /// A zeroed counter for `n` parameters, `per` an invocation in a pass ([`opt_groups`]).
    fn alloc(dev: &Device, n: usize, per: usize) -> Result<Counter> {
        Self::over(n, per, dev.alloc(COUNTER_WORDS)?)
    }

    /// An existing counter `count` of the optimizer `op` over `n` parameters.
    fn from_state(op: &str, n: usize, per: usize, count: Buffer<u32>) -> Result<Counter> {
        expect_len(op, "count", count.len(), COUNTER_WORDS)?;
        Self::over(n, per, count)
    }

    fn over(n: usize, per: usize, count: Buffer<u32>) -> Result<Counter> {
        Ok(Counter {
            n,
            groups: opt_groups(n, per),
            count,
        })
    }

    /// Steps taken so far (a host read).
    fn steps(&self) -> Result<u32> {
        Ok(self.count.to_host()?[1])
    }

    /// Checks that `segments` (ranges of the `n` parameters, in launch order) cover `0..n`
    /// once each, none empty.
    fn check_segments(&self, op: &str, segments: &[Range<usize>]) -> Result<()> {
        let n = self.n;
        let fail = |why: &str| {
            Err(Error::Shape(format!(
                "{op}: the segments {segments:?} of an update over {n} parameters {why}"
            )))
        };
        if segments.is_empty() {
            return fail("are none: give at least one, e.g. `0..n`");
        }
        if segments.iter().any(|r| r.start >= r.end) {
            return fail("include an empty or reversed range");
        }
        let mut sorted: Vec<&Range<usize>> = segments.iter().collect();
        sorted.sort_by_key(|r| r.start);
        let mut next = 0;
        for r in sorted {
            if r.start != next {
                return fail(if r.start < next {
                    "overlap"
                } else {
                    "leave parameters out"
                });
            }
            next = r.end;
        }
        match next.cmp(&n) {
            std::cmp::Ordering::Less => fail("leave parameters out"),
            std::cmp::Ordering::Greater => fail("reach past the end"),
            std::cmp::Ordering::Equal => Ok(()),
        }
    }
}

/// Hyper-parameters of Adam and AdamW (PyTorch's defaults: `Default`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamConfig {
    /// β₁.
    pub beta1: f32,
    /// β₂.
    pub beta2: f32,
    /// ε.
    pub eps: f32,
    /// Weight decay (L2 for Adam, decoupled for AdamW).
    pub weight_decay: f32,
}

impl Default for AdamConfig {
    fn default() -> Self {
        AdamConfig {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }
}

/// Per-step values of an Adam/AdamW update, each a constant or a per-step scalar.
#[derive(Clone, Copy, Debug)]
pub struct AdamScalars {
    /// Learning rate.
    pub lr: ScalarArg<f32>,
    /// β₁.
    pub beta1: ScalarArg<f32>,
    /// β₂.
    pub beta2: ScalarArg<f32>,
    /// ε.
    pub eps: ScalarArg<f32>,
    /// Weight decay.
    pub weight_decay: ScalarArg<f32>,
}

/// Adam (L2 weight decay) over a flat parameter buffer: moments `m`, `v` in one device buffer,
/// the step counter in another. [`AdamW`] is the same with decoupled weight decay.
#[derive(Clone, Debug)]
pub struct Adam {
    config: AdamConfig,
    decoupled: bool,
    moments: Buffer<f32>,
    counter: Counter,
}

impl Adam {
    /// Adam for `n` parameters, moments zeroed, step count 0.
    pub fn new(dev: &Device, n: usize, config: AdamConfig) -> Result<Adam> {
        Self::build(dev, n, config, false)
    }

    fn build(dev: &Device, n: usize, config: AdamConfig, decoupled: bool) -> Result<Adam> {
        u32_of("parameters", 2 * n)?;
        Ok(Adam {
            config,
            decoupled,
            moments: dev.alloc(2 * n)?,
            counter: Counter::alloc(dev, n, ADAM_PER_PASS)?,
        })
    }

    /// An optimizer over existing state (`moments`: `m` then `v`, `2·n`; `count`:
    /// [`COUNTER_WORDS`] words),
    /// e.g. a step's `#[state]` buffers.
    pub fn from_state(
        config: AdamConfig,
        decoupled: bool,
        moments: Buffer<f32>,
        count: Buffer<u32>,
    ) -> Result<Adam> {
        if moments.len() % 2 != 0 {
            return Err(Error::Shape(format!(
                "Adam: moments hold m and v, an even length, not {}",
                moments.len()
            )));
        }
        let counter = Counter::from_state("Adam", moments.len() / 2, ADAM_PER_PASS, count)?;
        Ok(Adam {
            config,
            decoupled,
            moments,
            counter,
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> AdamConfig {
        self.config
    }

    /// `m` then `v`.
    pub fn moments(&self) -> &Buffer<f32> {
        &self.moments
    }

    counter_accessors!();

    /// One update of every parameter with learning rate `lr` and the configured constants.
    /// One launch.
    pub fn step<C: Launch + ?Sized>(
        &mut self,
        cx: &C,
        params: &mut Buffer<f32>,
        grads: &Buffer<f32>,
        lr: impl IntoScalarArg<f32>,
    ) -> Result<()> {
        let s = self.scalars(lr.into_scalar_arg());
        self.step_with(cx, params, grads, s)
    }

    /// One update with every value given (constants or per-step scalars). One launch.
    pub fn step_with<C: Launch + ?Sized>(
        &mut self,
        cx: &C,
        params: &mut Buffer<f32>,
        grads: &Buffer<f32>,
        s: AdamScalars,
    ) -> Result<()> {
        let all = 0..self.counter.n;
        self.step_segments_with(cx, params, grads, s, &[all])
    }

    /// One update of every parameter as [`Adam::step`] gives, in one launch per segment, in
    /// the order given: each segment a range of parameters, together covering them all once.
    /// Inside a recorded step each launch waits only for what writes its own parameters and
    /// gradients (and for the segment before it: all share the step counter), so the update
    /// of a layer whose gradients are complete runs beside the backward pass of the layers
    /// before it; give the last layer first. The bits are those of one launch: every element
    /// is updated alone, with the same step number (module docs). `Error::Shape` for segments
    /// that overlap, leave parameters out, are empty or reach past the end.
    ///
    /// Measure before you choose it: in the MLP training steps of `graphed::train` on an H100
    /// one launch a layer beside the backward pass made fp32 MLP-M 548.4 µs a step against
    /// 428.8 with one launch (the updates, memory-bound, slowed the products they ran beside;
    /// in one chain still 505.4 against 483.3), so those steps keep one launch
    /// (BENCHMARKS.md, fourth session of 2026-12-07).
    pub fn step_segments<C: Launch + ?Sized>(
        &mut self,
        cx: &C,
        params: &mut Buffer<f32>,
        grads: &Buffer<f32>,
        lr: impl IntoScalarArg<f32>,
        segments: &[Range<usize>],
    ) -> Result<()> {
        let s = self.scalars(lr.into_scalar_arg());
        self.step_segments_with(cx, params, grads, s, segments)
    }

    /// [`Adam::step_segments`] with every value given (constants or per-step scalars).
    pub fn step_segments_with<C: Launch + ?Sized>(
        &mut self,
        cx: &C,
        params: &mut Buffer<f32>,
        grads: &Buffer<f32>,
        s: AdamScalars,
        segments: &[Range<usize>],
    ) -> Result<()> {
        let op = if self.decoupled { "AdamW" } else { "Adam" };
        let n = self.counter.n;
        check_pair(op, n, params, grads)?;
        self.counter.check_segments(op, segments)?;
        for (i, r) in segments.iter().enumerate() {
            let (a, b) = (r.start, r.end);
            // The lead takes the counter's fixed workgroups; the others what their range needs.
            let lead = i == 0;
            let share = if lead {
                self.counter.groups
            } else {
                opt_groups(r.len(), ADAM_PER_PASS)
            };
            adam_step::launch(
                cx,
                Grid::workgroups(share),
                s.lr,
                s.beta1,
                s.beta2,
                s.eps,
                s.weight_decay,
                self.decoupled,
                lead,
                &mut params.slice(a..b)?,
                &grads.slice(a..b)?,
                &mut self.moments.slice(a..b)?,
                &mut self.moments.slice(n + a..n + b)?,
                &mut self.counter.count,
            )?;
        }
        Ok(())
    }

    /// The per-step values of an update with learning rate `lr` and the configured constants.
    fn scalars(&self, lr: ScalarArg<f32>) -> AdamScalars {
        let c = self.config;
        AdamScalars {
            lr,
            beta1: c.beta1.into(),
            beta2: c.beta2.into(),
            eps: c.eps.into(),
            weight_decay: c.weight_decay.into(),
        }
    }
}

/// AdamW: Adam with decoupled weight decay (`p ← p·(1 − lr·wd)` before the Adam update), as
/// `torch.optim.AdamW`. PyTorch's default weight decay for AdamW is 0.01.
#[derive(Clone, Debug)]
pub struct AdamW(Adam);

impl AdamW {
    /// AdamW for `n` parameters.
    pub fn new(dev: &Device, n: usize, config: AdamConfig) -> Result<AdamW> {
        Adam::build(dev, n, config, true).map(AdamW)
    }

    /// AdamW over existing state (see [`Adam::from_state`]).
    pub fn from_state(
        config: AdamConfig,
        moments: Buffer<f32>,
        count: Buffer<u32>,
    ) -> Result<AdamW> {
        Adam::from_state(config, true, moments, count).map(AdamW)
    }

    /// PyTorch's AdamW defaults: β = (0.9, 0.999), ε = 1e-8, weight decay 0.01.
    pub fn default_config() -> AdamConfig {
        AdamConfig {
            weight_decay: 0.01,
            ..AdamConfig::default()
        }
    }
}

impl std::ops::Deref for AdamW {
    type Target = Adam;
    fn deref(&self) -> &Adam {
        &self.0
    }
}

impl std::ops::DerefMut for AdamW {
    fn deref_mut(&mut self) -> &mut Adam {
        &mut self.0
    }
}

/// Hyper-parameters of SGD (PyTorch's defaults: `Default`, all zero).
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct SgdConfig {
    /// Momentum μ.
    pub momentum: f32,
    /// Dampening of the momentum.
    pub dampening: f32,
    /// L2 weight decay.
    pub weight_decay: f32,
    /// Nesterov momentum.
    pub nesterov: bool,
}

/// SGD with momentum over a flat parameter buffer.
#[derive(Clone, Debug)]
pub struct Sgd {
    config: SgdConfig,
    momentum: Buffer<f32>,
    counter: Counter,
}

impl Sgd {
    /// SGD for `n` parameters.
    pub fn new(dev: &Device, n: usize, config: SgdConfig) -> Result<Sgd> {
        u32_of("parameters", n)?;
        Ok(Sgd {
            config,
            momentum: dev.alloc(n)?,
            counter: Counter::alloc(dev, n, 1)?,
        })
    }

    /// SGD over existing state (`momentum`: `n`; `count`: [`COUNTER_WORDS`] words).
    pub fn from_state(config: SgdConfig, momentum: Buffer<f32>, count: Buffer<u32>) -> Result<Sgd> {
        let counter = Counter::from_state("Sgd", momentum.len(), 1, count)?;
        Ok(Sgd {
            config,
            momentum,
            counter,
        })
    }

    /// The momentum buffer.
    pub fn momentum_buffer(&self) -> &Buffer<f32> {
        &self.momentum
    }

    counter_accessors!();

    /// One update of every parameter. One launch.
    pub fn step<C: Launch + ?Sized>(
        &mut self,
        cx: &C,
        params: &mut Buffer<f32>,
        grads: &Buffer<f32>,
        lr: impl IntoScalarArg<f32>,
    ) -> Result<()> {
        check_pair("Sgd", self.counter.n, params, grads)?;
        let c = self.config;
        sgd_step::launch(
            cx,
            Grid::workgroups(self.counter.groups),
            lr,
            c.momentum,
            c.dampening,
            c.weight_decay,
            c.nesterov,
            params,
            grads,
            &mut self.momentum,
            &mut self.counter.count,
        )
    }
}

/// Gradient-norm clipping on the device, as `torch.nn.utils.clip_grad_norm_`: `‖g‖` by a
/// sum-of-squares reduction into a device buffer, then every gradient times
/// `min(max_norm / (‖g‖ + 1e-6), 1)`. Two launches, no host read.
#[derive(Clone, Debug)]
pub struct GradClip {
    n: usize,
    partials: Buffer<f32>,
    norm: Buffer<f32>,
}

impl GradClip {
    /// A clipper for `n` gradients.
    pub fn new(dev: &Device, n: usize) -> Result<GradClip> {
        u32_of("gradients", n)?;
        Ok(GradClip {
            n,
            partials: dev.alloc(first_pass_groups(n) as usize)?,
            norm: dev.alloc(1)?,
        })
    }

    /// Device elements of the partial sums a clipper of `n` gradients needs.
    pub fn partials_len(n: usize) -> usize {
        first_pass_groups(n) as usize
    }

    /// A clipper over existing device buffers (`partials`: [`GradClip::partials_len`]
    /// elements; `norm`: one), e.g. a step's `#[state]` or workspace buffers.
    pub fn from_buffers(n: usize, partials: Buffer<f32>, norm: Buffer<f32>) -> Result<GradClip> {
        u32_of("gradients", n)?;
        expect_len(
            "GradClip",
            "partials",
            partials.len(),
            Self::partials_len(n),
        )?;
        expect_len("GradClip", "norm", norm.len(), 1)?;
        Ok(GradClip { n, partials, norm })
    }

    /// The total norm before clipping, as of the last [`GradClip::clip`] (one element).
    pub fn norm(&self) -> &Buffer<f32> {
        &self.norm
    }

    /// Clips `grads` in place to total norm `max_norm` (a constant or a per-step scalar).
    pub fn clip<C: Launch + ?Sized>(
        &mut self,
        cx: &C,
        grads: &mut Buffer<f32>,
        max_norm: impl IntoScalarArg<f32>,
    ) -> Result<()> {
        expect_len("GradClip", "grads", grads.len(), self.n)?;
        let g = first_pass_groups(self.n);
        reduce_all::launch(
            cx,
            Grid::workgroups(g),
            1u32,
            0u32,
            0.0f32,
            grads,
            &mut self.partials,
        )?;
        clip_scale::launch(
            cx,
            Grid::workgroups(groups(self.n)),
            max_norm,
            &self.partials,
            grads,
            &mut self.norm,
        )
    }
}
