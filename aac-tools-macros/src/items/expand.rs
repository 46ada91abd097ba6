//! Writes the code of one checked resource or prompt: the handler shim (parameters
//! extracted at the `Read` level, each checked against `ReadOnlyItemMayHold` on its own
//! span), the optional completion shim and the `inventory` registration.

use proc_macro2::{Ident, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned as _;

use super::Kind;
use super::ast::ItemFnModel;
use super::attr::ItemAttr;
use super::valid::Checked;
use crate::expand::private;

pub(crate) fn expand(
    kind: Kind,
    attr: &ItemAttr,
    func: &ItemFnModel<'_>,
    checked: &Checked,
) -> TokenStream {
    let item = func.item;
    let ident = &item.sig.ident;
    let private = private();
    let consts: Vec<Ident> = (0..func.params.len())
        .map(|i| format_ident!("__AAC_P{}", i))
        .collect();
    let names: Vec<Ident> = (0..func.params.len())
        .map(|i| format_ident!("__aac_p{}", i))
        .collect();
    let param_defs = func.params.iter().zip(&consts).map(|(ty, konst)| {
        quote_spanned! {ty.span()=>
            const #konst: #private::Param<#ty> = #private::Param {
                extract: <#ty as #private::ToolParam>::from_call,
                input_schema: <#ty as #private::ToolParam>::input_schema,
                is_arguments: <#ty as #private::ToolParam>::IS_ARGUMENTS,
                rank: <#ty as #private::ToolParam>::NEEDS.rank(),
                state_need: <#ty as #private::ToolParam>::STATE_NEED,
            };
            const _: () = <<#private::Rank<{ #konst.rank }> as #private::RankLevel>::Level
                as #private::ReadOnlyItemMayHold>::CHECK;
            const _: () = {
                use #private::IsStorage as _;
                <<#private::Storage<{ <#ty>::__AAC_STORAGE }> as #private::StorageKind>::Kind
                    as #private::ToolState>::CHECK
            };
        }
    });
    let extracts = names.iter().zip(&consts).map(|(name, konst)| {
        quote! { let #name = (#konst.extract)(&mut __aac_call)?; }
    });
    let (ok, err) = func.output.expect("checked in ast.rs");
    let into_error = quote_spanned! {err.span()=>
        <#err as #private::IntoToolError>::into_tool_error
    };
    let description = &checked.description;
    let name = &checked.name;
    let scopes = &checked.scopes;
    let rust_name = ident.to_string();
    let opt = |lit: &Option<super::attr::Lit>| match lit {
        Some(lit) => {
            let value = &lit.value;
            quote!(::core::option::Option::Some(#value))
        }
        None => quote!(::core::option::Option::None),
    };
    let title = opt(&attr.title);
    let (complete_fn, complete, complete_needs) = match &attr.complete {
        Some(path) => (
            quote_spanned! {path.span()=>
                fn __aac_complete(__aac_call: #private::Call) -> #private::HandlerFuture {
                    #private::CompleteFn::complete(#path, __aac_call)
                }
                fn __aac_complete_needs() -> &'static [::core::option::Option<#private::StateNeed>] {
                    #private::complete_state_needs(#path)
                }
            },
            quote!(::core::option::Option::Some(__aac_complete)),
            quote!(::core::option::Option::Some(__aac_complete_needs)),
        ),
        None => (
            TokenStream::new(),
            quote!(::core::option::Option::None),
            quote!(::core::option::Option::None),
        ),
    };
    let call = quote!(#ident(#(#names),*).await);
    // The schema of the arguments type (a template's variables, a prompt's arguments),
    // which the registry checks at start-up against what MCP can send.
    let schema_fns: Vec<TokenStream> = consts
        .iter()
        .map(|konst| quote!(#konst.input_schema))
        .collect();
    let input_schema = quote! {
        {
            fn __aac_input_schema() -> ::core::option::Option<#private::serde_json::Value> {
                #private::single_input_schema(&[#(#schema_fns),*])
            }
            __aac_input_schema
        }
    };
    let (prelude, output, registration) = match kind {
        Kind::Resource => {
            let mime_type = opt(&attr.mime_type);
            let uri = &attr.uri.as_ref().expect("checked in valid.rs").value;
            let into_output = quote_spanned! {ok.span()=>
                <#ok as #private::IntoResourceContents>::into_contents
            };
            (
                quote!(let __aac_uri = ::std::string::ToString::to_string(__aac_call.resource_uri());),
                quote!(#private::resource_output(#into_output(__aac_value), &__aac_uri, #mime_type)),
                quote! {
                    #private::ResourceDef::__from_parts(#private::ResourceParts {
                        uri: #uri,
                        name: #name,
                        title: #title,
                        description: #description,
                        mime_type: #mime_type,
                        scopes: &[#(#scopes),*],
                        input_schema: #input_schema,
                        state_needs: &[#(#consts.state_need),*],
                        handler: __aac_handler,
                        complete: #complete,
                        complete_state_needs: #complete_needs,
                        rust_name: #rust_name,
                        module_path: ::core::module_path!(),
                        file: ::core::file!(),
                        line: ::core::line!(),
                    })
                },
            )
        }
        Kind::Prompt => {
            let into_output = quote_spanned! {ok.span()=>
                <#ok as #private::IntoPromptMessages>::into_messages
            };
            (
                TokenStream::new(),
                quote!(#private::prompt_output(#into_output(__aac_value), #description)),
                quote! {
                    #private::PromptDef::__from_parts(#private::PromptParts {
                        name: #name,
                        title: #title,
                        description: #description,
                        scopes: &[#(#scopes),*],
                        input_schema: #input_schema,
                        state_needs: &[#(#consts.state_need),*],
                        handler: __aac_handler,
                        complete: #complete,
                        complete_state_needs: #complete_needs,
                        rust_name: #rust_name,
                        module_path: ::core::module_path!(),
                        file: ::core::file!(),
                        line: ::core::line!(),
                    })
                },
            )
        }
    };
    quote! {
        #item

        #[allow(non_camel_case_types, clippy::all)]
        const _: () = {
            #(#param_defs)*
            #complete_fn

            fn __aac_handler(mut __aac_call: #private::Call) -> #private::HandlerFuture {
                #prelude
                ::std::boxed::Box::pin(async move {
                    let (#(#names,)*) = {
                        let __aac_scope = #private::ExtractScope::enter(#private::AccessLevel::Read);
                        #(#extracts)*
                        (#(#names,)*)
                    };
                    match #call {
                        ::core::result::Result::Ok(__aac_value) => ::core::result::Result::Ok(#output),
                        ::core::result::Result::Err(__aac_error) => {
                            ::core::result::Result::Err(#into_error(__aac_error))
                        }
                    }
                })
            }

            #private::inventory::submit! { #registration }
        };
    }
}
