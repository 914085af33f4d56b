//! Emits a kernel as CUDA C (`extern "C" __global__`), compiled at run time by NVRTC.
//!
//! Integer arithmetic goes through helpers on unsigned values, so it wraps as on WGSL and the
//! host instead of being C's signed-overflow undefined behaviour; division and shifts follow
//! WGSL's definitions (x / 0 == x, x % 0 == 0, shift amounts masked to 5 bits).

use std::fmt::Write;

use crate::kernel::ir::*;

/// Helpers shared by every kernel (each translation unit holds one kernel).
pub const PRELUDE: &str = r#"typedef unsigned int gd_u32;
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

/// `f16` and `bf16` as CUDA C sees them: their bits in an `unsigned short` (no `cuda_fp16.h`,
/// which NVRTC may not find), converted by PTX's `cvt` (`f16`) or integer rounding (`bf16`:
/// to nearest, ties to even, as `cvt.rn.bf16.f32` on sm_80+ but on every architecture). A
/// NaN converts as the `half` crate does (quieted, payload kept), so the host, CUDA and WGSL
/// give the same bits. Added after [`PRELUDE`] to kernels that use them.
pub const HALF_PRELUDE: &str = r#"typedef unsigned short gd_f16;
typedef unsigned short gd_bf16;
static __device__ __forceinline__ float gd_f16_to_f32(gd_f16 h) {
    if ((h & 0x7fffu) > 0x7c00u) { return __uint_as_float(((gd_u32)(h & 0x8000u) << 16) | 0x7fc00000u | ((gd_u32)(h & 0x3ffu) << 13)); }
    float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
static __device__ __forceinline__ gd_f16 gd_f32_to_f16(float x) {
    const gd_u32 u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) { return (gd_f16)(((u >> 16) & 0x8000u) | 0x7e00u | ((u >> 13) & 0x3ffu)); }
    gd_f16 h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x)); return h;
}
static __device__ __forceinline__ float gd_bf16_to_f32(gd_bf16 h) {
    const gd_u32 b = ((h & 0x7fffu) > 0x7f80u) ? (gd_u32)(h | 0x40u) : (gd_u32)h;
    return __uint_as_float(b << 16);
}
static __device__ __forceinline__ gd_bf16 gd_f32_to_bf16(float x) {
    const gd_u32 u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) { return (gd_bf16)((u >> 16) | 0x40u); }
    return (gd_bf16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
"#;

/// What the checked variant adds after [`PRELUDE`] (see [`super::bounds`]): `gd_oob` writes
/// the fault record once; `gd_ld` reads in range and gives 0 out of range.
pub const CHECKED_PRELUDE: &str = r#"static __device__ __noinline__ void gd_oob(gd_u32* f, gd_u32 kernel, gd_u32 target, gd_u32 i, gd_u32 len) {
    if (atomicCAS(&f[0], 0u, 1u) == 0u) { f[1] = kernel; f[2] = target; f[3] = i; f[4] = len; __threadfence(); }
}
template <typename T> static __device__ __forceinline__ T gd_ld(const T* p, gd_u32 off, gd_u32 len, gd_u32 i, gd_u32* f, gd_u32 kernel, gd_u32 target) {
    if (i < len) { return p[off + i]; }
    gd_oob(f, kernel, target, i, len);
    return (T)0;
}
"#;

/// The kernel as CUDA C source for NVRTC (`extern "C" __global__`).
pub fn emit(k: &Kernel) -> String {
    emit_with(k, None)
}

/// The checked variant (see [`super::bounds`]): every index is checked, and the first
/// out-of-range access is written to the fault record, a last pointer argument `gd_fault`,
/// with kernel id `id`.
pub fn emit_checked(k: &Kernel, id: u32) -> String {
    emit_with(k, Some(id))
}

