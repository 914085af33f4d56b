//! `mma_m16n8k16` on each target (its meaning, layout and rounding: [`crate::kernel::mma`]):
//! CUDA's `mma.sync` on sm_80 and later and the portable form everywhere else — warp shuffles
//! on older CUDA, an exchange through workgroup memory in WGSL, the runtime's `HostMma` on the
//! host. The portable forms add the same products in the same order.

use std::fmt::Write;

use crate::kernel::ir::*;
use crate::kernel::mma::{operand_t, operands, ACC_LEN, A_LEN, B_LEN, SCRATCH_WORDS};

/// The WGSL workgroup array the portable form exchanges fragments through.
pub(super) const WGSL_SCRATCH: &str = "gd_mma";

/// The emitted CUDA helper's name for element type `elem`.
fn cuda_name(elem: Ty) -> String {
    format!("gd_mma_m16n8k16_{}", elem.rust())
}

/// The host form of call `m`: the exchange through the workgroup's `gd_mma` (the runtime's
/// `HostMma`) at the invocation's linear index `gd_li`.
pub(super) fn host_stmt(m: &Mma, arrays: &[LocalArray]) -> String {
    format!(
        "gd_mma.m16n8k16(gd_li, &{}, &{}, &mut {}).await;",
        arrays[m.a].name, arrays[m.b].name, arrays[m.acc].name
    )
}

/// The CUDA C statement of call `m`.
pub(super) fn cuda_stmt(m: &Mma, arrays: &[LocalArray]) -> String {
    format!(
        "{}({}, {}, {});",
        cuda_name(m.elem),
        arrays[m.a].name,
        arrays[m.b].name,
        arrays[m.acc].name
    )
}

/// The CUDA C helper for element type `elem` (`gd_bf16` or `gd_f16` in the C source, `t`).
///
/// On sm_80 and later: `mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32`
/// (PTX ISA 9.7.14.5.14), its `.f16x2` operand registers packed from the fragments' pairs,
/// the lower-numbered element in the low half (PTX ISA 9.7.14.5.8: "elements low to high").
/// Before sm_80 (no 16-bit-input `m16n8k16`): the portable form over warp shuffles. The
/// kernel's one-dimensional workgroup of a multiple of 32 makes each MMA group one warp.
pub(super) fn cuda_helper(elem: Ty, t: &str) -> String {
    let name = cuda_name(elem);
    let ptx = if elem == Ty::BF16 { "bf16" } else { "f16" };
    let widen = if elem == Ty::BF16 {
        "gd_bf16_to_f32"
    } else {
        "gd_f16_to_f32"
    };
    let mut s = format!("static __device__ __forceinline__ void {name}(const {t}* gd_a, const {t}* gd_b, float* gd_c) {{\n#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800\n");
    let pack = |arr: &str, w: u32| {
        format!(
            "((gd_u32){arr}[{}] | ((gd_u32){arr}[{}] << 16))",
            2 * w,
            2 * w + 1
        )
    };
    for w in 0..A_LEN / 2 {
        writeln!(s, "    const gd_u32 gd_a{w} = {};", pack("gd_a", w)).unwrap();
    }
    for w in 0..B_LEN / 2 {
        writeln!(s, "    const gd_u32 gd_b{w} = {};", pack("gd_b", w)).unwrap();
    }
    writeln!(s, "    asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.{ptx}.{ptx}.f32 {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};\" : \"+f\"(gd_c[0]), \"+f\"(gd_c[1]), \"+f\"(gd_c[2]), \"+f\"(gd_c[3]) : \"r\"(gd_a0), \"r\"(gd_a1), \"r\"(gd_a2), \"r\"(gd_a3), \"r\"(gd_b0), \"r\"(gd_b1));").unwrap();
    s.push_str("#else\n");
    s.push_str("    const gd_u32 gd_g = (threadIdx.x & 31u) >> 2;\n    const gd_u32 gd_t = threadIdx.x & 3u;\n");
    writeln!(s, "    float gd_fa[{A_LEN}];\n    float gd_fb[{B_LEN}];").unwrap();
    writeln!(s, "#pragma unroll\n    for (int gd_e = 0; gd_e < {A_LEN}; ++gd_e) {{ gd_fa[gd_e] = {widen}(gd_a[gd_e]); }}").unwrap();
    writeln!(s, "#pragma unroll\n    for (int gd_e = 0; gd_e < {B_LEN}; ++gd_e) {{ gd_fb[gd_e] = {widen}(gd_b[gd_e]); }}").unwrap();
    for i in 0..ACC_LEN {
        writeln!(s, "    {{ float gd_s = gd_c[{i}];").unwrap();
        for k in 0..16 {
            let (ea, eb) = operands(i, k);
            let kt = operand_t(k);
            writeln!(s, "      gd_s = gd_s + __shfl_sync(0xffffffffu, gd_fa[{ea}], (int)(4u * gd_g + {kt}u)) * __shfl_sync(0xffffffffu, gd_fb[{eb}], (int)(4u * (2u * gd_t + {}u) + {kt}u));", i % 2).unwrap();
        }
        writeln!(s, "      gd_c[{i}] = gd_s; }}").unwrap();
    }
    s.push_str("#endif\n}\n");
    s
}

