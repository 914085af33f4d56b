//! Half precision (`f16`, `bf16`) in the runtime, on every backend: buffers of 16-bit elements
//! (two to a 32-bit word) with upload, download, `write`, `fill` and `copy_from` at every
//! element offset and length, byte counts, step inputs, outputs and per-step scalars, and the
//! wgpu device's `shader-f16` (asked for where the adapter has it; a kernel computing with
//! `f16` on an adapter without it is refused by name).
//!
//! Every value is compared bitwise: transfers and copies move bits and may not change one.

mod common;

use common::{on_every_backend, rng};
use graphed::__private::{HostLaunch, HostSlice};
use graphed::prelude::*;
use graphed::{CheckedForm, DType, KernelDef, KernelFault, ParamInfo, ParamType};
use rand::Rng;

/// The 16-bit types as the tests see them: their bits, and a name for messages.
trait Half: graphed::Element {
    fn from_u16(b: u16) -> Self;
    fn bits(self) -> u16;
}
impl Half for f16 {
    fn from_u16(b: u16) -> Self {
        f16::from_bits(b)
    }
    fn bits(self) -> u16 {
        self.to_bits()
    }
}
impl Half for bf16 {
    fn from_u16(b: u16) -> Self {
        bf16::from_bits(b)
    }
    fn bits(self) -> u16 {
        self.to_bits()
    }
}

/// A bit pattern no test writes on purpose: unwritten elements stay it.
const POISON: u16 = 0x7e5a;

fn random_bits(rng: &mut impl Rng, n: usize) -> Vec<u16> {
    // Any bits: NaN payloads, infinities and subnormals must travel unchanged too.
    (0..n).map(|_| rng.random::<u16>()).collect()
}

fn to_t<T: Half>(bits: &[u16]) -> Vec<T> {
    bits.iter().map(|&b| T::from_u16(b)).collect()
}

fn bits_of<T: Half>(v: &[T]) -> Vec<u16> {
    v.iter().map(|x| x.bits()).collect()
}

