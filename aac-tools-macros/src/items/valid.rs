//! The checks of a resource or prompt attribute: a scope (deny by default), valid scope
//! syntax, a URI for a resource, a name and a description.

use super::Kind;
use super::ast::ItemFnModel;
use super::attr::ItemAttr;
use crate::errors::Errors;
use crate::valid::{doc_text, is_valid_scope, is_valid_tool_name};

/// What the expansion writes, checked.
pub(crate) struct Checked {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) scopes: Vec<String>,
}

pub(crate) fn check(
    kind: Kind,
    attr: &ItemAttr,
    func: &ItemFnModel<'_>,
    errors: &mut Errors,
) -> Checked {
    let attribute = kind.attribute();
    let name_span = func.item.sig.ident.span();
    if !attr.scope_written {
        errors.push(syn::Error::new(
            name_span,
            format!(
                "{attribute} needs a `scope = \"resource:action\"`: every resource and prompt is \
                 denied by default until a scope says who may read it"
            ),
        ));
    }
    for scope in &attr.scopes {
        if !is_valid_scope(&scope.value) {
            errors.push(syn::Error::new(
                scope.span,
                format!(
                    "invalid scope `{}`; expected `resource:action`, each of `a-z`, `0-9`, `_`, `-`",
                    scope.value
                ),
            ));
        }
    }
    if kind == Kind::Resource {
        match &attr.uri {
            None => errors.push(syn::Error::new(
                name_span,
                "`#[mcp_resource]` needs a `uri = \"scheme://…\"` (a fixed URI, or a template \
                 with `{variables}`)",
            )),
            Some(uri) => {
                if let Some(why) = uri_problem(&uri.value) {
                    errors.push(syn::Error::new(uri.span, why));
                }
            }
        }
    }
    let name = match &attr.name {
        Some(name) => {
            if !is_valid_tool_name(&name.value) {
                errors.push(syn::Error::new(
                    name.span,
                    format!(
                        "invalid {attribute} name `{}`; expected 1 to 128 of `A-Z a-z 0-9 _ - .`",
                        name.value
                    ),
                ));
            }
            name.value.clone()
        }
        None => {
            let ident = &func.item.sig.ident;
            let name = ident.to_string().trim_start_matches("r#").to_owned();
            if !is_valid_tool_name(&name) {
                errors.push(syn::Error::new(
                    ident.span(),
                    format!(
                        "the function name `{name}` is not a valid {attribute} name; expected \
                         1 to 128 of `A-Z a-z 0-9 _ - .`: give it one with `name = \"…\"`"
                    ),
                ));
            }
            name
        }
    };
    let description = match &attr.description {
        Some(d) => d.value.clone(),
        None => doc_text(&func.doc_lines),
    };
    if description.is_empty() {
        errors.push(syn::Error::new(
            attr.description.as_ref().map_or(name_span, |d| d.span),
            format!(
                "{attribute} needs a description: write a `///` doc comment or `description = \"…\"`"
            ),
        ));
    }
    Checked {
        name,
        description,
        scopes: attr.scopes.iter().map(|s| s.value.clone()).collect(),
    }
}

/// Why `uri` cannot be a resource URI or level-1 template, if it cannot.
fn uri_problem(uri: &str) -> Option<String> {
    let Some((scheme, rest)) = uri.split_once(':') else {
        return Some(format!(
            "resource URI `{uri}` has no scheme; write `scheme://…`"
        ));
    };
    if scheme.is_empty()
        || !scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
        || rest.is_empty()
    {
        return Some(format!(
            "resource URI `{uri}` has no valid scheme; write `scheme://…`"
        ));
    }
    let mut open = false;
    let mut last_close = None;
    for (i, c) in uri.char_indices() {
        match c {
            '{' if open => return Some(format!("nested `{{` in resource URI template `{uri}`")),
            '{' => {
                if last_close == Some(i) {
                    return Some(format!(
                        "two variables in a row in resource URI template `{uri}`; separate them"
                    ));
                }
                open = true;
            }
            '}' if !open => {
                return Some(format!("unmatched `}}` in resource URI template `{uri}`"));
            }
            '}' => {
                open = false;
                last_close = Some(i + 1);
            }
            _ if open && !(c.is_ascii_alphanumeric() || c == '_') => {
                return Some(format!(
                    "resource URI template `{uri}`: a variable is a name of `A-Z a-z 0-9 _` \
                     (level 1 templates only)"
                ));
            }
            _ => {}
        }
    }
    open.then(|| format!("unclosed `{{` in resource URI template `{uri}`"))
}
