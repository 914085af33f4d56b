//! The lifecycle against a reference model (issue 19): random sequences of calls (new and
//! cached keys, changed scalars, replaced state allocations — an update of the recording,
//! not a new one, issue 17), eager runs, eviction,
//! invalidation, clears with an injected drain failure, injected capture failures (CUDA) and
//! drops drive a holder; after every operation the results, `stats()`, the pinned bytes and
//! the device's byte count must equal a small model's. A failing sequence is shrunk to a
//! minimal one before it is reported.
//!
//! `GRAPHED_MODEL_SEQUENCES` sets how many sequences run per backend (default 150 on the
//! host, 25 elsewhere); `GRAPHED_SEED` reproduces a run.

mod common;

use common::{backends, rng};
use graphed::prelude::*;
use graphed::{BackendKind, Device};
use rand::Rng;

/// w ← w·a + x + k; y = w. Exact in f32 for the values used (small integers, a ∈ {½, 1, 2}),
/// so every backend matches the model bitwise, with or without fused multiply-adds.
#[kernel(workgroup = 64)]
pub fn affine(a: f32, k: f32, x: &[f32], w: &mut [f32], y: &mut [f32]) {
    let i = global_id().x;
    if i < w.len() {
        w[i] = w[i] * a + x[i] + k;
        y[i] = w[i];
    }
}

#[graphed]
fn model_step(
    cx: &mut Step,
    #[state] w: &mut Buffer<f32>,
    x: &Input<f32>,
    a: f32,
    #[key] k: u32,
) -> Result<Output<f32>> {
    let mut y = cx.output::<f32>(w.len())?;
    affine::launch(cx, w.len(), a, k as f32, x, w, &mut y)?;
    Ok(y)
}

const LENS: [usize; 2] = [4, 9];
const MAX_RECORDINGS: usize = 3;

#[derive(Clone, Debug)]
enum Op {
    /// `call` (or `eager`) on state `s` (0 or 1 of the given length) with scalar `a` and key `k`.
    Call {
        s: usize,
        a: f32,
        k: u32,
        eager: bool,
    },
    /// State `s` moves to a new allocation with the same values (the same key: the next call
    /// updates the recording bound to the old one).
    Replace { s: usize },
    /// `evict_where(all)`.
    EvictAll,
    /// `invalidate()`.
    Invalidate,
    /// `clear()` with an injected drain failure: an error, an empty holder, parked memory.
    FailedClear,
    /// The next recording's capture fails (CUDA; ignored elsewhere).
    CaptureFault,
    /// The holder is dropped and a new one made.
    Recreate,
}

