//! Liveness packing: a recording's workspaces and outputs share one arena, each placed where
//! no buffer live at the same time (in the plan's op order) sits, so a recording holds no
//! more than an eager step's peak. The recordings of one holder share one such arena, sized
//! to the largest (`Config::share_arena`; the growth rule is the holder's).
//!
//! A buffer is live from the first op that touches it to the last; an output the step returns
//! stays live to the end (the caller reads it after the replay). Inputs and state are never
//! packed: an input slot is written before the replay and may be rebound to a device buffer,
//! state belongs to the user.

use std::collections::HashMap;
use std::sync::Arc;

use crate::buffer::{RawBuffer, RawView};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::plan::{BufferRole, Plan};

/// Placement alignment in 32-bit words (16 bytes, as argument blocks). (Measured on the H200:
/// 128- or 256-byte placement made no step faster.)
const ALIGN: usize = 4;

/// One packed buffer: its live range over op indices and its size in words.
#[derive(Clone, Copy, Debug)]
struct Interval {
    first: usize,
    last: usize,
    words: usize,
}

/// A sort key over intervals: one order of first-fit placement.
type OrderKey = fn(&Interval) -> (usize, usize, usize);

/// First-fit placement in a few orders (largest first; earliest first; longest-lived
/// first), keeping the smallest arena: the word offset of each interval and the arena's words.
fn place(intervals: &[Interval]) -> (Vec<usize>, usize) {
    let orders: [OrderKey; 3] = [
        |i| (usize::MAX - i.words, i.first, 0),
        |i| (i.first, usize::MAX - i.words, 0),
        |i| {
            (
                usize::MAX - (i.last - i.first.min(i.last)),
                usize::MAX - i.words,
                i.first,
            )
        },
    ];
    orders
        .iter()
        .map(|key| {
            let mut order: Vec<usize> = (0..intervals.len()).collect();
            order.sort_by_key(|&i| key(&intervals[i]));
            place_in(intervals, &order)
        })
        .min_by_key(|(_, total)| *total)
        .unwrap_or_default()
}

/// First-fit placement of `intervals` taken in `order`.
fn place_in(intervals: &[Interval], order: &[usize]) -> (Vec<usize>, usize) {
    let mut at = vec![0usize; intervals.len()];
    let mut placed: Vec<usize> = Vec::new();
    let mut total = 0;
    for &i in order {
        let me = intervals[i];
        // Blocks of buffers live at the same time, by offset.
        let mut busy: Vec<(usize, usize)> = placed
            .iter()
            .filter(|&&j| {
                let o = intervals[j];
                o.first <= me.last && me.first <= o.last
            })
            .map(|&j| (at[j], at[j] + intervals[j].words))
            .collect();
        busy.sort_unstable();
        let mut offset = 0;
        for (lo, hi) in busy {
            if offset + me.words <= lo {
                break;
            }
            offset = offset.max(hi.div_ceil(ALIGN) * ALIGN);
        }
        at[i] = offset;
        total = total.max(offset + me.words);
        placed.push(i);
    }
    (at, total)
}

