//! The benchmark harness: `cargo bench --bench replay -- [launch] [mlp|mlp-S|mlp-M]
//! [mixed|mixed-M|mixed-L] [--precision f32|tf32|bf16|f16]... [sampler] [reduce]
//! [half] [--backend host|wgpu|cuda] [--checked] [--variants] [--quick] [--out DIR]`; `-- --chart CSV [--out DIR]`
//! redraws the chart of an earlier run.
//!
//! `--checked`: the MLP workloads run a second time on a device of the same GPU backend in
//! checked mode (every index of every kernel checked, `DeviceOptions::checked`), as variants
//! `eager+checked`, `replay+checked`, …: the cost of checked mode side by side.
//! (`GRAPHED_CHECKED=1` instead makes every device of the run checked.)
//!
//! Workload `launch`: a step of N launches (N = 10, 50, 200, 1000) of an empty kernel and of a
//! small elementwise kernel (1024 floats), as our eager launches, our replay, and (on CUDA)
//! raw cudarc launches with and without a hand-made CUDA graph, side by side in one run.
//! Workload `mlp`: the training step of `graphed::train` on the MLP-S and MLP-M shapes of
//! `shared/bench/torch_mlp_step.py` (`mlp-S` or `mlp-M` for one of them), with the vendor BLAS
//! and with the DSL products; on CUDA also with the epilogues not fused into the cuBLASLt call
//! (`Device::set_vendor_fused(false)`), as variants `eager+unfused`, `replay+unfused`, …, and
//! with the library's candidate algorithms timed and the fastest run (`Device::set_vendor_tune`),
//! as `replay+tuned`, and with the one-pass choice of `Device::set_vendor_one_pass` switched
//! the other way, as `replay+split` (both also for `mixed`). With
//! `--variants`, where the device reports its multiprocessors (CUDA), the same steps run again
//! with split-K's fill rule off (`Device::set_split_fill(false)`), as variants `eager+nosplit`,
//! `replay+nosplit`, …; and on CUDA with split products summed serially (`Device::split_serial`, off by default: the last
//! workgroup of each tile sums) instead of by a second launch, as variants `replay+serial`, ….
//! Workload `mixed`:
//! `graphed::nn::mixed`'s step on the MLP-M and MLP-L shapes of
//! `shared/bench/torch_mixed_step.py` (`mixed-M`, `mixed-L`; MLP-L on CUDA only) at each
//! `--precision` given (default bf16), with each step's achieved TFLOP/s. Workload `mma`: the
//! kernel library's tensor-core product beside cuBLAS's on the MLP-L products (CUDA only; see
//! `mma_workload`); `mma-k`: the gradient products at short `k`, lean against words (where
//! `MmaTile::Auto` switches, `WORDS_TRANSPOSE_MIN_K`). Workload `sampler`: one timestep of `graphed::sample`
//! (the `sampler` example's step). Each runs eagerly and replayed on every backend asked for.
//! Workload `half`: an axpy over 2^23 elements in `f32`, `f16` and `bf16` storage, side by side.
//! Workload `tiles`: the MLP products with each tiling and split-K on (summed by a second launch,
//! `fill`, or serially, `fill-serial`, CUDA only) and off (`whole`) (`tiles_workload`).
//! Workload `bind`: replay time against a device input's size (1 KiB to 64 MiB), the input
//! copied into its slot (as before) beside bound by address and re-pointed every call.
//! Workload `update`: state alternating between two allocations, the recording updated beside
//! recorded again every call, beside plain replay.
//!
//! What each figure includes:
//! - `us/step`: wall time of many consecutive steps divided by their count, with one device
//!   synchronisation at the end (median of 5 repeats; spread = min..max of the repeats).
//! - `cpu us/call`: host time spent inside the call that enqueues one step (no sync).
//! - `record+lower ms`: the first call's recording of the body plus lowering (CUDA: capture,
//!   instantiate, upload; wgpu: pipelines, bind groups), as the holder's stats report them.

use std::fmt::Write as _;
use std::time::Instant;

use graphed::prelude::*;
use graphed::BackendKind;

#[kernel(workgroup = 256)]
pub fn empty(y: &mut [f32]) {}

/// `y ← a·x + y` in `f32`: the `half` workload's baseline.
#[kernel(workgroup = 256)]
pub fn axpy_f32(a: f32, x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = a * x[i] + y[i];
    }
}

/// `y ← a·x + y` on `f16` storage, computed in `f32` and rounded once.
#[kernel(workgroup = 256)]
pub fn axpy_f16(a: f32, x: &[f16], y: &mut [f16]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = (a * x[i] as f32 + y[i] as f32) as f16;
    }
}

/// `y ← a·x + y` on `bf16` storage, computed in `f32` and rounded once (on wgpu each store
/// is a 32-bit atomic word update: WGSL has no 16-bit type for `bf16`).
#[kernel(workgroup = 256)]
pub fn axpy_bf16(a: f32, x: &[bf16], y: &mut [bf16]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = (a * x[i] as f32 + y[i] as f32) as bf16;
    }
}

#[kernel(workgroup = 256)]
pub fn axpb(a: f32, b: f32, y: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = y[i] * a + b;
    }
}

#[graphed]
fn chain_empty(cx: &mut Step, #[state] y: &mut Buffer<f32>, #[key] n: usize) -> Result<()> {
    for _ in 0..n {
        empty::launch(cx, Grid::workgroups(1), y)?;
    }
    Ok(())
}

#[graphed]
fn chain_axpb(cx: &mut Step, #[state] y: &mut Buffer<f32>, a: f32, #[key] n: usize) -> Result<()> {
    for _ in 0..n {
        axpb::launch(cx, y.len(), a, 0.001, y)?;
    }
    Ok(())
}

const ELEMS: usize = 1024;

/// y = x[0..len(y)] + 1: reads 16 elements of an input of any size.
#[kernel(workgroup = 64)]
pub fn head(x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = x[i] + 1.0;
    }
}

#[graphed]
fn read_head(cx: &mut Step, x: &Input<f32>) -> Result<Output<f32>> {
    let mut y = cx.output::<f32>(16)?;
    head::launch(cx, 16, x, &mut y)?;
    Ok(y)
}

/// Bytes the plan's static buffers would take each in an allocation of its own, beside
/// `Plan::static_bytes` (liveness-packed).
fn unpacked_bytes(plan: &graphed::Plan) -> u64 {
    let packed: u64 = plan
        .buffers()
        .iter()
        .filter(|b| b.arena_offset.is_some())
        .map(|b| b.bytes)
        .sum();
    plan.static_bytes() - plan.arena_bytes() + packed
}

/// Workload `bind`: a step reading 16 elements of a device input of 1 KB to 64 MB. Variants:
/// `input copied` (into the slot before each replay, as before issue 17), `input bound` (the
/// same buffer every call: bound by address), `input rebound` (two buffers alternating:
/// re-pointed every call). N is the input's size in KiB.
fn bind_workload(dev: &Device, quick: bool, rows: &mut Vec<Row>) -> Result<()> {
    let backend = format!("{}", dev.kind());
    let sync = || dev.synchronize().unwrap();
    for kib in [1usize, 8, 64, 512, 4096, 64 * 1024] {
        let len = kib * 256;
        let data: Vec<f32> = (0..len).map(|i| (i % 97) as f32).collect();
        let (a, b) = (dev.upload(&data)?, dev.upload(&data)?);
        let steps = steps_for(dev.kind(), 10, quick);
        for variant in ["input copied", "input bound", "input rebound"] {
            let cfg = graphed::Config {
                bind_device_inputs: variant != "input copied",
                ..graphed::Config::default()
            };
            let mut step = ReadHead::with_config(dev, cfg)?;
            step.call(&a)?;
            let mut flip = false;
            let (us, lo, hi, cpu) = measure(
                steps,
                || {
                    flip = !flip;
                    let x = if variant == "input rebound" && flip {
                        &b
                    } else {
                        &a
                    };
                    step.call(x).unwrap();
                },
                sync,
            );
            let st = step.stats();
            rows.push(Row {
                workload: "bind".into(),
                backend: backend.clone(),
                variant: variant.into(),
                n: kib,
                us_step: us,
                spread: (lo, hi),
                cpu_us: cpu,
                nodes: st.launches_per_replay,
                record_ms: None,
            });
            if kib == 64 * 1024 {
                eprintln!(
                    "bind on {backend}, 64 MiB input, {variant}: {} rebinds; static bytes {}",
                    st.rebinds, st.static_bytes
                );
            }
        }
    }
    Ok(())
}

