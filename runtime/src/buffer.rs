//! Typed device buffers and the untyped views that launches and plans bind.

use std::marker::PhantomData;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::backend::Memory;
use crate::device::Device;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Bytes of `words` 32-bit words, or `None` past what one allocation may hold: `isize::MAX`
/// bytes, Rust's own limit, checked before any backend sees the count.
pub(crate) fn word_bytes(words: usize) -> Option<u64> {
    (words as u64)
        .checked_mul(4)
        .filter(|&b| b <= isize::MAX as u64)
}

/// The 32-bit words a buffer of `len` elements of `dtype` takes: 16-bit elements two to a
/// word, an odd count rounded up to a whole word.
pub(crate) fn words_for(dtype: DType, len: usize) -> usize {
    if dtype.is_half() {
        len.div_ceil(2)
    } else {
        len
    }
}

/// One device allocation. Freed when the last handle (buffer, view, recording) drops.
pub struct RawBuffer {
    pub(crate) id: u64,
    pub(crate) words: usize,
    /// Bytes of the elements asked for (less than `words * 4` by the padding half of an odd
    /// count of 16-bit elements, which no element uses).
    pub(crate) data_bytes: u64,
    pub(crate) mem: Memory,
    pub(crate) device: Device,
    /// The holder (id, step name) whose static slot this is, if it is one: usable only
    /// through that step's context or the `Out` its call returned.
    pub(crate) slot: Option<(u64, &'static str)>,
}

impl RawBuffer {
    pub(crate) fn new(
        device: Device,
        words: usize,
        data_bytes: u64,
        mem: Memory,
        slot: Option<(u64, &'static str)>,
    ) -> Self {
        // `Device::alloc_raw` refused counts past `word_bytes`, so this cannot saturate.
        let bytes = word_bytes(words).unwrap_or(u64::MAX);
        let now = device
            .inner
            .allocated
            .fetch_add(bytes, Ordering::Relaxed)
            .saturating_add(bytes);
        device.inner.peak.fetch_max(now, Ordering::Relaxed);
        RawBuffer {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            words,
            data_bytes,
            mem,
            device,
            slot,
        }
    }
    /// Size in bytes (whole 32-bit words).
    pub fn bytes(&self) -> u64 {
        word_bytes(self.words).unwrap_or(u64::MAX)
    }
}

impl Drop for RawBuffer {
    fn drop(&mut self) {
        self.device
            .inner
            .allocated
            .fetch_sub(self.bytes(), Ordering::Relaxed);
    }
}

impl std::fmt::Debug for RawBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RawBuffer#{}({} bytes)", self.id, self.bytes())
    }
}

/// An untyped view (element offset and length) of an allocation.
#[derive(Clone, Debug)]
pub struct RawView {
    pub(crate) buf: Arc<RawBuffer>,
    pub(crate) offset: usize,
    pub(crate) len: usize,
    pub(crate) dtype: DType,
}

impl RawView {
    /// The allocation's identity (stable for its lifetime).
    pub fn buffer_id(&self) -> u64 {
        self.buf.id
    }
    /// Element offset into the allocation.
    pub fn offset(&self) -> usize {
        self.offset
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the view is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// The first 32-bit word of the allocation the view touches, and how many it touches.
    pub(crate) fn word_span(&self) -> (usize, usize) {
        if !self.dtype.is_half() {
            return (self.offset, self.len);
        }
        let first = self.offset / 2;
        (first, (self.offset + self.len).div_ceil(2) - first)
    }

    /// A `u32` view of the words this view touches (halves of neighbours included).
    pub(crate) fn covering_words(&self) -> RawView {
        let (offset, len) = self.word_span();
        RawView {
            buf: self.buf.clone(),
            offset,
            len,
            dtype: if self.dtype.is_half() {
                DType::U32
            } else {
                self.dtype
            },
        }
    }

    /// The view as whole 32-bit words (itself, for a 32-bit type), or `None` where a 16-bit
    /// view starts or ends inside a word whose other half belongs to another element: the
    /// backends transfer and copy whole words only.
    pub(crate) fn as_words(&self) -> Option<RawView> {
        if !self.dtype.is_half() {
            return Some(self.clone());
        }
        let end = self.offset + self.len;
        let tail_free = end % 2 == 0 || end as u64 * 2 == self.buf.data_bytes;
        (self.offset % 2 == 0 && tail_free).then(|| self.covering_words())
    }

    /// Offset of the view's first element inside its first word, in elements (0 or 1).
    pub(crate) fn first_in_word(&self) -> usize {
        if self.dtype.is_half() {
            self.offset % 2
        } else {
            0
        }
    }

    /// The bytes of the allocation the view covers, `[start, end)`.
    pub(crate) fn byte_span(&self) -> (usize, usize) {
        let size = self.dtype.size();
        (self.offset * size, (self.offset + self.len) * size)
    }

    /// Whether the two views share a byte of one allocation (views of different element
    /// types compared by their bytes: see [`Buffer::words`]).
    pub(crate) fn overlaps(&self, other: &RawView) -> bool {
        let ((a0, a1), (b0, b1)) = (self.byte_span(), other.byte_span());
        self.buf.id == other.buf.id && a0 < b1 && b0 < a1
    }
}

/// A typed view of device memory: `len` elements of `T`.
///
/// A `Buffer` is a handle: `clone()` and [`Buffer::slice`] make more views of the same
/// allocation, which lives until the last handle (or a recording that uses it) is dropped.
pub struct Buffer<T: Element> {
    view: RawView,
    _t: PhantomData<T>,
}

impl<T: Element> Clone for Buffer<T> {
    fn clone(&self) -> Self {
        Buffer {
            view: self.view.clone(),
            _t: PhantomData,
        }
    }
}

impl<T: Element> std::fmt::Debug for Buffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Buffer<{}>(#{}[{}..{}])",
            T::DTYPE.name(),
            self.view.buf.id,
            self.view.offset,
            self.view.offset + self.view.len
        )
    }
}

