//! `rate = "COUNT/UNIT"`: every unit, and what the tool advertises.

use std::time::Duration;

use aac_tools::{META_RATE, Rate, Registry, Text, ToolError, mcp_tool};
use serde_json::json;

/// Thirty a minute.
#[mcp_tool(scope = "runs:write", rate = "30/min")]
async fn per_minute() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

/// Five a second.
#[mcp_tool(read_only, scope = "runs:read", rate = "5/s")]
async fn per_second() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

/// A hundred an hour.
#[mcp_tool(destructive, rate = "100/hour", scope = "runs:write")]
async fn per_hour() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

/// Two a day.
#[mcp_tool(scope = "runs:write", rate = "2/day")]
async fn per_day() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

/// No rate of its own.
#[mcp_tool(scope = "runs:write")]
async fn unlimited() -> Result<Text, ToolError> {
    Ok(Text("done".into()))
}

fn main() {
    let registry = Registry::collect().unwrap();
    let expected = [
        ("per_minute", Some((30, 60))),
        ("per_second", Some((5, 1))),
        ("per_hour", Some((100, 3600))),
        ("per_day", Some((2, 86_400))),
        ("unlimited", None),
    ];
    for (name, rate) in expected {
        let entry = registry.get(name).unwrap();
        assert_eq!(
            entry.def().rate(),
            rate.map(|(count, secs)| Rate::new(count, Duration::from_secs(secs))),
            "{name}"
        );
        let meta = &entry.json()["_meta"];
        match rate {
            Some((count, secs)) => {
                assert_eq!(meta[META_RATE], json!({"count": count, "per_seconds": secs}))
            }
            None => assert!(meta.get(META_RATE).is_none(), "{name}: {meta}"),
        }
    }
}
