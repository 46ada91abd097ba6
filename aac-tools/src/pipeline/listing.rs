//! What a server shows of its tools, computed once when it is built: which tools are
//! visible (read-only mode applied here and nowhere else), the `tools/list` JSON, the
//! manifest document, and each caller's subset when the list is filtered by scope.
//! Every transport reads it.

use std::sync::{Arc, OnceLock};

use serde_json::{Value, json};

use crate::principal::Principal;
use crate::registry::Registry;

/// The server's listing. Positions are those of [`Registry::tools`].
#[derive(Debug)]
pub(crate) struct Listing {
    /// `visible[i]`: the tool at position `i` can be listed and called.
    visible: Vec<bool>,
    /// The positions of the visible tools, in registry order.
    positions: Vec<usize>,
    /// Every scope some visible tool requires: a caller with all of them sees every
    /// visible tool, whatever the filter.
    visible_scopes: Vec<&'static str>,
    filter_by_scope: bool,
    /// The scopes each tool requires, by registry position.
    scopes: Vec<&'static [&'static str]>,
    /// `tools/list` of every visible tool as a JSON tree, built on first use: the
    /// transports do not need it (MCP answers from its own tool objects), so a server
    /// that nobody asks for it does not hold a second copy of every schema.
    tools_list: OnceLock<Arc<Value>>,
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    /// Each tool's manifest object, pretty-printed for its place in a manifest document,
    /// by registry position; built on first use, as is the rest of the manifest.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    manifest_parts: OnceLock<Vec<String>>,
    /// The manifest document of every visible tool.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    manifest: OnceLock<String>,
}

impl Listing {
    pub(crate) fn new(registry: &Registry, read_only_mode: bool, filter_by_scope: bool) -> Listing {
        let visible: Vec<bool> = registry
            .tools()
            .iter()
            .map(|t| !read_only_mode || t.def().is_read_only())
            .collect();
        let positions: Vec<usize> = (0..visible.len()).filter(|&i| visible[i]).collect();
        let mut visible_scopes: Vec<&'static str> = positions
            .iter()
            .flat_map(|&i| registry.tools()[i].def().scopes().iter().copied())
            .collect();
        visible_scopes.sort_unstable();
        visible_scopes.dedup();
        let scopes = registry.tools().iter().map(|t| t.def().scopes()).collect();
        Listing {
            visible,
            positions,
            visible_scopes,
            filter_by_scope,
            scopes,
            tools_list: OnceLock::new(),
            manifest_parts: OnceLock::new(),
            manifest: OnceLock::new(),
        }
    }

    /// Whether the tool at this registry position can be listed and called.
    pub(crate) fn is_visible(&self, position: usize) -> bool {
        self.visible.get(position).copied().unwrap_or(false)
    }

    /// Whether the list depends on the caller.
    pub(crate) fn filters_by_scope(&self) -> bool {
        self.filter_by_scope
    }

    /// The positions of the tools listed to `principal`; `None` when that is every
    /// visible tool (the common case, with nothing to compute).
    pub(crate) fn subset(&self, principal: Option<&Principal>) -> Option<Vec<usize>> {
        if !self.filter_by_scope || principal.is_some_and(|p| p.has_scopes(&self.visible_scopes)) {
            return None;
        }
        Some(
            self.positions
                .iter()
                .copied()
                .filter(|&i| principal.is_some_and(|p| p.has_scopes(self.scopes[i])))
                .collect(),
        )
    }

    /// The positions of every visible tool.
    pub(crate) fn positions(&self) -> &[usize] {
        &self.positions
    }

    /// `tools/list` of every visible tool, built once, on first use.
    pub(crate) fn tools_list(&self, registry: &Registry) -> &Arc<Value> {
        self.tools_list
            .get_or_init(|| Arc::new(list_json(registry, &self.positions)))
    }

    /// The manifest document of every visible tool, built once, on first use.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn manifest(&self, registry: &Registry) -> &str {
        self.manifest
            .get_or_init(|| manifest_body(self.manifest_parts(registry), &self.positions))
    }

    /// The manifest document of the tools at these positions.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn manifest_of(&self, registry: &Registry, positions: &[usize]) -> String {
        manifest_body(self.manifest_parts(registry), positions)
    }

    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    fn manifest_parts(&self, registry: &Registry) -> &[String] {
        self.manifest_parts.get_or_init(|| {
            let manifest: Value = serde_json::from_str(registry.manifest()).unwrap_or(Value::Null);
            manifest
                .get("tools")
                .and_then(Value::as_array)
                .map(|tools| tools.iter().map(manifest_part).collect())
                .unwrap_or_default()
        })
    }
}

