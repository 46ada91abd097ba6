//! # aac-tools
//!
//! MCP servers in Rust whose tool annotations are contracts, not hints.
//!
//! ```
//! use aac_tools::{mcp_tool, ToolError};
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct AddArgs {
//!     /// The first term.
//!     a: i64,
//!     /// The second term.
//!     b: i64,
//! }
//!
//! #[derive(Serialize, JsonSchema)]
//! struct Sum {
//!     sum: i64,
//! }
//!
//! /// Add two integers.
//! #[mcp_tool(read_only, scope = "math:read")]
//! async fn add(args: AddArgs) -> Result<Sum, ToolError> {
//!     Ok(Sum { sum: args.a + args.b })
//! }
//!
//! let registry = aac_tools::Registry::collect().unwrap();
//! let tool = registry.get("add").unwrap().json();
//! assert_eq!(tool["annotations"]["readOnlyHint"], true);
//! assert_eq!(tool["annotations"]["destructiveHint"], false);
//! assert_eq!(tool["_meta"]["aac-tools.dev/scopes"], serde_json::json!(["math:read"]));
//! ```
//!
//! See the repository README for the full guide: the attribute reference, access levels,
//! enforcement, the audit trail and the transports.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

pub mod access;
pub mod audit;
mod context;
mod error;
mod principal;
mod registry;
mod schema;
mod server;
mod state;
mod tool;

#[cfg(feature = "sqlite")]
pub mod sqlite;

#[cfg(any(feature = "mcp", feature = "host"))]
pub mod mcp;

#[cfg(feature = "http")]
pub mod http;

#[cfg(feature = "jwt")]
pub mod jwt;

#[cfg(feature = "host")]
pub mod host;

#[doc(hidden)]
pub mod __private;

pub use aac_tools_macros::mcp_tool;

pub use crate::context::{ClientPeer, Ctx, LogLevel, Transport};
pub use crate::error::{CONFIRM_REQUIRED, Status, ToolError};
pub use crate::principal::{BoxFuture, Principal, StaticTokens, TokenVerifier, VerifierChain};
pub use crate::registry::{
    META_ACCESS, META_SCOPES, ManifestDrift, Registry, RegistryError, ToolEntry,
};
pub use crate::server::{
    BuildError, CallRequest, CallResponse, Credentials, Server, ServerBuilder, error_result_json,
};
pub use crate::state::{State, StateMap};
pub use crate::tool::{
    Call, Content, Handler, HandlerFuture, IntoToolError, IntoToolOutput, IntoToolResult, Text,
    ToolDef, ToolOutput, ToolParam,
};
