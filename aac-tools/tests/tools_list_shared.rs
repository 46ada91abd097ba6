//! `Server::list_tools_json` hands out the list built once with the server whenever the
//! caller sees every tool; a filtered list holds exactly the caller's subset.

use std::sync::Arc;

use aac_tools::{Principal, Registry, Server, Text, ToolError, mcp_tool};

/// Read.
#[mcp_tool(read_only, scope = "a:read")]
async fn read_a() -> Result<Text, ToolError> {
    Ok(Text("a".into()))
}

/// Write.
#[mcp_tool(scope = "a:write")]
async fn write_a() -> Result<Text, ToolError> {
    Ok(Text("a".into()))
}

/// Other.
#[mcp_tool(read_only, scope = "b:read")]
async fn read_b() -> Result<Text, ToolError> {
    Ok(Text("b".into()))
}

fn names(list: &serde_json::Value) -> Vec<&str> {
    list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect()
}

fn server(filter: bool) -> Server {
    Server::builder(Registry::collect().unwrap())
        .audit_disabled()
        .filter_list_by_scope(filter)
        .build()
        .unwrap()
}

#[test]
fn the_full_list_is_built_once() {
    let server = server(false);
    let reader = Principal::new("r", ["a:read"]);
    let first = server.list_tools_json(None);
    assert!(Arc::ptr_eq(&first, &server.list_tools_json(Some(&reader))));
    assert_eq!(names(&first), ["read_a", "read_b", "write_a"]);
    let filtered = self::server(true);
    let everything = Principal::new("all", ["a:read", "a:write", "b:read"]);
    assert!(Arc::ptr_eq(
        &filtered.list_tools_json(Some(&everything)),
        &filtered.list_tools_json(Some(&everything))
    ));
}

#[test]
fn filtered_lists_are_per_subset_and_never_mixed() {
    let server = server(true);
    let a = Principal::new("a1", ["a:read"]);
    let a_too = Principal::new("a2", ["a:read", "c:unused"]);
    let b = Principal::new("b", ["b:read"]);
    let list_a = server.list_tools_json(Some(&a));
    assert_eq!(names(&list_a), ["read_a"]);
    assert_eq!(names(&server.list_tools_json(Some(&b))), ["read_b"]);
    assert_eq!(list_a, server.list_tools_json(Some(&a_too)));
    assert_eq!(names(&server.list_tools_json(Some(&a))), ["read_a"]);
    assert!(names(&server.list_tools_json(None)).is_empty());
    // Many principals with other scopes but the same subset: the same list.
    for n in 0..200 {
        let p = Principal::new("p", [format!("x:{n}"), "b:read".to_owned()]);
        assert_eq!(names(&server.list_tools_json(Some(&p))), ["read_b"]);
    }
    assert_eq!(names(&server.list_tools_json(Some(&a))), ["read_a"]);
}
