//! Compile-fail cases of the `#[kernel]` and `#[graphed]` macros: every rejected construct
//! has a case in `tests/ui/` with its reviewed `.stderr`. Regenerate with
//! `TRYBUILD=overwrite cargo test --test ui` and read the diff before committing.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
    t.pass("tests/ui/pass/*.rs");
}
