//! Access levels: least privilege by construction.
//!
//! A tool's access level comes from its annotation, never from the author's choice:
//!
//! | annotation | level | may use |
//! | --- | --- | --- |
//! | `read_only` | [`Read`] | read queries |
//! | neither `read_only` nor `destructive` | [`Write`] | read and create/`Update*` queries |
//! | `destructive` | [`Delete`] | read, `Update*` and `Delete*` queries |
//!
//! A handler obtains its data handle only through the framework, as a parameter such as
//! `db: Db<Read>`. Asking for a handle above the tool's level does not compile
//! ([`ReadToolMayHold`], [`WriteToolMayHold`]).
//!
//! Nor can it take the framework's storage (`sqlite::Database`…) as
//! [`State`](crate::State) ([`ToolState`]).
//!
//! Queries are gated on the level of the handle (or transaction) they run on, through
//! [`MayUpdate`] and [`MayDelete`]. Put [`#[queries]`](crate::queries) on a query trait of
//! your own and its name gates every method: `Update…` on `MayUpdate`, `Delete…` on
//! `MayDelete`, anything else reads. Without the attribute, each method that changes data
//! carries `where Self: MayUpdate` (or `MayDelete`) by hand, as below. Either way, a call
//! from a tool whose level does not allow it is a compile error in our words, wherever it
//! happens: in the handler, in a helper function or in a closure.
//!
//! ```
//! use aac_tools::access::{MayDelete, MayUpdate};
//! use aac_tools::sqlite::Tx;
//! use aac_tools::ToolError;
//!
//! /// Queries that read notes.
//! pub trait ReadNotes {
//!     fn count_notes(&self) -> Result<i64, ToolError>;
//! }
//! impl<L: aac_tools::access::Level> ReadNotes for Tx<'_, L> {
//!     fn count_notes(&self) -> Result<i64, ToolError> {
//!         Ok(self.conn().query_row("SELECT count(*) FROM notes", [], |r| r.get(0))?)
//!     }
//! }
//!
//! /// Queries that create or change notes.
//! pub trait UpdateNotes {
//!     fn add_note(&self, text: &str) -> Result<(), ToolError>
//!     where
//!         Self: MayUpdate;
//! }
//! impl<L: aac_tools::access::Level> UpdateNotes for Tx<'_, L> {
//!     fn add_note(&self, text: &str) -> Result<(), ToolError>
//!     where
//!         Self: MayUpdate,
//!     {
//!         self.conn().execute("INSERT INTO notes (text) VALUES (?1)", [text])?;
//!         Ok(())
//!     }
//! }
//! # fn _unused<T: MayDelete>() {}
//! ```

use std::fmt;

mod sealed {
    pub trait Sealed {}

    /// What may implement [`MayUpdate`](super::MayUpdate) and
    /// [`MayDelete`](super::MayDelete): this crate's levels and transactions only, so
    /// that no wrapper of a `Read` transaction can claim them.
    #[diagnostic::on_unimplemented(
        message = "`MayUpdate` and `MayDelete` belong to aac-tools' own levels and transactions",
        label = "a type of your own cannot claim them: take the transaction of a tool at that level",
        note = "bound your own methods with `where Self: MayUpdate` (or `MayDelete`) instead"
    )]
    pub trait Granted {}
}

#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres")),
    allow(unused_imports)
)]
pub(crate) use sealed::Granted;

/// The runtime view of an access level, as carried by a [`ToolDef`](crate::ToolDef) and
/// written into audit records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AccessLevel {
    /// Read queries only (`read_only` tools).
    Read,
    /// Reads, creates and updates (tools that are neither `read_only` nor `destructive`).
    Write,
    /// Everything, deletes included (`destructive` tools).
    Delete,
}

impl AccessLevel {
    /// `"read"`, `"write"` or `"delete"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            AccessLevel::Read => "read",
            AccessLevel::Write => "write",
            AccessLevel::Delete => "delete",
        }
    }

    /// The level a tool with these flags runs at.
    pub const fn from_flags(read_only: bool, destructive: bool) -> AccessLevel {
        if read_only {
            AccessLevel::Read
        } else if destructive {
            AccessLevel::Delete
        } else {
            AccessLevel::Write
        }
    }
}

impl fmt::Display for AccessLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A compile-time access level: [`Read`], [`Write`] or [`Delete`]. Sealed.
pub trait Level: sealed::Sealed + Send + Sync + 'static {
    /// The same level at run time.
    const LEVEL: AccessLevel;
}

/// The level of `read_only` tools: read queries only.
#[derive(Debug, Clone, Copy, Default)]
pub struct Read;
/// The level of tools that are neither `read_only` nor `destructive`: reads, creates, updates.
#[derive(Debug, Clone, Copy, Default)]
pub struct Write;
/// The level of `destructive` tools: everything, deletes included.
#[derive(Debug, Clone, Copy, Default)]
pub struct Delete;

impl sealed::Sealed for Read {}
impl sealed::Sealed for Write {}
impl sealed::Sealed for Delete {}
impl Level for Read {
    const LEVEL: AccessLevel = AccessLevel::Read;
}
impl Level for Write {
    const LEVEL: AccessLevel = AccessLevel::Write;
}
impl Level for Delete {
    const LEVEL: AccessLevel = AccessLevel::Delete;
}

