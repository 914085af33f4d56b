//! Data-parallel benchmark: `cargo bench --features nccl --bench dp -- [--quick] [--steps N]
//! [--out DIR]`.
//!
//! MLP-M of `benches/replay.rs` (1024-1024-1024-1024-1024-10, AdamW) on a global batch of 512
//! rows, one training update per step:
//! - `1gpu-replay`, `1gpu-eager`: `TrainStep` on GPU 0, all 512 rows;
//! - `1rank-nccl-replay`: `DpTrainStep` with a communicator of one rank on GPU 0 (the cost of
//!   the captured NCCL all-reduce of one rank);
//! - `2gpu-replay`, `2gpu-eager`: `DpTrainStep` on two GPUs through `DataParallel`, 256 rows
//!   per rank, gradients averaged by an NCCL all-reduce inside each rank's graph (replay) or
//!   issued eagerly (eager). Needs two CUDA GPUs; skipped with a note otherwise.
//!
//! `us/step` is the wall time of many consecutive steps divided by their count with one
//! synchronisation of every rank at the end (median of 5 repeats; spread = min..max);
//! `cpu us/call` the host time of the call that hands one step to every rank. Inputs stay on
//! the devices (copied into the steps' static slots each call), as in the PyTorch reference.

use std::fmt::Write as _;
use std::time::Instant;

use graphed::dist::{Communicator, DataParallel};
use graphed::train::{Classifier, DpTrainStep, TrainStep};
use graphed::{Buffer, Device, Result};

const SIZES: [usize; 6] = [1024, 1024, 1024, 1024, 1024, 10];
const BATCH: usize = 512;
const LR: f32 = 1e-3;

struct Row {
    variant: &'static str,
    gpus: usize,
    us: f64,
    lo: f64,
    hi: f64,
    cpu: f64,
}

/// (median, min, max) us/step over 5 repeats of `steps` steps, and CPU us per call.
fn measure(steps: usize, mut step: impl FnMut(), sync: impl Fn()) -> (f64, f64, f64, f64) {
    for _ in 0..3 {
        step();
    }
    sync();
    let mut walls = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..steps {
            step();
        }
        sync();
        walls.push(t.elapsed().as_secs_f64() * 1e6 / steps as f64);
    }
    walls.sort_by(f64::total_cmp);
    let (mut cpu, bursts) = (0.0, steps.div_ceil(8).max(2));
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

/// Deterministic inputs: `rows` rows starting at global row `first`.
fn data(first: usize, rows: usize) -> (Vec<f32>, Vec<u32>) {
    let x = (first * SIZES[0]..(first + rows) * SIZES[0])
        .map(|i| ((i * 131 % 997) as f32 / 498.5) - 1.0)
        .collect();
    let y = (first..first + rows).map(|i| (i * 7 % 10) as u32).collect();
    (x, y)
}

fn one_gpu(steps: usize, rows: &mut Vec<Row>) -> Result<()> {
    let dev = Device::cuda_on(0)?;
    let (x, y) = data(0, BATCH);
    let (x, y) = (dev.upload(&x)?, dev.upload(&y)?);
    let sync = || dev.synchronize().unwrap();
    for eager in [false, true] {
        let mut m = Classifier::new(&dev, &SIZES, 0)?;
        let mut step = TrainStep::new(&dev)?;
        let (us, lo, hi, cpu) = measure(
            steps,
            || {
                if eager {
                    step.eager(&mut m, &x, &y, LR).unwrap();
                } else {
                    step.call(&mut m, &x, &y, LR).unwrap();
                }
            },
            sync,
        );
        let variant = if eager { "1gpu-eager" } else { "1gpu-replay" };
        rows.push(Row {
            variant,
            gpus: 1,
            us,
            lo,
            hi,
            cpu,
        });
    }
    Ok(())
}

type Rank = (Classifier, DpTrainStep, Buffer<f32>, Buffer<u32>);

