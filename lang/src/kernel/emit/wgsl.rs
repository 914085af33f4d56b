//! Emits a kernel as a WGSL compute shader.
//!
//! Binding 0 is the argument block (`array<u32>`: scalars as bits, then each slice's offset
//! and length); slices follow in parameter order. Slices are bound whole and indexed from
//! their offset, so views at any element offset need no binding alignment.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use super::wgsl_half::{slice_layout, Layout};

use super::bounds;
use crate::kernel::ir::*;

/// Trips up to which a constant loop that the checker left a loop (its variable indexes no
/// per-invocation array) is written as copies of its body; a longer one stays a loop, for the
/// driver to unroll as far as it pays, as NVRTC does with the CUDA C. `matmul_t16`'s 64-step
/// `k` loop as 64 copies was the change in the sampler's hot loop when NVIDIA Vulkan replayed
/// it 0.4–1.9% slower than at e50955d, where it was a loop (the same copies in CUDA C had been
/// slower than NVRTC's unrolling on the H200); `matmul_t64`'s 16-step loop keeps its copies,
/// with which NVIDIA Vulkan's MLP-M got faster.
pub(crate) const COPIES_MAX_TRIPS: usize = 16;

/// Whether a constant loop with these values of its variable is emitted as copies.
fn as_copies(values: &[i64]) -> bool {
    values.len() <= COPIES_MAX_TRIPS
}

/// Whether `let x = if c { a } else { b };` is worth a statement `if` in WGSL rather than a
/// `select`, which evaluates both arms: `c` is a flag (a `bool` parameter or local, such as
/// `tile_load`'s transposition, the same for a whole launch, so the branch costs little), an
/// arm computes something (more than a literal, a local or a parameter), and neither calls a
/// helper or a subgroup operation (which a branch would put under the flag's control flow).
/// A condition computed per element (a comparison) keeps the `select`.
fn worth_a_branch(c: &Expr, a: &Expr, b: &Expr) -> bool {
    let operand = |e: &Expr| {
        matches!(
            e.kind,
            ExprKind::LitF32(_)
                | ExprKind::LitI32(_)
                | ExprKind::LitU32(_)
                | ExprKind::LitBool(_)
                | ExprKind::Local(_)
                | ExprKind::Scalar(_)
        )
    };
    matches!(c.kind, ExprKind::Scalar(_) | ExprKind::Local(_))
        && !(operand(a) && operand(b))
        && no_calls(a)
        && no_calls(b)
}

/// Whether `e` calls no helper and no subgroup operation.
fn no_calls(e: &Expr) -> bool {
    use ExprKind::*;
    let place = |p: &Place| match p {
        Place::Local(_) => true,
        Place::Param(_, i) | Place::Shared(_, i) | Place::Array(_, i) => no_calls(i),
    };
    match &e.kind {
        LitF32(_) | LitI32(_) | LitU32(_) | LitBool(_) | Local(_) | Scalar(_) | Len(_) | Id(_) => {
            true
        }
        Load(p) => place(p),
        Field(a, _) | Unary(_, a) | Cast(a, _) | Bits(a, _) => no_calls(a),
        Binary(_, a, b) => no_calls(a) && no_calls(b),
        Cond(c, a, b) => no_calls(c) && no_calls(a) && no_calls(b),
        Math(_, args) => args.iter().all(no_calls),
        Call(..) | Subgroup(..) => false,
    }
}

/// The kernel as a WGSL compute shader (one entry point, `main`).
pub fn emit(k: &Kernel) -> String {
    emit_with(k, None)
}

/// The checked variant (see [`bounds`]): every index is checked, the first out-of-range
/// access is written to the fault record, bound after the slices, with kernel id `id`.
pub fn emit_checked(k: &Kernel, id: u32) -> String {
    emit_with(k, Some(id))
}

fn emit_with(k: &Kernel, checked: Option<u32>) -> String {
    let (storage, helper_storage) = storage_barriers(k);
    let module = Module {
        checked,
        helper_storage,
        ..Module::default()
    };
    let mut w = Wgsl {
        k,
        params: &k.params,
        globals: k.params.iter().map(|p| p.name.clone()).collect(),
        shared_ix: (0..k.shared.len()).collect(),
        arrays: &k.arrays,
        array_base: bounds::array_target(k, 0),
        scalar_suffix: "p",
        module: &module,
        out: String::new(),
        indent: 1,
        tmp: 0,
        opaque: Cell::new(false),
        storage_barriers: storage,
        barriers: 0,
        checked,
        guards: RefCell::new(Vec::new()),
    };
    let mut head = String::new();
    writeln!(head, "// graphed kernel `{}`", k.name).unwrap();
    if k.has_subgroup {
        // WGSL's `enable subgroups;`, which naga 30 does not parse yet (it takes the subgroup
        // builtins without it); the runtime reads this line to ask for wgpu's `SUBGROUP`.
        head.push_str(super::subgroup::WGSL_MARKER);
        head.push('\n');
    }
    if k.params
        .iter()
        .any(|p| slice_layout(&p.kind) == Some(Layout::F16))
    {
        head.push_str("enable f16;\n");
        // `Layout::F16` reads and writes through them.
        let mut h = module.helpers.borrow_mut();
        h.insert("gd_f32_to_f16");
        h.insert("gd_f16_to_f32");
    }
    writeln!(
        head,
        "@group(0) @binding(0) var<storage, read> gd_args: array<u32>;"
    )
    .unwrap();
    for p in &k.params {
        if let ParamKind::Slice {
            elem,
            mutable,
            atomic,
        } = p.kind
        {
            // Every slice is `read_write` in WGSL (writes to `&[T]` are still rejected by the
            // checker): wgpu forbids one buffer in read-only and read-write storage bindings of
            // the same dispatch, and non-overlapping views of one allocation are legal launches.
            let _ = mutable;
            let access = "read_write";
            let ty = match slice_layout(&p.kind) {
                Some(l) => l.array_elem().to_string(),
                None if atomic => format!("atomic<{}>", ty(elem)),
                None => ty(elem).to_string(),
            };
            writeln!(
                head,
                "@group(0) @binding({}) var<storage, {access}> {}_p: array<{ty}>;",
                p.binding, p.name
            )
            .unwrap();
        }
    }
    if checked.is_some() {
        let binding = k.params.iter().map(|p| p.binding + 1).max().unwrap_or(1);
        writeln!(
            head,
            "@group(0) @binding({binding}) var<storage, read_write> gd_fault: array<atomic<u32>, {}>;",
            bounds::RECORD_WORDS
        )
        .unwrap();
        // The invocation's first fault, kept privately and written to the record once, at
        // its end: no atomic or loop in the hot path (see `fault_source`).
        head.push_str("var<private> gd_fs: u32;\nvar<private> gd_ft: u32;\nvar<private> gd_fi: u32;\nvar<private> gd_fn: u32;\n");
    }
    for s in &k.shared {
        let elem = if s.atomic {
            format!("atomic<{}>", ty(s.elem))
        } else {
            ty(s.elem).to_string()
        };
        writeln!(
            head,
            "var<workgroup> {}: array<{elem}, {}>;",
            s.name, s.size
        )
        .unwrap();
    }
    if crate::kernel::mma::exchanges(&k.body) {
        let words = k.workgroup[0] * crate::kernel::mma::SCRATCH_WORDS;
        writeln!(
            head,
            "var<workgroup> {}: array<u32, {words}>;",
            super::mma::WGSL_SCRATCH
        )
        .unwrap();
    }
    let [x, y, z] = k.workgroup;
    writeln!(head, "\n@compute @workgroup_size({x}, {y}, {z})").unwrap();
    writeln!(
        head,
        "fn main(@builtin(global_invocation_id) gd_gid: vec3<u32>, @builtin(local_invocation_id) gd_lid: vec3<u32>, @builtin(workgroup_id) gd_wid: vec3<u32>, @builtin(num_workgroups) gd_nwg: vec3<u32>{}) {{",
        if k.has_subgroup {
            ", @builtin(subgroup_size) gd_sg_size: u32, @builtin(subgroup_invocation_id) gd_sg_id: u32"
        } else {
            ""
        }
    )
    .unwrap();
    for p in &k.params {
        match p.kind {
            ParamKind::Scalar(t) => {
                let raw = format!("gd_args[{}u]", p.word);
                let v = match t {
                    Ty::F32 => format!("bitcast<f32>({raw})"),
                    Ty::F16 | Ty::BF16 => format!("({raw} & 0xffffu)"),
                    Ty::I32 => format!("bitcast<i32>({raw})"),
                    Ty::Bool => format!("({raw} != 0u)"),
                    _ => raw,
                };
                writeln!(head, "    let {}_p: {} = {v};", p.name, ty(t)).unwrap();
            }
            ParamKind::Slice { .. } => {
                writeln!(
                    head,
                    "    let {0}_off: u32 = gd_args[{1}u];\n    let {0}_len: u32 = gd_args[{2}u];",
                    p.name,
                    p.word,
                    p.word + 1
                )
                .unwrap();
            }
        }
    }
    w.out = head;
    w.block(&k.body);
    if checked.is_some() {
        w.out.push_str("    gd_flush();\n");
    }
    w.out.push_str("}\n");
    let mut out = std::mem::take(&mut w.out);
    super::wgsl_device::emit_specialisations(k, &module, &mut out);
    w.out = out;
    for &elem in module.mma.borrow().iter() {
        let (f, widen) = super::mma::wgsl_fn(elem);
        module.helpers.borrow_mut().insert(widen);
        w.out.push('\n');
        w.out.push_str(&f);
    }
    for h in module.helpers.borrow().iter() {
        w.out.push('\n');
        w.out.push_str(helper_source(h));
    }
    for (op, t) in super::subgroup::used(k) {
        let combine = if op.is_reduction() {
            w.expr(&op.combine(t, "gd_a", "gd_b"))
        } else {
            String::new()
        };
        w.out.push('\n');
        w.out
            .push_str(&super::subgroup::wgsl_helper(op, t, ty(t), &combine));
    }
    if let Some(id) = checked {
        for h in module.loads.borrow().values() {
            w.out.push('\n');
            w.out.push_str(h);
        }
        w.out.push('\n');
        w.out.push_str(&fault_source(id));
    }
    w.out
}