/// Workload `update`: a chain of N elementwise launches on a state buffer, with the state
/// alternating between two allocations every call: `state updated` (the recording is
/// re-pointed) against `state re-recorded` (`Config::update_states = false`: record + lower
/// every call), beside `replay` (the same allocation every call).
fn update_workload(dev: &Device, quick: bool, rows: &mut Vec<Row>) -> Result<()> {
    let backend = format!("{}", dev.kind());
    let sync = || dev.synchronize().unwrap();
    for &n in &[10usize, 50, 200] {
        let steps = steps_for(dev.kind(), n, quick).min(if quick { 5 } else { 200 });
        let mut a = dev.upload(&vec![1.0f32; ELEMS])?;
        let mut b = dev.upload(&vec![1.0f32; ELEMS])?;
        for variant in ["replay", "state updated", "state re-recorded"] {
            let cfg = graphed::Config {
                update_states: variant != "state re-recorded",
                ..graphed::Config::default()
            };
            let mut step = ChainAxpb::with_config(dev, cfg)?;
            step.call(&mut a, 0.999, n)?;
            let mut flip = false;
            let (us, lo, hi, cpu) = measure(
                steps,
                || {
                    flip = !flip;
                    let y = if variant != "replay" && flip {
                        &mut b
                    } else {
                        &mut a
                    };
                    step.call(y, 0.999, n).unwrap();
                },
                sync,
            );
            let st = step.stats();
            let rec = match (st.last_record, st.last_lower) {
                (Some(r), Some(l)) => Some((r + l).as_secs_f64() * 1e3),
                _ => None,
            };
            rows.push(Row {
                workload: "update".into(),
                backend: backend.clone(),
                variant: variant.into(),
                n,
                us_step: us,
                spread: (lo, hi),
                cpu_us: cpu,
                nodes: st.launches_per_replay,
                record_ms: rec,
            });
            eprintln!(
                "update on {backend}, N = {n}, {variant}: {} recordings, {} updates",
                st.recordings, st.updates
            );
        }
    }
    Ok(())
}

struct Row {
    workload: String,
    backend: String,
    variant: String,
    n: usize,
    us_step: f64,
    spread: (f64, f64),
    cpu_us: f64,
    nodes: usize,
    record_ms: Option<f64>,
}

/// Runs `step` `steps` times per repeat, 5 repeats; returns (median us/step, min, max, cpu us
/// per call). The CPU cost is measured separately, in bursts of 8 calls followed by an
/// untimed sync, so a full launch queue (backpressure) does not count as CPU work.
fn measure(steps: usize, mut step: impl FnMut(), sync: impl Fn()) -> (f64, f64, f64, f64) {
    for _ in 0..3 {
        step();
    }
    sync();
    let mut walls = Vec::new();
    for _ in 0..5 {
        let t0 = Instant::now();
        for _ in 0..steps {
            step();
        }
        sync();
        walls.push(t0.elapsed().as_secs_f64() * 1e6 / steps as f64);
    }
    walls.sort_by(f64::total_cmp);
    let mut cpu = 0.0;
    let bursts = steps.div_ceil(8).max(2);
    for _ in 0..bursts {
        let t = Instant::now();
        for _ in 0..8 {
            step();
        }
        cpu += t.elapsed().as_secs_f64();
        sync();
    }
    (
        walls[2],
        walls[0],
        walls[4],
        cpu * 1e6 / (bursts * 8) as f64,
    )
}

fn steps_for(kind: BackendKind, n: usize, quick: bool) -> usize {
    let base = match kind {
        BackendKind::Host => 20,
        BackendKind::Wgpu => 100,
        BackendKind::Cuda => 2000,
    };
    let s = (base * 200 / n.max(50)).max(5);
    if quick {
        (s / 10).max(3)
    } else {
        s
    }
}

/// The replay variants measured: `replay` (the default: the plan's dependency graph,
/// programmatic edges on chain links, `Programmatic::Chains`) and, on CUDA, `replay-serial`
/// (one chain, `Config::concurrent_ops` false), `replay-nopdl` (no programmatic edges) and
/// `replay+pdl` (every kernel-to-kernel edge programmatic, `Programmatic::On`).
fn replay_variants(kind: BackendKind) -> Vec<(&'static str, graphed::Config)> {
    let mut v = vec![("replay", graphed::Config::default())];
    if kind == BackendKind::Cuda {
        v.push((
            "replay-serial",
            graphed::Config {
                concurrent_ops: false,
                ..graphed::Config::default()
            },
        ));
        for (name, programmatic_launch) in [
            ("replay-nopdl", graphed::Programmatic::Off),
            ("replay+pdl", graphed::Programmatic::On),
        ] {
            v.push((
                name,
                graphed::Config {
                    programmatic_launch,
                    ..graphed::Config::default()
                },
            ));
        }
    }
    v
}

fn launch_workload(dev: &Device, quick: bool, rows: &mut Vec<Row>) -> Result<()> {
    let backend = format!("{}", dev.kind());
    for &n in &[10usize, 50, 200, 1000] {
        let steps = steps_for(dev.kind(), n, quick);
        let sync = || dev.synchronize().unwrap();
        for kernel in ["empty", "axpb"] {
            let mut y = dev.upload(&vec![1.0f32; ELEMS])?;
            // Eager: n launches through the device.
            let (us, lo, hi, cpu) = measure(
                steps,
                || {
                    for _ in 0..n {
                        if kernel == "empty" {
                            empty::launch(dev, Grid::workgroups(1), &mut y).unwrap();
                        } else {
                            axpb::launch(dev, ELEMS, 0.999, 0.001, &mut y).unwrap();
                        }
                    }
                },
                sync,
            );
            rows.push(Row {
                workload: format!("launch-{kernel}"),
                backend: backend.clone(),
                variant: "eager".into(),
                n,
                us_step: us,
                spread: (lo, hi),
                cpu_us: cpu,
                nodes: n,
                record_ms: None,
            });
            // Replay: the plan's graph (here a chain through `y`), and on CUDA also the
            // serial lowering and programmatic dependent launch, to compare per-node costs.
            for (variant, cfg) in replay_variants(dev.kind()) {
                let (us, lo, hi, cpu, rec) = if kernel == "empty" {
                    let mut step = ChainEmpty::with_config(dev, cfg)?;
                    step.call(&mut y, n)?;
                    let st = step.stats();
                    let rec = st.last_record.unwrap().as_secs_f64() * 1e3
                        + st.last_lower.unwrap().as_secs_f64() * 1e3;
                    let m = measure(steps, || step.call(&mut y, n).unwrap(), sync);
                    (m.0, m.1, m.2, m.3, rec)
                } else {
                    let mut step = ChainAxpb::with_config(dev, cfg)?;
                    step.call(&mut y, 0.999, n)?;
                    let st = step.stats();
                    let rec = st.last_record.unwrap().as_secs_f64() * 1e3
                        + st.last_lower.unwrap().as_secs_f64() * 1e3;
                    let m = measure(steps, || step.call(&mut y, 0.999, n).unwrap(), sync);
                    (m.0, m.1, m.2, m.3, rec)
                };
                rows.push(Row {
                    workload: format!("launch-{kernel}"),
                    backend: backend.clone(),
                    variant: variant.into(),
                    n,
                    us_step: us,
                    spread: (lo, hi),
                    cpu_us: cpu,
                    nodes: n,
                    record_ms: Some(rec),
                });
            }
            #[cfg(feature = "cuda")]
            if dev.kind() == BackendKind::Cuda {
                raw::bench(kernel, n, steps, rows).map_err(|e| graphed::Error::Device {
                    backend: "cuda",
                    reason: e,
                })?;
            }
        }
    }
    Ok(())
}

/// Raw cudarc, bypassing graphed: the same PTX launched directly, and captured by hand into a
/// CUDA graph. The baseline our replay is measured against.
#[cfg(feature = "cuda")]
mod raw {
    use super::*;
    use cudarc::driver::{sys, CudaContext, LaunchConfig, PushKernelArg};

    pub fn bench(
        kernel: &str,
        n: usize,
        steps: usize,
        rows: &mut Vec<Row>,
    ) -> std::result::Result<(), String> {
        let e = |e: cudarc::driver::DriverError| e.to_string();
        let ctx = CudaContext::new(0).map_err(e)?;
        // SAFETY: this benchmark never relies on cudarc's event tracking (it breaks capture).
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(e)?;
        let (major, minor) = ctx.compute_capability().map_err(e)?;
        let def = if kernel == "empty" {
            &empty::DEF
        } else {
            &axpb::DEF
        };
        let ptx = graphed::nvrtc::compile(def, &format!("sm_{major}{minor}"))
            .map_err(|e| e.to_string())?;
        let module = ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
            .map_err(e)?;
        let f = module.load_function(def.name).map_err(e)?;
        let args: Vec<u32> = if kernel == "empty" {
            vec![0, ELEMS as u32]
        } else {
            vec![0.999f32.to_bits(), 0.001f32.to_bits(), 0, ELEMS as u32]
        };
        let args = stream.clone_htod(&args).map_err(e)?;
        let mut y = stream.alloc_zeros::<f32>(ELEMS).map_err(e)?;
        let cfg = if kernel == "empty" {
            LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            }
        } else {
            LaunchConfig {
                grid_dim: ((ELEMS as u32).div_ceil(256), 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            }
        };
        let mut issue = |stream: &std::sync::Arc<cudarc::driver::CudaStream>| -> std::result::Result<(), String> {
            for _ in 0..n {
                let mut b = stream.launch_builder(&f);
                b.arg(&args);
                b.arg(&mut y);
                // SAFETY: the kernel takes (argument block, y) as device pointers, as passed.
                unsafe { b.launch(cfg) }.map_err(e)?;
            }
            Ok(())
        };
        let sync = || stream.synchronize().unwrap();
        let (us, lo, hi, cpu) = measure(steps, || issue(&stream).unwrap(), sync);
        rows.push(Row {
            workload: format!("launch-{kernel}"),
            backend: "cuda".into(),
            variant: "raw-cudarc-eager".into(),
            n,
            us_step: us,
            spread: (lo, hi),
            cpu_us: cpu,
            nodes: n,
            record_ms: None,
        });
        let t = Instant::now();
        stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(e)?;
        issue(&stream)?;
        let graph = stream
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .map_err(e)?
            .ok_or("empty graph")?;
        graph.upload().map_err(e)?;
        stream.synchronize().map_err(e)?;
        let rec = t.elapsed().as_secs_f64() * 1e3;
        let (us, lo, hi, cpu) = measure(steps, || graph.launch().unwrap(), sync);
        rows.push(Row {
            workload: format!("launch-{kernel}"),
            backend: "cuda".into(),
            variant: "raw-cudarc-graph".into(),
            n,
            us_step: us,
            spread: (lo, hi),
            cpu_us: cpu,
            nodes: n,
            record_ms: Some(rec),
        });
        Ok(())
    }
}

