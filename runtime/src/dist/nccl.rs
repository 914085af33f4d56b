//! The NCCL calls behind [`super::Communicator`]: loading libnccl at run time, creating and
//! destroying communicators, and issuing an all-reduce on a backend's stream.
//!
//! cudarc loads libnccl lazily and panics when it is missing, so [`load`] probes it first and
//! every other function here is only reached after it succeeded.

use std::ffi::{c_void, CStr};
use std::mem::MaybeUninit;
use std::sync::OnceLock;

use cudarc::nccl::sys;

use super::ReduceOp;
use crate::dtype::DType;
use crate::error::{Error, Result};

pub(crate) const NAME: &str = "nccl";

/// The oldest NCCL with `ncclAvg` (2.10), encoded as `ncclGetVersion` reports it.
const MIN_VERSION: i32 = 21000;

/// Makes libnccl usable: keeps NVLink multicast off, then checks that the library loads and is
/// recent enough. Idempotent; the outcome of the first call is kept.
pub(crate) fn load() -> Result<()> {
    static LOADED: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            // NVLink SHARP (multicast) objects outlive communicators in some drivers and are
            // refused on shared machines; NCCL reads its environment once, at its first call,
            // so this must happen before any NCCL function runs. A value the user set wins.
            if std::env::var_os("NCCL_NVLS_ENABLE").is_none() {
                std::env::set_var("NCCL_NVLS_ENABLE", "0");
            }
            // SAFETY: only probes whether the library can be opened; cudarc panics on a missing
            // library when a function is first called.
            if !unsafe { sys::is_culib_present() } {
                return Err(
                    "libnccl.so was not found (it is looked up as `libnccl.so`, not \
                            `libnccl.so.2`): install NCCL 2.10 or later (`apt-get install \
                            libnccl2 libnccl-dev`, or `pip install nvidia-nccl-cu13` and put \
                            its lib directory, with a `libnccl.so` link, on LD_LIBRARY_PATH)"
                        .into(),
                );
            }
            let v = version_code().map_err(|e| e.to_string())?;
            if v < MIN_VERSION {
                return Err(format!(
                    "NCCL {} is too old: graphed needs NCCL 2.10 or later (for ncclAvg)",
                    describe(v)
                ));
            }
            Ok(())
        })
        .clone()
        .map_err(|reason| Error::Unavailable {
            backend: NAME,
            reason,
        })
}

fn version_code() -> Result<i32> {
    let mut v = 0;
    // SAFETY: writes one int.
    check(
        "ncclGetVersion",
        unsafe { sys::ncclGetVersion(&mut v) },
        None,
    )?;
    Ok(v)
}

