//! Issue 17, memory: the recordings of one holder share one workspace arena, sized to the
//! largest (`Config::share_arena`), on every backend. Bytes are asserted as counts (the
//! holder's and the device's); results after alternating keys are compared bitwise with eager
//! runs, with a key that fills the whole arena with NaN run between them.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::steps::{axpb, chain};
use common::{bitwise_eq, floats, on_every_backend, rng};
use graphed::prelude::*;
use graphed::{Config, Device};

/// Makes the next body of this input length panic (after its first launch), once. A length
/// no other test uses: the tests of this file run at once.
static PANIC_AT_LEN: AtomicUsize = AtomicUsize::new(0);
const PANIC_LEN: usize = 77;

/// `poison == 0`: the chain of `common::steps::chain` (arena 3n words), panicking after a's
/// launch where [`PANIC_AT_LEN`] asks. `poison == 1`: a workspace of 3n words
/// filled with NaN, then a one-element output: every word of a 3n-word arena reads NaN after
/// it, so a replay that reads a stale word of the shared arena shows.
#[graphed]
fn keyed_step(cx: &mut Step, x: &Input<f32>, s: f32, #[key] poison: u32) -> Result<Output<f32>> {
    let n = x.len();
    if poison == 1 {
        let mut p = cx.workspace::<f32>(3 * n)?;
        cx.fill(&mut p, f32::NAN)?;
        let mut y = cx.output::<f32>(1)?;
        axpb::launch(cx, 1, s, x, &mut y)?;
        return Ok(y);
    }
    chain(cx, x, s, |n| {
        if n > 0
            && PANIC_AT_LEN
                .compare_exchange(n, 0, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            panic!("a body panics mid-recording");
        }
    })
}

/// A device of its own, so its byte counts see no other test's buffers.
fn fresh_device(dev: &Device) -> Device {
    Device::open_new(dev.kind()).unwrap()
}

/// A fresh device with its byte count before anything, a holder on it to replay, and one on
/// a device of its own to run eagerly (so the first device's bytes are the recordings').
fn counted(dev: &Device) -> (Device, u64, KeyedStep, KeyedStep) {
    let own = fresh_device(dev);
    let base = own.allocated_bytes();
    let rep = KeyedStep::new(&own).unwrap();
    let eag = KeyedStep::new(&fresh_device(dev)).unwrap();
    (own, base, rep, eag)
}

/// Key A: 256 elements (arena 3 KiB, input slot 1 KiB); key B: 96 (arena 1,152 B, input slot
/// 384 B); the poison key P of A's length fits A's arena exactly.
const A: usize = 256;
const B: usize = 96;

/// Bytes of a chain recording of `n` elements: its arena and its input slot.
fn arena_of(n: usize) -> u64 {
    12 * n as u64
}
fn slot_of(n: usize) -> u64 {
    4 * n as u64
}

/// Calls `rep` (replayed) and `eag` (eager) with the same fresh inputs and compares bitwise.
fn same(
    rep: &mut KeyedStep,
    eag: &mut KeyedStep,
    r: &mut impl rand::Rng,
    n: usize,
    poison: u32,
    what: &str,
) {
    let x = floats(r, n, -1.0, 1.0);
    let s = r.random_range(0.5f32..2.0);
    let y1 = rep.call(&x[..], s, poison).unwrap().to_host().unwrap();
    let y2 = eag.eager(&x[..], s, poison).unwrap().to_host().unwrap();
    assert!(
        y1.iter().all(|v| v.is_finite()),
        "{what}: replay read a poisoned word: {y1:?}"
    );
    assert!(bitwise_eq(&y1, &y2), "{what}: replay differs from eager");
}