/// The fault helpers of the checked variant. `gd_note(target, index, len, bad)` keeps the
/// invocation's first fault in private variables, without a branch: a conditional call of an
/// atomic loop at every access made lavapipe's matrix product 3× slower (its SIMD lanes mask
/// the call), selects cost next to nothing. `gd_flush()`, at the end of `main` and before
/// each `return`, writes a kept fault to the record unless an earlier invocation did
/// (`gd_oob`: a strong compare-exchange from WGSL's weak one, retried while it fails
/// spuriously).
fn fault_source(id: u32) -> String {
    "fn gd_note(gd_t: u32, gd_i: u32, gd_n: u32, gd_bad: bool) {\n    let gd_first = gd_bad && gd_fs == 0u;\n    gd_fs = select(gd_fs, 1u, gd_first);\n    gd_ft = select(gd_ft, gd_t, gd_first);\n    gd_fi = select(gd_fi, gd_i, gd_first);\n    gd_fn = select(gd_fn, gd_n, gd_first);\n}\n\nfn gd_flush() {\n    if (gd_fs != 0u) {\n        gd_oob(gd_ft, gd_fi, gd_fn);\n    }\n}\n\n".to_string() + &format!(
        "fn gd_oob(gd_t: u32, gd_i: u32, gd_n: u32) {{\n    loop {{\n        let gd_r = atomicCompareExchangeWeak(&gd_fault[0], 0u, 1u);\n        if (gd_r.exchanged) {{\n            atomicStore(&gd_fault[1], {id}u);\n            atomicStore(&gd_fault[2], gd_t);\n            atomicStore(&gd_fault[3], gd_i);\n            atomicStore(&gd_fault[4], gd_n);\n            break;\n        }}\n        if (gd_r.old_value != 0u) {{\n            break;\n        }}\n    }}\n}}\n"
    )
}

/// Integer division and remainder as helper functions. naga rejects `x / 0` and `x % 0` when
/// the divisor is a constant zero (also through a `let`), while the kernel language defines
/// them (`x / 0 == x`, `x % 0 == 0`, and `MIN / -1 == MIN`, `MIN % -1 == 0`); a call is never
/// a constant expression, and the guard makes the result independent of the driver.
fn helper_source(name: &str) -> &'static str {
    if let Some(src) = super::wgsl_half::helper_source(name) {
        return src;
    }
    match name {
        "gd_div_i32" => "fn gd_div_i32(a: i32, b: i32) -> i32 {\n    if (b == 0i || (a == bitcast<i32>(0x80000000u) && b == -1i)) {\n        return a;\n    }\n    return a / b;\n}\n",
        "gd_rem_i32" => "fn gd_rem_i32(a: i32, b: i32) -> i32 {\n    if (b == 0i || (a == bitcast<i32>(0x80000000u) && b == -1i)) {\n        return 0i;\n    }\n    return a % b;\n}\n",
        "gd_div_u32" => "fn gd_div_u32(a: u32, b: u32) -> u32 {\n    if (b == 0u) {\n        return a;\n    }\n    return a / b;\n}\n",
        "gd_rem_u32" => "fn gd_rem_u32(a: u32, b: u32) -> u32 {\n    if (b == 0u) {\n        return 0u;\n    }\n    return a % b;\n}\n",
        // WGSL defines `a % b` on floats as `a - b * trunc(a / b)`: NaN for a finite `a` and
        // an infinite `b`, and drivers that assume finite math fold `x % 0` to `x`. The kernel
        // language's `%` is Rust's (C's `fmodf`), so its special cases are decided on the
        // bits: NaN when `a` is infinite or NaN or `b` is NaN or zero, `a` when `b` is
        // infinite. (For large quotients the two still differ by rounding: a tolerance.)
        "gd_rem_f32" => "fn gd_rem_f32(a: f32, b: f32) -> f32 {\n    let ma = bitcast<u32>(a) & 0x7fffffffu;\n    let mb = bitcast<u32>(b) & 0x7fffffffu;\n    if (ma >= 0x7f800000u || mb > 0x7f800000u || mb == 0u) {\n        return bitcast<f32>(0x7fc00000u);\n    }\n    if (mb == 0x7f800000u) {\n        return a;\n    }\n    return a % b;\n}\n",
        // naga clamps an out-of-range float to the largest f32 below 2^31 (or 2^32), i.e.
        // `i32(1e10f) == 2147483520`; the kernel language saturates to the integer's range as
        // Rust's `as` and CUDA do, and maps NaN to 0 (tested on the bits, which no
        // finite-math assumption of a driver can fold away).
        "gd_f32_to_i32" => "fn gd_f32_to_i32(x: f32) -> i32 {\n    if ((bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u) {\n        return 0i;\n    }\n    if (x >= 2147483648.0f) {\n        return 2147483647i;\n    }\n    return i32(x);\n}\n",
        "gd_f32_to_u32" => "fn gd_f32_to_u32(x: f32) -> u32 {\n    if ((bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u) {\n        return 0u;\n    }\n    if (x >= 4294967296.0f) {\n        return 4294967295u;\n    }\n    return u32(x);\n}\n",
        _ => unreachable!("unknown WGSL helper {name}"),
    }
}

