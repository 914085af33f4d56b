//! The main job: train an MLP classifier with a recorded training step.
//!
//! ```sh
//! cargo run --release --example train_mlp                       # 8×8 digits, best backend
//! cargo run --release --example train_mlp -- --backend wgpu --steps 2000 --accumulate 4
//! cargo run --release --example train_mlp -- --data ~/mnist --plot loss.svg
//! cargo run --release --features cuda --example train_mlp -- --precision bf16   # or f16, tf32
//! ```
//!
//! Data: the 8×8 optical digits that ship with this repository (`examples/data/digits.u8`,
//! UCI, CC BY 4.0 — see `examples/data/README.md`), or MNIST's IDX files from `--data DIR`
//! (`train-images-idx3-ubyte`, `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte`,
//! `t10k-labels-idx1-ubyte`). One update is forward, mean softmax cross-entropy, backward and
//! AdamW, replayed from one recording (or `k` micro-batches and an apply step with
//! `--accumulate k`). At the end it reports test accuracy, steps/s of replay and of eager
//! execution measured in the same run, and how many recordings it made.

use std::io::Write as _;
use std::time::Instant;

use graphed::nn::mixed::{MixedTrainStep, Precision};
use graphed::train::{ApplyStep, Classifier, MicroStep, TrainStep};
use graphed::{BackendKind, Device, Result};

/// Command-line options.
#[derive(Clone, Debug)]
pub struct Options {
    /// `--backend` (default: the best available).
    pub backend: Option<BackendKind>,
    /// `--steps`: optimizer updates.
    pub steps: usize,
    /// `--batch`: rows per update.
    pub batch: usize,
    /// `--accumulate`: micro-batches per update.
    pub accumulate: usize,
    /// `--eager`: run eagerly instead of replaying.
    pub eager: bool,
    /// `--lr`: AdamW's learning rate.
    pub lr: f32,
    /// `--seed`: initialisation and shuffling.
    pub seed: u64,
    /// `--data`: a folder with MNIST's IDX files (default: the shipped digits).
    pub data: Option<std::path::PathBuf>,
    /// `--plot`: write the loss curve as SVG.
    pub plot: Option<std::path::PathBuf>,
    /// `--quiet`: no progress bar.
    pub quiet: bool,
    /// `--min-accuracy`: exit with an error below this test accuracy.
    pub min_accuracy: Option<f64>,
    /// `--precision`: of the products and activations (default f32).
    pub precision: Precision,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            backend: None,
            steps: 1500,
            batch: 64,
            accumulate: 1,
            eager: false,
            lr: 2e-3,
            seed: 1,
            data: None,
            plot: None,
            quiet: false,
            min_accuracy: None,
            precision: Precision::F32,
        }
    }
}

/// What a run measured.
#[derive(Clone, Debug)]
pub struct Report {
    /// The backend that ran.
    pub backend: String,
    /// Fraction of test rows classified right.
    pub test_accuracy: f64,
    /// (step, loss) samples.
    pub losses: Vec<(usize, f32)>,
    /// Updates per second of the main run (replay, or eager with `--eager`).
    pub steps_per_s: f64,
    /// Updates per second of the other mode, measured briefly in the same run.
    pub other_steps_per_s: f64,
    /// Recordings made by the main run.
    pub recordings: u64,
}

/// The command line (`--help` prints it).
#[derive(clap::Parser, Debug)]
#[command(
    name = "train_mlp",
    about = "Train an MLP classifier with a recorded training step.",
    allow_negative_numbers = true
)]
struct Cli {
    /// The backend (default: the best available).
    #[arg(long, value_parser = backend)]
    backend: Option<BackendKind>,
    /// Optimizer updates.
    #[arg(long, value_name = "N", default_value_t = Options::default().steps, value_parser = positive)]
    steps: usize,
    /// Rows per update.
    #[arg(long, value_name = "B", default_value_t = Options::default().batch, value_parser = positive)]
    batch: usize,
    /// Micro-batches per update (divides --batch).
    #[arg(long, value_name = "K", default_value_t = Options::default().accumulate, value_parser = positive)]
    accumulate: usize,
    /// Run eagerly instead of replaying.
    #[arg(long)]
    eager: bool,
    /// AdamW's learning rate.
    #[arg(long, value_name = "X", default_value_t = Options::default().lr, value_parser = learning_rate)]
    lr: f32,
    /// Initialisation and shuffling.
    #[arg(long, value_name = "S", default_value_t = Options::default().seed)]
    seed: u64,
    /// A folder with MNIST's four IDX files (default: the shipped 8×8 digits).
    #[arg(long, value_name = "MNIST_DIR")]
    data: Option<std::path::PathBuf>,
    /// Write the loss curve as SVG.
    #[arg(long, value_name = "loss.svg")]
    plot: Option<std::path::PathBuf>,
    /// Exit with an error below this test accuracy (0 to 1).
    #[arg(long, value_name = "A", value_parser = fraction)]
    min_accuracy: Option<f64>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Products and activations: f32, tf32 (f32 with TF32 cuBLAS products), bf16 or f16
    /// (16-bit operands, f32 accumulation and master weights; f16 with dynamic loss scaling).
    #[arg(long, value_name = "P", default_value = "f32", value_parser = precision)]
    precision: Precision,
}

