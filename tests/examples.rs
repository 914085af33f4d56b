//! Each example, run briefly on every backend available.

#[path = "../examples/adapt.rs"]
#[allow(dead_code)]
mod adapt;
#[path = "../examples/sampler.rs"]
#[allow(dead_code)]
mod sampler;

// `adapt` includes `train_mlp` (its data loader); one copy of the module serves both.
use adapt::train_mlp;

use graphed::testing::on_every_backend;

#[test]
fn train_mlp_learns_briefly_and_records_once() {
    on_every_backend(|dev| {
        for accumulate in [1, 2] {
            let opts = train_mlp::Options {
                backend: Some(dev.kind()),
                steps: 40,
                accumulate,
                quiet: true,
                ..Default::default()
            };
            let r = train_mlp::run(&opts).unwrap();
            let (first, last) = (r.losses.first().unwrap().1, r.losses.last().unwrap().1);
            assert!(
                last < 0.5 * first,
                "accumulate {accumulate}: loss went {first} -> {last}"
            );
            assert!(
                r.test_accuracy > 0.5,
                "accumulate {accumulate}: accuracy {}",
                r.test_accuracy
            );
            assert_eq!(
                r.recordings,
                if accumulate == 1 { 1 } else { 2 },
                "one recording per step kind"
            );
        }
    });
}

#[test]
fn train_mlp_learns_in_16_bits_where_half_products_run() {
    use graphed::nn::mixed::Precision;
    on_every_backend(|dev| {
        for precision in [Precision::Bf16, Precision::F16, Precision::Tf32] {
            let opts = train_mlp::Options {
                backend: Some(dev.kind()),
                steps: 40,
                quiet: true,
                precision,
                ..Default::default()
            };
            let case = format!("{} {}", dev.kind(), precision.name());
            if dev.kind() == graphed::BackendKind::Wgpu && precision != Precision::Tf32 {
                let err = train_mlp::run(&opts).unwrap_err();
                assert!(err.contains("kernel `matmul_half` needs"), "{case}: {err}");
                continue;
            }
            let r = train_mlp::run(&opts).unwrap();
            let (first, last) = (r.losses.first().unwrap().1, r.losses.last().unwrap().1);
            assert!(last < 0.5 * first, "{case}: loss went {first} -> {last}");
            assert!(
                r.test_accuracy > 0.5,
                "{case}: accuracy {}",
                r.test_accuracy
            );
            assert_eq!(r.recordings, 1, "{case}: one recording");
        }
    });
}

#[test]
fn train_mlp_rejects_bad_arguments() {
    let parse = |args: &[&str]| {
        train_mlp::parse(args.iter().map(|a| a.to_string()))
            .unwrap_err()
            .to_string()
    };
    let err = parse(&["--batch", "10", "--accumulate", "3"]);
    assert!(
        err.contains("--batch (10) must be a multiple of --accumulate (3)"),
        "{err}"
    );
    let err = parse(&["--precision", "f8"]);
    assert!(
        err.contains("unknown precision f8 (f32, tf32, bf16 or f16)"),
        "{err}"
    );
    let err = parse(&["--precision", "bf16", "--accumulate", "2"]);
    assert!(
        err.contains("--precision bf16 trains whole batches"),
        "{err}"
    );
    let err = parse(&["--backend", "tpu"]);
    assert!(err.contains("unknown backend tpu"), "{err}");
    let err = parse(&["--steps"]);
    assert!(
        err.contains("a value is required for '--steps <N>'"),
        "{err}"
    );
    let err = train_mlp::run(&train_mlp::Options {
        backend: Some(graphed::BackendKind::Host),
        data: Some("/nonexistent".into()),
        ..Default::default()
    })
    .unwrap_err();
    assert!(
        err.contains("/nonexistent/train-images-idx3-ubyte"),
        "{err}"
    );
}

/// The `train_mlp` example binary of this build, built now if `cargo test` did not build it
/// (`cargo test --test examples` builds no examples); a no-op when it is up to date.
fn train_mlp_bin() -> &'static std::path::Path {
    static BIN: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        // Packed for the GPU machine (no cargo there): the example lies beside this binary.
        let beside = exe.with_file_name("train_mlp");
        if beside.is_file() {
            return beside;
        }
        // target/<profile>/deps/examples-<hash>
        let profile_dir = exe.parent().unwrap().parent().unwrap();
        let target_dir = profile_dir.parent().unwrap();
        let profile = match profile_dir.file_name().unwrap().to_str().unwrap() {
            "debug" => "dev".to_string(),
            other => other.to_string(),
        };
        let mut features = Vec::new();
        if cfg!(feature = "cuda") {
            features.push("cuda");
        }
        if cfg!(feature = "nccl") {
            features.push("nccl");
        }
        let out = std::process::Command::new(env!("CARGO"))
            .args([
                "build",
                "--quiet",
                "--example",
                "train_mlp",
                "--profile",
                &profile,
            ])
            .args(["--features", &features.join(",")])
            .arg("--manifest-path")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
            .env("CARGO_TARGET_DIR", target_dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "building the example failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        profile_dir.join("examples").join("train_mlp")
    })
}

