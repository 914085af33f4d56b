//! Collectives across ranks for data-parallel steps (`--features nccl`): communicators (one per
//! rank, each bound to one device), the all-reduce a step records into its plan and the CUDA
//! lowering captures into the rank's graph, and the two agreements the lifecycle needs to keep
//! ranks in step: every rank's recording has one outcome (all replay, or all run eagerly), and
//! every rank of the process is drained before any of them releases memory.
//!
//! NCCL is the transport; nothing here moves data itself. On CUDA every communicator is an
//! NCCL communicator, a single rank included, so the captured path is the same for one GPU and
//! for many. On the host and wgpu backends only a communicator of one rank exists, and its
//! all-reduce is the identity: the same data-parallel step runs, and is tested, everywhere.
//!
//! Rules a multi-rank program follows (NCCL's, plus graphed's):
//! - one thread per rank (or one process): NCCL calls and graph launches of one rank may
//!   block until the other ranks make theirs, so one thread must never drive two ranks;
//!   [`DataParallel`] keeps a thread per rank and hands every rank its step without waiting
//!   for the previous rank's;
//! - every rank runs the same steps in the same order with the same shapes (collectives match
//!   by order), so every rank records the same keys at the same step;
//! - whether an operation is captured must be the same on every rank (NCCL's rule): after
//!   capturing, the ranks vote, and a recording that failed on any rank is dropped on all of
//!   them, which then run that key eagerly together.

mod nccl;
mod parallel;

use std::ffi::c_void;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::backend::BackendKind;
use crate::buffer::{Buffer, RawView};
use crate::device::Device;
use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::plan::{Op, Plan};

pub use parallel::DataParallel;

static NEXT_COMM: AtomicU64 = AtomicU64::new(1);

/// How an all-reduce combines the ranks' values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// The sum over ranks.
    Sum,
    /// The mean over ranks (NCCL's `ncclAvg`), e.g. of per-rank mean gradients.
    Mean,
}

impl ReduceOp {
    /// Lower-case name (`sum`, `mean`).
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
        }
    }
}

/// The rendezvous of a communicator whose ranks live in several processes: created once (by
/// one process, [`Communicator::unique_id`]) and sent to every rank, e.g. over a socket.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UniqueId([u8; 128]);

impl UniqueId {
    /// The id's bytes, to send to the other processes.
    pub fn to_bytes(&self) -> [u8; 128] {
        self.0
    }
    /// An id received from the process that created it.
    pub fn from_bytes(bytes: [u8; 128]) -> UniqueId {
        UniqueId(bytes)
    }
}

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UniqueId(..)")
    }
}

/// One rank of this process: what drains and votes need to know of it.
struct Member {
    rank: usize,
    device: Device,
    fail_next_drain: AtomicBool,
    /// Why this rank's last recording failed, for the other ranks' messages.
    reason: Mutex<Option<String>>,
}

/// The ranks of one communicator that live in this process.
struct Group {
    size: usize,
    members: Vec<Member>,
}

impl Group {
    fn member(&self, rank: usize) -> Option<&Member> {
        self.members.iter().find(|m| m.rank == rank)
    }
}

struct CommInner {
    id: u64,
    rank: usize,
    group: Arc<Group>,
    /// A flag per rank, all-reduced to agree on a recording's outcome (allocated on first use).
    vote: Mutex<Option<Buffer<f32>>>,
    /// `None`: a local communicator of one rank (host, wgpu), whose all-reduce is the identity.
    nccl: Option<nccl::Comm>,
}

/// One rank of a communicator: the rank's index, the number of ranks, and the device the rank
/// runs on. Cheap to clone. Pass it to a step as a `#[key]` parameter (it hashes by identity,
/// so another communicator is another recording) and all-reduce with
/// [`Step::all_reduce`](crate::Step::all_reduce).
///
/// A recording that all-reduces holds its communicator, so the NCCL communicator is destroyed
/// only after every graph that captured work on it.
#[derive(Clone)]
pub struct Communicator {
    inner: Arc<CommInner>,
}

