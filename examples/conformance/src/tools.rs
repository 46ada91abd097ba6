//! The tools the conformance suite calls, one per scenario.

use std::time::Duration;

use aac_tools::{Content, Ctx, LogLevel, Text, ToolError, ToolOutput, mcp_tool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// The one scope every tool here needs.
pub(crate) const SCOPE: &str = "conformance:run";

/// A 1x1 transparent PNG.
pub(crate) const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

/// A WAV file of one silent sample (44-byte header, 8-bit mono, 8 kHz).
const WAV: &str = "UklGRiUAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQEAAACA";

/// Answer with one text item.
#[mcp_tool(read_only, scope = "conformance:run")]
async fn test_simple_text() -> Result<Text, ToolError> {
    Ok(Text("This is a simple text response for testing.".into()))
}

/// Answer with one image item (a 1x1 PNG).
#[mcp_tool(read_only, scope = "conformance:run")]
async fn test_image_content() -> Result<ToolOutput, ToolError> {
    Ok(ToolOutput::content(vec![Content::Image {
        data: PNG.into(),
        mime_type: "image/png".into(),
    }]))
}

/// Answer with one audio item (a tiny WAV file).
#[mcp_tool(read_only, scope = "conformance:run")]
async fn test_audio_content() -> Result<ToolOutput, ToolError> {
    Ok(ToolOutput::content(vec![Content::Audio {
        data: WAV.into(),
        mime_type: "audio/wav".into(),
    }]))
}

/// Answer with an embedded text resource.
#[mcp_tool(read_only, scope = "conformance:run")]
async fn test_embedded_resource() -> Result<ToolOutput, ToolError> {
    Ok(ToolOutput::content(vec![Content::ResourceText {
        uri: "test://embedded-resource".into(),
        mime_type: "text/plain".into(),
        text: "This is an embedded resource content.".into(),
    }]))
}

/// Answer with text, an image and an embedded resource.
#[mcp_tool(read_only, scope = "conformance:run")]
async fn test_multiple_content_types() -> Result<ToolOutput, ToolError> {
    Ok(ToolOutput::content(vec![
        Content::Text {
            text: "Multiple content types test:".into(),
        },
        Content::Image {
            data: PNG.into(),
            mime_type: "image/png".into(),
        },
        Content::ResourceText {
            uri: "test://mixed-content-resource".into(),
            mime_type: "application/json".into(),
            text: json!({"test": "data", "value": 123}).to_string(),
        },
    ]))
}

/// Send three log messages while working.
#[mcp_tool(read_only, scope = "conformance:run")]
async fn test_tool_with_logging(ctx: Ctx) -> Result<Text, ToolError> {
    for (i, message) in [
        "Tool execution started",
        "Tool processing data",
        "Tool execution completed",
    ]
    .into_iter()
    .enumerate()
    {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        ctx.log(LogLevel::Info, message).await?;
    }
    Ok(Text("Tool with logging executed successfully".into()))
}

/// Fail on purpose: the answer is a tool result with `isError: true`.
#[mcp_tool(read_only, scope = "conformance:run")]
async fn test_error_handling() -> Result<Text, ToolError> {
    Err(ToolError::internal(
        "This tool intentionally returns an error for testing",
    ))
}

/// Report progress three times: 0, 50 and 100 of 100.
#[mcp_tool(read_only, scope = "conformance:run")]
async fn test_tool_with_progress(ctx: Ctx) -> Result<Text, ToolError> {
    for (progress, message) in [(0.0, "Starting"), (50.0, "Halfway"), (100.0, "Complete")] {
        ctx.progress(progress, Some(100.0), Some(message)).await?;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(Text("Progress tool completed".into()))
}

#[derive(Deserialize, JsonSchema)]
struct SamplingArgs {
    /// The prompt to send to the client's model.
    prompt: String,
}

/// Ask the client's model to answer a prompt (`sampling/createMessage`).
#[mcp_tool(read_only, scope = "conformance:run")]
async fn test_sampling(ctx: Ctx, args: SamplingArgs) -> Result<Text, ToolError> {
    let result = ctx
        .create_message(json!({
            "messages": [{"role": "user", "content": {"type": "text", "text": args.prompt}}],
            "maxTokens": 100,
        }))
        .await?;
    let text = result["content"]["text"].as_str().unwrap_or("(no text)");
    Ok(Text(format!("LLM response: {text}")))
}

#[derive(Deserialize, JsonSchema)]
struct ElicitationArgs {
    /// The message shown to the user.
    message: String,
}

/// Ask the user for a username and an email (`elicitation/create`).
#[mcp_tool(read_only, scope = "conformance:run")]
async fn test_elicitation(ctx: Ctx, args: ElicitationArgs) -> Result<Text, ToolError> {
    let result = ctx
        .elicit(json!({
            "message": args.message,
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "username": {"type": "string", "description": "User's response"},
                    "email": {"type": "string", "description": "User's email address"},
                },
                "required": ["username", "email"],
            },
        }))
        .await?;
    Ok(Text(describe_elicitation(&result)))
}

