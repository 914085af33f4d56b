//! The lifecycle every backend shares: capture keys, record → lower → replay, recapture,
//! bounded LRU eviction, eager fallback with reasons, warm-up, and drain before release.

use std::collections::HashSet;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

use crate::backend::Recording;
use crate::buffer::{Buffer, RawBuffer, RawView};
use crate::device::Device;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::kernel::ErasedScalar;
use crate::plan::Plan;
use crate::step::Step;
use std::sync::Arc;

/// What a holder does when a key cannot be recorded and would run eagerly (a body that reads
/// device memory back, allocates, or calls another step, a lowering the backend refuses).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fallback {
    /// Run eagerly, and say so once per holder and key: as a `tracing` warning where a
    /// subscriber is installed, on stderr where none is.
    #[default]
    Warn,
    /// Refuse: the call returns [`Error::NotCapturable`] with the reason, and nothing runs.
    Error,
    /// Run eagerly without a word (the reason is still in [`Stats::eager_reasons`]).
    Silent,
}

impl Fallback {
    /// The policy in force: `GRAPHED_STRICT=1` (or `true`, `yes`, `on`) makes every fallback
    /// an error, whatever the holder's [`Config`] says, so a CI run can assert that every step
    /// was recorded.
    fn effective(self) -> Fallback {
        static STRICT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let strict = *STRICT.get_or_init(|| {
            matches!(
                std::env::var("GRAPHED_STRICT").as_deref().map(str::trim),
                Ok("1" | "true" | "yes" | "on")
            )
        });
        if strict {
            Fallback::Error
        } else {
            self
        }
    }
}

/// Bounds and options of a holder's cache.
#[derive(Clone, Debug)]
pub struct Config {
    /// Most recordings kept (least recently used evicted first).
    pub max_recordings: usize,
    /// Most static bytes kept across recordings.
    pub max_bytes: u64,
    /// Eager runs of a new key before it is recorded (they are real steps). Default 0.
    pub warmup: u32,
    /// When false, an input whose length differs from the recorded one is an error instead
    /// of a new key.
    pub recapture_on_shape_change: bool,
    /// Most keys kept that are not recorded (running eagerly, or warming up), least
    /// recently used forgotten first, with their reasons: a body that never records does
    /// not grow the holder without bound.
    pub max_unrecorded_keys: usize,
    /// What happens when a key cannot be recorded (see [`Fallback`]).
    pub fallback: Fallback,
    /// The drift sentinel: every this many replays of a key (0: never, the default), the
    /// step also runs eagerly from the same starting state and the two are compared bitwise
    /// (outputs and every state buffer). A mismatch is [`Error::Drift`] naming the first
    /// differing buffer and index, and that key runs eagerly from then on. The step is applied
    /// once: the state is put back before the eager run, whose results are kept.
    pub sentinel_every: u32,
    /// Liveness packing: a recording's workspaces and outputs share one arena where their
    /// live ranges (in op order) are disjoint. Default true; false keeps one allocation per
    /// buffer (to compare, as the bench does).
    pub pack_workspaces: bool,
    /// The recordings of one holder share one workspace arena, sized to the largest
    /// (default true; needs [`Config::pack_workspaces`]). They never run at once: every
    /// replay of a holder goes to the device's one stream or queue in call order, and the
    /// outputs a call returns borrow the holder until the next call. A recording that
    /// outgrows the arena gets a larger one, and the recordings placed in the smaller one are
    /// dropped (after a drain) and record again, into the larger one, on their next call
    /// ([`Stats::arena_growths`]). False gives each recording an arena of its own.
    pub share_arena: bool,
    /// Device inputs are bound by address (default true); false copies them into the
    /// recording's input slots before each replay.
    pub bind_device_inputs: bool,
    /// State of another allocation with the same shape updates the recording (default true);
    /// false records it again in place (counted as a recording).
    pub update_states: bool,
    /// Ops that do not conflict (neither writes what the other reads or writes) may run
    /// concurrently: the CUDA graph is built from the plan's dependency edges
    /// ([`Plan::edges`](crate::Plan::edges)) instead of one chain. Default true; false keeps
    /// every op after the one before (to compare, as the bench does). wgpu and host run ops in
    /// order either way.
    pub concurrent_ops: bool,
    /// Programmatic dependent launch (CUDA on Hopper, sm_90 and later, with
    /// [`Config::concurrent_ops`]): which kernels may launch before their one predecessor
    /// kernel finished, waiting for it (`griddepcontrol.wait`) before touching memory, which
    /// hides the launch latency between them. Default [`Programmatic::Chains`]; elsewhere it
    /// changes nothing.
    pub programmatic_launch: Programmatic,
}

/// Where a CUDA graph's kernel-to-kernel edges are programmatic
/// ([`Config::programmatic_launch`]). A programmatic edge lets the next kernel's workgroups
/// be scheduled while its predecessor still runs; they wait for it before their first memory
/// access, so results are the same bits either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Programmatic {
    /// No programmatic edges.
    Off,
    /// An edge is programmatic where it is a link of a chain — the kernel's one predecessor
    /// is a kernel whose one successor it is — and both kernels leave at least half of the
    /// multiprocessors free (at most half as many workgroups). Measured on the H200
    /// (BENCHMARKS.md, session of 2026-12-02): the sampler's chains of small kernels replay
    /// 8–9% faster with programmatic edges; with edges at or into kernels that fill the GPU
    /// the MLP steps ran up to 5% (chain links after up to one wave of workgroups) and 14%
    /// (every edge) slower than without.
    #[default]
    Chains,
    /// Every kernel whose one predecessor is another kernel (to compare).
    On,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_recordings: 16,
            max_bytes: 4 << 30,
            warmup: 0,
            recapture_on_shape_change: true,
            max_unrecorded_keys: 64,
            fallback: Fallback::Warn,
            sentinel_every: 0,
            pack_workspaces: true,
            share_arena: true,
            bind_device_inputs: true,
            update_states: true,
            concurrent_ops: true,
            programmatic_launch: Programmatic::Chains,
        }
    }
}

/// What identifies a recording: input shapes and dtypes, state shapes (dtype, length, and
/// which state buffers share an allocation), structural arguments and an optional user key.
/// Backend and device are fixed per holder. Which allocation a state or a device input is
/// does not select a recording: another allocation of the same shape re-points the
/// recording (an update, a rebind) instead of recording a new one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CaptureKey {
    /// (dtype, length) of each input.
    pub inputs: Vec<(DType, usize)>,
    /// The shape of each state buffer.
    pub states: Vec<StateKey>,
    /// Structural (`#[key]`) arguments, as bits.
    pub structural: Vec<u64>,
    /// The user's extra key ([`Graphed::set_extra_key`]).
    pub extra: u64,
}

