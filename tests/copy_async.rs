//! `copy_async` (the kernel language's copy into workgroup memory that is not waited for:
//! `cp.async` on CUDA sm_80+, element copies elsewhere) on every backend against host
//! references: chunks of every count (0 to 6, clamped to 4), chunks running past the end of
//! the source, destination and source addresses off the 16-byte alignment `cp.async` needs
//! (CUDA then copies element by element), a source view starting inside its allocation, a
//! three-stage pipeline whose tiles are read by other invocations after `copy_async_wait(1)`
//! and a barrier (written inline, and with its copies and waits in `#[device]` helpers), and
//! a destination past the workgroup array (a fault, checked). Inputs are fresh random values;
//! outputs are poisoned before each run.
//!
//! Tolerances: none. The copies move bits; the pipeline's sums are of small integers held in
//! `f32` (exact in any order).

mod common;

use common::{backends, on_every_backend, rng};
use graphed::prelude::*;
use graphed::{BackendKind, DeviceOptions, FaultKind, KernelDef};
use rand::Rng;

const POISON: u32 = 0xDEAD_BEEF;

/// Workgroup array elements of `gather_chunks`: 64 chunks of 4 and room for `d0` up to 4.
const SLOTS: usize = 260;

/// Invocation `i` of workgroup `w` copies `counts[g]` elements of `x` from `s0 + 4g`
/// (`g = 64w + i`) into `t[d0 + 4i ..]`; each workgroup then writes its whole array `t`,
/// poisoned first, to `out[260w ..]`.
#[kernel(workgroup = 64)]
pub fn gather_chunks(d0: u32, s0: u32, x: &[u32], counts: &[u32], out: &mut [u32]) {
    let t = shared::<u32, 260>();
    let i = local_id().x;
    let w = workgroup_id().x;
    for q in 0..5u32 {
        let j = i + 64 * q;
        if j < 260 {
            t[j] = 0xDEADBEEFu32;
        }
    }
    barrier();
    let g = w * 64 + i;
    copy_async(t, d0 + 4 * i, x, s0 + 4 * g, counts[g]);
    copy_async_commit();
    copy_async_wait(0);
    barrier();
    for q in 0..5u32 {
        let j = i + 64 * q;
        if j < 260 {
            out[w * 260 + j] = t[j];
        }
    }
}

/// Workgroup `w` streams `tiles` tiles of 256 values from `x[256·tiles·w ..]` through three
/// stages of workgroup memory, two tiles in flight; at step `s` invocation `i` adds the chunk
/// of invocation `(i + 7s) % 64` (so a tile not yet landed, or overwritten early, changes
/// the sum) into `out[64w + i]`.
#[kernel(workgroup = 64)]
pub fn pipelined_sums(tiles: u32, x: &[f32], out: &mut [f32]) {
    let t = shared::<f32, 768>();
    let i = local_id().x;
    let base = workgroup_id().x * tiles * 256;
    copy_async(t, 4 * i, x, base + 4 * i, 4);
    copy_async_commit();
    if tiles > 1 {
        copy_async(t, 256 + 4 * i, x, base + 256 + 4 * i, 4);
    }
    copy_async_commit();
    let mut acc = 0.0f32;
    for step in 0..tiles {
        // Tile `step` has landed for this invocation; after the barrier, for all of them,
        // and every invocation is done with step − 1's stage, which tile step + 2 takes.
        copy_async_wait(1);
        barrier();
        if step + 2 < tiles {
            copy_async(
                t,
                ((step + 2) % 3) * 256 + 4 * i,
                x,
                base + (step + 2) * 256 + 4 * i,
                4,
            );
        }
        copy_async_commit();
        let at = (step % 3) * 256 + 4 * ((i + 7 * step) % 64);
        for e in 0..4u32 {
            acc += t[at + e];
        }
    }
    out[workgroup_id().x * 64 + i] = acc;
}

