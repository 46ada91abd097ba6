//! `#[queries]`: the name of a query trait is its contract.
//!
//! - `Update…` traits: every method gets `where Self: MayUpdate`;
//! - `Delete…` traits: every method gets `where Self: MayDelete`;
//! - any other name is a read trait: its methods are callable at every level, and a
//!   `MayUpdate`/`MayDelete` bound written on one of them contradicts the name, so it is
//!   an error (rename the trait instead).
//!
//! The bounds are added whether or not the author wrote them, so forgetting one is
//! impossible; a macro among an `Update…` or `Delete…` trait's items (whose methods the
//! attribute cannot see), a method of one without `self` (whose `Self` its caller names),
//! an attribute macro on one of its methods (which expands after this one, and could take
//! the bound away) and a constant of one (which nothing gates) are errors. The bounds carry the span of the trait's name,
//! which the compiler's note then points at ("required by this bound in
//! `DeleteNotes::purge`").

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote};
use syn::ext::IdentExt;
use syn::{ItemTrait, TraitItem, TypeParamBound, WherePredicate};

use crate::errors::Errors;
use crate::expand::{Failure, private_at};

/// What a query trait's name says it does.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Read,
    Update,
    Delete,
}

impl Kind {
    /// In any case: `DELETE_NOTES` and `deleteNotes` delete as `DeleteNotes` does.
    fn of(name: &str) -> Kind {
        let name = name.to_ascii_lowercase();
        if name.starts_with("update") {
            Kind::Update
        } else if name.starts_with("delete") {
            Kind::Delete
        } else {
            Kind::Read
        }
    }

    /// The bound every method of the trait gets, if any.
    fn bound(self) -> Option<&'static str> {
        match self {
            Kind::Read => None,
            Kind::Update => Some("MayUpdate"),
            Kind::Delete => Some("MayDelete"),
        }
    }
}

