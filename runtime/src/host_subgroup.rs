//! The host backend's emulation of subgroup operations (what they mean:
//! `graphed_lang::kernel::subgroup`).
//!
//! A workgroup's invocations run as futures polled in rounds (see
//! [`crate::host_exec::run_workgroup`]), and the kernel language only lets subgroup
//! operations stand where every invocation of the workgroup reaches them together. So an
//! operation is an exchange: every invocation writes its value into the workgroup's slots
//! and yields; in the next round each computes its result from its subgroup's slots (the same
//! xor butterfly the GPU targets run) and yields again, so no one overwrites a slot that
//! another has still to read.

use std::cell::Cell;

use crate::host_exec::barrier;

/// The subgroup size of host devices unless chosen ([`crate::Device::host_with_subgroup_size`]):
/// CUDA's warp and NVIDIA Vulkan's subgroup.
pub const DEFAULT_HOST_SUBGROUP: u32 = 32;

/// A value a subgroup operation exchanges (`f32`, `i32`, `u32`), as bits.
pub trait SubgroupValue: Copy {
    /// The value's bits.
    fn to_bits(self) -> u32;
    /// The value of `bits`.
    fn from_bits(bits: u32) -> Self;
}

impl SubgroupValue for f32 {
    fn to_bits(self) -> u32 {
        f32::to_bits(self)
    }
    fn from_bits(bits: u32) -> Self {
        f32::from_bits(bits)
    }
}

impl SubgroupValue for u32 {
    fn to_bits(self) -> u32 {
        self
    }
    fn from_bits(bits: u32) -> Self {
        bits
    }
}

impl SubgroupValue for i32 {
    fn to_bits(self) -> u32 {
        self as u32
    }
    fn from_bits(bits: u32) -> Self {
        bits as i32
    }
}

/// Which lane a shuffle reads (outside the subgroup: the invocation's own value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shuffle {
    /// Lane `operand`.
    Index,
    /// Lane `lane ^ operand`.
    Xor,
    /// Lane `lane - operand`.
    Up,
    /// Lane `lane + operand`.
    Down,
}

/// One workgroup's exchange slots for subgroup operations.
pub struct HostSubgroups {
    size: u32,
    slots: Vec<Cell<u32>>,
}

impl HostSubgroups {
    /// Slots for a workgroup of `invocations` (a multiple of `size`: the runtime checks
    /// before launching) in subgroups of `size`.
    pub fn new(size: u32, invocations: u32) -> HostSubgroups {
        HostSubgroups {
            size,
            slots: (0..invocations).map(|_| Cell::new(0)).collect(),
        }
    }

    /// `subgroup_size()`.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// `subgroup_invocation_id()` of the invocation at linear local index `li`.
    pub fn lane(&self, li: u32) -> u32 {
        li % self.size
    }

    /// Publishes `v` and waits for the rest of the workgroup; returns the subgroup's values.
    async fn exchange<T: SubgroupValue>(&self, li: u32, v: T) -> Vec<T> {
        self.slots[li as usize].set(v.to_bits());
        barrier().await;
        let base = (li - self.lane(li)) as usize;
        let values = self.slots[base..base + self.size as usize]
            .iter()
            .map(|c| T::from_bits(c.get()))
            .collect();
        barrier().await;
        values
    }

    /// A reduction over the subgroup: the xor butterfly with `op`, as on every GPU target.
    pub async fn reduce<T: SubgroupValue>(&self, li: u32, v: T, op: impl Fn(T, T) -> T) -> T {
        let mut values = self.exchange(li, v).await;
        let mut m = 1;
        while m < values.len() {
            values = (0..values.len())
                .map(|j| op(values[j], values[j ^ m]))
                .collect();
            m <<= 1;
        }
        values[self.lane(li) as usize]
    }

    /// A shuffle: `v` of the lane `kind` and `operand` select, or the invocation's own `v`
    /// where that lane lies outside the subgroup.
    pub async fn shuffle<T: SubgroupValue>(&self, li: u32, v: T, kind: Shuffle, operand: u32) -> T {
        let values = self.exchange(li, v).await;
        let lane = self.lane(li);
        let src = match kind {
            Shuffle::Index => Some(operand),
            Shuffle::Xor => Some(lane ^ operand),
            Shuffle::Up => lane.checked_sub(operand),
            Shuffle::Down => lane.checked_add(operand),
        };
        match src {
            Some(s) if s < self.size => values[s as usize],
            _ => v,
        }
    }
}
