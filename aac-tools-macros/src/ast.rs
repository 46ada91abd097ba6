//! A typed model of the annotated function that keeps the original syn nodes for spans.

use proc_macro2::Span;
use syn::spanned::Spanned as _;
use syn::{FnArg, GenericArgument, ItemFn, PathArguments, ReturnType, Type};

use crate::errors::Errors;

/// One parameter of the tool function: an extractor or the arguments type.
pub(crate) struct Param<'a> {
    pub(crate) ty: &'a Type,
}

/// The return type of the tool function.
pub(crate) enum Output<'a> {
    /// `Result<T, E>` written out: the output `T` and the error `E` are checked each on
    /// its own span, so that a mistake in one is reported under it.
    Result { ok: &'a Type, err: &'a Type },
    /// Any other type (an alias such as `MyResult<T>`, or a mistake such as `String`):
    /// checked as a whole.
    Other(&'a Type),
}

/// The annotated `async fn`, as far as the expansion needs it.
pub(crate) struct ToolFn<'a> {
    pub(crate) item: &'a ItemFn,
    pub(crate) params: Vec<Param<'a>>,
    /// The type after `->`; `None` when the function returns `()`.
    pub(crate) output: Option<Output<'a>>,
    /// The doc comment, one string per `///` line.
    pub(crate) doc_lines: Vec<String>,
}

impl<'a> ToolFn<'a> {
    pub(crate) fn from_item(item: &'a ItemFn, errors: &mut Errors) -> ToolFn<'a> {
        let sig = &item.sig;
        if sig.asyncness.is_none() {
            errors.push(syn::Error::new(
                sig.fn_token.span,
                "`#[mcp_tool]` functions must be `async`; write `async fn`",
            ));
        }
        if let Some(constness) = &sig.constness {
            errors.push(syn::Error::new(
                constness.span,
                "`#[mcp_tool]` functions cannot be `const`",
            ));
        }
        if let syn::Safety::Unsafe(unsafety) = &sig.safety {
            errors.push(syn::Error::new(
                unsafety.span,
                "`#[mcp_tool]` functions cannot be `unsafe`",
            ));
        }
        if let Some(abi) = &sig.abi {
            errors.push(syn::Error::new(
                abi.extern_token.span,
                "`#[mcp_tool]` functions cannot have an `extern` ABI",
            ));
        }
        if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
            errors.push(syn::Error::new_spanned(
                &sig.generics,
                "`#[mcp_tool]` functions cannot be generic: a tool has one concrete schema",
            ));
        }
        if let Some(variadic) = &sig.variadic {
            errors.push(syn::Error::new(
                variadic.span(),
                "`#[mcp_tool]` functions cannot be variadic",
            ));
        }

        let mut params = Vec::new();
        for input in &sig.inputs {
            match input {
                FnArg::Receiver(receiver) => errors.push(syn::Error::new_spanned(
                    receiver,
                    "`#[mcp_tool]` functions cannot take `self`; tools are free functions \
                     that receive shared state through `State<T>`",
                )),
                FnArg::Typed(pat_type) => match &*pat_type.ty {
                    Type::Reference(reference) => errors.push(syn::Error::new(
                        reference.and_token.span,
                        "`#[mcp_tool]` parameters are owned values; remove the `&`",
                    )),
                    Type::ImplTrait(impl_trait) => errors.push(syn::Error::new(
                        impl_trait.impl_token.span,
                        "`#[mcp_tool]` functions cannot be generic: a tool has one concrete \
                         schema, so name a concrete type instead of `impl …`",
                    )),
                    ty => params.push(Param { ty }),
                },
            }
        }

        let output = match &sig.output {
            ReturnType::Default => {
                errors.push(syn::Error::new(
                    sig.paren_token.span.close(),
                    "`#[mcp_tool]` functions must return `Result<T, ToolError>`, where `T` \
                     is the tool's output",
                ));
                None
            }
            ReturnType::Type(_, ty) => Some(Output::of(ty)),
        };

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

        ToolFn {
            item,
            params,
            output,
            doc_lines,
        }
    }

    /// Whether the signature is one a free tool function could have (no `self`, no
    /// generics), so that its types can be checked even when the attribute has mistakes.
    pub(crate) fn is_free_and_concrete(&self) -> bool {
        let sig = &self.item.sig;
        sig.generics.params.is_empty()
            && sig.generics.where_clause.is_none()
            && sig.variadic.is_none()
            && sig.inputs.iter().all(|input| match input {
                FnArg::Receiver(_) => false,
                FnArg::Typed(pat_type) => {
                    !matches!(&*pat_type.ty, Type::Reference(_) | Type::ImplTrait(_))
                }
            })
    }

    /// The span of the function's name, for errors about the tool as a whole.
    pub(crate) fn name_span(&self) -> Span {
        self.item.sig.ident.span()
    }
}

impl<'a> Output<'a> {
    fn of(ty: &'a Type) -> Output<'a> {
        if let Type::Path(path) = ty
            && path.qself.is_none()
            && let Some(last) = path.path.segments.last()
            && last.ident == "Result"
            && let PathArguments::AngleBracketed(args) = &last.arguments
            && args.args.len() == 2
            && let (Some(GenericArgument::Type(ok)), Some(GenericArgument::Type(err))) =
                (args.args.first(), args.args.last())
        {
            return Output::Result { ok, err };
        }
        Output::Other(ty)
    }
}