/// Invocation `i`'s chunk of a tile of 256 values at `x[at ..]` into the stage at `t[st ..]`,
/// and the group closed: `pipelined_sums`' copies, from a helper.
#[device]
fn issue_tile(t: &mut [f32; 768], x: &[f32], st: u32, at: u32, i: u32, copy: bool) {
    if copy {
        copy_async(t, st + 4 * i, x, at + 4 * i, 4);
    }
    copy_async_commit();
}

/// `pipelined_sums` with its copies, commits and waits in `#[device]` helpers.
#[kernel(workgroup = 64)]
pub fn pipelined_sums_in_helpers(tiles: u32, x: &[f32], out: &mut [f32]) {
    let t = shared::<f32, 768>();
    let i = local_id().x;
    let base = workgroup_id().x * tiles * 256;
    issue_tile(t, x, 0, base, i, true);
    issue_tile(t, x, 256, base + 256, i, tiles > 1);
    let mut acc = 0.0f32;
    for step in 0..tiles {
        landed();
        barrier();
        issue_tile(
            t,
            x,
            ((step + 2) % 3) * 256,
            base + (step + 2) * 256,
            i,
            step + 2 < tiles,
        );
        let at = (step % 3) * 256 + 4 * ((i + 7 * step) % 64);
        for e in 0..4u32 {
            acc += t[at + e];
        }
    }
    out[workgroup_id().x * 64 + i] = acc;
}

/// Waits until at most one of the invocation's groups is in flight.
#[device]
fn landed() {
    copy_async_wait(1);
}

/// Invocation 0 copies 4 elements into `t[d ..]` of an 8-element array.
#[kernel(workgroup = 64)]
pub fn copy_at(d: u32, x: &[u32], out: &mut [u32]) {
    let t = shared::<u32, 8>();
    if local_id().x == 0 {
        copy_async(t, d, x, 0, 4);
    }
    copy_async_commit();
    copy_async_wait(0);
    barrier();
    if local_id().x == 0 {
        out[0] = t[0];
    }
}

fn all_kernels() -> Vec<&'static KernelDef> {
    vec![
        &gather_chunks::DEF,
        &pipelined_sums::DEF,
        &pipelined_sums_in_helpers::DEF,
        &copy_at::DEF,
    ]
}

/// What `gather_chunks` writes: the reference of the language's definition.
fn gather_reference(d0: usize, s0: usize, x: &[u32], counts: &[u32], groups: usize) -> Vec<u32> {
    let mut out = vec![POISON; groups * SLOTS];
    for w in 0..groups {
        for i in 0..64 {
            let g = w * 64 + i;
            for e in 0..4 {
                let src = s0 + 4 * g + e;
                let v = if (e as u32) < counts[g] && src < x.len() {
                    x[src]
                } else {
                    0
                };
                out[w * SLOTS + d0 + 4 * i + e] = v;
            }
        }
    }
    out
}

#[test]
fn chunks_land_with_their_counts_edges_and_alignments() {
    let mut r = rng("chunks_land_with_their_counts_edges_and_alignments");
    on_every_backend(|dev| {
        let groups = 3usize;
        let full = groups * 256;
        // (d0, s0, elements of x, offset of the view of x in its allocation)
        let cases = [
            (0usize, 0usize, full, 0usize),
            (0, 0, full - 130, 0),
            (1, 0, full, 0),
            (0, 1, full, 0),
            (4, 3, full - 7, 0),
            (0, 0, full, 4),
            (0, 0, full, 1),
            (2, 2, 5, 0),
            (0, 0, 0, 0),
        ];
        for (d0, s0, len, view) in cases {
            let data: Vec<u32> = (0..len + view).map(|_| r.random::<u32>() | 1).collect();
            let counts: Vec<u32> = (0..groups * 64).map(|_| r.random_range(0..=6)).collect();
            let alloc = dev.upload(&data).unwrap();
            let x = alloc.slice(view..view + len).unwrap();
            let cb = dev.upload(&counts).unwrap();
            let mut out = dev.upload(&vec![POISON; groups * SLOTS]).unwrap();
            gather_chunks::launch(
                dev,
                Grid::workgroups(groups as u32),
                d0 as u32,
                s0 as u32,
                &x,
                &cb,
                &mut out,
            )
            .unwrap();
            let want = gather_reference(d0, s0, &data[view..], &counts, groups);
            let got = out.to_host().unwrap();
            let bad: Vec<String> = got
                .iter()
                .zip(&want)
                .enumerate()
                .filter(|(_, (g, w))| g != w)
                .map(|(j, (g, w))| format!("[{j}] got {g:#x}, want {w:#x}"))
                .take(6)
                .collect();
            assert!(
                bad.is_empty(),
                "{}: d0 {d0}, s0 {s0}, len {len}, view at {view}:\n  {}",
                dev.kind(),
                bad.join("\n  ")
            );
        }
    });
}

