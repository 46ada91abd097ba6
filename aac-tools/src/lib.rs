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
pub mod confirm;
mod context;
mod error;
mod hex;
mod pipeline;
mod principal;
mod registry;
mod resource;
mod schema;
mod server;
mod state;
pub mod tokens;
mod tool;

#[cfg(feature = "sqlite")]
pub mod sqlite;

#[cfg(feature = "postgres")]
pub mod postgres;

#[cfg(any(feature = "mcp", feature = "host"))]
pub mod mcp;

#[cfg(feature = "http")]
pub mod http;

#[cfg(feature = "jwt")]
pub mod jwt;

#[cfg(feature = "host")]
pub mod host;

#[cfg(feature = "cli")]
pub mod cli;

/// Everything `#[mcp_tool]` generates code against. Named after this crate's patch
/// version (as thiserror's is) so that a version skew with `aac-tools-macros` is a
/// compile error; `aac-tools-macros` is pinned exactly and makes the same name.
#[doc(hidden)]
#[path = "__private.rs"]
pub mod __private0;

// The README's Rust examples compile as doc tests, so the front page cannot rot.
#[cfg(all(doctest, feature = "sqlite", feature = "mcp", feature = "cli"))]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

/// Turns an `async fn` into an MCP tool whose annotations the server enforces.
///
/// ```
/// use aac_tools::sqlite::DeleteDb;
/// use aac_tools::{mcp_tool, Text, ToolError};
/// use schemars::JsonSchema;
/// use serde::Deserialize;
///
/// #[derive(Deserialize, JsonSchema)]
/// struct DeleteArgs {
///     /// The note's id.
///     id: i64,
/// }
///
/// /// Delete a note permanently.
/// #[mcp_tool(destructive, idempotent, scope = "notes:write")]
/// async fn delete_note(db: DeleteDb, args: DeleteArgs) -> Result<Text, ToolError> {
///     let gone = db
///         .run(move |tx| Ok(tx.conn().execute("DELETE FROM notes WHERE id = ?1", [args.id])?))
///         .await?;
///     Ok(Text(format!("{gone} note deleted")))
/// }
/// ```
///
/// # Keys
///
/// | key | meaning |
/// | --- | --- |
/// | `read_only` | changes nothing: `readOnlyHint`, `idempotentHint`; handles at [`access::Read`] |
/// | `destructive` | may destroy data: `destructiveHint`; callers send `confirm: true`; handles up to [`access::Delete`] |
/// | `idempotent` | `idempotentHint` (implied by `read_only`) |
/// | `open_world` | `openWorldHint`: the tool reaches outside systems |
/// | `scope = "resource:action"` | a scope the caller needs; at least one; repeat for several |
/// | `name = "…"` | the MCP name (default: the function's name) |
/// | `title = "…"` | the human title (default: from the name, `get_note` → `Get note`) |
/// | `description = "…"` | the description (default: the doc comment, paragraphs kept) |
/// | `input_schema = path` | a `fn() -> serde_json::Value` advertised and validated instead of the derived schema |
/// | `audit_fields = ["a", …]` | argument fields kept verbatim in audit records (the others are hashed) |
/// | `rate = "30/min"` | at most that many calls of this tool per principal (`s`, `min`, `h`, `day`); past it 429 `rate_limited` |
/// | `confirm = "user"` | destructive tools: who confirms (`argument`, `user`, `user-or-argument`), overriding the server's policy |
/// | `confirm_message = "Delete note {id}?"` | destructive tools: the question a person is asked, `{field}` replaced by the call's argument (escaped, bounded) |
///
/// A tool that is neither `read_only` nor `destructive` runs at [`access::Write`].
/// `read_only` with `destructive` is a compile error.
///
/// # Parameters, in any order
///
/// - at most one arguments type deriving `serde::Deserialize` and `schemars::JsonSchema`
///   (none for a tool without arguments);
/// - a data handle such as [`sqlite::Db<L>`](crate::sqlite::Db) at or below the tool's level;
/// - [`Ctx`], the call's context; [`State<T>`], shared state (never the framework's own
///   storage: `State<Database>` does not compile, see [`access::ToolState`]).
///
/// # Return
///
/// `Result<T, E>`, where `E` is [`ToolError`] or converts into it ([`IntoToolError`]), and
/// `T` derives `serde::Serialize` and `schemars::JsonSchema` (it becomes `outputSchema` and
/// `structuredContent`; a non-object is wrapped as `{"result": …}`), or is [`Text`] or
/// [`ToolOutput`].
///
/// Every mistake is a compile error in our words with the caret on your token, all of an
/// item's errors in one pass; `ui-tests/tests/fail` holds one case per mistake.
pub use aac_tools_macros::mcp_tool;