impl<T: Element> Buffer<T> {
    pub(crate) fn from_raw(buf: Arc<RawBuffer>, offset: usize, len: usize) -> Self {
        Buffer {
            view: RawView {
                buf,
                offset,
                len,
                dtype: T::DTYPE,
            },
            _t: PhantomData,
        }
    }

    /// Rebuilds a typed buffer from an untyped view; fails on a dtype mismatch.
    pub fn try_from_view(view: RawView) -> Result<Self> {
        if view.dtype != T::DTYPE {
            return Err(Error::Shape(format!(
                "expected a buffer of {}, found {}",
                T::DTYPE.name(),
                view.dtype.name()
            )));
        }
        Ok(Buffer {
            view,
            _t: PhantomData,
        })
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.view.len
    }

    /// Whether the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.view.len == 0
    }

    /// The device this buffer lives on.
    pub fn device(&self) -> &Device {
        &self.view.buf.device
    }

    /// The same bytes as 32-bit words: a `Buffer<u32>` sharing this allocation, so that a
    /// kernel can load two 16-bit elements at once. For a 16-bit type (`bf16`, `f16`), elements
    /// `2i` and `2i + 1` are the low and high half of word `i`; for a 32-bit type, `len` words of
    /// the same bits. `None` for a 16-bit view that starts or ends inside a word whose other
    /// half is another element (an odd end is fine where it is the allocation's end: the last
    /// word's high half is padding).
    ///
    /// The words alias the elements: a launch that writes one of the two views and binds the
    /// other is refused like any pair of overlapping views.
    pub fn words(&self) -> Option<Buffer<u32>> {
        let view = self.view.as_words()?;
        Some(Buffer {
            view: RawView {
                dtype: DType::U32,
                ..view
            },
            _t: PhantomData,
        })
    }

    /// The untyped view launches bind.
    pub fn raw_view(&self) -> RawView {
        self.view.clone()
    }

    /// The allocation's identity: a state buffer replaced by another allocation is another key.
    pub fn buffer_id(&self) -> u64 {
        self.view.buf.id
    }

    /// A view of `range` (in elements) sharing this allocation.
    pub fn slice(&self, range: Range<usize>) -> Result<Buffer<T>> {
        if range.start > range.end || range.end > self.view.len {
            return Err(Error::Shape(format!(
                "slice {}..{} of a buffer of length {}",
                range.start, range.end, self.view.len
            )));
        }
        Ok(Buffer::from_raw(
            self.view.buf.clone(),
            self.view.offset + range.start,
            range.end - range.start,
        ))
    }

    /// Copies the contents to the host (waits for pending work on the device).
    pub fn to_host(&self) -> Result<Vec<T>> {
        let bits = self.device().read_elements(&self.view)?;
        Ok(bits.into_iter().map(T::from_bits).collect())
    }

    /// Overwrites the contents with `data` (same length).
    pub fn write(&self, data: &[T]) -> Result<()> {
        if data.len() != self.len() {
            return Err(Error::Shape(format!(
                "write of {} elements into a buffer of {}",
                data.len(),
                self.len()
            )));
        }
        if T::DTYPE.is_half() {
            let bits: Vec<u32> = data.iter().map(|v| v.to_bits()).collect();
            self.device().write_elements(&self.view, &bits)
        } else {
            self.device()
                .write_elements(&self.view, bytemuck::cast_slice(data))
        }
    }

    /// Sets every element to `value`.
    pub fn fill(&self, value: T) -> Result<()> {
        self.device().fill_elements(&self.view, value.to_bits())
    }

    /// Copies `src` into this buffer (same length, same device).
    pub fn copy_from(&self, src: &Buffer<T>) -> Result<()> {
        self.device().copy_elements(&src.view, &self.view)
    }
}
