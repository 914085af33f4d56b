//! Every kernel's CUDA C compiles with NVRTC (no GPU needed; skipped without libnvrtc unless
//! `GRAPHED_REQUIRE` lists `nvrtc`).
//!
//! With `GRAPHED_DUMP_PTX=DIR`, the test also writes each kernel's PTX to `DIR/<name>.ptx`
//! (what `ptxas -v --gpu-name sm_90` and `nvdisasm` read to compare a kernel's registers and
//! instructions before and after a change to its source) and its sources beside it:
//! `<name>.cu` and `<name>.wgsl`, `<name>.checked.cu` and `<name>.checked.wgsl`, to diff.

use graphed_kernels::{
    elementwise as ew, head, loss, matmul, matmul_mma as mma, optim, reduce,
    reduce_subgroup as rsg, rng, scaler,
};
use graphed_runtime::KernelDef;

/// `&module::kernel::DEF` for each `module: kernel, kernel, …;` group.
macro_rules! defs {
    ($($module:ident: $($kernel:ident),+;)+) => {
        vec![$($(&$module::$kernel::DEF,)+)+]
    };
}

fn all() -> Vec<&'static KernelDef> {
    defs! {
        ew: fill_f32, ew_unary, ew_unary_backward, ew_binary, ew_scale, ew_scale_in_place,
            ew_axpy, ew_copy2, cast_two_bf16, cast_two_f16, ew_mul_backward, bias_act,
            bias_act_backward;
        reduce: reduce_all, reduce_rows;
        rsg: reduce_all_sg, reduce_rows_sg;
        matmul: matmul_t64, matmul_t16, matmul_t32, gemm_epilogue, gemm_row_sums, gemm_col_sums,
            gemm_epilogue_cast_bf16, gemm_epilogue_cast_f16, gemm_epilogue_cast_sums_bf16,
            gemm_epilogue_cast_sums_f16, matmul_split_sum, matmul_t64_serial, matmul_t16_serial,
            matmul_t32_serial;
        mma: matmul_mma_bf16, matmul_mma_f16, matmul_mma_occ2_bf16, matmul_mma_occ2_f16,
            matmul_mma_lean_bf16, matmul_mma_lean_f16, matmul_mma_split_bf16,
            matmul_mma_split_f16, matmul_mma_split_sum;
        loss: softmax_xent_narrow, softmax_xent_wide, mse_pass, softmax_xent_narrow_sg,
            softmax_xent_narrow_cast_bf16, softmax_xent_narrow_cast_f16,
            softmax_xent_narrow_cast_sg_bf16, softmax_xent_narrow_cast_sg_f16,
            softmax_xent_wide_sg, mse_pass_sg, mse_grad;
        head: linear_xent;
        optim: adam_step, sgd_step, clip_scale;
        rng: philox_fill, philox_advance;
        scaler: scale_by, scale_by_cast_bf16, scale_by_cast_f16, unscale_check, scale_update;
    }
}

#[test]
fn every_kernel_compiles_for_cuda() {
    if !graphed_runtime::testing::nvrtc_enabled() {
        return;
    }
    let dump = std::env::var_os("GRAPHED_DUMP_PTX").map(std::path::PathBuf::from);
    for k in all() {
        let ptx = graphed_runtime::nvrtc::compile(k, "compute_90")
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", k.name, k.cuda));
        assert!(ptx.contains(&format!(".entry {}", k.name)), "{}", k.name);
        if let Some(dir) = &dump {
            let files = [
                ("ptx", ptx.as_str()),
                ("cu", k.cuda),
                ("wgsl", k.wgsl),
                ("checked.cu", k.checked.cuda),
                ("checked.wgsl", k.checked.wgsl),
            ];
            for (ext, text) in files {
                std::fs::write(dir.join(format!("{}.{ext}", k.name)), text)
                    .unwrap_or_else(|e| panic!("{}: writing its {ext} to {dir:?}: {e}", k.name));
            }
        }
    }
}

/// Serial split-K's kernels compile plain and checked (`GRAPHED_CHECKED`), their fences are
/// device-scope (`__threadfence()`: `fence.sc.gpu` or `membar.gl` in PTX), and the kernels
/// they are made from keep their CUDA C free of any fence or atomic.
#[test]
fn serial_split_kernels_compile_with_device_fences() {
    let serial = [
        &matmul::matmul_t64_serial::DEF,
        &matmul::matmul_t16_serial::DEF,
        &matmul::matmul_t32_serial::DEF,
    ];
    for k in serial {
        assert_eq!(k.cuda.matches("__threadfence();").count(), 2, "{}", k.name);
        assert!(k.wgsl.contains("storageBarrier();"), "{}", k.name);
    }
    for k in [
        &matmul::matmul_t64::DEF,
        &matmul::matmul_t16::DEF,
        &matmul::matmul_t32::DEF,
    ] {
        assert!(!k.cuda.contains("__threadfence"), "{}", k.name);
        assert!(!k.cuda.contains("atomic"), "{}", k.name);
    }
    if !graphed_runtime::testing::nvrtc_enabled() {
        return;
    }
    for k in serial {
        for (ptx, variant) in [
            (graphed_runtime::nvrtc::compile(k, "compute_90"), ""),
            (
                graphed_runtime::nvrtc::compile_checked(k, "compute_90"),
                " (checked)",
            ),
        ] {
            let ptx = ptx.unwrap_or_else(|e| panic!("{}{variant}: {e}", k.name));
            let fences = ptx.matches("fence.sc.gpu").count() + ptx.matches("membar.gl").count();
            assert!(fences >= 2, "{}{variant}: {fences} device fences", k.name);
            assert!(
                ptx.contains("atom.global"),
                "{}{variant}: no global atomic",
                k.name
            );
        }
    }
}
