//! An attribute macro on a method of an `Update…` or `Delete…` trait expands after
//! `#[queries]`, and could take away the bound it added: only the compiler's own
//! attributes are allowed there.
use aac_tools::{ToolError, queries};

#[queries]
pub trait UpdateNotes {
    /// Documented, and its result must be used: fine.
    #[must_use = "the note may not have been added"]
    #[allow(clippy::needless_lifetimes)]
    fn add_note(&self, text: &str) -> Result<(), ToolError>;
    #[tokio::test]
    fn add_twice(&self, text: &str) -> Result<(), ToolError>;
}

#[queries]
pub trait DeleteNotes {
    #[cfg_attr(all(), tokio::test)]
    fn purge(&self) -> Result<usize, ToolError>;
}

fn main() {}
