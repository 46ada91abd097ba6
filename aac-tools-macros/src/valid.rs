//! Cross-cutting checks: flags that exclude each other, scope and name syntax, the
//! description. Produces the [`Tool`] that `expand.rs` writes out.

use proc_macro2::Span;

use crate::ast::ToolFn;
use crate::attr::Attr;
use crate::errors::Errors;

/// The access level a tool's handler runs at, derived from its flags.
#[derive(Clone, Copy)]
pub(crate) enum Level {
    Read,
    Write,
    Delete,
}

/// Everything the generated `ToolDef` holds, checked.
pub(crate) struct Tool {
    pub(crate) name: String,
    pub(crate) title: Option<String>,
    pub(crate) description: String,
    pub(crate) read_only: bool,
    pub(crate) destructive: bool,
    pub(crate) idempotent: bool,
    pub(crate) open_world: bool,
    pub(crate) scopes: Vec<String>,
    pub(crate) audit_fields: Vec<String>,
    pub(crate) level: Level,
    /// `rate = "30/min"`: calls per principal, as (count, period in seconds).
    pub(crate) rate: Option<(u32, u64)>,
    /// `confirm = "…"`: the variant of `ConfirmPolicy`.
    pub(crate) confirm: Option<&'static str>,
    pub(crate) confirm_message: Option<String>,
}

pub(crate) fn check(attr: &Attr, func: &ToolFn<'_>, errors: &mut Errors) -> Tool {
    if let (Some(_), Some(destructive)) = (attr.read_only, attr.destructive) {
        errors.push(syn::Error::new(
            destructive,
            "`#[mcp_tool]` tool cannot be both `read_only` and `destructive`; \
             a read-only tool changes nothing, so remove one of them",
        ));
    }

    if !attr.scope_written {
        let message = "`#[mcp_tool]` needs at least one `scope = \"resource:action\"`; \
                       scopes are deny by default and a tool without one could never be called";
        errors.push(if attr.tokens.is_empty() {
            syn::Error::new(Span::call_site(), message)
        } else {
            syn::Error::new_spanned(&attr.tokens, message)
        });
    }
    let mut scopes: Vec<String> = Vec::new();
    for scope in &attr.scopes {
        if !is_valid_scope(&scope.value) {
            errors.push(syn::Error::new(
                scope.span,
                format!(
                    "`#[mcp_tool]` scope `{}` is not of the form `resource:action` \
                     (lowercase ASCII letters, digits, `_` and `-` on each side of one `:`)",
                    scope.value
                ),
            ));
        } else if scopes.contains(&scope.value) {
            errors.push(syn::Error::new(
                scope.span,
                format!("duplicate `#[mcp_tool]` scope `{}`", scope.value),
            ));
        } else {
            scopes.push(scope.value.clone());
        }
    }

    let name = match &attr.name {
        Some(name) => {
            if !is_valid_tool_name(&name.value) {
                errors.push(syn::Error::new(
                    name.span,
                    format!(
                        "`#[mcp_tool]` name `{}` is not a valid MCP tool name \
                         (1 to 128 of ASCII letters, digits, `_`, `-` and `.`, \
                         and not `.` or `..`)",
                        name.value
                    ),
                ));
            }
            name.value.clone()
        }
        None => {
            let ident = &func.item.sig.ident;
            let name = ident.to_string().trim_start_matches("r#").to_owned();
            // A Rust identifier may hold what an MCP tool name may not (`é`, or more
            // than 128 bytes): the default name is held to the same rule as `name = …`.
            if !is_valid_tool_name(&name) {
                errors.push(syn::Error::new(
                    ident.span(),
                    format!(
                        "the function name `{name}` is not a valid MCP tool name \
                         (1 to 128 of ASCII letters, digits, `_`, `-` and `.`): \
                         give the tool one with `name = \"…\"`"
                    ),
                ));
            }
            name
        }
    };

    let description = match &attr.description {
        Some(description) => {
            if description.value.trim().is_empty() {
                errors.push(syn::Error::new(
                    description.span,
                    "`#[mcp_tool]` description cannot be empty",
                ));
            }
            description.value.trim().to_owned()
        }
        None => {
            let doc = doc_text(&func.doc_lines);
            if doc.is_empty() {
                errors.push(syn::Error::new(
                    func.name_span(),
                    "`#[mcp_tool]` tool needs a description: add a doc comment (`/// …`) \
                     or `description = \"…\"`",
                ));
            }
            doc
        }
    };

    if let Some(title) = &attr.title
        && title.value.trim().is_empty()
    {
        errors.push(syn::Error::new(
            title.span,
            "`#[mcp_tool]` title cannot be empty; leave `title` out instead",
        ));
    }

    let mut audit_fields: Vec<String> = Vec::new();
    for field in attr.audit_fields.iter().flatten() {
        if field.value.is_empty() || audit_fields.contains(&field.value) {
            errors.push(syn::Error::new(
                field.span,
                format!(
                    "`#[mcp_tool]` audit field `{}` is empty or repeated",
                    field.value
                ),
            ));
        } else {
            audit_fields.push(field.value.clone());
        }
    }

    let rate = attr.rate.as_ref().and_then(|rate| match parse_rate(&rate.value) {
        Some(parsed) => Some(parsed),
        None => {
            errors.push(syn::Error::new(
                rate.span,
                format!(
                    "`#[mcp_tool]` rate `{}` is not of the form `COUNT/UNIT`: a whole count \
                     of at least 1 and a unit `s`, `min`, `h` or `day`, such as `rate = \"30/min\"`",
                    rate.value
                ),
            ));
            None
        }
    });
    let confirm = check_confirm(attr, errors);

    let read_only = attr.read_only.is_some();
    let destructive = attr.destructive.is_some();
    let level = if read_only {
        Level::Read
    } else if destructive {
        Level::Delete
    } else {
        Level::Write
    };

    Tool {
        name,
        title: attr.title.as_ref().map(|t| t.value.trim().to_owned()),
        description,
        read_only,
        destructive,
        idempotent: attr.idempotent.is_some(),
        open_world: attr.open_world.is_some(),
        scopes,
        audit_fields,
        level,
        rate,
        confirm,
        confirm_message: attr.confirm_message.as_ref().map(|m| m.value.clone()),
    }
}

