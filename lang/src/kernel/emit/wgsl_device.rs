//! `#[device]` helpers in WGSL. A WGSL function cannot take a pointer into storage memory
//! as a parameter (without an extension), so a helper is emitted once per distinct binding
//! of its slice parameters: its body indexes the kernel's global binding directly, and a
//! slice parameter becomes two `u32` parameters, the view's offset and length. Workgroup
//! memory is module-scope in WGSL too, so a workgroup-array parameter is no parameter at
//! all: the specialisation indexes the kernel's array that its call passed. WGSL has the
//! subgroup size and lane only as builtins of the entry point, so a helper that reaches a
//! subgroup operation takes them as two last parameters, `gd_sg_size` and `gd_sg_id`.

use std::fmt::Write;

use super::wgsl::{ty, Module, Wgsl};
use crate::kernel::ir::*;

fn has_slices(f: &DeviceFn) -> bool {
    !f.shared.is_empty()
        || f.params
            .iter()
            .any(|p| matches!(p.kind, ParamKind::Slice { .. }))
}

/// The name of helper `h`'s specialisation for `globals`, requesting it if new.
fn specialisation(m: &Module, f: &DeviceFn, h: usize, globals: Vec<String>) -> String {
    let mut specs = m.specs.borrow_mut();
    let i = match specs.iter().position(|(hh, g)| *hh == h && *g == globals) {
        Some(i) => i,
        None => {
            specs.push((h, globals));
            specs.len() - 1
        }
    };
    name(f, i)
}

fn name(f: &DeviceFn, spec: usize) -> String {
    if has_slices(f) {
        format!("{}_s{spec}", f.id)
    } else {
        f.id.clone()
    }
}

impl Wgsl<'_> {
    /// A call of helper `h`: a slice argument passes its offset and length, a workgroup
    /// array nothing (the specialisation names it).
    pub(super) fn call(&self, h: usize, args: &[CallArg]) -> String {
        let f = &self.k.helpers[h];
        // The key: each slice's binding, then each workgroup array's kernel index (arrays
        // passed by value are values, as scalars, and come last: no part of the key).
        let globals = args
            .iter()
            .filter_map(|a| match a {
                CallArg::Slice(i) => Some(self.globals[*i].clone()),
                CallArg::Value(_) => Some(String::new()),
                CallArg::Shared(s) => Some(self.shared_ix[*s].to_string()),
                CallArg::Array(_) => None,
            })
            .collect();
        let name = specialisation(self.module, f, h, globals);
        let a: Vec<String> = args
            .iter()
            .filter_map(|a| match a {
                CallArg::Value(e) => Some(self.expr(e)),
                CallArg::Slice(i) => {
                    let n = &self.params[*i].name;
                    Some(format!("{n}_off, {n}_len"))
                }
                CallArg::Shared(_) => None,
                CallArg::Array(a) => Some(self.arrays[*a].name.clone()),
            })
            .chain(f.has_subgroup.then(|| "gd_sg_size, gd_sg_id".to_string()))
            .collect();
        format!("{name}({})", a.join(", "))
    }
}

/// Appends every specialisation the kernel's body requested, and those they request.
pub(super) fn emit_specialisations(k: &Kernel, module: &Module, out: &mut String) {
    let mut j = 0;
    loop {
        let Some((h, globals)) = module.specs.borrow().get(j).cloned() else {
            break;
        };
        let f = &k.helpers[h];
        let n = f.params.len();
        let shared_ix = globals[n..]
            .iter()
            .map(|s| s.parse().expect("a workgroup array's kernel index"))
            .collect();
        let mut w = Wgsl::for_helper(k, (h, f), globals[..n].to_vec(), shared_ix, module);
        w.block_pub(&f.body);
        let params: Vec<String> = f
            .params
            .iter()
            .map(|p| match p.kind {
                ParamKind::Scalar(t) => format!("{}_v: {}", p.name, ty(t)),
                ParamKind::Slice { .. } => format!("{0}_off: u32, {0}_len: u32", p.name),
            })
            .chain(f.array_params.iter().map(|&a| {
                let a = &f.arrays[a];
                format!("{}_in: array<{}, {}>", a.name, ty(a.elem), a.len)
            }))
            .chain(
                f.has_subgroup
                    .then(|| "gd_sg_size: u32, gd_sg_id: u32".to_string()),
            )
            .collect();
        let ret = match (f.ret, f.ret_array) {
            (Some(t), _) => format!(" -> {}", ty(t)),
            (None, Some((t, n))) => format!(" -> array<{}, {n}>", ty(t)),
            (None, None) => String::new(),
        };
        // A parameter is immutable in WGSL: the body works on a copy of each array.
        let copies: String = f
            .array_params
            .iter()
            .map(|&a| {
                let a = &f.arrays[a];
                format!(
                    "    var {0}: array<{1}, {2}> = {0}_in;\n",
                    a.name,
                    ty(a.elem),
                    a.len
                )
            })
            .collect();
        writeln!(
            out,
            "\n// `#[device]` {}\nfn {}({}){ret} {{\n{copies}{}}}",
            f.name,
            name(f, j),
            params.join(", "),
            w.out
        )
        .unwrap();
        j += 1;
    }
}