/// The WGSL function name of the portable form for element type `elem`.
fn wgsl_name(elem: Ty) -> String {
    format!("gd_mma_m16n8k16_{}", elem.rust())
}

/// The WGSL statement of call `m`: a call of the module's function for its element type
/// ([`wgsl_fn`]), with the invocation's index in the workgroup.
pub(super) fn wgsl_call(m: &Mma, arrays: &[LocalArray]) -> String {
    let (a, b, c) = (&arrays[m.a].name, &arrays[m.b].name, &arrays[m.acc].name);
    format!("{}({a}, {b}, &{c}, gd_lid.x);", wgsl_name(m.elem))
}

/// The WGSL function of the portable form for element type `elem` (its 16-bit values in the
/// low halves of `u32`s), emitted once per module however many calls there are, and the
/// conversion helper it calls. Each invocation writes its fragments as pairs into
/// [`WGSL_SCRATCH`] (the lower-numbered element in the low half), then — after a barrier —
/// adds its products from its group's words, and a second barrier keeps the next call from
/// overwriting words still to be read. (Written out at each call, 32 calls made a tiled
/// product's shader 0.5 MB.)
pub(super) fn wgsl_fn(elem: Ty) -> (String, &'static str) {
    let widen = if elem == Ty::BF16 {
        "gd_bf16_to_f32"
    } else {
        "gd_f16_to_f32"
    };
    let (a, b, c) = ("gd_a", "gd_b", "(*gd_c)");
    let s = WGSL_SCRATCH;
    let w = SCRATCH_WORDS;
    let mut out = vec![
        format!(
            "fn {}(gd_a: array<u32, {A_LEN}>, gd_b: array<u32, {B_LEN}>, gd_c: ptr<function, array<f32, {ACC_LEN}>>, gd_ml: u32) {{",
            wgsl_name(elem)
        ),
        format!("    let gd_mo = gd_ml * {w}u;"),
    ];
    for q in 0..A_LEN / 2 {
        out.push(format!(
            "    {s}[gd_mo + {q}u] = {a}[{}] | ({a}[{}] << 16u);",
            2 * q,
            2 * q + 1
        ));
    }
    for q in 0..B_LEN / 2 {
        out.push(format!(
            "    {s}[gd_mo + {}u] = {b}[{}] | ({b}[{}] << 16u);",
            A_LEN / 2 + q,
            2 * q,
            2 * q + 1
        ));
    }
    out.push("    workgroupBarrier();".into());
    out.push("    let gd_mq = gd_ml - (gd_ml & 31u);".into());
    out.push("    let gd_mg = (gd_ml & 31u) >> 2u;".into());
    out.push("    let gd_mt = gd_ml & 3u;".into());
    // Element `e` (of `a`, or of `b` at word offset `A_LEN / 2`) of lane `l` of the group.
    let half = |lane: &str, e: u32, off: u32| {
        format!(
            "{widen}(({s}[({lane}) * {w}u + {}u] >> {}u) & 0xffffu)",
            off + e / 2,
            16 * (e % 2)
        )
    };
    for i in 0..ACC_LEN {
        out.push(format!("    var gd_ms{i}: f32 = {c}[{i}];"));
        for k in 0..16 {
            let (ea, eb) = operands(i, k);
            let kt = operand_t(k);
            let la = format!("gd_mq + 4u * gd_mg + {kt}u");
            let lb = format!("gd_mq + 4u * (2u * gd_mt + {}u) + {kt}u", i % 2);
            out.push(format!(
                "    gd_ms{i} = gd_ms{i} + {} * {};",
                half(&la, ea, 0),
                half(&lb, eb, A_LEN / 2)
            ));
        }
        out.push(format!("    {c}[{i}] = gd_ms{i};"));
    }
    out.push("    workgroupBarrier();".into());
    out.push("}".into());
    (out.join("\n") + "\n", widen)
}
