//! Writes the code for one checked tool: the handler shim, the schema functions and the
//! `inventory` registration, all inside one `const _: () = { … };`.
//!
//! Generated code names everything by absolute path (`::aac_tools::__private::…`,
//! `::core::…`) so that a user's own `Result` or `Tool` cannot shadow it.
//!
//! Every requirement on a user's type is written as a qualified path
//! (`<Ty as Trait>::item`) spanned on that type, never as a bound of a helper function:
//! rustc then reports the trait's `#[diagnostic::on_unimplemented]` text with the caret
//! on the user's type, and no "required by a bound in `__private::…`" note.

use proc_macro2::{Ident, Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::ItemFn;
use syn::spanned::Spanned as _;

use crate::ast::{Output, ToolFn};
use crate::attr::Attr;
use crate::errors::Errors;
use crate::valid::{self, Level, Tool};

/// What the attribute expands to when the item has mistakes: every error, then the
/// user's item as written (so that one mistake does not cascade into twenty).
pub(crate) struct Failure {
    errors: syn::Error,
    keep: TokenStream,
}

impl Failure {
    /// Every error, and the item to keep.
    pub(crate) fn new(errors: syn::Error, keep: TokenStream) -> Failure {
        Failure { errors, keep }
    }

    /// The one place where errors become tokens.
    pub(crate) fn into_tokens(self) -> TokenStream {
        let mut tokens = self.errors.into_compile_error();
        tokens.extend(self.keep);
        tokens
    }
}

/// Parse, check and expand one `#[mcp_tool]` item.
pub(crate) fn mcp_tool(args: TokenStream, input: TokenStream) -> Result<TokenStream, Failure> {
    let item: ItemFn = match syn::parse2(input.clone()) {
        Ok(item) => item,
        Err(err) => {
            return Err(Failure {
                errors: syn::Error::new(err.span(), "`#[mcp_tool]` applies to an `async fn` only"),
                keep: input,
            });
        }
    };
    let mut errors = Errors::default();
    let attr = Attr::parse(args, &mut errors);
    let func = ToolFn::from_item(&item, &mut errors);
    let tool = valid::check(&attr, &func, &mut errors);
    match errors.finish() {
        Ok(()) => Ok(expand(&attr, &func, &tool)),
        Err(errors) => {
            // The types' own mistakes (an argument type that is not `Deserialize`, an
            // output that is not `Serialize`…) are reported in the same pass, as long as
            // the signature is one a tool could have.
            let checks = if func.is_free_and_concrete() {
                let params = ParamConsts::new(&func);
                let defs = &params.defs;
                let output = output_checks(&func);
                quote! {
                    #[allow(dead_code, non_camel_case_types, clippy::all)]
                    const _: () = {
                        #defs
                        #output
                    };
                }
            } else {
                TokenStream::new()
            };
            // `const async fn` is rustc's own error too: the item is kept without its
            // `const`, which ours already reports.
            let mut kept = item.clone();
            kept.sig.constness = None;
            Err(Failure {
                errors,
                keep: quote!(#[allow(dead_code)] #kept #checks),
            })
        }
    }
}

/// `::aac_tools::__private<patch>`: the hidden module is named after the version, as
/// thiserror's is, so an `aac-tools` and an `aac-tools-macros` of different versions
/// fail to compile together instead of generating code for the wrong internals.
pub(crate) fn private() -> TokenStream {
    let module = format_ident!("__private{}", env!("CARGO_PKG_VERSION_PATCH"));
    quote!(::aac_tools::#module)
}

/// [`private`] with every token at `span`, for generated code that must read as the
/// user's (a caret, a note pointing at the user's token).
pub(crate) fn private_at(span: Span) -> TokenStream {
    let module = format_ident!("__private{}", env!("CARGO_PKG_VERSION_PATCH"), span = span);
    quote_spanned!(span=> ::aac_tools::#module)
}

/// One `const __AAC_Pn: Param<Ty>` per parameter, each spanned on its type.
struct ParamConsts {
    names: Vec<Ident>,
    defs: TokenStream,
}

impl ParamConsts {
    fn new(func: &ToolFn<'_>) -> ParamConsts {
        let private = private();
        let names: Vec<Ident> = (0..func.params.len())
            .map(|i| format_ident!("__AAC_P{}", i))
            .collect();
        let defs = func
            .params
            .iter()
            .zip(&names)
            .map(|(param, konst)| {
                let ty = param.ty;
                quote_spanned! {ty.span()=>
                    const #konst: #private::Param<#ty> = #private::Param {
                        extract: <#ty as #private::ToolParam>::from_call,
                        input_schema: <#ty as #private::ToolParam>::input_schema,
                        is_arguments: <#ty as #private::ToolParam>::IS_ARGUMENTS,
                        rank: <#ty as #private::ToolParam>::NEEDS.rank(),
                        state_need: <#ty as #private::ToolParam>::STATE_NEED,
                    };
                    // `State<Database>` (or another framework storage handle) would reach
                    // the database past the tool's level.
                    const _: () = {
                        use #private::IsStorage as _;
                        <<#private::Storage<{ <#ty>::__AAC_STORAGE }> as #private::StorageKind>::Kind
                            as #private::ToolState>::CHECK
                    };
                }
            })
            .collect();
        ParamConsts { names, defs }
    }
}

/// The checks that the output and error types can become a tool result.
fn output_checks(func: &ToolFn<'_>) -> TokenStream {
    let private = private();
    match &func.output {
        Some(Output::Result { ok, err }) => {
            let ok_check = quote_spanned! {ok.span()=>
                const _: fn() -> ::core::option::Option<#private::serde_json::Value> =
                    <#ok as #private::IntoToolOutput>::output_schema;
            };
            let err_check = quote_spanned! {err.span()=>
                const _: fn(#err) -> #private::ToolError =
                    <#err as #private::IntoToolError>::into_tool_error;
            };
            quote!(#ok_check #err_check)
        }
        Some(Output::Other(ty)) => quote_spanned! {ty.span()=>
            const _: fn() -> ::core::option::Option<#private::serde_json::Value> =
                <#ty as #private::IntoToolResult>::output_schema;
        },
        None => TokenStream::new(),
    }
}

pub(crate) fn expand(attr: &Attr, func: &ToolFn<'_>, tool: &Tool) -> TokenStream {
    let item = func.item;
    let ident = &item.sig.ident;
    let private = private();

    let params = ParamConsts::new(func);
    let param_defs = &params.defs;
    let param_consts = &params.names;
    let param_names: Vec<Ident> = (0..func.params.len())
        .map(|i| format_ident!("__aac_p{}", i))
        .collect();
    let extracts = param_names.iter().zip(param_consts).map(|(name, konst)| {
        quote! { let #name = (#konst.extract)(&mut __aac_call)?; }
    });

    let level = match tool.level {
        Level::Read => quote!(#private::AccessLevel::Read),
        Level::Write => quote!(#private::AccessLevel::Write),
        Level::Delete => quote!(#private::AccessLevel::Delete),
    };

    // A data handle above the tool's level does not compile; the error names the rule.
    let may_hold = match tool.level {
        Level::Read => Some(quote!(ReadToolMayHold)),
        Level::Write => Some(quote!(WriteToolMayHold)),
        Level::Delete => None,
    };
    let grants = func
        .params
        .iter()
        .zip(param_consts)
        .filter_map(|(param, konst)| {
            let rule = may_hold.as_ref()?;
            Some(quote_spanned! {param.ty.span()=>
                const _: () = <<#private::Rank<{ #konst.rank }> as #private::RankLevel>::Level
                    as #private::#rule>::CHECK;
            })
        });

    // At most one parameter is the arguments: each one after the first says so if it is
    // a second one, with the caret on its type.
    let one_arguments_type = func
        .params
        .iter()
        .zip(param_consts)
        .enumerate()
        .skip(1)
        .map(|(i, (param, konst))| {
            let earlier = &param_consts[..i];
            quote_spanned! {param.ty.span()=>
                const _: () = if #konst.is_arguments && (false #(|| #earlier.is_arguments)*) {
                    ::core::panic!(
                        "a `#[mcp_tool]` function takes at most one arguments type; put every \
                         argument in one struct deriving `Deserialize` and `JsonSchema`"
                    )
                };
            }
        });
    let schema_fns = param_consts.iter().map(|konst| quote!(#konst.input_schema));

    let call = quote!(#ident(#(#param_names),*).await);
    let (output_schema, into_result) = match &func.output {
        Some(Output::Result { ok, err }) => {
            let into_output = quote_spanned! {ok.span()=>
                <#ok as #private::IntoToolOutput>::into_tool_output
            };
            let into_error = quote_spanned! {err.span()=>
                <#err as #private::IntoToolError>::into_tool_error
            };
            (
                quote_spanned! {ok.span()=> <#ok as #private::IntoToolOutput>::output_schema },
                quote! {
                    match #call {
                        ::core::result::Result::Ok(__aac_value) => #into_output(__aac_value),
                        ::core::result::Result::Err(__aac_error) => {
                            ::core::result::Result::Err(#into_error(__aac_error))
                        }
                    }
                },
            )
        }
        Some(Output::Other(ty)) => (
            quote_spanned! {ty.span()=> <#ty as #private::IntoToolResult>::output_schema },
            quote_spanned! {ty.span()=>
                <#ty as #private::IntoToolResult>::into_tool_result(#call)
            },
        ),
        // `ast.rs` reported a missing return type, and the expansion is skipped on any error.
        None => unreachable!("checked in ast.rs"),
    };

    let name = &tool.name;
    let rust_name = ident.to_string();
    let title = match &tool.title {
        Some(title) => quote!(::core::option::Option::Some(#title)),
        None => quote!(::core::option::Option::None),
    };
    let description = &tool.description;
    let read_only = tool.read_only;
    let destructive = tool.destructive;
    let idempotent = tool.idempotent;
    let open_world = tool.open_world;
    let scopes = &tool.scopes;
    let audit_fields = &tool.audit_fields;
    let rate = match tool.rate {
        Some((count, seconds)) => quote!(::core::option::Option::Some((#count, #seconds))),
        None => quote!(::core::option::Option::None),
    };
    let confirm = match tool.confirm {
        Some(variant) => {
            let variant = quote::format_ident!("{}", variant);
            quote!(::core::option::Option::Some(#private::ConfirmPolicy::#variant))
        }
        None => quote!(::core::option::Option::None),
    };
    let confirm_message = match &tool.confirm_message {
        Some(message) => quote!(::core::option::Option::Some(#message)),
        None => quote!(::core::option::Option::None),
    };
    let (raw_schema_def, raw_input_schema) = match &attr.input_schema {
        Some(path) => (
            quote_spanned! {path.span()=>
                const __AAC_INPUT_SCHEMA: fn() -> #private::serde_json::Value = #path;
            },
            quote!(::core::option::Option::Some(__AAC_INPUT_SCHEMA)),
        ),
        None => (TokenStream::new(), quote!(::core::option::Option::None)),
    };

    quote! {
        #item

        #[allow(non_camel_case_types, clippy::all)]
        const _: () = {
            #param_defs
            #(#grants)*
            #(#one_arguments_type)*
            #raw_schema_def

            fn __aac_handler(mut __aac_call: #private::Call) -> #private::HandlerFuture {
                ::std::boxed::Box::pin(async move {
                    // Parameters are extracted knowing the tool's level, so that an
                    // extractor of the user's own cannot build a handle above it.
                    let (#(#param_names,)*) = {
                        let __aac_scope = #private::ExtractScope::enter(#level);
                        #(#extracts)*
                        (#(#param_names,)*)
                    };
                    #into_result
                })
            }

            fn __aac_input_schema() -> ::core::option::Option<#private::serde_json::Value> {
                #private::single_input_schema(&[#(#schema_fns),*])
            }

            #private::inventory::submit! {
                #private::ToolDef::__from_parts(#private::ToolParts {
                    name: #name,
                    title: #title,
                    description: #description,
                    read_only: #read_only,
                    destructive: #destructive,
                    idempotent: #idempotent,
                    open_world: #open_world,
                    scopes: &[#(#scopes),*],
                    audit_fields: &[#(#audit_fields),*],
                    rate: #rate,
                    confirm: #confirm,
                    confirm_message: #confirm_message,
                    input_schema: __aac_input_schema,
                    raw_input_schema: #raw_input_schema,
                    output_schema: #output_schema,
                    state_needs: &[#(#param_consts.state_need),*],
                    handler: __aac_handler,
                    rust_name: #rust_name,
                    module_path: ::core::module_path!(),
                    file: ::core::file!(),
                    line: ::core::line!(),
                })
            }
        };
    }
}