/// For each `barrier()` of `k` in emission order: whether it must also order storage memory
/// (`storageBarrier()` besides `workgroupBarrier()`). It must when a writable slice
/// (`&mut [T]`) can be accessed both before and after it: program order, or anywhere in a
/// loop that encloses it. Read-only slices need no ordering, since no view written by the
/// same launch may overlap them (the launcher checks). naga gives `storageBarrier` device
/// memory scope, which a GPU compiler may turn into a device-wide fence per barrier — in a
/// tiled matrix product's inner loop, where only workgroup memory is shared.
///
/// The second value: whether the barriers of helpers must order storage memory too. They
/// must where a call of a helper that reaches a barrier needs it as a barrier would, or
/// passes the helper a writable slice.
fn storage_barriers(k: &Kernel) -> (Vec<bool>, bool) {
    struct Walk<'k> {
        k: &'k Kernel,
        pos: usize,
        /// Positions of accesses to writable slices.
        touches: Vec<usize>,
        /// (first, last) position of each loop.
        loops: Vec<(usize, usize)>,
        /// Loops enclosing the current position.
        open: Vec<usize>,
        /// Each barrier's position and enclosing loops.
        barriers: Vec<(usize, Vec<usize>)>,
        /// The same for calls of helpers that reach a barrier.
        calls: Vec<(usize, Vec<usize>)>,
        /// Whether such a call passes a writable slice.
        calls_write: bool,
    }
    impl Walk<'_> {
        fn param(&mut self, i: usize) {
            if matches!(
                self.k.params[i].kind,
                ParamKind::Slice { mutable: true, .. }
            ) {
                self.touches.push(self.pos);
            }
        }
        fn place(&mut self, p: &Place) {
            match p {
                Place::Local(_) => {}
                Place::Param(i, ix) => {
                    self.param(*i);
                    self.expr(ix);
                }
                Place::Shared(_, ix) | Place::Array(_, ix) => self.expr(ix),
            }
        }
        fn expr(&mut self, e: &Expr) {
            match &e.kind {
                ExprKind::Load(p) => self.place(p),
                ExprKind::Field(a, _)
                | ExprKind::Unary(_, a)
                | ExprKind::Cast(a, _)
                | ExprKind::Bits(a, _) => self.expr(a),
                ExprKind::Binary(_, a, b) => {
                    self.expr(a);
                    self.expr(b);
                }
                ExprKind::Math(_, args) | ExprKind::Subgroup(_, args, _) => {
                    args.iter().for_each(|a| self.expr(a))
                }
                ExprKind::Cond(c, a, b) => {
                    self.expr(c);
                    self.expr(a);
                    self.expr(b);
                }
                // A slice passed to a helper may be accessed there.
                ExprKind::Call(h, args, _) => {
                    let touched = self.touches.len();
                    args.iter().for_each(|a| match a {
                        CallArg::Value(e) => self.expr(e),
                        CallArg::Slice(i) => self.param(*i),
                        CallArg::Shared(_) | CallArg::Array(_) => {}
                    });
                    if self.k.helpers[*h].has_barrier {
                        self.calls.push((self.pos, self.open.clone()));
                        self.calls_write |= self.touches.len() > touched;
                    }
                }
                _ => {}
            }
        }
        fn looped(&mut self, heads: &[&Expr], body: &[Stmt]) {
            let id = self.loops.len();
            self.loops.push((self.pos, usize::MAX));
            self.open.push(id);
            heads.iter().for_each(|e| self.expr(e));
            self.block(body);
            self.open.pop();
            self.loops[id].1 = self.pos;
        }
        fn block(&mut self, stmts: &[Stmt]) {
            for s in stmts {
                self.pos += 1;
                match s {
                    Stmt::Let { init, .. } => init.iter().for_each(|e| self.expr(e)),
                    Stmt::Assign { place, value, .. } => {
                        self.place(place);
                        self.expr(value);
                    }
                    Stmt::If { cond, then, els } => {
                        self.expr(cond);
                        self.block(then);
                        self.block(els);
                    }
                    // Emitted as copies: walked as the straight-line code it becomes.
                    Stmt::For {
                        body,
                        constant: Some(values),
                        ..
                    } if as_copies(values) => values.iter().for_each(|_| self.block(body)),
                    Stmt::For {
                        start,
                        end,
                        step,
                        body,
                        ..
                    } => {
                        let mut heads = vec![start, end];
                        heads.extend(step.as_ref());
                        self.looped(&heads, body);
                    }
                    Stmt::While { cond, body } => self.looped(&[cond], body),
                    Stmt::Loop { body } => self.looped(&[], body),
                    Stmt::Barrier { .. } => self.barriers.push((self.pos, self.open.clone())),
                    Stmt::Array { init, .. } => match init {
                        ArrayInit::Splat(v) => self.expr(v),
                        ArrayInit::List(vs) => vs.iter().for_each(|v| self.expr(v)),
                        ArrayInit::Call(v) => self.expr(v),
                    },
                    Stmt::Atomic {
                        target,
                        index,
                        operands,
                        ..
                    } => {
                        if let AtomicTarget::Param(p) = target {
                            self.param(*p);
                        }
                        self.expr(index);
                        operands.iter().for_each(|e| self.expr(e));
                    }
                    Stmt::Call(e) | Stmt::ReturnValue(e) => self.expr(e),
                    // Its exchange orders workgroup memory only.
                    Stmt::Break
                    | Stmt::Continue
                    | Stmt::Return
                    | Stmt::ReturnArray(_)
                    | Stmt::DeviceFence { .. }
                    | Stmt::Mma(_)
                    | Stmt::CopyFence(_) => {}
                    Stmt::Ldmatrix(l) => self.expr(&l.row),
                    Stmt::CopyAsync(c) => {
                        self.block(&c.setup);
                        self.block(&c.copy);
                    }
                }
            }
        }
    }
    let mut w = Walk {
        k,
        pos: 0,
        touches: Vec::new(),
        loops: Vec::new(),
        open: Vec::new(),
        barriers: Vec::new(),
        calls: Vec::new(),
        calls_write: false,
    };
    w.block(&k.body);
    let needs = |(at, open): &(usize, Vec<usize>)| {
        let in_loop = |p: usize| {
            open.iter()
                .any(|&l| (w.loops[l].0..=w.loops[l].1).contains(&p))
        };
        let before = w.touches.iter().any(|&p| p < *at || in_loop(p));
        let after = w.touches.iter().any(|&p| p > *at || in_loop(p));
        before && after
    };
    let helpers = w.calls_write || w.calls.iter().any(needs);
    (w.barriers.iter().map(needs).collect(), helpers)
}

/// Whether `e` is built from literals only, so naga would evaluate it at shader creation.
fn is_const(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::LitF32(_) | ExprKind::LitI32(_) | ExprKind::LitU32(_) | ExprKind::LitBool(_) => {
            true
        }
        ExprKind::Unary(_, a) | ExprKind::Cast(a, _) | ExprKind::Bits(a, _) => is_const(a),
        ExprKind::Binary(_, a, b) => is_const(a) && is_const(b),
        ExprKind::Math(_, args) => args.iter().all(is_const),
        ExprKind::Cond(c, a, b) => is_const(c) && is_const(a) && is_const(b),
        // The workgroup shape is a constant vector to naga too (found by the fuzzer:
        // `i32::MAX << workgroup_size().z` overflowed at shader creation).
        ExprKind::Id(IdBuiltin::WorkgroupSize) => true,
        ExprKind::Field(b, _) => is_const(b),
        _ => false,
    }
}

/// Whether `e` is the zero of its type (`0.0` positive, `0`, `false`).
pub(crate) fn is_zero(e: &Expr) -> bool {
    match e.kind {
        ExprKind::LitF32(v) => v.to_bits() == 0,
        ExprKind::LitI32(v) => v == 0,
        ExprKind::LitU32(v) => v == 0,
        ExprKind::LitBool(v) => !v,
        _ => false,
    }
}

