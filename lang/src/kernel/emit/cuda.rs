//! Emits a kernel as CUDA C (`extern "C" __global__`), compiled at run time by NVRTC.
//!
//! Integer arithmetic goes through helpers on unsigned values, so it wraps as on WGSL and the
//! host instead of being C's signed-overflow undefined behaviour; division and shifts follow
//! WGSL's definitions (x / 0 == x, x % 0 == 0, shift amounts masked to 5 bits).

use std::fmt::Write;

use crate::kernel::ir::*;

/// Helpers shared by every kernel (each translation unit holds one kernel).
const PRELUDE: &str = r#"typedef unsigned int gd_u32;
static __device__ __forceinline__ int gd_add_i32(int a, int b) { return (int)((gd_u32)a + (gd_u32)b); }
static __device__ __forceinline__ int gd_sub_i32(int a, int b) { return (int)((gd_u32)a - (gd_u32)b); }
static __device__ __forceinline__ int gd_mul_i32(int a, int b) { return (int)((gd_u32)a * (gd_u32)b); }
static __device__ __forceinline__ int gd_neg_i32(int a) { return (int)(0u - (gd_u32)a); }
static __device__ __forceinline__ int gd_abs_i32(int a) { return a < 0 ? gd_neg_i32(a) : a; }
static __device__ __forceinline__ int gd_div_i32(int a, int b) { return (b == 0 || (a == (-2147483647 - 1) && b == -1)) ? a : a / b; }
static __device__ __forceinline__ int gd_rem_i32(int a, int b) { return (b == 0 || (a == (-2147483647 - 1) && b == -1)) ? 0 : a % b; }
static __device__ __forceinline__ gd_u32 gd_div_u32(gd_u32 a, gd_u32 b) { return b == 0u ? a : a / b; }
static __device__ __forceinline__ gd_u32 gd_rem_u32(gd_u32 a, gd_u32 b) { return b == 0u ? 0u : a % b; }
static __device__ __forceinline__ int gd_shl_i32(int a, gd_u32 s) { return (int)((gd_u32)a << (s & 31u)); }
static __device__ __forceinline__ int gd_shr_i32(int a, gd_u32 s) { return a >> (s & 31u); }
static __device__ __forceinline__ gd_u32 gd_shl_u32(gd_u32 a, gd_u32 s) { return a << (s & 31u); }
static __device__ __forceinline__ gd_u32 gd_shr_u32(gd_u32 a, gd_u32 s) { return a >> (s & 31u); }
static __device__ __forceinline__ int gd_min_i32(int a, int b) { return a < b ? a : b; }
static __device__ __forceinline__ int gd_max_i32(int a, int b) { return a > b ? a : b; }
static __device__ __forceinline__ gd_u32 gd_min_u32(gd_u32 a, gd_u32 b) { return a < b ? a : b; }
static __device__ __forceinline__ gd_u32 gd_max_u32(gd_u32 a, gd_u32 b) { return a > b ? a : b; }
"#;

/// The kernel as CUDA C source for NVRTC (`extern "C" __global__`).
pub fn emit(k: &Kernel) -> String {
    let mut c = Cuda {
        k,
        params: &k.params,
        out: String::new(),
        indent: 1,
    };
    let mut head = String::new();
    writeln!(head, "// graphed kernel `{}`", k.name).unwrap();
    head.push_str(PRELUDE);
    super::cuda_device::emit_helpers(k, &mut head);
    let mut params = vec!["const gd_u32* __restrict__ gd_args".to_string()];
    for p in &k.params {
        if let ParamKind::Slice { elem, mutable, .. } = p.kind {
            let cst = if mutable { "" } else { "const " };
            params.push(format!("{cst}{}* __restrict__ {}_p", ty(elem), p.name));
        }
    }
    let threads: u32 = k.workgroup.iter().product();
    writeln!(
        head,
        "extern \"C\" __global__ void __launch_bounds__({threads}) {}({}) {{",
        k.name,
        params.join(", ")
    )
    .unwrap();
    for p in &k.params {
        match p.kind {
            ParamKind::Scalar(t) => {
                let raw = format!("gd_args[{}]", p.word);
                let v = match t {
                    Ty::F32 => format!("__uint_as_float({raw})"),
                    Ty::I32 => format!("(int)({raw})"),
                    Ty::Bool => format!("({raw} != 0u)"),
                    _ => raw,
                };
                writeln!(head, "    const {} {}_p = {v};", ty(t), p.name).unwrap();
            }
            ParamKind::Slice { .. } => {
                writeln!(head, "    const gd_u32 {0}_off = gd_args[{1}];\n    const gd_u32 {0}_len = gd_args[{2}];", p.name, p.word, p.word + 1).unwrap();
            }
        }
    }
    for s in &k.shared {
        writeln!(
            head,
            "    __shared__ {} {}[{}];",
            ty(s.elem),
            s.name,
            s.size
        )
        .unwrap();
    }
    head.push_str("    const uint3 gd_lid = threadIdx;\n    const uint3 gd_wid = blockIdx;\n    const uint3 gd_nwg = gridDim;\n");
    head.push_str("    const uint3 gd_gid = make_uint3(blockIdx.x * blockDim.x + threadIdx.x, blockIdx.y * blockDim.y + threadIdx.y, blockIdx.z * blockDim.z + threadIdx.z);\n");
    c.out = head;
    c.block(&k.body);
    c.out.push_str("}\n");
    c.out
}

