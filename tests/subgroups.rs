//! Subgroup operations on every backend: each reduction and shuffle on `f32`, `i32` and
//! `u32` against the host's emulation with the device's subgroup size (bitwise: every
//! target runs the same xor butterfly), the host's emulation against the definition (a
//! pairwise tree in lane order; shuffles outside the subgroup give the own value), the lane
//! layout (runs of `subgroup_size()` invocations in `local_id().x` order), the subgroup sizes
//! adapters report (data), and the refusals.

mod common;

use common::{on_every_backend, rng};
use graphed::prelude::*;
use graphed::testing::{floats, poisoned};
use graphed::BackendKind;
use rand::Rng;

/// Every subgroup operation of `f32`, `i32` and `u32` values; `src` gives each invocation
/// a lane for `subgroup_shuffle` (some outside the subgroup), `m` the xor mask and `d` the
/// up/down delta (uniform, as they must be). Seven results per invocation and type, then
/// (size, lane) in `meta`.
#[kernel(workgroup = 64)]
pub fn sg_all(
    x: &[f32],
    xi: &[i32],
    xu: &[u32],
    src: &[u32],
    m: u32,
    d: u32,
    of: &mut [f32],
    oi: &mut [i32],
    ou: &mut [u32],
    meta: &mut [u32],
) {
    let i = global_id().x;
    let l = src[i];
    let f = [
        subgroup_add(x[i]),
        subgroup_max(x[i]),
        subgroup_min(x[i]),
        subgroup_shuffle(x[i], l),
        subgroup_shuffle_xor(x[i], m),
        subgroup_shuffle_up(x[i], d),
        subgroup_shuffle_down(x[i], d),
    ];
    let a = [
        subgroup_add(xi[i]),
        subgroup_max(xi[i]),
        subgroup_min(xi[i]),
        subgroup_shuffle(xi[i], l),
        subgroup_shuffle_xor(xi[i], m),
        subgroup_shuffle_up(xi[i], d),
        subgroup_shuffle_down(xi[i], d),
    ];
    let b = [
        subgroup_add(xu[i]),
        subgroup_max(xu[i]),
        subgroup_min(xu[i]),
        subgroup_shuffle(xu[i], l),
        subgroup_shuffle_xor(xu[i], m),
        subgroup_shuffle_up(xu[i], d),
        subgroup_shuffle_down(xu[i], d),
    ];
    for k in 0..7u32 {
        of[i * 7 + k] = f[k];
        oi[i * 7 + k] = a[k];
        ou[i * 7 + k] = b[k];
    }
    meta[i * 2] = subgroup_size();
    meta[i * 2 + 1] = subgroup_invocation_id();
}

/// The README's subgroup sum: one partial sum per subgroup.
#[kernel(workgroup = 256)]
pub fn subgroup_sums(x: &[f32], sums: &mut [f32]) {
    let i = global_id().x;
    let v = if i < x.len() { x[i] } else { 0.0 };
    let s = subgroup_add(v);
    if subgroup_invocation_id() == 0 && i < x.len() {
        sums[i / subgroup_size()] = s;
    }
}

/// Subgroup sizes adapters report and kernels see, as data (`Device::subgroup_size`):
/// adapter name substring, size.
const SUBGROUP_SIZES: &[(&str, u32)] = &[("llvmpipe", 8), ("NVIDIA", 32)];

const N: usize = 256;

struct Inputs {
    x: Vec<f32>,
    xi: Vec<i32>,
    xu: Vec<u32>,
    src: Vec<u32>,
    m: u32,
    d: u32,
}

fn inputs(rng: &mut impl Rng, size: u32) -> Inputs {
    Inputs {
        x: floats(rng, N, -100.0, 100.0),
        // Wide enough that sums wrap.
        xi: (0..N).map(|_| rng.random()).collect(),
        xu: (0..N).map(|_| rng.random()).collect(),
        src: (0..N).map(|_| rng.random_range(0..size + 3)).collect(),
        m: rng.random_range(0..size + 2),
        d: rng.random_range(0..size + 2),
    }
}

