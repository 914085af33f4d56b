//! Subgroup builtins: `subgroup_size()`, `subgroup_invocation_id()`, the reductions and the
//! shuffles (their meaning: `kernel::subgroup`; where they may stand: `kernel::uniformity`).

use syn::spanned::Spanned;

use super::*;
use crate::kernel::subgroup::WORKGROUP_MULTIPLE;

impl Checker<'_> {
    /// Whether the body lowered so far uses a subgroup operation.
    pub fn has_subgroup(&self) -> bool {
        self.has_subgroup
    }

    /// Notes that the body uses subgroups, at `node` (a subgroup builtin, or a call of a
    /// helper that reaches one): the first use in a kernel checks its workgroup shape. A
    /// helper has no workgroup of its own; each kernel calling it checks its own.
    pub(super) fn uses_subgroups(&mut self, node: &syn::ExprCall) {
        if !self.has_subgroup && self.device.is_none() {
            let [x, y, z] = self.known.workgroup;
            let n = x * y * z;
            if y != 1 || z != 1 {
                self.error(node, format!("a kernel using subgroup operations has a one-dimensional workgroup (Vulkan defines no layout of subgroups in a multi-dimensional one, and naga refuses it), but this one is ({x}, {y}, {z}): declare `#[kernel(workgroup = {n})]` and compute the coordinates from `local_id().x`"));
            } else if n % WORKGROUP_MULTIPLE != 0 {
                self.error(node, format!("a kernel using subgroup operations needs a workgroup of a multiple of {WORKGROUP_MULTIPLE} invocations (CUDA's warp size, so that every subgroup is full on every device), but this one has {n}: declare e.g. `#[kernel(workgroup = {})]`", n.div_ceil(WORKGROUP_MULTIPLE).max(1) * WORKGROUP_MULTIPLE));
            }
        }
        self.has_subgroup = true;
    }

    pub(super) fn subgroup(
        &mut self,
        op: SubgroupOp,
        c: &syn::ExprCall,
        expect: Option<Ty>,
    ) -> Res<Expr> {
        let name = op.name();
        let usage = match op.arity() {
            0 => format!("`{name}()` takes no arguments"),
            1 => format!("`{name}(v)` takes one argument, an `f32`, `i32` or `u32` value"),
            _ => format!(
                "`{name}(v, {})` takes two arguments: the value (`f32`, `i32` or `u32`) and the {} (`u32`)",
                lane_word(op),
                lane_word(op)
            ),
        };
        if c.args.len() != op.arity() {
            self.error(c, usage);
            return Err(());
        }
        self.uses_subgroups(c);
        let span = c.span();
        if op.arity() == 0 {
            return Ok(Expr {
                kind: ExprKind::Subgroup(op, Vec::new(), span),
                ty: Ty::U32,
            });
        }
        let v = self.expr(&c.args[0], expect)?;
        if !v.ty.is_num() {
            self.error(
                &c.args[0],
                format!(
                    "`{name}` takes an `f32`, `i32` or `u32` value, found `{}`",
                    v.ty.rust()
                ),
            );
            return Err(());
        }
        let ty = v.ty;
        let mut args = vec![v];
        if op.arity() == 2 {
            let lane = self.expr(&c.args[1], Some(Ty::U32))?;
            if lane.ty != Ty::U32 {
                self.error(
                    &c.args[1],
                    format!(
                        "the {} of `{name}` is a `u32`, found `{}` (no implicit conversions: use `as u32`)",
                        lane_word(op),
                        lane.ty.rust()
                    ),
                );
                return Err(());
            }
            args.push(lane);
        }
        Ok(Expr {
            kind: ExprKind::Subgroup(op, args, span),
            ty,
        })
    }
}

/// What a shuffle's second operand is called.
fn lane_word(op: SubgroupOp) -> &'static str {
    match op {
        SubgroupOp::ShuffleXor => "mask",
        SubgroupOp::ShuffleUp | SubgroupOp::ShuffleDown => "delta",
        _ => "lane",
    }
}