/// The mixed-precision workloads of `shared/bench/torch_mixed_step.py`: MLP-M (batch 512,
/// 1024×5 → 10) and MLP-L (batch 4096, 4096×4 → 10), one step = forward, mean softmax
/// cross-entropy, backward, AdamW (lr 1e-3, weight decay 0.01) on fp32 master weights, at each
/// precision of `precisions` (`graphed::nn::mixed`), eagerly and replayed. Prints each step's
/// achieved TFLOP/s of its products (forward + two backward products per layer), as the
/// PyTorch script does. `only`: "mixed-M" or "mixed-L".
fn mixed_workload(
    dev: &Device,
    quick: bool,
    only: Option<&str>,
    precisions: &[graphed::nn::mixed::Precision],
    rows: &mut Vec<Row>,
) -> Result<()> {
    use graphed::nn::mixed::MixedTrainStep;
    use graphed::train::Classifier;
    let sizes: [(&str, usize, Vec<usize>); 2] = [
        (
            "mixed-M",
            512,
            vec![1024; 5].into_iter().chain([10]).collect(),
        ),
        (
            "mixed-L",
            4096,
            vec![4096; 4].into_iter().chain([10]).collect(),
        ),
    ];
    for (name, batch, widths) in sizes.iter() {
        if only.is_some_and(|o| o != *name)
            || (dev.kind() != BackendKind::Cuda && *name == "mixed-L")
        {
            continue;
        }
        let flops =
            6.0 * *batch as f64 * widths.windows(2).map(|w| (w[0] * w[1]) as f64).sum::<f64>();
        let steps = match (dev.kind(), *name) {
            (BackendKind::Cuda, "mixed-M") => 200,
            (BackendKind::Cuda, _) => 30,
            _ => 2,
        };
        let steps = if quick { (steps / 5).max(2) } else { steps };
        let x: Vec<f32> = (0..batch * widths[0])
            .map(|i| ((i * 2654435761usize) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let labels: Vec<u32> = (0..*batch).map(|i| ((i * 7) % 10) as u32).collect();
        let (x, labels) = (dev.upload(&x)?, dev.upload(&labels)?);
        for &p in precisions {
            let mut model = Classifier::new(dev, widths, 0)?;
            let mut eager_model = model.duplicate()?;
            let mut step = MixedTrainStep::new(dev)?;
            let sync = || dev.synchronize().unwrap();
            if let Err(e) = step.eager(&mut eager_model, &x, &labels, 1e-3, p) {
                eprintln!("{name} {} on {}: {e}; skipped", p.name(), dev.kind());
                continue;
            }
            let (us, lo, hi, cpu) = measure(
                steps,
                || {
                    step.eager(&mut eager_model, &x, &labels, 1e-3, p).unwrap();
                },
                sync,
            );
            step.call(&mut model, &x, &labels, 1e-3, p)?;
            let st = step.stats();
            let kernels = st.launches_per_replay;
            let rec = st
                .last_record
                .zip(st.last_lower)
                .map(|(r, l)| (r + l).as_secs_f64() * 1e3);
            eprintln!(
                "{name} {} on {}: eager {us:.1} us/step, {:.1} TFLOP/s",
                p.name(),
                dev.kind(),
                flops / us / 1e6
            );
            let row = |variant: &str, (us, lo, hi, cpu): (f64, f64, f64, f64), record_ms| Row {
                workload: name.to_string(),
                backend: dev.kind().to_string(),
                variant: format!("{variant}-{}", p.name()),
                n: kernels,
                us_step: us,
                spread: (lo, hi),
                cpu_us: cpu,
                nodes: kernels,
                record_ms,
            };
            rows.push(row("eager", (us, lo, hi, cpu), None));
            let (us, lo, hi, cpu) = measure(
                steps * 3,
                || {
                    step.call(&mut model, &x, &labels, 1e-3, p).unwrap();
                },
                sync,
            );
            eprintln!(
                "{name} {} on {}: replay {us:.1} us/step, {:.1} TFLOP/s ({kernels} kernels + {} library calls per step)",
                p.name(),
                dev.kind(),
                flops / us / 1e6,
                step.plan().map_or(0, |pl| pl.library_calls())
            );
            rows.push(row("replay", (us, lo, hi, cpu), rec));
        }
    }
    Ok(())
}

/// The vendor products of `plan` with their fused epilogues, e.g. `512x1024x1024+bias+relu`.
fn products_of(plan: &graphed::Plan) -> String {
    let names: Vec<String> = plan
        .ops()
        .iter()
        .filter_map(|op| match op {
            graphed::PlanOp::Sgemm { dims, fused, .. } => Some(format!(
                "{}x{}x{}{}",
                dims[0],
                dims[1],
                dims[2],
                fused.map_or(String::new(), |(f, _)| format!("+{}", f.name()))
            )),
            _ => None,
        })
        .collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(" ")
    }
}

/// The reference MLP workloads of `shared/bench/torch_mlp_step.py`: one step = forward, mean
/// softmax cross-entropy, backward, AdamW (lr 1e-3, PyTorch defaults), fp32.
/// `only`: run just this shape ("mlp-S" or "mlp-M").
fn mlp_workload(dev: &Device, quick: bool, only: Option<&str>, rows: &mut Vec<Row>) -> Result<()> {
    use graphed::train::{Classifier, TrainStep};
    // On CUDA, "cuda" is the automatic route (cuBLAS for MLP-M's large products, the DSL
    // kernels for the rest) and "cuda-dsl" the DSL kernels only (vendor BLAS switched off).
    let backend = if dev.kind() == BackendKind::Cuda && !dev.vendor_blas() {
        format!("{}-dsl", dev.kind())
    } else {
        dev.kind().to_string()
    };
    let sizes: [(&str, usize, Vec<usize>); 2] = [
        ("mlp-S", 64, vec![784, 256, 256, 10]),
        ("mlp-M", 512, vec![1024, 1024, 1024, 1024, 1024, 10]),
    ];
    for (name, batch, widths) in sizes.iter() {
        if only.is_some_and(|o| o != *name) {
            continue;
        }
        let flops =
            6.0 * *batch as f64 * widths.windows(2).map(|w| (w[0] * w[1]) as f64).sum::<f64>();
        let gflop = flops / 1e9;
        let steps = match dev.kind() {
            BackendKind::Cuda => 300,
            BackendKind::Wgpu if dev.adapter().contains("llvmpipe") => {
                if *name == "mlp-M" {
                    2
                } else {
                    10
                }
            }
            BackendKind::Wgpu => 100,
            BackendKind::Host => {
                if *name == "mlp-M" {
                    continue;
                } else {
                    2
                }
            }
        };
        let steps = if quick { (steps / 5).max(2) } else { steps };
        let x: Vec<f32> = (0..batch * widths[0])
            .map(|i| ((i * 2654435761usize) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let labels: Vec<u32> = (0..*batch).map(|i| ((i * 7) % 10) as u32).collect();
        // Inputs stay on the device (as in the PyTorch reference): each call copies them
        // device-to-device into the step's static slots instead of uploading from the host.
        let (x, labels) = (dev.upload(&x)?, dev.upload(&labels)?);
        let mut model = Classifier::new(dev, widths, 0)?;
        let mut eager_model = model.duplicate()?;
        let mut step = TrainStep::new(dev)?;
        let sync = || dev.synchronize().unwrap();
        dev.synchronize()?;
        dev.reset_peak();
        let base = dev.allocated_bytes();
        let (us, lo, hi, cpu) = measure(
            steps,
            || {
                let m = &mut eager_model;
                step.eager(m, &x, &labels, 1e-3).unwrap();
            },
            sync,
        );
        let eager_peak = dev.peak_allocated_bytes() - base;
        let kernels = {
            step.call(&mut model, &x, &labels, 1e-3)?;
            step.stats().launches_per_replay
        };
        rows.push(Row {
            workload: name.to_string(),
            backend: backend.clone(),
            variant: "eager".into(),
            n: kernels,
            us_step: us,
            spread: (lo, hi),
            cpu_us: cpu,
            nodes: kernels,
            record_ms: None,
        });
        let st = step.stats();
        let (Some(record), Some(lower)) = (st.last_record, st.last_lower) else {
            eprintln!(
                "{name} on {backend}: not replayed ({:?}); skipped",
                st.eager_reasons
            );
            continue;
        };
        let rec = (record + lower).as_secs_f64() * 1e3;
        let (us, lo, hi, cpu) = measure(
            steps,
            || {
                let m = &mut model;
                step.call(m, &x, &labels, 1e-3).unwrap();
            },
            sync,
        );
        eprintln!(
            "{name} on {backend}: {kernels} kernels/step, {:.1} GFLOP/s replayed; static bytes {} (liveness-packed; {} unpacked) vs eager peak {} (model state excluded)",
            gflop / (us * 1e-6),
            step.stats().static_bytes,
            step.holder().last_plan().map_or(0, unpacked_bytes),
            eager_peak
        );
        if let Some(plan) = step.holder().last_plan() {
            eprintln!("{name} on {backend}: products {}", products_of(plan));
        }
        rows.push(Row {
            workload: name.to_string(),
            backend: backend.clone(),
            variant: "replay".into(),
            n: kernels,
            us_step: us,
            spread: (lo, hi),
            cpu_us: cpu,
            nodes: kernels,
            record_ms: Some(rec),
        });
        // The drift sentinel's cost: every 100th replay also runs eagerly from the same state
        // and both are read back and compared (Config::sentinel_every).
        let mut watched_model = model.duplicate()?;
        let mut watched = TrainStep::with_config(
            dev,
            graphed::Config {
                sentinel_every: 100,
                ..graphed::Config::default()
            },
        )?;
        watched.call(&mut watched_model, &x, &labels, 1e-3)?;
        let (us, lo, hi, cpu) = measure(
            steps,
            || {
                let m = &mut watched_model;
                watched.call(m, &x, &labels, 1e-3).unwrap();
            },
            sync,
        );
        eprintln!(
            "{name} on {backend}: the sentinel compared {} replays with eager, all equal",
            watched.stats().sentinel_checks
        );
        rows.push(Row {
            workload: name.to_string(),
            backend: backend.clone(),
            variant: "replay+sentinel/100".into(),
            n: kernels,
            us_step: us,
            spread: (lo, hi),
            cpu_us: cpu,
            nodes: kernels,
            record_ms: None,
        });
        // The serial lowering and PDL beside the default graph (CUDA only).
        for (variant, cfg) in replay_variants(dev.kind()).into_iter().skip(1) {
            let mut m2 = model.duplicate()?;
            let mut other = TrainStep::with_config(dev, cfg)?;
            other.call(&mut m2, &x, &labels, 1e-3)?;
            let (us, lo, hi, cpu) = measure(
                steps,
                || {
                    other.call(&mut m2, &x, &labels, 1e-3).unwrap();
                },
                sync,
            );
            rows.push(Row {
                workload: name.to_string(),
                backend: backend.clone(),
                variant: variant.into(),
                n: kernels,
                us_step: us,
                spread: (lo, hi),
                cpu_us: cpu,
                nodes: kernels,
                record_ms: None,
            });
        }
    }
    Ok(())
}

/// The step of `examples/sampler.rs` (`graphed::sample`): one Euler timestep of classifier-free
/// guidance over a small network (two network passes and the update), 256 samples, cycling
/// through a 50-timestep noise schedule; µs per timestep. Replayed and eager samples of one
/// whole run from the same noise are compared bitwise.
fn sampler_workload(dev: &Device, quick: bool, rows: &mut Vec<Row>) -> Result<()> {
    use graphed::sample::{EulerStep, Sampler};
    let timesteps = 50;
    let sampler = Sampler::new(dev, timesteps, 256)?;
    let steps = match dev.kind() {
        BackendKind::Cuda => 2000,
        BackendKind::Wgpu if dev.adapter().contains("llvmpipe") => 50,
        BackendKind::Wgpu => 500,
        BackendKind::Host => 50,
    };
    let steps = if quick { (steps / 5).max(2) } else { steps };
    let sync = || dev.synchronize().unwrap();
    let mut step = EulerStep::new(dev)?;

    // Eager, with the peak of its allocations (the network excluded).
    let mut x = dev.upload(&sampler.noise())?;
    dev.synchronize()?;
    dev.reset_peak();
    let base = dev.allocated_bytes();
    let mut i = 0;
    let (us, lo, hi, cpu) = measure(
        steps,
        || {
            sampler
                .step_eager(&mut step, &mut x, i % timesteps)
                .unwrap();
            i += 1;
        },
        sync,
    );
    let eager_peak = dev.peak_allocated_bytes() - base;

    // Replay: the first call records and lowers.
    let mut x = dev.upload(&sampler.noise())?;
    sampler.step(&mut step, &mut x, 0)?;
    let st = step.stats();
    let kernels = st.launches_per_replay;
    let rec =
        st.last_record.unwrap().as_secs_f64() * 1e3 + st.last_lower.unwrap().as_secs_f64() * 1e3;
    // Replays after the recording call: timesteps 1, 2, … in turn.
    let time = |step: &mut EulerStep, x: &mut Buffer<f32>| {
        let mut i = 1;
        measure(
            steps,
            || {
                sampler.step(step, x, i % timesteps).unwrap();
                i += 1;
            },
            sync,
        )
    };
    let row = |variant: &str, (us, lo, hi, cpu): (f64, f64, f64, f64), record_ms| Row {
        workload: "sampler".into(),
        backend: dev.kind().to_string(),
        variant: variant.into(),
        n: kernels,
        us_step: us,
        spread: (lo, hi),
        cpu_us: cpu,
        nodes: kernels,
        record_ms,
    };
    rows.push(row("eager", (us, lo, hi, cpu), None));
    rows.push(row("replay", time(&mut step, &mut x), Some(rec)));
    // On CUDA: the same step lowered as one chain, and with programmatic dependent launch.
    for (variant, cfg) in replay_variants(dev.kind()).into_iter().skip(1) {
        let mut other = EulerStep::with_config(dev, cfg)?;
        let mut x = dev.upload(&sampler.noise())?;
        sampler.step(&mut other, &mut x, 0)?;
        rows.push(row(variant, time(&mut other, &mut x), None));
    }

    // One whole run each way from the same noise (replayed on the recorded buffer, so no
    // new recording): replay must equal eager bitwise.
    x.write(&sampler.noise())?;
    let mut b = dev.upload(&sampler.noise())?;
    for t in 0..timesteps {
        sampler.step(&mut step, &mut x, t)?;
        sampler.step_eager(&mut step, &mut b, t)?;
    }
    let (a, b) = (x.to_host()?, b.to_host()?);
    let same = a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits());
    eprintln!(
        "sampler on {}: {kernels} kernels/timestep, {} recording(s); static bytes {} (liveness-packed; {} unpacked) vs eager peak {} (network excluded); replayed run bitwise equal to eager: {same}",
        dev.kind(),
        step.stats().recordings,
        step.stats().static_bytes,
        step.holder().last_plan().map_or(0, unpacked_bytes),
        eager_peak
    );
    Ok(())
}

/// The kernel library's reductions (eager launches), with the workgroup tree and on
/// subgroups where the device has them: a whole-buffer sum and per-row sums and maxima.
/// Both variants give the same bits (checked here); the rows compare their times.
/// Workload `half`: one axpy over 2^23 elements stored as `f32`, `f16` and `bf16` (each
/// computed in `f32`, rounded once), eager launches side by side: what 16-bit storage costs or
/// saves per backend, and on wgpu what `bf16`'s word-update stores cost beside `f16`'s native
/// ones. Prints each variant's effective bandwidth (bytes read and written per second).
/// `REPS` launches of one product into `c` (a chain: each writes `c`), the `tiles` workload's step.
#[graphed]
fn product_chain(
    cx: &mut Step,
    #[state] c: &mut Buffer<f32>,
    a: &Input<f32>,
    b: &Input<f32>,
    #[key] g: graphed::kernels::matmul::Gemm,
) -> Result<()> {
    use graphed::kernels::matmul::{matmul, Epilogue};
    for _ in 0..TILE_REPS {
        matmul(cx, g, a, b, c, &Epilogue::default())?;
    }
    Ok(())
}

/// Products per `tiles` step.
const TILE_REPS: usize = 10;

/// Workload `tiles`: each product of the MLP-S step (and MLP-M's narrow ones) with 16×16,
/// 32×32 and 64×64 tiles, split-K's fill rule on (summed by a second launch, or serially where
/// the device allows) and off, replayed as a chain of [`TILE_REPS`]
/// launches; µs per product = µs/step ÷ reps (one node's launch latency included). The data
/// for choosing a product's tiling by measurement.
fn tiles_workload(dev: &Device, quick: bool, rows: &mut Vec<Row>) -> graphed::Result<()> {
    use graphed::kernels::matmul::{Gemm, Split, Tile};
    if dev.kind() == BackendKind::Host {
        eprintln!("workload tiles: skipped on host");
        return Ok(());
    }
    let steps = if quick { 40 } else { 400 };
    // (name, shape): MLP-S forward, input gradients, weight gradients; MLP-M's last layer
    // (its input gradient: `k` = 10).
    let shapes = [
        ("S fwd1 64x256x784", Gemm::nt(64, 256, 784)),
        ("S fwd2 64x256x256", Gemm::nt(64, 256, 256)),
        ("S fwd3 64x10x256", Gemm::nt(64, 10, 256)),
        ("S dX3 64x256x10", Gemm::nn(64, 256, 10)),
        ("S dX2 64x256x256", Gemm::nn(64, 256, 256)),
        ("S dW3 10x256x64", Gemm::tn(10, 256, 64)),
        ("S dW2 256x256x64", Gemm::tn(256, 256, 64)),
        ("S dW1 256x784x64", Gemm::tn(256, 784, 64)),
        ("M fwd5 512x10x1024", Gemm::nt(512, 10, 1024)),
        ("M dW5 10x1024x512", Gemm::tn(10, 1024, 512)),
        ("M dX5 512x1024x10", Gemm::nn(512, 1024, 10)),
    ];
    let sync = || dev.synchronize().unwrap();
    for (name, g0) in shapes {
        let fill = |i: usize, n: usize| -> Vec<f32> {
            (0..n)
                .map(|j| (((i + j) * 2_654_435_761usize) % 1000) as f32 * 2e-3 - 1.0)
                .collect()
        };
        let a = dev.upload(&fill(1, g0.m * g0.k))?;
        let b = dev.upload(&fill(2, g0.k * g0.n))?;
        for (tile, tname) in [(Tile::T16, "t16"), (Tile::T32, "t32"), (Tile::T64, "t64")] {
            // "fill": split-K summed by a second launch; "fill-serial": by the last workgroup
            // of each tile (`Device::split_serial`, CUDA only); "whole": no fill split.
            let serial_default = dev.split_serial();
            for (split, sname, serial) in [
                (Split::Auto, "fill", false),
                (Split::Auto, "fill-serial", true),
                (Split::Bounded, "whole", false),
            ] {
                if serial && dev.set_split_serial(true).is_err() {
                    continue;
                }
                if !serial {
                    dev.set_split_serial(false)?;
                }
                let g = Gemm { tile, split, ..g0 };
                let mut c = dev.alloc::<f32>(g.m * g.n)?;
                let mut step = ProductChain::new(dev)?;
                // Recorded now, with the setting of this variant.
                step.call(&mut c, &a, &b, g)?;
                dev.set_split_serial(serial_default)?;
                let m = measure(steps, || step.call(&mut c, &a, &b, g).unwrap(), sync);
                let nodes = step.stats().launches_per_replay;
                eprintln!(
                    "tiles on {}: {name} {tname} {sname}: {:.2} us per product ({} parts, {nodes} nodes/step)",
                    dev.kind(),
                    m.0 / TILE_REPS as f64,
                    g.split_parts(dev.multiprocessors())
                );
                rows.push(Row {
                    workload: format!("tiles {name}"),
                    backend: dev.kind().to_string(),
                    variant: format!("{tname} {sname}"),
                    n: TILE_REPS,
                    us_step: m.0,
                    spread: (m.1, m.2),
                    cpu_us: m.3,
                    nodes,
                    record_ms: None,
                });
            }
        }
    }
    Ok(())
}

fn half_workload(dev: &Device, quick: bool, rows: &mut Vec<Row>) -> graphed::Result<()> {
    let steps = if quick { 20 } else { 200 };
    let n = 1usize << 23;
    let grid = Grid::workgroups((n / 256) as u32);
    let xs: Vec<f32> = (0..n)
        .map(|i| ((i * 7919) % 1000) as f32 * 1e-3 - 0.5)
        .collect();
    let ys: Vec<f32> = (0..n)
        .map(|i| ((i * 104_729) % 997) as f32 * 1e-3)
        .collect();
    let sync = || dev.synchronize().unwrap();
    let mut row = |variant: &str, (us, lo, hi, cpu): (f64, f64, f64, f64), bytes: usize| {
        eprintln!(
            "half on {}: {variant}: {:.1} GB/s effective",
            dev.kind(),
            3.0 * (n * bytes) as f64 / (us * 1e3)
        );
        rows.push(Row {
            workload: "half-axpy".into(),
            backend: dev.kind().to_string(),
            variant: variant.into(),
            n,
            us_step: us,
            spread: (lo, hi),
            cpu_us: cpu,
            nodes: 1,
            record_ms: None,
        })
    };
    let (x, mut y) = (dev.upload(&xs)?, dev.upload(&ys)?);
    row(
        "f32",
        measure(
            steps,
            || axpy_f32::launch(dev, grid, 1e-3f32, &x, &mut y).unwrap(),
            sync,
        ),
        4,
    );
    let h = |v: &[f32]| v.iter().map(|&f| f16::from_f32(f)).collect::<Vec<_>>();
    let (x, mut y) = (dev.upload(&h(&xs))?, dev.upload(&h(&ys))?);
    match axpy_f16::launch(dev, grid, 1e-3f32, &x, &mut y) {
        Ok(()) => row(
            "f16",
            measure(
                steps,
                || axpy_f16::launch(dev, grid, 1e-3f32, &x, &mut y).unwrap(),
                sync,
            ),
            2,
        ),
        Err(e) => eprintln!("half on {}: f16 skipped: {e}", dev.kind()),
    }
    let b = |v: &[f32]| v.iter().map(|&f| bf16::from_f32(f)).collect::<Vec<_>>();
    let (x, mut y) = (dev.upload(&b(&xs))?, dev.upload(&b(&ys))?);
    let variant = if dev.kind() == BackendKind::Wgpu {
        "bf16 (word updates)"
    } else {
        "bf16"
    };
    row(
        variant,
        measure(
            steps,
            || axpy_bf16::launch(dev, grid, 1e-3f32, &x, &mut y).unwrap(),
            sync,
        ),
        2,
    );
    Ok(())
}

fn reduce_workload(dev: &Device, quick: bool, rows: &mut Vec<Row>) -> graphed::Result<()> {
    use graphed::kernels::loss;
    use graphed::kernels::reduce::{self, Reduce};
    let steps = if quick { 20 } else { 200 };
    let (r, c) = (4096usize, 1024usize);
    let xs: Vec<f32> = (0..r * c)
        .map(|i| ((i * 7919) % 1000) as f32 * 1e-3 - 0.5)
        .collect();
    let x = dev.upload(&xs)?;
    let mut out = dev.alloc::<f32>(r)?;
    let mut one = dev.alloc::<f32>(1)?;
    let mut ws = dev.alloc::<f32>(reduce::workspace_len(xs.len()).max(1))?;
    // The losses' row reductions: wide rows (one workgroup a row: `x` as 4096 × 1024
    // logits), narrow rows (one invocation a row: `x` as 419,430 × 10 logits, several
    // workgroups and a second pass) and the MSE of `x` against its reverse.
    let narrow = 10usize;
    let labels = |rows: usize, classes: usize| -> Vec<u32> {
        (0..rows).map(|i| ((i * 31) % classes) as u32).collect()
    };
    let wide_labels = dev.upload(&labels(r, c))?;
    let narrow_x = x.slice(0..(xs.len() / narrow) * narrow)?;
    let narrow_labels = dev.upload(&labels(xs.len() / narrow, narrow))?;
    let target = dev.upload(&xs.iter().rev().copied().collect::<Vec<f32>>())?;
    let mut dlogits = dev.alloc::<f32>(xs.len())?;
    let mut dnarrow = dev.alloc::<f32>(narrow_x.len())?;
    let lws = loss::xent_workspace_len(xs.len() / narrow, narrow)
        .max(loss::mse_workspace_len(xs.len()))
        .max(1);
    let mut lws = dev.alloc::<f32>(lws)?;
    let sync = || dev.synchronize().unwrap();
    let mut results = Vec::new();
    let variants: &[bool] = if dev.subgroup_size().is_some() {
        &[false, true]
    } else {
        &[false]
    };
    for &sub in variants {
        dev.set_library_subgroups(sub);
        let variant = if sub {
            format!("subgroups-{}", dev.subgroup_size().unwrap_or(0))
        } else {
            "workgroup-tree".to_string()
        };
        let mut row = |name: &str, (us, lo, hi, cpu): (f64, f64, f64, f64), nodes| {
            rows.push(Row {
                workload: name.into(),
                backend: dev.kind().to_string(),
                variant: variant.clone(),
                n: r * c,
                us_step: us,
                spread: (lo, hi),
                cpu_us: cpu,
                nodes,
                record_ms: None,
            })
        };
        for (name, op) in [
            ("reduce-rows-sum", Reduce::Sum),
            ("reduce-rows-max", Reduce::Max),
        ] {
            let m = measure(
                steps,
                || reduce::reduce_rows(dev, op, &x, c, &mut out).unwrap(),
                sync,
            );
            row(name, m, 1);
            results.push(out.to_host()?);
        }
        let m = measure(
            steps,
            || reduce::sum(dev, &x, &mut one, &mut ws).unwrap(),
            sync,
        );
        row("reduce-sum", m, 2);
        results.push(one.to_host()?);
        for (name, nodes) in [("xent-wide", 1), ("xent-narrow", 2), ("mse", 2)] {
            let m = measure(
                steps,
                || {
                    match name {
                        "xent-wide" => loss::softmax_cross_entropy(
                            dev,
                            &x,
                            &wide_labels,
                            &mut one,
                            &mut dlogits,
                            &mut lws,
                        ),
                        "xent-narrow" => loss::softmax_cross_entropy(
                            dev,
                            &narrow_x,
                            &narrow_labels,
                            &mut one,
                            &mut dnarrow,
                            &mut lws,
                        ),
                        _ => loss::mse_with_grad(
                            dev,
                            &x,
                            &target,
                            &mut one,
                            &mut dlogits,
                            &mut lws,
                            false,
                        ),
                    }
                    .unwrap()
                },
                sync,
            );
            row(name, m, nodes);
            results.push(one.to_host()?);
            let grad = if name == "xent-narrow" {
                &dnarrow
            } else {
                &dlogits
            };
            results.push(grad.to_host()?);
        }
    }
    dev.set_library_subgroups(true);
    let half = results.len() / 2;
    let same = variants.len() == 1
        || results[..half]
            .iter()
            .zip(&results[half..])
            .all(|(a, b)| a.iter().zip(b).all(|(p, q)| p.to_bits() == q.to_bits()));
    eprintln!(
        "reduce and losses on {}: subgroup size {:?}; subgroup variants bitwise equal to the workgroup tree: {same}",
        dev.kind(),
        dev.subgroup_size()
    );
    Ok(())
}

/// The device, launching eagerly, with one scratch buffer handed out again and again, so a
/// split product's timing (`MmaTile::SplitK`) or transposes' (`MmaTile::T128Words` of a
/// gradient product) has no allocation in it, as in a recording (whose workspace is
/// allocated once). The regions of one product are consecutive and apart; `reset` (before
/// each product) starts again at the front.
struct ReusedScratch<'a> {
    dev: &'a Device,
    scratch: Buffer<f32>,
    next: std::cell::Cell<usize>,
}

impl ReusedScratch<'_> {
    fn reset(&self) -> &Self {
        self.next.set(0);
        self
    }
}

