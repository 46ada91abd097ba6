//! The resources, prompts and completion the conformance suite reads, one per scenario.

use aac_tools::{
    Completion, Content, PromptMessage, ResourceContents, ToolError, mcp_prompt, mcp_resource,
};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::tools::PNG;

/// A static text resource.
#[mcp_resource(
    uri = "test://static-text",
    scope = "conformance:run",
    mime_type = "text/plain"
)]
async fn static_text() -> Result<ResourceContents, ToolError> {
    Ok(ResourceContents::text(
        "This is the content of the static text resource.",
    ))
}

/// A static binary resource (a 1x1 PNG).
#[mcp_resource(
    uri = "test://static-binary",
    scope = "conformance:run",
    mime_type = "image/png"
)]
async fn static_binary() -> Result<ResourceContents, ToolError> {
    Ok(ResourceContents::blob(PNG))
}

/// The template's variables.
#[derive(Deserialize, JsonSchema)]
struct TemplateVars {
    id: String,
}

/// A resource template: the data of one id.
#[mcp_resource(
    uri = "test://template/{id}/data",
    scope = "conformance:run",
    mime_type = "application/json",
    complete = complete_id
)]
async fn template_data(vars: TemplateVars) -> Result<ResourceContents, ToolError> {
    let body = serde_json::json!({
        "id": vars.id,
        "templateTest": true,
        "data": format!("Data for ID: {}", vars.id),
    });
    Ok(ResourceContents::text(body.to_string()))
}

/// Completes template ids.
async fn complete_id(completion: Completion) -> Result<Vec<String>, ToolError> {
    Ok(["123", "456", "789"]
        .into_iter()
        .filter(|id| id.starts_with(&completion.value))
        .map(str::to_owned)
        .collect())
}

/// A resource clients subscribe to.
#[mcp_resource(
    uri = "test://watched-resource",
    scope = "conformance:run",
    mime_type = "text/plain"
)]
async fn watched_resource() -> Result<ResourceContents, ToolError> {
    Ok(ResourceContents::text("Watched resource content"))
}

/// A prompt without arguments.
#[mcp_prompt(scope = "conformance:run")]
async fn test_simple_prompt() -> Result<PromptMessage, ToolError> {
    Ok(PromptMessage::user("This is a simple prompt for testing."))
}

/// The two arguments of `test_prompt_with_arguments`.
#[derive(Deserialize, JsonSchema)]
struct TwoArgs {
    /// First test argument.
    arg1: String,
    /// Second test argument.
    arg2: String,
}

/// A prompt with two required arguments.
#[mcp_prompt(scope = "conformance:run", complete = complete_arg)]
async fn test_prompt_with_arguments(args: TwoArgs) -> Result<PromptMessage, ToolError> {
    Ok(PromptMessage::user(format!(
        "Prompt with arguments: arg1='{}', arg2='{}'",
        args.arg1, args.arg2
    )))
}

/// Completes the arguments of `test_prompt_with_arguments`.
async fn complete_arg(completion: Completion) -> Result<Vec<String>, ToolError> {
    Ok(["paris", "park", "party"]
        .into_iter()
        .filter(|v| v.starts_with(&completion.value))
        .map(str::to_owned)
        .collect())
}

/// The argument of `test_prompt_with_embedded_resource`.
#[derive(Deserialize, JsonSchema)]
struct EmbedArgs {
    /// URI of the resource to embed.
    #[serde(rename = "resourceUri")]
    resource_uri: String,
}

/// A prompt that embeds a resource.
#[mcp_prompt(scope = "conformance:run")]
async fn test_prompt_with_embedded_resource(
    args: EmbedArgs,
) -> Result<Vec<PromptMessage>, ToolError> {
    Ok(vec![
        PromptMessage::user(Content::ResourceText {
            uri: args.resource_uri,
            mime_type: "text/plain".into(),
            text: "Embedded resource content for testing.".into(),
        }),
        PromptMessage::user("Please process the embedded resource above."),
    ])
}

/// A prompt with an image.
#[mcp_prompt(scope = "conformance:run")]
async fn test_prompt_with_image() -> Result<Vec<PromptMessage>, ToolError> {
    Ok(vec![
        PromptMessage::user(Content::Image {
            data: PNG.into(),
            mime_type: "image/png".into(),
        }),
        PromptMessage::user("Please analyze the image above."),
    ])
}
