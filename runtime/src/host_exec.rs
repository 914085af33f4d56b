//! What the host form of a kernel runs on: bounds-checked slices, workgroup memory, and
//! barriers as futures polled in rounds. Used by code that `#[kernel]` generates.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use crate::dtype::Element;
use crate::error::{FaultKind, KernelFault};

/// One launch on the host: argument words, bound allocations, workgroup counts.
pub struct HostLaunch<'a> {
    /// The argument block.
    pub args: &'a [u32],
    /// Slice bindings in parameter order (whole allocations, as words).
    pub bufs: &'a [&'a [Cell<u32>]],
    /// Workgroup counts.
    pub workgroups: [u32; 3],
    /// The size of the subgroups the kernel's subgroup operations emulate.
    pub subgroup_size: u32,
}

/// A 3-component id, as returned by `global_id()` and friends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UVec3 {
    /// x.
    pub x: u32,
    /// y.
    pub y: u32,
    /// z.
    pub z: u32,
}

impl From<[u32; 3]> for UVec3 {
    fn from(v: [u32; 3]) -> Self {
        UVec3 {
            x: v[0],
            y: v[1],
            z: v[2],
        }
    }
}

/// A view of a bound slice; every access is checked against the view's length. A 16-bit
/// type's elements are halves of the words (`first`: the half the view starts at).
pub struct HostSlice<'a, T> {
    cells: &'a [Cell<u32>],
    len: u32,
    first: u32,
    kernel: &'static str,
    name: &'static str,
    _t: std::marker::PhantomData<T>,
}

impl<T> Clone for HostSlice<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for HostSlice<'_, T> {}

/// Atomic read-modify-write operations.
#[derive(Clone, Copy, Debug)]
pub enum AtomicRmw {
    /// Wrapping add.
    Add,
    /// Wrapping subtract.
    Sub,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
    /// Bitwise and.
    And,
    /// Bitwise or.
    Or,
    /// Bitwise xor.
    Xor,
    /// Exchange.
    Exchange,
}

/// Integer element types that support atomics.
pub trait AtomicElem: Element + Ord {
    /// Applies `op`.
    fn rmw(op: AtomicRmw, old: Self, v: Self) -> Self;
}

macro_rules! atomic_elem {
    ($t:ty) => {
        impl AtomicElem for $t {
            fn rmw(op: AtomicRmw, old: Self, v: Self) -> Self {
                match op {
                    AtomicRmw::Add => old.wrapping_add(v),
                    AtomicRmw::Sub => old.wrapping_sub(v),
                    AtomicRmw::Max => old.max(v),
                    AtomicRmw::Min => old.min(v),
                    AtomicRmw::And => old & v,
                    AtomicRmw::Or => old | v,
                    AtomicRmw::Xor => old ^ v,
                    AtomicRmw::Exchange => v,
                }
            }
        }
    };
}
atomic_elem!(u32);
atomic_elem!(i32);

impl<'a, T: Element> HostSlice<'a, T> {
    /// The view of binding `binding` whose offset and length are argument words `word`, `word+1`.
    pub fn new(
        l: &HostLaunch<'a>,
        binding: usize,
        word: usize,
        kernel: &'static str,
        name: &'static str,
    ) -> Result<Self, KernelFault> {
        let off = l.args[word] as usize;
        let len = l.args[word + 1];
        let buf = l.bufs[binding];
        let (words, first) = if T::DTYPE.is_half() {
            (off / 2..(off + len as usize).div_ceil(2), (off % 2) as u32)
        } else {
            (off..off + len as usize, 0)
        };
        let cells = buf.get(words).ok_or(KernelFault {
            kernel,
            target: name,
            kind: FaultKind::BadView,
        })?;
        Ok(HostSlice {
            cells,
            len,
            first,
            kernel,
            name,
            _t: std::marker::PhantomData,
        })
    }

    /// A view of the first `len` elements of `cells` (from [`cells_of`]): what a `#[device]`
    /// function's Rust form passes for a slice.
    pub fn from_cells(
        cells: &'a [Cell<u32>],
        len: usize,
        kernel: &'static str,
        name: &'static str,
    ) -> Self {
        HostSlice {
            cells,
            len: len as u32,
            first: 0,
            kernel,
            name,
            _t: std::marker::PhantomData,
        }
    }

