//! Parsing of the `#[mcp_tool(...)]` argument list.
//!
//! Every problem found here is pushed into [`Errors`] so that all the mistakes of an
//! attribute are reported in one pass, each with its caret on the user's token.

use proc_macro2::{Span, TokenStream};
use syn::meta::ParseNestedMeta;
use syn::{LitStr, Path, Token};

use crate::errors::Errors;

/// The keys `#[mcp_tool]` accepts, in the order the error message lists them.
pub(crate) const KEYS: &[&str] = &[
    "read_only",
    "destructive",
    "idempotent",
    "open_world",
    "scope",
    "name",
    "title",
    "description",
    "input_schema",
    "audit_fields",
    "rate",
    "confirm",
    "confirm_message",
];

/// A value together with the span of the token that gave it.
pub(crate) struct Spanned<T> {
    pub(crate) value: T,
    pub(crate) span: Span,
}

/// The parsed attribute, before cross-cutting checks (see `valid.rs`).
#[derive(Default)]
pub(crate) struct Attr {
    pub(crate) read_only: Option<Span>,
    pub(crate) destructive: Option<Span>,
    pub(crate) idempotent: Option<Span>,
    pub(crate) open_world: Option<Span>,
    pub(crate) scopes: Vec<Spanned<String>>,
    pub(crate) name: Option<Spanned<String>>,
    pub(crate) title: Option<Spanned<String>>,
    pub(crate) description: Option<Spanned<String>>,
    pub(crate) input_schema: Option<Path>,
    pub(crate) audit_fields: Option<Vec<Spanned<String>>>,
    pub(crate) rate: Option<Spanned<String>>,
    pub(crate) confirm: Option<Spanned<String>>,
    pub(crate) confirm_message: Option<Spanned<String>>,
    /// Whether a `scope` key was written at all (even with a malformed value), so that a
    /// bad scope is not also reported as a missing one.
    pub(crate) scope_written: bool,
    /// The attribute's arguments, for errors about the attribute as a whole.
    pub(crate) tokens: TokenStream,
}

impl Attr {
    pub(crate) fn parse(args: TokenStream, errors: &mut Errors) -> Attr {
        let mut attr = Attr {
            tokens: args.clone(),
            ..Attr::default()
        };
        let parser = syn::meta::parser(|meta| {
            attr.parse_one(&meta, errors);
            Ok(())
        });
        if let Err(err) = syn::parse::Parser::parse2(parser, args) {
            errors.push(unreadable("`#[mcp_tool]`", &err));
            // What follows was not read: a key there is not missing.
            attr.scope_written = true;
        }
        attr
    }

    fn parse_one(&mut self, meta: &ParseNestedMeta<'_>, errors: &mut Errors) {
        let Some(ident) = meta.path.get_ident() else {
            errors.push(meta.error(unknown_key(&path_text(&meta.path))));
            skip_value(meta);
            return;
        };
        let key = ident.to_string();
        let span = ident.span();
        let result = match key.as_str() {
            "read_only" => flag(meta, &key, &mut self.read_only, span),
            "destructive" => flag(meta, &key, &mut self.destructive, span),
            "idempotent" => flag(meta, &key, &mut self.idempotent, span),
            "open_world" => flag(meta, &key, &mut self.open_world, span),
            "scope" => {
                self.scope_written = true;
                string(meta, &key).map(|s| self.scopes.push(s))
            }
            "name" => string(meta, &key).and_then(|s| once(meta, &key, &mut self.name, s)),
            "title" => string(meta, &key).and_then(|s| once(meta, &key, &mut self.title, s)),
            "description" => {
                string(meta, &key).and_then(|s| once(meta, &key, &mut self.description, s))
            }
            "input_schema" => {
                path(meta, &key).and_then(|p| once(meta, &key, &mut self.input_schema, p))
            }
            "audit_fields" => {
                string_list(meta, &key).and_then(|l| once(meta, &key, &mut self.audit_fields, l))
            }
            "rate" => string(meta, &key).and_then(|s| once(meta, &key, &mut self.rate, s)),
            "confirm" => string(meta, &key).and_then(|s| once(meta, &key, &mut self.confirm, s)),
            "confirm_message" => {
                string(meta, &key).and_then(|s| once(meta, &key, &mut self.confirm_message, s))
            }
            _ => {
                skip_value(meta);
                Err(meta.error(unknown_key(&key)))
            }
        };
        if let Err(err) = result {
            errors.push(err);
        }
    }
}

