//! The `#[mcp_tool]` and `#[queries]` attributes of [aac-tools](https://docs.rs/aac-tools).
//!
//! This crate is an implementation detail: depend on `aac-tools` and write
//! `use aac_tools::mcp_tool;`. Its version is pinned exactly by `aac-tools`, and the
//! code it generates only names `::aac_tools::__private<patch>`, which carries no semver promise.
//!
//! Set `AAC_TOOLS_MACROS_DEBUG=1` while building to print every expansion to stderr.

mod ast;
mod attr;
mod errors;
mod expand;
mod items;
mod queries;
mod valid;

use proc_macro::TokenStream;

/// *Defined in `aac-tools-macros`, an implementation detail: the reference of
/// `#[mcp_tool]` is at `aac_tools::mcp_tool`, where `aac-tools` re-exports it.*
#[proc_macro_attribute]
pub fn mcp_tool(args: TokenStream, input: TokenStream) -> TokenStream {
    let output =
        expand::mcp_tool(args.into(), input.into()).unwrap_or_else(expand::Failure::into_tokens);
    if std::env::var_os("AAC_TOOLS_MACROS_DEBUG").is_some() {
        eprintln!("{output}");
    }
    output.into()
}

/// *Defined in `aac-tools-macros`, an implementation detail: the reference of
/// `#[queries]` is at `aac_tools::queries`, where `aac-tools` re-exports it.*
#[proc_macro_attribute]
pub fn queries(args: TokenStream, input: TokenStream) -> TokenStream {
    let output =
        queries::queries(args.into(), input.into()).unwrap_or_else(expand::Failure::into_tokens);
    if std::env::var_os("AAC_TOOLS_MACROS_DEBUG").is_some() {
        eprintln!("{output}");
    }
    output.into()
}

/// *Defined in `aac-tools-macros`, an implementation detail: the reference of
/// `#[mcp_resource]` is at `aac_tools::mcp_resource`, where `aac-tools` re-exports it.*
#[proc_macro_attribute]
pub fn mcp_resource(args: TokenStream, input: TokenStream) -> TokenStream {
    items_output(items::Kind::Resource, args, input)
}

/// *Defined in `aac-tools-macros`, an implementation detail: the reference of
/// `#[mcp_prompt]` is at `aac_tools::mcp_prompt`, where `aac-tools` re-exports it.*
#[proc_macro_attribute]
pub fn mcp_prompt(args: TokenStream, input: TokenStream) -> TokenStream {
    items_output(items::Kind::Prompt, args, input)
}

fn items_output(kind: items::Kind, args: TokenStream, input: TokenStream) -> TokenStream {
    let output =
        items::expand(kind, args.into(), input.into()).unwrap_or_else(expand::Failure::into_tokens);
    if std::env::var_os("AAC_TOOLS_MACROS_DEBUG").is_some() {
        eprintln!("{output}");
    }
    output.into()
}