/// Levels of handles a `read_only` tool may hold: [`Read`] only.
///
/// `#[mcp_tool]` checks the level every parameter of a `read_only` tool reaches
/// ([`ToolParam::NEEDS`](crate::ToolParam::NEEDS)) against this trait, so asking for
/// `Db<Write>` or `Db<Delete>` in one does not compile.
#[diagnostic::on_unimplemented(
    message = "read-only tool cannot take a data handle that writes or deletes",
    label = "this handle reaches `{Self}`, above the tool's `Read` level",
    note = "the level comes from the annotation: `read_only` gives `Db<Read>`, neither `read_only` nor `destructive` gives `Db<Write>`, `destructive` gives `Db<Delete>`"
)]
pub trait ReadToolMayHold: Level {
    /// Named by the code `#[mcp_tool]` generates, so that the check is a path, not a call.
    #[doc(hidden)]
    const CHECK: () = ();
}

/// Levels of handles a tool that is neither `read_only` nor `destructive` may hold:
/// [`Read`] and [`Write`].
#[diagnostic::on_unimplemented(
    message = "non-destructive tool cannot take a data handle that deletes",
    label = "this handle reaches `{Self}`, above the tool's `Write` level",
    note = "only a tool annotated `#[mcp_tool(destructive, …)]` gets `Db<Delete>`, and its callers must send `confirm: true`"
)]
pub trait WriteToolMayHold: Level {
    /// Named by the code `#[mcp_tool]` generates, so that the check is a path, not a call.
    #[doc(hidden)]
    const CHECK: () = ();
}

impl AccessLevel {
    /// `0` for read, `1` for write, `2` for delete.
    pub const fn rank(self) -> u8 {
        match self {
            AccessLevel::Read => 0,
            AccessLevel::Write => 1,
            AccessLevel::Delete => 2,
        }
    }
}

#[diagnostic::do_not_recommend]
impl ReadToolMayHold for Read {}

/// Levels of handles a resource, prompt or completion handler may hold: [`Read`] only.
/// Resources are read-only by construction: `#[mcp_resource]` and `#[mcp_prompt]` check
/// every parameter against this trait, so `Db<Write>` in one does not compile.
#[diagnostic::on_unimplemented(
    message = "a resource or prompt handler cannot take a data handle that writes or deletes",
    label = "this handle reaches `{Self}`, above the `Read` level of resources and prompts",
    note = "resources and prompts are read-only by construction: take `Db<Read>`; changes belong in a `#[mcp_tool]`"
)]
pub trait ReadOnlyItemMayHold: Level {
    /// Named by the generated code, so that the check is a path, not a call.
    #[doc(hidden)]
    const CHECK: () = ();
}

impl ReadOnlyItemMayHold for Read {}
#[diagnostic::do_not_recommend]
impl WriteToolMayHold for Read {}
#[diagnostic::do_not_recommend]
impl WriteToolMayHold for Write {}

/// The framework's own storage handles (`sqlite::Database`, `sqlite::TokenStore`,
/// `sqlite::Db<L>`), as the compile error names them when a tool asks for one as
/// [`State`](crate::State). Never built.
#[derive(Debug, Clone, Copy)]
pub enum FrameworkStorage {}

/// Shared state a tool may take: anything but the framework's storage handles. Never built.
#[derive(Debug, Clone, Copy)]
pub enum SharedState {}

/// What a tool may take as [`State<T>`](crate::State): anything registered with
/// `ServerBuilder::state`, except the framework's storage handles, which would reach the
/// database past the tool's level (`Database::with_writer`, `Database::handle::<Delete>()`).
///
/// `#[mcp_tool]` checks every parameter against this trait, so a tool that takes
/// `State<Database>` does not compile. The `Database` is not even in the state map under
/// its own type: a `State<Database>` smuggled past the check finds nothing.
#[diagnostic::on_unimplemented(
    message = "a tool, resource or prompt cannot take the framework's storage as shared state",
    label = "this reaches the database past its access level",
    note = "take a data handle at its level instead (`Db<Read>`, `Db<Write>`, `Db<Delete>`); `Database::handle` and `Database::with_writer` are for set-up code outside tools, resources and prompts"
)]
pub trait ToolState {
    /// Named by the code `#[mcp_tool]` generates, so that the check is a path, not a call.
    #[doc(hidden)]
    const CHECK: () = ();
}

#[diagnostic::do_not_recommend]
impl ToolState for SharedState {}

/// Handles and transactions that may run create/`Update*` queries: those of tools that are
/// not `read_only`.
///
/// Gate every method of your own that creates or changes data with `where Self: MayUpdate`.
#[diagnostic::on_unimplemented(
    message = "read-only tool cannot use update queries",
    label = "`read_only` tools reach read queries only; drop `read_only` if this tool must write"
)]
pub trait MayUpdate: sealed::Granted {}

/// Handles and transactions that may run `Delete*` queries: those of `destructive` tools.
///
/// Gate every method of your own that deletes data with `where Self: MayDelete`.
#[diagnostic::on_unimplemented(
    message = "non-destructive tool cannot use delete queries",
    label = "only `destructive` tools reach delete queries, and their callers must send `confirm: true`"
)]
pub trait MayDelete: sealed::Granted {}

// The levels themselves claim neither: a query method bounded on `Self` must be called on
// a transaction of the level (a trait implemented for the marker `Write`, whose method
// took a transaction of any level as an argument, was callable from a read-only tool).
