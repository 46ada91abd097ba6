//! The host side: may a tool run without asking, and may a failed call be retried?
//!
//! MCP hosts decide from a tool's annotations whether to ask the user and whether to retry.
//! [`ToolPolicy`] reads the `Tool` object of any server's `tools/list` — not only servers
//! built with aac-tools — and answers four questions:
//!
//! | question | answer |
//! | --- | --- |
//! | may it run without asking? | read-only, and the server is trusted |
//! | must the user be asked first? | destructive, declared or by default: a tool without hints is destructive and open-world |
//! | may it be retried after a transport failure? | read-only or idempotent |
//! | never retried automatically? | not idempotent |
//!
//! The hints are read with the spec defaults (`readOnlyHint` false, `destructiveHint` true,
//! `idempotentHint` false, `openWorldHint` true), and the hints of a server the host does
//! not [trust](Trust) are treated as absent, as the spec requires. A trusted tool that
//! writes without being destructive (additive updates) leaves asking to the host
//! ([`Consent::HostChoice`]).
//!
//! [`call_with_retry`] runs a call under a [`Retry`] answer with exponential [`Backoff`].
//! The MCP client to reach a server with is [`crate::mcp::client`].
//!
//! ```
//! use aac_tools::host::{Consent, Retry, ToolPolicy, Trust};
//! use serde_json::json;
//!
//! // A third-party tool that declares nothing.
//! let tool = json!({"name": "run_script", "inputSchema": {"type": "object"}});
//! let policy = ToolPolicy::new(&tool, Trust::Trusted).unwrap();
//! assert!(policy.must_ask());
//! assert_eq!(policy.retry(), Retry::Never);
//!
//! let get = json!({"name": "get_issue", "annotations": {"readOnlyHint": true}});
//! assert_eq!(ToolPolicy::new(&get, Trust::Trusted).unwrap().consent(), Consent::NotNeeded);
//! assert!(ToolPolicy::new(&get, Trust::Untrusted).unwrap().must_ask());
//! ```

mod policy;
mod retry;
mod text;

pub use policy::{AskReason, Consent, Hints, InvalidTool, ResolvedHints, Retry, ToolPolicy, Trust};
pub use retry::{Attempted, Backoff, call_with_retry};
pub use text::{escape_line, escape_text, must_escape};
