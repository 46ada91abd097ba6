use aac_tools::sqlite::WriteDb;
use aac_tools::{PromptMessage, ToolError, mcp_prompt};

/// Prompts are read-only: a writing handle does not compile.
#[mcp_prompt(scope = "notes:read")]
async fn summarise(db: WriteDb) -> Result<PromptMessage, ToolError> {
    let _ = db;
    Ok(PromptMessage::user("summarise"))
}

fn main() {}