#[test]
fn two_keys_share_one_arena_sized_to_the_larger_not_the_sum() {
    on_every_backend(|dev| {
        let dev = &fresh_device(dev);
        let mut r = rng("two_keys_share_one_arena");
        let base = dev.allocated_bytes();
        let mut rep = KeyedStep::new(dev).unwrap();
        let mut eag = KeyedStep::new(dev).unwrap();
        same(&mut rep, &mut eag, &mut r, A, 0, "A");
        same(&mut rep, &mut eag, &mut r, B, 0, "B");
        drop(eag);
        let s = rep.stats();
        assert_eq!((s.recordings, s.cached, s.arena_growths), (2, 2, 0));
        assert_eq!(s.arena_bytes, arena_of(A), "the arena is A's, the larger");
        let shared = arena_of(A) + slot_of(A) + slot_of(B);
        assert_eq!(s.static_bytes, shared, "one arena and the two input slots");
        assert_eq!(
            dev.allocated_bytes() - base,
            shared,
            "what the device holds"
        );
        // B's plan sits in A's arena: its own would be 1,152 B.
        assert_eq!(rep.plan().unwrap().arena_bytes(), arena_of(A));
        // Apart (each recording its own arena): the sum.
        let mut apart = KeyedStep::with_config(
            dev,
            Config {
                share_arena: false,
                ..Config::default()
            },
        )
        .unwrap();
        let before = dev.allocated_bytes();
        apart
            .call(&floats(&mut r, A, -1.0, 1.0)[..], 1.0, 0)
            .unwrap();
        apart
            .call(&floats(&mut r, B, -1.0, 1.0)[..], 1.0, 0)
            .unwrap();
        let sum = arena_of(A) + slot_of(A) + arena_of(B) + slot_of(B);
        assert_eq!(apart.stats().static_bytes, sum);
        assert_eq!(apart.stats().arena_bytes, 0, "nothing shared");
        assert_eq!(dev.allocated_bytes() - before, sum);
        drop(apart);
        rep.clear().unwrap();
        assert_eq!(dev.allocated_bytes(), base, "clear released the arena");
        assert_eq!(rep.stats().arena_bytes, 0);
    });
}

#[test]
fn alternating_keys_replay_bitwise_as_eager_with_the_arena_poisoned_between() {
    on_every_backend(|dev| {
        let mut r = rng("alternating_keys");
        let mut rep = KeyedStep::new(dev).unwrap();
        let mut eag = KeyedStep::new(dev).unwrap();
        // A, B, P (NaN over all of A's arena), then every order of them again.
        let order = [
            (A, 0),
            (B, 0),
            (A, 1),
            (A, 0),
            (A, 1),
            (B, 0),
            (A, 0),
            (B, 0),
            (A, 1),
            (B, 0),
            (A, 0),
            (A, 0),
        ];
        for (i, &(n, p)) in order.iter().enumerate() {
            same(
                &mut rep,
                &mut eag,
                &mut r,
                n,
                p,
                &format!("call {i} (n {n}, poison {p})"),
            );
        }
        let s = rep.stats();
        assert_eq!(
            (s.recordings, s.replays, s.cached, s.arena_growths),
            (3, order.len() as u64, 3, 0),
            "{s:?}"
        );
        assert_eq!(s.arena_bytes, arena_of(A));
        // P's output (one word) and input slot, beside A's and B's slots: one arena.
        assert_eq!(s.static_bytes, arena_of(A) + 2 * slot_of(A) + slot_of(B));
    });
}

