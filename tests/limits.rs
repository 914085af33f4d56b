//! Limits and settings (issue 14): byte counts, launch grids, buffer bindings, workgroup memory
//! and environment words are checked before any backend sees them. Each case asserts the
//! error's variant and message, on every backend it applies to.

mod common;

use common::on_every_backend;
use graphed::prelude::*;
use graphed::{BackendKind, Error, Grid};

/// `y[i] = i + 1` for every invocation inside `y`.
#[kernel(workgroup = 64)]
pub fn mark(y: &mut [u32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = i + 1u32;
    }
}

/// Uses 48 KiB of workgroup memory: what the kernel language allows (CUDA's static limit),
/// more than some adapters have (lavapipe: 32 KiB).
#[kernel(workgroup = 64)]
pub fn big_tile(x: &[f32], y: &mut [f32]) {
    let tile = shared::<f32, 12288>();
    let lid = local_id().x;
    let i = global_id().x;
    tile[lid * 192u32] = if i < x.len() { x[i] } else { 0.0 };
    barrier();
    if i < y.len() {
        y[i] = tile[lid * 192u32] * 2.0;
    }
}

/// 48 KiB of workgroup memory and `mma_m16n8k16`: CUDA exchanges fragments in registers, the
/// portable forms through 6 words per invocation more (3 KiB for 128 invocations).
#[kernel(workgroup = 128)]
pub fn big_mma(x: &[f32], y: &mut [f32]) {
    let tile = shared::<f32, 12288>();
    let lid = local_id().x;
    let i = global_id().x;
    tile[lid * 96u32] = if i < x.len() { x[i] } else { 0.0 };
    barrier();
    let a = [1.0f32 as bf16; 8];
    let b = [1.0f32 as bf16; 4];
    let mut acc = [0.0f32; 4];
    mma_m16n8k16(&a, &b, &mut acc);
    if i < y.len() {
        y[i] = tile[lid * 96u32] + acc[0];
    }
}