/// Runs the example binary; returns (exit code, stdout, stderr).
fn train_mlp_exe(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(train_mlp_bin())
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn train_mlp_exits_nonzero_on_bad_numbers() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["--steps", "-1"],
            "invalid value '-1' for '--steps <N>': not a whole number of at least 1",
        ),
        (
            &["--steps", "nan"],
            "invalid value 'nan' for '--steps <N>': not a whole number",
        ),
        (
            &["--steps", "1e30"],
            "invalid value '1e30' for '--steps <N>': not a whole number",
        ),
        (
            &["--steps", "1.5"],
            "invalid value '1.5' for '--steps <N>': not a whole number",
        ),
        (
            &["--steps", "0"],
            "invalid value '0' for '--steps <N>': must be at least 1",
        ),
        (
            &["--batch", "0"],
            "invalid value '0' for '--batch <B>': must be at least 1",
        ),
        (
            &["--accumulate", "-2"],
            "invalid value '-2' for '--accumulate <K>'",
        ),
        (
            &["--lr", "nan"],
            "invalid value 'nan' for '--lr <X>': must be a finite number above 0",
        ),
        (
            &["--lr", "-0.1"],
            "invalid value '-0.1' for '--lr <X>': must be a finite number above 0",
        ),
        (&["--lr", "inf"], "invalid value 'inf' for '--lr <X>'"),
        (
            &["--min-accuracy", "1.5"],
            "invalid value '1.5' for '--min-accuracy <A>': must be a number from 0 to 1",
        ),
        (&["--seed", "-3"], "invalid value '-3' for '--seed <S>'"),
        (&["--backend", "tpu"], "unknown backend tpu"),
        (
            &["--batch", "10", "--accumulate", "3"],
            "--batch (10) must be a multiple of --accumulate (3)",
        ),
    ];
    for (args, want) in cases {
        let (code, stdout, stderr) = train_mlp_exe(args);
        assert_eq!(code, 2, "{args:?}: stdout {stdout} stderr {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?} trained: {stdout}");
    }
    let (code, stdout, _) = train_mlp_exe(&["--help"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("--min-accuracy <A>"), "{stdout}");
}

/// Writes an IDX data set into a fresh folder: (images, labels) of the training and the test
/// set, images of 28×28.
fn idx_set(
    name: &str,
    (train, train_labels): (usize, Vec<u8>),
    (test, test_labels): (usize, Vec<u8>),
) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("graphed-idx-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |file: &str, magic: u32, dims: &[u32], data: &[u8]| {
        let mut b = magic.to_be_bytes().to_vec();
        for d in dims {
            b.extend(d.to_be_bytes());
        }
        b.extend(data);
        std::fs::write(dir.join(file), b).unwrap();
    };
    let img = |n: usize| -> Vec<u8> { (0..n * 784).map(|i| ((i * 37) % 256) as u8).collect() };
    write(
        "train-images-idx3-ubyte",
        0x0803,
        &[train as u32, 28, 28],
        &img(train),
    );
    write(
        "train-labels-idx1-ubyte",
        0x0801,
        &[train_labels.len() as u32],
        &train_labels,
    );
    write(
        "t10k-images-idx3-ubyte",
        0x0803,
        &[test as u32, 28, 28],
        &img(test),
    );
    write(
        "t10k-labels-idx1-ubyte",
        0x0801,
        &[test_labels.len() as u32],
        &test_labels,
    );
    dir
}

#[test]
fn train_mlp_exits_nonzero_on_inconsistent_data() {
    let labels = |n: usize| -> Vec<u8> { (0..n).map(|i| (i % 10) as u8).collect() };
    let mut bad_label = labels(40);
    bad_label[3] = 12;
    let cases = [
        (
            "more-labels",
            (40, labels(50)),
            (10, labels(10)),
            "train-labels-idx1-ubyte: 50 labels for 40 images",
        ),
        (
            "more-images",
            (40, labels(30)),
            (10, labels(10)),
            "train-labels-idx1-ubyte: 30 labels for 40 images",
        ),
        (
            "test-labels",
            (40, labels(40)),
            (10, labels(9)),
            "t10k-labels-idx1-ubyte: 9 labels for 10 images",
        ),
        (
            "big-label",
            (40, bad_label),
            (10, labels(10)),
            "train-labels-idx1-ubyte: label 12 of row 3 is not a class of 0..=9",
        ),
        (
            "empty-test",
            (40, labels(40)),
            (0, labels(0)),
            "the test set is empty",
        ),
    ];
    for (name, train, test, want) in cases {
        let dir = idx_set(name, train, test);
        let data = dir.to_str().unwrap();
        let (code, stdout, stderr) = train_mlp_exe(&[
            "--backend",
            "host",
            "--steps",
            "2",
            "--batch",
            "8",
            "--quiet",
            "--data",
            data,
        ]);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(code, 1, "{name}: stdout {stdout} stderr {stderr}");
        assert!(stderr.contains(want), "{name}: {stderr}");
        assert!(!stdout.contains("test accuracy"), "{name}: {stdout}");
    }
}