impl Launch for ReusedScratch<'_> {
    fn launch(
        &self,
        kernel: &'static graphed::KernelDef,
        grid: Grid,
        args: &[graphed::KernelArg],
    ) -> graphed::Result<()> {
        self.dev.launch(kernel, grid, args)
    }

    fn scratch(&self, len: usize) -> graphed::Result<Buffer<f32>> {
        let at = self.next.get();
        self.next.set(at + len);
        self.scratch.slice(at..at + len)
    }

    fn backend_kind(&self) -> Option<BackendKind> {
        Some(self.dev.kind())
    }

    fn fits_workgroup_memory(&self, kernel: &graphed::KernelDef) -> bool {
        self.dev.fits_workgroup_memory(kernel)
    }
}

/// Workload `mma`: the kernel library's tensor-core product (`matmul_mma`, on the kernel
/// language's `mma_m16n8k16`) beside cuBLAS's (`matmul_half`, `cublasGemmEx`) on the bf16
/// products of an MLP-L training step (`mixed-L`: batch 4096, 4096-wide layers, 10 classes):
/// each layer's forward `X·Wᵀ`, weight gradient `dYᵀ·X` and input gradient `dY·W`, eagerly
/// (one launch each), with µs and achieved TFLOP/s side by side. CUDA only (cuBLAS, and the
/// shapes take minutes elsewhere). Checks the two agree within 2^-10 relative to the
/// products' magnitude before timing. `short_k` (workload `mma-k`): instead, 4096×4096
/// gradient products (`dW`, `dX`) at `k` from 16 to 1024, where the words variant's
/// transposes weigh most, with the lean and words variants and `MmaTile::Auto` only.
fn mma_workload(dev: &Device, quick: bool, short_k: bool, rows: &mut Vec<Row>) -> Result<()> {
    use graphed::kernels::matmul::{matmul_half, Gemm};
    use graphed::kernels::matmul_mma::{matmul_mma, MmaGemm, MmaTile};
    if dev.kind() != BackendKind::Cuda {
        eprintln!(
            "workload mma runs on CUDA only (beside cuBLAS); skipped on {}",
            dev.kind()
        );
        return Ok(());
    }
    let steps = if quick { 5 } else { 50 };
    let (batch, width, classes) = (4096usize, 4096usize, 10usize);
    // (name, m, n, k, ta, tb)
    let mut shapes: Vec<(String, usize, usize, usize, bool, bool)> = [
        ("fwd 4096x4096", batch, width, width, false, true),
        ("dW 4096x4096", width, width, batch, true, false),
        ("dX 4096x4096", batch, width, width, false, false),
        ("fwd 4096x10", batch, classes, width, false, true),
        ("dW 10x4096", classes, width, batch, true, false),
        ("dX 4096x4096 k10", batch, width, classes, false, false),
    ]
    .map(|(name, m, n, k, ta, tb)| (name.to_string(), m, n, k, ta, tb))
    .to_vec();
    let mut tiles = MmaTile::ALL.to_vec();
    if short_k {
        shapes.clear();
        for k in [16, 32, 64, 128, 256, 512, 1024] {
            shapes.push((format!("dW 4096x4096 k{k}"), width, width, k, true, false));
            shapes.push((format!("dX 4096x4096 k{k}"), batch, width, k, false, false));
        }
        tiles = vec![MmaTile::T128Lean, MmaTile::T128Words, MmaTile::Auto];
    }
    let sync = || dev.synchronize().unwrap();
    let mut summary = String::new();
    for (name, m, n, k, ta, tb) in shapes {
        let av: Vec<bf16> = (0..m * k)
            .map(|i| bf16::from_f32(((i * 7919) % 1000) as f32 * 2e-3 - 1.0))
            .collect();
        let bv: Vec<bf16> = (0..k * n)
            .map(|i| bf16::from_f32(((i * 104_729) % 1000) as f32 * 2e-3 - 1.0))
            .collect();
        let a = dev.upload(&av)?;
        let b = dev.upload(&bv)?;
        let mut c_dsl = dev.alloc::<f32>(m * n)?;
        let mut c_blas = dev.alloc::<f32>(m * n)?;
        let g = MmaGemm { m, n, k, ta, tb };
        // Enough for any split (at most k / 256 parts) and for two transposed operands.
        let cx = ReusedScratch {
            dev,
            scratch: dev.alloc::<f32>((m * n * (k / 256).max(1)).max((m + n) * k / 2))?,
            next: Default::default(),
        };
        let gb = match (ta, tb) {
            (false, true) => Gemm::nt(m, n, k),
            (true, false) => Gemm::tn(m, n, k),
            _ => Gemm::nn(m, n, k),
        };
        matmul_half(dev, gb, &a, &b, &mut c_blas, false)?;
        let y = c_blas.to_host()?;
        // The largest |dsl - cublas| / sqrt(k) per variant, checked before any timing.
        let mut worst = Vec::new();
        for &tile in &tiles {
            matmul_mma(cx.reset(), tile, g, &a, &b, &mut c_dsl, false)?;
            let x = c_dsl.to_host()?;
            let w = x
                .iter()
                .zip(&y)
                .map(|(p, q)| (p - q).abs() as f64 / (k as f64).sqrt().max(1.0))
                .fold(0.0f64, f64::max);
            worst.push(format!("{} {w:.2e}", tile.name()));
        }
        let flops = 2.0 * (m * n * k) as f64;
        let mut line = format!("{name:<18} m {m:>5} n {n:>5} k {k:>5}:");
        let variants = tiles
            .iter()
            .map(|&t| (format!("dsl-mma-{}", t.name()), Some(t)))
            .chain([("cublas-bf16".to_string(), None)]);
        for (variant, tile) in variants {
            let (us, lo, hi, cpu) = measure(
                steps,
                || match tile {
                    Some(t) => matmul_mma(cx.reset(), t, g, &a, &b, &mut c_dsl, false).unwrap(),
                    None => matmul_half(dev, gb, &a, &b, &mut c_blas, false).unwrap(),
                },
                sync,
            );
            let tflops = flops / (us * 1e-6) / 1e12;
            write!(line, "  {variant} {us:>9.1} us {tflops:>7.1} TFLOP/s").unwrap();
            rows.push(Row {
                workload: format!("mma {name}"),
                backend: dev.kind().to_string(),
                variant,
                n: m * n * k,
                us_step: us,
                spread: (lo, hi),
                cpu_us: cpu,
                nodes: 1,
                record_ms: None,
            });
        }
        writeln!(
            line,
            "  (largest |dsl - cublas| / sqrt(k): {})",
            worst.join(", ")
        )
        .unwrap();
        summary.push_str(&line);
    }
    eprint!("{summary}");
    Ok(())
}