impl PartialEq for Communicator {
    fn eq(&self, other: &Self) -> bool {
        self.inner.id == other.inner.id
    }
}
impl Eq for Communicator {}
impl Hash for Communicator {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.inner.id.hash(state);
    }
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Communicator(rank {} of {} on {}, {})",
            self.rank(),
            self.size(),
            self.device().kind(),
            if self.uses_nccl() { "nccl" } else { "local" }
        )
    }
}

/// The CUDA ordinal of a device (an error naming what is needed on other backends).
fn ordinal(device: &Device) -> Result<i32> {
    let mut found = 0;
    device.backend().with_stream(&mut |ordinal, _| {
        found = ordinal;
        Ok(())
    })?;
    Ok(found)
}

fn build(group: &Arc<Group>, rank: usize, nccl: Option<nccl::Comm>) -> Communicator {
    Communicator {
        inner: Arc::new(CommInner {
            id: NEXT_COMM.fetch_add(1, Ordering::Relaxed),
            rank,
            group: group.clone(),
            vote: Mutex::new(None),
            nccl,
        }),
    }
}

fn member(rank: usize, device: &Device) -> Member {
    Member {
        rank,
        device: device.clone(),
        fail_next_drain: AtomicBool::new(false),
        reason: Mutex::new(None),
    }
}

impl Communicator {
    /// A communicator of one rank on `device`. On CUDA it is an NCCL communicator (so the
    /// all-reduce is captured into the graph as it would be with more ranks); elsewhere the
    /// all-reduce of one rank is the identity and nothing is issued.
    pub fn single(device: &Device) -> Result<Communicator> {
        let nccl = if device.kind() == BackendKind::Cuda {
            nccl::load()?;
            nccl::init_all(&[ordinal(device)?])?.pop()
        } else {
            None
        };
        let group = Arc::new(Group {
            size: 1,
            members: vec![member(0, device)],
        });
        Ok(build(&group, 0, nccl))
    }

    /// One communicator per device, rank `i` on `devices[i]`, all in this process (one thread
    /// per rank drives them, e.g. through [`DataParallel`]). More than one rank needs CUDA
    /// devices on distinct GPUs (see [`Device::cuda_on`]).
    pub fn group(devices: &[Device]) -> Result<Vec<Communicator>> {
        match devices {
            [] => Err(Error::Shape(
                "a communicator needs at least one rank".into(),
            )),
            [one] => Ok(vec![Communicator::single(one)?]),
            _ => {
                if let Some(d) = devices.iter().find(|d| d.kind() != BackendKind::Cuda) {
                    return Err(Error::Unavailable {
                        backend: nccl::NAME,
                        reason: format!(
                            "a communicator of {} ranks needs CUDA devices (NCCL); one is a {} device",
                            devices.len(),
                            d.kind()
                        ),
                    });
                }
                nccl::load()?;
                let mut ordinals = Vec::with_capacity(devices.len());
                for d in devices {
                    let o = ordinal(d)?;
                    if ordinals.contains(&o) {
                        return Err(Error::Shape(format!(
                            "two ranks on GPU {o}: NCCL needs one GPU per rank"
                        )));
                    }
                    ordinals.push(o);
                }
                let comms = nccl::init_all(&ordinals)?;
                let group = Arc::new(Group {
                    size: devices.len(),
                    members: devices
                        .iter()
                        .enumerate()
                        .map(|(r, d)| member(r, d))
                        .collect(),
                });
                Ok(comms
                    .into_iter()
                    .enumerate()
                    .map(|(r, c)| build(&group, r, Some(c)))
                    .collect())
            }
        }
    }

    /// A fresh rendezvous id for a communicator whose ranks live in several processes.
    pub fn unique_id() -> Result<UniqueId> {
        nccl::load()?;
        nccl::unique_id().map(UniqueId)
    }