/// Every (start, end) with both ends at even and odd elements, empty and single views too.
fn views(n: usize) -> Vec<(usize, usize)> {
    let ends = [0, 1, 2, 3, 4, 5, n / 2, n / 2 + 1, n - 3, n - 2, n - 1, n];
    let mut out = Vec::new();
    for &a in &ends {
        for &b in &ends {
            if a <= b {
                out.push((a, b));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

fn round_trip<T: Half>(dev: &Device, n: usize) {
    let mut rng = rng("half_round_trip");
    let name = T::DTYPE.name();
    let mut model = random_bits(&mut rng, n);
    let buf = dev.upload(&to_t::<T>(&model)).unwrap();
    assert_eq!(buf.len(), n);
    assert_eq!(
        bits_of(&buf.to_host().unwrap()),
        model,
        "{name}: upload of {n}"
    );
    for (a, b) in views(n) {
        let v = buf.slice(a..b).unwrap();
        assert_eq!(
            bits_of(&v.to_host().unwrap()),
            model[a..b],
            "{name}: download of {a}..{b} of {n}"
        );
        let data = random_bits(&mut rng, b - a);
        v.write(&to_t::<T>(&data)).unwrap();
        model[a..b].copy_from_slice(&data);
        assert_eq!(
            bits_of(&buf.to_host().unwrap()),
            model,
            "{name}: write of {a}..{b} of {n} (neighbours must keep their bits)"
        );
    }
}

#[test]
fn half_buffers_upload_download_and_write_at_every_offset() {
    on_every_backend(|dev| {
        for n in [1, 2, 17, 64] {
            round_trip::<f16>(dev, n.max(6));
            round_trip::<bf16>(dev, n.max(6));
        }
        // Tiny buffers: one element, one word, one word and a half.
        for n in [1, 2, 3] {
            for t in [DType::F16, DType::BF16] {
                let mut rng = rng("half_tiny");
                let bits = random_bits(&mut rng, n);
                let got = match t {
                    DType::F16 => {
                        bits_of(&dev.upload(&to_t::<f16>(&bits)).unwrap().to_host().unwrap())
                    }
                    _ => bits_of(&dev.upload(&to_t::<bf16>(&bits)).unwrap().to_host().unwrap()),
                };
                assert_eq!(got, bits, "{t:?} upload of {n}");
            }
        }
        let empty = dev.upload::<f16>(&[]).unwrap();
        assert!(empty.to_host().unwrap().is_empty());
    });
}

fn fills_and_copies<T: Half>(dev: &Device) {
    let mut rng = rng("half_fills_and_copies");
    let name = T::DTYPE.name();
    let n = 23;
    let mut model = vec![POISON; n];
    let buf = dev.upload(&to_t::<T>(&model)).unwrap();
    for (a, b) in views(n) {
        let value: u16 = rng.random();
        buf.slice(a..b).unwrap().fill(T::from_u16(value)).unwrap();
        model[a..b].iter_mut().for_each(|m| *m = value);
        assert_eq!(
            bits_of(&buf.to_host().unwrap()),
            model,
            "{name}: fill of {a}..{b} of {n}"
        );
    }
    // Between buffers, at every parity of source and destination.
    let src_bits = random_bits(&mut rng, n);
    let src = dev.upload(&to_t::<T>(&src_bits)).unwrap();
    for (a, b) in views(n) {
        for shift in [0usize, 1, 2, 3] {
            let (d0, d1) = (a.saturating_sub(shift), b.saturating_sub(shift));
            let len = (d1 - d0).min(b - a);
            let mut dst_bits = random_bits(&mut rng, n);
            let dst = dev.upload(&to_t::<T>(&dst_bits)).unwrap();
            dst.slice(d0..d0 + len)
                .unwrap()
                .copy_from(&src.slice(a..a + len).unwrap())
                .unwrap();
            dst_bits[d0..d0 + len].copy_from_slice(&src_bits[a..a + len]);
            assert_eq!(
                bits_of(&dst.to_host().unwrap()),
                dst_bits,
                "{name}: copy of {a}..{} into {d0}..{} of {n}",
                a + len,
                d0 + len
            );
        }
    }
    // Within one buffer: views that share a word and views that do not.
    for (s, d, len) in [
        (0, 5, 5),
        (3, 8, 4),
        (9, 1, 8),
        (1, 3, 2),
        (2, 4, 2),
        (4, 0, 3),
        (5, 14, 9),
    ] {
        let mut bits = random_bits(&mut rng, n);
        let b = dev.upload(&to_t::<T>(&bits)).unwrap();
        b.slice(d..d + len)
            .unwrap()
            .copy_from(&b.slice(s..s + len).unwrap())
            .unwrap();
        let from = bits[s..s + len].to_vec();
        bits[d..d + len].copy_from_slice(&from);
        assert_eq!(
            bits_of(&b.to_host().unwrap()),
            bits,
            "{name}: copy of {s}..{} into {d}..{} of one buffer",
            s + len,
            d + len
        );
    }
    // Overlapping views are refused, as for every type.
    let err = buf
        .slice(2..6)
        .unwrap()
        .copy_from(&buf.slice(5..9).unwrap())
        .unwrap_err();
    assert_eq!(err.to_string(), "copy between overlapping views");
}

#[test]
fn half_fills_and_copies_keep_neighbours() {
    on_every_backend(|dev| {
        fills_and_copies::<f16>(dev);
        fills_and_copies::<bf16>(dev);
    });
}

#[test]
fn half_buffers_count_whole_words() {
    for dev in common::backends() {
        let dev = Device::open_new(dev.kind()).unwrap();
        let base = dev.allocated_bytes();
        let mut held = Vec::new();
        for (len, bytes) in [
            (1usize, 4u64),
            (2, 4),
            (3, 8),
            (4, 8),
            (5, 12),
            (1001, 2004),
        ] {
            let before = dev.allocated_bytes();
            held.push(dev.alloc::<f16>(len).unwrap().raw_view());
            held.push(dev.alloc::<bf16>(len).unwrap().raw_view());
            assert_eq!(
                dev.allocated_bytes() - before,
                2 * bytes,
                "{}: {len} f16 and {len} bf16 take {bytes} bytes each",
                dev.kind()
            );
        }
        // A 32-bit type for comparison: 4 bytes an element.
        let before = dev.allocated_bytes();
        let f = dev.alloc::<f32>(3).unwrap();
        assert_eq!(dev.allocated_bytes() - before, 12);
        drop((f, held));
        assert_eq!(dev.allocated_bytes(), base, "{}: all freed", dev.kind());
        // A view of a 16-bit buffer is typed: a `Buffer<f32>` of it is refused.
        let h = dev.alloc::<bf16>(4).unwrap();
        let err = Buffer::<f32>::try_from_view(h.raw_view()).unwrap_err();
        assert_eq!(err.to_string(), "expected a buffer of f32, found bf16");
    }
}

// ------------------------------------------------------------------ hand-written kernels

// The kernel language gains `f16` and `bf16` separately; these two kernels are written by
// hand in every target, to test what the runtime owns: per-step scalars of both types, 16-bit
// slices bound at any element offset, and `shader-f16` on wgpu.

fn host_put_f16(l: &HostLaunch<'_>) -> Result<(), KernelFault> {
    let x = <f16 as graphed::ScalarValue>::from_bits(l.args[0]);
    let y = HostSlice::<f16>::new(l, 0, 1, "put_f16", "y")?;
    for i in 0..l.workgroups[0] * 64 {
        if i < y.len() {
            y.set(i, x)?;
        }
    }
    Ok(())
}

/// WGSL of `PUT_F16`.
const PUT_F16_WGSL: &str = "enable f16;\n\
        @group(0) @binding(0) var<storage, read> gd_args: array<u32>;\n\
        @group(0) @binding(1) var<storage, read_write> y_p: array<f16>;\n\
        @compute @workgroup_size(64, 1, 1)\n\
        fn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n\
            let x = f16(unpack2x16float(gd_args[0u])[0]);\n\
            if gid.x < gd_args[2u] { y_p[gd_args[1u] + gid.x] = x; }\n\
        }\n";

/// `y[i] = x` for an `f16` scalar `x` and `y: &mut [f16]` (WGSL computes with `f16`).
static PUT_F16: KernelDef = KernelDef {
    name: "put_f16",
    wgsl: PUT_F16_WGSL,
    cuda: "extern \"C\" __global__ void put_f16(const unsigned int* __restrict__ gd_args, unsigned short* __restrict__ y_p) {\n\
            unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
            if (i < gd_args[2]) { y_p[gd_args[1] + i] = (unsigned short)(gd_args[0] & 0xffffu); }\n\
        }\n",
    workgroup: [64, 1, 1],
    workgroup_bytes: 0,
    exchange_bytes: 0,
    params: &[
        ParamInfo {
            name: "x",
            kind: ParamType::Scalar(DType::F16),
        },
        ParamInfo {
            name: "y",
            kind: ParamType::Slice {
                elem: DType::F16,
                write: true,
                atomic: false,
            },
        },
    ],
    arg_words: 3,
    host: host_put_f16,
    loops_terminate: true,
    // Checked mode binds a fault record after the last slice; these kernels index nothing
    // out of range (each store is guarded), so their checked forms only declare it.
    checked: CheckedForm {
        wgsl: PUT_F16_WGSL,
        cuda: "extern \"C\" __global__ void put_f16(const unsigned int* __restrict__ gd_args, unsigned short* __restrict__ y_p, unsigned int* gd_fault) {\n\
            unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
            if (i < gd_args[2]) { y_p[gd_args[1] + i] = (unsigned short)(gd_args[0] & 0xffffu); }\n\
        }\n",
        id: 1,
        targets: &["x", "y"],
    },
};

fn host_widen_bf16(l: &HostLaunch<'_>) -> Result<(), KernelFault> {
    let x = <bf16 as graphed::ScalarValue>::from_bits(l.args[0]);
    let y = HostSlice::<f32>::new(l, 0, 1, "widen_bf16", "y")?;
    for i in 0..l.workgroups[0] * 64 {
        if i < y.len() {
            y.set(i, x.to_f32())?;
        }
    }
    Ok(())
}

/// WGSL of `WIDEN_BF16`.
const WIDEN_BF16_WGSL: &str = "@group(0) @binding(0) var<storage, read> gd_args: array<u32>;\n\
        @group(0) @binding(1) var<storage, read_write> y_p: array<f32>;\n\
        @compute @workgroup_size(64, 1, 1)\n\
        fn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n\
            if gid.x < gd_args[2u] { y_p[gd_args[1u] + gid.x] = bitcast<f32>(gd_args[0u] << 16u); }\n\
        }\n";

/// `y[i] = x as f32` for a `bf16` scalar `x` (exact: a bf16 is an f32's upper half), in
/// integer operations on every target.
static WIDEN_BF16: KernelDef = KernelDef {
    name: "widen_bf16",
    wgsl: WIDEN_BF16_WGSL,
    cuda: "extern \"C\" __global__ void widen_bf16(const unsigned int* __restrict__ gd_args, float* __restrict__ y_p) {\n\
            unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
            if (i < gd_args[2]) { y_p[gd_args[1] + i] = __uint_as_float(gd_args[0] << 16); }\n\
        }\n",
    workgroup: [64, 1, 1],
    workgroup_bytes: 0,
    exchange_bytes: 0,
    params: &[
        ParamInfo {
            name: "x",
            kind: ParamType::Scalar(DType::BF16),
        },
        ParamInfo {
            name: "y",
            kind: ParamType::Slice {
                elem: DType::F32,
                write: true,
                atomic: false,
            },
        },
    ],
    arg_words: 3,
    host: host_widen_bf16,
    loops_terminate: true,
    checked: CheckedForm {
        wgsl: WIDEN_BF16_WGSL,
        cuda: "extern \"C\" __global__ void widen_bf16(const unsigned int* __restrict__ gd_args, float* __restrict__ y_p, unsigned int* gd_fault) {\n\
            unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
            if (i < gd_args[2]) { y_p[gd_args[1] + i] = __uint_as_float(gd_args[0] << 16); }\n\
        }\n",
        id: 2,
        targets: &["x", "y"],
    },
};

