//! Element types of buffers and kernel scalars.

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
}

impl DType {
    /// The Rust name of the type.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::Bool => "bool",
        }
    }
}

/// A value that travels as one 32-bit word: buffer elements and kernel scalars.
pub trait Scalar: Copy + Send + Sync + std::fmt::Debug + PartialEq + 'static {
    /// Its [`DType`].
    const DTYPE: DType;
    /// The value's bits.
    fn to_bits(self) -> u32;
    /// The value from its bits.
    fn from_bits(bits: u32) -> Self;
}

/// A buffer element type (`f32`, `i32`, `u32`).
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
impl Element for f32 {}
impl Element for i32 {}
impl Element for u32 {}