    /// The view's length.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether the view is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn cell(&self, i: u32) -> Result<&'a Cell<u32>, KernelFault> {
        self.cells.get(i as usize).ok_or(KernelFault {
            kernel: self.kernel,
            target: self.name,
            kind: FaultKind::OutOfBounds {
                index: i,
                len: self.len,
            },
        })
    }

    /// The cell holding element `i` and the shift of its bits there (16-bit types: 0 or 16).
    #[inline]
    fn half(&self, i: u32) -> Result<(&'a Cell<u32>, u32), KernelFault> {
        if i >= self.len {
            return Err(KernelFault {
                kernel: self.kernel,
                target: self.name,
                kind: FaultKind::OutOfBounds {
                    index: i,
                    len: self.len,
                },
            });
        }
        let e = self.first + i;
        Ok((self.cell(e / 2)?, 16 * (e % 2)))
    }

    /// Reads element `i`.
    #[inline]
    pub fn get(&self, i: u32) -> Result<T, KernelFault> {
        if T::DTYPE.is_half() {
            let (c, at) = self.half(i)?;
            return Ok(T::from_bits((c.get() >> at) & 0xffff));
        }
        Ok(T::from_bits(self.cell(i)?.get()))
    }

    /// Writes element `i` (a 16-bit type's half of its word; the other half is kept).
    #[inline]
    pub fn set(&self, i: u32, v: T) -> Result<(), KernelFault> {
        if T::DTYPE.is_half() {
            let (c, at) = self.half(i)?;
            c.set((c.get() & !(0xffff << at)) | ((v.to_bits() & 0xffff) << at));
            return Ok(());
        }
        self.cell(i)?.set(v.to_bits());
        Ok(())
    }
}

impl<T: AtomicElem> HostSlice<'_, T> {
    /// An atomic read-modify-write; returns the old value.
    pub fn atomic(&self, op: AtomicRmw, i: u32, v: T) -> Result<T, KernelFault> {
        let c = self.cell(i)?;
        let old = T::from_bits(c.get());
        c.set(T::rmw(op, old, v).to_bits());
        Ok(old)
    }

    /// Strong compare-exchange; returns the old value.
    pub fn compare_exchange(&self, i: u32, expected: T, v: T) -> Result<T, KernelFault> {
        let c = self.cell(i)?;
        let old = T::from_bits(c.get());
        if old == expected {
            c.set(v.to_bits());
        }
        Ok(old)
    }
}

/// Workgroup memory of one workgroup (zeroed; kernels must not rely on that on GPUs).
pub struct HostShared<T> {
    cells: Vec<Cell<u32>>,
    kernel: &'static str,
    name: &'static str,
    _t: std::marker::PhantomData<T>,
}

impl<T: Element> HostShared<T> {
    /// `size` zeroed elements.
    pub fn new(size: u32, kernel: &'static str, name: &'static str) -> Self {
        HostShared {
            cells: (0..size).map(|_| Cell::new(0)).collect(),
            kernel,
            name,
            _t: std::marker::PhantomData,
        }
    }

    fn cell(&self, i: u32) -> Result<&Cell<u32>, KernelFault> {
        self.cells.get(i as usize).ok_or(KernelFault {
            kernel: self.kernel,
            target: self.name,
            kind: FaultKind::OutOfBounds {
                index: i,
                len: self.cells.len() as u32,
            },
        })
    }

    /// Reads element `i`.
    #[inline]
    pub fn get(&self, i: u32) -> Result<T, KernelFault> {
        Ok(T::from_bits(self.cell(i)?.get()))
    }

    /// Writes element `i`.
    #[inline]
    pub fn set(&self, i: u32, v: T) -> Result<(), KernelFault> {
        self.cell(i)?.set(v.to_bits());
        Ok(())
    }
    /// A workgroup array holding `data`, for a `#[device]` function's Rust form.
    pub fn from_values(data: &[T], kernel: &'static str, name: &'static str) -> Self {
        HostShared {
            cells: cells_of(data),
            kernel,
            name,
            _t: std::marker::PhantomData,
        }
    }

    /// Writes the array back into `data` (same length), after a `#[device]` function ran.
    pub fn copy_into(&self, data: &mut [T]) {
        copy_back(&self.cells, data);
    }
}

impl<T: AtomicElem> HostShared<T> {
    /// An atomic read-modify-write; returns the old value. A workgroup's invocations run on
    /// one thread, each up to its next barrier, so a plain read-modify-write is atomic here.
    pub fn atomic(&self, op: AtomicRmw, i: u32, v: T) -> Result<T, KernelFault> {
        let c = self.cell(i)?;
        let old = T::from_bits(c.get());
        c.set(T::rmw(op, old, v).to_bits());
        Ok(old)
    }

    /// Strong compare-exchange; returns the old value.
    pub fn compare_exchange(&self, i: u32, expected: T, v: T) -> Result<T, KernelFault> {
        let c = self.cell(i)?;
        let old = T::from_bits(c.get());
        if old == expected {
            c.set(v.to_bits());
        }
        Ok(old)
    }
}

/// The fault of an index past a per-invocation array, as for slices.
#[cold]
fn array_fault(index: u32, len: usize, kernel: &'static str, name: &'static str) -> KernelFault {
    KernelFault {
        kernel,
        target: name,
        kind: FaultKind::OutOfBounds {
            index,
            len: len as u32,
        },
    }
}