/// Runs `test` (a test of this file, by name) in a child process with `env` set, and returns
/// its stdout: settings read once per process need a process of their own.
fn child(test: &str, env: &[(&str, &str)]) -> String {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env("GRAPHED_LIMITS_CHILD", "1")
        .env_remove("GRAPHED_BACKEND");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child {test} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Child half of the environment tests: prints how opening a device went.
#[test]
fn open_child() {
    if std::env::var("GRAPHED_LIMITS_CHILD").is_err() {
        return;
    }
    let result = match std::env::var("GRAPHED_LIMITS_OPEN").as_deref() {
        Ok("wgpu") => Device::wgpu(),
        _ => Device::best(),
    };
    match result {
        Ok(d) => println!("opened {}", d.kind()),
        Err(e) => println!("error {e:?}\ndisplay {e}"),
    }
}

#[test]
fn an_unknown_wgpu_check_refuses_to_open_the_device() {
    if common::backends()
        .iter()
        .all(|d| d.kind() != BackendKind::Wgpu)
    {
        return;
    }
    for value in ["bound", "Bounds", "garbage", "bounds,typo"] {
        let out = child(
            "open_child",
            &[
                ("GRAPHED_LIMITS_OPEN", "wgpu"),
                ("GRAPHED_WGPU_CHECKS", value),
            ],
        );
        assert!(out.contains("error BadEnv"), "{value}: {out}");
        assert!(
            out.contains(&format!(
                "display environment variable GRAPHED_WGPU_CHECKS={value:?} is not understood"
            )) && out.contains("bounds, loops, division, all or none"),
            "{value}: {out}"
        );
    }
    // The accepted words still open it.
    let out = child(
        "open_child",
        &[
            ("GRAPHED_LIMITS_OPEN", "wgpu"),
            ("GRAPHED_WGPU_CHECKS", "bounds, loops"),
        ],
    );
    assert!(out.contains("opened wgpu"), "{out}");
}

#[cfg(not(feature = "cuda"))]
#[test]
fn requiring_cuda_in_a_build_without_it_is_an_error() {
    let out = child("open_child", &[("GRAPHED_REQUIRE", "wgpu,cuda")]);
    assert!(out.contains("error Unavailable"), "{out}");
    assert!(
        out.contains(
            "display backend `cuda` is unavailable: graphed was built without `--features cuda`"
        ),
        "{out}"
    );
}

#[test]
fn a_missing_backend_says_so_once() {
    // No Metal adapter on this platform (or any other, outside macOS): wgpu finds nothing.
    if cfg!(target_os = "macos") {
        return;
    }
    let out = child(
        "open_child",
        &[("GRAPHED_LIMITS_OPEN", "wgpu"), ("WGPU_BACKEND", "metal")],
    );
    assert!(out.contains("error Unavailable"), "{out}");
    let display = out.lines().find(|l| l.starts_with("display ")).unwrap();
    assert_eq!(
        display.matches("is unavailable").count(),
        1,
        "the prefix repeats: {display}"
    );
    assert!(
        display.starts_with("display backend `wgpu` is unavailable: no GPU adapter found"),
        "{display}"
    );
}

#[test]
fn allocation_byte_counts_do_not_wrap() {
    on_every_backend(|dev| {
        for len in [usize::MAX / 4 + 1, usize::MAX] {
            let err = dev.alloc::<f32>(len).unwrap_err();
            let bytes = len as u128 * 4;
            match &err {
                Error::Limit { asked, limit, .. } => {
                    assert_eq!((*asked, *limit), (bytes, isize::MAX as u128))
                }
                other => panic!("{len} elements: expected Limit, got {other:?}"),
            }
            let msg = err.to_string();
            assert_eq!(
                msg,
                format!(
                    "bytes of a buffer of {len} 4-byte elements: {bytes} is over the limit of {} on {}",
                    isize::MAX,
                    dev.kind()
                )
            );
        }
    });
}

#[test]
fn grids_past_the_workgroup_limit_are_refused_on_every_backend() {
    on_every_backend(|dev| {
        let mut y = dev.alloc::<u32>(64).unwrap();
        let cases = [
            (
                Grid::threads_2d((1 << 32) + 64, 3),
                "grid of 4294967360 × 3 × 1 invocations needs 67108865 workgroups of 64 along x",
            ),
            (
                Grid::workgroups(65_536),
                "grid of 65536 × 1 × 1 workgroups has 65536 workgroups along x",
            ),
            (
                Grid::workgroups_3d(1, 1, 70_000),
                "grid of 1 × 1 × 70000 workgroups has 70000 workgroups along z",
            ),
        ];
        for (grid, want) in cases {
            let err = mark::launch(dev, grid, &mut y).unwrap_err();
            assert!(
                matches!(err, Error::Launch { kernel: "mark", .. }),
                "{grid:?}: {err:?}"
            );
            let msg = err.to_string();
            assert_eq!(
                msg,
                format!("launch of `mark`: {want}, more than the 65535 per dimension every backend allows")
            );
        }
    });
}

#[test]
fn the_largest_legal_grid_runs_and_global_ids_do_not_wrap() {
    on_every_backend(|dev| {
        let n = 65_535 * 64;
        let mut y = dev.upload(&vec![0xDEAD_BEEFu32; n]).unwrap();
        mark::launch(dev, Grid::threads(n), &mut y).unwrap();
        let y = y.to_host().unwrap();
        for i in [0, 1, 4096, n / 2, n - 65, n - 1] {
            assert_eq!(y[i], i as u32 + 1, "element {i}");
        }
    });
}

#[test]
fn a_buffer_over_the_adapters_binding_limit_is_a_limit_not_out_of_memory() {
    on_every_backend(|dev| {
        if dev.kind() != BackendKind::Wgpu {
            return;
        }
        // 4 GiB + 4 bytes: more than any Vulkan storage buffer binding can hold.
        let err = dev.alloc::<f32>((1 << 30) + 1).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Limit {
                    backend: "wgpu",
                    ..
                }
            ),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.starts_with("bytes of one buffer (the adapter's `max_")
                && msg.contains(": 4294967300 is over the limit of "),
            "{msg}"
        );
        if dev.adapter().contains("llvmpipe") {
            let err = dev.alloc::<f32>((128 << 20) / 4 + 1).unwrap_err();
            assert_eq!(
                err.to_string(),
                "bytes of one buffer (the adapter's `max_storage_buffer_binding_size`): 134217732 is over the limit of 134217728 on wgpu"
            );
            // At the limit it is fine.
            dev.alloc::<f32>((128 << 20) / 4).unwrap();
        }
    });
}

