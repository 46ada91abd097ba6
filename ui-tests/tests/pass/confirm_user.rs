use aac_tools::{Text, ToolError, mcp_tool};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
pub struct NoteId {
    pub note_id: String,
}

/// Delete a note, once a person said yes.
#[mcp_tool(
    destructive,
    scope = "notes:write",
    confirm = "user",
    confirm_message = "Delete note {note_id}? {{This}} cannot be undone."
)]
async fn wipe(args: NoteId) -> Result<Text, ToolError> {
    Ok(Text(args.note_id))
}

fn main() {
    let registry = aac_tools::Registry::collect().unwrap();
    let def = registry.get("wipe").unwrap().def();
    assert_eq!(def.confirm_policy(), Some(aac_tools::confirm::ConfirmPolicy::User));
    assert!(def.confirm_message().unwrap().starts_with("Delete note {note_id}?"));
}
