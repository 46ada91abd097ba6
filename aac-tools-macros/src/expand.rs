//! Writes the code for one checked tool: the handler shim, the schema functions and the
//! `inventory` registration, all inside one `const _: () = { … };`.
//!
//! Generated code names everything by absolute path (`::aac_tools::__private::…`,
//! `::core::…`) so that a user's own `Result` or `Tool` cannot shadow it.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned as _;

use crate::ast::ToolFn;
use crate::attr::Attr;
use crate::valid::{Level, Tool};

pub(crate) fn expand(attr: &Attr, func: &ToolFn<'_>, tool: &Tool) -> TokenStream {
    let item = func.item;
    let ident = &item.sig.ident;
    let private = quote!(::aac_tools::__private);

    let param_names: Vec<_> = (0..func.params.len())
        .map(|i| format_ident!("__aac_p{}", i))
        .collect();
    let param_consts: Vec<_> = (0..func.params.len())
        .map(|i| format_ident!("__AAC_P{}", i))
        .collect();
    let param_defs = func.params.iter().zip(&param_consts).map(|(param, konst)| {
        let ty = param.ty;
        quote_spanned! {ty.span()=>
            const #konst: #private::Param<#ty> = #private::param::<#ty>();
        }
    });
    let extracts = param_names.iter().zip(&param_consts).map(|(name, konst)| {
        quote! { let #name = (#konst.extract)(&mut __aac_call)?; }
    });
    let may_hold = match tool.level {
        Level::Read => Some(quote!(assert_read_tool_may_hold)),
        Level::Write => Some(quote!(assert_write_tool_may_hold)),
        Level::Delete => None,
    };
    let grants = func
        .params
        .iter()
        .zip(&param_consts)
        .filter_map(|(param, konst)| {
            let ty = param.ty;
            let check = may_hold.as_ref()?;
            Some(quote_spanned! {ty.span()=>
                const _: () = #private::#check::<{ #konst.rank }>();
            })
        });
    let schema_fns = param_consts.iter().map(|konst| quote!(#konst.input_schema));
    let is_args = param_consts.iter().map(|konst| quote!(#konst.is_arguments));

    // `ast.rs` reported a missing return type; the expansion is skipped on any error.
    let output = func.output.expect("checked in ast.rs");
    let into_result = quote_spanned! {output.span()=>
        <#output as #private::IntoToolResult>::into_tool_result
    };
    let output_schema = quote_spanned! {output.span()=>
        <#output as #private::IntoToolResult>::output_schema
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
    let raw_input_schema = match &attr.input_schema {
        Some(path) => {
            quote!(::core::option::Option::Some(#path as fn() -> #private::serde_json::Value))
        }
        None => quote!(::core::option::Option::None),
    };

    quote! {
        #item

        #[allow(non_camel_case_types, clippy::all)]
        const _: () = {

            #(#param_defs)*
            #(#grants)*
            const _: () = #private::assert_at_most_one_arguments_type(&[#(#is_args),*]);

            fn __aac_handler(mut __aac_call: #private::Call) -> #private::HandlerFuture {
                ::std::boxed::Box::pin(async move {
                    #(#extracts)*
                    #into_result(#ident(#(#param_names),*).await)
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
                    input_schema: __aac_input_schema,
                    raw_input_schema: #raw_input_schema,
                    output_schema: #output_schema,
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
