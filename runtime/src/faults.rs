//! Test-only hooks: fault injection (a failed, escaped or invalidated CUDA capture, a replay
//! that drifts, destroyed device memory) and mutation switches that break a safety mechanism
//! on purpose, so that graphed's own tests can show they catch it. Not a stable API.
//!
//! They exist only with the `testing` feature. Without it, the runtime's calls into this
//! module (on the capture and replay paths) reach constants — `false`, `None`, nothing — that
//! the compiler folds away, and the `inject_*` functions do not exist.

#[cfg(feature = "testing")]
pub use hooks::*;
#[cfg(not(feature = "testing"))]
pub use off::*;

#[cfg(feature = "testing")]
mod hooks {
    use std::cell::RefCell;

    thread_local! {
        static CAPTURE_FAULT: RefCell<Option<String>> = const { RefCell::new(None) };
    }

    /// Makes the next CUDA capture on this thread fail after issuing its ops (other backends
    /// have no capture and ignore it).
    pub fn inject_capture_fault(reason: &str) {
        CAPTURE_FAULT.with(|c| *c.borrow_mut() = Some(reason.to_string()));
    }

    /// Forgets a capture fault injected on this thread that no capture has taken yet.
    pub fn clear_capture_fault() {
        CAPTURE_FAULT.with(|c| c.borrow_mut().take());
    }

    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn take_capture_fault() -> Option<String> {
        CAPTURE_FAULT.with(|c| c.borrow_mut().take())
    }

    thread_local! {
        static CAPTURE_ESCAPE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// Makes the next CUDA capture on this thread issue its first launch on another stream, so
    /// that work escapes the capture (the census must catch it).
    pub fn inject_capture_escape() {
        CAPTURE_ESCAPE.with(|c| c.set(true));
    }

    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn take_capture_escape() -> bool {
        CAPTURE_ESCAPE.with(|c| c.replace(false))
    }

    /// Destroys the device memory behind a buffer while handles still exist (wgpu only: the next
    /// use is a validation error). Returns whether anything was destroyed.
    pub fn destroy_device_memory(view: &crate::buffer::RawView) -> bool {
        match &view.buf.mem {
            crate::backend::Memory::Wgpu(b) => {
                b.destroy();
                true
            }
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Whether the mutation `name` is switched on by `GRAPHED_MUTATION` (comma-separated), for
    /// checking that the tests catch a broken safety mechanism. Never set it in real use.
    pub fn mutation(name: &str) -> bool {
        std::env::var("GRAPHED_MUTATION").is_ok_and(|v| v.split(',').any(|m| m.trim() == name))
    }

    thread_local! {
        static HOST_ORDER: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
        static DROP_EDGES_INTO: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
    }

    /// Makes every host replay on this thread run its ops in a random topological order of
    /// the plan's dependency edges (seeded by `seed`, a new order each replay), or in plan
    /// order again (`None`): replay ≡ eager over many orders shows no needed edge is missing.
    pub fn shuffle_host_order(seed: Option<u64>) {
        HOST_ORDER.with(|c| c.set(seed.map(|s| s | 1)));
    }

    /// The state of the host replays' random order on this thread, advanced by `f`.
    pub(crate) fn host_order<T>(f: impl FnOnce(&mut u64) -> T) -> Option<T> {
        HOST_ORDER.with(|c| {
            let mut seed = c.get()?;
            let out = f(&mut seed);
            c.set(Some(seed));
            Some(out)
        })
    }

    /// Makes the next host lowering on this thread drop every dependency edge into op `op`
    /// (a mutation: the tests must see the difference).
    pub fn drop_host_edges_into(op: usize) {
        DROP_EDGES_INTO.with(|c| c.set(Some(op)));
    }

    pub(crate) fn take_dropped_edges() -> Option<usize> {
        DROP_EDGES_INTO.with(|c| c.take())
    }

    thread_local! {
        static CAPTURE_INVALIDATION: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    static CAPTURE_RETRIES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

    /// Makes the next CUDA capture on this thread be invalidated from another thread (a
    /// device-wide synchronisation while it captures), as other CUDA code in the process can.
    pub fn inject_capture_invalidation() {
        CAPTURE_INVALIDATION.with(|c| c.set(true));
    }

    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn take_capture_invalidation() -> bool {
        CAPTURE_INVALIDATION.with(|c| c.replace(false))
    }

    /// CUDA captures retried after being invalidated, in this process.
    pub fn capture_retries() -> u64 {
        CAPTURE_RETRIES.load(std::sync::atomic::Ordering::Relaxed)
    }

    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn note_capture_retry() {
        CAPTURE_RETRIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    thread_local! {
        static REPLAY_DRIFT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// Makes the next replay on this thread flip one bit of its first non-empty output after it
    /// ran, as a recording that drifted from eager would (for testing the drift sentinel).
    pub fn inject_replay_drift() {
        REPLAY_DRIFT.with(|c| c.set(true));
    }

    pub(crate) fn take_replay_drift() -> bool {
        REPLAY_DRIFT.with(|c| c.replace(false))
    }

    thread_local! {
        static ALLOC_FAILURE: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
    }

    /// Makes a step's static-slot allocation on this thread (an output, workspace or input slot,
    /// made while a key records or runs eagerly) fail with `Error::OutOfMemory`, as a full device
    /// would: the one after `after` more slot allocations succeed.
    pub fn inject_slot_alloc_failure(after: u32) {
        ALLOC_FAILURE.with(|c| c.set(Some(after)));
    }

    /// Forgets an injected slot-allocation failure that no allocation has taken yet.
    pub fn clear_slot_alloc_failure() {
        ALLOC_FAILURE.with(|c| c.set(None));
    }

    /// Whether an injected allocation failure applies to this allocation (only slots take it).
    pub(crate) fn take_alloc_failure(is_slot: bool) -> bool {
        if !is_slot {
            return false;
        }
        ALLOC_FAILURE.with(|c| match c.get() {
            Some(0) => {
                c.set(None);
                true
            }
            Some(n) => {
                c.set(Some(n - 1));
                false
            }
            None => false,
        })
    }
}

/// The hooks as the runtime sees them without the `testing` feature: never set.
#[cfg(not(feature = "testing"))]
mod off {
    #[inline(always)]
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn take_capture_fault() -> Option<String> {
        None
    }

    #[inline(always)]
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn take_capture_escape() -> bool {
        false
    }

    #[inline(always)]
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn take_capture_invalidation() -> bool {
        false
    }

    #[inline(always)]
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn note_capture_retry() {}

    #[inline(always)]
    pub(crate) fn take_replay_drift() -> bool {
        false
    }

    #[inline(always)]
    pub(crate) fn take_alloc_failure(_is_slot: bool) -> bool {
        false
    }

    /// No mutation is ever on without the `testing` feature.
    #[inline(always)]
    pub fn mutation(_name: &str) -> bool {
        false
    }
}