    /// This process's rank `rank` of a communicator of `size` ranks spread over processes, on
    /// `device` (CUDA). Blocks until every rank has called it with the same `id`. Drains and
    /// votes cover every rank, but only this process's rank is drained by this process.
    pub fn from_unique_id(
        device: &Device,
        id: &UniqueId,
        rank: usize,
        size: usize,
    ) -> Result<Communicator> {
        if rank >= size {
            return Err(Error::Shape(format!("rank {rank} of {size} ranks")));
        }
        nccl::load()?;
        let mut comm = None;
        // The rank's device must be current while NCCL initialises it; the backend binds it.
        device.backend().with_stream(&mut |_, _| {
            comm = Some(nccl::init_rank(&id.0, rank, size)?);
            Ok(())
        })?;
        let group = Arc::new(Group {
            size,
            members: vec![member(rank, device)],
        });
        Ok(build(&group, rank, comm))
    }

    /// This rank's index.
    pub fn rank(&self) -> usize {
        self.inner.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.inner.group.size
    }

    /// The device this rank runs on.
    pub fn device(&self) -> &Device {
        &self.me().device
    }

    /// Whether collectives go through NCCL (every CUDA communicator) rather than being the
    /// identity of one local rank.
    pub fn uses_nccl(&self) -> bool {
        self.inner.nccl.is_some()
    }

    fn me(&self) -> &Member {
        self.inner
            .group
            .member(self.inner.rank)
            .expect("a communicator's own rank is a member of its group")
    }

    /// All-reduces `buf` in place now, outside any step (on the device's queue, in order with
    /// its other work). Every rank must call it, in the same order as its other collectives.
    pub fn all_reduce<T: Element>(&self, buf: &mut Buffer<T>, op: ReduceOp) -> Result<()> {
        if crate::device::thread_records() {
            return Err(Error::LaunchOutsideRecording("all_reduce"));
        }
        crate::device::check_slot(&buf.raw_view(), "all_reduce")?;
        AllReduce::new(self, buf.raw_view(), op)?.run()
    }

    /// Waits for every rank of this communicator that lives in this process; an error names
    /// the rank. What drain-before-release does across ranks.
    pub fn synchronize_ranks(&self) -> Result<()> {
        let own = self.device().synchronize();
        Ranks {
            comms: vec![self.clone()],
        }
        .drain(self.device(), own)
    }

    /// As [`Communicator::synchronize_ranks`], before releasing memory: a rank whose device
    /// faulted runs nothing more and counts as drained.
    pub(crate) fn drain_ranks_for_release(&self) -> Result<()> {
        let own = self.device().drain_for_release();
        Ranks {
            comms: vec![self.clone()],
        }
        .drain(self.device(), own)
    }

    #[doc(hidden)]
    /// Test hook: the next drain of this rank (by any holder or driver of the process) fails.
    pub fn __fail_next_drain(&self) {
        self.me().fail_next_drain.store(true, Ordering::SeqCst);
    }

    /// Casts this rank's vote on a recording and returns every rank's vote (indexed by rank).
    /// Every rank of the communicator votes at the same point of its sequence of collectives.
    fn vote(&self, vote: Vote, reason: Option<&str>) -> Result<Vec<Vote>> {
        *self.me().reason.lock().unwrap_or_else(|p| p.into_inner()) = reason.map(str::to_string);
        let mut slot = self.inner.vote.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(self.device().alloc::<f32>(self.size())?);
        }
        let flags = slot.as_mut().expect("allocated above");
        let mut mine = vec![0.0f32; self.size()];
        mine[self.rank()] = vote as u32 as f32;
        flags.write(&mine)?;
        AllReduce::new(self, flags.raw_view(), ReduceOp::Sum)?.run()?;
        Ok(flags
            .to_host()?
            .into_iter()
            .map(|v| match v as u32 {
                0 => Vote::Recorded,
                1 => Vote::Eager,
                _ => Vote::Failed,
            })
            .collect())
    }

    fn why(&self, rank: usize) -> String {
        match self.inner.group.member(rank) {
            Some(m) => match &*m.reason.lock().unwrap_or_else(|p| p.into_inner()) {
                Some(r) => format!("rank {rank}: {r}"),
                None => format!("rank {rank} could not record it"),
            },
            None => format!("rank {rank} (another process) could not record it"),
        }
    }
}

/// The version of the NCCL library loaded, e.g. `2.28.3` (an error naming what to install
/// when it cannot be loaded).
pub fn nccl_version() -> Result<String> {
    nccl::version()
}