fn precision(s: &str) -> std::result::Result<Precision, String> {
    Precision::parse(s).ok_or_else(|| format!("unknown precision {s} (f32, tf32, bf16 or f16)"))
}

fn backend(s: &str) -> std::result::Result<BackendKind, String> {
    match s {
        "host" => Ok(BackendKind::Host),
        "wgpu" => Ok(BackendKind::Wgpu),
        "cuda" => Ok(BackendKind::Cuda),
        _ => Err(format!("unknown backend {s} (host, wgpu or cuda)")),
    }
}

/// A whole number of at least 1 (`-1`, `nan`, `1e30` and `1.5` are not).
fn positive(s: &str) -> std::result::Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err("not a whole number of at least 1".into()),
    }
}

fn learning_rate(s: &str) -> std::result::Result<f32, String> {
    match s.parse::<f32>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err("must be a finite number above 0".into()),
    }
}

fn fraction(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
        _ => Err("must be a number from 0 to 1".into()),
    }
}

/// Parses the command line (without the program name). `--help` comes back as an error too:
/// `clap::Error::exit` prints it and exits 0, other errors exit 2.
pub fn parse(args: impl IntoIterator<Item = String>) -> std::result::Result<Options, clap::Error> {
    use clap::{CommandFactory, Parser};
    let c = Cli::try_parse_from(std::iter::once("train_mlp".to_string()).chain(args))?;
    if c.precision != Precision::F32 && c.accumulate != 1 {
        return Err(Cli::command().error(
            clap::error::ErrorKind::ArgumentConflict,
            format!(
                "--precision {} trains whole batches: leave --accumulate at 1",
                c.precision.name()
            ),
        ));
    }
    if c.batch % c.accumulate != 0 {
        return Err(Cli::command().error(
            clap::error::ErrorKind::ArgumentConflict,
            format!(
                "--batch ({}) must be a multiple of --accumulate ({})",
                c.batch, c.accumulate
            ),
        ));
    }
    Ok(Options {
        backend: c.backend,
        steps: c.steps,
        batch: c.batch,
        accumulate: c.accumulate,
        eager: c.eager,
        lr: c.lr,
        seed: c.seed,
        data: c.data,
        plot: c.plot,
        quiet: c.quiet,
        min_accuracy: c.min_accuracy,
        precision: c.precision,
    })
}

/// A labelled data set: `rows × features` pixels in [0, 1].
pub struct Data {
    /// Pixels per image.
    pub features: usize,
    /// Number of classes.
    pub classes: usize,
    /// Training images, row-major.
    pub train_x: Vec<f32>,
    /// Training labels.
    pub train_y: Vec<u32>,
    /// Test images.
    pub test_x: Vec<f32>,
    /// Test labels.
    pub test_y: Vec<u32>,
}

/// A small deterministic shuffle (SplitMix64), so runs are reproducible without extra crates.
struct Mix(u64);
impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, (self.next() % (i as u64 + 1)) as usize);
        }
    }
}

/// The 8×8 digits: 1797 images, shuffled with `seed`, the last 300 held out for testing.
pub fn digits(seed: u64) -> Data {
    let raw: &[u8] = include_bytes!("data/digits.u8");
    let mut rows: Vec<&[u8]> = raw.chunks_exact(65).collect();
    Mix(seed).shuffle(&mut rows);
    let (test, train) = rows.split_at(300);
    let split = |rows: &[&[u8]]| -> (Vec<f32>, Vec<u32>) {
        (
            rows.iter()
                .flat_map(|r| r[..64].iter().map(|&p| p as f32 / 16.0))
                .collect(),
            rows.iter().map(|r| r[64] as u32).collect(),
        )
    };
    let (train_x, train_y) = split(train);
    let (test_x, test_y) = split(test);
    Data {
        features: 64,
        classes: 10,
        train_x,
        train_y,
        test_x,
        test_y,
    }
}