fn describe(code: i32) -> String {
    format!("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100)
}

/// The loaded NCCL's version, e.g. `2.28.3`.
pub(crate) fn version() -> Result<String> {
    load()?;
    version_code().map(describe)
}

/// Maps an NCCL result to ours, with NCCL's own explanation (and the communicator's last error,
/// which names the failing transport or CUDA call).
fn check(what: &str, r: sys::ncclResult_t, comm: Option<sys::ncclComm_t>) -> Result<()> {
    if r == sys::ncclResult_t::ncclSuccess {
        return Ok(());
    }
    // SAFETY: both return pointers to NUL-terminated static or per-communicator strings.
    let text = |p: *const std::ffi::c_char| {
        if p.is_null() {
            String::new()
        } else {
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    let mut reason = format!("{what}: {}", text(unsafe { sys::ncclGetErrorString(r) }));
    if let Some(c) = comm {
        let last = text(unsafe { sys::ncclGetLastError(c) });
        if !last.is_empty() {
            reason.push_str(&format!(" ({last})"));
        }
    }
    Err(Error::Device {
        backend: NAME,
        reason,
    })
}

/// One rank's NCCL communicator; destroyed on drop.
pub(crate) struct Comm(sys::ncclComm_t);

// SAFETY: an NCCL communicator may be used from any thread; graphed issues on it only under the
// lock of the backend whose stream it uses, and NCCL serialises its own bookkeeping.
unsafe impl Send for Comm {}
// SAFETY: as above.
unsafe impl Sync for Comm {}

impl Drop for Comm {
    fn drop(&mut self) {
        // SAFETY: destroyed once. Every recording that captured work on it holds it (so its
        // graphs are destroyed first) and the holders drained every rank before releasing.
        // Destroying the ranks of one process in any order, from any thread, is allowed: NCCL
        // defers the shared teardown to the last of them.
        unsafe {
            let _ = sys::ncclCommDestroy(self.0);
        }
    }
}

/// One communicator per CUDA ordinal, ranks in the order given (`ncclCommInitAll`: one call
/// creates the whole clique, so no thread per rank is needed to create it).
pub(crate) fn init_all(ordinals: &[i32]) -> Result<Vec<Comm>> {
    let mut comms = vec![std::ptr::null_mut(); ordinals.len()];
    let n = i32::try_from(ordinals.len()).map_err(|_| Error::Shape("too many ranks".into()))?;
    // SAFETY: `comms` has room for one handle per ordinal.
    check(
        "ncclCommInitAll",
        unsafe { sys::ncclCommInitAll(comms.as_mut_ptr(), n, ordinals.as_ptr()) },
        None,
    )?;
    Ok(comms.into_iter().map(Comm).collect())
}

/// A fresh unique id for [`init_rank`] (bytes as NCCL defines them).
pub(crate) fn unique_id() -> Result<[u8; 128]> {
    let mut id = MaybeUninit::<sys::ncclUniqueId>::uninit();
    // SAFETY: NCCL fills the whole id.
    check(
        "ncclGetUniqueId",
        unsafe { sys::ncclGetUniqueId(id.as_mut_ptr()) },
        None,
    )?;
    // SAFETY: initialised by the successful call above.
    let id = unsafe { id.assume_init() };
    Ok(id.internal.map(|c| c as u8))
}

/// This thread's rank of a communicator of `size` ranks (blocks until every rank has called
/// it). The CUDA device of the rank must be current on this thread.
pub(crate) fn init_rank(id: &[u8; 128], rank: usize, size: usize) -> Result<Comm> {
    let mut comm = std::ptr::null_mut();
    let id = sys::ncclUniqueId {
        internal: id.map(|b| b as std::ffi::c_char),
    };
    let bad = |_| Error::Shape("rank or size out of range".into());
    let (rank, size) = (
        i32::try_from(rank).map_err(bad)?,
        i32::try_from(size).map_err(bad)?,
    );
    // SAFETY: writes one handle.
    check(
        "ncclCommInitRank",
        unsafe { sys::ncclCommInitRank(&mut comm, size, id, rank) },
        None,
    )?;
    Ok(Comm(comm))
}

fn data_type(d: DType) -> Result<sys::ncclDataType_t> {
    match d {
        DType::F32 => Ok(sys::ncclDataType_t::ncclFloat32),
        DType::I32 => Ok(sys::ncclDataType_t::ncclInt32),
        DType::U32 => Ok(sys::ncclDataType_t::ncclUint32),
        DType::Bool | DType::F16 | DType::BF16 => Err(Error::Shape(
            "an all-reduce needs a buffer of f32, i32 or u32".into(),
        )),
    }
}

/// Issues an in-place all-reduce of `count` elements at `ptr` on `stream` (executed or
/// captured, whichever the stream is doing).
///
/// # Safety
/// `ptr` points at `count` elements of `dtype` on the communicator's device, which stay
/// allocated until the work completes; `stream` belongs to that device's context, which is
/// current on this thread.
pub(crate) unsafe fn all_reduce(
    comm: &Comm,
    ptr: u64,
    count: usize,
    dtype: DType,
    op: ReduceOp,
    stream: *mut c_void,
) -> Result<()> {
    let op = match op {
        ReduceOp::Sum => sys::ncclRedOp_t::ncclSum,
        ReduceOp::Mean => sys::ncclRedOp_t::ncclAvg,
    };
    let buf = ptr as *mut c_void;
    check(
        "ncclAllReduce",
        // SAFETY: the caller's contract; in place (send == receive) is allowed by NCCL.
        unsafe {
            sys::ncclAllReduce(
                buf,
                buf,
                count,
                data_type(dtype)?,
                op,
                comm.0,
                stream as sys::cudaStream_t,
            )
        },
        Some(comm.0),
    )
}