#[test]
fn a_three_stage_pipeline_reads_each_tile_after_it_landed() {
    let mut r = rng("a_three_stage_pipeline_reads_each_tile_after_it_landed");
    on_every_backend(|dev| {
        for (tiles, groups) in [(1usize, 1usize), (2, 2), (3, 1), (17, 5)] {
            let x: Vec<f32> = (0..tiles * groups * 256)
                .map(|_| r.random_range(-100i32..=100) as f32)
                .collect();
            let xb = dev.upload(&x).unwrap();
            let mut out = dev
                .upload(&vec![f32::from_bits(POISON); groups * 64])
                .unwrap();
            let mut helped = dev
                .upload(&vec![f32::from_bits(POISON); groups * 64])
                .unwrap();
            let grid = Grid::workgroups(groups as u32);
            pipelined_sums::launch(dev, grid, tiles as u32, &xb, &mut out).unwrap();
            pipelined_sums_in_helpers::launch(dev, grid, tiles as u32, &xb, &mut helped).unwrap();
            let mut want = vec![0.0f32; groups * 64];
            for w in 0..groups {
                for i in 0..64 {
                    for s in 0..tiles {
                        let at = w * tiles * 256 + s * 256 + 4 * ((i + 7 * s) % 64);
                        want[w * 64 + i] += x[at..at + 4].iter().sum::<f32>();
                    }
                }
            }
            for (what, got) in [
                ("inline", out.to_host().unwrap()),
                ("in helpers", helped.to_host().unwrap()),
            ] {
                assert!(
                    common::bitwise_eq(&got, &want),
                    "{}: {what}, {tiles} tiles × {groups} workgroups: got {:?}, want {:?}",
                    dev.kind(),
                    &got[..8],
                    &want[..8]
                );
            }
        }
    });
}

#[test]
fn a_chunk_past_the_workgroup_array_is_a_fault() {
    for d in backends() {
        let dev = Device::open_new_with(d.kind(), DeviceOptions { checked: true }).unwrap();
        assert!(dev.checked() || d.kind() == BackendKind::Host);
        let x = dev.upload(&[11u32, 12, 13, 14]).unwrap();
        let mut out = dev.upload(&[POISON]).unwrap();
        let got = copy_at::launch(&dev, Grid::workgroups(1), 6u32, &x, &mut out)
            .and_then(|()| dev.synchronize());
        match got {
            Err(graphed::Error::Fault(f)) => assert_eq!(
                (f.kernel, f.target, f.kind.clone()),
                ("copy_at", "t", FaultKind::OutOfBounds { index: 8, len: 8 }),
                "{}: {f}",
                dev.kind()
            ),
            other => panic!("{}: expected a fault at t[8], got {other:?}", dev.kind()),
        }
        dev.synchronize().expect("a fault is reported once");
        copy_at::launch(&dev, Grid::workgroups(1), 4u32, &x, &mut out).unwrap();
        copy_at::launch(&dev, Grid::workgroups(1), 0u32, &x, &mut out).unwrap();
        assert_eq!(out.to_host().unwrap(), [11], "{}", dev.kind());
    }
}

#[test]
fn every_kernel_wgsl_is_valid_per_naga() {
    common::assert_wgsl_valid(&all_kernels());
}

#[test]
fn every_kernel_cuda_compiles_with_nvrtc() {
    common::assert_cuda_compiles(&all_kernels());
}
