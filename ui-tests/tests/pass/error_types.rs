//! Error types that convert into `ToolError`, and a `Result` alias.

use aac_tools::{Registry, Status, Text, ToolError, mcp_tool};

enum NoteError {
    Missing(u32),
}

impl From<NoteError> for ToolError {
    fn from(err: NoteError) -> ToolError {
        match err {
            NoteError::Missing(id) => {
                ToolError::new(Status::NotFound, "not_found", format!("no note {id}"))
            }
        }
    }
}

/// An error of its own.
#[mcp_tool(read_only, scope = "notes:read")]
async fn own_error() -> Result<Text, NoteError> {
    Err(NoteError::Missing(7))
}

type NoteResult<T> = std::result::Result<T, NoteError>;

/// A `Result` alias.
#[mcp_tool(read_only, scope = "notes:read")]
async fn aliased() -> NoteResult<Text> {
    Ok(Text("hi".into()))
}

fn main() {
    assert_eq!(Registry::collect().unwrap().len(), 2);
}
