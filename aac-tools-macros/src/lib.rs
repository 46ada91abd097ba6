//! The `#[mcp_tool]` attribute of [aac-tools](https://docs.rs/aac-tools).
//!
//! This crate is an implementation detail: depend on `aac-tools` and write
//! `use aac_tools::mcp_tool;`. Its version is pinned exactly by `aac-tools`, and the
//! code it generates only names `::aac_tools::__private`, which carries no semver promise.
//!
//! Set `AAC_TOOLS_MACROS_DEBUG=1` while building to print every expansion to stderr.

mod ast;
mod attr;
mod errors;
mod expand;
mod valid;

use proc_macro::TokenStream;

/// Turns an `async fn` into an MCP tool whose annotations the server enforces.
///
/// See the `aac-tools` crate documentation for the full reference.
#[proc_macro_attribute]
pub fn mcp_tool(args: TokenStream, input: TokenStream) -> TokenStream {
    let input = proc_macro2::TokenStream::from(input);
    let output = match syn::parse2::<syn::ItemFn>(input.clone()) {
        Ok(item) => mcp_tool_impl(args.into(), &item),
        Err(err) => {
            // Not a function: say so, and give the item back untouched.
            let err = syn::Error::new(err.span(), "`#[mcp_tool]` applies to an `async fn` only");
            let mut tokens = err.into_compile_error();
            tokens.extend(input);
            tokens
        }
    };
    if std::env::var_os("AAC_TOOLS_MACROS_DEBUG").is_some() {
        eprintln!("{output}");
    }
    output.into()
}

fn mcp_tool_impl(args: proc_macro2::TokenStream, item: &syn::ItemFn) -> proc_macro2::TokenStream {
    let mut errors = errors::Errors::default();
    let attr = attr::Attr::parse(args, &mut errors);
    let func = ast::ToolFn::from_item(item, &mut errors);
    let tool = valid::check(&attr, &func, &mut errors);
    match errors.finish() {
        Ok(()) => expand::expand(&attr, &func, &tool),
        Err(err) => {
            // Emit the user's function as written so one mistake does not cascade.
            let mut tokens = err.into_compile_error();
            tokens.extend(quote::quote!(#[allow(dead_code)] #item));
            tokens
        }
    }
}