/// The zero of a scalar type, as WGSL writes it.
fn zero(t: Ty) -> &'static str {
    match t {
        Ty::F32 => "0.0f",
        Ty::F16 | Ty::BF16 => "0u",
        Ty::I32 => "0i",
        Ty::U32 => "0u",
        Ty::Bool => "false",
        Ty::UVec3 => "vec3<u32>()",
    }
}

fn is_literal(e: &Expr) -> bool {
    matches!(
        e.kind,
        ExprKind::LitF32(_) | ExprKind::LitI32(_) | ExprKind::LitU32(_) | ExprKind::LitBool(_)
    )
}

/// The WGSL spelling of a scalar type.
pub fn ty(t: Ty) -> &'static str {
    match t {
        Ty::F32 => "f32",
        // A 16-bit value is its bits in the low half of a `u32` (see `super::wgsl_half`).
        Ty::F16 | Ty::BF16 => "u32",
        Ty::I32 => "i32",
        Ty::U32 => "u32",
        Ty::Bool => "bool",
        Ty::UVec3 => "vec3<u32>",
    }
}

/// What the functions of one WGSL module share: the guard functions and the `#[device]`
/// specialisations they call.
#[derive(Default)]
pub(super) struct Module {
    /// Guard functions the bodies call (emitted after `main`).
    pub helpers: RefCell<BTreeSet<&'static str>>,
    /// `#[device]` helpers called, each with the global binding of every slice parameter
    /// (WGSL takes no storage pointers as parameters, so a helper is emitted once per
    /// distinct binding of its slices); a specialisation's name is its index's.
    pub specs: RefCell<Vec<(usize, Vec<String>)>>,
    /// The kernel id of the checked variant ([`bounds`]); `None` for the unchecked one.
    pub checked: Option<u32>,
    /// Whether the barriers in helpers also order storage memory (where one call of a
    /// helper that reaches a barrier needs it, every such helper's barriers do).
    pub helper_storage: bool,
    /// Checked read helpers by name (one per slice or workgroup array read), from the
    /// kernel's body and its helpers' alike.
    pub loads: RefCell<BTreeMap<String, String>>,
    /// The element types of the `mma_m16n8k16` calls: one function each, after `main`.
    pub mma: RefCell<Vec<Ty>>,
}

pub(super) struct Wgsl<'k> {
    pub k: &'k Kernel,
    /// The parameters of the function being emitted (the kernel's or a helper's).
    pub params: &'k [Param],
    /// For each parameter, the name of the global binding a slice indexes (`x` of `x_p`).
    pub globals: Vec<String>,
    /// For each workgroup array of the function being emitted, the kernel's array it is (a
    /// helper's workgroup-array parameters name module-scope arrays).
    pub shared_ix: Vec<usize>,
    /// Its per-invocation arrays, and the target number of the first in a checked variant.
    pub arrays: &'k [LocalArray],
    pub array_base: usize,
    /// The suffix of scalar parameters: `p` in the kernel, `v` in helpers, so a helper's
    /// parameter never shadows a global binding `x_p`.
    pub scalar_suffix: &'static str,
    pub module: &'k Module,
    pub out: String,
    pub indent: usize,
    tmp: usize,
    /// Set while emitting a constant expression: its float literals are written as
    /// `bitcast<f32>(bits)`, which naga does not evaluate at shader creation, so a constant
    /// that overflows or leaves a function's domain (`f32::MAX * 2.0`, `sqrt(-1.0)`) is
    /// computed at run time as IEEE 754 defines it instead of being a shader-creation error.
    opaque: Cell<bool>,
    /// For each `barrier()` in emission order, whether it also orders storage memory.
    storage_barriers: Vec<bool>,
    /// Barriers emitted so far.
    barriers: usize,
    /// The kernel id of the checked variant ([`bounds`]); `None` for the unchecked one.
    checked: Option<u32>,
    /// Conditions under which the expression being emitted is evaluated for its value: WGSL's
    /// `select` evaluates both arms, so a checked read in the arm not taken must not fault.
    guards: RefCell<Vec<String>>,
}

impl<'k> Wgsl<'k> {
    /// An emitter for the body of helper `h` (no ids), specialised for the kernel's
    /// bindings `globals` and workgroup arrays `shared_ix`.
    pub(super) fn for_helper(
        k: &'k Kernel,
        (h, f): (usize, &'k DeviceFn),
        globals: Vec<String>,
        shared_ix: Vec<usize>,
        module: &'k Module,
    ) -> Self {
        Wgsl {
            k,
            params: &f.params,
            globals,
            shared_ix,
            arrays: &f.arrays,
            array_base: bounds::helper_array_base(k, h),
            scalar_suffix: "v",
            module,
            out: String::new(),
            indent: 1,
            tmp: 0,
            opaque: Cell::new(false),
            storage_barriers: Vec::new(),
            barriers: 0,
            checked: module.checked,
            guards: RefCell::new(Vec::new()),
        }
    }
}

impl Wgsl<'_> {
    /// How slice parameter `i`'s elements are stored, when they are 16-bit: decided by the
    /// kernel parameter whose binding it is (in a helper, the specialisation's).
    fn layout(&self, i: usize) -> Option<Layout> {
        let g = &self.globals[i];
        let p = self.k.params.iter().find(|p| p.name == *g)?;
        slice_layout(&p.kind)
    }

    fn line(&mut self, s: &str) {
        for _ in 0..self.indent {
            self.out.push_str("    ");
        }
        self.out.push_str(s);
        self.out.push('\n');
    }

    fn block(&mut self, stmts: &[Stmt]) {
        for s in stmts {
            self.stmt(s);
        }
    }

    /// `mma_m16n8k16`'s portable form (see `super::mma`): a call of the module's function
    /// for the element type.
    fn mma(&mut self, m: &Mma) {
        let mut used = self.module.mma.borrow_mut();
        if !used.contains(&m.elem) {
            used.push(m.elem);
        }
        drop(used);
        self.line(&super::mma::wgsl_call(m, self.arrays));
    }

    /// `ldmatrix_x4`'s portable form (see `crate::kernel::ldmatrix`): each invocation writes
    /// its row's word index into the first of its words of the exchange array, and after a
    /// barrier reads its four words from the rows its group's lanes named; a second barrier
    /// keeps the next exchange from overwriting indices still to be read.
    fn ldmatrix(&mut self, l: &Ldmatrix) {
        let row = self.expr(&l.row);
        let name = self.k.shared[self.shared_ix[l.shared]].name.clone();
        let w = self.arrays[l.w].name.clone();
        let (x, sw) = (super::mma::WGSL_SCRATCH, crate::kernel::mma::SCRATCH_WORDS);
        self.line(&format!("{x}[gd_lid.x * {sw}u] = {row};"));
        self.line("workgroupBarrier();");
        self.line("{");
        self.indent += 1;
        self.line("let gd_lq = gd_lid.x - (gd_lid.x & 31u);");
        self.line("let gd_lg = (gd_lid.x & 31u) >> 2u;");
        self.line("let gd_lt = gd_lid.x & 3u;");
        for j in 0..crate::kernel::ldmatrix::MATRICES {
            let m = 8 * j;
            let row = |lane: &str| format!("{x}[(gd_lq + {m}u + {lane}) * {sw}u]");
            if l.trans {
                // Column `g` of rows `2t`, `2t + 1`: value `g` is half `g % 2` of word `g / 2`.
                let half = |lane: &str| {
                    format!(
                        "(({name}[{} + (gd_lg >> 1u)] >> (16u * (gd_lg & 1u))) & 0xffffu)",
                        row(lane)
                    )
                };
                self.line(&format!(
                    "{w}[{j}] = {} | ({} << 16u);",
                    half("2u * gd_lt"),
                    half("2u * gd_lt + 1u")
                ));
            } else {
                self.line(&format!("{w}[{j}] = {name}[{} + gd_lt];", row("gd_lg")));
            }
        }
        self.indent -= 1;
        self.line("}");
        self.line("workgroupBarrier();");
    }