fn put_f16(
    cx: &impl Launch,
    x: impl graphed::IntoScalarArg<f16>,
    y: &mut Buffer<f16>,
) -> Result<()> {
    cx.launch(
        &PUT_F16,
        Grid::threads(y.len()),
        &[
            graphed::KernelArg::Scalar(x.into_scalar_arg().erase()),
            graphed::KernelArg::Write(y.raw_view()),
        ],
    )
}

fn widen_bf16(
    cx: &impl Launch,
    x: impl graphed::IntoScalarArg<bf16>,
    y: &mut Buffer<f32>,
) -> Result<()> {
    cx.launch(
        &WIDEN_BF16,
        Grid::threads(y.len()),
        &[
            graphed::KernelArg::Scalar(x.into_scalar_arg().erase()),
            graphed::KernelArg::Write(y.raw_view()),
        ],
    )
}

/// Everything a step does with 16-bit data: an input copied whole and from an odd element,
/// a state filled off a word boundary, and both kinds of per-step scalar.
#[graphed]
#[allow(clippy::type_complexity)]
fn half_step(
    cx: &mut Step,
    #[state] acc: &mut Buffer<bf16>,
    x: &Input<f16>,
    h: f16,
    b: bf16,
    #[key] f16_kernels: bool,
) -> Result<(Output<f16>, Output<f16>, Output<f32>, Output<f16>)> {
    let n = x.len();
    let whole = cx.snapshot(x)?;
    let mut tail = cx.output::<f16>(n - 1)?;
    cx.copy(&x.slice(1..n)?, &mut tail)?;
    cx.fill(&mut acc.slice(1..n - 2)?, bf16::from_f32(-3.5))?;
    let mut wide = cx.output::<f32>(n)?;
    widen_bf16(cx, b, &mut wide)?;
    let mut put = cx.output::<f16>(n)?;
    if f16_kernels {
        put_f16(cx, h, &mut put)?;
    }
    Ok((whole, tail, wide, put))
}

