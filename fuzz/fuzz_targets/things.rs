//! The tools two fuzz targets share: one destructive, one read-only, and one beyond the
//! fuzz token's scopes, each counting its runs where an oracle needs it.

use std::sync::atomic::{AtomicUsize, Ordering};

use aac_tools::{Text, ToolError, mcp_tool};
use schemars::JsonSchema;
use serde::Deserialize;

/// How often `delete_thing` ran.
pub static DELETED: AtomicUsize = AtomicUsize::new(0);
/// How often `read_secrets` ran (never, with the fuzz token).
pub static SECRETS: AtomicUsize = AtomicUsize::new(0);

/// Arguments naming one thing.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct IdArgs {
    /// The id.
    id: String,
}

/// Delete a thing.
#[mcp_tool(destructive, scope = "things:write", audit_fields = ["id"])]
async fn delete_thing(args: IdArgs) -> Result<Text, ToolError> {
    DELETED.fetch_add(1, Ordering::Relaxed);
    Ok(Text(args.id))
}

/// Read a thing (no arguments).
#[mcp_tool(read_only, scope = "things:read")]
async fn read_things() -> Result<Text, ToolError> {
    Ok(Text("none".into()))
}

/// A tool the token may not call.
#[mcp_tool(read_only, scope = "secrets:read")]
async fn read_secrets() -> Result<Text, ToolError> {
    SECRETS.fetch_add(1, Ordering::Relaxed);
    Ok(Text("hidden".into()))
}