    fn nested(&mut self, head: &str, body: &[Stmt]) {
        self.line(&format!("{head} {{"));
        self.indent += 1;
        self.block(body);
        self.indent -= 1;
        self.line("}");
    }

    fn place(&self, p: &Place) -> String {
        match p {
            Place::Local(n) => n.clone(),
            Place::Param(i, ix) => {
                let (g, n) = (&self.globals[*i], &self.params[*i].name);
                let e = format!("{n}_off + {}", self.expr(ix));
                match self.layout(*i) {
                    Some(l) => l.read(&format!("{g}_p"), &e),
                    None => format!("{g}_p[{e}]"),
                }
            }
            Place::Shared(i, ix) => format!(
                "{}[{}]",
                self.k.shared[self.shared_ix[*i]].name,
                self.expr(ix)
            ),
            // Only in-bounds indices reach here (literals checked by the checker, run-time
            // indices guarded by `array_read` and `Stmt::Assign`).
            Place::Array(a, ix) => format!("{}[{}]", self.arrays[*a].name, self.expr(ix)),
        }
    }

    /// A read of a per-invocation array: a run-time index at or past the length reads zero.
    fn array_read(&self, a: usize, ix: &Expr) -> String {
        let arr = &self.arrays[a];
        if is_literal(ix) {
            return format!("{}[{}]", arr.name, self.expr(ix));
        }
        let i = self.expr(ix);
        let n = arr.len;
        format!(
            "select({}, {}[min({i}, {}u)], {i} < {n}u)",
            zero(arr.elem),
            arr.name,
            n - 1
        )
    }

    pub(super) fn block_pub(&mut self, stmts: &[Stmt]) {
        self.block(stmts);
    }

    fn stmt(&mut self, s: &Stmt) {
        match s {
            // Copied at once: the portable form (`kernel::copy_async`).
            Stmt::CopyAsync(c) => {
                self.line("{");
                self.indent += 1;
                self.block(&c.setup);
                self.block(&c.copy);
                self.indent -= 1;
                self.line("}");
            }
            Stmt::CopyFence(_) => {}
            Stmt::ReturnValue(e) => {
                let v = self.expr(e);
                self.line(&format!("return {v};"));
            }
            // WGSL arrays are values: returned (and passed) as copies.
            Stmt::ReturnArray(a) => self.line(&format!("return {};", self.arrays[*a].name)),
            Stmt::Call(e) => {
                let v = self.expr(e);
                self.line(&format!("{v};"));
            }
            Stmt::Let {
                name,
                ty: t,
                init:
                    Some(Expr {
                        kind: ExprKind::Cond(c, a, b),
                        ..
                    }),
                ..
            } if self.checked.is_none() && worth_a_branch(c, a, b) => {
                // `select` evaluates both arms (`tile_load`'s index was two products and a
                // select per element, where e50955d computed one): a statement `if` evaluates
                // the one taken, and the driver may still turn a small one into a select.
                self.line(&format!("var {name}: {};", ty(*t)));
                self.line(&format!("if ({}) {{", self.expr(c)));
                for (arm, close) in [(a, "} else {"), (b, "}")] {
                    self.indent += 1;
                    self.line(&format!("{name} = {};", self.expr(arm)));
                    self.indent -= 1;
                    self.line(close);
                }
            }
            Stmt::Let {
                name,
                ty: t,
                mutable,
                init,
            } => match (init, mutable) {
                (Some(e), false) => {
                    self.line(&format!("let {name}: {} = {};", ty(*t), self.expr(e)))
                }
                (Some(e), true) => {
                    self.line(&format!("var {name}: {} = {};", ty(*t), self.expr(e)))
                }
                (None, _) => self.line(&format!("var {name}: {};", ty(*t))),
            },
            Stmt::Assign {
                place,
                op,
                value,
                ty: t,
            } if self.checked.is_some() && !matches!(place, Place::Local(_)) => {
                self.checked_write(place, *op, value, *t)
            }
            Stmt::Assign {
                place: Place::Param(i, ix),
                op: None,
                value,
                ..
            } if self.layout(*i).is_some() => {
                let (g, n) = (&self.globals[*i], &self.params[*i].name);
                let e = format!("{n}_off + {}", self.expr(ix));
                let v = self.expr(value);
                let l = self.layout(*i).expect("checked by the guard");
                self.line(&l.write(&format!("{g}_p"), &e, &v));
            }
            Stmt::Assign {
                place,
                op,
                value,
                ty: t,
            } => {
                let p = self.place(place);
                // A run-time index at or past a per-invocation array's length writes nothing.
                let guard = match place {
                    Place::Array(a, ix) if !is_literal(ix) => Some(format!(
                        "if ({} < {}u) {{",
                        self.expr(ix),
                        self.arrays[*a].len
                    )),
                    _ => None,
                };
                if let Some(g) = &guard {
                    self.line(g);
                    self.indent += 1;
                }
                match op {
                    None => {
                        let v = self.expr(value);
                        self.line(&format!("{p} = {v};"));
                    }
                    // `p = p op v` rather than `p op= v`, so the operator gets the same
                    // treatment as in an expression (helpers, masked shifts, bool `^`).
                    Some(op) => {
                        let rhs = self.binary(*op, *t, &p, value);
                        self.line(&format!("{p} = {rhs};"));
                    }
                }
                if guard.is_some() {
                    self.indent -= 1;
                    self.line("}");
                }
            }
            Stmt::Array { array, init } => {
                let arr = &self.arrays[*array];
                let (name, n, t) = (arr.name.clone(), arr.len, ty(arr.elem));
                match init {
                    // Function-scope variables start zeroed.
                    ArrayInit::Splat(v) if is_zero(v) => {
                        self.line(&format!("var {name}: array<{t}, {n}>;"))
                    }
                    // Evaluated once; a constructor up to 64 elements (no loop for a driver to
                    // count against its iteration limits), a loop beyond.
                    ArrayInit::Splat(v) => {
                        let v = self.expr(v);
                        self.line(&format!("let {name}_v: {t} = {v};"));
                        if n <= 64 {
                            let elems = vec![format!("{name}_v"); n as usize].join(", ");
                            self.line(&format!(
                                "var {name}: array<{t}, {n}> = array<{t}, {n}>({elems});"
                            ));
                        } else {
                            self.line(&format!("var {name}: array<{t}, {n}>;"));
                            self.line(&format!("for (var {name}_k: u32 = 0u; {name}_k < {n}u; {name}_k = {name}_k + 1u) {{ {name}[{name}_k] = {name}_v; }}"));
                        }
                    }
                    ArrayInit::List(vs) => {
                        let elems: Vec<String> = vs.iter().map(|v| self.expr(v)).collect();
                        self.line(&format!(
                            "var {name}: array<{t}, {n}> = array<{t}, {n}>({});",
                            elems.join(", ")
                        ));
                    }
                    ArrayInit::Call(e) => {
                        let v = self.expr(e);
                        self.line(&format!("var {name}: array<{t}, {n}> = {v};"));
                    }
                }
            }
            Stmt::If { cond, then, els } => {
                let head = format!("if ({})", self.expr(cond));
                self.line(&format!("{head} {{"));
                self.indent += 1;
                self.block(then);
                self.indent -= 1;
                if els.is_empty() {
                    self.line("}");
                } else {
                    self.line("} else {");
                    self.indent += 1;
                    self.block(els);
                    self.indent -= 1;
                    self.line("}");
                }
            }
            Stmt::For {
                var,
                ty: t,
                body,
                constant: Some(values),
                ..
            } if as_copies(values) => {
                // One copy per value, each binding the variable: straight-line code, as the
                // checker's unrolled loops (`storage_barriers` walks it so too).
                for &v in values {
                    let lit = Expr {
                        kind: match t {
                            Ty::U32 => ExprKind::LitU32(v as u32),
                            _ => ExprKind::LitI32(v as i32),
                        },
                        ty: *t,
                    };
                    let head = format!("let {var}: {} = {};", ty(*t), self.expr(&lit));
                    self.line("{");
                    self.indent += 1;
                    self.line(&head);
                    self.block(body);
                    self.indent -= 1;
                    self.line("}");
                }
            }
            Stmt::For {
                var,
                ty: t,
                start,
                end,
                step,
                body,
                ..
            } => {
                self.line("{");
                self.indent += 1;
                let tn = ty(*t);
                self.line(&format!("let {var}_end: {tn} = {};", self.expr(end)));
                let st = self.expr(start);
                let step = ForStep::of(step);
                let e = match step {
                    ForStep::Unit => {
                        let one = if *t == Ty::U32 { "1u" } else { "1i" };
                        self.line(&format!("let {var}_step: {tn} = {one};"));
                        None
                    }
                    ForStep::Literal(e) | ForStep::RunTime(e) => {
                        self.line(&format!("let {var}_step: {tn} = {};", self.expr(e)));
                        Some(matches!(step, ForStep::RunTime(_)))
                    }
                };
                // A run-time step below 1 runs no iteration (the host faults instead).
                if e == Some(true) {
                    let zero = if *t == Ty::U32 { "0u" } else { "0i" };
                    self.line(&format!("if ({var}_step > {zero}) {{"));
                    self.indent += 1;
                }
                // Past `end`, or past the type's range, the loop ends instead of wrapping: the
                // next value is taken only while `step < end - var` (in u32, where the
                // distance of two i32 always fits).
                let update = match e {
                    None => format!("{var} = {var} + {var}_step"),
                    Some(_) => {
                        let fits = if *t == Ty::U32 {
                            format!("{var}_step < {var}_end - {var}")
                        } else {
                            format!("bitcast<u32>({var}_step) < bitcast<u32>({var}_end) - bitcast<u32>({var})")
                        };
                        format!("{var} = select({var}_end, {var} + {var}_step, {fits})")
                    }
                };
                let head = format!("for (var {var}: {tn} = {st}; {var} < {var}_end; {update})");
                self.nested(&head, body);
                if e == Some(true) {
                    self.indent -= 1;
                    self.line("}");
                }
                self.indent -= 1;
                self.line("}");
            }
            Stmt::While { cond, body } => {
                let head = format!("while ({})", self.expr(cond));
                self.nested(&head, body);
            }
            Stmt::Loop { body } => self.nested("loop", body),
            Stmt::Break => self.line("break;"),
            Stmt::Continue => self.line("continue;"),
            Stmt::Return => {
                if self.checked.is_some() {
                    self.line("gd_flush();");
                }
                self.line("return;")
            }
            Stmt::Mma(m) => self.mma(m),
            Stmt::Ldmatrix(l) => self.ldmatrix(l),
            Stmt::Barrier { .. } => {
                let storage = self
                    .storage_barriers
                    .get(self.barriers)
                    .copied()
                    .unwrap_or(self.module.helper_storage);
                self.barriers += 1;
                if storage {
                    self.line("storageBarrier();");
                }
                self.line("workgroupBarrier();");
            }
            // WGSL orders non-atomic storage accesses across workgroups in no way; its
            // nearest is this workgroup-scope barrier over storage (see `device_fence` in
            // the README).
            Stmt::DeviceFence { .. } => self.line("storageBarrier();"),
            Stmt::Atomic {
                result,
                op,
                target,
                index,
                operands,
                ty: t,
            } => {
                let (arr, off, len, target) = self.atomic_target(target);
                let ix = self.expr(index);
                let ops: Vec<String> = operands.iter().map(|o| self.expr(o)).collect();
                if self.checked.is_none() {
                    let ptr = format!("&{arr}[{off}{ix}]");
                    self.atomic(result.as_deref(), *op, &ptr, &ops);
                    return;
                }
                // Checked: the index and operands are evaluated once, in the host's order,
                // then an out-of-range atomic is dropped and its result is 0.
                self.tmp += 1;
                let i = format!("gd_i{}", self.tmp);
                self.line("{");
                self.indent += 1;
                self.line(&format!("let {i}: u32 = {ix};"));
                let mut temps = Vec::new();
                for (k, (o, e)) in ops.iter().zip(operands).enumerate() {
                    let v = format!("gd_a{}_{k}", self.tmp);
                    self.line(&format!("let {v}: {} = {o};", ty(e.ty)));
                    temps.push(v);
                }
                self.line(&format!("if ({i} < {len}) {{"));
                self.indent += 1;
                let ptr = format!("&{arr}[{off}{i}]");
                self.atomic(result.as_deref(), *op, &ptr, &temps);
                self.indent -= 1;
                self.line("} else {");
                self.indent += 1;
                self.line(&format!("gd_note({target}, {i}, {len}, true);"));
                if let Some(r) = result {
                    self.line(&format!("{r} = {};", zero(*t)));
                }
                self.indent -= 1;
                self.line("}");
                self.indent -= 1;
                self.line("}");
            }
        }
    }