#[test]
fn a_larger_key_grows_the_arena_and_the_smaller_records_again_into_it() {
    on_every_backend(|dev| {
        let mut r = rng("arena_growth");
        let (dev, base, mut rep, mut eag) = counted(dev);
        same(&mut rep, &mut eag, &mut r, B, 0, "B first");
        let s = rep.stats();
        assert_eq!(
            (s.arena_bytes, s.static_bytes),
            (arena_of(B), arena_of(B) + slot_of(B))
        );
        // A outgrows B's arena: A gets one of its size; B's recording (in the old one) goes.
        same(&mut rep, &mut eag, &mut r, A, 0, "A grows the arena");
        let s = rep.stats();
        assert_eq!(
            (s.recordings, s.cached, s.arena_growths, s.evictions),
            (2, 1, 1, 0),
            "{s:?}"
        );
        assert_eq!(
            (s.arena_bytes, s.static_bytes),
            (arena_of(A), arena_of(A) + slot_of(A))
        );
        assert_eq!(
            dev.allocated_bytes() - base,
            s.static_bytes,
            "B's arena was freed"
        );
        // B records again, into A's arena; from then on both replay.
        same(&mut rep, &mut eag, &mut r, B, 0, "B again");
        let s = rep.stats();
        assert_eq!(
            (s.recordings, s.cached, s.arena_growths),
            (3, 2, 1),
            "{s:?}"
        );
        let shared = arena_of(A) + slot_of(A) + slot_of(B);
        assert_eq!(s.static_bytes, shared);
        for i in 0..6 {
            let n = if i % 2 == 0 { A } else { B };
            same(
                &mut rep,
                &mut eag,
                &mut r,
                n,
                0,
                &format!("alternation {i}"),
            );
        }
        let s = rep.stats();
        assert_eq!(
            (s.recordings, s.arena_growths, s.replays),
            (3, 1, 9),
            "{s:?}"
        );
        assert_eq!(dev.allocated_bytes() - base, shared);
    });
}

#[test]
fn evicting_one_key_keeps_the_arena_and_evicting_the_last_frees_it() {
    on_every_backend(|dev| {
        let dev = &fresh_device(dev);
        let mut r = rng("arena_eviction");
        let base = dev.allocated_bytes();
        let mut rep = KeyedStep::new(dev).unwrap();
        rep.call(&floats(&mut r, A, -1.0, 1.0)[..], 1.0, 0).unwrap();
        rep.call(&floats(&mut r, B, -1.0, 1.0)[..], 1.0, 0).unwrap();
        // A goes; B still uses the arena A made, so it stays.
        let gone = rep.holder().evict_where(|k| k.inputs[0].1 == A).unwrap();
        assert_eq!(gone, 1);
        let s = rep.stats();
        assert_eq!((s.cached, s.arena_bytes), (1, arena_of(A)));
        assert_eq!(s.static_bytes, arena_of(A) + slot_of(B));
        assert_eq!(dev.allocated_bytes() - base, arena_of(A) + slot_of(B));
        // B still replays right out of it (against a fresh eager holder).
        let mut eag = KeyedStep::new(dev).unwrap();
        same(&mut rep, &mut eag, &mut r, B, 0, "B after A's eviction");
        drop(eag);
        // The last recording in it goes: so does the arena.
        rep.holder().evict_where(|_| true).unwrap();
        let s = rep.stats();
        assert_eq!((s.cached, s.arena_bytes, s.static_bytes), (0, 0, 0));
        assert_eq!(dev.allocated_bytes(), base);
        // The next recording makes a new one.
        rep.call(&floats(&mut r, B, -1.0, 1.0)[..], 1.0, 0).unwrap();
        assert_eq!(rep.stats().arena_bytes, arena_of(B));
    });
}

#[test]
fn a_failed_clear_parks_the_arena_and_the_next_recording_never_reuses_it() {
    on_every_backend(|dev| {
        let mut r = rng("arena_parked");
        let (dev, base, mut rep, mut eag) = counted(dev);
        same(&mut rep, &mut eag, &mut r, A, 0, "A");
        same(&mut rep, &mut eag, &mut r, B, 0, "B");
        rep.holder().__fail_next_drain();
        assert!(matches!(rep.clear(), Err(graphed::Error::Drain { .. })));
        let parked = arena_of(A) + slot_of(A) + slot_of(B);
        assert_eq!(
            rep.holder().parked_bytes(),
            parked,
            "the arena counted once"
        );
        assert_eq!(
            rep.stats().arena_bytes,
            0,
            "the parked arena is not the holder's"
        );
        // B records again into an arena of its own: the parked one may still be in use.
        same(&mut rep, &mut eag, &mut r, B, 0, "B after the failed clear");
        let held = dev.allocated_bytes() - base;
        assert_eq!(held, parked + arena_of(B) + slot_of(B));
        assert_eq!(rep.stats().arena_bytes, arena_of(B));
        // A grows it again (B records once more), and replays stay exact. The growth drains
        // (B's old recording may still run), and a drain that succeeds releases what was
        // parked.
        same(&mut rep, &mut eag, &mut r, A, 0, "A after the failed clear");
        assert_eq!(rep.holder().parked_bytes(), 0);
        same(&mut rep, &mut eag, &mut r, B, 0, "B into the grown arena");
        assert_eq!(rep.stats().arena_growths, 1);
        let one = arena_of(A) + slot_of(A) + slot_of(B);
        assert_eq!(dev.allocated_bytes() - base, one);
        rep.clear().unwrap();
        assert_eq!(dev.allocated_bytes(), base);
    });
}

