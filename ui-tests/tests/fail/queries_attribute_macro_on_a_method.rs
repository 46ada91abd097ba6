//! An attribute macro on a method of an `Update…` or `Delete…` trait, or on the trait
//! below `#[queries]`, expands after it, and could take away the bound it added: only
//! the compiler's own attributes, by a single name, are allowed there.
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

/// A path may name a module of the crate's own: only single names pass.
#[queries]
pub trait UpdateTags {
    #[clippy::strip_where]
    fn tag(&self, tag: &str) -> Result<(), ToolError>;
}

/// An attribute macro below `#[queries]`, on the trait, expands after it.
#[queries]
#[tokio::main]
pub trait DeleteTags {
    fn untag(&self, tag: &str) -> Result<(), ToolError>;
}

fn main() {}