    /// One atomic on `ptr` with operands `ops` (already emitted), its old value into `result`.
    fn atomic(&mut self, result: Option<&str>, op: AtomicOp, ptr: &str, ops: &[String]) {
        let call = match op {
            AtomicOp::Add => format!("atomicAdd({ptr}, {})", ops[0]),
            AtomicOp::Sub => format!("atomicSub({ptr}, {})", ops[0]),
            AtomicOp::Max => format!("atomicMax({ptr}, {})", ops[0]),
            AtomicOp::Min => format!("atomicMin({ptr}, {})", ops[0]),
            AtomicOp::And => format!("atomicAnd({ptr}, {})", ops[0]),
            AtomicOp::Or => format!("atomicOr({ptr}, {})", ops[0]),
            AtomicOp::Xor => format!("atomicXor({ptr}, {})", ops[0]),
            AtomicOp::Exchange => format!("atomicExchange({ptr}, {})", ops[0]),
            AtomicOp::Load => format!("atomicLoad({ptr})"),
            AtomicOp::Store => {
                self.line(&format!("atomicStore({ptr}, {});", ops[0]));
                return;
            }
            AtomicOp::CompareExchange => {
                // WGSL only has the weak form; retry spurious failures so the
                // result is the strong compare-exchange of CUDA and the host.
                self.tmp += 1;
                let r = format!("gd_cas{}", self.tmp);
                self.line("loop {");
                self.line(&format!(
                    "    let {r} = atomicCompareExchangeWeak({ptr}, {}, {});",
                    ops[0], ops[1]
                ));
                self.line(&format!(
                    "    if ({r}.exchanged || {r}.old_value != {}) {{",
                    ops[0]
                ));
                if let Some(res) = result {
                    self.line(&format!("        {res} = {r}.old_value;"));
                }
                self.line("        break;\n        }\n    }");
                return;
            }
        };
        match result {
            Some(r) => self.line(&format!("{r} = {call};")),
            None => self.line(&format!("{call};")),
        }
    }

    /// The storage or workgroup array of a checked access, the offset to add and the length.
    fn checked_target(&self, p: &Place) -> (String, String, String, String) {
        match p {
            Place::Param(i, _) => self.param_target(*i),
            Place::Shared(s, _) => {
                let sh = &self.k.shared[self.shared_ix[*s]];
                (
                    sh.name.clone(),
                    String::new(),
                    format!("{}u", sh.size),
                    format!("{}u", bounds::shared_target(self.k, self.shared_ix[*s])),
                )
            }
            Place::Array(a, _) => {
                let arr = &self.arrays[*a];
                (
                    arr.name.clone(),
                    String::new(),
                    format!("{}u", arr.len),
                    format!("{}u", self.array_base + *a),
                )
            }
            Place::Local(_) => unreachable!("locals are not indexed"),
        }
    }