/// Prints the usage (after `msg`, if any) and exits: 0 for `--help`, 2 for a bad argument.
fn usage(msg: &str) -> ! {
    if !msg.is_empty() {
        eprintln!("error: {msg}");
    }
    eprintln!("usage: cargo bench --bench replay -- [launch] [mlp | mlp-S | mlp-M] [mixed | mixed-M | mixed-L] [--precision f32|tf32|bf16|f16]... [sampler] [reduce] [half] [mma] [mma-k] [bind] [update] [--backend host|wgpu|cuda]... [--checked] [--quick] [--out DIR] [--chart CSV]");
    std::process::exit(if msg.is_empty() { 0 } else { 2 })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let checked = args.iter().any(|a| a == "--checked");
    let variants = args.iter().any(|a| a == "--variants");
    let mut backends: Vec<BackendKind> = Vec::new();
    let mut workloads: Vec<String> = Vec::new();
    let mut out_dir = std::path::PathBuf::from("target/bench");
    let mut chart_of = None;
    let mut precisions = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--backend" => {
                let v = it
                    .next()
                    .unwrap_or_else(|| usage("--backend needs a value"));
                backends.push(match v.as_str() {
                    "host" => BackendKind::Host,
                    "wgpu" => BackendKind::Wgpu,
                    "cuda" => BackendKind::Cuda,
                    other => usage(&format!("unknown backend {other}")),
                });
            }
            "--out" => {
                out_dir = it
                    .next()
                    .unwrap_or_else(|| usage("--out needs a folder"))
                    .into()
            }
            "--chart" => {
                chart_of = Some(
                    it.next()
                        .unwrap_or_else(|| usage("--chart needs a CSV file"))
                        .clone(),
                )
            }
            "--precision" => {
                let v = it
                    .next()
                    .unwrap_or_else(|| usage("--precision needs a value"));
                precisions.push(graphed::nn::mixed::Precision::parse(v).unwrap_or_else(|| {
                    usage(&format!("unknown precision {v} (f32, tf32, bf16 or f16)"))
                }));
            }
            "--help" | "-h" => usage(""),
            "--quick" | "--bench" | "--checked" | "--variants" => {}
            w if !w.starts_with('-') => workloads.push(w.to_string()),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    if let Some(csv) = chart_of {
        // Redraw the chart of an earlier run's CSV (e.g. one from the GPU machine).
        let csv = std::fs::read_to_string(csv).unwrap();
        let rows: Vec<Row> = csv.lines().skip(1).filter_map(row_from_csv).collect();
        std::fs::create_dir_all(&out_dir).unwrap();
        for path in write_charts(&out_dir, &rows) {
            eprintln!("wrote {}", path.display());
        }
        return;
    }
    if workloads.is_empty() {
        workloads.push("launch".into());
    }
    if backends.is_empty() {
        backends = vec![BackendKind::Host, BackendKind::Wgpu, BackendKind::Cuda];
    }
    let mut rows = Vec::new();
    for kind in backends {
        let dev = match Device::open(kind) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("skipping {kind}: {e}");
                continue;
            }
        };
        eprintln!("backend {kind}: {}", dev.adapter());
        for w in &workloads {
            match w.as_str() {
                "launch" => launch_workload(&dev, quick, &mut rows).unwrap(),
                "mlp" | "mlp-S" | "mlp-M" => {
                    let only = (w != "mlp").then_some(w.as_str());
                    mlp_workload(&dev, quick, only, &mut rows).unwrap();
                    if dev.vendor_blas() {
                        // The same steps with the portable DSL products, side by side.
                        dev.set_vendor_blas(false);
                        mlp_workload(&dev, quick, only, &mut rows).unwrap();
                        dev.set_vendor_blas(true);
                    }
                    if dev.vendor_blas() && dev.vendor_fused() {
                        // The vendor route with epilogues not fused into the library call
                        // (`Device::set_vendor_fused(false)`), as variants `replay+unfused`,
                        // …, and with the library's candidates timed and the fastest run
                        // (`Device::set_vendor_tune(true)`, off by default), as `replay+tuned`.
                        let tune = dev.vendor_tune();
                        // Also each product's first one-pass algorithm (no split-K reduce;
                        // `Device::set_vendor_one_pass`) as `replay+onepass`, and with
                        // `--variants` products routed to the library from 2^22 and from
                        // 5·10^6 multiply-adds (`Device::set_vendor_min_macs`): `replay+v4M`,
                        // `replay+v5M`.
                        let one = dev.vendor_one_pass();
                        let other_pass = if one { "+split" } else { "+onepass" };
                        let configs = [
                            (false, tune, one, None, "+unfused"),
                            (true, true, one, None, "+tuned"),
                            (true, tune, !one, None, other_pass),
                            (true, tune, one, Some(1u64 << 22), "+v4M"),
                            (true, tune, one, Some(5_000_000), "+v5M"),
                        ];
                        for (fused, tuned, one_pass, min, name) in configs {
                            let cuda_only = name == "+tuned" || name == other_pass;
                            if (name == "+tuned" && tune)
                                || (cuda_only && kind != BackendKind::Cuda)
                                || (min.is_some() && !variants)
                            {
                                continue;
                            }
                            dev.set_vendor_fused(fused);
                            dev.set_vendor_tune(tuned);
                            dev.set_vendor_one_pass(one_pass);
                            dev.set_vendor_min_macs(min);
                            let start = rows.len();
                            // An opt-in route that fails here is reported and skipped.
                            let ran =
                                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                    mlp_workload(&dev, quick, only, &mut rows)
                                }));
                            if !matches!(ran, Ok(Ok(()))) {
                                eprintln!(
                                    "mlp {name}: failed ({:?}); skipped",
                                    ran.map(|r| r.err())
                                );
                                rows.truncate(start);
                                dev.synchronize().ok();
                            }
                            for r in &mut rows[start..] {
                                r.variant.push_str(name);
                            }
                        }
                        dev.set_vendor_min_macs(None);
                        dev.set_vendor_fused(true);
                        dev.set_vendor_tune(tune);
                        dev.set_vendor_one_pass(one);
                        for line in dev.vendor_plans() {
                            eprintln!("cuBLASLt plan: {line}");
                        }
                    }
                    if variants && dev.split_fill().is_some() {
                        // The same steps with split-K's fill rule off (`Device::set_split_fill`),
                        // both routes, as variants `eager+nosplit`, `replay+nosplit`, ….
                        let vendor = dev.vendor_blas();
                        dev.set_split_fill(false);
                        for v in [vendor, false] {
                            dev.set_vendor_blas(v);
                            let start = rows.len();
                            mlp_workload(&dev, quick, only, &mut rows).unwrap();
                            for r in &mut rows[start..] {
                                r.variant.push_str("+nosplit");
                            }
                            if !vendor {
                                break;
                            }
                        }
                        dev.set_vendor_blas(vendor);
                        dev.set_split_fill(true);
                    }
                    if variants && kind == BackendKind::Cuda && !dev.split_serial() {
                        // The same steps with split products summed by the last workgroup of
                        // each tile (`Device::set_split_serial(true)`) instead of a second
                        // launch, both routes, as variants `replay+serial`, ….
                        let vendor = dev.vendor_blas();
                        dev.set_split_serial(true).unwrap();
                        for v in [vendor, false] {
                            dev.set_vendor_blas(v);
                            let start = rows.len();
                            mlp_workload(&dev, quick, only, &mut rows).unwrap();
                            for r in &mut rows[start..] {
                                r.variant.push_str("+serial");
                            }
                            if !vendor {
                                break;
                            }
                        }
                        dev.set_vendor_blas(vendor);
                        dev.set_split_serial(false).unwrap();
                    }
                    if checked && kind != BackendKind::Host && !dev.checked() {
                        // The same steps in checked mode (cuBLAS products are not checked:
                        // with them on, only the DSL kernels pay for the checks).
                        let cdev = graphed::Device::open_new_with(
                            kind,
                            graphed::DeviceOptions { checked: true },
                        )
                        .unwrap();
                        for vendor in [true, false] {
                            if !vendor && !dev.vendor_blas() {
                                continue;
                            }
                            cdev.set_vendor_blas(vendor);
                            let start = rows.len();
                            mlp_workload(&cdev, quick, only, &mut rows).unwrap();
                            for r in &mut rows[start..] {
                                r.variant.push_str("+checked");
                            }
                        }
                    }
                }
                "mixed" | "mixed-M" | "mixed-L" => {
                    let only = (w != "mixed").then_some(w.as_str());
                    let p = if precisions.is_empty() {
                        vec![graphed::nn::mixed::Precision::Bf16]
                    } else {
                        precisions.clone()
                    };
                    mixed_workload(&dev, quick, only, &p, &mut rows).unwrap();
                    if kind == BackendKind::Cuda && dev.vendor_blas() && !dev.vendor_tune() {
                        // The library's candidates timed and the fastest run (opt-in), the
                        // one-pass choice switched the other way, and the epilogues unfused
                        // (each product's bias, ReLU and bias gradient as launches of their own).
                        let one = dev.vendor_one_pass();
                        let other_pass = if one { "+split" } else { "+onepass" };
                        for (tune, one_pass, fused, name) in [
                            (true, one, true, "+tuned"),
                            (false, !one, true, other_pass),
                            (false, one, false, "+unfused"),
                        ] {
                            dev.set_vendor_tune(tune);
                            dev.set_vendor_one_pass(one_pass);
                            dev.set_vendor_fused(fused);
                            let start = rows.len();
                            mixed_workload(&dev, quick, only, &p, &mut rows).unwrap();
                            for r in &mut rows[start..] {
                                r.variant.push_str(name);
                            }
                        }
                        dev.set_vendor_tune(false);
                        dev.set_vendor_one_pass(one);
                        dev.set_vendor_fused(true);
                        for line in dev.vendor_plans() {
                            eprintln!("cuBLASLt plan: {line}");
                        }
                    }
                }
                "sampler" => sampler_workload(&dev, quick, &mut rows).unwrap(),
                "reduce" => reduce_workload(&dev, quick, &mut rows).unwrap(),
                "half" => half_workload(&dev, quick, &mut rows).unwrap(),
                "tiles" => tiles_workload(&dev, quick, &mut rows).unwrap(),
                "mma" => mma_workload(&dev, quick, false, &mut rows).unwrap(),
                "mma-k" => mma_workload(&dev, quick, true, &mut rows).unwrap(),
                "bind" => bind_workload(&dev, quick, &mut rows).unwrap(),
                "update" => update_workload(&dev, quick, &mut rows).unwrap(),
                other => eprintln!("workload {other} is not implemented yet"),
            }
        }
    }
    let mut table = String::new();
    writeln!(
        table,
        "{:<14} {:<6} {:<18} {:>5} {:>11} {:>21} {:>12} {:>9}",
        "workload",
        "backend",
        "variant",
        "N",
        "us/step",
        "spread (min..max)",
        "cpu us/call",
        "rec ms"
    )
    .unwrap();
    for r in &rows {
        let rec = r
            .record_ms
            .map(|m| format!("{m:.3}"))
            .unwrap_or_else(|| "-".into());
        writeln!(
            table,
            "{:<14} {:<6} {:<18} {:>5} {:>11.2} {:>10.2}..{:<10.2} {:>12.2} {:>9}",
            r.workload, r.backend, r.variant, r.n, r.us_step, r.spread.0, r.spread.1, r.cpu_us, rec
        )
        .unwrap();
    }
    print!("{table}");
    std::fs::create_dir_all(&out_dir).unwrap();
    let mut csv = String::from("workload,backend,variant,n,us_per_step,us_min,us_max,cpu_us_per_call,nodes,record_lower_ms\n");
    for r in &rows {
        writeln!(
            csv,
            "{},{},{},{},{:.3},{:.3},{:.3},{:.3},{},{}",
            r.workload,
            r.backend,
            r.variant,
            r.n,
            r.us_step,
            r.spread.0,
            r.spread.1,
            r.cpu_us,
            r.nodes,
            r.record_ms.map(|m| format!("{m:.4}")).unwrap_or_default()
        )
        .unwrap();
    }
    let path = out_dir.join("replay.csv");
    std::fs::write(&path, csv).unwrap();
    eprintln!("wrote {}", path.display());
    for path in write_charts(&out_dir, &rows) {
        eprintln!("wrote {}", path.display());
    }
}

