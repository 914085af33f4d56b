//! Rebinding: re-pointing a recording's inputs and state to other allocations of the same
//! shape, instead of copying (device inputs) or recording again (state).
//!
//! A recording has *ports*: each input slot, then each state view. Where the plan binds a
//! view inside a port's region is a *site*, found once when the recording is made; rebinding
//! a port re-points each of its sites (the view, and the argument word holding its offset)
//! relative to the port's new view. The backend then re-points what it built from those ops
//! (host: the op list; wgpu: bind groups; CUDA: kernel-node parameters).

use crate::buffer::RawView;
use crate::plan::Plan;

/// Where a port's view is bound in the plan.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Site {
    op: usize,
    which: usize,
    /// Element offset of the bound view from the port's view.
    rel: usize,
}

/// The sites of every port, and whether the state ports can be rebound at all.
pub(crate) struct Sites {
    ports: Vec<Vec<Site>>,
    /// False where the plan binds a state's allocation outside every state view (the body
    /// reached it another way, e.g. a clone it captured): re-pointing the state would move
    /// that use too, so another allocation records anew instead.
    pub(crate) states_rebindable: bool,
}

impl Sites {
    /// Finds the sites of `ports` (inputs' slots, then state views) in `plan`. `states` is the
    /// index of the first state port.
    pub(crate) fn find(plan: &Plan, ports: &[RawView], states: usize) -> Sites {
        let mut out = vec![Vec::new(); ports.len()];
        let mut states_rebindable = true;
        for (op_i, op) in plan.ops.iter().enumerate() {
            for (which, v) in op.views().into_iter().enumerate() {
                let port = ports.iter().position(|p| {
                    p.buf.id == v.buf.id
                        && p.offset <= v.offset
                        && v.offset + v.len <= p.offset + p.len
                });
                match port {
                    Some(p) => out[p].push(Site {
                        op: op_i,
                        which,
                        rel: v.offset - ports[p].offset,
                    }),
                    None => {
                        if ports[states..].iter().any(|p| p.buf.id == v.buf.id) {
                            states_rebindable = false;
                        }
                    }
                }
            }
        }
        Sites {
            ports: out,
            states_rebindable,
        }
    }

    /// Re-points the sites of port `port` (bound now to `old`) to `new` in `plan`; appends the
    /// ops changed to `ops` and the argument words changed (launch, word, bits) to `words`.
    /// Returns false (and changes nothing) where an offset would not fit an argument word.
    pub(crate) fn repoint(
        &self,
        plan: &mut Plan,
        port: usize,
        new: &RawView,
        ops: &mut Vec<usize>,
        words: &mut Vec<(usize, usize, u32)>,
    ) -> bool {
        let fits = self.ports[port].iter().all(|s| {
            let len = plan.ops[s.op].views()[s.which].len;
            new.offset + s.rel + len <= u32::MAX as usize
        });
        if !fits {
            return false;
        }
        for s in &self.ports[port] {
            let (view, word) = plan.ops[s.op].view_mut(s.which);
            *view = RawView {
                buf: new.buf.clone(),
                offset: new.offset + s.rel,
                len: view.len,
                dtype: view.dtype,
            };
            if let Some((launch, word)) = word {
                let bits = view.offset as u32;
                plan.launch_args[launch][word] = bits;
                words.push((launch, word, bits));
            }
            if !ops.contains(&s.op) {
                ops.push(s.op);
            }
        }
        true
    }
}

/// Renames the plan's buffers (for inspection) from old allocations to new ones, all at once:
/// a swap of two states stays a swap.
pub(crate) fn rename(plan: &mut Plan, pairs: &[(u64, &RawView)]) {
    for b in &mut plan.buffers {
        if let Some((_, new)) = pairs.iter().find(|(old, _)| *old == b.id) {
            b.id = new.buf.id;
            b.bytes = new.buf.bytes();
        }
    }
}
