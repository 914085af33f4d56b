//! Per-invocation arrays: `[v; N]` and `[a, b, c]` declarations, their element places,
//! constant-index bounds checks and `len()`; arrays passed to and returned from `#[device]`
//! helpers by value.

use super::*;

/// Elements of one per-invocation array. An array is private to one invocation: registers
/// when every index is known at compile time (unrolled loops), else the invocation's local
/// (scratch) memory, which on GPUs is slow and multiplied by every invocation in flight; a
/// thousand elements is already far past any register file (255 32-bit registers per CUDA
/// thread).
pub(super) const MAX_ARRAY_LEN: u32 = 1024;

/// Bytes of per-invocation arrays per kernel (each declaration in the source counted once):
/// 16 KiB per invocation is 16 MiB of scratch for a workgroup of 1024 on a GPU, and bounds
/// the host's per-invocation futures the same way.
pub(super) const MAX_ARRAY_BYTES: u64 = 16 * 1024;

const USAGE: &str = "a per-invocation array is declared `let mut acc = [0.0f32; 16];` (a constant size) or `let w = [a, b, c];`";

/// A per-invocation array parameter of a helper, taken by value (`v: [f32; 4]`, or
/// `mut v: [f32; 4]` to write its copy).
#[derive(Clone, Debug)]
pub struct ArrayParam {
    /// Its position among all the arguments.
    pub pos: usize,
    pub name: String,
    pub elem: Ty,
    pub len: u32,
    pub mutable: bool,
}

/// `[f32; 4]`, for messages.
pub(super) fn array_shown(elem: Ty, len: u32) -> String {
    format!("[{}; {len}]", elem.rust())
}