/// `(of, oi, ou, meta)` of `sg_all` on `dev`, outputs poisoned first.
fn run_all(dev: &Device, inp: &Inputs) -> (Vec<f32>, Vec<i32>, Vec<u32>, Vec<u32>) {
    let x = dev.upload(&inp.x).unwrap();
    let xi = dev.upload(&inp.xi).unwrap();
    let xu = dev.upload(&inp.xu).unwrap();
    let src = dev.upload(&inp.src).unwrap();
    let mut of = poisoned(dev, N * 7);
    let mut oi = dev.upload(&vec![i32::MIN + 7; N * 7]).unwrap();
    let mut ou = dev.upload(&vec![0xdead_beefu32; N * 7]).unwrap();
    let mut meta = dev.upload(&vec![0xdead_beefu32; N * 2]).unwrap();
    sg_all::launch(
        dev,
        Grid::workgroups((N / 64) as u32),
        &x,
        &xi,
        &xu,
        &src,
        inp.m,
        inp.d,
        &mut of,
        &mut oi,
        &mut ou,
        &mut meta,
    )
    .unwrap();
    (
        of.to_host().unwrap(),
        oi.to_host().unwrap(),
        ou.to_host().unwrap(),
        meta.to_host().unwrap(),
    )
}

/// The definition, in plain Rust: the pairwise tree over a subgroup in lane order for the
/// reductions, the own value where a shuffle's source lies outside the subgroup.
fn definition<T: Copy>(
    v: &[T],
    inp: &Inputs,
    size: usize,
    add: impl Fn(T, T) -> T,
    max: impl Fn(T, T) -> T,
    min: impl Fn(T, T) -> T,
) -> Vec<T> {
    fn tree<T: Copy>(s: &[T], op: &impl Fn(T, T) -> T) -> T {
        if s.len() == 1 {
            s[0]
        } else {
            let h = s.len() / 2;
            op(tree(&s[..h], op), tree(&s[h..], op))
        }
    }
    let mut out = Vec::with_capacity(v.len() * 7);
    for i in 0..v.len() {
        let (base, lane) = (i - i % size, i % size);
        let sub = &v[base..base + size];
        let from = |s: Option<usize>| match s {
            Some(s) if s < size => sub[s],
            _ => v[i],
        };
        out.extend([
            tree(sub, &add),
            tree(sub, &max),
            tree(sub, &min),
            from(Some(inp.src[i] as usize)),
            from(Some(lane ^ inp.m as usize)),
            from(lane.checked_sub(inp.d as usize)),
            from(Some(lane + inp.d as usize)),
        ]);
    }
    out
}

fn first_diff<T: PartialEq + std::fmt::Debug>(what: &str, got: &[T], want: &[T]) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
        let ops = ["add", "max", "min", "shuffle", "xor", "up", "down"];
        panic!(
            "{what}: invocation {} ({}): got {:?}, want {:?}",
            i / 7,
            ops[i % 7],
            got[i],
            want[i]
        );
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn every_operation_matches_the_host_emulation() {
    let mut rng = rng("every_operation_matches_the_host_emulation");
    on_every_backend(|dev| {
        let Some((size, host)) = common::subgroup_host(dev) else {
            return;
        };
        for _ in 0..4 {
            let inp = inputs(&mut rng, size);
            let (of, oi, ou, meta) = run_all(dev, &inp);
            let (hf, hi, hu, hmeta) = run_all(&host, &inp);
            first_diff("f32 (bits)", &bits(&of), &bits(&hf));
            first_diff("i32", &oi, &hi);
            first_diff("u32", &ou, &hu);
            let want_meta: Vec<u32> = (0..N as u32).flat_map(|i| [size, i % size]).collect();
            assert_eq!(
                meta, want_meta,
                "subgroup_size() and subgroup_invocation_id()"
            );
            assert_eq!(
                hmeta, want_meta,
                "host: subgroup_size() and subgroup_invocation_id()"
            );
        }
    });
}

#[test]
fn host_emulation_follows_the_definition() {
    let mut rng = rng("host_emulation_follows_the_definition");
    for size in [4u32, 8, 16, 32, 64] {
        let host = Device::host_with_subgroup_size(size).unwrap();
        let inp = inputs(&mut rng, size);
        let (of, oi, ou, _) = run_all(&host, &inp);
        let s = size as usize;
        let f = definition(&inp.x, &inp, s, |a, b| a + b, f32::max, f32::min);
        let i = definition(&inp.xi, &inp, s, i32::wrapping_add, i32::max, i32::min);
        let u = definition(&inp.xu, &inp, s, u32::wrapping_add, u32::max, u32::min);
        first_diff(&format!("size {size}: f32 (bits)"), &bits(&of), &bits(&f));
        first_diff(&format!("size {size}: i32"), &oi, &i);
        first_diff(&format!("size {size}: u32"), &ou, &u);
    }
}