/// The shape of one state buffer in a [`CaptureKey`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StateKey {
    /// Element type.
    pub dtype: DType,
    /// Length in elements.
    pub len: usize,
    /// The first earlier state buffer of the same allocation, and this one's byte offset from
    /// it: states that share memory are another key than states that do not.
    pub shares: Option<(usize, i64)>,
}

/// The [`StateKey`]s of a call's state views.
fn state_keys(states: &[RawView]) -> impl Iterator<Item = StateKey> + '_ {
    states.iter().enumerate().map(|(i, v)| StateKey {
        dtype: v.dtype,
        len: v.len,
        shares: states[..i]
            .iter()
            .position(|u| u.buf.id == v.buf.id)
            .map(|j| (j, v.byte_span().0 as i64 - states[j].byte_span().0 as i64)),
    })
}

/// Whether `v` is bound exactly as `bound` (same allocation and offset).
fn same_binding(v: &RawView, bound: &RawView) -> bool {
    v.buf.id == bound.buf.id && v.offset == bound.offset
}

/// Counters of a holder.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Plans recorded and lowered.
    pub recordings: u64,
    /// Replays.
    pub replays: u64,
    /// Eager runs (fallbacks, warm-up and `eager()` calls).
    pub eager_calls: u64,
    /// Why keys fell back to eager, one entry per key.
    pub eager_reasons: Vec<String>,
    /// Recordings evicted by the cache bounds.
    pub evictions: u64,
    /// Time to run the body in record mode, last recording.
    pub last_record: Option<Duration>,
    /// Time to lower the plan to the backend, last recording.
    pub last_lower: Option<Duration>,
    /// Static bytes held by cached recordings, an arena they share counted once.
    pub static_bytes: u64,
    /// Bytes of the workspace arena the holder's recordings share (0: none yet); included in
    /// `static_bytes`.
    pub arena_bytes: u64,
    /// Times a recording outgrew the shared arena: the recordings placed in the old one
    /// were dropped, to record again into the new one on their next call.
    pub arena_growths: u64,
    /// Recordings currently cached.
    pub cached: usize,
    /// Kernel launches per replay of the last recording.
    pub launches_per_replay: usize,
    /// Replays the drift sentinel compared with an eager run and found equal.
    pub sentinel_checks: u64,
    /// Recordings updated in place because a state buffer is another allocation of the same
    /// shape (not counted in `recordings`).
    pub updates: u64,
    /// Input bindings re-pointed: a device input bound by address, another buffer than the
    /// recording's last replay read (or host data after a device buffer, back to its slot).
    pub rebinds: u64,
}

/// An input argument of a call.
pub enum InputArg<'a> {
    /// Host data (its bytes, as the host lays out a slice of the type), uploaded into the
    /// static slot.
    Host(DType, &'a [u8]),
    /// A device buffer, bound by address (copied into a static slot only where the recording
    /// cannot re-point it, or for a 16-bit view that starts or ends inside a word).
    Device(RawView),
}

impl InputArg<'_> {
    fn shape(&self) -> (DType, usize) {
        match self {
            InputArg::Host(d, b) => (*d, b.len() / d.size()),
            InputArg::Device(v) => (v.dtype, v.len),
        }
    }
}

/// Host data or a device buffer passed as a step input.
pub trait AsInput<T: Element> {
    /// The argument.
    fn as_input(&self) -> InputArg<'_>;
}

impl<T: Element> AsInput<T> for [T] {
    fn as_input(&self) -> InputArg<'_> {
        InputArg::Host(T::DTYPE, bytemuck::cast_slice(self))
    }
}
impl<T: Element> AsInput<T> for Vec<T> {
    fn as_input(&self) -> InputArg<'_> {
        InputArg::Host(T::DTYPE, bytemuck::cast_slice(self))
    }
}
impl<T: Element, const N: usize> AsInput<T> for [T; N] {
    fn as_input(&self) -> InputArg<'_> {
        InputArg::Host(T::DTYPE, bytemuck::cast_slice(self))
    }
}
impl<T: Element> AsInput<T> for Buffer<T> {
    fn as_input(&self) -> InputArg<'_> {
        InputArg::Device(self.raw_view())
    }
}

/// The arguments of one call, erased by the generated code.
pub struct CallArgs<'a> {
    /// Input parameter names (for errors).
    pub input_names: &'static [&'static str],
    /// The name of each state buffer (for errors): the parameter's, or the field's.
    pub state_names: Vec<&'static str>,
    /// Inputs in order.
    pub inputs: Vec<InputArg<'a>>,
    /// State buffers in order.
    pub states: Vec<RawView>,
    /// Per-step scalars in order.
    pub scalars: Vec<ErasedScalar>,
    /// Structural arguments in order.
    pub structural: Vec<u64>,
}

/// A step body as the holder runs it: inputs' views in, outputs' views out.
pub type Body<'b> = dyn FnMut(&mut Step, &[RawView]) -> Result<Vec<RawView>> + 'b;

struct Recorded {
    plan: Plan,
    recording: Box<dyn Recording>,
    /// The input slots (host data is written there); none for an input recorded over the
    /// caller's device buffer until host data comes.
    inputs: Vec<Option<RawView>>,
    /// What each port (input, then state) is bound to now.
    bound: Vec<RawView>,
    sites: crate::rebind::Sites,
    /// The dependency graph the recording was lowered with: a re-pointing that needs an
    /// order it lacks (a port re-pointed onto memory other ops use) records anew.
    dag: crate::dag::Dag,
    outputs: Vec<RawView>,
    /// Where each per-step scalar goes: `(launch, word)` per slot, and the bits that slot
    /// last replayed with (none before the first replay): a replay patches only the argument
    /// words of scalars that changed, so its host cost follows the scalars that change, not
    /// the launches that read them.
    scalar_uses: Vec<Vec<(usize, usize)>>,
    scalar_last: Vec<Option<u32>>,
    scratch: Vec<(usize, usize, u32)>,
    bytes: u64,
    /// Replays of this recording.
    replays: u64,
    /// Inputs whose device buffers are copied into the slot, because this backend could
    /// not re-point what reads the input (CUDA: a copy or a library call reads it).
    copied: Vec<bool>,
}

