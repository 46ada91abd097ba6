//! A `confirm_message` placeholder that is not an argument stops the registry at start-up.

use aac_tools::{Registry, RegistryError, Text, ToolError, mcp_tool};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
struct NoteId {
    #[allow(dead_code)]
    note_id: String,
}

/// Delete a note.
#[mcp_tool(destructive, scope = "notes:write", confirm_message = "Delete {note}?")]
async fn wipe(_args: NoteId) -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

#[test]
fn an_unknown_placeholder_is_refused() {
    let err = Registry::collect().unwrap_err();
    assert_eq!(
        err,
        RegistryError::UnknownConfirmField {
            tool: "wipe".to_owned(),
            field: "note".to_owned(),
        }
    );
    assert!(err.to_string().contains("`{note}`"), "{err}");
}