/// `confirm` and `confirm_message`: destructive tools only, a known policy, a message
/// whose `{placeholders}` are argument names.
fn check_confirm(attr: &Attr, errors: &mut Errors) -> Option<&'static str> {
    for (key, value) in [
        ("confirm", &attr.confirm),
        ("confirm_message", &attr.confirm_message),
    ] {
        if let Some(value) = value
            && attr.destructive.is_none()
        {
            errors.push(syn::Error::new(
                value.span,
                format!(
                    "`#[mcp_tool]` argument `{key}` is only for `destructive` tools; \
                     only they are confirmed before they run"
                ),
            ));
        }
    }
    if let Some(message) = &attr.confirm_message {
        if message.value.trim().is_empty() {
            errors.push(syn::Error::new(
                message.span,
                "`#[mcp_tool]` confirm_message cannot be empty; leave it out instead",
            ));
        } else if let Err(why) = check_placeholders(&message.value) {
            errors.push(syn::Error::new(
                message.span,
                format!("`#[mcp_tool]` confirm_message: {why}"),
            ));
        }
    }
    let confirm = attr.confirm.as_ref()?;
    match confirm.value.as_str() {
        "argument" => Some("Argument"),
        "user" => Some("User"),
        "user-or-argument" | "user_or_argument" => Some("UserOrArgument"),
        other => {
            errors.push(syn::Error::new(
                confirm.span,
                format!(
                    "unknown `#[mcp_tool]` confirm policy `{other}`; expected `\"argument\"`, \
                     `\"user\"` or `\"user-or-argument\"`"
                ),
            ));
            None
        }
    }
}