fn data_parallel(
    devices: &[Device],
    steps: usize,
    eager: bool,
    variant: &'static str,
    rows: &mut Vec<Row>,
) -> Result<()> {
    let ranks = devices.len();
    let comms = Communicator::group(devices)?;
    let mut driver = DataParallel::new(comms, move |comm| -> Result<Rank> {
        let share = BATCH / ranks;
        let (x, y) = data(comm.rank() * share, share);
        let dev = comm.device();
        Ok((
            Classifier::new(dev, &SIZES, 0)?,
            DpTrainStep::new(dev)?,
            dev.upload(&x)?,
            dev.upload(&y)?,
        ))
    })?;
    let sync = |d: &DataParallel<Rank>| d.synchronize().unwrap();
    let driver_cell = std::cell::RefCell::new(&mut driver);
    let (us, lo, hi, cpu) = measure(
        steps,
        || {
            driver_cell
                .borrow_mut()
                .run(move |comm, (m, step, x, y)| {
                    if eager {
                        step.eager(m, &*x, &*y, LR, comm)?;
                    } else {
                        step.call(m, &*x, &*y, LR, comm)?;
                    }
                    Ok(())
                })
                .unwrap();
        },
        || sync(&driver_cell.borrow()),
    );
    rows.push(Row {
        variant,
        gpus: ranks,
        us,
        lo,
        hi,
        cpu,
    });
    let stats = driver.run(|_, (_, step, _, _)| Ok(step.stats()))?;
    eprintln!("{variant}: rank 0 {:?}", stats[0]);
    Ok(())
}

/// Prints the usage (after `msg`, if any) and exits: 0 for `--help`, 2 for a bad argument.
fn usage(msg: &str) -> ! {
    if !msg.is_empty() {
        eprintln!("error: {msg}");
    }
    eprintln!("usage: cargo bench --features nccl --bench dp -- [--quick] [--steps N] [--out DIR]");
    std::process::exit(if msg.is_empty() { 0 } else { 2 })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut steps = 200usize;
    let mut out_dir = std::path::PathBuf::from("target/bench");
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => steps = 20,
            "--steps" => {
                steps = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| usage("--steps needs a number"))
            }
            "--out" => {
                out_dir = it
                    .next()
                    .unwrap_or_else(|| usage("--out needs a folder"))
                    .into()
            }
            "--bench" => {}
            "--help" | "-h" => usage(""),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    match graphed::dist::nccl_version() {
        Ok(_) if Device::cuda_count() == 0 => {
            eprintln!("dp: no CUDA device");
            std::process::exit(2);
        }
        Ok(v) => eprintln!("NCCL {v}, {} CUDA device(s)", Device::cuda_count()),
        Err(e) => {
            eprintln!("dp: {e}");
            std::process::exit(2);
        }
    }
    let mut rows = Vec::new();
    one_gpu(steps, &mut rows).unwrap();
    let gpu0 = [Device::cuda_on(0).unwrap()];
    data_parallel(&gpu0, steps, false, "1rank-nccl-replay", &mut rows).unwrap();
    if Device::cuda_count() >= 2 {
        let two: Vec<Device> = (0..2).map(|o| Device::cuda_on(o).unwrap()).collect();
        data_parallel(&two, steps, false, "2gpu-replay", &mut rows).unwrap();
        data_parallel(&two, steps, true, "2gpu-eager", &mut rows).unwrap();
    } else {
        eprintln!("note: one CUDA device: the 2-GPU variants are skipped");
    }
    let mut table = String::new();
    writeln!(
        table,
        "{:<20} {:>4} {:>11} {:>21} {:>12} {:>12}",
        "variant (MLP-M)", "gpus", "us/step", "spread (min..max)", "cpu us/call", "rows/s"
    )
    .unwrap();
    let mut csv = String::from("variant,gpus,us_per_step,us_min,us_max,cpu_us_per_call\n");
    for r in &rows {
        writeln!(
            table,
            "{:<20} {:>4} {:>11.1} {:>10.1}..{:<10.1} {:>12.1} {:>12.0}",
            r.variant,
            r.gpus,
            r.us,
            r.lo,
            r.hi,
            r.cpu,
            BATCH as f64 / (r.us * 1e-6)
        )
        .unwrap();
        writeln!(
            csv,
            "{},{},{:.3},{:.3},{:.3},{:.3}",
            r.variant, r.gpus, r.us, r.lo, r.hi, r.cpu
        )
        .unwrap();
    }
    let find = |v: &str| rows.iter().find(|r| r.variant == v).map(|r| r.us);
    if let (Some(one), Some(two)) = (find("1gpu-replay"), find("2gpu-replay")) {
        writeln!(
            table,
            "2-GPU replay vs 1-GPU replay: {:.2}x the throughput",
            one / two
        )
        .unwrap();
    }
    if let (Some(rep), Some(eag)) = (find("2gpu-replay"), find("2gpu-eager")) {
        writeln!(
            table,
            "2-GPU replay vs 2-GPU eager: {:.2}x faster",
            eag / rep
        )
        .unwrap();
    }
    print!("{table}");
    std::fs::create_dir_all(&out_dir).unwrap();
    let path = out_dir.join("dp.csv");
    std::fs::write(&path, csv).unwrap();
    eprintln!("wrote {}", path.display());
}