/// Packs the workspaces and outputs of `plan` into one arena (a static slot of `owner`) and
/// re-points every view of them, `outputs` included, and says where they went.
///
/// `shared`: the arena the holder's other recordings sit in. The plan is placed in it where
/// it fits (its own placement, from offset 0: the recordings of one holder never run at
/// once); where it does not, a new arena of this plan's size is returned, and the caller
/// decides what the older recordings do (the holder's growth rule). A plan that itself
/// touches `shared` (no API hands a view of it out, but it would then read its own
/// workspaces) gets an arena of its own that is not shared.
pub(crate) fn pack(
    device: &Device,
    owner: (u64, &'static str),
    plan: &mut Plan,
    outputs: &mut [RawView],
    shared: Option<&Arc<RawBuffer>>,
) -> Result<Packed> {
    plan.inspect = Some(plan.ops());
    let n = plan.ops.len();
    let returned: Vec<u64> = outputs.iter().map(|o| o.buf.id).collect();
    // Candidate allocations by id: (index into `intervals`, words of the allocation).
    let mut slot: HashMap<u64, usize> = HashMap::new();
    let mut intervals: Vec<Interval> = Vec::new();
    let mut sizes: HashMap<u64, usize> = HashMap::new();
    for op in &plan.ops {
        for v in op.views() {
            sizes.entry(v.buf.id).or_insert(v.buf.words);
        }
    }
    for o in outputs.iter() {
        sizes.entry(o.buf.id).or_insert(o.buf.words);
    }
    for b in &plan.buffers {
        if !matches!(b.role, BufferRole::Workspace | BufferRole::Output) {
            continue;
        }
        let Some(&words) = sizes.get(&b.id) else {
            continue; // never touched, never returned: nothing to hold
        };
        let end = returned.contains(&b.id).then_some(n);
        slot.insert(b.id, intervals.len());
        intervals.push(Interval {
            first: end.unwrap_or(usize::MAX),
            last: end.unwrap_or(0),
            words,
        });
    }
    for (t, op) in plan.ops.iter().enumerate() {
        for v in op.views() {
            if let Some(&i) = slot.get(&v.buf.id) {
                intervals[i].first = intervals[i].first.min(t);
                intervals[i].last = intervals[i].last.max(t);
            }
        }
    }
    let (at, total) = place(&intervals);
    let separate: usize = intervals.iter().map(|i| i.words).sum();
    let touched = shared.is_some_and(|a| {
        plan.ops
            .iter()
            .any(|op| op.views().iter().any(|v| v.buf.id == a.id))
    });
    let shared = shared.filter(|_| !touched);
    let (arena, packed): (Arc<RawBuffer>, Packed) = match shared {
        Some(a) if total > 0 && total <= a.words => (a.clone(), Packed::InShared),
        // Outgrown: a new arena, to be shared from now on, even where the plan alone would
        // gain nothing from packing (the older recordings move into it).
        Some(_) if total > 0 && total <= u32::MAX as usize => {
            match device.alloc_slot(crate::DType::U32, total, owner) {
                Ok(a) => (a, Packed::New { shareable: true }),
                Err(Error::Limit { .. }) => return Ok(Packed::Apart),
                Err(e) => return Err(e),
            }
        }
        _ if total >= separate || total > u32::MAX as usize => return Ok(Packed::Apart),
        _ => match device.alloc_slot(crate::DType::U32, total, owner) {
            Ok(a) => (
                a,
                Packed::New {
                    shareable: !touched,
                },
            ),
            // One buffer of that size is past this adapter's limits: keep them apart.
            Err(Error::Limit { .. }) => return Ok(Packed::Apart),
            Err(e) => return Err(e),
        },
    };
    let moved = |v: &RawView| -> Option<RawView> {
        let i = *slot.get(&v.buf.id)?;
        Some(RawView {
            buf: arena.clone(),
            // `at` is in words; a 16-bit view's offset is in halves.
            offset: at[i] * if v.dtype.is_half() { 2 } else { 1 } + v.offset,
            len: v.len,
            dtype: v.dtype,
        })
    };
    for t in 0..n {
        for which in 0..plan.ops[t].views().len() {
            let (view, word) = plan.ops[t].view_mut(which);
            if let Some(new) = moved(view) {
                if let Some((launch, word)) = word {
                    plan.launch_args[launch][word] = new.offset as u32;
                }
                *view = new;
            }
        }
    }
    for o in outputs.iter_mut() {
        if let Some(new) = moved(o) {
            *o = new;
        }
    }
    for b in &mut plan.buffers {
        if let Some(&i) = slot.get(&b.id) {
            b.arena_offset = Some(at[i] as u64 * 4);
        }
    }
    plan.arena_bytes = arena.bytes();
    plan.arena = Some(arena);
    Ok(packed)
}

/// Where [`pack`] put a plan's workspaces and outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Packed {
    /// Nowhere shared: each kept its own allocation.
    Apart,
    /// In the holder's shared arena (`Plan::arena`).
    InShared,
    /// In a new arena (`Plan::arena`); `shareable` where the holder may share it from now on.
    New { shareable: bool },
}

#[cfg(test)]
mod tests {
    use super::{place, Interval};

    fn iv(first: usize, last: usize, words: usize) -> Interval {
        Interval { first, last, words }
    }

    #[test]
    fn disjoint_live_ranges_share_and_overlapping_ones_do_not() {
        // Two workspaces live at disjoint times take the larger, not the sum.
        let (at, total) = place(&[iv(0, 1, 100), iv(2, 3, 60)]);
        assert_eq!((at, total), (vec![0, 0], 100));
        // Live at once: side by side (aligned to 4 words).
        let (at, total) = place(&[iv(0, 2, 100), iv(2, 3, 61)]);
        assert_eq!((at, total), (vec![0, 100], 161));
        // A chain a→b→c: a and c share, b sits beside them.
        let (at, total) = place(&[iv(0, 1, 10), iv(1, 2, 10), iv(2, 3, 10)]);
        assert_eq!(total, 22);
        assert_eq!(at[0], at[2]);
        assert_eq!(at[1], 12);
    }

    #[test]
    fn placement_never_overlaps_buffers_live_at_once() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |m: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % m as u64) as usize
        };
        for _ in 0..200 {
            let ivs: Vec<Interval> = (0..1 + next(12))
                .map(|_| {
                    let a = next(20);
                    iv(a, a + next(6), 1 + next(50))
                })
                .collect();
            let (at, total) = place(&ivs);
            for i in 0..ivs.len() {
                assert!(at[i] % 4 == 0 && at[i] + ivs[i].words <= total);
                for j in 0..i {
                    let live = ivs[i].first <= ivs[j].last && ivs[j].first <= ivs[i].last;
                    let apart = at[i] + ivs[i].words <= at[j] || at[j] + ivs[j].words <= at[i];
                    assert!(!live || apart, "{ivs:?} placed at {at:?}");
                }
            }
        }
    }
}
