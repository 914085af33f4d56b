//! `#[device]` helpers in CUDA C: `static __device__` functions, declared before the kernel;
//! a slice parameter is a pointer to the whole binding with the view's offset and length, a
//! workgroup-array parameter a pointer to the kernel's `__shared__` array. C cannot pass or
//! return an array by value, so a `[T; N]` parameter or result is a struct holding it
//! (`gd_arr_f32_4`), copied element by element at constant indices on both sides, so the
//! arrays stay in registers where their other uses allow.

use std::fmt::Write;

use super::cuda::{ty, Cuda};
use crate::kernel::ir::*;

impl Cuda<'_> {
    /// A call of helper `h`.
    pub(super) fn call(&self, h: usize, args: &[CallArg]) -> String {
        let a: Vec<String> = args
            .iter()
            .map(|a| match a {
                CallArg::Value(e) => self.expr(e),
                CallArg::Slice(i) if self.checked.is_some() => {
                    let (p, off, len, target) = self.param_target(*i);
                    format!("{p}, {off}, {len}, {target}")
                }
                CallArg::Slice(i) => {
                    let n = &self.params[*i].name;
                    format!("{n}_p, {n}_off, {n}_len")
                }
                CallArg::Shared(s) if self.checked.is_some() => {
                    format!("{}, {}", self.shared[*s].name, self.shared_target(*s))
                }
                CallArg::Shared(s) => self.shared[*s].name.clone(),
                CallArg::Array(a) => wrap(&self.arrays[*a], &self.arrays[*a].name),
            })
            .chain(self.checked.map(|_| "gd_fault".to_string()))
            .collect();
        format!("{}({})", self.k.helpers[h].id, a.join(", "))
    }
}

/// The struct that carries a `[elem; len]` by value.
pub(super) fn array_struct(elem: Ty, len: u32) -> String {
    format!("gd_arr_{}_{len}", elem.rust())
}

/// Array `name` (of `a`'s type) as its struct: `gd_arr_f32_2{{x[0], x[1]}}`.
pub(super) fn wrap(a: &LocalArray, name: &str) -> String {
    let elems: Vec<String> = (0..a.len).map(|k| format!("{name}[{k}]")).collect();
    format!(
        "{}{{{{{}}}}}",
        array_struct(a.elem, a.len),
        elems.join(", ")
    )
}

/// Declares array `a` as a copy of the struct `from`: `float x[2] = {from.v[0], from.v[1]};`.
pub(super) fn unwrap(a: &LocalArray, from: &str) -> String {
    let elems: Vec<String> = (0..a.len).map(|k| format!("{from}.v[{k}]")).collect();
    format!(
        "{} {}[{}] = {{{}}};",
        ty(a.elem),
        a.name,
        a.len,
        elems.join(", ")
    )
}

/// In the checked variant a slice also passes its target number (`x_t`, for the fault
/// record), and the record itself comes last.
fn signature(f: &DeviceFn, checked: bool) -> String {
    let mut params: Vec<String> = f
        .params
        .iter()
        .map(|p| match p.kind {
            ParamKind::Scalar(t) => format!("{} {}_p", ty(t), p.name),
            ParamKind::Slice { elem, mutable, .. } => {
                let cst = if mutable { "" } else { "const " };
                let target = if checked {
                    format!(", gd_u32 {}_t", p.name)
                } else {
                    String::new()
                };
                format!(
                    "{cst}{}* {1}_p, gd_u32 {1}_off, gd_u32 {1}_len{target}",
                    ty(elem),
                    p.name
                )
            }
        })
        .chain(f.shared.iter().map(|s| {
            // The checked variant passes the array's target number, as for slices.
            let target = if checked {
                format!(", gd_u32 {}_t", s.name)
            } else {
                String::new()
            };
            format!("{}* {}{target}", ty(s.elem), s.name)
        }))
        .chain(f.array_params.iter().map(|&a| {
            let a = &f.arrays[a];
            format!("{} {}_in", array_struct(a.elem, a.len), a.name)
        }))
        .collect();
    if checked {
        params.push("gd_u32* gd_fault".into());
    }
    let ret = match (f.ret, f.ret_array) {
        (Some(t), _) => ty(t).to_string(),
        (None, Some((t, n))) => array_struct(t, n),
        (None, None) => "void".to_string(),
    };
    format!("static __device__ {ret} {}({})", f.id, params.join(", "))
}

/// Every helper of `k`: declarations first (so the order of definitions does not matter),
/// then definitions.
pub(super) fn emit_helpers(k: &Kernel, checked: Option<u32>, out: &mut String) {
    // One struct per array type passed or returned by value.
    let mut structs: Vec<(Ty, u32)> = Vec::new();
    for f in &k.helpers {
        let params = f
            .array_params
            .iter()
            .map(|&a| (f.arrays[a].elem, f.arrays[a].len));
        for t in params.chain(f.ret_array) {
            if !structs.contains(&t) {
                structs.push(t);
            }
        }
    }
    for (elem, len) in structs {
        let s = array_struct(elem, len);
        writeln!(out, "struct {s} {{ {} v[{len}]; }};", ty(elem)).unwrap();
    }
    for f in &k.helpers {
        writeln!(out, "{};", signature(f, checked.is_some())).unwrap();
    }
    for (h, f) in k.helpers.iter().enumerate() {
        let mut c = Cuda {
            k,
            params: &f.params,
            out: String::new(),
            indent: 1,
            checked,
            tmp: 0,
            in_helper: true,
            shared: &f.shared,
            arrays: &f.arrays,
            array_base: super::bounds::helper_array_base(k, h),
        };
        for &a in &f.array_params {
            let a = &f.arrays[a];
            c.out
                .push_str(&format!("    {}\n", unwrap(a, &format!("{}_in", a.name))));
        }
        c.block_pub(&f.body);
        writeln!(
            out,
            "// `#[device]` {}\n{} {{\n{}}}",
            f.name,
            signature(f, checked.is_some()),
            c.out
        )
        .unwrap();
    }
}
