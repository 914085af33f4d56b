//! Fallbacks nobody can miss (issue 13): a key that cannot be recorded warns once per holder
//! and key on stderr (no `tracing` subscriber installed), errors under `Fallback::Error` or
//! `GRAPHED_STRICT=1`, and says nothing under `Fallback::Silent`.

mod common;

use common::on_every_backend;
use graphed::prelude::*;

/// y = x * a
#[kernel(workgroup = 64)]
pub fn scale(a: f32, x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = x[i] * a;
    }
}

/// Reads its input back to pick the factor: never capturable.
#[graphed]
fn peek(cx: &mut Step, x: &Input<f32>, #[key] k: u32) -> Result<Output<f32>> {
    let a = x.to_host()?[0] + k as f32;
    let mut y = cx.output::<f32>(x.len())?;
    scale::launch(cx, x.len(), a, x, &mut y)?;
    Ok(y)
}

fn child(test: &str, strict: bool) -> (bool, String, String) {
    let marker = ("GRAPHED_FALLBACK_CHILD", "1");
    if strict {
        common::run_child(test, &[marker, ("GRAPHED_STRICT", "1")], &[])
    } else {
        common::run_child(test, &[marker], &["GRAPHED_STRICT"])
    }
}

fn is_child() -> bool {
    std::env::var("GRAPHED_FALLBACK_CHILD").is_ok()
}

#[test]
fn warn_child() {
    if !is_child() {
        return;
    }
    on_every_backend(|dev| {
        let mut step = Peek::new(dev).unwrap();
        for k in [0u32, 0, 0, 1, 1] {
            let y = step.call(&[2.0f32][..], k).unwrap();
            assert_eq!(y.to_host().unwrap(), vec![2.0 * (2.0 + k as f32)]);
        }
        assert_eq!(step.stats().eager_calls, 5);
        eprintln!("child done on {}", dev.kind());
    });
}

/// The default policy warns once per holder and key on stderr, naming the step and the reason.
#[test]
fn an_eager_fallback_warns_once_per_key_on_stderr() {
    if is_child() {
        return;
    }
    let (ok, _, stderr) = child("warn_child", false);
    assert!(ok, "{stderr}");
    let backends = stderr.matches("child done on").count();
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("graphed: warning: step `peek` runs eagerly"))
        .collect();
    assert_eq!(warnings.len(), 2 * backends, "{stderr}");
    assert!(
        warnings[0].contains("Buffer::to_host") && warnings[0].contains("GRAPHED_STRICT"),
        "{}",
        warnings[0]
    );
}

#[test]
fn strict_child() {
    if !is_child() {
        return;
    }
    on_every_backend(|dev| {
        let mut step = Peek::new(dev).unwrap();
        let err = step.call(&[2.0f32][..], 0).unwrap_err();
        match &err {
            graphed::Error::NotCapturable { step, reason } => {
                assert_eq!(*step, "peek");
                assert!(reason.contains("Buffer::to_host"), "{reason}");
            }
            other => panic!("expected NotCapturable, got {other:?}"),
        }
        assert!(err.to_string().contains("GRAPHED_STRICT"), "{err}");
        let s = step.stats();
        assert_eq!((s.eager_calls, s.recordings), (0, 0));
        // Strict overrides a holder's own policy.
        let mut silent = Peek::with_config(
            dev,
            Config {
                fallback: Fallback::Silent,
                ..Config::default()
            },
        )
        .unwrap();
        assert!(silent.call(&[2.0f32][..], 0).is_err());
        println!("strict ok on {}", dev.kind());
    });
}

/// `GRAPHED_STRICT=1` makes every fallback an error, so CI can assert that all was recorded.
#[test]
fn graphed_strict_makes_every_fallback_an_error() {
    if is_child() {
        return;
    }
    let (ok, stdout, stderr) = child("strict_child", true);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("strict ok on host"), "{stdout}");
    assert!(!stderr.contains("graphed: warning"), "{stderr}");
}

#[test]
fn policy_child() {
    if !is_child() {
        return;
    }
    on_every_backend(|dev| {
        let mut err = Peek::with_config(
            dev,
            Config {
                fallback: Fallback::Error,
                ..Config::default()
            },
        )
        .unwrap();
        for _ in 0..2 {
            assert!(matches!(
                err.call(&[2.0f32][..], 3),
                Err(graphed::Error::NotCapturable { .. })
            ));
        }
        assert_eq!(err.stats().eager_calls, 0);
        let mut silent = Peek::with_config(
            dev,
            Config {
                fallback: Fallback::Silent,
                ..Config::default()
            },
        )
        .unwrap();
        let y = silent.call(&[2.0f32][..], 3).unwrap();
        assert_eq!(y.to_host().unwrap(), vec![10.0]);
        assert_eq!(silent.stats().eager_reasons.len(), 1);
        println!("policies ok on {}", dev.kind());
    });
}

/// `Fallback::Error` refuses the call with the reason; `Fallback::Silent` runs eagerly quietly.
#[test]
fn error_and_silent_policies() {
    if is_child() {
        return;
    }
    let (ok, stdout, stderr) = child("policy_child", false);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("policies ok on host"), "{stdout}");
    assert!(!stderr.contains("graphed: warning"), "{stderr}");
}

/// A `tracing` subscriber receives the warning as an event instead of stderr.
#[test]
fn a_tracing_subscriber_gets_the_warning_as_an_event() {
    use std::sync::{Arc, Mutex};
    struct Count(Arc<Mutex<Vec<String>>>);
    impl tracing::Subscriber for Count {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, e: &tracing::Event<'_>) {
            if *e.metadata().level() == tracing::Level::WARN {
                self.0
                    .lock()
                    .unwrap()
                    .push(e.metadata().target().to_string());
            }
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let dev = graphed::Device::host();
    tracing::subscriber::with_default(Count(seen.clone()), || {
        let mut step = Peek::new(&dev).unwrap();
        step.call(&[2.0f32][..], 0).unwrap();
        step.call(&[2.0f32][..], 0).unwrap();
    });
    assert_eq!(seen.lock().unwrap().len(), 1, "{:?}", seen.lock().unwrap());
}
