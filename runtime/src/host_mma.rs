//! The host backend's `mma_m16n8k16` (what it means, the fragment layout and the rounding:
//! `graphed_lang::kernel::mma`).
//!
//! As for subgroup operations ([`crate::host_subgroup`]), a workgroup's invocations are
//! futures polled in rounds and the call stands where every invocation reaches it together.
//! So it is an exchange: every invocation writes its fragments of `A` and `B` (widened to
//! `f32`, exactly) into the workgroup's slots and yields; in the next round each computes its
//! four accumulator elements from its group's slots and yields again, so no one overwrites a
//! slot another has still to read. `ldmatrix_x4` exchanges its rows the same way.

use std::cell::Cell;

use crate::host_exec::barrier;

/// Invocations of an MMA group.
const GROUP: u32 = 32;
/// Slots per invocation: its 8 elements of `A`, then its 4 of `B`.
const SLOTS: usize = 12;

/// One workgroup's exchange slots for `mma_m16n8k16`.
pub struct HostMma {
    slots: Vec<Cell<f32>>,
    /// `ldmatrix_x4`'s exchange: each invocation's row.
    rows: Vec<Cell<u32>>,
}

impl HostMma {
    /// Slots for a one-dimensional workgroup of `invocations` (a multiple of 32: the kernel
    /// language checks).
    pub fn new(invocations: u32) -> HostMma {
        HostMma {
            slots: (0..invocations as usize * SLOTS)
                .map(|_| Cell::new(0.0))
                .collect(),
            rows: (0..invocations).map(|_| Cell::new(0)).collect(),
        }
    }

    /// `mma_m16n8k16(&a, &b, &mut acc)` of the invocation at linear local index `li`: `acc[i]`
    /// plus its 16 products added one at a time in increasing `k`, each sum rounded to `f32`
    /// (the products of 16-bit values are exact).
    pub async fn m16n8k16<T: Copy + Into<f32>>(
        &self,
        li: u32,
        a: &[T; 8],
        b: &[T; 4],
        acc: &mut [f32; 4],
    ) {
        let own = li as usize * SLOTS;
        for (e, v) in a.iter().chain(b).enumerate() {
            self.slots[own + e].set((*v).into());
        }
        barrier().await;
        let lane = li % GROUP;
        let base = li - lane;
        let (g, t) = (lane / 4, lane % 4);
        for (i, c) in acc.iter_mut().enumerate() {
            let i = i as u32;
            let mut sum = *c;
            for k in 0..16u32 {
                // Element `k % 2 + 2·(i / 2) + 4·(k / 8)` of lane `4g + (k % 8) / 2` holds
                // `A[g + 8·(i / 2)][k]`; element `k % 2 + 2·(k / 8)` of lane
                // `4·(2t + i % 2) + (k % 8) / 2` holds `B[k][2t + i % 2]`.
                let kt = (k % 8) / 2;
                let la = (base + 4 * g + kt) as usize;
                let lb = (base + 4 * (2 * t + i % 2) + kt) as usize;
                let ea = (k % 2 + 2 * (i / 2) + 4 * (k / 8)) as usize;
                let eb = (k % 2 + 2 * (k / 8)) as usize;
                sum += self.slots[la * SLOTS + ea].get() * self.slots[lb * SLOTS + 8 + eb].get();
            }
            *c = sum;
        }
        barrier().await;
    }

    /// The exchange of `ldmatrix_x4(s, p, &mut w)` for the invocation at linear local index
    /// `li` naming row `row` (aligned and clamped already): the rows lanes `8j + l / 4` of its
    /// group named, `j` in `0..4`, from which it takes word `l % 4` each
    /// (`graphed_lang::kernel::ldmatrix`).
    pub async fn ldmatrix_rows(&self, li: u32, row: u32) -> [u32; 4] {
        self.rows[li as usize].set(row);
        barrier().await;
        let lane = li % GROUP;
        let base = li - lane;
        let rows =
            std::array::from_fn(|j| self.rows[(base + 8 * j as u32 + lane / 4) as usize].get());
        barrier().await;
        rows
    }
}