fn idx(path: &std::path::Path, magic: u32) -> std::result::Result<(Vec<usize>, Vec<u8>), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let word = |i: usize| -> std::result::Result<u32, String> {
        bytes
            .get(4 * i..4 * i + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or(format!("{}: truncated header", path.display()))
    };
    if word(0)? != magic {
        return Err(format!(
            "{}: not an IDX file of the expected kind (magic {:#x})",
            path.display(),
            word(0)?
        ));
    }
    let dims: Vec<usize> = (1..=(magic & 0xff) as usize)
        .map(|i| word(i).map(|w| w as usize))
        .collect::<std::result::Result<_, _>>()?;
    let start = 4 * (1 + dims.len());
    let n = dims
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or(format!("{}: dimensions {dims:?} overflow", path.display()))?;
    let data = bytes
        .get(start..)
        .filter(|d| d.len() >= n)
        .ok_or(format!("{}: truncated data", path.display()))?;
    if data.len() > n {
        return Err(format!(
            "{}: {} bytes after the {n} its header {dims:?} describes",
            path.display(),
            data.len() - n
        ));
    }
    Ok((dims, data.to_vec()))
}

/// MNIST from its four IDX files in `dir`: as many labels as images in each set, every label
/// a class of 0..=9, test images of the training images' size.
pub fn mnist(dir: &std::path::Path) -> std::result::Result<Data, String> {
    const CLASSES: usize = 10;
    let images = |name: &str| -> std::result::Result<(usize, usize, Vec<f32>), String> {
        let (dims, data) = idx(&dir.join(name), 0x0803)?;
        Ok((
            dims[0],
            dims[1] * dims[2],
            data.into_iter().map(|p| p as f32 / 255.0).collect(),
        ))
    };
    let labels = |name: &str, images: usize| -> std::result::Result<Vec<u32>, String> {
        let path = dir.join(name);
        let (_, data) = idx(&path, 0x0801)?;
        if data.len() != images {
            return Err(format!(
                "{}: {} labels for {images} images",
                path.display(),
                data.len()
            ));
        }
        if let Some((row, l)) = data
            .iter()
            .enumerate()
            .find(|(_, &l)| l as usize >= CLASSES)
        {
            return Err(format!(
                "{}: label {l} of row {row} is not a class of 0..={}",
                path.display(),
                CLASSES - 1
            ));
        }
        Ok(data.into_iter().map(u32::from).collect())
    };
    let (n_train, features, train_x) = images("train-images-idx3-ubyte")?;
    let (n_test, test_features, test_x) = images("t10k-images-idx3-ubyte")?;
    if features == 0 || test_features != features {
        return Err(format!(
            "{}: images of {test_features} pixels, the training images have {features}",
            dir.join("t10k-images-idx3-ubyte").display()
        ));
    }
    Ok(Data {
        features,
        classes: CLASSES,
        train_x,
        train_y: labels("train-labels-idx1-ubyte", n_train)?,
        test_x,
        test_y: labels("t10k-labels-idx1-ubyte", n_test)?,
    })
}

/// One update (k micro-batches when accumulating) through whichever path `eager` selects.
struct Trainer {
    k: usize,
    eager: bool,
    precision: Precision,
    mixed: MixedTrainStep,
    full: TrainStep,
    micro: MicroStep,
    apply: ApplyStep,
}

impl Trainer {
    fn new(device: &Device, k: usize, eager: bool, precision: Precision) -> Result<Trainer> {
        Ok(Trainer {
            k,
            eager,
            precision,
            mixed: MixedTrainStep::new(device)?,
            full: TrainStep::new(device)?,
            micro: MicroStep::new(device)?,
            apply: ApplyStep::new(device)?,
        })
    }