impl Recorded {
    /// Re-points `ports` (index, new view) in the plan and the backend recording, all or
    /// none: false where the sites or the backend refuse (then nothing changed). The old
    /// bindings go to `retired`: queued replays may still use them.
    fn repoint(&mut self, ports: &[(usize, RawView)], retired: &mut Vec<RawView>) -> Result<bool> {
        let (mut ops, mut words) = (Vec::new(), Vec::new());
        let mut done = Vec::new();
        let mut ok = true;
        for (port, want) in ports {
            if !self
                .sites
                .repoint(&mut self.plan, *port, want, &mut ops, &mut words)
            {
                ok = false;
                break;
            }
            done.push(*port);
        }
        // Re-pointed onto an allocation other ops of the plan also bind, the ports may now
        // conflict with ops the lowered graph leaves unordered.
        if ok
            && self.sites.shares_memory(&self.plan, ports)
            && !self.dag.orders_all_of(&self.plan.dag())
        {
            ok = false;
        }
        let result = if ok {
            self.recording.rebind(&self.plan, &ops, &words)
        } else {
            Ok(())
        };
        if !ok || result.is_err() {
            let (mut o, mut w) = (Vec::new(), Vec::new());
            for port in done {
                let old = self.bound[port].clone();
                self.sites
                    .repoint(&mut self.plan, port, &old, &mut o, &mut w);
            }
            return match result {
                Ok(()) | Err(Error::Lower { .. }) => Ok(false),
                Err(e) => Err(e),
            };
        }
        let pairs: Vec<(u64, &RawView)> = ports
            .iter()
            .map(|(port, want)| (self.bound[*port].buf.id, want))
            .collect();
        crate::rebind::rename(&mut self.plan, &pairs);
        for (port, want) in ports {
            retired.push(std::mem::replace(&mut self.bound[*port], want.clone()));
        }
        Ok(true)
    }
}

/// What binding a call's state and inputs to a recording came to.
enum Bind {
    Bound,
    /// The recording cannot be re-pointed so: record the key again, with input slots for
    /// device inputs where `slots` (their readers cannot be re-pointed).
    Record {
        slots: bool,
    },
}

/// Old bindings kept before a drain releases them.
const RETIRED_MAX: usize = 32;

enum State {
    Recorded(Box<Recorded>),
    Eager,
    Warming(u32),
}

struct Entry {
    key: CaptureKey,
    state: State,
    last_used: u64,
}

/// The per-step-function holder that `#[graphed]` generates a wrapper around: one cache of
/// recordings per device, keyed by [`CaptureKey`].
pub struct Graphed {
    device: Device,
    /// This holder's identity: the owner of the static slots its runs allocate.
    id: u64,
    name: &'static str,
    config: Config,
    entries: Vec<Entry>,
    stats: Stats,
    clock: u64,
    extra_key: u64,
    eager_outputs: Vec<RawView>,
    warned: HashSet<CaptureKey>,
    fail_next_drain: bool,
    /// Buffers recordings were bound to before a rebind or update: replays already queued
    /// may still use them, so they are released by the next drain (one is made when more
    /// than [`RETIRED_MAX`] wait).
    retired: Vec<RawView>,
    /// The workspace arena the recordings share ([`Config::share_arena`]); it lives as long
    /// as a recording placed in it. Reset by `clear()`: memory a failed drain parked is never
    /// reused.
    arena: std::sync::Weak<RawBuffer>,
    /// Recordings and outputs of a `clear()` whose drain failed: the device may still use
    /// their memory, so they are kept (never freed, never reused) until a later drain of this
    /// holder succeeds, and released then.
    /// (Old bindings, the third, are user buffers: kept, not counted in `parked_bytes`.)
    parked: Vec<(Vec<Entry>, Vec<RawView>, Vec<RawView>)>,
    /// The ranks this holder's steps share collectives with: they agree on every recording
    /// and are drained with this device.
    #[cfg(feature = "nccl")]
    ranks: crate::dist::Ranks,
}

impl Graphed {
    /// A holder for step `name` on `device`.
    pub fn new(device: &Device, name: &'static str) -> Graphed {
        Graphed::with_config(device, name, Config::default())
    }

    /// A holder with explicit bounds and options.
    pub fn with_config(device: &Device, name: &'static str, config: Config) -> Graphed {
        static NEXT_HOLDER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Graphed {
            device: device.clone(),
            id: NEXT_HOLDER.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            name,
            config,
            entries: Vec::new(),
            stats: Stats::default(),
            clock: 0,
            extra_key: 0,
            eager_outputs: Vec::new(),
            warned: HashSet::new(),
            fail_next_drain: false,
            retired: Vec::new(),
            arena: std::sync::Weak::new(),
            parked: Vec::new(),
            #[cfg(feature = "nccl")]
            ranks: crate::dist::Ranks::default(),
        }
    }

