//! Kernels and steps shared by the lifecycle and fault suites.

use graphed::prelude::*;

/// y = tanh(w ⊙ x + b)
#[kernel(workgroup = 64)]
pub fn layer(x: &[f32], w: &[f32], b: f32, y: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = tanh(w[i] * x[i] + b);
    }
}

/// w -= lr * (g ⊙ x)
#[kernel(workgroup = 64)]
pub fn update(lr: f32, g: &[f32], x: &[f32], w: &mut [f32]) {
    let i = global_id().x;
    if i < w.len() {
        w[i] -= lr * g[i] * x[i];
    }
}

/// out[0] = Σ y (one workgroup, tree reduction).
#[kernel(workgroup = 64)]
pub fn total(y: &[f32], out: &mut [f32]) {
    let s = shared::<f32, 64>();
    let t = local_id().x;
    let mut acc = 0.0;
    for i in (t..y.len()).step_by(64) {
        acc += y[i];
    }
    s[t] = acc;
    barrier();
    let mut stride = 32u32;
    while stride > 0 {
        if t < stride {
            s[t] = s[t] + s[t + stride];
        }
        barrier();
        stride = stride / 2;
    }
    if t == 0 {
        out[0] = s[0];
    }
}

/// y = a·x + 1
#[kernel(workgroup = 64)]
pub fn axpb(a: f32, x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = a * x[i] + 1.0;
    }
}

/// The body of a chain step over `x` of `n` elements: x → a (ws, n) → b (ws, n) → c (ws, 2n,
/// half used) → y, [`axpb`] launches with `s`, 0.5, −1.5 and 0.25. a and c are never live at
/// once, so the arena is 3n words (a and c share [0, 2n), b and y [2n, 3n)). `after_a(n)` runs
/// between a's launch and b's workspace (a suite's fault hook; `|_| {}` for none).
pub fn chain(
    cx: &mut Step,
    x: &Input<f32>,
    s: Scalar<f32>,
    after_a: impl FnOnce(usize),
) -> Result<Output<f32>> {
    let n = x.len();
    let mut a = cx.workspace::<f32>(n)?;
    axpb::launch(cx, n, s, x, &mut a)?;
    after_a(n);
    let mut b = cx.workspace::<f32>(n)?;
    axpb::launch(cx, n, 0.5, &a, &mut b)?;
    let c = cx.workspace::<f32>(2 * n)?;
    let mut c1 = c.slice(n..2 * n)?;
    axpb::launch(cx, n, -1.5, &b, &mut c1)?;
    let mut y = cx.output::<f32>(n)?;
    axpb::launch(cx, n, 0.25, &c1, &mut y)?;
    Ok(y)
}

pub const LAYERS: usize = 10;

/// 10 layers forward (10 launches), 10 in-place updates (10 launches), a reduction: 21 launches.
#[graphed]
pub fn deep_step(
    cx: &mut Step,
    #[state] w: &mut Buffer<f32>,
    x: &Input<f32>,
    lr: f32,
    bias: f32,
) -> Result<(Output<f32>, Output<f32>)> {
    let n = x.len();
    let mut acts = cx.workspace::<f32>(n * (LAYERS + 1))?;
    let mut first = acts.slice(0..n)?;
    cx.copy(x, &mut first)?;
    for l in 0..LAYERS {
        let a = acts.slice(l * n..(l + 1) * n)?;
        let mut b = acts.slice((l + 1) * n..(l + 2) * n)?;
        let wl = w.slice(l * n..(l + 1) * n)?;
        layer::launch(cx, n, &a, &wl, bias, &mut b)?;
    }
    for l in 0..LAYERS {
        let g = acts.slice((l + 1) * n..(l + 2) * n)?;
        let a = acts.slice(l * n..(l + 1) * n)?;
        let mut wl = w.slice(l * n..(l + 1) * n)?;
        update::launch(cx, n, lr, &g, &a, &mut wl)?;
    }
    let mut y = cx.output::<f32>(n)?;
    let last = acts.slice(LAYERS * n..(LAYERS + 1) * n)?;
    cx.copy(&last, &mut y)?;
    let mut sum = cx.output::<f32>(1)?;
    total::launch(cx, Grid::workgroups(1), &last, &mut sum)?;
    let _ = &mut acts;
    Ok((y, sum))
}