#[test]
fn workgroup_memory_over_the_adapters_limit_is_refused_before_the_pipeline() {
    on_every_backend(|dev| {
        let x = dev.upload(&[1.5f32; 64]).unwrap();
        let mut y = dev.alloc::<f32>(64).unwrap();
        let result = big_tile::launch(dev, 64, &x, &mut y);
        // `workgroup_bytes_max` says beforehand whether the launch is refused, and the
        // refusal names that limit.
        let max = dev.workgroup_bytes_max();
        assert_eq!(big_tile::DEF.workgroup_bytes, 49152);
        assert_eq!(
            result.is_err(),
            49152 > max,
            "[{}] limit {max}: {result:?}",
            dev.kind()
        );
        if let Err(Error::Limit { limit, .. }) = &result {
            assert_eq!(*limit, u128::from(max), "[{}]", dev.kind());
        }
        match dev.kind() {
            BackendKind::Host => assert_eq!(max, u32::MAX),
            BackendKind::Cuda => assert_eq!(max, 48 * 1024),
            _ => {}
        }
        if dev.kind() == BackendKind::Wgpu && dev.adapter().contains("llvmpipe") {
            assert_eq!(max, 32768);
            let err = result.unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::Limit {
                        asked: 49152,
                        limit: 32768,
                        ..
                    }
                ),
                "{err:?}"
            );
            let msg = err.to_string();
            assert_eq!(
                msg,
                "workgroup memory of kernel `big_tile` in bytes (the adapter's `max_compute_workgroup_storage_size`): 49152 is over the limit of 32768 on wgpu"
            );
        } else if let Err(err) = result {
            // An adapter with less than 48 KiB refuses it the same way; none may fail otherwise.
            assert!(
                matches!(err, Error::Limit { .. }) && err.to_string().contains("`big_tile`"),
                "{err:?}"
            );
        } else {
            assert_eq!(y.to_host().unwrap(), vec![3.0f32; 64]);
        }
    });
}

/// The portable MMA form's exchange words count on the backends that use them: a 48 KiB
/// kernel with `mma_m16n8k16` fits CUDA (which exchanges fragments in registers) and the
/// host, not an adapter of at most 48 KiB; `Device::fits_workgroup_memory` says which, and
/// the refusal names the portable form's bytes.
#[test]
fn the_mma_exchange_counts_where_the_portable_form_runs() {
    assert_eq!(
        (big_mma::DEF.workgroup_bytes, big_mma::DEF.exchange_bytes),
        (49152, 128 * 6 * 4)
    );
    assert_eq!(big_mma::DEF.portable_bytes(), 49152 + 3072);
    on_every_backend(|dev| {
        let fits = dev.fits_workgroup_memory(&big_mma::DEF);
        let max = dev.workgroup_bytes_max();
        let want = match dev.kind() {
            BackendKind::Cuda => 49152 <= max,
            _ => 49152 + 3072 <= max,
        };
        assert_eq!(fits, want, "[{}] limit {max}", dev.kind());
        if dev.kind() != BackendKind::Wgpu {
            assert!(fits, "[{}]", dev.kind());
        }
        let x: Vec<f32> = (0..128).map(|i| i as f32 * 0.5 + 1.0).collect();
        let xb = dev.upload(&x).unwrap();
        let mut y = dev.upload(&vec![f32::NAN; 128]).unwrap();
        let result = big_mma::launch(dev, Grid::workgroups(1), &xb, &mut y);
        if fits {
            result.unwrap();
            // D = A·B over 16 values of k, every element 1: 16 per accumulator.
            let want: Vec<f32> = x.iter().map(|v| v + 16.0).collect();
            assert_eq!(y.to_host().unwrap(), want, "[{}]", dev.kind());
        } else {
            match result {
                Err(Error::Limit { asked, limit, .. }) => {
                    assert_eq!((asked, limit), (52224, u128::from(max)), "[{}]", dev.kind())
                }
                other => panic!("[{}] expected Error::Limit, got {other:?}", dev.kind()),
            }
        }
    });
}