/// Parse, check and expand one `#[queries]` item.
pub(crate) fn queries(args: TokenStream, input: TokenStream) -> Result<TokenStream, Failure> {
    let mut errors = Errors::default();
    if !args.is_empty() {
        errors.push(syn::Error::new_spanned(
            &args,
            "`#[queries]` takes no arguments: the trait's name says what its methods do \
             (`Update…`, `Delete…`, anything else reads)",
        ));
    }
    let mut item: ItemTrait = match syn::parse2::<syn::Item>(input.clone()) {
        Ok(syn::Item::Trait(item)) => item,
        other => {
            let message = "`#[queries]` applies to a query trait: `trait ReadNotes`, \
                           `trait UpdateNotes` or `trait DeleteNotes`";
            errors.push(match &other {
                Ok(item) => syn::Error::new(keyword_span(item), message),
                Err(err) => syn::Error::new(err.span(), message),
            });
            let errors = errors.finish().expect_err("an error was pushed");
            return Err(Failure::new(errors, input));
        }
    };
    // A raw identifier (`r#UpdateNotes`) names the same trait: its kind is read without
    // the `r#`, or the prefix check would miss it.
    let name = item.ident.unraw().to_string();
    let kind = Kind::of(&name);
    // An attribute macro below this one, on the trait, expands after it and could take
    // every bound away again.
    if kind != Kind::Read {
        for attr in item.attrs.iter().filter(|attr| !is_inert(attr)) {
            errors.push(syn::Error::new_spanned(
                attr,
                format!(
                    "`#[queries]` gates each method of `{name}` by the trait's name, and an \
                     attribute macro below it expands after it and could take the bounds \
                     away: put other attributes above `#[queries]`, or use the compiler's own"
                ),
            ));
        }
    }
    for trait_item in &item.items {
        match trait_item {
            TraitItem::Fn(method) => {
                check_written_bounds(&name, kind, method, &mut errors);
                // An attribute macro on a method expands after this one, and can take the
                // bound away again: only the compiler's own attributes, which cannot.
                if kind != Kind::Read {
                    for attr in &method.attrs {
                        if !is_inert(attr) {
                            errors.push(syn::Error::new_spanned(
                                attr,
                                format!(
                                    "`#[queries]` gates each method of `{name}` by the \
                                     trait's name, and an attribute macro on one could \
                                     take the bound away: only the compiler's own \
                                     attributes (`doc`, `allow`, `must_use`, `inline`…) \
                                     are allowed on them"
                                ),
                            ));
                        }
                    }
                }
                // The bound is on `Self`, which only the transaction a method is called on
                // fixes: a caller names `Self` of an associated function
                // (`<Tx<Write> as UpdateNotes>::add(read_tx)`) and passes any transaction.
                if kind != Kind::Read && method.sig.receiver().is_none() {
                    let method_name = &method.sig.ident;
                    errors.push(syn::Error::new_spanned(
                        &method.sig,
                        format!(
                            "`{name}::{method_name}` takes no `self`: `#[queries]` gates each \
                             method of `{name}` on the transaction it is called on, and a \
                             caller could name any `Self` for a function without one; take \
                             the transaction as `&self`"
                        ),
                    ));
                }
            }
            // Nothing gates a constant: a function pointer in one would be callable at
            // every level.
            TraitItem::Const(constant) if kind != Kind::Read => {
                let const_name = &constant.ident;
                errors.push(syn::Error::new_spanned(
                    constant,
                    format!(
                        "`{name}::{const_name}`: `#[queries]` gates the methods of `{name}` by \
                         the trait's name, and cannot gate a constant (a function in it would \
                         be callable at every level); write a method that takes `&self`"
                    ),
                ));
            }
            // The bound goes on the methods written out: one a macro declares would get
            // none, and be callable at every level.
            TraitItem::Macro(mac) if kind != Kind::Read => errors.push(syn::Error::new_spanned(
                mac,
                format!(
                    "`#[queries]` gates each method of `{name}` by the trait's name, and cannot \
                     see into a macro: write the methods out in the trait"
                ),
            )),
            _ => {}
        }
    }
    if let Err(errors) = errors.finish() {
        // Emitted again without the attributes refused, which would only add errors of
        // their own.
        if kind != Kind::Read {
            item.attrs.retain(is_inert);
            for trait_item in &mut item.items {
                if let TraitItem::Fn(method) = trait_item {
                    method.attrs.retain(is_inert);
                }
            }
        }
        return Err(Failure::new(errors, item.into_token_stream()));
    }

    if let Some(bound) = kind.bound() {
        // Spanned on the trait's name, where the rule comes from: the compiler's note
        // ("required by this bound in `DeleteNotes::purge`") points there.
        let span = item.ident.span();
        let private = private_at(span);
        let bound = syn::Ident::new(bound, span);
        for trait_item in &mut item.items {
            if let TraitItem::Fn(method) = trait_item {
                let predicate: WherePredicate =
                    syn::parse_quote_spanned! {span=> Self: #private::#bound };
                method
                    .sig
                    .generics
                    .make_where_clause()
                    .predicates
                    .push(predicate);
            }
        }
    }
    Ok(quote!(#item))
}

/// An attribute of the compiler's own that changes nothing of a method's signature.
/// (`cfg_attr` may expand to any attribute, a macro among them.)
fn is_inert(attr: &syn::Attribute) -> bool {
    const INERT: &[&str] = &[
        "doc",
        "allow",
        "warn",
        "deny",
        "forbid",
        "expect",
        "must_use",
        "inline",
        "cold",
        "track_caller",
        "deprecated",
        "cfg",
    ];
    // One name only: a path (`#[clippy::…]`, `#[rustfmt::skip]`, `#[diagnostic::…]`) may
    // name a module of the crate's own, and a macro in it. A built-in name taken by a macro
    // of the crate's (`use my::strip as inline;`) is ambiguous, which the compiler refuses.
    let path = attr.path();
    path.segments.len() == 1 && INERT.iter().any(|name| path.is_ident(name))
}

/// The span of the keyword that says what an item is (`struct`, `fn`, `impl`…), for the
/// error on an item that is not a trait.
fn keyword_span(item: &syn::Item) -> Span {
    use syn::spanned::Spanned as _;
    match item {
        syn::Item::Struct(s) => s.struct_token.span,
        syn::Item::Enum(e) => e.enum_token.span,
        syn::Item::Fn(f) => f.sig.fn_token.span,
        syn::Item::Impl(i) => i.impl_token.span,
        syn::Item::Mod(m) => m.mod_token.span,
        syn::Item::Type(t) => t.type_token.span,
        other => other.span(),
    }
}

/// A `MayUpdate`/`MayDelete` bound written by hand must agree with the trait's name.
fn check_written_bounds(name: &str, kind: Kind, method: &syn::TraitItemFn, errors: &mut Errors) {
    let Some(where_clause) = &method.sig.generics.where_clause else {
        return;
    };
    for predicate in &where_clause.predicates {
        let WherePredicate::Type(predicate) = predicate else {
            continue;
        };
        for bound in &predicate.bounds {
            let TypeParamBound::Trait(bound) = bound else {
                continue;
            };
            let Some(last) = bound.path.segments.last() else {
                continue;
            };
            let written = if last.ident == "MayUpdate" {
                Kind::Update
            } else if last.ident == "MayDelete" {
                Kind::Delete
            } else {
                continue;
            };
            let method_name = &method.sig.ident;
            let message = match (kind, written) {
                (Kind::Read, Kind::Update) => format!(
                    "`{name}` is a read query trait by its name, so `{method_name}` cannot \
                     require `MayUpdate`; move it to a trait named `Update…`"
                ),
                (Kind::Read, _) => format!(
                    "`{name}` is a read query trait by its name, so `{method_name}` cannot \
                     require `MayDelete`; move it to a trait named `Delete…`"
                ),
                (Kind::Update, Kind::Delete) => format!(
                    "`{name}` is an update query trait by its name, so `{method_name}` cannot \
                     require `MayDelete`; move it to a trait named `Delete…`"
                ),
                // The bound the name gives anyway (or a weaker one beside it): harmless.
                _ => continue,
            };
            errors.push(syn::Error::new_spanned(&bound.path, message));
        }
    }
}