fn row_from_csv(line: &str) -> Option<Row> {
    let f: Vec<&str> = line.split(',').collect();
    Some(Row {
        workload: f.first()?.to_string(),
        backend: f.get(1)?.to_string(),
        variant: f.get(2)?.to_string(),
        n: f.get(3)?.parse().ok()?,
        us_step: f.get(4)?.parse().ok()?,
        spread: (f.get(5)?.parse().ok()?, f.get(6)?.parse().ok()?),
        cpu_us: f.get(7)?.parse().ok()?,
        nodes: f.get(8)?.parse().ok()?,
        record_ms: f.get(9).and_then(|v| v.parse().ok()),
    })
}

/// Bar colour and legend name of each kind of variant (PyTorch rows come from a CSV that
/// `shared/bench/torch_mlp_step.py` figures were added to).
const VARIANTS: [(&str, &str, &str); 5] = [
    ("eager", "#f97316", "our eager launches"),
    ("replay", "#2563eb", "our replay"),
    ("raw-cudarc-eager", "#9ca3af", "raw cudarc launches"),
    ("raw-cudarc-graph", "#16a34a", "raw cudarc CUDA graph"),
    ("torch", "#6b7280", "PyTorch"),
];

/// The entry of [`VARIANTS`] a variant is drawn as.
fn style(variant: &str) -> Option<&'static (&'static str, &'static str, &'static str)> {
    VARIANTS
        .iter()
        .find(|v| v.0 == variant || (v.0 == "torch" && variant.starts_with("torch")))
}

