//! The annotated function of a resource or prompt, as far as the expansion needs it.

use syn::spanned::Spanned as _;
use syn::{FnArg, GenericArgument, ItemFn, PathArguments, ReturnType, Type};

use super::Kind;
use crate::errors::Errors;

/// The function: its parameters' types, the `T` and `E` of its `Result<T, E>`, its doc.
pub(crate) struct ItemFnModel<'a> {
    pub(crate) item: &'a ItemFn,
    pub(crate) params: Vec<&'a Type>,
    /// `(T, E)`; `None` after an error was reported.
    pub(crate) output: Option<(&'a Type, &'a Type)>,
    pub(crate) doc_lines: Vec<String>,
}

impl<'a> ItemFnModel<'a> {
    pub(crate) fn from_item(kind: Kind, item: &'a ItemFn, errors: &mut Errors) -> ItemFnModel<'a> {
        let attribute = kind.attribute();
        let sig = &item.sig;
        if sig.asyncness.is_none() {
            errors.push(syn::Error::new(
                sig.fn_token.span,
                format!("{attribute} functions must be `async`; write `async fn`"),
            ));
        }
        if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
            errors.push(syn::Error::new_spanned(
                &sig.generics,
                format!("{attribute} functions cannot be generic"),
            ));
        }
        let mut params = Vec::new();
        for input in &sig.inputs {
            match input {
                FnArg::Receiver(receiver) => errors.push(syn::Error::new_spanned(
                    receiver,
                    format!("{attribute} functions cannot take `self`"),
                )),
                FnArg::Typed(pat_type) => match &*pat_type.ty {
                    Type::Reference(reference) => errors.push(syn::Error::new(
                        reference.and_token.span,
                        format!("{attribute} parameters are owned values; remove the `&`"),
                    )),
                    ty => params.push(ty),
                },
            }
        }
        let what = match kind {
            Kind::Resource => {
                "`Result<ResourceContents, ToolError>` (or `Vec<ResourceContents>`, or `String`)"
            }
            Kind::Prompt => {
                "`Result<Vec<PromptMessage>, ToolError>` (or one `PromptMessage`, or `String`)"
            }
        };
        let output = match &sig.output {
            ReturnType::Type(_, ty) => result_parts(ty),
            ReturnType::Default => None,
        };
        if output.is_none() {
            let span = match &sig.output {
                ReturnType::Type(_, ty) => ty.span(),
                ReturnType::Default => sig.paren_token.span.close(),
            };
            errors.push(syn::Error::new(
                span,
                format!("{attribute} functions must return {what}"),
            ));
        }
        let doc_lines = item
            .attrs
            .iter()
            .filter(|attr| attr.path().is_ident("doc"))
            .filter_map(|attr| match &attr.meta {
                syn::Meta::NameValue(nv) => match &nv.value {
                    syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(s),
                        ..
                    }) => Some(s.value()),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        ItemFnModel {
            item,
            params,
            output,
            doc_lines,
        }
    }
}

/// `T` and `E` of a written-out `Result<T, E>`.
fn result_parts(ty: &Type) -> Option<(&Type, &Type)> {
    if let Type::Path(path) = ty
        && path.qself.is_none()
        && let Some(last) = path.path.segments.last()
        && last.ident == "Result"
        && let PathArguments::AngleBracketed(args) = &last.arguments
        && args.args.len() == 2
        && let (Some(GenericArgument::Type(ok)), Some(GenericArgument::Type(err))) =
            (args.args.first(), args.args.last())
    {
        return Some((ok, err));
    }
    None
}