/// A rank's outcome of one recording attempt.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Vote {
    /// Recorded and lowered.
    Recorded = 0,
    /// Cannot be recorded: the key runs eagerly.
    Eager = 1,
    /// The call failed with an error: no rank may issue the step's collectives.
    Failed = 2,
}

/// An all-reduce of one view in place: a plan op, and the eager call.
#[derive(Clone)]
pub(crate) struct AllReduce {
    pub(crate) comm: Communicator,
    pub(crate) view: RawView,
    pub(crate) op: ReduceOp,
}

impl std::fmt::Debug for AllReduce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "AllReduce({} of {} {} over {:?})",
            self.op.name(),
            self.view.len,
            self.view.dtype.name(),
            self.comm
        )
    }
}

impl AllReduce {
    /// Checks that the buffer lives on the rank's device.
    pub(crate) fn new(comm: &Communicator, view: RawView, op: ReduceOp) -> Result<AllReduce> {
        if view.buf.device.id() != comm.device().id() {
            return Err(Error::Shape(format!(
                "all-reduce over rank {} of {}: the buffer lives on another device ({}) than the rank ({})",
                comm.rank(),
                comm.size(),
                view.buf.device.kind(),
                comm.device().kind()
            )));
        }
        if matches!(
            view.dtype,
            crate::dtype::DType::Bool | crate::dtype::DType::F16 | crate::dtype::DType::BF16
        ) {
            // 16-bit types: not yet (NCCL would sum them rounded to 16 bits at every hop);
            // all-reduce an f32 copy.
            return Err(Error::Shape(format!(
                "an all-reduce needs a buffer of f32, i32 or u32, not {}; all-reduce an f32 copy of 16-bit values",
                view.dtype.name()
            )));
        }
        Ok(AllReduce {
            comm: comm.clone(),
            view,
            op,
        })
    }

    /// Issues the all-reduce on `stream`, the rank's CUDA stream: executed, or captured when
    /// the stream is capturing. The identity for a local communicator issues nothing. The
    /// caller holds the backend's lock, with its context current.
    pub(crate) fn issue(&self, stream: *mut c_void) -> Result<()> {
        let Some(comm) = &self.comm.inner.nccl else {
            return Ok(());
        };
        if self.view.len == 0 {
            return Ok(());
        }
        let ptr = crate::backend::cuda::device_ptr(&self.view) + self.view.offset as u64 * 4;
        // SAFETY: the view lies inside its allocation (checked when it was made) on the rank's
        // device; a plan or the caller holds it until the work completes (drained before
        // release); the caller holds the backend's lock with its context current.
        unsafe { nccl::all_reduce(comm, ptr, self.view.len, self.view.dtype, self.op, stream) }
    }

    /// Runs the all-reduce now, in order with the device's other work.
    pub(crate) fn run(&self) -> Result<()> {
        if self.comm.inner.nccl.is_none() {
            return Ok(());
        }
        self.comm
            .device()
            .backend()
            .with_stream(&mut |_, stream| self.issue(stream))
    }

    /// Whether the op does nothing (one local rank): what the host and wgpu lowerings need.
    pub(crate) fn is_identity(&self) -> bool {
        self.comm.inner.nccl.is_none()
    }

    /// The plan-inspection form: op, this rank, number of ranks.
    pub(crate) fn describe(&self) -> (ReduceOp, usize, usize) {
        (self.op, self.comm.rank(), self.comm.size())
    }
}

/// The communicators of a plan's collectives.
pub(crate) fn communicators(plan: &Plan) -> Vec<Communicator> {
    let mut out: Vec<Communicator> = Vec::new();
    for op in &plan.ops {
        if let Op::AllReduce(a) = op {
            if !out.contains(&a.comm) {
                out.push(a.comm.clone());
            }
        }
    }
    out
}

/// The ranks a holder's steps take part in: the communicators its recorded bodies used (or
/// that it joined). A holder with none behaves exactly as before.
#[derive(Default)]
pub(crate) struct Ranks {
    comms: Vec<Communicator>,
}