/// A tick label on the µs axis: 0.2, 5, 50, 1k, 20k, 1M, …
fn tick_label(v: f64) -> String {
    let (v, unit) = if v >= 1e6 {
        (v / 1e6, "M")
    } else if v >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    format!("{}{unit}", (v * 10.0).round() / 10.0)
}

/// A horizontal bar chart of µs per step (log axis), one bar per (workload, backend,
/// variant, N) with the spread of the repeats as a whisker, grouped by workload and N, with
/// a legend and the axis labelled at the top and the bottom.
fn svg_chart(rows: &[Row]) -> String {
    let (w, bar, gap, left, right) = (980.0, 14.0, 10.0, 330.0, 90.0);
    let all = || {
        rows.iter()
            .flat_map(|r| [r.us_step, r.spread.0, r.spread.1])
    };
    let max = all().fold(1.0, f64::max).log10().ceil() as i32;
    let min = all().fold(f64::MAX, f64::min).max(0.1).log10().floor() as i32;
    let max = max.max(min + 1);
    let x = |us: f64| {
        left + (w - left - right) * ((us.max(0.1).log10() - min as f64) / (max - min) as f64)
    };
    let mut legend = String::new();
    let mut lx = left;
    for entry @ (_, colour, name) in &VARIANTS {
        if rows.iter().any(|r| style(&r.variant) == Some(entry)) {
            let _ = write!(
                legend,
                "<rect x=\"{lx}\" y=\"28\" width=\"12\" height=\"12\" fill=\"{colour}\"/><text x=\"{}\" y=\"38\">{name}</text>",
                lx + 16.0
            );
            lx += 30.0 + 6.5 * name.chars().count() as f64;
        }
    }
    let top = 70.0;
    let mut body = String::new();
    let mut y = top;
    let mut last_group = String::new();
    for r in rows {
        let group = format!("{} N={}", r.workload, r.n);
        if group != last_group {
            if !last_group.is_empty() {
                let _ = write!(
                    body,
                    "<line x1=\"10\" y1=\"{sy}\" x2=\"{w}\" y2=\"{sy}\" stroke=\"#d1d5db\"/>",
                    sy = y + gap / 2.0
                );
            }
            y += gap;
            last_group = group;
        }
        let colour = style(&r.variant).map_or("#6b7280", |v| v.1);
        let (end, lo, hi) = (x(r.us_step), x(r.spread.0), x(r.spread.1));
        let (ty, cy) = (y + bar - 3.0, y + bar / 2.0);
        let _ = writeln!(
            body,
            "<text x=\"{tx}\" y=\"{ty}\" text-anchor=\"end\">{} {} {} (N={})</text><rect x=\"{left}\" y=\"{y}\" width=\"{bw:.1}\" height=\"{bar}\" fill=\"{colour}\"/><path d=\"M{lo:.1} {cy}H{hi:.1}M{lo:.1} {a}V{b}M{hi:.1} {a}V{b}\" stroke=\"#111827\"/><text x=\"{vx:.1}\" y=\"{ty}\">{:.1}</text>",
            r.workload,
            r.backend,
            r.variant,
            r.n,
            r.us_step,
            tx = left - 6.0,
            bw = (end - left).max(1.0),
            a = cy - 3.0,
            b = cy + 3.0,
            vx = end.max(hi) + 4.0,
        );
        y += bar + 2.0;
    }
    let bottom = y + 6.0;
    let mut axis = format!(
        "<line x1=\"{left}\" y1=\"{t}\" x2=\"{r}\" y2=\"{t}\" stroke=\"#374151\"/><line x1=\"{left}\" y1=\"{bottom}\" x2=\"{r}\" y2=\"{bottom}\" stroke=\"#374151\"/>",
        t = top - 4.0,
        r = w - right
    );
    // Every power of ten, labelled; 2× and 5× as fainter lines, labelled when the axis spans
    // at most three decades.
    for e in min..=max {
        for m in [1.0, 2.0, 5.0] {
            let v = m * 10f64.powi(e);
            if e == max && m > 1.0 {
                break;
            }
            let tx = x(v);
            let major = m == 1.0;
            let _ = write!(
                axis,
                "<line x1=\"{tx:.1}\" y1=\"{t}\" x2=\"{tx:.1}\" y2=\"{bottom}\" stroke=\"{}\"/>",
                if major { "#d1d5db" } else { "#f3f4f6" },
                t = top - 4.0,
            );
            if major || max - min <= 3 {
                let label = tick_label(v);
                let _ = write!(
                    axis,
                    "<text x=\"{tx:.1}\" y=\"{lt}\" text-anchor=\"middle\" fill=\"{c}\">{label}</text><text x=\"{tx:.1}\" y=\"{lb}\" text-anchor=\"middle\" fill=\"{c}\">{label}</text>",
                    lt = top - 9.0,
                    lb = bottom + 14.0,
                    c = if major { "#111827" } else { "#6b7280" },
                );
            }
        }
    }
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"10\" y=\"18\" font-size=\"14\" font-weight=\"bold\">Wall time per step, µs (log scale; lower is better)</text>\n{legend}\n<text x=\"10\" y=\"38\" fill=\"#4b5563\">N: launches or kernels per step</text>\n{axis}\n{body}<text x=\"{cx}\" y=\"{at}\" text-anchor=\"middle\">µs per step (median of 5 repeats; whiskers: min..max)</text>\n</svg>\n",
        h = bottom + 40.0,
        cx = (left + w - right) / 2.0,
        at = bottom + 32.0,
    )
}