/// The CUDA C spelling of a scalar type.
pub fn ty(t: Ty) -> &'static str {
    match t {
        Ty::F32 => "float",
        Ty::I32 => "int",
        Ty::U32 => "gd_u32",
        Ty::Bool => "bool",
        Ty::UVec3 => "uint3",
    }
}

fn zero(t: Ty) -> &'static str {
    match t {
        Ty::F32 => "0.0f",
        Ty::I32 => "0",
        Ty::U32 => "0u",
        Ty::Bool => "false",
        Ty::UVec3 => "make_uint3(0u, 0u, 0u)",
    }
}

pub(super) struct Cuda<'k> {
    pub k: &'k Kernel,
    /// The parameters of the function being emitted (the kernel's or a helper's).
    pub params: &'k [Param],
    pub out: String,
    pub indent: usize,
}

impl Cuda<'_> {
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
                let n = &self.params[*i].name;
                format!("{n}_p[{n}_off + {}]", self.expr(ix))
            }
            Place::Shared(i, ix) => format!("{}[{}]", self.k.shared[*i].name, self.expr(ix)),
        }
    }

    pub(super) fn block_pub(&mut self, stmts: &[Stmt]) {
        self.block(stmts);
    }

    fn stmt(&mut self, s: &Stmt) {
        match s {
            Stmt::ReturnValue(e) => {
                let v = self.expr(e);
                self.line(&format!("return {v};"));
            }
            Stmt::Call(e) => {
                let v = self.expr(e);
                self.line(&format!("{v};"));
            }
            Stmt::Let {
                name,
                ty: t,
                mutable,
                init,
            } => {
                let v = init
                    .as_ref()
                    .map(|e| self.expr(e))
                    .unwrap_or_else(|| zero(*t).to_string());
                let cst = if *mutable { "" } else { "const " };
                self.line(&format!("{cst}{} {name} = {v};", ty(*t)));
            }
            Stmt::Assign {
                place,
                op,
                value,
                ty: t,
            } => {
                let p = self.place(place);
                let v = self.expr(value);
                match op {
                    None => self.line(&format!("{p} = {v};")),
                    Some(op) => {
                        let rhs = binary(*op, *t, &p, &v);
                        self.line(&format!("{p} = {rhs};"));
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
                start,
                end,
                step,
                body,
                ..
            } => {
                self.line("{");
                self.indent += 1;
                let tn = ty(*t);
                self.line(&format!("const {tn} {var}_end = {};", self.expr(end)));
                let st = self.expr(start);
                let step = ForStep::of(step);
                let e = match step {
                    ForStep::Unit => {
                        let one = if *t == Ty::U32 { "1u" } else { "1" };
                        self.line(&format!("const {tn} {var}_step = {one};"));
                        None
                    }
                    ForStep::Literal(e) | ForStep::RunTime(e) => {
                        self.line(&format!("const {tn} {var}_step = {};", self.expr(e)));
                        Some(matches!(step, ForStep::RunTime(_)))
                    }
                };
                // A run-time step below 1 runs no iteration (the host faults instead).
                if e == Some(true) {
                    self.line(&format!("if ({var}_step > 0) {{"));
                    self.indent += 1;
                }
                let inc = binary(BinOp::Add, *t, var, &format!("{var}_step"));
                // Past `end`, or past the type's range, the loop ends instead of wrapping: the
                // next value is taken only while `step < end - var` (in unsigned arithmetic,
                // where the distance of two ints always fits).
                let update = match e {
                    None => format!("{var} = {inc}"),
                    Some(_) => format!("{var} = ((unsigned int){var}_step < (unsigned int){var}_end - (unsigned int){var}) ? {inc} : {var}_end"),
                };
                let head = format!("for ({tn} {var} = {st}; {var} < {var}_end; {update})");
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
            Stmt::Loop { body } => self.nested("for (;;)", body),
            Stmt::Break => self.line("break;"),
            Stmt::Continue => self.line("continue;"),
            Stmt::Return => self.line("return;"),
            Stmt::Barrier { .. } => self.line("__syncthreads();"),
            Stmt::Atomic {
                result,
                op,
                param,
                index,
                operands,
                ty: t,
            } => {
                let n = &self.params[*param].name;
                let ptr = format!("&{n}_p[{n}_off + {}]", self.expr(index));
                let ops: Vec<String> = operands.iter().map(|o| self.expr(o)).collect();
                let zero = zero(*t);
                let call = match op {
                    AtomicOp::Add => format!("atomicAdd({ptr}, {})", ops[0]),
                    AtomicOp::Sub => format!("atomicSub({ptr}, {})", ops[0]),
                    AtomicOp::Max => format!("atomicMax({ptr}, {})", ops[0]),
                    AtomicOp::Min => format!("atomicMin({ptr}, {})", ops[0]),
                    AtomicOp::And => format!("atomicAnd({ptr}, {})", ops[0]),
                    AtomicOp::Or => format!("atomicOr({ptr}, {})", ops[0]),
                    AtomicOp::Xor => format!("atomicXor({ptr}, {})", ops[0]),
                    AtomicOp::Exchange | AtomicOp::Store => {
                        format!("atomicExch({ptr}, {})", ops[0])
                    }
                    AtomicOp::Load => format!("atomicAdd({ptr}, {zero})"),
                    AtomicOp::CompareExchange => {
                        format!("atomicCAS({ptr}, {}, {})", ops[0], ops[1])
                    }
                };
                match result {
                    Some(r) => self.line(&format!("{r} = {call};")),
                    None => self.line(&format!("{call};")),
                }
            }
        }
    }

    pub(super) fn expr(&self, e: &Expr) -> String {
        match &e.kind {
            ExprKind::LitF32(v) => {
                if v.is_finite() {
                    let s = format!("{:e}f", v.abs());
                    if v.is_sign_negative() {
                        format!("(-{s})")
                    } else {
                        s
                    }
                } else {
                    format!("__uint_as_float({}u)", v.to_bits())
                }
            }
            ExprKind::LitI32(v) => {
                if *v == i32::MIN {
                    "(-2147483647 - 1)".into()
                } else if *v < 0 {
                    format!("({v})")
                } else {
                    v.to_string()
                }
            }
            ExprKind::LitU32(v) => format!("{v}u"),
            ExprKind::LitBool(b) => b.to_string(),
            ExprKind::Local(n) => n.clone(),
            ExprKind::Scalar(i) => format!("{}_p", self.params[*i].name),
            ExprKind::Len(i) => format!("{}_len", self.params[*i].name),
            ExprKind::Call(h, args) => self.call(*h, args),
            ExprKind::Load(p) => self.place(p),
            ExprKind::Id(b) => {
                let [x, y, z] = self.k.workgroup;
                match b {
                    IdBuiltin::GlobalId => "gd_gid".into(),
                    IdBuiltin::LocalId => "gd_lid".into(),
                    IdBuiltin::WorkgroupId => "gd_wid".into(),
                    IdBuiltin::NumWorkgroups => "gd_nwg".into(),
                    IdBuiltin::WorkgroupSize => format!("make_uint3({x}u, {y}u, {z}u)"),
                    IdBuiltin::GlobalSize => {
                        format!("make_uint3(gd_nwg.x * {x}u, gd_nwg.y * {y}u, gd_nwg.z * {z}u)")
                    }
                }
            }
            ExprKind::Field(b, c) => format!("{}.{}", self.expr(b), ["x", "y", "z"][*c as usize]),
            ExprKind::Unary(op, a) => match (op, a.ty) {
                (UnOp::Neg, Ty::I32) => format!("gd_neg_i32({})", self.expr(a)),
                (UnOp::Neg, _) => format!("(-{})", self.expr(a)),
                (UnOp::Not, Ty::Bool) => format!("(!{})", self.expr(a)),
                (UnOp::Not, _) => format!("(~{})", self.expr(a)),
            },
            ExprKind::Binary(op, a, b) => binary(*op, a.ty, &self.expr(a), &self.expr(b)),
            ExprKind::Cast(a, to) => {
                let v = self.expr(a);
                match (a.ty, *to) {
                    (f, t) if f == t => v,
                    (Ty::F32, Ty::I32) => format!("__float2int_rz({v})"),
                    (Ty::F32, Ty::U32) => format!("__float2uint_rz({v})"),
                    (Ty::I32, Ty::F32) => format!("__int2float_rn({v})"),
                    (Ty::U32, Ty::F32) => format!("__uint2float_rn({v})"),
                    (Ty::Bool, Ty::I32) => format!("({v} ? 1 : 0)"),
                    (Ty::Bool, Ty::U32) => format!("({v} ? 1u : 0u)"),
                    (_, t) => format!("(({}){v})", ty(t)),
                }
            }
            ExprKind::Math(f, args) => {
                let a: Vec<String> = args.iter().map(|x| self.expr(x)).collect();
                let t = e.ty;
                let (min, max) = match t {
                    Ty::F32 => ("fminf", "fmaxf"),
                    Ty::I32 => ("gd_min_i32", "gd_max_i32"),
                    _ => ("gd_min_u32", "gd_max_u32"),
                };
                match f {
                    MathFn::Abs if t == Ty::I32 => format!("gd_abs_i32({})", a[0]),
                    MathFn::Abs => format!("fabsf({})", a[0]),
                    MathFn::Min => format!("{min}({}, {})", a[0], a[1]),
                    MathFn::Max => format!("{max}({}, {})", a[0], a[1]),
                    MathFn::Clamp => format!("{min}({max}({}, {}), {})", a[0], a[1], a[2]),
                    MathFn::Floor => format!("floorf({})", a[0]),
                    MathFn::Ceil => format!("ceilf({})", a[0]),
                    MathFn::Round => format!("rintf({})", a[0]),
                    MathFn::Sqrt => format!("sqrtf({})", a[0]),
                    MathFn::Rsqrt => format!("rsqrtf({})", a[0]),
                    MathFn::Exp => format!("expf({})", a[0]),
                    MathFn::Exp2 => format!("exp2f({})", a[0]),
                    MathFn::Log => format!("logf({})", a[0]),
                    MathFn::Log2 => format!("log2f({})", a[0]),
                    MathFn::Pow => format!("powf({}, {})", a[0], a[1]),
                    MathFn::Sin => format!("sinf({})", a[0]),
                    MathFn::Cos => format!("cosf({})", a[0]),
                    MathFn::Tanh => format!("tanhf({})", a[0]),
                    MathFn::Fma => format!("fmaf({}, {}, {})", a[0], a[1], a[2]),
                    MathFn::Select => format!("({} ? {} : {})", a[0], a[1], a[2]),
                }
            }
            ExprKind::Cond(c, a, b) => {
                format!("({} ? {} : {})", self.expr(c), self.expr(a), self.expr(b))
            }
        }
    }
}

/// `a op b` for operands of type `t`, with defined integer semantics.
fn binary(op: BinOp, t: Ty, a: &str, b: &str) -> String {
    match (op, t) {
        (BinOp::Add, Ty::I32) => format!("gd_add_i32({a}, {b})"),
        (BinOp::Sub, Ty::I32) => format!("gd_sub_i32({a}, {b})"),
        (BinOp::Mul, Ty::I32) => format!("gd_mul_i32({a}, {b})"),
        (BinOp::Div, Ty::I32) => format!("gd_div_i32({a}, {b})"),
        (BinOp::Rem, Ty::I32) => format!("gd_rem_i32({a}, {b})"),
        (BinOp::Div, Ty::U32) => format!("gd_div_u32({a}, {b})"),
        (BinOp::Rem, Ty::U32) => format!("gd_rem_u32({a}, {b})"),
        (BinOp::Rem, Ty::F32) => format!("fmodf({a}, {b})"),
        (BinOp::Shl, Ty::I32) => format!("gd_shl_i32({a}, {b})"),
        (BinOp::Shr, Ty::I32) => format!("gd_shr_i32({a}, {b})"),
        (BinOp::Shl, _) => format!("gd_shl_u32({a}, {b})"),
        (BinOp::Shr, _) => format!("gd_shr_u32({a}, {b})"),
        (BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor, Ty::Bool) => {
            format!("(bool)({a} {} {b})", op.symbol())
        }
        _ => format!("({a} {} {b})", op.symbol()),
    }
}
