//! The compile-time contract of `#[mcp_tool]` and the access levels: every mistake is a
//! `fail/` case with its `.stderr`, every supported form a `pass/` case.
//!
//! Regenerate the `.stderr` files with `TRYBUILD=overwrite cargo test -p ui-tests` and
//! read the diff; never edit them by hand.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/pass/*.rs");
    t.compile_fail("tests/fail/*.rs");
}