    /// Runs one update; returns the loss when `want_loss` (reading it waits for the device).
    fn update(
        &mut self,
        m: &mut Classifier,
        x: &[f32],
        y: &[u32],
        lr: f32,
        want_loss: bool,
    ) -> Result<Option<f32>> {
        if self.precision != Precision::F32 {
            let p = self.precision;
            let loss = if self.eager {
                self.mixed.eager(&mut *m, x, y, lr, p)?
            } else {
                self.mixed.call(&mut *m, x, y, lr, p)?
            };
            return if want_loss {
                Ok(Some(loss.to_host()?[0]))
            } else {
                Ok(None)
            };
        }
        if self.k == 1 {
            let loss = if self.eager {
                self.full.eager(&mut *m, x, y, lr)?
            } else {
                self.full.call(&mut *m, x, y, lr)?
            };
            return if want_loss {
                Ok(Some(loss.to_host()?[0]))
            } else {
                Ok(None)
            };
        }
        let rows = y.len() / self.k;
        let feats = x.len() / y.len();
        let scale = 1.0 / y.len() as f32;
        let mut total = 0.0;
        for j in 0..self.k {
            let (xs, ys) = (
                &x[j * rows * feats..(j + 1) * rows * feats],
                &y[j * rows..(j + 1) * rows],
            );
            let loss = if self.eager {
                self.micro.eager(&mut *m, xs, ys, j > 0, scale)?
            } else {
                self.micro.call(&mut *m, xs, ys, j > 0, scale)?
            };
            if want_loss {
                total += loss.to_host()?[0] / self.k as f32;
            }
        }
        if self.eager {
            self.apply.eager(&mut *m, lr)?;
        } else {
            self.apply.call(&mut *m, lr)?;
        }
        Ok(want_loss.then_some(total))
    }

    fn recordings(&self) -> u64 {
        self.full.stats().recordings
            + self.micro.stats().recordings
            + self.apply.stats().recordings
            + self.mixed.stats().recordings
    }
}

/// Trains for `opts.steps` updates and evaluates; also times the other execution mode.
pub fn run(opts: &Options) -> std::result::Result<Report, String> {
    let e = |e: graphed::Error| e.to_string();
    let device = match opts.backend {
        Some(k) => Device::open(k).map_err(e)?,
        None => Device::best().map_err(e)?,
    };
    let data = match &opts.data {
        Some(dir) => mnist(dir)?,
        None => digits(opts.seed),
    };
    let sizes: Vec<usize> = if data.features == 64 {
        vec![64, 128, 64, data.classes]
    } else {
        vec![data.features, 256, 256, data.classes]
    };
    let n_train = data.train_y.len();
    if data.test_y.is_empty() {
        return Err("the test set is empty: there is nothing to measure accuracy on".into());
    }
    if n_train < opts.batch {
        return Err(format!(
            "--batch {} is larger than the training set ({n_train} rows)",
            opts.batch
        ));
    }
    if !opts.quiet {
        eprintln!(
            "device: {} ({}); model {sizes:?}; {n_train} training rows, {} test rows",
            device.kind(),
            device.adapter(),
            data.test_y.len()
        );
    }
    let mut model = Classifier::new(&device, &sizes, opts.seed).map_err(e)?;
    let initial = model.duplicate().map_err(e)?;
    let mut trainer =
        Trainer::new(&device, opts.accumulate, opts.eager, opts.precision).map_err(e)?;

    let mut order: Vec<usize> = (0..n_train).collect();
    let mut mix = Mix(opts.seed ^ 0x5EED);
    let mut cursor = n_train;
    let (mut xb, mut yb) = (
        vec![0f32; opts.batch * data.features],
        vec![0u32; opts.batch],
    );
    let mut next_batch = |xb: &mut Vec<f32>, yb: &mut Vec<u32>| {
        for r in 0..opts.batch {
            if cursor == n_train {
                mix.shuffle(&mut order);
                cursor = 0;
            }
            let i = order[cursor];
            cursor += 1;
            xb[r * data.features..(r + 1) * data.features]
                .copy_from_slice(&data.train_x[i * data.features..(i + 1) * data.features]);
            yb[r] = data.train_y[i];
        }
    };

    let log_every = (opts.steps / 100).max(1);
    let mut losses = Vec::new();
    let start = Instant::now();
    for step in 0..opts.steps {
        next_batch(&mut xb, &mut yb);
        let want = step % log_every == 0 || step + 1 == opts.steps;
        if let Some(loss) = trainer
            .update(&mut model, &xb, &yb, opts.lr, want)
            .map_err(e)?
        {
            losses.push((step, loss));
            if !opts.quiet {
                let done = (step + 1) as f64 / opts.steps as f64;
                let bar: String = (0..30)
                    .map(|i| if (i as f64) < done * 30.0 { '=' } else { ' ' })
                    .collect();
                let rate = (step + 1) as f64 / start.elapsed().as_secs_f64();
                eprint!(
                    "\r[{bar}] {:>6}/{} loss {loss:7.4}  {rate:8.0} steps/s",
                    step + 1,
                    opts.steps
                );
                let _ = std::io::stderr().flush();
            }
        }
    }
    device.synchronize().map_err(e)?;
    let steps_per_s = opts.steps as f64 / start.elapsed().as_secs_f64();
    if !opts.quiet {
        eprintln!();
    }

    // The other mode, from the same initial weights, for a short comparison in this run.
    let compare = opts.steps.clamp(1, 100);
    let mut other = initial;
    let mut other_trainer =
        Trainer::new(&device, opts.accumulate, !opts.eager, opts.precision).map_err(e)?;
    let t = Instant::now();
    for _ in 0..compare {
        next_batch(&mut xb, &mut yb);
        other_trainer
            .update(&mut other, &xb, &yb, opts.lr, false)
            .map_err(e)?;
    }
    device.synchronize().map_err(e)?;
    let other_steps_per_s = compare as f64 / t.elapsed().as_secs_f64();

    let test_x = device.upload(&data.test_x).map_err(e)?;
    let test_accuracy = model.accuracy(&test_x, &data.test_y).map_err(e)?;
    let recordings = trainer.recordings();
    if let Some(path) = &opts.plot {
        std::fs::write(path, svg(&losses)).map_err(|err| format!("{}: {err}", path.display()))?;
    }
    Ok(Report {
        backend: device.kind().to_string(),
        test_accuracy,
        losses,
        steps_per_s,
        other_steps_per_s,
        recordings,
    })
}