#[test]
fn half_steps_replay_inputs_state_and_per_step_scalars() {
    on_every_backend(|dev| {
        let mut rng = rng("half_steps");
        let f16_kernels = dev.supports_kernels_of(DType::F16);
        let n = 37;
        let acc = dev
            .upload(&to_t::<bf16>(&random_bits(&mut rng, n)))
            .unwrap();
        let mut acc_model = bits_of(&acc.to_host().unwrap());
        let mut step = HalfStep::new(dev).unwrap();
        let backing = dev.alloc::<f16>(n + 1).unwrap();
        for call in 0..6 {
            let bits = random_bits(&mut rng, n);
            // Normal values for the scalars: a GPU may quiet a NaN it moves through a
            // register, and these are values, not bit patterns.
            let h = f16::from_f32(rng.random_range(-60000.0..60000.0));
            let b = bf16::from_f32(rng.random_range(-1e30..1e30));
            // Host data on even calls; on odd ones a device view at an odd element, which
            // reaches its slot through the runtime's copy kernel.
            let outs = if call % 2 == 0 {
                step.call(&mut acc.clone(), &to_t::<f16>(&bits), h, b, f16_kernels)
            } else {
                let x = backing.slice(1..n + 1).unwrap();
                x.write(&to_t::<f16>(&bits)).unwrap();
                step.call(&mut acc.clone(), &x, h, b, f16_kernels)
            }
            .unwrap_or_else(|e| panic!("call {call}: {e}"));
            let (whole, tail, wide, put) = outs;
            assert_eq!(
                bits_of(&whole.to_host().unwrap()),
                bits,
                "call {call}: snapshot"
            );
            assert_eq!(
                bits_of(&tail.to_host().unwrap()),
                bits[1..],
                "call {call}: copy from element 1"
            );
            let w = wide.to_host().unwrap();
            assert!(
                w.iter().all(|v| v.to_bits() == b.to_f32().to_bits()),
                "call {call}: bf16 scalar {b} widened: {:?}",
                &w[..3]
            );
            if f16_kernels {
                let p = bits_of(&put.to_host().unwrap());
                assert!(
                    p.iter().all(|&v| v == h.to_bits()),
                    "call {call}: f16 scalar {h}: {:?}",
                    &p[..3]
                );
            }
            acc_model[1..n - 2]
                .iter_mut()
                .for_each(|m| *m = bf16::from_f32(-3.5).to_bits());
            assert_eq!(
                bits_of(&acc.to_host().unwrap()),
                acc_model,
                "call {call}: state fill off a word boundary"
            );
        }
        let stats = step.stats();
        assert!(
            stats.replays >= 4,
            "{}: replays {}",
            dev.kind(),
            stats.replays
        );
    });
}

