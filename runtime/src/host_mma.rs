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

use crate::error::KernelFault;
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

    /// `ldmatrix_x4(s, p, &mut w)` (`trans`: `ldmatrix_x4_trans`) of the invocation at linear
    /// local index `li` naming row `row` (aligned and clamped already), `read(i)` the word
    /// `s[i]`: the words it receives of the rows its group's lanes named
    /// (`graphed_lang::kernel::ldmatrix`).
    pub async fn ldmatrix_x4(
        &self,
        li: u32,
        row: u32,
        trans: bool,
        read: impl Fn(u32) -> Result<u32, KernelFault>,
    ) -> Result<[u32; 4], KernelFault> {
        self.rows[li as usize].set(row);
        barrier().await;
        let lane = li % GROUP;
        let row_of = |lane_of: u32| self.rows[(li - lane + lane_of) as usize].get();
        let (g, t) = (lane / 4, lane % 4);
        let mut w = [0u32; 4];
        let mut got = Ok(());
        for (j, word) in w.iter_mut().enumerate() {
            let m = 8 * j as u32;
            let v = if trans {
                // Column `g` of rows `2t` and `2t + 1`: value `g` is half `g % 2` of word `g / 2`.
                let half =
                    |r: u32| read(row_of(m + r) + g / 2).map(|v| (v >> (16 * (g % 2))) & 0xffff);
                half(2 * t).and_then(|lo| half(2 * t + 1).map(|hi| lo | (hi << 16)))
            } else {
                read(row_of(m + g) + t)
            };
            match v {
                Ok(v) => *word = v,
                Err(e) => {
                    got = Err(e);
                    break;
                }
            }
        }
        // The second barrier even after a fault, so no invocation waits for this one forever.
        barrier().await;
        got.map(|()| w)
    }
}