    /// Slice parameter `i` of the function being emitted: its global binding, offset, length
    /// and target number (the kernel parameter whose binding it is: in a helper, the one the
    /// specialisation was made for).
    fn param_target(&self, i: usize) -> (String, String, String, String) {
        let (g, n) = (&self.globals[i], &self.params[i].name);
        let target = self
            .k
            .params
            .iter()
            .position(|p| p.name == *g)
            .expect("a slice's global is a kernel parameter");
        (
            format!("{g}_p"),
            format!("{n}_off + "),
            format!("{n}_len"),
            format!("{target}"),
        )
    }

    /// An atomic's memory as a checked access sees it: array, offset prefix, length, target.
    fn atomic_target(&self, t: &AtomicTarget) -> (String, String, String, String) {
        match *t {
            AtomicTarget::Param(i) => self.param_target(i),
            AtomicTarget::Shared(s) => {
                let sh = &self.k.shared[self.shared_ix[s]];
                (
                    sh.name.clone(),
                    String::new(),
                    format!("{}u", sh.size),
                    format!("{}u", bounds::shared_target(self.k, self.shared_ix[s])),
                )
            }
        }
    }

    /// The index check of a read (the hook every indexable target goes through): a call of a
    /// helper that reads in range, and out of range records the fault (unless the read sits
    /// in the arm of a `select` that is not taken) and gives 0.
    fn checked_read(&self, p: &Place) -> String {
        let (Place::Param(_, ix) | Place::Shared(_, ix) | Place::Array(_, ix)) = p else {
            unreachable!("locals are not indexed")
        };
        let (arr, off, len, target) = self.checked_target(p);
        let ix = self.expr(ix);
        let live = {
            let g = self.guards.borrow();
            if g.is_empty() {
                "true".to_string()
            } else {
                g.join(" && ")
            }
        };
        let name = format!("gd_ld_{arr}");
        let elem = match p {
            Place::Param(i, _) => match self.params[*i].kind {
                ParamKind::Slice { elem, .. } => elem,
                ParamKind::Scalar(t) => t,
            },
            Place::Shared(s, _) => self.k.shared[self.shared_ix[*s]].elem,
            Place::Array(a, _) => self.arrays[*a].elem,
            Place::Local(_) => unreachable!(),
        };
        let t = ty(elem);
        let z = zero(elem);
        match p {
            Place::Param(i, _) => {
                let n = &self.params[*i].name;
                let e = "gd_off + select(0u, gd_i, gd_ok)";
                let read = match self.layout(*i) {
                    Some(l) => l.read(&arr, e),
                    None => format!("{arr}[{e}]"),
                };
                self.module.loads.borrow_mut().entry(name.clone()).or_insert_with(|| format!(
                    "fn {name}(gd_off: u32, gd_n: u32, gd_i: u32, gd_live: bool) -> {t} {{\n    let gd_ok = gd_i < gd_n;\n    gd_note({target}, gd_i, gd_n, !gd_ok && gd_live);\n    return select({z}, {read}, gd_ok);\n}}\n"
                ));
                format!("{name}({n}_off, {n}_len, {ix}, {live})")
            }
            // A per-invocation array is a function variable of `main`: passed by pointer.
            Place::Array(a, _) => {
                let n = self.arrays[*a].len;
                self.module.loads.borrow_mut().entry(name.clone()).or_insert_with(|| format!(
                    "fn {name}(gd_a: ptr<function, array<{t}, {n}>>, gd_i: u32, gd_live: bool) -> {t} {{\n    let gd_ok = gd_i < {len};\n    gd_note({target}, gd_i, {len}, !gd_ok && gd_live);\n    return select({z}, (*gd_a)[select(0u, gd_i, gd_ok)], gd_ok);\n}}\n"
                ));
                format!("{name}(&{arr}, {ix}, {live})")
            }
            _ => {
                let _ = off;
                self.module.loads.borrow_mut().entry(name.clone()).or_insert_with(|| format!(
                    "fn {name}(gd_i: u32, gd_live: bool) -> {t} {{\n    let gd_ok = gd_i < {len};\n    gd_note({target}, gd_i, {len}, !gd_ok && gd_live);\n    return select({z}, {arr}[select(0u, gd_i, gd_ok)], gd_ok);\n}}\n"
                ));
                format!("{name}({ix}, {live})")
            }
        }
    }

    /// The index check of a write (`x[i] = v`, `x[i] op= v`): index and value evaluated once,
    /// in the host's order; out of range the write is dropped and the fault recorded.
    fn checked_write(&mut self, place: &Place, op: Option<BinOp>, value: &Expr, t: Ty) {
        let (Place::Param(_, ix) | Place::Shared(_, ix) | Place::Array(_, ix)) = place else {
            unreachable!("locals are not indexed")
        };
        let (arr, off, len, target) = self.checked_target(place);
        self.tmp += 1;
        let i = format!("gd_i{}", self.tmp);
        self.line("{");
        self.indent += 1;
        self.line(&format!("let {i}: u32 = {};", self.expr(ix)));
        // A value with no loads (a constant) stays inline, so `/ 2` keeps its unguarded form.
        let value = if is_const(value) {
            value.clone()
        } else {
            let v = format!("gd_v{}", self.tmp);
            self.line(&format!(
                "let {v}: {} = {};",
                ty(value.ty),
                self.expr(value)
            ));
            Expr {
                kind: ExprKind::Local(v),
                ty: value.ty,
            }
        };
        let p = format!("{arr}[{off}{i}]");
        let rhs = match op {
            None => self.expr(&value),
            Some(op) => self.binary(op, t, &p, &value),
        };
        let layout = match place {
            Place::Param(pi, _) => self.layout(*pi),
            _ => None,
        };
        self.line(&format!("if ({i} < {len}) {{"));
        match layout {
            Some(l) => self.line(&format!(
                "    {}",
                l.write(&arr, &format!("{off}{i}"), &rhs)
            )),
            None => self.line(&format!("    {p} = {rhs};")),
        }
        self.line("} else {");
        self.line(&format!("    gd_note({target}, {i}, {len}, true);"));
        self.line("}");
        self.indent -= 1;
        self.line("}");
    }

    /// `if c { a } else { b }` as WGSL's `select`, which evaluates both arms: in the checked
    /// variant each arm's reads fault only where the arm is taken.
    fn select(&self, c: &Expr, a: &Expr, b: &Expr) -> String {
        let cs = self.expr(c);
        let guarded = self.checked.is_some();
        if guarded {
            self.guards.borrow_mut().push(format!("({cs})"));
        }
        let a_s = self.expr(a);
        if guarded {
            let mut g = self.guards.borrow_mut();
            g.pop();
            g.push(format!("!({cs})"));
        }
        let b_s = self.expr(b);
        if guarded {
            self.guards.borrow_mut().pop();
        }
        format!("select({b_s}, {a_s}, {cs})")
    }