// ------------------------------------------------------------------ shader-f16 on wgpu

/// What each adapter we run on reports for `shader-f16` (WGSL `enable f16;`), recorded as
/// data: (adapter name contains, has it). An adapter not listed is only printed.
const SHADER_F16: &[(&str, bool)] = &[
    // Mesa lavapipe (LLVM 15, Debian's mesa-vulkan-drivers): has it.
    ("llvmpipe", true),
    // NVIDIA's Vulkan driver reports `shaderFloat16` and 16-bit storage on every GPU since
    // Turing; to be confirmed on the H200 (this assertion checks it there).
    ("NVIDIA", true),
];

#[test]
fn wgpu_asks_for_shader_f16_and_refuses_f16_kernels_without_it() {
    let Ok(dev) = Device::open(graphed::BackendKind::Wgpu) else {
        assert!(
            !graphed::Required::from_env().unwrap().wgpu,
            "wgpu required"
        );
        return;
    };
    let adapter = dev.adapter();
    let has = dev.supports_kernels_of(DType::F16);
    eprintln!("wgpu adapter {adapter}: shader-f16 {has}");
    for (name, expected) in SHADER_F16 {
        if adapter.contains(name) {
            assert_eq!(
                has, *expected,
                "{adapter}: shader-f16 recorded as {expected}"
            );
        }
    }
    // WGSL has no bf16; the kernel language emulates it over words (tests/half_lang.rs).
    assert!(dev.supports_kernels_of(DType::BF16));
    for d in common::backends() {
        if d.kind() != graphed::BackendKind::Wgpu {
            assert!(
                d.supports_kernels_of(DType::F16) && d.supports_kernels_of(DType::BF16),
                "{}: both types compute there",
                d.kind()
            );
        }
    }
    // Without the feature, an f16 kernel is refused by name, before anything runs.
    let bare = Device::__wgpu_without_shader_f16().unwrap();
    assert!(!bare.supports_kernels_of(DType::F16));
    let mut y = bare.upload(&[f16::from_f32(7.0); 5]).unwrap();
    let err = put_f16(&bare, f16::ONE, &mut y).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Unsupported {
                kernel: "put_f16",
                backend: "wgpu",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!("kernel `put_f16` needs `f16` arithmetic (WGSL's `shader-f16` feature), which the wgpu adapter {} does not have; run it on the CUDA or host backend, or keep f16 in buffers and compute in f32 (`x as f32`, then `as f16` to store) in a kernel without f16 arithmetic", bare.adapter())
    );
    assert_eq!(
        bits_of(&y.to_host().unwrap()),
        vec![f16::from_f32(7.0).to_bits(); 5]
    );
    // A kernel without f16 arithmetic still runs there, with a bf16 scalar.
    let mut w = bare.upload(&[0.0f32; 3]).unwrap();
    widen_bf16(&bare, bf16::from_f32(1.5), &mut w).unwrap();
    assert_eq!(w.to_host().unwrap(), vec![1.5; 3]);
    assert!(PUT_F16.needs_shader_f16() && !WIDEN_BF16.needs_shader_f16());
}