/// Every `{` opens a placeholder naming an argument (`{{` is a literal brace) and is closed.
fn check_placeholders(message: &str) -> Result<(), String> {
    let mut rest = message;
    while let Some(i) = rest.find('{') {
        let after = &rest[i + 1..];
        if let Some(literal) = after.strip_prefix('{') {
            rest = literal;
            continue;
        }
        let Some(end) = after.find('}') else {
            return Err("a `{` is not closed; write `{{` for a literal brace".to_owned());
        };
        let name = &after[..end];
        let valid = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(format!(
                "`{{{name}}}` is not an argument name; placeholders are `{{field}}`"
            ));
        }
        rest = &after[end + 1..];
    }
    Ok(())
}

/// `COUNT/UNIT`, e.g. `30/min`: the count (at least 1) and the unit's length in seconds.
/// Units: `s` (`sec`, `second`), `min` (`minute`), `h` (`hour`), `day`.
fn parse_rate(text: &str) -> Option<(u32, u64)> {
    let (count, unit) = text.split_once('/')?;
    let count = count.trim();
    if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let count: u32 = count.parse().ok().filter(|&c| c > 0)?;
    let seconds = match unit.trim() {
        "s" | "sec" | "second" => 1,
        "min" | "minute" => 60,
        "h" | "hour" => 3600,
        "day" => 86_400,
        _ => return None,
    };
    Some((count, seconds))
}

/// `resource:action`, each side one or more of `a-z`, `0-9`, `_`, `-`.
pub(crate) fn is_valid_scope(scope: &str) -> bool {
    let Some((resource, action)) = scope.split_once(':') else {
        return false;
    };
    let part = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    };
    part(resource) && part(action)
}

/// The MCP tool-name rule (SEP-986): 1–128 of `A-Z a-z 0-9 _ - .`; and not `.` or `..`,
/// which name no tool at `POST /tools/{name}` (clients and proxies resolve them as path
/// segments, as they do in any URL).
pub(crate) fn is_valid_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        && name != "."
        && name != ".."
}

/// The doc comment as text: one leading space per line removed, paragraphs kept,
/// surrounding blank lines dropped.
pub(crate) fn doc_text(lines: &[String]) -> String {
    let joined: Vec<&str> = lines
        .iter()
        .flat_map(|l| l.split('\n'))
        .map(|l| l.strip_prefix(' ').unwrap_or(l).trim_end())
        .collect();
    joined.join("\n").trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes() {
        assert!(is_valid_scope("issues:read"));
        assert!(is_valid_scope("agents_v2:run-now"));
        assert!(!is_valid_scope("issues"));
        assert!(!is_valid_scope("Issues:read"));
        assert!(!is_valid_scope("issues:read:all"));
        assert!(!is_valid_scope(":read"));
        assert!(!is_valid_scope("issues: read"));
    }

    #[test]
    fn names() {
        assert!(is_valid_tool_name("get_issue"));
        assert!(is_valid_tool_name("admin.tools-list"));
        assert!(!is_valid_tool_name(""));
        assert!(!is_valid_tool_name("get issue"));
        assert!(!is_valid_tool_name(&"x".repeat(129)));
    }

    #[test]
    fn confirm_placeholders() {
        assert!(check_placeholders("Delete {issue_id}? {{literal}}").is_ok());
        assert!(check_placeholders("Delete {issue id}?").is_err());
        assert!(check_placeholders("Delete {}?").is_err());
        assert!(check_placeholders("Delete {issue_id?").is_err());
    }

    #[test]
    fn doc_paragraphs_are_kept() {
        let lines = vec![
            " Get one issue.".to_owned(),
            "".to_owned(),
            " Accepts the UUID or the key.".to_owned(),
        ];
        assert_eq!(
            doc_text(&lines),
            "Get one issue.\n\nAccepts the UUID or the key."
        );
    }
}
