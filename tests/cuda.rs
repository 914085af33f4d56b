//! CUDA-only behaviour: capture failures leave the stream usable, the census, and memory over
//! record/clear cycles. Skips without `--features cuda` and a driver, unless
//! `GRAPHED_REQUIRE` lists `cuda`.

mod common;

use common::{bitwise_eq, floats, rng};
use graphed::prelude::*;
use graphed::{BackendKind, Programmatic, Required};

#[kernel(workgroup = 128)]
pub fn scale_add(a: f32, x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = a * x[i] + y[i];
    }
}

#[graphed]
fn chain(
    cx: &mut Step,
    #[state] y: &mut Buffer<f32>,
    x: &Input<f32>,
    a: f32,
) -> Result<Output<f32>> {
    for _ in 0..8 {
        scale_add::launch(cx, x.len(), a, x, y)?;
    }
    let mut out = cx.output::<f32>(y.len())?;
    cx.copy(y, &mut out)?;
    Ok(out)
}

fn cuda() -> Option<Device> {
    match Device::open_new(BackendKind::Cuda) {
        Ok(d) => Some(d),
        Err(e) if Required::from_env().unwrap().cuda => {
            panic!("cuda is required but unavailable: {e}")
        }
        Err(e) => {
            eprintln!("note: skipping CUDA tests: {e}");
            None
        }
    }
}