#[test]
fn hand_written_cuda_compiles_with_nvrtc() {
    if !common::nvrtc_enabled() {
        return;
    }
    for k in [&PUT_F16, &WIDEN_BF16] {
        graphed::nvrtc::compile_checked(k, "compute_80")
            .unwrap_or_else(|e| panic!("{} (checked): {e}", k.name));
        graphed::nvrtc::compile(k, "compute_80").unwrap_or_else(|e| panic!("{}: {e}", k.name));
    }
}

/// `w[i] = (bits of x[2i]) | (bits of x[2i + 1]) << 16`: reads elements, writes words.
#[kernel(workgroup = 64)]
pub fn pack_pairs(x: &[bf16], w: &mut [u32]) {
    let i = global_id().x;
    if i < w.len() && 2 * i + 1 < x.len() {
        w[i] = x[2 * i].to_bits() | (x[2 * i + 1].to_bits() << 16u32);
    }
}

/// `Buffer::words`: a 16-bit view whose ends are even is its words, element `2i` in the low
/// half of word `i` (read and written through either view); any other is `None`. A launch
/// that writes the words and reads elements sharing bytes with them is refused, and one
/// whose views share an allocation but no byte runs.
#[test]
fn half_views_as_words_share_their_bits_and_alias_by_bytes() {
    let mut rng = rng("half_words");
    on_every_backend(|dev| {
        let n = 22;
        let bits = random_bits(&mut rng, n);
        let buf = dev.upload(&to_t::<bf16>(&bits)).unwrap();
        for (a, b) in views(n) {
            let view = buf.slice(a..b).unwrap();
            let words = view.words();
            assert_eq!(words.is_some(), a % 2 == 0 && b % 2 == 0, "{a}..{b}");
            if let Some(w) = words {
                assert_eq!(w.len(), (b - a) / 2, "{a}..{b}");
                assert_eq!(w.to_host().unwrap(), want_words(&bits[a..b]), "{a}..{b}");
            }
        }
        // An odd end at the allocation's end: the last word's high half is padding.
        let odd = dev.upload(&to_t::<bf16>(&bits[..n - 1])).unwrap();
        let w = odd.slice(2..n - 1).unwrap().words().unwrap();
        assert_eq!(w.len(), (n - 2) / 2);
        let got = w.to_host().unwrap();
        assert_eq!(got[..got.len() - 1], want_words(&bits[2..n - 2]));
        assert_eq!(
            got[got.len() - 1] as u16,
            bits[n - 2],
            "the last element, low half"
        );
        // Written through the words, read as elements.
        let w = buf.slice(4..10).unwrap().words().unwrap();
        let new: Vec<u32> = (0..3).map(|_| rng.random()).collect();
        w.write(&new).unwrap();
        let got = bits_of(&buf.to_host().unwrap());
        for (i, word) in new.iter().enumerate() {
            assert_eq!(got[4 + 2 * i], *word as u16, "low half of word {i}");
            assert_eq!(
                got[5 + 2 * i],
                (*word >> 16) as u16,
                "high half of word {i}"
            );
        }
        assert_eq!(got[..4], bits[..4], "before the words");
        assert_eq!(got[10..], bits[10..], "after the words");
        // Elements 2..6 (bytes 4..12) and the words of elements 0..4 (bytes 0..8) share
        // bytes 4..8: refused. (Compared by element offsets, 2..6 against words 0..2, they
        // would not have been.)
        let x = buf.slice(2..6).unwrap();
        let mut out = buf.slice(0..4).unwrap().words().unwrap();
        let err = pack_pairs::launch(dev, Grid::workgroups(1), &x, &mut out).unwrap_err();
        assert!(
            err.to_string().contains("overlapping views"),
            "[{}] {err}",
            dev.kind()
        );
        // Elements 0..4 (bytes 0..8) and the words of elements 4..8 (bytes 8..16) share none.
        let fresh = random_bits(&mut rng, n);
        buf.write(&to_t::<bf16>(&fresh)).unwrap();
        let x = buf.slice(0..4).unwrap();
        let mut out = buf.slice(4..8).unwrap().words().unwrap();
        pack_pairs::launch(dev, Grid::workgroups(1), &x, &mut out).unwrap();
        let got = bits_of(&buf.to_host().unwrap());
        assert_eq!(got[..4], fresh[..4], "[{}] the elements read", dev.kind());
        assert_eq!(
            got[4..8],
            fresh[..4],
            "[{}] their bits, as words",
            dev.kind()
        );
        assert_eq!(got[8..], fresh[8..], "[{}] the rest", dev.kind());
    });
}

/// The words of an even number of 16-bit elements, element `2i` in the low half of word `i`.
fn want_words(bits: &[u16]) -> Vec<u32> {
    bits.chunks(2)
        .map(|p| p[0] as u32 | (p[1] as u32) << 16)
        .collect()
}