#[test]
fn a_body_that_panics_mid_recording_leaves_the_shared_arena_as_it_was() {
    on_every_backend(|dev| {
        let mut r = rng("arena_panic");
        let mut rep = KeyedStep::new(dev).unwrap();
        let mut eag = KeyedStep::new(dev).unwrap();
        same(&mut rep, &mut eag, &mut r, A, 0, "A");
        let before = rep.stats();
        PANIC_AT_LEN.store(PANIC_LEN, Ordering::SeqCst);
        let x = floats(&mut r, PANIC_LEN, -1.0, 1.0);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = rep.call(&x[..], 1.0, 0);
        }));
        assert!(caught.is_err(), "the body was to panic");
        let s = rep.stats();
        assert_eq!(
            (s.recordings, s.cached, s.arena_bytes, s.static_bytes),
            (
                before.recordings,
                before.cached,
                before.arena_bytes,
                before.static_bytes
            )
        );
        // A replays exactly; the key that panicked, and B, record into A's arena.
        for (i, n) in [A, PANIC_LEN, A, B, PANIC_LEN].into_iter().enumerate() {
            same(
                &mut rep,
                &mut eag,
                &mut r,
                n,
                0,
                &format!("after the panic {i}"),
            );
        }
        let s = rep.stats();
        assert_eq!((s.recordings, s.arena_growths), (3, 0), "{s:?}");
        assert_eq!(s.arena_bytes, arena_of(A));
    });
}

#[test]
fn outputs_copied_out_keep_their_values_after_other_keys_overwrite_the_arena() {
    on_every_backend(|dev| {
        let mut r = rng("arena_copies");
        let mut rep = KeyedStep::new(dev).unwrap();
        let x = floats(&mut r, A, -1.0, 1.0);
        let out = rep.call(&x[..], 1.25, 0).unwrap();
        let (host, owned) = (out.to_host().unwrap(), out.to_buffer().unwrap());
        let kept = dev.upload(&vec![0.0f32; A]).unwrap();
        rep.call(&x[..], 1.25, 0).unwrap().copy_into(&kept).unwrap();
        // B and the poison key write all of the arena A's output sits in.
        rep.call(&floats(&mut r, B, -1.0, 1.0)[..], 0.75, 0)
            .unwrap();
        rep.call(&floats(&mut r, A, -1.0, 1.0)[..], 0.75, 1)
            .unwrap();
        assert!(
            bitwise_eq(&owned.to_host().unwrap(), &host),
            "to_buffer copy changed"
        );
        assert!(
            bitwise_eq(&kept.to_host().unwrap(), &host),
            "copy_into copy changed"
        );
        // A again: the same input gives the same bits.
        let again = rep.call(&x[..], 1.25, 0).unwrap().to_host().unwrap();
        assert!(bitwise_eq(&again, &host));
    });
}