/// Reads element `i` of per-invocation array `name`, checked like a slice.
#[inline]
pub fn array_get<T: Copy, const N: usize>(
    a: &[T; N],
    i: u32,
    kernel: &'static str,
    name: &'static str,
) -> Result<T, KernelFault> {
    a.get(i as usize)
        .copied()
        .ok_or_else(|| array_fault(i, N, kernel, name))
}

/// Writes element `i` of per-invocation array `name`, checked like a slice.
#[inline]
pub fn array_set<T, const N: usize>(
    a: &mut [T; N],
    i: u32,
    v: T,
    kernel: &'static str,
    name: &'static str,
) -> Result<(), KernelFault> {
    match a.get_mut(i as usize) {
        Some(e) => {
            *e = v;
            Ok(())
        }
        None => Err(array_fault(i, N, kernel, name)),
    }
}

/// One invocation of a kernel that uses `barrier()`.
pub type Task<'a> = Pin<Box<dyn Future<Output = Result<(), KernelFault>> + 'a>>;

/// `barrier()` on the host: yields once, so the workgroup's other invocations catch up.
pub fn barrier() -> Barrier {
    Barrier { yielded: false }
}

/// The future returned by [`barrier`].
pub struct Barrier {
    yielded: bool,
}

impl Future for Barrier {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            Poll::Ready(())
        } else {
            self.yielded = true;
            Poll::Pending
        }
    }
}

/// Runs one invocation alone to its end (a `#[device]` function's Rust form that reaches a
/// barrier): with no other invocation to wait for, every barrier passes at once.
pub fn run_alone<T>(f: impl Future<Output = Result<T, KernelFault>>) -> Result<T, KernelFault> {
    let mut cx = Context::from_waker(Waker::noop());
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(r) = f.as_mut().poll(&mut cx) {
            return r;
        }
    }
}

/// Runs a workgroup's invocations in rounds: each round polls every live invocation up to its
/// next barrier. A round where some finish and others wait is a divergent barrier.
pub fn run_workgroup(mut tasks: Vec<Task<'_>>, kernel: &'static str) -> Result<(), KernelFault> {
    let mut cx = Context::from_waker(Waker::noop());
    let mut live: Vec<bool> = vec![true; tasks.len()];
    loop {
        let (mut waiting, mut finished) = (0usize, 0usize);
        for (t, alive) in tasks.iter_mut().zip(live.iter_mut()) {
            if !*alive {
                continue;
            }
            match t.as_mut().poll(&mut cx) {
                Poll::Ready(r) => {
                    r?;
                    *alive = false;
                    finished += 1;
                }
                Poll::Pending => waiting += 1,
            }
        }
        if waiting == 0 {
            return Ok(());
        }
        if finished > 0 || live.iter().filter(|a| **a).count() != waiting {
            return Err(KernelFault {
                kernel,
                target: "barrier",
                kind: FaultKind::DivergentBarrier,
            });
        }
    }
}

/// `data` as the words a buffer of `T` holds (16-bit types two to a word), for a
/// `#[device]` function's Rust form.
pub fn cells_of<T: Element>(data: &[T]) -> Vec<Cell<u32>> {
    let bits: Vec<u32> = data.iter().map(|v| v.to_bits()).collect();
    crate::dtype::pack(T::DTYPE, &bits)
        .into_iter()
        .map(Cell::new)
        .collect()
}

/// Writes `cells` back into `data` (same length), after a `#[device]` function ran.
pub fn copy_back<T: Element>(cells: &[Cell<u32>], data: &mut [T]) {
    let words: Vec<u32> = cells.iter().map(Cell::get).collect();
    let bits = crate::dtype::unpack(T::DTYPE, &words, 0, data.len());
    for (d, b) in data.iter_mut().zip(bits) {
        *d = T::from_bits(b);
    }
}

/// Integer division as WGSL defines it: `x / 0 == x`, `MIN / -1 == MIN`.
pub fn div_i32(a: i32, b: i32) -> i32 {
    if b == 0 {
        a
    } else {
        a.wrapping_div(b)
    }
}
/// Remainder as WGSL defines it: `x % 0 == 0`, `MIN % -1 == 0`.
pub fn rem_i32(a: i32, b: i32) -> i32 {
    if b == 0 {
        0
    } else {
        a.wrapping_rem(b)
    }
}
/// `x / 0 == x`.
pub fn div_u32(a: u32, b: u32) -> u32 {
    a.checked_div(b).unwrap_or(a)
}
/// `x % 0 == 0`.
pub fn rem_u32(a: u32, b: u32) -> u32 {
    a.checked_rem(b).unwrap_or(0)
}

/// The capture-key bits of a `#[key]` parameter that is not a `bool` or an integer: a hash
/// with fixed keys, so equal values give equal keys within a process.
pub fn key_hash<T: std::hash::Hash + ?Sized>(value: &T) -> u64 {
    use std::hash::Hasher;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}
