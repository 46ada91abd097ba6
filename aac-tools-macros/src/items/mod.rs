//! `#[mcp_resource]` and `#[mcp_prompt]`: the same four jobs as `#[mcp_tool]`
//! (`attr.rs` parses, `ast.rs` models the function, `valid.rs` checks, `expand.rs`
//! writes code), for the two kinds of read-only items a server exposes beside its tools.

mod ast;
mod attr;
mod expand;
mod valid;

use proc_macro2::TokenStream;
use syn::ItemFn;

use crate::errors::Errors;
use crate::expand::Failure;

/// Which attribute is being expanded.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Resource,
    Prompt,
}

impl Kind {
    /// `#[mcp_resource]` or `#[mcp_prompt]`, for messages.
    pub(crate) fn attribute(self) -> &'static str {
        match self {
            Kind::Resource => "`#[mcp_resource]`",
            Kind::Prompt => "`#[mcp_prompt]`",
        }
    }
}

/// Parse, check and expand one `#[mcp_resource]` or `#[mcp_prompt]` item.
pub(crate) fn expand(
    kind: Kind,
    args: TokenStream,
    input: TokenStream,
) -> Result<TokenStream, Failure> {
    let item: ItemFn = match syn::parse2(input.clone()) {
        Ok(item) => item,
        Err(err) => {
            return Err(Failure::new(
                syn::Error::new(
                    err.span(),
                    format!("{} applies to an `async fn` only", kind.attribute()),
                ),
                input,
            ));
        }
    };
    let mut errors = Errors::default();
    let attr = attr::ItemAttr::parse(kind, args, &mut errors);
    let func = ast::ItemFnModel::from_item(kind, &item, &mut errors);
    let checked = valid::check(kind, &attr, &func, &mut errors);
    match errors.finish() {
        Ok(()) => Ok(expand::expand(kind, &attr, &func, &checked)),
        Err(errors) => Err(Failure::new(
            errors,
            quote::quote!(#[allow(dead_code)] #item),
        )),
    }
}