/// Renders the chart's SVG as a PNG at twice its size. Fonts come from the system (the
/// harness ships none); without any, the PNG has bars but no text, and says so.
fn png_chart(svg: &str) -> std::result::Result<Vec<u8>, String> {
    use resvg::{tiny_skia, usvg};
    let mut opt = usvg::Options::default();
    let db = opt.fontdb_mut();
    db.load_system_fonts();
    if db.is_empty() {
        eprintln!("warning: no system fonts found, so the PNG chart has no text (Debian: apt-get install fonts-dejavu-core), or redraw it elsewhere with --chart CSV");
    }
    let family = ["DejaVu Sans", "Liberation Sans", "Noto Sans", "Arial"]
        .into_iter()
        .find(|f| {
            db.faces()
                .any(|face| face.families.iter().any(|(n, _)| n == f))
        })
        .map(str::to_string)
        .or_else(|| {
            db.faces()
                .next()
                .and_then(|f| f.families.first().map(|n| n.0.clone()))
        });
    if let Some(family) = family {
        db.set_sans_serif_family(family);
    }
    let tree = usvg::Tree::from_str(svg, &opt).map_err(|e| e.to_string())?;
    let size = tree.size();
    let scale = 2.0;
    let mut pixmap = tiny_skia::Pixmap::new(
        (size.width() * scale).ceil() as u32,
        (size.height() * scale).ceil() as u32,
    )
    .ok_or("chart too large for a PNG")?;
    resvg::render(
        &tree,
        tiny_skia::Transform::from_scale(scale, scale),
        &mut pixmap.as_mut(),
    );
    pixmap.encode_png().map_err(|e| e.to_string())
}

/// Writes `replay.svg` and `replay.png` into `dir`; returns their paths.
fn write_charts(dir: &std::path::Path, rows: &[Row]) -> Vec<std::path::PathBuf> {
    let svg = svg_chart(rows);
    let svg_path = dir.join("replay.svg");
    std::fs::write(&svg_path, &svg).unwrap();
    let mut written = vec![svg_path];
    match png_chart(&svg) {
        Ok(png) => {
            let png_path = dir.join("replay.png");
            std::fs::write(&png_path, png).unwrap();
            written.push(png_path);
        }
        Err(e) => eprintln!("warning: no PNG chart: {e}"),
    }
    written
}