/// The loss curve as a small SVG line chart.
pub fn svg(losses: &[(usize, f32)]) -> String {
    let (w, h, pad) = (640.0, 360.0, 48.0);
    let max_step = losses.last().map(|l| l.0).unwrap_or(1).max(1) as f64;
    let max_loss = losses.iter().map(|l| l.1 as f64).fold(1e-9, f64::max);
    let pts: Vec<String> = losses
        .iter()
        .map(|&(s, l)| {
            format!(
                "{:.1},{:.1}",
                pad + (w - 2.0 * pad) * s as f64 / max_step,
                h - pad - (h - 2.0 * pad) * l as f64 / max_loss
            )
        })
        .collect();
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <line x1=\"{pad}\" y1=\"{y0}\" x2=\"{x1}\" y2=\"{y0}\" stroke=\"black\"/>\n\
         <line x1=\"{pad}\" y1=\"{pad}\" x2=\"{pad}\" y2=\"{y0}\" stroke=\"black\"/>\n\
         <text x=\"{cx}\" y=\"{ty}\" text-anchor=\"middle\">step (last {max_step})</text>\n\
         <text x=\"12\" y=\"{pad}\">loss (max {max_loss:.3})</text>\n\
         <polyline fill=\"none\" stroke=\"#2563eb\" stroke-width=\"1.5\" points=\"{}\"/>\n</svg>\n",
        pts.join(" "),
        y0 = h - pad,
        x1 = w - pad,
        cx = w / 2.0,
        ty = h - 12.0,
    )
}

#[allow(dead_code)]
fn main() {
    let opts = parse(std::env::args().skip(1)).unwrap_or_else(|e| e.exit());
    match run(&opts) {
        Ok(r) => {
            let (mine, other) = if opts.eager {
                ("eager", "replay")
            } else {
                ("replay", "eager")
            };
            println!(
                "backend {}: test accuracy {:.1}%",
                r.backend,
                100.0 * r.test_accuracy
            );
            println!(
                "final loss {:.4}",
                r.losses.last().map(|l| l.1).unwrap_or(f32::NAN)
            );
            println!(
                "{mine}: {:.0} steps/s; {other}: {:.0} steps/s (same run; {:.1}x)",
                r.steps_per_s,
                r.other_steps_per_s,
                r.steps_per_s / r.other_steps_per_s
            );
            println!("recordings made: {}", r.recordings);
            if let Some(min) = opts.min_accuracy {
                if r.test_accuracy < min {
                    eprintln!(
                        "test accuracy {:.3} is below --min-accuracy {min}",
                        r.test_accuracy
                    );
                    std::process::exit(1);
                }
            }
        }
        Err(msg) => {
            eprintln!("train_mlp: {msg}");
            std::process::exit(1);
        }
    }
}