/// Makes a query trait's name its contract: every method of a trait named `Update…`
/// requires [`access::MayUpdate`], every method of a trait named `Delete…` requires
/// [`access::MayDelete`], whether or not the bound is written, so forgetting it is
/// impossible. Any other name is a read trait, callable at every level; a `MayUpdate` or
/// `MayDelete` bound written on one of its methods contradicts the name and is an error.
///
/// ```
/// use aac_tools::access::Level;
/// use aac_tools::sqlite::Tx;
/// use aac_tools::{queries, ToolError};
///
/// /// Queries that delete notes: only `destructive` tools reach them.
/// #[queries]
/// pub trait DeleteNotes {
///     fn delete_note(&self, id: i64) -> Result<bool, ToolError>;
/// }
///
/// impl<L: Level> DeleteNotes for Tx<'_, L> {
///     fn delete_note(&self, id: i64) -> Result<bool, ToolError> {
///         Ok(self.conn().execute("DELETE FROM notes WHERE id = ?1", [id])? > 0)
///     }
/// }
/// ```
///
/// The implementation needs no bound either (an impl may require less than its trait);
/// the callers are gated by the trait's. A read-only tool that calls `delete_note` does
/// not compile: "non-destructive tool cannot use delete queries". Should a query reach
/// past its level anyway (a trait without the attribute, raw SQL in a read trait), the
/// database refuses it at run time: see [`sqlite`] and
/// `docs/access-levels.md`.
pub use aac_tools_macros::queries;

/// Declares a resource (a fixed URI) or a resource template (`aacworkflow://issues/{id}`):
/// `#[mcp_resource(uri = "…", scope = "…", name = "…", title = "…", description = "…",
/// mime_type = "…", complete = path)]` on an `async fn` returning
/// `Result<T, ToolError>` where `T:` [`IntoResourceContents`]. The template's variables
/// are its arguments (one type deriving `Deserialize`, as for a tool): MCP fills them with
/// strings, so each variable must be a `String` field of that type and each field it
/// requires a variable, or the registry refuses to start
/// ([`RegistryError::UnusableArguments`]); every other
/// parameter is something the framework provides at the `Read` level (a `Db<Write>`
/// does not compile). Reads go through the same pipeline as tool calls: deny by
/// default, the scope checked first, one audit record of kind `resource` each. See
/// `docs/resources-prompts.md`.
pub use aac_tools_macros::mcp_resource;

/// Declares a prompt: `#[mcp_prompt(scope = "…", name = "…", title = "…",
/// description = "…", complete = path)]` on an `async fn` returning
/// `Result<T, ToolError>` where `T:` [`IntoPromptMessages`]. Its arguments are the
/// fields of its one arguments type, strings as MCP passes them (`String` or
/// `Option<String>`: another type refuses to start, [`RegistryError::UnusableArguments`]);
/// handles are `Read`-level only. One audit
/// record of kind `prompt` per `prompts/get`.
pub use aac_tools_macros::mcp_prompt;

pub use crate::context::{ClientPeer, Ctx, LogLevel, Transport};
pub use crate::error::{CONFIRM_REQUIRED, Status, ToolError};
pub use crate::pipeline::Attempt;
pub use crate::pipeline::limits::Rate;
pub use crate::principal::{Principal, StaticTokens, TokenVerifier, VerifierChain};

/// A boxed future, as the seams' trait objects return them ([`TokenVerifier`],
/// [`audit::AuditSink`], [`tokens::TokenIssuer`], [`ClientPeer`]).
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;
pub use crate::registry::{
    META_ACCESS, META_CONFIRM, META_RATE, META_SCOPES, ManifestDrift, PromptEntry, Registry,
    RegistryError, ToolEntry,
};
pub use crate::resource::{
    CompleteFn, Completion, IntoPromptMessages, IntoResourceContents, MAX_COMPLETION_VALUES,
    PromptDef, PromptMessage, ResourceContents, ResourceDef, Role,
};
pub use crate::server::{
    BuildError, CallRequest, CallResponse, Credentials, DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_UNAUTHENTICATED_RATE, Server, ServerBuilder,
};
pub use crate::state::{State, StateMap};
pub use crate::tool::{
    Call, Content, IntoToolError, IntoToolOutput, IntoToolResult, Text, ToolDef, ToolOutput,
    ToolParam, error_result_json,
};
