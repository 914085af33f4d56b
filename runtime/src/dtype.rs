//! Element types of buffers and kernel scalars.

pub use half::{bf16, f16};

/// The element types kernels compute with (`Bool` only as a scalar argument).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit float.
    F32,
    /// 32-bit signed integer.
    I32,
    /// 32-bit unsigned integer.
    U32,
    /// Boolean (scalar arguments only; stored as a `u32` 0/1).
    Bool,
    /// IEEE 754 binary16 ([`half::f16`](struct@half::f16)): two to a 32-bit word in buffers.
    F16,
    /// bfloat16 ([`half::bf16`], the upper half of an `f32`): two to a 32-bit word in buffers.
    BF16,
}

impl DType {
    /// The Rust name of the type.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::Bool => "bool",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        }
    }

    /// Bytes of one buffer element (a scalar argument always takes one 32-bit word).
    pub fn size(self) -> usize {
        match self {
            DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::I32 | DType::U32 | DType::Bool => 4,
        }
    }

    /// Whether two elements share each 32-bit word of a buffer (`f16`, `bf16`).
    pub fn is_half(self) -> bool {
        self.size() == 2
    }
}

/// A value that travels as one 32-bit word: kernel scalars (a 16-bit type in the low half,
/// the high half zero) and, through [`Element`], buffer elements.
pub trait Scalar: Copy + Send + Sync + std::fmt::Debug + PartialEq + 'static {
    /// Its [`DType`].
    const DTYPE: DType;
    /// The value's bits (a 16-bit type's in the low half).
    fn to_bits(self) -> u32;
    /// The value from its bits (a 16-bit type's from the low half).
    fn from_bits(bits: u32) -> Self;
}

/// A buffer element type (`f32`, `i32`, `u32`, [`f16`](struct@f16), [`bf16`]).
pub trait Element: Scalar + bytemuck::Pod {}

macro_rules! scalar {
    ($t:ty, $d:ident, $to:expr, $from:expr) => {
        impl Scalar for $t {
            const DTYPE: DType = DType::$d;
            fn to_bits(self) -> u32 {
                ($to)(self)
            }
            fn from_bits(bits: u32) -> Self {
                ($from)(bits)
            }
        }
    };
}
scalar!(f32, F32, |v: f32| v.to_bits(), f32::from_bits);
scalar!(i32, I32, |v: i32| v as u32, |b: u32| b as i32);
scalar!(u32, U32, |v: u32| v, |b: u32| b);
scalar!(bool, Bool, |v: bool| v as u32, |b: u32| b != 0);
scalar!(f16, F16, |v: f16| u32::from(v.to_bits()), |b: u32| {
    f16::from_bits(b as u16)
});
scalar!(bf16, BF16, |v: bf16| u32::from(v.to_bits()), |b: u32| {
    bf16::from_bits(b as u16)
});
impl Element for f32 {}
impl Element for i32 {}
impl Element for u32 {}
impl Element for f16 {}
impl Element for bf16 {}

/// Packs element bits (one element's in each `u32`, low half for 16-bit types) into the
/// words a buffer of `dtype` holds: element `i` of a 16-bit type in the low half of word
/// `i / 2` when `i` is even, the high half when odd (little-endian, as on every backend). An
/// odd count leaves the last word's high half zero.
pub(crate) fn pack(dtype: DType, bits: &[u32]) -> Vec<u32> {
    if !dtype.is_half() {
        return bits.to_vec();
    }
    bits.chunks(2)
        .map(|c| (c[0] & 0xffff) | (c.get(1).copied().unwrap_or(0) & 0xffff) << 16)
        .collect()
}

/// The element bits of `len` elements of `dtype` starting at element `first` of `words`
/// (`first` < 2 for a 16-bit type, 0 otherwise): the inverse of [`pack`].
pub(crate) fn unpack(dtype: DType, words: &[u32], first: usize, len: usize) -> Vec<u32> {
    if !dtype.is_half() {
        return words[first..first + len].to_vec();
    }
    (first..first + len)
        .map(|i| (words[i / 2] >> (16 * (i % 2))) & 0xffff)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_pack_little_endian_and_unpack_at_any_offset() {
        let bits = [0x1111, 0x2222, 0x3333];
        assert_eq!(pack(DType::F16, &bits), vec![0x2222_1111, 0x0000_3333]);
        let words = [0xbbbb_aaaa, 0xdddd_cccc];
        assert_eq!(
            unpack(DType::BF16, &words, 1, 3),
            vec![0xbbbb, 0xcccc, 0xdddd]
        );
        assert_eq!(unpack(DType::F16, &words, 0, 0), Vec::<u32>::new());
        // The memory layout of `[f16]` on the host is the same packing.
        let h = [f16::from_f32(1.0), f16::from_f32(-2.0), f16::from_f32(0.5)];
        let host: Vec<u16> = bytemuck::cast_slice(&h).to_vec();
        let mine = pack(DType::F16, &h.map(|v| u32::from(v.to_bits())));
        assert_eq!(
            bytemuck::cast_slice::<u32, u16>(&mine)[..3],
            host[..],
            "pack must match the host's memory layout"
        );
    }

    #[test]
    fn scalars_of_16_bit_types_travel_in_the_low_half() {
        assert_eq!(f16::from_f32(1.0).to_bits_u32(), 0x3c00);
        assert_eq!(bf16::from_f32(1.0).to_bits_u32(), 0x3f80);
        assert_eq!(<f16 as Scalar>::from_bits(0xdead_3c00), f16::ONE);
        assert_eq!(
            <bf16 as Scalar>::from_bits(0xffff_c000),
            bf16::from_f32(-2.0)
        );
    }

    trait Bits32 {
        fn to_bits_u32(self) -> u32;
    }
    impl<T: Scalar> Bits32 for T {
        fn to_bits_u32(self) -> u32 {
            Scalar::to_bits(self)
        }
    }
}
