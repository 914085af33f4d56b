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
fn train_mlp_rejects_bad_arguments() {
    let err =
        train_mlp::parse(["--batch", "10", "--accumulate", "3"].map(String::from)).unwrap_err();
    assert!(err.contains("multiple of --accumulate"), "{err}");
    let err = train_mlp::parse(["--backend", "tpu"].map(String::from)).unwrap_err();
    assert!(err.contains("unknown backend tpu"), "{err}");
    let err = train_mlp::parse(["--steps"].map(String::from)).unwrap_err();
    assert!(err.contains("--steps needs a value"), "{err}");
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
