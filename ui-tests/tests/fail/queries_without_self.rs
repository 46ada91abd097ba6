//! The bound of an `Update…` or `Delete…` method is on `Self`, the transaction it is
//! called on. A function without `self` has a `Self` its caller names
//! (`<Tx<Write> as UpdateNotes>::add_note(read_tx, …)` from a read-only tool), and a
//! constant has no bound at all: both are refused, in read traits they are fine.
use aac_tools::access::Level;
use aac_tools::sqlite::Tx;
use aac_tools::{ToolError, queries};

#[queries]
pub trait UpdateNotes {
    fn add_note<M: Level>(tx: &Tx<'_, M>, text: &str) -> Result<(), ToolError>;
    const ADD: fn(&str) -> Result<(), ToolError>;
}

#[queries]
pub trait DeleteNotes {
    fn purge<M: Level>(tx: &Tx<'_, M>) -> Result<usize, ToolError>;
    /// Allowed: a method on the transaction, and an associated type.
    fn purge_all(&self) -> Result<usize, ToolError>;
    type Key;
}

#[queries]
pub trait ReadNotes {
    fn count<M: Level>(tx: &Tx<'_, M>) -> Result<usize, ToolError>;
    const LIMIT: usize;
}

fn main() {}