impl Checker<'_> {
    /// The per-invocation arrays a helper takes by value: its body indexes its own copies by
    /// name (writable where the parameter is `mut`). They are the first of its arrays, in
    /// order; returns their indices.
    pub fn set_array_params(&mut self, arrays: &[ArrayParam]) -> Vec<usize> {
        let mut out = Vec::new();
        for a in arrays {
            let mangled = self.mangle(&a.name);
            let ix = self.arrays.len();
            self.arrays.push(LocalArray {
                name: mangled.clone(),
                source: a.name.trim_start_matches("r#").to_string(),
                elem: a.elem,
                len: a.len,
            });
            self.array_bytes += a.len as u64 * 4;
            self.scopes[0].insert(
                a.name.clone(),
                Local {
                    mangled,
                    ty: a.elem,
                    mutable: a.mutable,
                    poisoned: false,
                    array: Some(ix),
                },
            );
            out.push(ix);
        }
        self.array_params = out.clone();
        out
    }

    /// The array a helper returning `[T; N]` returns: one of its per-invocation arrays, by
    /// name, of that element type and length (a failed one still ends the path).
    pub(super) fn array_value(&mut self, e: &syn::Expr, (elem, len): (Ty, u32)) -> Stmt {
        let name = self.kernel_name.clone();
        let want = array_shown(elem, len);
        match self.array_named(e) {
            Some((a, got)) if got.elem == elem && got.len == len => return Stmt::ReturnArray(a),
            Some((_, got)) => self.error(e, format!("`{name}` returns `{want}`, found `{}`", array_shown(got.elem, got.len))),
            None if self.is_poisoned(e) => {}
            None => self.error(e, format!("`{name}` returns `{want}`: return one of its per-invocation arrays by name, e.g. `let mut r = [0.0f32; {len}]; ...; r`")),
        }
        Stmt::Return
    }

    /// The per-invocation array `e` names (a plain name, maybe in parentheses), if any.
    fn array_named(&self, e: &syn::Expr) -> Option<(usize, LocalArray)> {
        match e {
            syn::Expr::Paren(p) => self.array_named(&p.expr),
            syn::Expr::Path(p) => {
                let id = p.path.get_ident()?;
                let l = self.lookup(&id.to_string())?;
                if l.poisoned {
                    return None;
                }
                let a = l.array?;
                Some((a, self.arrays[a].clone()))
            }
            _ => None,
        }
    }

    /// An array argument: a per-invocation array of the caller, by name, of the parameter's
    /// element type and length (copied into the callee).
    pub(super) fn array_arg(&mut self, a: &syn::Expr, p: &ArrayParam, callee: &str) -> Res<usize> {
        if self.is_poisoned(a) {
            return Err(());
        }
        let want = array_shown(p.elem, p.len);
        match self.array_named(a) {
            Some((ix, got)) if got.elem == p.elem && got.len == p.len => Ok(ix),
            Some((_, got)) => {
                self.error(
                    a,
                    format!(
                        "argument `{}` of `{callee}` is `{want}`, found `{}`, an array of {} `{}`",
                        p.name,
                        array_shown(got.elem, got.len),
                        got.len,
                        got.elem.rust()
                    ),
                );
                Err(())
            }
            None => {
                self.error(a, format!("argument `{}` of `{callee}` is an array `{want}`, passed by value: pass a per-invocation array (`let a = [0.0f32; {}];`) by its name", p.name, p.len));
                Err(())
            }
        }
    }

    /// `let [mut] name[: [T; N]] = [v; N];` or `= [a, b, c];`: declares the array and returns
    /// `true`; `false` when the `let` declares no array.
    pub(super) fn array_local(
        &mut self,
        local: &syn::Local,
        name: &str,
        mutable: bool,
        ann: Option<&syn::Type>,
        out: &mut Vec<Stmt>,
    ) -> bool {
        let init = local.init.as_ref().map(|i| &*i.expr);
        let ann = match ann {
            Some(syn::Type::Array(a)) => Some(a),
            _ => None,
        };
        let from_call = init.is_some_and(|e| self.array_call(e).is_some());
        if ann.is_none()
            && !from_call
            && !matches!(init, Some(syn::Expr::Array(_) | syn::Expr::Repeat(_)))
        {
            return false;
        }
        if self
            .array_decl(local, name, mutable, ann, init, out)
            .is_err()
        {
            self.poison(name);
        }
        true
    }

    fn array_decl(
        &mut self,
        local: &syn::Local,
        name: &str,
        mutable: bool,
        ann: Option<&syn::TypeArray>,
        init: Option<&syn::Expr>,
        out: &mut Vec<Stmt>,
    ) -> Res<()> {
        let (mut ann_elem, mut want_len) = (None, None);
        if let Some(a) = ann {
            match scalar_type(&a.elem) {
                Some(t) if t != Ty::UVec3 => ann_elem = Some(t),
                _ => {
                    self.error(
                        &a.elem,
                        "an array holds `f32`, `f16`, `bf16`, `i32`, `u32` or `bool`",
                    );
                    return Err(());
                }
            }
            want_len = Some(self.array_len(&a.len)?);
        }
        let Some(init) = init else {
            self.error(
                local,
                format!("an array needs a value: `let mut {name} = [0.0f32; 16];`"),
            );
            return Err(());
        };
        let (init, elem, len) = match init {
            syn::Expr::Repeat(r) => {
                let v = self.expr(&r.expr, ann_elem)?;
                let len = self.array_len(&r.len)?;
                let ty = v.ty;
                (ArrayInit::Splat(v), ty, len)
            }
            syn::Expr::Array(a) => {
                let mut vals: Vec<Expr> = Vec::new();
                for e in &a.elems {
                    let want = vals.first().map(|v| v.ty).or(ann_elem);
                    let v = self.expr(e, want)?;
                    if let Some(first) = vals.first() {
                        if v.ty != first.ty {
                            self.error(e, mismatch(first.ty, v.ty));
                            return Err(());
                        }
                    }
                    vals.push(v);
                }
                let Some(ty) = vals.first().map(|v| v.ty) else {
                    self.error(a, "an array needs at least one element");
                    return Err(());
                };
                let len = vals.len() as u32;
                if len > MAX_ARRAY_LEN {
                    self.error(a, format!("an array has at most {MAX_ARRAY_LEN} elements"));
                    return Err(());
                }
                (ArrayInit::List(vals), ty, len)
            }
            syn::Expr::Call(c) if self.array_call(init).is_some() => {
                let (i, (elem, len)) = self.array_call(init).expect("an array call");
                self.array_call_ok = true;
                let v = self.helper_call(i, c, true);
                self.array_call_ok = false;
                (ArrayInit::Call(v?), elem, len)
            }
            other => {
                self.error(other, USAGE);
                return Err(());
            }
        };
        if let Some(t) = ann_elem {
            if t != elem_of(&init) {
                self.error(init_node(local), mismatch(t, elem_of(&init)));
                return Err(());
            }
        }
        if elem == Ty::UVec3 {
            self.error(init_node(local), "an array holds `f32`, `i32`, `u32` or `bool`, not a `UVec3`: copy the components into a `u32` array");
            return Err(());
        }
        if let Some(w) = want_len {
            if w != len {
                self.error(
                    init_node(local),
                    format!("the type says {w} elements, the value has {len}"),
                );
                return Err(());
            }
        }
        let bytes = self.array_bytes + len as u64 * 4;
        if bytes > MAX_ARRAY_BYTES {
            self.error(
                init_node(local),
                format!("a kernel has at most {MAX_ARRAY_BYTES} bytes (16 KiB) of per-invocation arrays (each invocation's private memory); with this array it declares {bytes}: use smaller arrays or workgroup memory"),
            );
            return Err(());
        }
        self.array_bytes = bytes;
        let mangled = self.mangle(name);
        let array = self.arrays.len();
        self.arrays.push(LocalArray {
            name: mangled.clone(),
            source: name.trim_start_matches("r#").to_string(),
            elem,
            len,
        });
        out.push(Stmt::Array { array, init });
        if let Some(scope) = self.scopes.last_mut() {
            scope.insert(
                name.to_string(),
                Local {
                    mangled,
                    ty: elem,
                    mutable,
                    poisoned: false,
                    array: Some(array),
                },
            );
        }
        Ok(())
    }

    /// The length of an array: a positive constant `u32` of at most `MAX_ARRAY_LEN`.
    fn array_len(&mut self, e: &syn::Expr) -> Res<u32> {
        // Evaluated silently: whatever is wrong with it, the one error is "not a constant".
        let saved = self.errors.len();
        let v = self
            .expr(e, Some(Ty::U32))
            .ok()
            .and_then(|v| const_value(&v, &self.known).or_else(|| fold(&v)));
        self.errors.truncate(saved);
        match v {
            Some(k @ (ExprKind::LitU32(_) | ExprKind::LitI32(0..))) => {
                let n = match k {
                    ExprKind::LitU32(n) => n,
                    ExprKind::LitI32(n) => n as u32,
                    _ => 0,
                };
                if n == 0 {
                    self.error(e, "an array needs at least one element");
                    Err(())
                } else if n > MAX_ARRAY_LEN {
                    self.error(e, format!("an array has at most {MAX_ARRAY_LEN} elements (it lives in each invocation's private memory); use workgroup memory or a slice parameter for more"));
                    Err(())
                } else {
                    Ok(n)
                }
            }
            _ => {
                let shown = crate::tokens::shown(e);
                let why = if self.param_index(&shown).is_some() {
                    format!(" `{shown}` is a parameter, known only at launch: size the array for the largest case and use part of it")
                } else {
                    String::new()
                };
                self.error(e, format!("the size of an array must be a positive constant `u32` (a literal, a kernel `const`, or arithmetic on them).{why}"));
                Err(())
            }
        }
    }

    /// The helper `e` calls and the array it returns, if `e` calls one that returns an array.
    fn array_call(&self, e: &syn::Expr) -> Option<(usize, (Ty, u32))> {
        let syn::Expr::Call(c) = e else {
            return None;
        };
        let i = self.helper_index(&c.func).filter(|&i| i != DEFERRED)?;
        Some((i, self.sigs[i].ret_array?))
    }

    /// The array a path names, if it names one.
    pub(super) fn array_of(&self, e: &syn::Expr) -> Option<usize> {
        let syn::Expr::Path(p) = e else {
            return None;
        };
        let l = self.lookup(&p.path.get_ident()?.to_string())?;
        if l.poisoned {
            return None;
        }
        l.array
    }

    /// An index into array `a`: folded to a literal when known at compile time, which must
    /// then be in bounds.
    pub(super) fn array_index(&mut self, a: usize, mut index: Expr, node: &syn::Expr) -> Res<Expr> {
        if let Some(k) = const_value(&index, &self.known) {
            if let ExprKind::LitU32(n) = k {
                let LocalArray {
                    len, ref source, ..
                } = self.arrays[a];
                if n >= len {
                    let msg = format!("index {n} is out of bounds: `{source}` has {len} elements (indices 0 to {})", len - 1);
                    self.error(node, msg);
                    return Err(());
                }
            }
            index.kind = k;
        }
        Ok(index)
    }
}

fn elem_of(init: &ArrayInit) -> Ty {
    match init {
        ArrayInit::Splat(v) => v.ty,
        ArrayInit::List(v) => v[0].ty,
        ArrayInit::Call(v) => v.ty,
    }
}

fn init_node(local: &syn::Local) -> &dyn quote::ToTokens {
    match &local.init {
        Some(i) => &*i.expr,
        None => &local.pat,
    }
}
