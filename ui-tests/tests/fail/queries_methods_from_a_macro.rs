//! A method an `Update…` trait declares through a macro would get no bound, and be
//! callable from a read-only tool: the macro itself is refused.
use aac_tools::{ToolError, queries};

macro_rules! query_fn {
    ($name:ident) => {
        fn $name(&self, text: &str) -> Result<(), ToolError>;
    };
}

#[queries]
pub trait UpdateNotes {
    query_fn!(add_note);
}

#[queries]
pub trait DeleteNotes {
    query_fn!(purge);
}

/// A read trait's methods are callable at every level anyway.
#[queries]
pub trait ReadNotes {
    query_fn!(find);
}

fn main() {}