#[test]
fn census_matches_and_replay_equals_eager_and_host() {
    let Some(dev) = cuda() else { return };
    let mut r = rng("cuda_census");
    let n = 1000;
    let y0 = floats(&mut r, n, -1.0, 1.0);
    let mut y_rep = dev.upload(&y0).unwrap();
    let mut y_eag = dev.upload(&y0).unwrap();
    let host = Device::host();
    let mut y_host = host.upload(&y0).unwrap();
    let (mut rep, mut eag, mut hst) = (
        Chain::new(&dev).unwrap(),
        Chain::new(&dev).unwrap(),
        Chain::new(&host).unwrap(),
    );
    for i in 0..20 {
        let x = floats(&mut r, n, -1.0, 1.0);
        let a = 0.5 + i as f32 * 0.01;
        let o1 = rep.call(&mut y_rep, &x[..], a).unwrap().to_host().unwrap();
        let o2 = eag.eager(&mut y_eag, &x[..], a).unwrap().to_host().unwrap();
        let o3 = hst.call(&mut y_host, &x[..], a).unwrap().to_host().unwrap();
        assert!(bitwise_eq(&o1, &o2), "replay != eager at step {i}");
        // a*x+y with --fmad=false is correctly rounded on both: bitwise equal to the host.
        assert!(bitwise_eq(&o1, &o3), "cuda != host at step {i}");
    }
    let s = rep.stats();
    assert_eq!(
        (s.recordings, s.replays, s.eager_calls),
        (1, 20, 0),
        "{s:?}"
    );
    assert_eq!(s.launches_per_replay, 8);
    // The CUDA graph's own DOT dump, next to the plan's.
    let path = std::env::temp_dir().join(format!("graphed-cuda-{}.dot", std::process::id()));
    assert!(rep.holder().write_backend_dot(&path).unwrap());
    let dot = std::fs::read_to_string(&path).unwrap();
    assert!(dot.matches("scale_add").count() >= 8, "{dot}");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_failure_mid_capture_aborts_it_and_the_stream_stays_usable() {
    let Some(dev) = cuda() else { return };
    let mut r = rng("cuda_capture_fault");
    let n = 500;
    let y0 = floats(&mut r, n, -1.0, 1.0);
    let mut y = dev.upload(&y0).unwrap();
    let mut y_ref = Device::host().upload(&y0).unwrap();
    let mut step = Chain::new(&dev).unwrap();
    let mut reference = Chain::new(&Device::host()).unwrap();
    graphed::__private::inject_capture_fault("injected fault mid-capture");
    let x = floats(&mut r, n, -1.0, 1.0);
    let got = step.call(&mut y, &x[..], 0.25).unwrap().to_host().unwrap();
    let want = reference
        .call(&mut y_ref, &x[..], 0.25)
        .unwrap()
        .to_host()
        .unwrap();
    assert!(
        bitwise_eq(&got, &want),
        "the eager fallback after a failed capture is wrong"
    );
    let s = step.stats();
    assert_eq!((s.recordings, s.eager_calls), (0, 1), "{s:?}");
    assert!(
        s.eager_reasons[0].contains("injected fault mid-capture"),
        "{:?}",
        s.eager_reasons
    );
    // The stream is not left capturing: eager work on it is correct.
    let a = dev.upload(&[1.0f32, 2.0]).unwrap();
    let mut b = dev.upload(&[10.0f32, 20.0]).unwrap();
    scale_add::launch(&dev, 2, 3.0, &a, &mut b).unwrap();
    assert_eq!(b.to_host().unwrap(), vec![13.0, 26.0]);
    // The key stays eager and keeps giving correct results.
    for _ in 0..3 {
        let x = floats(&mut r, n, -1.0, 1.0);
        let got = step.call(&mut y, &x[..], 0.5).unwrap().to_host().unwrap();
        let want = reference
            .call(&mut y_ref, &x[..], 0.5)
            .unwrap()
            .to_host()
            .unwrap();
        assert!(bitwise_eq(&got, &want));
    }
}

#[test]
fn record_clear_cycles_do_not_grow_device_memory() {
    let Some(dev) = cuda() else { return };
    let mut r = rng("cuda_cycles");
    let n = 4096;
    let mut y = dev.upload(&floats(&mut r, n, -1.0, 1.0)).unwrap();
    let x = floats(&mut r, n, -1.0, 1.0);
    let mut step = Chain::new(&dev).unwrap();
    // Warm the allocator and module caches.
    step.call(&mut y, &x[..], 0.5).unwrap();
    step.clear().unwrap();
    dev.synchronize().unwrap();
    let (free_before, _) = dev.memory_info().expect("CUDA reports free memory");
    for _ in 0..100 {
        step.call(&mut y, &x[..], 0.5).unwrap();
        step.clear().unwrap();
    }
    dev.synchronize().unwrap();
    let (free_after, _) = dev.memory_info().unwrap();
    let grown = free_before.saturating_sub(free_after);
    eprintln!("100 record/clear cycles: device memory grew by {grown} bytes");
    assert!(
        grown < 1 << 20,
        "device memory grew by {grown} bytes over 100 cycles"
    );
    assert_eq!(step.stats().recordings, 101);
}

use common::steps as deep;

/// The edges of the CUDA graph a holder's latest recording runs, from the driver's DOT dump.
fn graph_edges(holder: &graphed::Graphed, what: &str) -> usize {
    let path = std::env::temp_dir().join(format!("graphed-{what}-{}.dot", std::process::id()));
    assert!(
        holder.write_backend_dot(&path).unwrap(),
        "{what}: no DOT written"
    );
    let dot = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    dot.lines().filter(|l| l.contains(" -> ")).count()
}

/// The deep step's graph has the plan's edges, not a chain: the 10 weight updates run beside
/// the forward layers after theirs. Replay ≡ eager bitwise with the graph lowering (and
/// programmatic launch) on and off.
#[test]
fn the_graph_has_the_plans_edges_and_replays_like_eager_in_every_mode() {
    let Some(dev) = cuda() else { return };
    for (concurrent_ops, programmatic_launch) in [
        (false, Programmatic::Off),
        (true, Programmatic::Off),
        (true, Programmatic::Chains),
        (true, Programmatic::On),
    ] {
        let what =
            format!("concurrent_ops={concurrent_ops} programmatic_launch={programmatic_launch:?}");
        let mut r = rng(&what);
        let n = 4096;
        let w0 = floats(&mut r, n * deep::LAYERS, -1.0, 1.0);
        let (mut w_rep, mut w_eag) = (dev.upload(&w0).unwrap(), dev.upload(&w0).unwrap());
        let cfg = graphed::Config {
            concurrent_ops,
            programmatic_launch,
            ..graphed::Config::default()
        };
        let mut rep = deep::DeepStep::with_config(&dev, cfg).unwrap();
        let mut eag = deep::DeepStep::new(&dev).unwrap();
        for s in 0..30 {
            let x = floats(&mut r, n, -2.0, 2.0);
            let (y1, s1) = rep.call(&mut w_rep, &x[..], 0.01, 0.1).unwrap();
            let (y1, s1) = (y1.to_host().unwrap(), s1.to_host().unwrap());
            let (y2, s2) = eag.eager(&mut w_eag, &x[..], 0.01, 0.1).unwrap();
            let (y2, s2) = (y2.to_host().unwrap(), s2.to_host().unwrap());
            assert!(
                bitwise_eq(&y1, &y2) && bitwise_eq(&s1, &s2),
                "{what}: step {s} differs"
            );
        }
        assert!(
            bitwise_eq(&w_rep.to_host().unwrap(), &w_eag.to_host().unwrap()),
            "{what}: weights differ"
        );
        let st = rep.stats();
        assert_eq!(
            (st.recordings, st.replays, st.eager_calls),
            (1, 30, 0),
            "{what}: {st:?}"
        );
        let (ops, plan_edges) = {
            let plan = rep.plan().unwrap();
            (plan.ops().len(), plan.edges().len())
        };
        let edges = graph_edges(rep.holder(), "deep");
        if concurrent_ops {
            assert_eq!(edges, plan_edges, "{what}: graph edges vs the plan's");
            assert!(edges < 2 * (ops - 1), "{what}: {edges} edges for {ops} ops");
        } else {
            assert_eq!(edges, ops - 1, "{what}: a serial plan is one chain");
        }
    }
}