#[test]
fn train_mlp_prints_nothing_on_stderr_on_a_clean_run() {
    let mut kinds = vec!["host"];
    if common_backends_have(graphed::BackendKind::Wgpu) {
        kinds.push("wgpu");
    }
    for kind in kinds {
        // No desktop session: Mesa's window-system code must not be reached at all.
        let mut cmd = std::process::Command::new(train_mlp_bin());
        cmd.args(["--quiet", "--steps", "5"])
            .env("GRAPHED_BACKEND", kind)
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("WAYLAND_DISPLAY")
            .env_remove("DISPLAY");
        let out = cmd.output().unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "{kind}: {stdout} {stderr}");
        assert!(
            stdout.contains(&format!("backend {kind}: test accuracy")),
            "{kind}: {stdout}"
        );
        assert_eq!(stderr, "", "{kind}: stderr is not empty");
    }
}

fn common_backends_have(kind: graphed::BackendKind) -> bool {
    graphed::testing::backends()
        .iter()
        .any(|d| d.kind() == kind)
}

#[test]
fn train_mlp_reads_mnist_idx_files() {
    // A tiny IDX data set written here: 40 training and 10 test images of 28×28.
    let dir = std::env::temp_dir().join(format!("graphed-idx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, magic: u32, dims: &[u32], data: &[u8]| {
        let mut b = magic.to_be_bytes().to_vec();
        for d in dims {
            b.extend(d.to_be_bytes());
        }
        b.extend(data);
        std::fs::write(dir.join(name), b).unwrap();
    };
    let img = |n: usize| -> Vec<u8> { (0..n * 784).map(|i| ((i * 37) % 256) as u8).collect() };
    let lab = |n: usize| -> Vec<u8> { (0..n).map(|i| (i % 10) as u8).collect() };
    write("train-images-idx3-ubyte", 0x0803, &[40, 28, 28], &img(40));
    write("train-labels-idx1-ubyte", 0x0801, &[40], &lab(40));
    write("t10k-images-idx3-ubyte", 0x0803, &[10, 28, 28], &img(10));
    write("t10k-labels-idx1-ubyte", 0x0801, &[10], &lab(10));
    let data = train_mlp::mnist(&dir).unwrap();
    assert_eq!(
        (data.features, data.train_y.len(), data.test_y.len()),
        (784, 40, 10)
    );
    assert_eq!(data.train_x[1], 37.0 / 255.0);
    let opts = train_mlp::Options {
        backend: Some(graphed::BackendKind::Host),
        steps: 2,
        batch: 8,
        data: Some(dir.clone()),
        quiet: true,
        ..Default::default()
    };
    let r = train_mlp::run(&opts).unwrap();
    assert_eq!(r.recordings, 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sampler_replay_is_bitwise_eager_and_records_once() {
    on_every_backend(|dev| {
        let (x, same, _, _, _, recordings) = sampler::run(dev, 6, 16).unwrap();
        assert!(same, "replayed samples differ from eager ones");
        assert_eq!(
            recordings, 1,
            "sigma and guidance changes must not re-record"
        );
        assert!(x.iter().all(|v| v.is_finite()));
    });
}

#[test]
fn adapt_improves_on_the_shifted_stream() {
    on_every_backend(|dev| {
        let (before, after, capture_ms, steady_us, recordings) = adapt::run(dev, 8, 30).unwrap();
        assert_eq!(recordings, 1);
        assert!(capture_ms > 0.0 && steady_us > 0.0);
        assert!(
            after >= before,
            "adaptation made it worse: {before} -> {after}"
        );
    });
}

#[test]
fn the_loss_plot_is_an_svg_polyline() {
    let svg = train_mlp::svg(&[(0, 2.0), (10, 1.0), (20, 0.5)]);
    assert!(
        svg.starts_with("<svg") && svg.contains("<polyline") && svg.trim_end().ends_with("</svg>")
    );
    assert_eq!(svg.matches(',').count(), 3, "three points");
}