#[test]
fn readme_subgroup_sum_matches_the_host() {
    let mut rng = rng("readme_subgroup_sum_matches_the_host");
    on_every_backend(|dev| {
        let Some(size) = dev.subgroup_size() else {
            return;
        };
        let n = 1000;
        let x = floats(&mut rng, n, -1.0, 1.0);
        let parts = n.div_ceil(size as usize);
        let run = |d: &Device| {
            let xb = d.upload(&x).unwrap();
            let mut sums = poisoned(d, parts);
            subgroup_sums::launch(d, Grid::threads(n), &xb, &mut sums).unwrap();
            sums.to_host().unwrap()
        };
        let got = run(dev);
        let want = run(&Device::host_with_subgroup_size(size).unwrap());
        assert_eq!(bits(&got), bits(&want), "partial sums, bitwise");
        let total: f64 = got.iter().map(|v| *v as f64).sum();
        let exact: f64 = x.iter().map(|v| *v as f64).sum();
        assert!((total - exact).abs() < 1e-3, "{total} vs {exact}");
    });
}

#[test]
fn adapters_report_the_recorded_subgroup_size() {
    on_every_backend(|dev| {
        let adapter = dev.adapter();
        let size = dev.subgroup_size();
        eprintln!("note: {} [{adapter}]: subgroup size {size:?}", dev.kind());
        match dev.kind() {
            BackendKind::Host => assert_eq!(size, Some(32)),
            BackendKind::Cuda => assert_eq!(size, Some(32)),
            BackendKind::Wgpu => {
                if let Some((_, want)) = SUBGROUP_SIZES.iter().find(|(a, _)| adapter.contains(a)) {
                    assert_eq!(size, Some(*want), "{adapter}");
                }
            }
        }
    });
}

#[test]
fn a_wgpu_device_without_subgroups_refuses_by_name() {
    let Ok(dev) = Device::__wgpu_without_subgroups() else {
        assert!(
            !graphed::Required::from_env().unwrap().wgpu,
            "wgpu is required but unavailable"
        );
        return;
    };
    assert_eq!(dev.subgroup_size(), None);
    let x = dev.upload(&[1.0f32; 256]).unwrap();
    let mut s = dev.alloc::<f32>(8).unwrap();
    let e = subgroup_sums::launch(&dev, Grid::threads(256), &x, &mut s).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Unsupported {
                kernel: "subgroup_sums",
                ..
            }
        ),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("subgroup operations") && msg.contains(&dev.adapter()),
        "{msg}"
    );
}

#[test]
fn a_workgroup_that_does_not_split_into_subgroups_is_refused() {
    // 64 invocations in subgroups of 128: the kernel language guarantees multiples of 32 only.
    let dev = Device::host_with_subgroup_size(128).unwrap();
    let x = dev.upload(&vec![1.0f32; N]).unwrap();
    let z = dev.upload(&vec![0i32; N]).unwrap();
    let u = dev.upload(&vec![0u32; N]).unwrap();
    let mut of = dev.alloc::<f32>(N * 7).unwrap();
    let mut oi = dev.alloc::<i32>(N * 7).unwrap();
    let mut ou = dev.alloc::<u32>(N * 7).unwrap();
    let mut meta = dev.alloc::<u32>(N * 2).unwrap();
    let e = sg_all::launch(
        &dev,
        Grid::workgroups(4),
        &x,
        &z,
        &u,
        &u,
        1u32,
        1u32,
        &mut of,
        &mut oi,
        &mut ou,
        &mut meta,
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Unsupported {
                kernel: "sg_all",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("subgroups of 128"), "{e}");
    assert!(matches!(
        Device::host_with_subgroup_size(24),
        Err(Error::Shape(_))
    ));
}

#[test]
fn sources_validate_and_compile() {
    common::assert_wgsl_valid(&[&sg_all::DEF, &subgroup_sums::DEF]);
    common::assert_cuda_compiles(&[&sg_all::DEF, &subgroup_sums::DEF]);
}
