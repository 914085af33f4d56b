//! Emits a kernel as a WGSL compute shader.
//!
//! Binding 0 is the argument block (`array<u32>`: scalars as bits, then each slice's offset
//! and length); slices follow in parameter order. Slices are bound whole and indexed from
//! their offset, so views at any element offset need no binding alignment.

use std::fmt::Write;

use crate::kernel::ir::*;

pub fn emit(k: &Kernel) -> String {
    let mut w = Wgsl {
        k,
        out: String::new(),
        indent: 1,
        tmp: 0,
    };
    let mut head = String::new();
    writeln!(head, "// graphed kernel `{}`", k.name).unwrap();
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
            let ty = if atomic {
                format!("atomic<{}>", ty(elem))
            } else {
                ty(elem).to_string()
            };
            writeln!(
                head,
                "@group(0) @binding({}) var<storage, {access}> {}_p: array<{ty}>;",
                p.binding, p.name
            )
            .unwrap();
        }
    }
    for s in &k.shared {
        writeln!(
            head,
            "var<workgroup> {}: array<{}, {}>;",
            s.name,
            ty(s.elem),
            s.size
        )
        .unwrap();
    }
    let [x, y, z] = k.workgroup;
    writeln!(head, "\n@compute @workgroup_size({x}, {y}, {z})").unwrap();
    writeln!(
        head,
        "fn main(@builtin(global_invocation_id) gd_gid: vec3<u32>, @builtin(local_invocation_id) gd_lid: vec3<u32>, @builtin(workgroup_id) gd_wid: vec3<u32>, @builtin(num_workgroups) gd_nwg: vec3<u32>) {{"
    )
    .unwrap();
    for p in &k.params {
        match p.kind {
            ParamKind::Scalar(t) => {
                let raw = format!("gd_args[{}u]", p.word);
                let v = match t {
                    Ty::F32 => format!("bitcast<f32>({raw})"),
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
    w.out.push_str("}\n");
    w.out
}

pub fn ty(t: Ty) -> &'static str {
    match t {
        Ty::F32 => "f32",
        Ty::I32 => "i32",
        Ty::U32 => "u32",
        Ty::Bool => "bool",
        Ty::UVec3 => "vec3<u32>",
    }
}

struct Wgsl<'k> {
    k: &'k Kernel,
    out: String,
    indent: usize,
    tmp: usize,
}

impl Wgsl<'_> {
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
                let n = &self.k.params[*i].name;
                format!("{n}_p[{n}_off + {}]", self.expr(ix))
            }
            Place::Shared(i, ix) => format!("{}[{}]", self.k.shared[*i].name, self.expr(ix)),
        }
    }

    fn stmt(&mut self, s: &Stmt) {
        match s {
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
                place, op, value, ..
            } => {
                let p = self.place(place);
                let v = self.expr(value);
                match op {
                    None => self.line(&format!("{p} = {v};")),
                    Some(op) => self.line(&format!("{p} {}= {v};", op.symbol())),
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
                start,
                end,
                step,
                body,
            } => {
                self.line("{");
                self.indent += 1;
                self.line(&format!("let {var}_end: {} = {};", ty(*t), self.expr(end)));
                let one = if *t == Ty::U32 { "1u" } else { "1i" };
                let step = step
                    .as_ref()
                    .map(|s| self.expr(s))
                    .unwrap_or_else(|| one.to_string());
                self.line(&format!("let {var}_step: {} = {step};", ty(*t)));
                let head = format!(
                    "for (var {var}: {} = {}; {var} < {var}_end; {var} = {var} + {var}_step)",
                    ty(*t),
                    self.expr(start)
                );
                self.nested(&head, body);
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
            Stmt::Return => self.line("return;"),
            Stmt::Barrier { .. } => self.line("storageBarrier();\n        workgroupBarrier();"),
            Stmt::Atomic {
                result,
                op,
                param,
                index,
                operands,
                ..
            } => {
                let n = &self.k.params[*param].name;
                let ptr = format!("&{n}_p[{n}_off + {}]", self.expr(index));
                let ops: Vec<String> = operands.iter().map(|o| self.expr(o)).collect();
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
        }
    }

    fn expr(&self, e: &Expr) -> String {
        match &e.kind {
            ExprKind::LitF32(v) => f32_lit(*v),
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
            ExprKind::LitBool(b) => b.to_string(),
            ExprKind::Local(n) => n.clone(),
            ExprKind::Scalar(i) => format!("{}_p", self.k.params[*i].name),
            ExprKind::Len(i) => format!("{}_len", self.k.params[*i].name),
            ExprKind::Load(p) => self.place(p),
            ExprKind::Id(b) => {
                let [x, y, z] = self.k.workgroup;
                match b {
                    IdBuiltin::GlobalId => "gd_gid".into(),
                    IdBuiltin::LocalId => "gd_lid".into(),
                    IdBuiltin::WorkgroupId => "gd_wid".into(),
                    IdBuiltin::NumWorkgroups => "gd_nwg".into(),
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
            ExprKind::Binary(op, a, b) => {
                format!("({} {} {})", self.expr(a), op.symbol(), self.expr(b))
            }
            ExprKind::Cast(a, to) => {
                if a.ty == *to {
                    self.expr(a)
                } else {
                    format!("{}({})", ty(*to), self.expr(a))
                }
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
            ExprKind::Cond(c, a, b) => format!(
                "select({}, {}, {})",
                self.expr(b),
                self.expr(a),
                self.expr(c)
            ),
        }
    }
}

fn f32_lit(v: f32) -> String {
    if v.is_finite() {
        let s = format!("{:e}f", v.abs());
        if v.is_sign_negative() {
            format!("(-{s})")
        } else {
            s
        }
    } else {
        format!("bitcast<f32>({}u)", v.to_bits())
    }
}
