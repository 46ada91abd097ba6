//! Parsing of the `#[mcp_resource(...)]` and `#[mcp_prompt(...)]` argument lists.

use proc_macro2::{Span, TokenStream};
use syn::meta::ParseNestedMeta;
use syn::{LitStr, Path, Token};

use super::Kind;
use crate::errors::Errors;

/// A string value and the span of its literal.
pub(crate) struct Lit {
    pub(crate) value: String,
    pub(crate) span: Span,
}

/// The parsed attribute, before the checks of `valid.rs`.
pub(crate) struct ItemAttr {
    pub(crate) uri: Option<Lit>,
    pub(crate) scopes: Vec<Lit>,
    pub(crate) scope_written: bool,
    pub(crate) name: Option<Lit>,
    pub(crate) title: Option<Lit>,
    pub(crate) description: Option<Lit>,
    pub(crate) mime_type: Option<Lit>,
    pub(crate) complete: Option<Path>,
}

fn keys(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::Resource => &[
            "uri",
            "scope",
            "name",
            "title",
            "description",
            "mime_type",
            "complete",
        ],
        Kind::Prompt => &["scope", "name", "title", "description", "complete"],
    }
}

impl ItemAttr {
    pub(crate) fn parse(kind: Kind, args: TokenStream, errors: &mut Errors) -> ItemAttr {
        let mut attr = ItemAttr {
            uri: None,
            scopes: Vec::new(),
            scope_written: false,
            name: None,
            title: None,
            description: None,
            mime_type: None,
            complete: None,
        };
        let parser = syn::meta::parser(|meta| {
            if let Err(err) = attr.parse_one(kind, &meta) {
                errors.push(err);
            }
            Ok(())
        });
        if let Err(err) = syn::parse::Parser::parse2(parser, args) {
            errors.push(crate::attr::unreadable(kind.attribute(), &err));
            // What follows was not read: a key there is not missing.
            attr.scope_written = true;
        }
        attr
    }

    fn parse_one(&mut self, kind: Kind, meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
        let key = meta
            .path
            .get_ident()
            .map(ToString::to_string)
            .unwrap_or_default();
        if !keys(kind).contains(&key.as_str()) {
            skip_value(meta);
            let expected: Vec<String> = keys(kind).iter().map(|k| format!("`{k}`")).collect();
            let written = meta
                .path
                .segments
                .iter()
                .map(|s| s.ident.to_string())
                .collect::<Vec<_>>()
                .join("::");
            return Err(meta.error(format!(
                "unknown {} argument `{written}`; expected one of {}",
                kind.attribute(),
                expected.join(", ")
            )));
        }
        if key == "complete" {
            let path = value(kind, meta, &key, "the path of a completion `async fn`")?;
            return once(kind, meta, &key, &mut self.complete, path);
        }
        let lit: Lit = value(kind, meta, &key, "a string literal").map(|lit: LitStr| Lit {
            value: lit.value(),
            span: lit.span(),
        })?;
        match key.as_str() {
            "scope" => {
                self.scope_written = true;
                self.scopes.push(lit);
                Ok(())
            }
            "uri" => once(kind, meta, &key, &mut self.uri, lit),
            "name" => once(kind, meta, &key, &mut self.name, lit),
            "title" => once(kind, meta, &key, &mut self.title, lit),
            "description" => once(kind, meta, &key, &mut self.description, lit),
            _ => once(kind, meta, &key, &mut self.mime_type, lit),
        }
    }
}

fn once<T>(
    kind: Kind,
    meta: &ParseNestedMeta<'_>,
    key: &str,
    slot: &mut Option<T>,
    v: T,
) -> syn::Result<()> {
    if slot.is_some() {
        return Err(meta.error(format!("duplicate {} argument `{key}`", kind.attribute())));
    }
    *slot = Some(v);
    Ok(())
}

/// The value after `key =`, parsed as `T`; on failure, `expected` under the value.
fn value<T: syn::parse::Parse>(
    kind: Kind,
    meta: &ParseNestedMeta<'_>,
    key: &str,
    expected: &str,
) -> syn::Result<T> {
    if !meta.input.peek(Token![=]) {
        skip_value(meta);
        return Err(meta.error(format!(
            "{} argument `{key}` needs a value: `{key} = …`",
            kind.attribute()
        )));
    }
    let input = meta.value()?;
    let fork = input.fork();
    match fork.parse::<T>() {
        Ok(parsed) if fork.is_empty() || fork.peek(Token![,]) => {
            syn::parse::discouraged::Speculative::advance_to(input, &fork);
            Ok(parsed)
        }
        _ => {
            let value: syn::Expr = input.parse()?;
            Err(syn::Error::new_spanned(
                value,
                format!("{} argument `{key}` takes {expected}", kind.attribute()),
            ))
        }
    }
}

/// After a bad key, consume `= value` or `(...)` so parsing can go on.
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