/// The error of an argument list `syn` could stop reading (`read_only scope = …`, a
/// comma left out), in our words, with its caret where reading stopped.
pub(crate) fn unreadable(attribute: &str, err: &syn::Error) -> syn::Error {
    syn::Error::new(
        err.span(),
        format!(
            "{attribute} cannot read its arguments past here ({err}): write each as `key` \
             or `key = value`, separated by commas"
        ),
    )
}

fn path_text(path: &Path) -> String {
    let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
    segments.join("::")
}

fn unknown_key(key: &str) -> String {
    let expected: Vec<String> = KEYS.iter().map(|k| format!("`{k}`")).collect();
    format!(
        "unknown `#[mcp_tool]` argument `{key}`; expected one of {}",
        expected.join(", ")
    )
}

/// After an unknown key, consume `= value` or `(...)` so parsing can go on.
fn skip_value(meta: &ParseNestedMeta<'_>) {
    if meta.input.peek(Token![=]) {
        if let Ok(value) = meta.value() {
            let _ = value.parse::<syn::Expr>();
        }
    } else if meta.input.peek(syn::token::Paren) {
        let _ = meta.parse_nested_meta(|inner| {
            skip_value(&inner);
            Ok(())
        });
    }
}

fn duplicate(meta: &ParseNestedMeta<'_>, key: &str) -> syn::Error {
    meta.error(format!("duplicate `#[mcp_tool]` argument `{key}`"))
}

fn flag(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    slot: &mut Option<Span>,
    span: Span,
) -> syn::Result<()> {
    if meta.input.peek(Token![=]) || meta.input.peek(syn::token::Paren) {
        skip_value(meta);
        return Err(meta.error(format!(
            "`#[mcp_tool]` argument `{key}` is a flag and takes no value; write `{key}` alone"
        )));
    }
    if slot.is_some() {
        return Err(duplicate(meta, key));
    }
    *slot = Some(span);
    Ok(())
}

fn once<T>(meta: &ParseNestedMeta<'_>, key: &str, slot: &mut Option<T>, v: T) -> syn::Result<()> {
    if slot.is_some() {
        return Err(duplicate(meta, key));
    }
    *slot = Some(v);
    Ok(())
}

fn value<'a>(meta: &'a ParseNestedMeta<'_>, key: &str) -> syn::Result<syn::parse::ParseStream<'a>> {
    if !meta.input.peek(Token![=]) {
        skip_value(meta);
        return Err(meta.error(format!(
            "`#[mcp_tool]` argument `{key}` needs a value: `{key} = …`"
        )));
    }
    meta.value()
}

/// Parse the value after `key =` with `parse`; on failure, report `expected` under the
/// value and skip it, so that the next key is still read.
fn parse_value<T>(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    expected: &str,
    parse: impl FnOnce(syn::parse::ParseStream<'_>) -> syn::Result<T>,
) -> syn::Result<T> {
    let input = value(meta, key)?;
    let fork = input.fork();
    match parse(&fork) {
        // A value followed by the next key with no comma between them: the value is
        // fine, and the argument list's own reading says the comma is missing.
        Ok(parsed) if fork.is_empty() || fork.peek(Token![,]) || fork.peek(syn::Ident) => {
            syn::parse::discouraged::Speculative::advance_to(input, &fork);
            Ok(parsed)
        }
        _ => {
            let value: syn::Expr = input.parse()?;
            Err(syn::Error::new_spanned(
                value,
                format!("`#[mcp_tool]` argument `{key}` takes {expected}"),
            ))
        }
    }
}

fn string(meta: &ParseNestedMeta<'_>, key: &str) -> syn::Result<Spanned<String>> {
    let lit: LitStr = parse_value(
        meta,
        key,
        &format!("a string literal: `{key} = \"…\"`"),
        |input| input.parse(),
    )?;
    Ok(Spanned {
        value: lit.value(),
        span: lit.span(),
    })
}

fn path(meta: &ParseNestedMeta<'_>, key: &str) -> syn::Result<Path> {
    parse_value(
        meta,
        key,
        &format!("the path of a `fn() -> serde_json::Value`: `{key} = my_schema`"),
        |input| input.parse(),
    )
}

fn string_list(meta: &ParseNestedMeta<'_>, key: &str) -> syn::Result<Vec<Spanned<String>>> {
    let list = parse_value(
        meta,
        key,
        &format!("a list of string literals: `{key} = [\"field\", …]`"),
        |input| {
            let content;
            syn::bracketed!(content in input);
            content.parse_terminated(<LitStr as syn::parse::Parse>::parse, Token![,])
        },
    )?;
    Ok(list
        .into_iter()
        .map(|lit| Spanned {
            value: lit.value(),
            span: lit.span(),
        })
        .collect())
}