fn emit_with(k: &Kernel, checked: Option<u32>) -> String {
    let mut c = Cuda {
        k,
        params: &k.params,
        out: String::new(),
        indent: 1,
        checked,
        tmp: 0,
        in_helper: false,
        shared: &k.shared,
        arrays: &k.arrays,
        array_base: super::bounds::array_target(k, 0),
    };
    let mut head = String::new();
    writeln!(head, "// graphed kernel `{}`", k.name).unwrap();
    head.push_str(PRELUDE);
    if checked.is_some() {
        head.push_str(CHECKED_PRELUDE);
    }
    // The subgroup operations before the `#[device]` helpers, which may call them.
    for (op, t) in super::subgroup::used(k) {
        let combine = if op.is_reduction() {
            c.expr(&op.combine(t, "gd_a", "gd_b"))
        } else {
            String::new()
        };
        head.push_str(&super::subgroup::cuda_helper(op, t, ty(t), &combine));
    }
    for t in crate::kernel::mma::elems(&k.body) {
        head.push_str(&super::mma::cuda_helper(t, ty(t)));
    }
    super::cuda_device::emit_helpers(k, checked, &mut head);
    let mut params = vec!["const gd_u32* __restrict__ gd_args".to_string()];
    for p in &k.params {
        if let ParamKind::Slice { elem, mutable, .. } = p.kind {
            let cst = if mutable { "" } else { "const " };
            params.push(format!("{cst}{}* __restrict__ {}_p", ty(elem), p.name));
        }
    }
    if checked.is_some() {
        params.push("gd_u32* __restrict__ gd_fault".to_string());
    }
    let threads: u32 = k.workgroup.iter().product();
    let bounds = match k.min_workgroups {
        0 => threads.to_string(),
        w => format!("{threads}, {w}"),
    };
    writeln!(
        head,
        "extern \"C\" __global__ void __launch_bounds__({bounds}) {}({}) {{",
        k.name,
        params.join(", ")
    )
    .unwrap();
    // Programmatic dependent launch (Hopper on): a kernel node the runtime lets start before
    // its predecessor finished waits here, before touching memory, until that grid completed
    // and its writes are visible; and lets its own dependents launch at once, since they wait
    // the same way. Outside such a launch both are no-ops, but not free, so only the form the
    // runtime compiles for PDL captures (`-DGRAPHED_PDL`) has them. (PTX ISA 7.8,
    // `griddepcontrol`.)
    head.push_str("#if defined(GRAPHED_PDL) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\n    asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n    asm volatile(\"griddepcontrol.launch_dependents;\");\n#endif\n");
    for p in &k.params {
        match p.kind {
            ParamKind::Scalar(t) => {
                let raw = format!("gd_args[{}]", p.word);
                let v = match t {
                    Ty::F32 => format!("__uint_as_float({raw})"),
                    Ty::F16 | Ty::BF16 => format!("({})({raw} & 0xffffu)", ty(t)),
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
            "    __shared__ __align__(16) {} {}[{}];",
            ty(s.elem),
            s.name,
            s.size
        )
        .unwrap();
    }
    head.push_str("    const uint3 gd_lid = threadIdx;\n    const uint3 gd_wid = blockIdx;\n    const uint3 gd_nwg = gridDim;\n");
    head.push_str("    const uint3 gd_gid = make_uint3(blockIdx.x * blockDim.x + threadIdx.x, blockIdx.y * blockDim.y + threadIdx.y, blockIdx.z * blockDim.z + threadIdx.z);\n");
    // Workgroup memory used atomically starts zeroed, as on the host and WGSL (CUDA leaves
    // `__shared__` undefined): every thread clears its share before the body, and a barrier
    // that the whole block reaches (nothing has returned yet) orders it before any atomic.
    let atomic: Vec<&Shared> = k.shared.iter().filter(|s| s.atomic).collect();
    if !atomic.is_empty() {
        let [x, y, _] = k.workgroup;
        head.push_str(&format!(
            "    const gd_u32 gd_flat = threadIdx.x + {x}u * (threadIdx.y + {y}u * threadIdx.z);\n"
        ));
        for s in atomic {
            head.push_str(&format!(
                "    for (gd_u32 gd_z = gd_flat; gd_z < {}u; gd_z += {threads}u) {{ {}[gd_z] = 0; }}\n",
                s.size, s.name
            ));
        }
        head.push_str("    __syncthreads();\n");
    }
    c.out = head;
    c.block(&k.body);
    c.out.push_str("}\n");
    if c.out.contains("gd_f16") || c.out.contains("gd_bf16") {
        c.out = c
            .out
            .replacen(PRELUDE, &format!("{PRELUDE}{HALF_PRELUDE}"), 1);
    }
    c.out
}

/// The CUDA C spelling of a scalar type.
pub fn ty(t: Ty) -> &'static str {
    match t {
        Ty::F32 => "float",
        Ty::F16 => "gd_f16",
        Ty::BF16 => "gd_bf16",
        Ty::I32 => "int",
        Ty::U32 => "gd_u32",
        Ty::Bool => "bool",
        Ty::UVec3 => "uint3",
    }
}

fn is_literal(e: &Expr) -> bool {
    matches!(
        e.kind,
        ExprKind::LitF32(_) | ExprKind::LitI32(_) | ExprKind::LitU32(_) | ExprKind::LitBool(_)
    )
}

fn is_zero(e: &Expr) -> bool {
    super::wgsl::is_zero(e)
}

fn zero(t: Ty) -> &'static str {
    match t {
        Ty::F32 => "0.0f",
        Ty::F16 | Ty::BF16 => "0",
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
    /// The kernel id of the checked variant; `None` for the unchecked one.
    pub checked: Option<u32>,
    pub tmp: usize,
    /// Whether a helper's body is being emitted: its slices' target numbers are parameters
    /// (`x_t`) in the checked variant, since one helper serves every binding.
    pub in_helper: bool,
    /// The workgroup arrays of the function being emitted (a helper's: its parameters).
    pub shared: &'k [Shared],
    /// Its per-invocation arrays, and the target number of the first in a checked variant.
    pub arrays: &'k [LocalArray],
    pub array_base: usize,
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
            Place::Shared(i, ix) => format!("{}[{}]", self.shared[*i].name, self.expr(ix)),
            // Only in-bounds indices reach here (literals checked by the checker, run-time
            // indices guarded by the read in `expr` and by `Stmt::Assign`).
            Place::Array(a, ix) => format!("{}[{}]", self.arrays[*a].name, self.expr(ix)),
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
            Stmt::ReturnArray(a) => {
                let arr = &self.arrays[*a];
                let v = super::cuda_device::wrap(arr, &arr.name);
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
            } if self.checked.is_some() && !matches!(place, Place::Local(_)) => {
                self.checked_write(place, *op, value, *t)
            }
            Stmt::Assign {
                place,
                op,
                value,
                ty: t,
            } => {
                let p = self.place(place);
                let v = self.expr(value);
                let assign = match op {
                    None => format!("{p} = {v};"),
                    Some(op) => format!("{p} = {};", binary(*op, *t, &p, &v)),
                };
                match place {
                    // A run-time index at or past a per-invocation array's length writes
                    // nothing.
                    Place::Array(a, ix) if !is_literal(ix) => self.line(&format!(
                        "if ({} < {}u) {{ {assign} }}",
                        self.expr(ix),
                        self.arrays[*a].len
                    )),
                    _ => self.line(&assign),
                }
            }
            Stmt::Array { array, init } => {
                let arr = &self.arrays[*array];
                let (name, n, t) = (arr.name.clone(), arr.len, ty(arr.elem));
                match init {
                    ArrayInit::Splat(v) if is_zero(v) => {
                        self.line(&format!("{t} {name}[{n}] = {{}};"))
                    }
                    ArrayInit::Splat(v) => {
                        let v = self.expr(v);
                        self.line(&format!("{t} {name}[{n}];"));
                        self.line(&format!("{{ const {t} gd_v = {v};"));
                        self.line("#pragma unroll");
                        self.line(&format!("for (gd_u32 gd_k = 0u; gd_k < {n}u; ++gd_k) {{ {name}[gd_k] = gd_v; }} }}"));
                    }
                    ArrayInit::List(vs) => {
                        let elems: Vec<String> = vs.iter().map(|v| self.expr(v)).collect();
                        self.line(&format!("{t} {name}[{n}] = {{{}}};", elems.join(", ")));
                    }
                    ArrayInit::Call(e) => {
                        let v = self.expr(e);
                        let s = super::cuda_device::array_struct(arr.elem, n);
                        self.line(&format!("const {s} {name}_r = {v};"));
                        let copy = super::cuda_device::unwrap(arr, &format!("{name}_r"));
                        self.line(&copy);
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
            Stmt::DeviceFence { .. } => self.line("__threadfence();"),
            Stmt::Mma(m) => {
                let line = super::mma::cuda_stmt(m, self.arrays);
                self.line(&line);
            }
            Stmt::Ldmatrix(l) => self.ldmatrix(l),
            Stmt::CopyAsync(c) => self.copy_async(c),
            Stmt::CopyFence(f) => {
                let ptx = match f {
                    CopyFence::Commit => "cp.async.commit_group;".to_string(),
                    CopyFence::Wait(k) => format!("cp.async.wait_group {k};"),
                };
                self.line("#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800");
                self.line(&format!("asm volatile(\"{ptx}\" ::: \"memory\");"));
                self.line("#endif");
            }
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
                let Some(id) = self.checked else {
                    let ptr = format!("&{arr}[{off} + {ix}]");
                    let call = atomic(*op, *t, &ptr, &ops);
                    match result {
                        Some(r) => self.line(&format!("{r} = {call};")),
                        None => self.line(&format!("{call};")),
                    }
                    return;
                };
                // Checked: index and operands evaluated once, in the host's order; out of
                // range the atomic is dropped and its result is 0.
                self.tmp += 1;
                let i = format!("gd_i{}", self.tmp);
                let mut line = format!("{{ const gd_u32 {i} = {ix};");
                let mut temps = Vec::new();
                for (k, (o, e)) in ops.iter().zip(operands).enumerate() {
                    let v = format!("gd_a{}_{k}", self.tmp);
                    write!(line, " const {} {v} = {o};", ty(e.ty)).unwrap();
                    temps.push(v);
                }
                let call = atomic(*op, *t, &format!("&{arr}[{off} + {i}]"), &temps);
                let (ok, bad) = match result {
                    Some(r) => (format!("{r} = {call};"), format!(" {r} = {};", zero(*t))),
                    None => (format!("{call};"), String::new()),
                };
                write!(
                    line,
                    " if ({i} < {len}) {{ {ok} }} else {{ gd_oob(gd_fault, {id}u, {target}, {i}, {len});{bad} }} }}"
                )
                .unwrap();
                self.line(&line);
            }
        }
    }

    /// `ldmatrix_x4` (see [`crate::kernel::ldmatrix`]): on sm_75 and later one
    /// `ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16` at the row's shared-window address, before
    /// it the rows' word indices exchanged by warp shuffles. The kernel's one-dimensional
    /// workgroup of a multiple of 32 makes each group one warp.
    fn ldmatrix(&mut self, l: &Ldmatrix) {
        let row = self.expr(&l.row);
        let name = self.shared[l.shared].name.clone();
        let w = self.arrays[l.w].name.clone();
        self.line("{");
        self.indent += 1;
        self.line(&format!("const gd_u32 gd_lr = {row};"));
        self.line("#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750");
        // The array's shared-window address by the intrinsic, which the compiler folds to
        // a constant for a workgroup array (an `asm` conversion it cannot see through costs
        // a 64-bit address and a move a call, and rereads the window in a long loop).
        self.line(&format!(
            "const gd_u32 gd_la = (gd_u32)__cvta_generic_to_shared({name}) + gd_lr * 4u;"
        ));
        let trans = if l.trans { ".trans" } else { "" };
        self.line(&format!("asm volatile(\"ldmatrix.sync.aligned.m8n8.x4{trans}.shared.b16 {{%0, %1, %2, %3}}, [%4];\" : \"=r\"({w}[0]), \"=r\"({w}[1]), \"=r\"({w}[2]), \"=r\"({w}[3]) : \"r\"(gd_la));"));
        self.line("#else");
        self.line("const gd_u32 gd_lg = (threadIdx.x & 31u) >> 2;");
        self.line("const gd_u32 gd_lt = threadIdx.x & 3u;");
        for j in 0..crate::kernel::ldmatrix::MATRICES {
            let m = 8 * j;
            if l.trans {
                // Column `g` of rows `2t`, `2t + 1`: value `g` is half `g % 2` of word `g / 2`.
                let half = |r: &str| {
                    format!("(({name}[__shfl_sync(0xffffffffu, gd_lr, (int)({m}u + {r})) + (gd_lg >> 1)] >> (16u * (gd_lg & 1u))) & 0xffffu)")
                };
                self.line(&format!(
                    "{w}[{j}] = {} | ({} << 16);",
                    half("2u * gd_lt"),
                    half("2u * gd_lt + 1u")
                ));
            } else {
                self.line(&format!("{w}[{j}] = {name}[__shfl_sync(0xffffffffu, gd_lr, (int)({m}u + gd_lg)) + gd_lt];"));
            }
        }
        self.line("#endif");
        self.indent -= 1;
        self.line("}");
    }

    /// `copy_async` (see [`crate::kernel::copy_async`]): on sm_80 and later one
    /// `cp.async.cg.shared.global` of 16 bytes where both addresses are 16-byte aligned and
    /// the chunk lies inside the workgroup array, else (and before sm_80) the portable form's
    /// element copies, at once.
    fn copy_async(&mut self, c: &CopyAsync) {
        self.line("{");
        self.indent += 1;
        self.block(&c.setup);
        let (ptr, off, _, _) = self.param_target(c.src);
        let sh = &self.shared[c.shared];
        let (name, last) = (sh.name.clone(), sh.size - crate::kernel::copy_async::CHUNK);
        let (d, s, n) = (&c.d, &c.s, &c.n);
        self.line("#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800");
        // A whole chunk is one `cp.async` where both addresses are 16-byte aligned: the
        // slice's start plus `s` and the chunk's offset `d` in elements, multiples of 4 (the
        // slice's start is the same for every copy, so the compiler tests it once). A chunk of
        // fewer elements, zeros included, is the element copies: an edge's few chunks, and
        // the common one has no zero fill to choose or source address to keep in range.
        self.line(&format!("const gd_u32 gd_ci = {off} + {s};"));
        self.line(&format!("if ({n} == 4u && (({d} | gd_ci) & 3u) == 0u && {d} <= {last}u && (((unsigned long long){ptr}) & 15ull) == 0ull) {{"));
        // The array's shared-window address (the same for every copy, so the compiler may
        // compute it once) plus the chunk's offset.
        self.line(&format!(
            "    const gd_u32 gd_cps = (gd_u32)__cvta_generic_to_shared({name}) + {d} * 4u;"
        ));
        self.line(&format!("    asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16;\" :: \"r\"(gd_cps), \"l\"({ptr} + gd_ci) : \"memory\");"));
        self.line("} else");
        self.line("#endif");
        self.line("{");
        self.indent += 1;
        self.block(&c.copy);
        self.indent -= 1;
        self.line("}");
        self.indent -= 1;
        self.line("}");
    }

    /// The storage or workgroup array of a checked access, the offset to add, the length and
    /// the target number ([`super::bounds::targets`]).
    fn checked_target(&self, p: &Place) -> (String, String, String, String) {
        match p {
            Place::Param(i, _) => self.param_target(*i),
            Place::Shared(s, _) => {
                let sh = &self.shared[*s];
                (
                    sh.name.clone(),
                    "0u".into(),
                    format!("{}u", sh.size),
                    self.shared_target(*s),
                )
            }
            Place::Array(a, _) => {
                let arr = &self.arrays[*a];
                (
                    arr.name.clone(),
                    "0u".into(),
                    format!("{}u", arr.len),
                    format!("{}u", self.array_base + *a),
                )
            }
            Place::Local(_) => unreachable!("locals are not indexed"),
        }
    }

    /// The target number of workgroup array `s` (in a helper, the caller passes it as
    /// `s_t`).
    pub(super) fn shared_target(&self, s: usize) -> String {
        if self.in_helper {
            format!("{}_t", self.shared[s].name)
        } else {
            format!("{}u", super::bounds::shared_target(self.k, s))
        }
    }

    /// Slice parameter `i` of the function being emitted: pointer, offset, length and target
    /// number (in a helper, the caller passes the number as `x_t`).
    pub(super) fn param_target(&self, i: usize) -> (String, String, String, String) {
        let n = &self.params[i].name;
        let target = if self.in_helper {
            format!("{n}_t")
        } else {
            format!("{i}u")
        };
        (
            format!("{n}_p"),
            format!("{n}_off"),
            format!("{n}_len"),
            target,
        )
    }

    /// What an atomic's target is in a checked access: array, offset, length, target number.
    fn atomic_target(&self, t: &AtomicTarget) -> (String, String, String, String) {
        match *t {
            AtomicTarget::Param(i) => self.param_target(i),
            AtomicTarget::Shared(s) => {
                let sh = &self.shared[s];
                (
                    sh.name.clone(),
                    "0u".into(),
                    format!("{}u", sh.size),
                    self.shared_target(s),
                )
            }
        }
    }

    /// The index check of a read (the hook every indexable target goes through): in range
    /// the element, out of range 0 and the fault recorded. C's `?:`, `&&` and `||` evaluate
    /// only the operand taken, so a read in a branch not taken never faults.
    fn checked_read(&self, p: &Place, id: u32) -> String {
        let (Place::Param(_, ix) | Place::Shared(_, ix) | Place::Array(_, ix)) = p else {
            unreachable!("locals are not indexed")
        };
        let (arr, off, len, target) = self.checked_target(p);
        format!(
            "gd_ld({arr}, {off}, {len}, {}, gd_fault, {id}u, {target})",
            self.expr(ix)
        )
    }

    /// The index check of a write: index and value evaluated once, in the host's order; out
    /// of range the write is dropped and the fault recorded.
    fn checked_write(&mut self, place: &Place, op: Option<BinOp>, value: &Expr, t: Ty) {
        let (Place::Param(_, ix) | Place::Shared(_, ix) | Place::Array(_, ix)) = place else {
            unreachable!("locals are not indexed")
        };
        let id = self.checked.expect("checked variant");
        let (arr, off, len, target) = self.checked_target(place);
        self.tmp += 1;
        let (i, v) = (format!("gd_i{}", self.tmp), format!("gd_v{}", self.tmp));
        let ix = self.expr(ix);
        let val = self.expr(value);
        let p = format!("{arr}[{off} + {i}]");
        let rhs = match op {
            None => v.clone(),
            Some(op) => binary(op, t, &p, &v),
        };
        self.line(&format!(
            "{{ const gd_u32 {i} = {ix}; const {} {v} = {val}; if ({i} < {len}) {{ {p} = {rhs}; }} else {{ gd_oob(gd_fault, {id}u, {target}, {i}, {len}); }} }}",
            ty(value.ty)
        ));
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
            ExprKind::Call(h, args, _) => self.call(*h, args),
            ExprKind::Load(p) => match (self.checked, p) {
                (Some(id), Place::Param(..) | Place::Shared(..)) => self.checked_read(p, id),
                (Some(id), Place::Array(_, ix)) if !is_literal(ix) => self.checked_read(p, id),
                // A run-time index at or past a per-invocation array's length reads zero.
                (None, Place::Array(a, ix)) if !is_literal(ix) => {
                    let arr = &self.arrays[*a];
                    format!(
                        "({} < {}u ? {}[{}] : {})",
                        self.expr(ix),
                        arr.len,
                        arr.name,
                        self.expr(ix),
                        zero(arr.elem)
                    )
                }
                _ => self.place(p),
            },
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
                    // `check/half.rs` leaves only these conversions of 16-bit values.
                    (Ty::F32, Ty::F16) => format!("gd_f32_to_f16({v})"),
                    (Ty::F16, Ty::F32) => format!("gd_f16_to_f32({v})"),
                    (Ty::F32, Ty::BF16) => format!("gd_f32_to_bf16({v})"),
                    (Ty::BF16, Ty::F32) => format!("gd_bf16_to_f32({v})"),
                    (Ty::Bool, Ty::I32) => format!("({v} ? 1 : 0)"),
                    (Ty::Bool, Ty::U32) => format!("({v} ? 1u : 0u)"),
                    (_, t) => format!("(({}){v})", ty(t)),
                }
            }
            // A 16-bit value is its bits in an `unsigned short`.
            ExprKind::Bits(a, to) => format!("(({}){})", ty(*to), self.expr(a)),
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
            ExprKind::Subgroup(op, args, _) => {
                let a: Vec<String> = args.iter().map(|x| self.expr(x)).collect();
                super::subgroup::cuda_expr(*op, e.ty, &a)
            }
        }
    }
}

/// An atomic on `ptr` with operands `ops` (already emitted); its value is the old element.
fn atomic(op: AtomicOp, t: Ty, ptr: &str, ops: &[String]) -> String {
    let zero = zero(t);
    match op {
        AtomicOp::Add => format!("atomicAdd({ptr}, {})", ops[0]),
        AtomicOp::Sub => format!("atomicSub({ptr}, {})", ops[0]),
        AtomicOp::Max => format!("atomicMax({ptr}, {})", ops[0]),
        AtomicOp::Min => format!("atomicMin({ptr}, {})", ops[0]),
        AtomicOp::And => format!("atomicAnd({ptr}, {})", ops[0]),
        AtomicOp::Or => format!("atomicOr({ptr}, {})", ops[0]),
        AtomicOp::Xor => format!("atomicXor({ptr}, {})", ops[0]),
        AtomicOp::Exchange | AtomicOp::Store => format!("atomicExch({ptr}, {})", ops[0]),
        AtomicOp::Load => format!("atomicAdd({ptr}, {zero})"),
        AtomicOp::CompareExchange => format!("atomicCAS({ptr}, {}, {})", ops[0], ops[1]),
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
