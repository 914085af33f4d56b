//! Emits a kernel as host Rust, run by the host backend over every invocation.
//!
//! Workgroups run one after another. Without `barrier()`, each invocation is a closure run to
//! completion; with it, each invocation is a future that yields at every barrier, and the
//! workgroup's futures are polled in rounds, so shared memory and barriers keep their GPU
//! meaning. Every memory access is bounds-checked and a fault names kernel, slice and index.

use std::fmt::Write;

use crate::kernel::ir::*;

/// The kernel as Rust source for the host backend (checked slices, one invocation per call).
pub fn emit(k: &Kernel) -> String {
    let mut h = Host {
        k,
        params: &k.params,
        shared: &k.shared,
        arrays: &k.arrays,
        fault: &k.name,
        out: String::new(),
    };
    let name = &k.name;
    let mut s = String::new();
    writeln!(s, "fn host(gd_l: &::graphed::__private::HostLaunch<'_>) -> ::core::result::Result<(), ::graphed::KernelFault> {{").unwrap();
    s.push_str("use ::graphed::__private as gd;\nuse ::graphed::{bf16, f16};\n");
    s.push_str(&super::host_device::helpers(k, &k.name));
    let mut slice_ix = 0;
    for p in &k.params {
        match p.kind {
            ParamKind::Scalar(t) => {
                let v = match t {
                    Ty::F32 => format!("f32::from_bits(gd_l.args[{}])", p.word),
                    // A 16-bit scalar travels in the low half of its word.
                    Ty::F16 | Ty::BF16 => {
                        format!("{}::from_bits(gd_l.args[{}] as u16)", t.rust(), p.word)
                    }
                    Ty::I32 => format!("gd_l.args[{}] as i32", p.word),
                    Ty::U32 => format!("gd_l.args[{}]", p.word),
                    _ => format!("gd_l.args[{}] != 0", p.word),
                };
                writeln!(s, "let {}_p: {} = {v};", p.name, t.rust()).unwrap();
            }
            ParamKind::Slice { elem, .. } => {
                writeln!(s, "let {0}_p = gd::HostSlice::<{1}>::new(gd_l, {slice_ix}, {2}, {name:?}, {0:?})?;", p.name, elem.rust(), p.word).unwrap();
                writeln!(s, "let {0}_len: u32 = {0}_p.len();", p.name).unwrap();
                slice_ix += 1;
            }
        }
    }
    let [x, y, z] = k.workgroup;
    writeln!(
        s,
        "const GD_WG: gd::UVec3 = gd::UVec3 {{ x: {x}, y: {y}, z: {z} }};"
    )
    .unwrap();
    s.push_str("let gd_nwg = gd::UVec3::from(gd_l.workgroups);\n");
    s.push_str(
        "for gd_wz in 0..gd_nwg.z { for gd_wy in 0..gd_nwg.y { for gd_wx in 0..gd_nwg.x {\n",
    );
    s.push_str("let gd_wid = gd::UVec3 { x: gd_wx, y: gd_wy, z: gd_wz };\n");
    for sh in &k.shared {
        // A fault names the array as the source does (`s`, not the emitted `s_1`).
        writeln!(
            s,
            "let {0}_own = gd::HostShared::<{1}>::new({2}, {name:?}, {3:?});\nlet {0} = &{0}_own;",
            sh.name,
            sh.elem.rust(),
            sh.size,
            super::bounds::source_name(&sh.name)
        )
        .unwrap();
    }
    if k.has_subgroup {
        s.push_str("let gd_sg_own = gd::HostSubgroups::new(gd_l.subgroup_size, GD_WG.x * GD_WG.y * GD_WG.z);\nlet gd_sg = &gd_sg_own;\n");
    }
    let mma = crate::kernel::mma::exchanges(&k.body);
    if mma {
        s.push_str("let gd_mma_own = gd::HostMma::new(GD_WG.x);\nlet gd_mma = &gd_mma_own;\n");
    }
    let tasks = k.has_barrier || k.has_subgroup;
    if tasks {
        s.push_str("let mut gd_tasks: ::std::vec::Vec<gd::Task<'_>> = ::std::vec::Vec::new();\n");
    }
    s.push_str("for gd_lz in 0..GD_WG.z { for gd_ly in 0..GD_WG.y { for gd_lx in 0..GD_WG.x {\n");
    s.push_str("let gd_lid = gd::UVec3 { x: gd_lx, y: gd_ly, z: gd_lz };\n");
    s.push_str("let gd_gid = gd::UVec3 { x: gd_wx * GD_WG.x + gd_lx, y: gd_wy * GD_WG.y + gd_ly, z: gd_wz * GD_WG.z + gd_lz };\n");
    if k.has_subgroup || mma {
        // One-dimensional workgroups only (the checker): the linear index is `x`.
        s.push_str("let gd_li: u32 = gd_lx;\n");
    }
    h.block(&k.body);
    if tasks {
        writeln!(s, "gd_tasks.push(::std::boxed::Box::pin(async move {{\n{}\n::core::result::Result::Ok(())\n}}));", h.out).unwrap();
        s.push_str("}}}\n");
        writeln!(s, "gd::run_workgroup(gd_tasks, {name:?})?;").unwrap();
    } else {
        writeln!(s, "(|| -> ::core::result::Result<(), ::graphed::KernelFault> {{\n{}\n::core::result::Result::Ok(())\n}})()?;", h.out).unwrap();
        s.push_str("}}}\n");
    }
    s.push_str("}}}\n::core::result::Result::Ok(())\n}\n");
    s
}