    /// Takes part in `comm`'s ranks from now on: every recording's outcome is agreed with the
    /// other ranks (all replay, or all run eagerly), and every rank of this process is drained
    /// before this holder releases anything. A holder joins by itself when a recorded body
    /// first all-reduces over `comm`; join explicitly when a body could fail before that.
    #[cfg(feature = "nccl")]
    pub fn join(&mut self, comm: &crate::dist::Communicator) {
        self.ranks.join(comm);
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The options.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Changes the options (bounds apply from the next recording).
    pub fn set_config(&mut self, config: Config) {
        self.config = config;
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        let mut s = self.stats.clone();
        s.cached = self
            .entries
            .iter()
            .filter(|e| matches!(e.state, State::Recorded(_)))
            .count();
        s.static_bytes = self.static_bytes();
        s.arena_bytes = self.arena.upgrade().map_or(0, |a| a.bytes());
        s
    }

    fn static_bytes(&self) -> u64 {
        recorded_bytes(&self.entries)
    }

    /// Part of every key from now on (e.g. a model version after a weight swap).
    pub fn set_extra_key(&mut self, key: u64) {
        self.extra_key = key;
    }

    /// The plan of the most recently used recording.
    pub fn last_plan(&self) -> Option<&Plan> {
        self.entries
            .iter()
            .filter_map(|e| {
                if let State::Recorded(r) = &e.state {
                    Some((e.last_used, &r.plan))
                } else {
                    None
                }
            })
            .max_by_key(|(t, _)| *t)
            .map(|(_, p)| p)
    }

    /// Writes the backend's own graph of the most recently used recording as DOT (CUDA:
    /// the instantiated CUDA graph, via `cuGraphDebugDotPrint`), next to the plan's
    /// [`Plan::to_dot`]. Returns `false` on backends without one.
    pub fn write_backend_dot(&self, path: &std::path::Path) -> Result<bool> {
        let latest = self
            .entries
            .iter()
            .filter_map(|e| {
                if let State::Recorded(r) = &e.state {
                    Some((e.last_used, r))
                } else {
                    None
                }
            })
            .max_by_key(|(t, _)| *t);
        match latest {
            Some((_, r)) => r.recording.debug_dot(path),
            None => Ok(false),
        }
    }

    /// The keys currently cached.
    pub fn keys(&self) -> Vec<CaptureKey> {
        self.entries.iter().map(|e| e.key.clone()).collect()
    }

    fn key(&self, args: &CallArgs<'_>) -> CaptureKey {
        CaptureKey {
            inputs: args.inputs.iter().map(InputArg::shape).collect(),
            states: state_keys(&args.states).collect(),
            structural: args.structural.clone(),
            extra: self.extra_key,
        }
    }

    /// Whether entry `i` is this call's key.
    fn matches(&self, i: usize, args: &CallArgs<'_>) -> bool {
        let e = &self.entries[i];
        let bound = match &e.state {
            State::Recorded(r) => Some(&r.bound[r.inputs.len()..]),
            _ => None,
        };
        self.is_key_of(&e.key, args, bound)
    }

    /// Whether `key` is this call's key, compared in place: the hot path of every replay
    /// builds no key. `bound`: the state views the entry's recording is bound to, which
    /// have the key's sharing pattern (so states bound as they are need no pattern check).
    fn is_key_of(&self, key: &CaptureKey, args: &CallArgs<'_>, bound: Option<&[RawView]>) -> bool {
        key.extra == self.extra_key
            && key.structural == args.structural
            && key.inputs.len() == args.inputs.len()
            && key
                .inputs
                .iter()
                .zip(&args.inputs)
                .all(|(k, i)| *k == i.shape())
            && key.states.len() == args.states.len()
            && match bound {
                Some(b) if args.states.iter().zip(b).all(|(v, u)| same_binding(v, u)) => key
                    .states
                    .iter()
                    .zip(&args.states)
                    .all(|(k, v)| k.dtype == v.dtype && k.len == v.len),
                _ => key.states.iter().copied().eq(state_keys(&args.states)),
            }
    }

    fn check_inputs(&self, args: &CallArgs<'_>) -> Result<()> {
        // A step's work inside another step's recording would run once and never on replay.
        if crate::device::thread_records() {
            return Err(Error::NestedStep(self.name));
        }
        for v in &args.states {
            crate::device::check_slot(v, "a state argument")?;
        }
        for (i, input) in args.inputs.iter().enumerate() {
            if let InputArg::Device(v) = input {
                let name = || args.input_names.get(i).unwrap_or(&"?").to_string();
                crate::device::check_slot(v, "an input argument")?;
                if v.buf.device.id() != self.device.id() {
                    return Err(Error::InputMismatch {
                        input: name(),
                        reason: format!(
                            "it lives on another device ({}), the step runs on {}",
                            v.buf.device.kind(),
                            self.device.kind()
                        ),
                    });
                }
                // Replay reads the input from its slot and eager from the buffer itself: a
                // state sharing its memory would make the two differ.
                if let Some(j) = args.states.iter().position(|s| s.overlaps(v)) {
                    return Err(Error::InputMismatch {
                        input: name(),
                        reason: format!(
                            "it shares memory with state `{}`; pass a copy (`to_buffer()`/`copy_from`) or read the state inside the step",
                            args.state_names.get(j).unwrap_or(&"?")
                        ),
                    });
                }
            }
        }
        if !self.config.recapture_on_shape_change {
            if let Some(e) = self
                .entries
                .iter()
                .find(|e| matches!(e.state, State::Recorded(_)))
            {
                for (i, (input, want)) in args.inputs.iter().zip(&e.key.inputs).enumerate() {
                    let got = input.shape();
                    if got != *want {
                        return Err(Error::InputMismatch {
                            input: args.input_names.get(i).unwrap_or(&"?").to_string(),
                            reason: format!(
                                "the recording's slot holds {} {}, got {} {}",
                                want.1,
                                want.0.name(),
                                got.1,
                                got.0.name()
                            ),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// Runs one step: replays the recording for this call's key, recording it first when the
    /// key is new, or runs eagerly where the key cannot be recorded. Returns the outputs.
    pub fn call(&mut self, args: CallArgs<'_>, body: &mut Body<'_>) -> Result<&[RawView]> {
        self.check_inputs(&args)?;
        self.clock += 1;
        let clock = self.clock;
        let idx = match (0..self.entries.len()).find(|&i| self.matches(i, &args)) {
            Some(i) => i,
            None => {
                let key = self.key(&args);
                let state = if self.config.warmup > 0 {
                    State::Warming(0)
                } else {
                    self.record(&key, &args, body, false)?
                };
                if !matches!(state, State::Recorded(_)) {
                    self.forget_unrecorded(self.config.max_unrecorded_keys.max(1) - 1);
                }
                self.entries.push(Entry {
                    key: key.clone(),
                    state,
                    last_used: clock,
                });
                self.entries.len() - 1
            }
        };
        self.entries[idx].last_used = clock;
        let mut idx = idx;
        if let State::Warming(n) = &mut self.entries[idx].state {
            if *n < self.config.warmup {
                *n += 1;
                return self.run_eager(&args, body);
            }
            let key = self.entries[idx].key.clone();
            let state = self.record(&key, &args, body, false)?;
            // Recording may have evicted other entries to make room: find this one again.
            idx = self
                .entries
                .iter()
                .position(|e| e.key == key)
                .expect("a warming entry is never evicted by its own recording");
            self.entries[idx].state = state;
        }
        if !matches!(self.entries[idx].state, State::Recorded(_)) {
            return self.run_eager(&args, body);
        }
        if let Bind::Record { slots } = self.bind(idx, &args)? {
            // State or an input this recording cannot be re-pointed to: record this key
            // again (after the old recording's queued replays are done).
            self.drain()?;
            let key = self.entries[idx].key.clone();
            self.entries[idx].state = State::Eager;
            let state = self.record(&key, &args, body, slots)?;
            idx = self
                .entries
                .iter()
                .position(|e| e.key == key)
                .expect("an entry is never evicted by its own recording");
            self.entries[idx].state = state;
            if !matches!(self.entries[idx].state, State::Recorded(_)) {
                return self.run_eager(&args, body);
            }
            if let Bind::Record { .. } = self.bind(idx, &args)? {
                return Err(Error::Lower {
                    backend: self.device.kind().name(),
                    reason: "a fresh recording refused its own state bindings".into(),
                });
            }
        }
        match &mut self.entries[idx].state {
            State::Recorded(rec) => {
                let every = u64::from(self.config.sentinel_every);
                let watched = every > 0 && (rec.replays + 1) % every == 0;
                let before = if watched {
                    Some(read_all(&self.device, &args.states)?)
                } else {
                    None
                };
                let copies = upload_inputs(&self.device, &rec.inputs, &rec.copied, &args.inputs)?;
                let copies: Vec<(&RawView, &RawView)> =
                    copies.iter().map(|(s, d)| (s, d)).collect();
                rec.scratch.clear();
                for ((uses, last), scalar) in rec
                    .scalar_uses
                    .iter()
                    .zip(&mut rec.scalar_last)
                    .zip(&args.scalars)
                {
                    let bits = scalar.bits();
                    if *last != Some(bits) {
                        *last = Some(bits);
                        rec.scratch
                            .extend(uses.iter().map(|&(launch, word)| (launch, word, bits)));
                    }
                }
                // The backend keeps what it was last given; a failed replay forgets the cache
                // (its words may or may not have been written), so the next one sends all.
                let replayed =
                    rec.recording
                        .replay_with_inputs(self.device.backend(), &copies, &rec.scratch);
                if let Err(e) = replayed {
                    rec.scalar_last.iter_mut().for_each(|b| *b = None);
                    return Err(e);
                }
                rec.replays += 1;
                self.stats.replays += 1;
                if crate::faults::take_replay_drift() {
                    if let Some(out) = rec.outputs.iter().find(|o| o.len > 0) {
                        let out = out.covering_words();
                        let mut w = self.device.backend().read(&out)?;
                        w[0] ^= 1;
                        self.device.backend().write(&out, &w)?;
                    }
                }
                if let Some(before) = before {
                    return self.sentinel(idx, before, &args, body);
                }
            }
            _ => unreachable!("checked above"),
        }
        match &self.entries[idx].state {
            State::Recorded(rec) => Ok(&rec.outputs),
            _ => unreachable!("checked above"),
        }
    }

    /// Binds the recording of entry `idx` to this call's state and device inputs: state of
    /// another allocation updates it (false: it cannot be, record anew), a device input is
    /// bound by address (or copied where this recording cannot re-point it).
    fn bind(&mut self, idx: usize, args: &CallArgs<'_>) -> Result<Bind> {
        let State::Recorded(rec) = &mut self.entries[idx].state else {
            unreachable!("bound only when recorded")
        };
        let ni = rec.inputs.len();
        let mut retired = Vec::new();
        let states: Vec<(usize, RawView)> = args
            .states
            .iter()
            .enumerate()
            .filter(|(i, v)| !same_binding(v, &rec.bound[ni + i]))
            .map(|(i, v)| (ni + i, v.clone()))
            .collect();
        if !states.is_empty() {
            if !self.config.update_states
                || !rec.sites.states_rebindable
                || !rec.repoint(&states, &mut retired)?
            {
                return Ok(Bind::Record { slots: false });
            }
            self.stats.updates += 1;
        }
        for (port, input) in args.inputs.iter().enumerate() {
            if !self.config.bind_device_inputs {
                rec.copied[port] = true;
            }
            if rec.copied[port] {
                continue;
            }
            let want = match input {
                InputArg::Device(v) if v.as_words().is_some() => v.clone(),
                // Host data, or a 16-bit view off a word boundary (copied by `upload_inputs`).
                _ => match &rec.inputs[port] {
                    Some(slot) => slot.clone(),
                    None => {
                        // For an input recorded over a device buffer: its slot now.
                        let (dtype, len) = input.shape();
                        let slot = RawView {
                            buf: self.device.alloc_slot(dtype, len, (self.id, self.name))?,
                            offset: 0,
                            len,
                            dtype,
                        };
                        rec.plan.input_slot_bytes += slot.buf.bytes();
                        rec.bytes = rec.plan.static_bytes();
                        rec.inputs[port] = Some(slot.clone());
                        slot
                    }
                },
            };
            if same_binding(&want, &rec.bound[port]) {
                continue;
            }
            if rec.repoint(&[(port, want)], &mut retired)? {
                self.stats.rebinds += 1;
            } else if rec.inputs[port]
                .as_ref()
                .is_some_and(|slot| same_binding(slot, &rec.bound[port]))
            {
                rec.copied[port] = true;
            } else {
                // Bound to a caller's buffer it cannot leave: record with a slot to copy into.
                self.retired.append(&mut retired);
                return Ok(Bind::Record { slots: true });
            }
        }
        self.retired.append(&mut retired);
        if self.retired.len() > RETIRED_MAX {
            self.drain()?;
        }
        Ok(Bind::Bound)
    }

    /// The drift sentinel's check of the replay just made for entry `idx` (see
    /// [`Config::sentinel_every`]): puts the state back as it was before (`before`), runs the
    /// body eagerly, and compares outputs and state bitwise.
    fn sentinel(
        &mut self,
        idx: usize,
        before: Vec<Vec<u32>>,
        args: &CallArgs<'_>,
        body: &mut Body<'_>,
    ) -> Result<&[RawView]> {
        let State::Recorded(rec) = &self.entries[idx].state else {
            unreachable!("the sentinel checks a replay")
        };
        let replay_outs = read_all(&self.device, &rec.outputs)?;
        let replay_states = read_all(&self.device, &args.states)?;
        for (v, words) in args.states.iter().zip(&before) {
            crate::packed::write(&self.device, v, words)?;
        }
        self.run_body(args, body)?;
        let eager_outs = read_all(&self.device, &self.eager_outputs)?;
        let eager_states = read_all(&self.device, &args.states)?;
        let outs = replay_outs.iter().zip(&eager_outs).enumerate();
        let states = replay_states.iter().zip(&eager_states).enumerate();
        let first = outs
            .map(|(i, p)| (format!("output {i}"), p))
            .chain(states.map(|(i, p)| {
                let name = args.state_names.get(i).copied().unwrap_or("?");
                (format!("state `{name}`"), p)
            }))
            .find_map(|(name, (r, e))| {
                let at = r.iter().zip(e).position(|(a, b)| a != b)?;
                Some((name, at, r[at], e[at]))
            });
        let Some((buffer, index, replay, eager)) = first else {
            self.stats.sentinel_checks += 1;
            return Ok(&self.eager_outputs);
        };
        let key = format!("{:?}", self.entries[idx].key);
        let err = Error::Drift {
            step: self.name,
            key,
            buffer,
            index,
            replay,
            eager,
        };
        // The recording goes (after a drain); this key runs eagerly from now on.
        self.drain()?;
        self.entries[idx].state = State::Eager;
        self.stats.eager_reasons.push(err.to_string());
        Err(err)
    }

    /// Runs the body eagerly (no recording), e.g. to compare with replay.
    pub fn eager(&mut self, args: CallArgs<'_>, body: &mut Body<'_>) -> Result<&[RawView]> {
        self.check_inputs(&args)?;
        self.run_eager(&args, body)
    }

    /// Forgets the least recently used keys that are not recorded until at most `keep` are
    /// left (their reasons and warnings too).
    fn forget_unrecorded(&mut self, keep: usize) {
        loop {
            let unrecorded = self
                .entries
                .iter()
                .enumerate()
                .filter(|(_, e)| !matches!(e.state, State::Recorded(_)));
            let count = unrecorded.clone().count();
            if count <= keep {
                break;
            }
            let Some((victim, _)) = unrecorded.min_by_key(|(_, e)| e.last_used) else {
                break;
            };
            let e = self.entries.remove(victim);
            self.warned.remove(&e.key);
        }
        let over = self
            .stats
            .eager_reasons
            .len()
            .saturating_sub(self.config.max_unrecorded_keys.max(1));
        self.stats.eager_reasons.drain(..over);
    }

    fn run_eager(&mut self, args: &CallArgs<'_>, body: &mut Body<'_>) -> Result<&[RawView]> {
        self.run_body(args, body)?;
        self.stats.eager_calls += 1;
        Ok(&self.eager_outputs)
    }

    /// Runs the body eagerly; its outputs are left in `eager_outputs`.
    fn run_body(&mut self, args: &CallArgs<'_>, body: &mut Body<'_>) -> Result<()> {
        let owner = (self.id, self.name);
        let mut inputs = Vec::with_capacity(args.inputs.len());
        for input in &args.inputs {
            inputs.push(match input {
                InputArg::Device(v) => v.clone(),
                InputArg::Host(d, bytes) => {
                    let len = bytes.len() / d.size();
                    let raw = self.device.alloc_slot(*d, len, owner)?;
                    let v = RawView {
                        buf: raw,
                        offset: 0,
                        len,
                        dtype: *d,
                    };
                    crate::packed::write(&self.device, &v, &host_bits(*d, bytes))?;
                    v
                }
            });
        }
        let mut step = Step::eager(&self.device, owner, args.scalars.clone());
        step.set_inputs(&inputs, args.input_names);
        let outputs = {
            let _body = crate::device::BodyGuard::enter(self.id);
            body(&mut step, &inputs)?
        };
        self.eager_outputs = outputs;
        Ok(())
    }

    /// Records and lowers a plan for `key`; a body that cannot be recorded yields `Eager`.
    fn record(
        &mut self,
        key: &CaptureKey,
        args: &CallArgs<'_>,
        body: &mut Body<'_>,
        slots: bool,
    ) -> Result<State> {
        let t0 = Instant::now();
        let mut inputs = Vec::with_capacity(args.inputs.len());
        let mut input_slots = Vec::with_capacity(args.inputs.len());
        let owner = (self.id, self.name);
        let slots = slots || !self.config.bind_device_inputs;
        for (i, input) in args.inputs.iter().enumerate() {
            // A device input is recorded over the caller's buffer (no slot, nothing copied)
            // unless another input or a state shares its allocation: then the plan could not
            // tell their uses apart when one is re-pointed.
            if let InputArg::Device(v) = input {
                let shared = args.states.iter().any(|s| s.buf.id == v.buf.id)
                    || args.inputs.iter().enumerate().any(|(j, u)| {
                        j != i && matches!(u, InputArg::Device(u) if u.buf.id == v.buf.id)
                    });
                if !slots && !shared && v.as_words().is_some() {
                    inputs.push(v.clone());
                    input_slots.push(None);
                    continue;
                }
            }
            let (dtype, len) = input.shape();
            let raw: Arc<RawBuffer> = self.device.alloc_slot(dtype, len, owner)?;
            let slot = RawView {
                buf: raw,
                offset: 0,
                len,
                dtype,
            };
            inputs.push(slot.clone());
            input_slots.push(Some(slot));
        }
        let mut step = Step::record(&self.device, owner, args.scalars.clone());
        step.set_inputs(&inputs, args.input_names);
        let result = {
            let _recording = self.device.enter_recording();
            body(&mut step, &inputs)
        };
        #[cfg(feature = "nccl")]
        self.ranks.learn(step.communicators());
        let outputs = match result {
            Ok(o) => o,
            Err(
                e @ (Error::ReadbackInRecording(_)
                | Error::AllocationInRecording
                | Error::LaunchOutsideRecording(_)
                | Error::NestedStep(_)),
            ) => {
                let reason = format!("not capturable: {e}");
                #[cfg(feature = "nccl")]
                let reason = self.ranks.agree::<()>(Err(reason))?.unwrap_err();
                return self.fall_back(key, reason);
            }
            Err(e) => {
                #[cfg(feature = "nccl")]
                self.ranks.abandon(&e);
                return Err(e);
            }
        };
        let mut rec = step
            .into_recorder()
            .expect("a recording step has a recorder");
        let mut outputs = outputs;
        rec.plan.input_slot_bytes = input_slots.iter().flatten().map(|s| s.buf.bytes()).sum();
        rec.plan.serial = !self.config.concurrent_ops;
        rec.plan.programmatic = self.config.programmatic_launch;
        let mut packed = crate::liveness::Packed::Apart;
        if self.config.pack_workspaces {
            let shared = self.arena.upgrade().filter(|_| self.config.share_arena);
            packed = crate::liveness::pack(
                &self.device,
                owner,
                &mut rec.plan,
                &mut outputs,
                shared.as_ref(),
            )?;
        } else {
            rec.plan.inspect = Some(rec.plan.ops());
        }
        let record_time = t0.elapsed();
        let t1 = Instant::now();
        let lowered = match self.device.backend().lower(&rec.plan) {
            Ok(r) => Ok(r),
            Err(e @ Error::Lower { .. }) => Err(e.to_string()),
            Err(e) => {
                #[cfg(feature = "nccl")]
                self.ranks.abandon(&e);
                return Err(e);
            }
        };
        // Whether a collective is captured must be the same on every rank (NCCL's rule).
        #[cfg(feature = "nccl")]
        let lowered = self.ranks.agree(lowered)?;
        let recording = match lowered {
            Ok(r) => r,
            Err(reason) => return self.fall_back(key, reason),
        };
        let lower_time = t1.elapsed();
        let bytes = rec.plan.static_bytes();
        if packed == (crate::liveness::Packed::New { shareable: true }) && self.config.share_arena {
            self.grow_arena(&rec.plan)?;
        }
        self.make_room(&rec.plan, bytes)?;
        self.stats.recordings += 1;
        self.stats.last_record = Some(record_time);
        self.stats.last_lower = Some(lower_time);
        self.stats.launches_per_replay = recording.launches();
        tracing::debug!(
            step = self.name,
            launches = recording.launches(),
            ?record_time,
            ?lower_time,
            "graphed: recorded"
        );
        let bound: Vec<RawView> = inputs.iter().chain(&args.states).cloned().collect();
        let sites = crate::rebind::Sites::find(&rec.plan, &bound, inputs.len());
        Ok(State::Recorded(Box::new(Recorded {
            dag: rec.plan.dag(),
            plan: rec.plan,
            recording,
            copied: vec![false; inputs.len()],
            inputs: input_slots,
            bound,
            sites,
            outputs,
            scalar_last: vec![None; args.scalars.len()],
            scalar_uses: {
                let mut by_slot = vec![Vec::new(); args.scalars.len()];
                for (launch, word, slot) in rec.scalar_uses {
                    by_slot[slot].push((launch, word));
                }
                by_slot
            },
            scratch: Vec::new(),
            bytes,
            replays: 0,
        })))
    }

    /// Makes `plan`'s new arena the one this holder's recordings share. The growth rule: the
    /// recordings placed in the old (smaller) arena are dropped, after a drain, and record
    /// again into the new one on their next call, so the holder keeps one arena, of the
    /// largest recording's size. (Re-placing them would re-lower every one of them now, for
    /// keys that may never be called again.) With NCCL, ranks that call the same keys in the
    /// same order grow at the same call (sizes follow from shapes alone), as they evict
    /// alike, so their recordings' votes still meet.
    ///
    /// Why sharing is safe: a holder's replays, eager runs and its recordings' copies all go
    /// to the device's one stream (CUDA) or queue (wgpu), or run in call order (host), so two
    /// recordings of one holder are never in flight at once over the arena; the CUDA graphs'
    /// baked addresses may coincide because one graph launch on a stream starts after the
    /// previous one finished (programmatic launch works inside a graph only). An output lives
    /// in the arena, and `call()` lends it out borrowed from the holder, so no key's output
    /// can be read after another key ran; `Out::to_buffer`/`copy_into`/`to_host` copy it
    /// out, and a clone of a step's buffer taken in the body is refused outside it
    /// (`Error::StepSlot`). Eager runs (fallback, warm-up, the sentinel) allocate their own
    /// outputs, never the arena.
    fn grow_arena(&mut self, plan: &Plan) -> Result<()> {
        let Some(new) = &plan.arena else {
            return Ok(());
        };
        if let Some(old) = self.arena.upgrade() {
            let in_old = |e: &Entry| {
                matches!(&e.state, State::Recorded(r)
                    if r.plan.arena.as_ref().is_some_and(|a| a.id == old.id))
            };
            if self.entries.iter().any(in_old) {
                // Their replays may still be queued.
                self.drain()?;
                // A warming entry that has had its warm-up records at its next call.
                let warmup = self.config.warmup;
                for e in self.entries.iter_mut().filter(|e| in_old(e)) {
                    e.state = State::Warming(warmup);
                }
                self.stats.arena_growths += 1;
            }
        }
        self.arena = Arc::downgrade(new);
        Ok(())
    }

    fn fall_back(&mut self, key: &CaptureKey, reason: String) -> Result<State> {
        match self.config.fallback.effective() {
            Fallback::Error => {
                return Err(Error::NotCapturable {
                    step: self.name,
                    reason,
                })
            }
            Fallback::Warn if self.warned.insert(key.clone()) => {
                let no_subscriber = tracing::dispatcher::get_default(|d| {
                    d.is::<tracing::subscriber::NoSubscriber>()
                });
                if no_subscriber {
                    eprintln!(
                        "graphed: warning: step `{}` runs eagerly for this key (not recorded): {reason} (Config::fallback sets what happens; GRAPHED_STRICT=1 makes it an error)",
                        self.name
                    );
                } else {
                    tracing::warn!(
                        step = self.name,
                        "graphed: `{}` runs eagerly for this key: {reason}",
                        self.name
                    );
                }
            }
            Fallback::Warn | Fallback::Silent => {}
        }
        self.stats.eager_reasons.push(reason);
        Ok(State::Eager)
    }

    /// Evicts least-recently-used recordings until `plan`'s (of `bytes` static bytes) fits the
    /// bounds beside them: its arena counts only while no cached recording holds it already.
    fn make_room(&mut self, plan: &Plan, bytes: u64) -> Result<()> {
        loop {
            let recorded: Vec<usize> = (0..self.entries.len())
                .filter(|&i| matches!(self.entries[i].state, State::Recorded(_)))
                .collect();
            let arena_held = plan.arena.as_ref().is_some_and(|a| {
                recorded.iter().any(|&i| {
                    matches!(&self.entries[i].state, State::Recorded(r)
                        if r.plan.arena.as_ref().is_some_and(|b| b.id == a.id))
                })
            });
            let added = if arena_held {
                bytes - plan.arena_bytes
            } else {
                bytes
            };
            let over_count = recorded.len() >= self.config.max_recordings.max(1);
            let over_bytes =
                !recorded.is_empty() && self.static_bytes() + added > self.config.max_bytes;
            if !(over_count || over_bytes) {
                return Ok(());
            }
            let victim = *recorded
                .iter()
                .min_by_key(|&&i| self.entries[i].last_used)
                .expect("non-empty");
            self.drain()?;
            self.entries.remove(victim);
            self.stats.evictions += 1;
        }
    }

    /// Drops the recordings whose key matches `pred` (after draining); returns how many.
    pub fn evict_where(&mut self, pred: impl Fn(&CaptureKey) -> bool) -> Result<usize> {
        self.drain()?;
        let before = self.entries.len();
        self.entries.retain(|e| !pred(&e.key));
        Ok(before - self.entries.len())
    }

    /// Drops every recording (e.g. after swapping weights); the next call records again.
    pub fn invalidate(&mut self) -> Result<()> {
        self.clear()
    }

    fn drain(&mut self) -> Result<()> {
        let own = if std::mem::take(&mut self.fail_next_drain) {
            Err(Error::Drain {
                backend: self.device.kind().name(),
                reason: "injected failure (test hook)".into(),
            })
        } else {
            self.device.drain_for_release().map_err(|e| match e {
                e @ Error::Drain { .. } => e,
                e => Error::Drain {
                    backend: self.device.kind().name(),
                    reason: e.to_string(),
                },
            })
        };
        self.drain_ranks(own)?;
        // The device is idle: what a failed drain parked, and old bindings, can go now.
        self.parked.clear();
        self.retired.clear();
        Ok(())
    }

    /// Another rank's collective may still read or write this rank's memory until that rank's
    /// stream is done: every rank of the process is drained, not only this one.
    #[cfg(feature = "nccl")]
    fn drain_ranks(&self, own: Result<()>) -> Result<()> {
        self.ranks.drain(&self.device, own)
    }

    #[cfg(not(feature = "nccl"))]
    fn drain_ranks(&self, own: Result<()>) -> Result<()> {
        own
    }

    /// Waits for the device, then releases every recording and its static buffers. If the
    /// wait fails the error is returned and the memory is parked, never freed while the
    /// device may still use it: the next drain of this holder that succeeds (an eviction,
    /// `clear()`, `invalidate()`, the drop) releases it. The holder is empty either way.
    pub fn clear(&mut self) -> Result<()> {
        let result = self.drain();
        let entries = std::mem::take(&mut self.entries);
        let eager = std::mem::take(&mut self.eager_outputs);
        let retired = std::mem::take(&mut self.retired);
        // Parked or not, what the recordings shared is not handed to the next one.
        self.arena = std::sync::Weak::new();
        if result.is_err() {
            self.parked.push((entries, eager, retired));
        }
        result
    }

    /// Bytes of device memory parked by failed drains, released by the next drain that
    /// succeeds.
    pub fn parked_bytes(&self) -> u64 {
        self.parked
            .iter()
            .map(|(entries, eager, _)| {
                recorded_bytes(entries) + eager.iter().map(|v| v.buf.bytes()).sum::<u64>()
            })
            .sum()
    }

    #[doc(hidden)]
    /// Test hook: the next drain fails.
    pub fn __fail_next_drain(&mut self) {
        self.fail_next_drain = true;
    }
}

impl Drop for Graphed {
    fn drop(&mut self) {
        if self.entries.is_empty()
            && self.eager_outputs.is_empty()
            && self.parked.is_empty()
            && self.retired.is_empty()
        {
            return;
        }
        if let Err(e) = self.drain() {
            // Freeing now could hand memory the device still uses to a new allocation.
            eprintln!("graphed: fatal: `{}` could not drain before releasing its recordings: {e}; aborting instead of freeing memory the device may still use", self.name);
            std::process::abort();
        }
    }
}

/// Static bytes of the recordings among `entries`, each arena once (the recordings that share
/// one each count it in their own `bytes`).
fn recorded_bytes(entries: &[Entry]) -> u64 {
    let mut arenas: Vec<u64> = Vec::new();
    let mut total = 0;
    for e in entries {
        let State::Recorded(r) = &e.state else {
            continue;
        };
        total += r.bytes;
        if let Some(a) = &r.plan.arena {
            if arenas.contains(&a.id) {
                total -= r.plan.arena_bytes;
            } else {
                arenas.push(a.id);
            }
        }
    }
    total
}

/// Every view's element bits, read back (waits for the device).
fn read_all(device: &Device, views: &[RawView]) -> Result<Vec<Vec<u32>>> {
    views
        .iter()
        .map(|v| crate::packed::read(device.backend(), v))
        .collect()
}

/// The element bits (one element's in each `u32`) of host data of `dtype` given as bytes:
/// the bytes themselves for a 32-bit type (they come from a `[T]`, so aligned).
fn host_bits(dtype: DType, bytes: &[u8]) -> std::borrow::Cow<'_, [u32]> {
    if dtype.is_half() {
        return bytes
            .chunks_exact(2)
            .map(|c| u32::from(u16::from_ne_bytes([c[0], c[1]])))
            .collect();
    }
    match bytemuck::try_cast_slice(bytes) {
        Ok(words) => std::borrow::Cow::Borrowed(words),
        Err(_) => bytes
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    }
}

/// Writes the host inputs into their static slots; returns the copies (source, slot, as
/// whole words) of the device inputs that are `copied` rather than bound, which the replay
/// makes (wgpu: inside its own command buffer). A 16-bit device view off a word boundary is
/// always copied (a kernel merges it now, before the replay).
fn upload_inputs(
    device: &Device,
    slots: &[Option<RawView>],
    copied: &[bool],
    inputs: &[InputArg<'_>],
) -> Result<Vec<(RawView, RawView)>> {
    let mut copies = Vec::new();
    for ((slot, input), &copy) in slots.iter().zip(inputs).zip(copied) {
        let Some(slot) = slot else {
            continue; // bound by address (`Graphed::bind` made a slot for host data)
        };
        match input {
            InputArg::Host(d, bytes) => crate::packed::write(device, slot, &host_bits(*d, bytes))?,
            InputArg::Device(v) if copy || v.as_words().is_none() => {
                match (v.as_words(), slot.as_words()) {
                    (Some(s), Some(d)) if s.len == d.len => copies.push((s, d)),
                    _ => crate::packed::copy(
                        v,
                        slot,
                        &mut |s, d| device.backend().copy(s, d),
                        &mut |k, g, a| crate::packed::launch_on(device, k, g, a),
                    )?,
                }
            }
            InputArg::Device(_) => {}
        }
    }
    Ok(copies)
}

/// A step output borrowed from its holder: it cannot outlive the next `call` (the borrow
/// checker rejects that), so a replay can never overwrite data you still hold.
///
/// Holding one across the next call is a borrow error (`E0499`: "cannot borrow `step` as
/// mutable more than once at a time", pointing at the second `call`). Copy what you keep
/// before calling again:
///
/// - `out.to_host()?` — a `Vec<T>` on the host;
/// - `out.to_buffer()?` — a new device buffer you own;
/// - `out.copy_into(&mine)?` — into a buffer you own, without allocating.
///
/// A clone of the output's buffer taken inside the body does not escape the rule: outside
/// the body it is refused with `Error::StepSlot`.
pub struct Out<'a, T: Element> {
    view: &'a RawView,
    _t: PhantomData<T>,
}

impl<'a, T: Element> Out<'a, T> {
    #[doc(hidden)]
    pub fn __new(view: &'a RawView) -> Result<Self> {
        if view.dtype != T::DTYPE {
            return Err(Error::Shape(format!(
                "output is {}, expected {}",
                view.dtype.name(),
                T::DTYPE.name()
            )));
        }
        Ok(Out {
            view,
            _t: PhantomData,
        })
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.view.len
    }

    /// Whether the output is empty.
    pub fn is_empty(&self) -> bool {
        self.view.len == 0
    }

    /// Copies the output to the host.
    pub fn to_host(&self) -> Result<Vec<T>> {
        Ok(self
            .view
            .buf
            .device
            .read_output(self.view)?
            .into_iter()
            .map(T::from_bits)
            .collect())
    }

    /// Copies the output into a buffer you own (same length and device).
    pub fn copy_into(&self, dst: &Buffer<T>) -> Result<()> {
        dst.device().copy_from_output(self.view, &dst.raw_view())
    }

    /// Copies the output into a new buffer you own.
    pub fn to_buffer(&self) -> Result<Buffer<T>> {
        let b = self.view.buf.device.alloc::<T>(self.view.len)?;
        self.copy_into(&b)?;
        Ok(b)
    }
}

impl Out<'_, f32> {
    /// The first NaN or infinity in the output, with its index (an optional check: replay
    /// never repairs non-finite values, it propagates them exactly as eager runs do).
    pub fn first_non_finite(&self) -> Result<Option<(usize, f32)>> {
        Ok(self
            .to_host()?
            .into_iter()
            .enumerate()
            .find(|(_, v)| !v.is_finite()))
    }
}

impl<T: Element> std::fmt::Debug for Out<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Out<{}>({} elements)", T::DTYPE.name(), self.view.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two state views of one allocation, one as 16-bit elements and one as words: the key
    /// holds their distance in bytes. Element offsets (2 elements, 4 words) would mix units:
    /// both calls below differ by 2 in them, though one pair is 12 bytes apart and the
    /// other 8, so they would share a key and a recording bound for the other layout.
    #[test]
    fn states_of_one_allocation_as_halves_and_words_are_keyed_by_byte_distance() {
        use half::bf16;
        let dev = Device::host();
        let all = dev.upload(&[bf16::ONE; 32]).unwrap();
        let pair = |h: usize, w: usize| {
            let halves = all.slice(h..h + 4).unwrap().raw_view();
            let words = all
                .slice(2 * w..2 * w + 8)
                .unwrap()
                .words()
                .unwrap()
                .raw_view();
            assert_eq!(
                (halves.offset, words.offset),
                (h, w),
                "the views' own offsets are in their element types"
            );
            state_keys(&[halves, words]).collect::<Vec<_>>()
        };
        let (a, b) = (pair(2, 4), pair(0, 2));
        assert_eq!(a[1].shares, Some((0, 12)));
        assert_eq!(b[1].shares, Some((0, 8)));
        assert_ne!(a, b);
        // The same byte layout elsewhere in the allocation is the same key.
        assert_eq!(pair(4, 5), a);
        assert_eq!(a[0].shares, None);
        assert_eq!((a[1].dtype, a[1].len), (DType::U32, 4));
    }
}