/// The `tools/list` result JSON of the tools at these positions.
pub(crate) fn list_json(registry: &Registry, positions: &[usize]) -> Value {
    let tools = registry.tools();
    json!({ "tools": positions.iter().map(|&i| tools[i].tool_object()).collect::<Vec<_>>() })
}

/// The start and end of a pretty-printed manifest document around its tool objects.
const MANIFEST_HEAD: &str = "{\n  \"tools\": [\n";
const MANIFEST_TAIL: &str = "\n  ]\n}\n";

/// One tool object, pretty-printed as it appears in a manifest document (indented for
/// its place in the `tools` array): parts join with `,\n` between the head and tail.
fn manifest_part(tool: &Value) -> String {
    let text = serde_json::to_string_pretty(&json!({ "tools": [tool] }))
        .expect("a JSON value always serializes");
    text.strip_prefix(MANIFEST_HEAD)
        .and_then(|t| t.strip_suffix(&MANIFEST_TAIL[..MANIFEST_TAIL.len() - 1]))
        .unwrap_or(&text)
        .to_owned()
}

/// The manifest document of these tools (as `serde_json::to_string_pretty` writes
/// `{"tools": [...]}`, and a newline), joined from the parts serialized at start-up.
fn manifest_body(parts: &[String], positions: &[usize]) -> String {
    let chosen: Vec<&str> = positions
        .iter()
        .filter_map(|&i| parts.get(i).map(String::as_str))
        .collect();
    if chosen.is_empty() {
        return "{\n  \"tools\": []\n}\n".to_owned();
    }
    let size = chosen.iter().map(|p| p.len() + 2).sum::<usize>() + 32;
    let mut text = String::with_capacity(size);
    text.push_str(MANIFEST_HEAD);
    for (n, part) in chosen.iter().enumerate() {
        if n > 0 {
            text.push_str(",\n");
        }
        text.push_str(part);
    }
    text.push_str(MANIFEST_TAIL);
    text
}

/// The resources, resource templates and prompts `principal` may use, as listed
/// (`resources/list`, `resources/templates/list`, `prompts/list`, `GET /resources`,
/// `GET /prompts`): always filtered by scope, and empty without a principal (deny by
/// default; unlike tools there is no unfiltered mode to stay compatible with).
#[cfg_attr(not(feature = "http"), allow(dead_code))]
pub(crate) fn items_json(registry: &Registry, principal: Option<&Principal>) -> ItemsJson {
    let allowed = |scopes: &[&str]| principal.is_some_and(|p| p.has_scopes(scopes));
    let mut resources = Vec::new();
    let mut templates = Vec::new();
    for def in registry.resources() {
        if allowed(def.scopes()) {
            if def.is_template() {
                templates.push(def.to_json());
            } else {
                resources.push(def.to_json());
            }
        }
    }
    let prompts = registry
        .prompts()
        .iter()
        .filter(|p| allowed(p.def().scopes()))
        .map(|p| p.json().clone())
        .collect();
    ItemsJson {
        resources,
        templates,
        prompts,
    }
}

/// What [`items_json`] lists.
#[cfg_attr(not(feature = "http"), allow(dead_code))]
pub(crate) struct ItemsJson {
    pub(crate) resources: Vec<Value>,
    pub(crate) templates: Vec<Value>,
    pub(crate) prompts: Vec<Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A manifest joined from its parts is byte for byte what serde_json writes.
    #[test]
    fn manifest_bodies_are_the_pretty_json_of_the_chosen_tools() {
        let tools = [
            json!({"name": "a", "inputSchema": {"type": "object", "properties": {}}, "scopes": ["x:y"]}),
            json!({"name": "b", "description": "with \"quotes\"\nand lines", "scopes": []}),
            json!({"name": "c", "annotations": {"readOnlyHint": true}, "scopes": ["p", "q"]}),
        ];
        let parts: Vec<String> = tools.iter().map(manifest_part).collect();
        for positions in [vec![], vec![0], vec![1], vec![0, 2], vec![0, 1, 2]] {
            let chosen: Vec<&Value> = positions.iter().map(|&i| &tools[i]).collect();
            let mut expected = serde_json::to_string_pretty(&json!({ "tools": chosen })).unwrap();
            expected.push('\n');
            assert_eq!(manifest_body(&parts, &positions), expected, "{positions:?}");
        }
    }
}