impl Ranks {
    pub(crate) fn join(&mut self, comm: &Communicator) {
        if !self.comms.contains(comm) {
            self.comms.push(comm.clone());
        }
    }

    pub(crate) fn learn(&mut self, comms: Vec<Communicator>) {
        for c in &comms {
            self.join(c);
        }
    }

    /// Agrees on a recording's outcome with the other ranks of every multi-rank communicator
    /// this holder takes part in: `own` is this rank's (the recording, or why it cannot be
    /// recorded). Returns the recording only if every rank recorded; otherwise why this key
    /// runs eagerly (this rank's reason, or the other ranks'), and the recording is dropped
    /// unlaunched. If another rank failed with an error, so does this one: running the step
    /// eagerly would issue collectives no rank matches.
    pub(crate) fn agree<T>(
        &self,
        own: std::result::Result<T, String>,
    ) -> Result<std::result::Result<T, String>> {
        let (vote, reason) = match &own {
            Ok(_) => (Vote::Recorded, None),
            Err(r) => (Vote::Eager, Some(r.as_str())),
        };
        let (mut eager, mut failed) = (Vec::new(), Vec::new());
        for c in self.comms.iter().filter(|c| c.size() > 1) {
            for (r, v) in c.vote(vote, reason)?.into_iter().enumerate() {
                match v {
                    _ if r == c.rank() => {}
                    Vote::Recorded => {}
                    Vote::Eager => eager.push(c.why(r)),
                    Vote::Failed => failed.push(c.why(r)),
                }
            }
        }
        if !failed.is_empty() {
            return Err(Error::Device {
                backend: nccl::NAME,
                reason: format!(
                    "another rank failed while recording this step: {}",
                    failed.join("; ")
                ),
            });
        }
        Ok(match own {
            Ok(recording) if !eager.is_empty() => {
                drop(recording);
                Err(format!(
                    "another rank could not record this step, so every rank runs it eagerly: {}",
                    eager.join("; ")
                ))
            }
            own => own,
        })
    }

    /// Tells the other ranks that recording failed here with `error` (they fail too instead of
    /// issuing collectives no rank matches). Best effort: the caller returns `error` anyway.
    pub(crate) fn abandon(&self, error: &Error) {
        let reason = error.to_string();
        for c in self.comms.iter().filter(|c| c.size() > 1) {
            let _ = c.vote(Vote::Failed, Some(&reason));
        }
    }

    /// Drains every rank of this process that shares a communicator with the holder, after the
    /// holder's own device (`own`: that drain's result). The first error is returned, naming
    /// its rank; every rank is waited for even after one failed.
    pub(crate) fn drain(&self, device: &Device, own: Result<()>) -> Result<()> {
        if self.comms.is_empty() {
            return own;
        }
        let own_member = self
            .comms
            .iter()
            .flat_map(|c| c.inner.group.members.iter().map(move |m| (c, m)))
            .find(|(_, m)| m.device.id() == device.id());
        let mut result = match (own, own_member) {
            (Err(e), Some((c, m))) => Err(ranked(c.size(), m, e)),
            (own, _) => own,
        };
        let mut seen: Vec<u64> = Vec::new();
        for c in &self.comms {
            for m in &c.inner.group.members {
                let r = if m.fail_next_drain.swap(false, Ordering::SeqCst) {
                    Err(Error::Drain {
                        backend: m.device.kind().name(),
                        reason: "injected failure (test hook)".into(),
                    })
                } else if m.device.id() == device.id() || seen.contains(&m.device.id()) {
                    Ok(())
                } else {
                    m.device.drain_for_release()
                };
                seen.push(m.device.id());
                if let Err(e) = r {
                    if result.is_ok() {
                        result = Err(ranked(c.size(), m, e));
                    }
                }
            }
        }
        result
    }
}

/// A drain error naming the rank it happened on.
fn ranked(size: usize, m: &Member, e: Error) -> Error {
    let reason = match e {
        Error::Drain { reason, .. } => reason,
        e => e.to_string(),
    };
    Error::Drain {
        backend: m.device.kind().name(),
        reason: format!(
            "rank {} of {size} ({}): {reason}",
            m.rank,
            m.device.adapter()
        ),
    }
}