fn random_op(r: &mut impl Rng) -> Op {
    match r.random_range(0..20) {
        0..=11 => Op::Call {
            s: r.random_range(0..2),
            a: [0.5f32, 1.0, 2.0][r.random_range(0..3)],
            k: r.random_range(0..3),
            eager: r.random_range(0..6) == 0,
        },
        12 | 13 => Op::Replace {
            s: r.random_range(0..2),
        },
        14 => Op::EvictAll,
        15 => Op::Invalidate,
        16 => Op::FailedClear,
        17 => Op::CaptureFault,
        _ => Op::Recreate,
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Recorded,
    Eager,
    Warming(u32),
}

struct Entry {
    key: (usize, usize, u32), // (state index, length, k)
    kind: Kind,
    last_used: u64,
    /// The state allocation (generation) a recording is bound to.
    bound: usize,
}

/// What the holder should be: its entries, counters and bytes.
#[derive(Default)]
struct Model {
    entries: Vec<Entry>,
    clock: u64,
    recordings: u64,
    replays: u64,
    eager_calls: u64,
    evictions: u64,
    updates: u64,
    /// Old state bindings of updated recordings: held until the holder's next drain.
    retired: Vec<usize>,
    /// Bytes of recordings and outputs a failed clear parked: kept until the holder's next
    /// successful drain (an eviction, a clear, the drop) releases them.
    parked: u64,
    /// Bytes of the last eager run's outputs, held by the holder until its next eager run.
    eager_out: u64,
    capture_fault: bool,
    /// State allocations (generations) that parked recordings still hold.
    parked_generations: Vec<usize>,
}

impl Model {
    fn static_bytes(&self, len_of: impl Fn(&(usize, usize, u32)) -> usize) -> u64 {
        self.entries
            .iter()
            .filter(|e| e.kind == Kind::Recorded)
            .map(|e| 8 * len_of(&e.key) as u64)
            .sum()
    }
}

struct World {
    dev: Device,
    warmup: u32,
    step: ModelStep,
    states: [Buffer<f32>; 2],
    generation: [usize; 2],
    host: [Vec<f32>; 2],
    next_generation: usize,
    /// Every state allocation made: (generation, length).
    generations: Vec<(usize, usize)>,
    model: Model,
}

fn config(warmup: u32) -> Config {
    Config {
        max_recordings: MAX_RECORDINGS,
        warmup,
        fallback: Fallback::Silent,
        ..Config::default()
    }
}

impl World {
    fn new(dev: &Device, warmup: u32) -> World {
        let host = [
            (0..LENS[0]).map(|i| i as f32 - 2.0).collect::<Vec<_>>(),
            (0..LENS[1]).map(|i| 3.0 - i as f32).collect::<Vec<_>>(),
        ];
        World {
            dev: dev.clone(),
            warmup,
            step: ModelStep::with_config(dev, config(warmup)).unwrap(),
            states: [dev.upload(&host[0]).unwrap(), dev.upload(&host[1]).unwrap()],
            generation: [0, 1],
            host,
            next_generation: 2,
            generations: vec![(0, LENS[0]), (1, LENS[1])],
            model: Model::default(),
        }
    }

    fn len_of(&self, key: &(usize, usize, u32)) -> usize {
        key.1
    }

    fn apply(&mut self, op: &Op) -> Result<(), String> {
        let m = &mut self.model;
        match *op {
            Op::Call { s, a, k, eager } => {
                let n = LENS[s];
                let x: Vec<f32> = (0..n).map(|i| (i % 3) as f32 - 1.0).collect();
                for (w, xi) in self.host[s].iter_mut().zip(&x) {
                    *w = *w * a + xi + k as f32;
                }
                let want = self.host[s].clone();
                let key = (s, n, k);
                let generation = self.generation[s];
                if eager {
                    m.eager_calls += 1;
                    m.eager_out = 4 * n as u64;
                } else {
                    m.clock += 1;
                    let clock = m.clock;
                    let at = match m.entries.iter().position(|e| e.key == key) {
                        Some(i) => i,
                        None => {
                            let kind = if self.warmup > 0 {
                                Kind::Warming(0)
                            } else {
                                Kind::Recorded
                            };
                            m.entries.push(Entry {
                                key,
                                kind,
                                last_used: clock,
                                bound: generation,
                            });
                            let i = m.entries.len() - 1;
                            if kind == Kind::Recorded {
                                record(m, i, self.dev.kind());
                            }
                            m.entries.iter().position(|e| e.key == key).unwrap()
                        }
                    };
                    m.entries[at].last_used = clock;
                    if let Kind::Warming(c) = m.entries[at].kind {
                        if c < self.warmup {
                            m.entries[at].kind = Kind::Warming(c + 1);
                        } else {
                            m.entries[at].kind = Kind::Recorded;
                            m.entries[at].bound = generation;
                            record(m, at, self.dev.kind());
                        }
                    }
                    let at = m.entries.iter().position(|e| e.key == key).unwrap();
                    match m.entries[at].kind {
                        Kind::Recorded => {
                            if m.entries[at].bound != generation {
                                // Another allocation of the same shape: an update.
                                m.updates += 1;
                                let old = std::mem::replace(&mut m.entries[at].bound, generation);
                                m.retired.push(old);
                            }
                            m.replays += 1;
                        }
                        _ => {
                            m.eager_calls += 1;
                            m.eager_out = 4 * n as u64;
                        }
                    }
                }
                let state = &mut self.states[s];
                let got = if eager {
                    self.step.eager(state, &x[..], a, k)
                } else {
                    self.step.call(state, &x[..], a, k)
                }
                .map_err(|e| format!("call failed: {e}"))?
                .to_host()
                .map_err(|e| format!("reading the output failed: {e}"))?;
                if got != want {
                    return Err(format!("output {got:?}, model {want:?}"));
                }
                let w = state.to_host().map_err(|e| e.to_string())?;
                if w != want {
                    return Err(format!("state {w:?}, model {want:?}"));
                }
            }
            Op::Replace { s } => {
                self.states[s] = self.dev.upload(&self.host[s]).unwrap();
                self.generation[s] = self.next_generation;
                self.generations.push((self.next_generation, LENS[s]));
                self.next_generation += 1;
            }
            Op::EvictAll => {
                let n = self
                    .step
                    .holder()
                    .evict_where(|_| true)
                    .map_err(|e| e.to_string())?;
                if n != m.entries.len() {
                    return Err(format!(
                        "evict_where removed {n}, model has {}",
                        m.entries.len()
                    ));
                }
                m.entries.clear();
                unpark(m);
            }
            Op::Invalidate => {
                self.step.holder().invalidate().map_err(|e| e.to_string())?;
                m.entries.clear();
                m.eager_out = 0;
                unpark(m);
            }
            Op::FailedClear => {
                self.step.holder().__fail_next_drain();
                match self.step.clear() {
                    Err(graphed::Error::Drain { .. }) => {}
                    other => return Err(format!("clear with a failed drain gave {other:?}")),
                }
                let len_of = |k: &(usize, usize, u32)| k.1;
                // Old bindings are parked too, as user buffers (not in `parked_bytes`).
                m.parked += m.static_bytes(len_of) + m.eager_out;
                let pinned: Vec<usize> = m
                    .entries
                    .iter()
                    .filter(|e| e.kind == Kind::Recorded)
                    .map(|e| e.bound)
                    .chain(m.retired.drain(..))
                    .collect();
                for g in pinned {
                    if !m.parked_generations.contains(&g) {
                        m.parked_generations.push(g);
                    }
                }
                m.entries.clear();
                m.eager_out = 0;
            }
            Op::CaptureFault => {
                graphed::__private::inject_capture_fault("injected by the lifecycle model");
                m.capture_fault = true;
            }
            Op::Recreate => {
                self.step = ModelStep::with_config(&self.dev, config(self.warmup)).unwrap();
                // The old holder's drop drains, which releases what it had parked.
                *m = Model {
                    capture_fault: m.capture_fault,
                    ..Model::default()
                };
            }
        }
        self.check()
    }

    fn check(&mut self) -> Result<(), String> {
        let s = self.step.stats();
        let m = &self.model;
        let len_of = |k: &(usize, usize, u32)| k.1;
        let cached = m
            .entries
            .iter()
            .filter(|e| e.kind == Kind::Recorded)
            .count();
        let got = (
            s.recordings,
            s.replays,
            s.eager_calls,
            s.evictions,
            s.cached,
            s.static_bytes,
            s.updates,
        );
        let want = (
            m.recordings,
            m.replays,
            m.eager_calls,
            m.evictions,
            cached,
            m.static_bytes(len_of),
            m.updates,
        );
        if got != want {
            return Err(format!(
                "stats (recordings, replays, eager, evictions, cached, static bytes, updates) {got:?}, model {want:?}"
            ));
        }
        let keys = self.step.holder().keys().len();
        if keys != m.entries.len() {
            return Err(format!("{keys} keys, model {}", m.entries.len()));
        }
        // Live state allocations: the current two, those a recording pins or retired, those
        // parked.
        let mut live: Vec<(usize, usize)> = (0..2).map(|s| (self.generation[s], LENS[s])).collect();
        let generation = |g: usize| *self.generations.iter().find(|(h, _)| *h == g).unwrap();
        let pinned = m
            .entries
            .iter()
            .filter(|e| e.kind == Kind::Recorded)
            .map(|e| generation(e.bound))
            .chain(m.retired.iter().map(|&g| generation(g)))
            .chain(
                self.generations
                    .iter()
                    .copied()
                    .filter(|(g, _)| m.parked_generations.contains(g)),
            );
        for g in pinned {
            if !live.contains(&g) {
                live.push(g);
            }
        }
        let states: u64 = live.iter().map(|(_, n)| 4 * *n as u64).sum();
        let bytes = self.dev.allocated_bytes();
        let want = states + m.static_bytes(len_of) + m.eager_out + m.parked;
        if bytes != want {
            return Err(format!("device holds {bytes} bytes, model {want}"));
        }
        let parked = self.step.holder().parked_bytes();
        if parked != m.parked {
            return Err(format!("holder parks {parked} bytes, model {}", m.parked));
        }
        let _ = self.len_of(&(0, 0, 0));
        Ok(())
    }
}

/// A drain of the holder succeeded: what failed clears parked, and old bindings, are
/// released.
fn unpark(m: &mut Model) {
    m.parked = 0;
    m.parked_generations.clear();
    m.retired.clear();
}

/// Records entry `i` in the model: evict least recently used recordings to make room, or
/// fall back to eager when a capture fault is pending on CUDA.
fn record(m: &mut Model, i: usize, kind: BackendKind) {
    if std::mem::take(&mut m.capture_fault) && kind == BackendKind::Cuda {
        m.entries[i].kind = Kind::Eager;
        return;
    }
    let key = m.entries[i].key;
    loop {
        let recorded: Vec<usize> = (0..m.entries.len())
            .filter(|&j| m.entries[j].kind == Kind::Recorded && m.entries[j].key != key)
            .collect();
        if recorded.len() < MAX_RECORDINGS {
            break;
        }
        let victim = *recorded
            .iter()
            .min_by_key(|&&j| m.entries[j].last_used)
            .unwrap();
        m.entries.remove(victim);
        m.evictions += 1;
        // The eviction drained the device first, releasing what a failed clear parked.
        unpark(m);
    }
    m.recordings += 1;
}

fn run(dev: &Device, warmup: u32, ops: &[Op]) -> Result<(), (usize, String)> {
    // Each sequence on a fresh device of its own, so its byte count is the sequence's alone.
    let dev = Device::open_new(dev.kind()).unwrap();
    let mut world = World::new(&dev, warmup);
    for (i, op) in ops.iter().enumerate() {
        world.apply(op).map_err(|e| (i, e))?;
    }
    // A capture fault still pending would leak into the next sequence's first capture.
    graphed::__private::clear_capture_fault();
    Ok(())
}

/// Drops operations one at a time while the sequence still fails.
fn shrink(dev: &Device, warmup: u32, mut ops: Vec<Op>) -> (Vec<Op>, String) {
    let mut last = run(dev, warmup, &ops).unwrap_err().1;
    let mut i = 0;
    while i < ops.len() {
        let mut fewer = ops.clone();
        fewer.remove(i);
        match run(dev, warmup, &fewer) {
            Err((_, e)) => {
                ops = fewer;
                last = e;
            }
            Ok(()) => i += 1,
        }
    }
    (ops, last)
}

#[test]
fn random_lifecycles_match_the_model_on_every_backend() {
    let mut r = rng("lifecycle_model");
    for dev in backends() {
        let default = if dev.kind() == BackendKind::Host {
            150
        } else {
            25
        };
        let sequences = std::env::var("GRAPHED_MODEL_SEQUENCES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default);
        let mut ops_run = 0;
        for _ in 0..sequences {
            let warmup = r.random_range(0..2);
            let len = r.random_range(5..30);
            let ops: Vec<Op> = (0..len).map(|_| random_op(&mut r)).collect();
            ops_run += ops.len();
            if let Err((at, e)) = run(&dev, warmup, &ops) {
                let (min, why) = shrink(&dev, warmup, ops[..=at].to_vec());
                panic!(
                    "on {}: warmup {warmup}: a sequence failed at op {at}: {e}\nminimal sequence ({} ops): {min:#?}\nfails with: {why}",
                    dev.kind(),
                    min.len()
                );
            }
        }
        eprintln!(
            "{}: {sequences} sequences, {ops_run} operations matched the model",
            dev.kind()
        );
    }
}
