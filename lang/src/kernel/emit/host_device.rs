//! `#[device]` helpers in the host form: Rust functions nested in the kernel's host
//! function, taking the kernel's checked slices, so an out-of-bounds access in a helper is
//! the same `KernelFault` (naming the kernel and its slice) as one in the kernel's body. A
//! workgroup-array parameter is the kernel's `HostShared`; a helper that reaches a barrier
//! or a subgroup operation is an `async fn`, awaited by the invocation that calls it, and
//! one that reaches a subgroup operation also takes the workgroup's exchange `gd_sg` and
//! the invocation's linear index `gd_li`.

use std::fmt::Write;

use super::host::Host;
use crate::kernel::ir::*;

impl Host<'_> {
    /// A call of helper `h`: faults propagate.
    pub(super) fn call(&self, h: usize, args: &[CallArg]) -> String {
        let a: Vec<String> = args
            .iter()
            .map(|a| match a {
                CallArg::Value(e) => self.expr(e),
                CallArg::Slice(i) => format!("{}_p", self.params[*i].name),
                CallArg::Shared(s) => self.shared[*s].name.clone(),
                // Rust arrays are `Copy`: the callee gets its own.
                CallArg::Array(a) => self.arrays[*a].name.clone(),
            })
            .chain(
                self.k.helpers[h]
                    .has_subgroup
                    .then(|| "gd_sg, gd_li".to_string()),
            )
            .collect();
        let f = &self.k.helpers[h];
        let wait = if f.has_barrier || f.has_subgroup {
            ".await"
        } else {
            ""
        };
        format!("{}({}){wait}?", self.k.helpers[h].id, a.join(", "))
    }
}

/// Helper `f` of `k` as a Rust function returning `Result<T, KernelFault>`; `fault` names
/// the kernel in a fault of a run-time `step_by` below 1. Needs `gd` (`::graphed::__private`)
/// in scope.
pub fn helper_fn(k: &Kernel, f: &DeviceFn, fault: &str) -> String {
    let mut h = Host {
        k,
        params: &f.params,
        shared: &f.shared,
        arrays: &f.arrays,
        fault,
        out: String::new(),
    };
    let params: Vec<String> = f
        .params
        .iter()
        .map(|p| match p.kind {
            ParamKind::Scalar(t) => format!("{}_p: {}", p.name, t.rust()),
            ParamKind::Slice { elem, .. } => {
                format!("{}_p: gd::HostSlice<'_, {}>", p.name, elem.rust())
            }
        })
        .chain(
            f.shared
                .iter()
                .map(|s| format!("{}: &gd::HostShared<{}>", s.name, s.elem.rust())),
        )
        .chain(f.array_params.iter().map(|&a| {
            let a = &f.arrays[a];
            format!("{}_in: [{}; {}]", a.name, a.elem.rust(), a.len)
        }))
        .chain(
            f.has_subgroup
                .then(|| "gd_sg: &gd::HostSubgroups, gd_li: u32".to_string()),
        )
        .collect();
    let ret = match (f.ret, f.ret_array) {
        (Some(t), _) => t.rust().to_string(),
        (None, Some((t, n))) => format!("[{}; {n}]", t.rust()),
        (None, None) => "()".to_string(),
    };
    // One that reaches a barrier or a subgroup operation is a future, awaited by its
    // caller's invocation.
    let asyncness = if f.has_barrier || f.has_subgroup {
        "async "
    } else {
        ""
    };
    let mut s = String::new();
    writeln!(
        s,
        "#[allow(unused, unreachable_code, non_snake_case, clippy::all)]\n{asyncness}fn {}({}) -> ::core::result::Result<{ret}, ::graphed::KernelFault> {{",
        f.id,
        params.join(", ")
    )
    .unwrap();
    for p in &f.params {
        if let ParamKind::Slice { .. } = p.kind {
            writeln!(s, "let {0}_len: u32 = {0}_p.len();", p.name).unwrap();
        }
    }
    for &a in &f.array_params {
        writeln!(
            s,
            "let mut {0}: [{1}; {2}] = {0}_in;",
            f.arrays[a].name,
            f.arrays[a].elem.rust(),
            f.arrays[a].len
        )
        .unwrap();
    }
    h.block_pub(&f.body);
    s.push_str(&h.out);
    if f.ret.is_none() && f.ret_array.is_none() {
        s.push_str("::core::result::Result::Ok(())\n");
    }
    s.push_str("}\n");
    s
}

/// Every helper of `k`, as items of the kernel's host function.
pub(super) fn helpers(k: &Kernel, fault: &str) -> String {
    k.helpers.iter().map(|f| helper_fn(k, f, fault)).collect()
}
