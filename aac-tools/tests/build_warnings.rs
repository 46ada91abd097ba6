//! The warnings of `ServerBuilder::build` reach the person who starts a server built by
//! hand, with no `tracing` subscriber installed: on stderr. Before, they went to
//! `tracing` only, and such a server (the way `docs/transports.md` shows) said nothing
//! of unauthenticated calls allowed, the audit trail off, a missing state, no tools, or a
//! tool that writes behind read scopes.
//!
//! Each case runs in a child process of this test binary (stderr is the process's), and
//! the parent reads what it wrote.

use aac_tools::{Principal, Registry, Server, ToolError, mcp_tool};

/// Writes, yet asks only for a read scope.
#[mcp_tool(scope = "notes:read")]
async fn wipe_notes() -> Result<String, ToolError> {
    Ok("wiped".into())
}

/// Which case the child builds (the test's name), from the environment.
const CASE: &str = "AAC_BUILD_WARNINGS_CASE";

/// In the child: build the server of `case`, then stop.
fn child(case: &str) {
    let registry = match case {
        "no_tools" => Registry::collect_named(&[]).unwrap(),
        _ => Registry::collect_named(&["wipe_notes"]).unwrap(),
    };
    let builder = Server::builder(registry).audit_disabled();
    let builder = match case {
        "unauthenticated" => {
            builder.danger_allow_unauthenticated(Principal::new("anyone", ["notes:read"]))
        }
        _ => builder,
    };
    drop(builder.build().unwrap());
}

/// Run this test binary's test `name` alone, in a child, and return its stderr.
fn stderr_of(name: &str) -> String {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CASE, name)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn in_child_or(name: &str, check: impl FnOnce(&str)) {
    if let Ok(case) = std::env::var(CASE) {
        if case == name {
            child(&case);
        }
        return;
    }
    check(&stderr_of(name));
}

#[test]
fn unauthenticated() {
    in_child_or("unauthenticated", |err| {
        assert!(
            err.contains("aac-tools: WARNING: unauthenticated calls are ALLOWED"),
            "{err}"
        );
        assert!(err.contains("the audit trail is disabled"), "{err}");
    });
}

#[test]
fn no_tools() {
    in_child_or("no_tools", |err| {
        assert!(
            err.contains("this server has no tools, resources or prompts"),
            "{err}"
        );
        assert!(!err.contains("unauthenticated"), "{err}");
    });
}

#[test]
fn writes_behind_read_scopes() {
    in_child_or("writes_behind_read_scopes", |err| {
        assert!(
            err.contains("tool `wipe_notes`")
                && err.contains("every scope it needs reads as a read scope (notes:read)"),
            "{err}"
        );
        assert!(!err.contains("has no tools"), "{err}");
    });
}