    /// `a op b` where `a` (already emitted) has type `t`, with the kernel language's meaning.
    fn binary(&self, op: BinOp, t: Ty, a: &str, b: &Expr) -> String {
        let bs = self.expr(b);
        match op {
            // A literal divisor other than 0 (and -1 for `i32`) needs no guard.
            BinOp::Div | BinOp::Rem
                if matches!(b.kind, ExprKind::LitU32(v) if v != 0)
                    || matches!(b.kind, ExprKind::LitI32(v) if v != 0 && v != -1) =>
            {
                format!("({a} {} {bs})", op.symbol())
            }
            BinOp::Div | BinOp::Rem if t.is_int() => {
                let name = match (op, t) {
                    (BinOp::Div, Ty::I32) => "gd_div_i32",
                    (BinOp::Rem, Ty::I32) => "gd_rem_i32",
                    (BinOp::Div, _) => "gd_div_u32",
                    _ => "gd_rem_u32",
                };
                self.module.helpers.borrow_mut().insert(name);
                format!("{name}({a}, {bs})")
            }
            BinOp::Rem if t == Ty::F32 => {
                self.module.helpers.borrow_mut().insert("gd_rem_f32");
                format!("gd_rem_f32({a}, {bs})")
            }
            // WGSL masks a run-time shift amount to 5 bits, but rejects a constant one of 32
            // or more; masking explicitly gives both the kernel language's meaning.
            BinOp::Shl | BinOp::Shr => match b.kind {
                ExprKind::LitU32(s) if s < 32 => format!("({a} {} {bs})", op.symbol()),
                _ => format!("({a} {} ({bs} & 31u))", op.symbol()),
            },
            // Rust's `!=` is true when either side is NaN; naga's `!=` is an ordered
            // comparison (false for NaN), while the negation of `==` is unordered.
            BinOp::Ne if t == Ty::F32 => format!("(!({a} == {bs}))"),
            // WGSL has no `^` on `bool`.
            BinOp::BitXor if t == Ty::Bool => format!("({a} != {bs})"),
            _ => format!("({a} {} {bs})", op.symbol()),
        }
    }

    pub(super) fn expr(&self, e: &Expr) -> String {
        if !self.opaque.get() && !is_literal(e) && is_const(e) {
            self.opaque.set(true);
            let s = self.expr(e);
            self.opaque.set(false);
            return s;
        }
        match &e.kind {
            ExprKind::LitF32(v) => f32_lit(*v, self.opaque.get()),
            // Inside a constant expression integer literals are opaque as well: WGSL rejects a
            // constant shift or cast that overflows, which the kernel language defines.
            ExprKind::LitI32(v) if self.opaque.get() => format!("bitcast<i32>({:#x}u)", *v as u32),
            ExprKind::LitU32(v) if self.opaque.get() => format!("bitcast<u32>({v}u)"),
            ExprKind::LitI32(v) => {
                if *v == i32::MIN {
                    "bitcast<i32>(0x80000000u)".into()
                } else if *v < 0 {
                    format!("(-{}i)", -(*v as i64))
                } else {
                    format!("{v}i")
                }
            }
            ExprKind::LitU32(v) => format!("{v}u"),
            // Opaque too: `u32(false)` would let naga fold `log2(f32(u32(false)))` (found by
            // the fuzzer) and reject the constant `log2(0)` at shader creation.
            ExprKind::LitBool(b) if self.opaque.get() => {
                format!("(bitcast<u32>({}u) != 0u)", u32::from(*b))
            }
            ExprKind::LitBool(b) => b.to_string(),
            ExprKind::Local(n) => n.clone(),
            ExprKind::Scalar(i) => format!("{}_{}", self.params[*i].name, self.scalar_suffix),
            ExprKind::Len(i) => format!("{}_len", self.params[*i].name),
            ExprKind::Call(h, args, _) => self.call(*h, args),
            ExprKind::Load(p) => match (self.checked, p) {
                (Some(_), Place::Param(..) | Place::Shared(..)) => self.checked_read(p),
                (Some(_), Place::Array(_, ix)) if !is_literal(ix) => self.checked_read(p),
                (None, Place::Array(a, ix)) => self.array_read(*a, ix),
                _ => self.place(p),
            },
            ExprKind::Id(b) => {
                let [x, y, z] = self.k.workgroup;
                match b {
                    IdBuiltin::GlobalId => "gd_gid".into(),
                    IdBuiltin::LocalId => "gd_lid".into(),
                    IdBuiltin::WorkgroupId => "gd_wid".into(),
                    IdBuiltin::NumWorkgroups => "gd_nwg".into(),
                    IdBuiltin::WorkgroupSize if self.opaque.get() => format!(
                        "vec3<u32>(bitcast<u32>({x}u), bitcast<u32>({y}u), bitcast<u32>({z}u))"
                    ),
                    IdBuiltin::WorkgroupSize => format!("vec3<u32>({x}u, {y}u, {z}u)"),
                    IdBuiltin::GlobalSize => format!("(gd_nwg * vec3<u32>({x}u, {y}u, {z}u))"),
                }
            }
            ExprKind::Field(b, c) => format!("{}.{}", self.expr(b), ["x", "y", "z"][*c as usize]),
            ExprKind::Unary(op, a) => match (op, a.ty) {
                (UnOp::Neg, _) => format!("(-{})", self.expr(a)),
                (UnOp::Not, Ty::Bool) => format!("(!{})", self.expr(a)),
                (UnOp::Not, _) => format!("(~{})", self.expr(a)),
            },
            ExprKind::Binary(op, a, b) => self.binary(*op, a.ty, &self.expr(a), b),
            ExprKind::Cast(a, to) => match (a.ty, *to) {
                (f, t) if f == t => self.expr(a),
                // `check/half.rs` leaves only these conversions of 16-bit values.
                (Ty::F32, Ty::F16 | Ty::BF16) | (Ty::F16 | Ty::BF16, Ty::F32) => {
                    let name = super::wgsl_half::conversion(a.ty, *to);
                    self.module.helpers.borrow_mut().insert(name);
                    format!("{name}({})", self.expr(a))
                }
                (Ty::F32, Ty::I32 | Ty::U32) => {
                    let name = if *to == Ty::I32 {
                        "gd_f32_to_i32"
                    } else {
                        "gd_f32_to_u32"
                    };
                    self.module.helpers.borrow_mut().insert(name);
                    format!("{name}({})", self.expr(a))
                }
                _ => format!("{}({})", ty(*to), self.expr(a)),
            },
            // A 16-bit value is already its bits in the low half of a `u32`.
            ExprKind::Bits(a, Ty::U32) => self.expr(a),
            ExprKind::Bits(a, _) => format!("({} & 0xffffu)", self.expr(a)),
            ExprKind::Math(MathFn::Select, args) if self.checked.is_some() => {
                self.select(&args[0], &args[1], &args[2])
            }
            ExprKind::Math(f, args) => {
                let a: Vec<String> = args.iter().map(|x| self.expr(x)).collect();
                let name = match f {
                    MathFn::Abs => "abs",
                    MathFn::Min => "min",
                    MathFn::Max => "max",
                    MathFn::Clamp => return format!("min(max({}, {}), {})", a[0], a[1], a[2]),
                    MathFn::Floor => "floor",
                    MathFn::Ceil => "ceil",
                    MathFn::Round => "round",
                    MathFn::Sqrt => "sqrt",
                    MathFn::Rsqrt => "inverseSqrt",
                    MathFn::Exp => "exp",
                    MathFn::Exp2 => "exp2",
                    MathFn::Log => "log",
                    MathFn::Log2 => "log2",
                    MathFn::Pow => "pow",
                    MathFn::Sin => "sin",
                    MathFn::Cos => "cos",
                    MathFn::Tanh => "tanh",
                    MathFn::Fma => "fma",
                    MathFn::Select => return format!("select({}, {}, {})", a[2], a[1], a[0]),
                };
                format!("{name}({})", a.join(", "))
            }
            ExprKind::Cond(c, a, b) => self.select(c, a, b),
            ExprKind::Subgroup(op, args, _) => {
                let a: Vec<String> = args.iter().map(|x| self.expr(x)).collect();
                super::subgroup::wgsl_expr(*op, e.ty, &a)
            }
        }
    }
}

fn f32_lit(v: f32, opaque: bool) -> String {
    if v.is_finite() && !opaque {
        let s = format!("{:e}f", v.abs());
        if v.is_sign_negative() {
            format!("(-{s})")
        } else {
            s
        }
    } else {
        format!("bitcast<f32>({:#010x}u)", v.to_bits())
    }
}