#[test]
fn a_holder_moved_between_threads_and_two_holders_of_one_step_stay_exact() {
    on_every_backend(|dev| {
        let dev = &fresh_device(dev);
        let mut r = rng("arena_threads");
        let base = dev.allocated_bytes();
        let rep = std::sync::Mutex::new(KeyedStep::new(dev).unwrap());
        let other = std::sync::Mutex::new(KeyedStep::new(dev).unwrap());
        let mut eag = KeyedStep::new(dev).unwrap();
        let inputs: Vec<(usize, Vec<f32>, f32)> = (0..8)
            .map(|i| {
                let n = if i % 2 == 0 { A } else { B };
                (n, floats(&mut r, n, -1.0, 1.0), 0.5 + i as f32 / 8.0)
            })
            .collect();
        let want: Vec<Vec<f32>> = inputs
            .iter()
            .map(|(_, x, s)| eag.eager(&x[..], *s, 0).unwrap().to_host().unwrap())
            .collect();
        drop(eag);
        // Each call on another thread; the two holders interleaved, each with its own arena.
        for (i, (_, x, s)) in inputs.iter().enumerate() {
            let got = std::thread::scope(|t| {
                t.spawn(|| {
                    let holder = if i % 4 < 2 { &rep } else { &other };
                    let mut h = holder.lock().unwrap();
                    h.call(&x[..], *s, 0).unwrap().to_host().unwrap()
                })
                .join()
                .unwrap()
            });
            assert!(bitwise_eq(&got, &want[i]), "call {i} on its own thread");
        }
        let (a, b) = (rep.lock().unwrap().stats(), other.lock().unwrap().stats());
        let one = arena_of(A) + slot_of(A) + slot_of(B);
        assert_eq!((a.static_bytes, b.static_bytes), (one, one));
        assert_eq!(
            dev.allocated_bytes() - base,
            2 * one,
            "one arena per holder"
        );
    });
}

#[test]
fn an_empty_key_holds_no_arena_and_disturbs_none() {
    on_every_backend(|dev| {
        let mut r = rng("arena_empty");
        let mut rep = KeyedStep::new(dev).unwrap();
        let mut eag = KeyedStep::new(dev).unwrap();
        same(&mut rep, &mut eag, &mut r, A, 0, "A");
        let before = rep.stats();
        let empty: Vec<f32> = Vec::new();
        assert!(rep.call(&empty[..], 1.0, 0).unwrap().is_empty());
        let s = rep.stats();
        assert_eq!(s.arena_bytes, before.arena_bytes);
        assert_eq!(s.arena_growths, 0);
        for (i, n) in [A, 0, B, A, 0, B].into_iter().enumerate() {
            same(
                &mut rep,
                &mut eag,
                &mut r,
                n,
                0,
                &format!("with an empty key {i}"),
            );
        }
        assert_eq!(rep.stats().arena_bytes, arena_of(A));
    });
}

#[test]
fn the_byte_bound_counts_the_shared_arena_once() {
    on_every_backend(|dev| {
        let mut r = rng("arena_byte_bound");
        let shared = arena_of(A) + slot_of(A) + slot_of(B);
        let bounded = |max_bytes| {
            KeyedStep::with_config(
                dev,
                Config {
                    max_bytes,
                    ..Config::default()
                },
            )
            .unwrap()
        };
        let mut eag = KeyedStep::new(dev).unwrap();
        // Exactly the two keys' bytes with one arena: both stay (the sum would not fit).
        let mut rep = bounded(shared);
        for (i, n) in [A, B, A, B].into_iter().enumerate() {
            same(&mut rep, &mut eag, &mut r, n, 0, &format!("bounded {i}"));
        }
        let s = rep.stats();
        assert_eq!((s.recordings, s.cached, s.evictions), (2, 2, 0), "{s:?}");
        assert_eq!(s.static_bytes, shared);
        // A byte less: B evicts A, and keeps the arena A made (it is B's now, counted).
        let mut tight = bounded(shared - 1);
        same(&mut tight, &mut eag, &mut r, A, 0, "tight A");
        same(&mut tight, &mut eag, &mut r, B, 0, "tight B");
        let s = tight.stats();
        assert_eq!((s.recordings, s.cached, s.evictions), (2, 1, 1), "{s:?}");
        assert_eq!(s.static_bytes, arena_of(A) + slot_of(B));
        assert_eq!(s.arena_bytes, arena_of(A));
    });
}
