//! The arguments, the output and the behaviour shared by every benchmark tool, in both
//! flavours: the servers compared differ only in the framework around them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The arguments of every benchmark tool.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct BenchArgs {
    /// The record to act on.
    pub id: u64,
    /// A note, echoed back.
    pub text: String,
    /// Labels to attach.
    #[serde(default)]
    pub tags: Vec<String>,
    /// The most items to return.
    pub limit: Option<u32>,
}

/// The structured output of every benchmark tool.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct BenchOut {
    /// The tool that answered.
    pub tool: &'static str,
    /// The record acted on.
    pub id: u64,
    /// The note, echoed.
    pub echo: String,
    /// How many labels were given.
    pub tags: usize,
    /// The limit applied.
    pub limit: u32,
}

/// What every tool does: a little work on its arguments, the same in every flavour.
pub fn work(tool: &'static str, args: BenchArgs) -> BenchOut {
    BenchOut {
        tool,
        id: args.id,
        echo: args.text,
        tags: args.tags.len(),
        limit: args.limit.unwrap_or(50).min(500),
    }
}

/// The arguments the load generator sends to tool `index` (`confirm: true` for the
/// destructive ones, which aac-tools requires and rmcp's structs ignore), as JSON.
pub fn call_arguments(index: usize, seq: u64) -> serde_json::Value {
    let mut args = serde_json::json!({
        "id": seq,
        "text": "the quick brown fox jumps over the lazy dog",
        "tags": ["bench", "mcp"],
        "limit": 20,
    });
    if crate::tools::Kind::of(index) == crate::tools::Kind::Destructive {
        args["confirm"] = serde_json::Value::Bool(true);
    }
    args
}
