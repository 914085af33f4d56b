//! Renders tokens the way a user writes them, for error messages (`&mut [f32]`, not
//! `& mut [f32]`).

use quote::ToTokens;

pub fn shown(node: &impl ToTokens) -> String {
    let mut s = node.to_token_stream().to_string();
    for (from, to) in [
        (" < ", "<"),
        ("< ", "<"),
        (" <", "<"),
        (" >", ">"),
        ("& ", "&"),
        (" ,", ","),
        (" :: ", "::"),
        (":: ", "::"),
        (" . ", "."),
        (" (", "("),
        ("( ", "("),
        (" )", ")"),
        (" [", "["),
        ("[ ", "["),
        (" ]", "]"),
        (" ;", ";"),
    ] {
        s = s.replace(from, to);
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn shown_reads_like_source() {
        let t: syn::Type = syn::parse_quote!(&mut Vec<f32>);
        assert_eq!(super::shown(&t), "&mut Vec<f32>");
        let t: syn::Type = syn::parse_quote!(&[bool]);
        assert_eq!(super::shown(&t), "&[bool]");
        let e: syn::Expr = syn::parse_quote!(std::f32::consts::PI);
        assert_eq!(super::shown(&e), "std::f32::consts::PI");
    }
}
