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
    /// Byte offset of the bound view from the port's view (in bytes: a body may bind a
    /// port's memory as another element type, e.g. 16-bit elements as their words).
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
                let (v0, v1) = v.byte_span();
                let port = ports.iter().position(|p| {
                    let (p0, p1) = p.byte_span();
                    p.buf.id == v.buf.id && p0 <= v0 && v1 <= p1
                });
                match port {
                    Some(p) => out[p].push(Site {
                        op: op_i,
                        which,
                        rel: v0 - ports[p].byte_span().0,
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

    /// Whether, with `ports` (index, view) re-pointed, the plan binds one of their allocations
    /// anywhere but at those ports' sites (or two of them share one): only then can the
    /// re-pointing add a conflict between ops.
    pub(crate) fn shares_memory(&self, plan: &Plan, ports: &[(usize, RawView)]) -> bool {
        let mut ids: Vec<u64> = ports.iter().map(|(_, v)| v.buf.id).collect();
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) {
            return true;
        }
        let at_sites: usize = ports.iter().map(|(p, _)| self.ports[*p].len()).sum();
        let bound = plan
            .ops
            .iter()
            .flat_map(|op| op.views())
            .filter(|v| ids.binary_search(&v.buf.id).is_ok())
            .count();
        bound != at_sites
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
        // The new element offset of each site's view, in its own element type; `None` where
        // the bytes do not start on one of its elements or the offset would not fit a word.
        let base = new.byte_span().0;
        let start = |s: &Site| {
            let view = &plan.ops[s.op].views()[s.which];
            let (bytes, size) = (base + s.rel, view.dtype.size());
            (bytes % size == 0 && bytes / size + view.len <= u32::MAX as usize)
                .then_some(bytes / size)
        };
        let Some(starts) = self.ports[port]
            .iter()
            .map(start)
            .collect::<Option<Vec<_>>>()
        else {
            return false;
        };
        for (s, offset) in self.ports[port].iter().zip(starts) {
            let (view, word) = plan.ops[s.op].view_mut(s.which);
            *view = RawView {
                buf: new.buf.clone(),
                offset,
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

#[cfg(test)]
mod tests {
    use super::Sites;
    use crate::buffer::RawView;
    use crate::plan::{Binding, Op, Plan};
    use crate::Device;

    #[test]
    fn a_port_re_pointed_onto_memory_another_op_writes_needs_an_order_the_graph_lacks() {
        let dev = Device::host();
        let buf = |n: usize| dev.upload(&vec![1u32; n]).unwrap().raw_view();
        let (slot, y, ext, fresh) = (buf(8), buf(8), buf(8), buf(8));
        // 0: y = slot (the input); 1: fills `ext`, a buffer the step writes: independent.
        let mut plan = Plan {
            ops: vec![
                Op::Copy {
                    src: slot.clone(),
                    dst: y.clone(),
                },
                Op::Launch {
                    kernel: &crate::builtin::fill_u32::DEF,
                    grid: [1, 1, 1],
                    args: 0,
                    bindings: vec![Binding {
                        view: ext.clone(),
                        write: true,
                        word: 1,
                    }],
                },
            ],
            launch_args: vec![vec![7, 0, 8]],
            ..Plan::default()
        };
        let lowered = plan.dag();
        assert_eq!(lowered.edges(), vec![]);
        let sites = Sites::find(&plan, std::slice::from_ref(&slot), 1);
        let repoint = |plan: &mut Plan, to: &RawView| {
            let (mut ops, mut words) = (Vec::new(), Vec::new());
            assert!(sites.repoint(plan, 0, to, &mut ops, &mut words));
            assert_eq!(ops, vec![0]);
        };
        // Onto an allocation of its own: nothing else binds it, no check needed.
        repoint(&mut plan, &fresh);
        assert!(!sites.shares_memory(&plan, &[(0, fresh.clone())]));
        assert!(lowered.orders_all_of(&plan.dag()));
        // Onto `ext`: op 0 now reads what op 1 writes; the lowered graph does not order them.
        repoint(&mut plan, &ext);
        assert!(sites.shares_memory(&plan, &[(0, ext.clone())]));
        assert_eq!(plan.dag().edges(), vec![(0, 1)]);
        assert!(!lowered.orders_all_of(&plan.dag()));
        // Two ports onto one allocation share it too.
        assert!(sites.shares_memory(&plan, &[(0, fresh.clone()), (0, fresh.clone())]));
    }

    /// A body that binds a 16-bit port as its words: the site is found by bytes, and
    /// re-pointed to the new view's bytes in words, or refused where those do not start on a
    /// word (an odd element offset).
    #[test]
    fn a_port_bound_as_words_is_re_pointed_by_bytes() {
        use half::bf16;
        let dev = Device::host();
        let halves = |n: usize| dev.upload(&vec![bf16::ONE; n]).unwrap();
        let (slot, big) = (halves(8), halves(24));
        let words = slot.slice(2..8).unwrap().words().unwrap().raw_view();
        assert_eq!((words.offset, words.len), (1, 3));
        let mut plan = Plan {
            ops: vec![Op::Launch {
                kernel: &crate::builtin::fill_u32::DEF,
                grid: [1, 1, 1],
                args: 0,
                bindings: vec![Binding {
                    view: words,
                    write: true,
                    word: 1,
                }],
            }],
            launch_args: vec![vec![7, 1, 3]],
            ..Plan::default()
        };
        let sites = Sites::find(&plan, &[slot.raw_view()], 1);
        let (mut ops, mut args) = (Vec::new(), Vec::new());
        // Onto elements 10..18: the words start at element 12, word 6.
        let to = big.slice(10..18).unwrap().raw_view();
        assert!(sites.repoint(&mut plan, 0, &to, &mut ops, &mut args));
        let v = &plan.ops[0].views()[0];
        assert_eq!((v.buf.id, v.offset, v.len), (to.buf.id, 6, 3));
        assert_eq!(args, vec![(0, 1, 6)]);
        // Onto elements 3..11: the words would start at element 5, inside word 2.
        let odd = big.slice(3..11).unwrap().raw_view();
        args.clear();
        assert!(!sites.repoint(&mut plan, 0, &odd, &mut ops, &mut args));
        assert!(args.is_empty());
    }
}
