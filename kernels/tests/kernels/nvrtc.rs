//! Every kernel's CUDA C compiles with NVRTC (no GPU needed; skipped without libnvrtc unless
//! `GRAPHED_REQUIRE` lists `nvrtc`).

use graphed_kernels::{elementwise as ew, loss, matmul, optim, reduce, rng};
use graphed_runtime::KernelDef;

fn all() -> Vec<&'static KernelDef> {
    vec![
        &ew::fill_f32::DEF,
        &ew::ew_unary::DEF,
        &ew::ew_unary_backward::DEF,
        &ew::ew_binary::DEF,
        &ew::ew_scale::DEF,
        &ew::ew_scale_in_place::DEF,
        &ew::ew_axpy::DEF,
        &ew::ew_copy2::DEF,
        &ew::cast_two_bf16::DEF,
        &ew::cast_two_f16::DEF,
        &ew::ew_mul_backward::DEF,
        &ew::bias_act::DEF,
        &ew::bias_act_backward::DEF,
        &reduce::reduce_all::DEF,
        &reduce::reduce_rows::DEF,
        &graphed_kernels::reduce_subgroup::reduce_all_sg::DEF,
        &graphed_kernels::reduce_subgroup::reduce_rows_sg::DEF,
        &matmul::matmul_t64::DEF,
        &matmul::matmul_t16::DEF,
        &matmul::matmul_t32::DEF,
        &matmul::gemm_epilogue::DEF,
        &matmul::gemm_row_sums::DEF,
        &matmul::gemm_epilogue_cast_bf16::DEF,
        &matmul::gemm_epilogue_cast_f16::DEF,
        &matmul::gemm_epilogue_cast_sums_bf16::DEF,
        &matmul::gemm_epilogue_cast_sums_f16::DEF,
        &matmul::matmul_split_sum::DEF,
        &matmul::matmul_t64_serial::DEF,
        &matmul::matmul_t16_serial::DEF,
        &matmul::matmul_t32_serial::DEF,
        &graphed_kernels::matmul_mma::matmul_mma_bf16::DEF,
        &graphed_kernels::matmul_mma::matmul_mma_f16::DEF,
        &graphed_kernels::matmul_mma::matmul_mma_occ2_bf16::DEF,
        &graphed_kernels::matmul_mma::matmul_mma_occ2_f16::DEF,
        &graphed_kernels::matmul_mma::matmul_mma_lean_bf16::DEF,
        &graphed_kernels::matmul_mma::matmul_mma_lean_f16::DEF,
        &graphed_kernels::matmul_mma::matmul_mma_split_bf16::DEF,
        &graphed_kernels::matmul_mma::matmul_mma_split_f16::DEF,
        &graphed_kernels::matmul_mma::matmul_mma_split_sum::DEF,
        &loss::softmax_xent_narrow::DEF,
        &loss::softmax_xent_wide::DEF,
        &loss::mse_pass::DEF,
        &loss::softmax_xent_narrow_sg::DEF,
        &loss::softmax_xent_narrow_cast_bf16::DEF,
        &loss::softmax_xent_narrow_cast_f16::DEF,
        &loss::softmax_xent_narrow_cast_sg_bf16::DEF,
        &loss::softmax_xent_narrow_cast_sg_f16::DEF,
        &loss::softmax_xent_wide_sg::DEF,
        &loss::mse_pass_sg::DEF,
        &loss::mse_grad::DEF,
        &optim::adam_step::DEF,
        &optim::sgd_step::DEF,
        &optim::clip_scale::DEF,
        &rng::philox_fill::DEF,
        &rng::philox_advance::DEF,
    ]
}

#[test]
fn every_kernel_compiles_for_cuda() {
    if !graphed_runtime::testing::nvrtc_enabled() {
        return;
    }
    for k in all() {
        let ptx = graphed_runtime::nvrtc::compile(k, "compute_90")
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", k.name, k.cuda));
        assert!(ptx.contains(&format!(".entry {}", k.name)), "{}", k.name);
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