/// Ask for five fields that all have defaults (SEP-1034).
#[mcp_tool(read_only, scope = "conformance:run")]
async fn test_elicitation_sep1034_defaults(ctx: Ctx) -> Result<Text, ToolError> {
    let result = ctx
        .elicit(json!({
            "message": "Please review and update the form fields with defaults",
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "User name", "default": "John Doe"},
                    "age": {"type": "integer", "description": "User age", "default": 30},
                    "score": {"type": "number", "description": "User score", "default": 95.5},
                    "status": {
                        "type": "string",
                        "description": "User status",
                        "enum": ["active", "inactive", "pending"],
                        "default": "active",
                    },
                    "verified": {"type": "boolean", "description": "Verification status", "default": true},
                },
            },
        }))
        .await?;
    Ok(Text(describe_elicitation(&result)))
}

/// Ask for the five kinds of enum field (SEP-1330).
#[mcp_tool(read_only, scope = "conformance:run")]
async fn test_elicitation_sep1330_enums(ctx: Ctx) -> Result<Text, ToolError> {
    let result = ctx
        .elicit(json!({
            "message": "Please select options from the enum fields",
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "untitledSingle": {
                        "type": "string",
                        "description": "Select one option",
                        "enum": ["option1", "option2", "option3"],
                    },
                    "titledSingle": {
                        "type": "string",
                        "description": "Select one option with titles",
                        "oneOf": [
                            {"const": "value1", "title": "First Option"},
                            {"const": "value2", "title": "Second Option"},
                            {"const": "value3", "title": "Third Option"},
                        ],
                    },
                    "legacyEnum": {
                        "type": "string",
                        "description": "Select one option (legacy)",
                        "enum": ["opt1", "opt2", "opt3"],
                        "enumNames": ["Option One", "Option Two", "Option Three"],
                    },
                    "untitledMulti": {
                        "type": "array",
                        "description": "Select multiple options",
                        "minItems": 1,
                        "maxItems": 3,
                        "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
                    },
                    "titledMulti": {
                        "type": "array",
                        "description": "Select multiple options with titles",
                        "minItems": 1,
                        "maxItems": 3,
                        "items": {
                            "anyOf": [
                                {"const": "value1", "title": "First Choice"},
                                {"const": "value2", "title": "Second Choice"},
                                {"const": "value3", "title": "Third Choice"},
                            ],
                        },
                    },
                },
                "required": [],
            },
        }))
        .await?;
    Ok(Text(describe_elicitation(&result)))
}

fn describe_elicitation(result: &Value) -> String {
    format!(
        "User response: action={}, content={}",
        result["action"].as_str().unwrap_or("?"),
        result.get("content").unwrap_or(&Value::Null)
    )
}

/// The input schema of `json_schema_2020_12_tool`, verbatim.
fn json_schema_2020_12() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {
            "address": {
                "type": "object",
                "properties": {
                    "street": {"type": "string"},
                    "city": {"type": "string"},
                },
            },
        },
        "properties": {
            "name": {"type": "string"},
            "address": {"$ref": "#/$defs/address"},
        },
        "additionalProperties": false,
    })
}

/// A tool whose input schema uses JSON Schema 2020-12 keywords (`$schema`, `$defs`).
#[mcp_tool(read_only, scope = "conformance:run", input_schema = json_schema_2020_12)]
async fn json_schema_2020_12_tool() -> Result<Text, ToolError> {
    Ok(Text("JSON Schema 2020-12 tool called".into()))
}

/// A tool for the SSE reconnection scenario: answers after a short while.
#[mcp_tool(read_only, scope = "conformance:run")]
async fn test_reconnection() -> Result<Text, ToolError> {
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(Text("Reconnection test completed successfully".into()))
}