pub(super) struct Host<'k> {
    pub k: &'k Kernel,
    /// The parameters of the function being emitted (the kernel's or a helper's).
    pub params: &'k [Param],
    /// Its workgroup arrays (a helper's: its workgroup-array parameters).
    pub shared: &'k [Shared],
    /// Its per-invocation arrays.
    pub arrays: &'k [LocalArray],
    /// The kernel a fault names.
    pub fault: &'k str,
    pub out: String,
}

fn zero(t: Ty) -> &'static str {
    match t {
        Ty::F32 => "0.0f32",
        Ty::F16 => "f16::ZERO",
        Ty::BF16 => "bf16::ZERO",
        Ty::I32 => "0i32",
        Ty::U32 => "0u32",
        Ty::Bool => "false",
        Ty::UVec3 => "gd::UVec3 { x: 0, y: 0, z: 0 }",
    }
}

impl Host<'_> {
    fn line(&mut self, s: &str) {
        self.out.push_str(s);
        self.out.push('\n');
    }

    fn block(&mut self, stmts: &[Stmt]) {
        for s in stmts {
            self.stmt(s);
        }
    }

    pub(super) fn block_pub(&mut self, stmts: &[Stmt]) {
        self.block(stmts);
    }

    fn stmt(&mut self, s: &Stmt) {
        match s {
            // Copied at once: the portable form (`kernel::copy_async`).
            Stmt::CopyAsync(c) => {
                self.line("{");
                self.block(&c.setup);
                self.block(&c.copy);
                self.line("}");
            }
            Stmt::CopyFence(_) => {}
            Stmt::ReturnArray(a) => self.line(&format!(
                "return ::core::result::Result::Ok({});",
                self.arrays[*a].name
            )),
            Stmt::ReturnValue(e) => {
                let v = self.expr(e);
                self.line(&format!("return ::core::result::Result::Ok({v});"));
            }
            Stmt::Call(e) => {
                let v = self.expr(e);
                self.line(&format!("let _ = {v};"));
            }
            Stmt::Let {
                name,
                ty,
                mutable,
                init,
            } => {
                let v = init
                    .as_ref()
                    .map(|e| self.expr(e))
                    .unwrap_or_else(|| zero(*ty).to_string());
                let m = if *mutable { "mut " } else { "" };
                let t = if *ty == Ty::UVec3 {
                    "gd::UVec3"
                } else {
                    ty.rust()
                };
                self.line(&format!("let {m}{name}: {t} = {v};"));
            }
            Stmt::Assign {
                place,
                op,
                value,
                ty,
            } => {
                let v = self.expr(value);
                match place {
                    Place::Local(n) => match op {
                        None => self.line(&format!("{n} = {v};")),
                        Some(op) => {
                            let rhs = binary(*op, *ty, n, &v);
                            self.line(&format!("{n} = {rhs};"));
                        }
                    },
                    Place::Array(a, ix) => {
                        let arr = &self.arrays[*a];
                        let (kernel, source) = (&self.k.name, &arr.source);
                        let name = arr.name.clone();
                        let ix = self.expr(ix);
                        let rhs = match op {
                            None => "gd_v".to_string(),
                            Some(op) => binary(
                                *op,
                                *ty,
                                &format!("gd::array_get(&{name}, gd_i, {kernel:?}, {source:?})?"),
                                "gd_v",
                            ),
                        };
                        // Index and value first, so no borrow of the array overlaps the write.
                        self.line(&format!("{{ let gd_i: u32 = {ix}; let gd_v = {v}; let gd_n = {rhs}; gd::array_set(&mut {name}, gd_i, gd_n, {kernel:?}, {source:?})?; }}"));
                    }
                    Place::Param(..) | Place::Shared(..) => {
                        let (target, ix) = self.target(place);
                        match op {
                            None => self.line(&format!("{target}.set({ix}, {v})?;")),
                            Some(op) => {
                                let rhs = binary(*op, *ty, &format!("{target}.get(gd_i)?"), "gd_v");
                                self.line(&format!("{{ let gd_i = {ix}; let gd_v = {v}; {target}.set(gd_i, {rhs})?; }}"));
                            }
                        }
                    }
                }
            }
            Stmt::If { cond, then, els } => {
                let c = self.expr(cond);
                self.line(&format!("if {c} {{"));
                self.block(then);
                if els.is_empty() {
                    self.line("}");
                } else {
                    self.line("} else {");
                    self.block(els);
                    self.line("}");
                }
            }
            Stmt::For {
                var,
                source,
                ty,
                start,
                end,
                step,
                body,
                ..
            } => {
                let t = ty.rust();
                let (st, en) = (self.expr(start), self.expr(end));
                let step = ForStep::of(step);
                let sv = match step {
                    ForStep::Unit => {
                        if *ty == Ty::U32 {
                            "1u32".to_string()
                        } else {
                            "1i32".to_string()
                        }
                    }
                    ForStep::Literal(e) | ForStep::RunTime(e) => self.expr(e),
                };
                self.line(&format!(
                    "{{ let {var}_end: {t} = {en}; let {var}_step: {t} = {sv};"
                ));
                if let ForStep::RunTime(_) = step {
                    // As Rust's `step_by` panics on 0, a step below 1 is a fault here.
                    let bad = if *ty == Ty::U32 { "== 0u32" } else { "< 1i32" };
                    self.line(&format!(
                        "if {var}_step {bad} {{ return ::core::result::Result::Err(::graphed::KernelFault {{ kernel: {:?}, target: {source:?}, kind: ::graphed::FaultKind::BadStep {{ step: {var}_step as i64 }} }}); }}",
                        self.fault
                    ));
                }
                // The next value is computed before the body so `continue` cannot skip it.
                // Where `var + step` would pass `end` or the type's range, the loop ends.
                let next = match step {
                    ForStep::Unit => format!("{var}_next.wrapping_add({var}_step)"),
                    _ if *ty == Ty::U32 => format!(
                        "if {var}_step < {var}_end - {var} {{ {var} + {var}_step }} else {{ {var}_end }}"
                    ),
                    _ => format!(
                        "if ({var}_step as u32) < ({var}_end as u32).wrapping_sub({var} as u32) {{ {var}.wrapping_add({var}_step) }} else {{ {var}_end }}"
                    ),
                };
                self.line(&format!("let mut {var}_next: {t} = {st};"));
                self.line(&format!("while {var}_next < {var}_end {{ let {var}: {t} = {var}_next; {var}_next = {next};"));
                self.block(body);
                self.line("} }");
            }
            Stmt::Array { array, init } => {
                let arr = &self.arrays[*array];
                let (name, n, t) = (arr.name.clone(), arr.len, arr.elem.rust());
                let v = match init {
                    ArrayInit::Splat(v) => format!("[{}; {n}]", self.expr(v)),
                    ArrayInit::List(vs) => {
                        let elems: Vec<String> = vs.iter().map(|v| self.expr(v)).collect();
                        format!("[{}]", elems.join(", "))
                    }
                    ArrayInit::Call(e) => self.expr(e),
                };
                self.line(&format!("let mut {name}: [{t}; {n}] = {v};"));
            }
            Stmt::While { cond, body } => {
                let c = self.expr(cond);
                self.line(&format!("while {c} {{"));
                self.block(body);
                self.line("}");
            }
            Stmt::Loop { body } => {
                self.line("loop {");
                self.block(body);
                self.line("}");
            }
            Stmt::Break => self.line("break;"),
            Stmt::Continue => self.line("continue;"),
            Stmt::Return => self.line("return ::core::result::Result::Ok(());"),
            Stmt::Barrier { .. } => self.line("gd::barrier().await;"),
            Stmt::DeviceFence { .. } => {
                self.line("::std::sync::atomic::fence(::std::sync::atomic::Ordering::SeqCst);")
            }
            Stmt::Mma(m) => {
                let line = super::mma::host_stmt(m, self.arrays);
                self.line(&line);
            }
            // `ldmatrix_x4` (see `crate::kernel::ldmatrix`): the rows its group's lanes name,
            // through the workgroup's `HostMma`, then the invocation's four words of them.
            Stmt::Ldmatrix(l) => {
                let row = self.expr(&l.row);
                let (name, w) = (&self.shared[l.shared].name, &self.arrays[l.w].name);
                self.line(&format!(
                    "{w} = gd_mma.ldmatrix_x4(gd_li, {row}, {}, |gd_q| {name}.get(gd_q)).await?;",
                    l.trans
                ));
            }
            Stmt::Atomic {
                result,
                op,
                target,
                index,
                operands,
                ..
            } => {
                let n = match target {
                    AtomicTarget::Param(p) => format!("{}_p", self.params[*p].name),
                    AtomicTarget::Shared(s) => self.shared[*s].name.clone(),
                };
                let ix = self.expr(index);
                let ops: Vec<String> = operands.iter().map(|o| self.expr(o)).collect();
                let call = match op {
                    AtomicOp::Add => format!("{n}.atomic(gd::AtomicRmw::Add, {ix}, {})?", ops[0]),
                    AtomicOp::Sub => format!("{n}.atomic(gd::AtomicRmw::Sub, {ix}, {})?", ops[0]),
                    AtomicOp::Max => format!("{n}.atomic(gd::AtomicRmw::Max, {ix}, {})?", ops[0]),
                    AtomicOp::Min => format!("{n}.atomic(gd::AtomicRmw::Min, {ix}, {})?", ops[0]),
                    AtomicOp::And => format!("{n}.atomic(gd::AtomicRmw::And, {ix}, {})?", ops[0]),
                    AtomicOp::Or => format!("{n}.atomic(gd::AtomicRmw::Or, {ix}, {})?", ops[0]),
                    AtomicOp::Xor => format!("{n}.atomic(gd::AtomicRmw::Xor, {ix}, {})?", ops[0]),
                    AtomicOp::Exchange | AtomicOp::Store => {
                        format!("{n}.atomic(gd::AtomicRmw::Exchange, {ix}, {})?", ops[0])
                    }
                    AtomicOp::Load => format!("{n}.get({ix})?"),
                    AtomicOp::CompareExchange => {
                        format!("{n}.compare_exchange({ix}, {}, {})?", ops[0], ops[1])
                    }
                };
                match result {
                    Some(r) => self.line(&format!("{r} = {call};")),
                    None => self.line(&format!("{call};")),
                }
            }
        }
    }

    fn target(&self, p: &Place) -> (String, String) {
        match p {
            Place::Param(i, ix) => (format!("{}_p", self.params[*i].name), self.expr(ix)),
            Place::Shared(i, ix) => (self.shared[*i].name.clone(), self.expr(ix)),
            Place::Local(_) | Place::Array(..) => unreachable!(),
        }
    }

    pub(super) fn expr(&self, e: &Expr) -> String {
        match &e.kind {
            ExprKind::LitF32(v) => format!("f32::from_bits({:#x}u32)", v.to_bits()),
            ExprKind::LitI32(v) => format!("({v}i32)"),
            ExprKind::LitU32(v) => format!("{v}u32"),
            ExprKind::LitBool(b) => b.to_string(),
            ExprKind::Local(n) => n.clone(),
            ExprKind::Scalar(i) => format!("{}_p", self.params[*i].name),
            ExprKind::Len(i) => format!("{}_len", self.params[*i].name),
            ExprKind::Load(Place::Array(a, ix)) => {
                let arr = &self.arrays[*a];
                match ix.kind {
                    // In bounds: the checker rejects literals past the end.
                    ExprKind::LitU32(i) => format!("{}[{i}usize]", arr.name),
                    _ => format!(
                        "gd::array_get(&{}, {}, {:?}, {:?})?",
                        arr.name,
                        self.expr(ix),
                        self.k.name,
                        arr.source
                    ),
                }
            }
            ExprKind::Call(h, args, _) => self.call(*h, args),
            ExprKind::Load(p) => {
                let (t, ix) = self.target(p);
                format!("{t}.get({ix})?")
            }
            ExprKind::Id(b) => match b {
                IdBuiltin::GlobalId => "gd_gid".into(),
                IdBuiltin::LocalId => "gd_lid".into(),
                IdBuiltin::WorkgroupId => "gd_wid".into(),
                IdBuiltin::NumWorkgroups => "gd_nwg".into(),
                IdBuiltin::WorkgroupSize => "GD_WG".into(),
                IdBuiltin::GlobalSize => "gd::UVec3 { x: gd_nwg.x.wrapping_mul(GD_WG.x), y: gd_nwg.y.wrapping_mul(GD_WG.y), z: gd_nwg.z.wrapping_mul(GD_WG.z) }".into(),
            },
            ExprKind::Field(b, c) => format!("{}.{}", self.expr(b), ["x", "y", "z"][*c as usize]),
            ExprKind::Unary(op, a) => match (op, a.ty) {
                (UnOp::Neg, Ty::I32) => format!("{}.wrapping_neg()", self.expr(a)),
                (UnOp::Neg, _) => format!("(-{})", self.expr(a)),
                (UnOp::Not, _) => format!("(!{})", self.expr(a)),
            },
            ExprKind::Binary(op, a, b) => binary(*op, a.ty, &self.expr(a), &self.expr(b)),
            ExprKind::Cast(a, to) => {
                let v = self.expr(a);
                if a.ty == *to {
                    v
                } else if to.is_half() {
                    // `check/half.rs` leaves only `f32` → 16-bit (the half crate: nearest,
                    // ties to even, overflow to infinity, NaN kept quiet) and back (exact).
                    format!("{}::from_f32({v})", to.rust())
                } else if a.ty.is_half() {
                    format!("({v}).to_f32()")
                } else {
                    format!("(({v}) as {})", to.rust())
                }
            }
            ExprKind::Bits(a, Ty::U32) => format!("(({}).to_bits() as u32)", self.expr(a)),
            ExprKind::Bits(a, to) => format!("{}::from_bits(({}) as u16)", to.rust(), self.expr(a)),
            ExprKind::Math(f, args) => {
                let a: Vec<String> = args.iter().map(|x| format!("({})", self.expr(x))).collect();
                let int = e.ty.is_int();
                match f {
                    MathFn::Abs if e.ty == Ty::I32 => format!("{}.wrapping_abs()", a[0]),
                    MathFn::Abs => format!("{}.abs()", a[0]),
                    MathFn::Min if int => format!("::core::cmp::min({}, {})", a[0], a[1]),
                    MathFn::Max if int => format!("::core::cmp::max({}, {})", a[0], a[1]),
                    MathFn::Clamp if int => format!("::core::cmp::min(::core::cmp::max({}, {}), {})", a[0], a[1], a[2]),
                    MathFn::Min => format!("{}.min({})", a[0], a[1]),
                    MathFn::Max => format!("{}.max({})", a[0], a[1]),
                    MathFn::Clamp => format!("{}.max({}).min({})", a[0], a[1], a[2]),
                    MathFn::Floor => format!("{}.floor()", a[0]),
                    MathFn::Ceil => format!("{}.ceil()", a[0]),
                    MathFn::Round => format!("{}.round_ties_even()", a[0]),
                    MathFn::Sqrt => format!("{}.sqrt()", a[0]),
                    MathFn::Rsqrt => format!("(1.0f32 / {}.sqrt())", a[0]),
                    MathFn::Exp => format!("{}.exp()", a[0]),
                    MathFn::Exp2 => format!("{}.exp2()", a[0]),
                    MathFn::Log => format!("{}.ln()", a[0]),
                    MathFn::Log2 => format!("{}.log2()", a[0]),
                    MathFn::Pow => format!("{}.powf({})", a[0], a[1]),
                    MathFn::Sin => format!("{}.sin()", a[0]),
                    MathFn::Cos => format!("{}.cos()", a[0]),
                    MathFn::Tanh => format!("{}.tanh()", a[0]),
                    MathFn::Fma => format!("{}.mul_add({}, {})", a[0], a[1], a[2]),
                    MathFn::Select => format!("(if {} {{ {} }} else {{ {} }})", a[0], a[1], a[2]),
                }
            }
            ExprKind::Cond(c, a, b) => format!("(if {} {{ {} }} else {{ {} }})", self.expr(c), self.expr(a), self.expr(b)),
            ExprKind::Subgroup(op, args, _) => {
                let a: Vec<String> = args.iter().map(|x| self.expr(x)).collect();
                let combine = if op.is_reduction() {
                    self.expr(&op.combine(e.ty, "gd_a", "gd_b"))
                } else {
                    String::new()
                };
                super::subgroup::host_expr(*op, e.ty, &a, &combine)
            }
        }
    }
}

/// `a op b` with the kernel language's integer semantics (wrapping, WGSL division and shifts).
fn binary(op: BinOp, t: Ty, a: &str, b: &str) -> String {
    let int = t.is_int();
    match op {
        BinOp::Add if int => format!("({a}).wrapping_add({b})"),
        BinOp::Sub if int => format!("({a}).wrapping_sub({b})"),
        BinOp::Mul if int => format!("({a}).wrapping_mul({b})"),
        BinOp::Div if int => format!("gd::div_{}({a}, {b})", t.rust()),
        BinOp::Rem if int => format!("gd::rem_{}({a}, {b})", t.rust()),
        BinOp::Shl => format!("({a}).wrapping_shl({b})"),
        BinOp::Shr => format!("({a}).wrapping_shr({b})"),
        _ => format!("({a} {} {b})", op.symbol()),
    }
}
