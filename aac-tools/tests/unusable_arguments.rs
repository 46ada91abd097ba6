//! A resource or prompt whose arguments MCP can never fill (it sends strings: a template's
//! variables, a prompt's arguments) stops the registry at start-up, naming it, the field
//! and what to do; so do two templates that differ only in their variables' names.

use aac_tools::{Registry, RegistryError};

fn unusable(module: &str) -> String {
    let prefix = format!("{}::{module}", module_path!());
    match Registry::collect_module(&prefix) {
        Err(err @ RegistryError::UnusableArguments { .. }) => err.to_string(),
        other => panic!("{module}: {:?}", other.map(|_| ())),
    }
}

mod counted {
    use aac_tools::{PromptMessage, ToolError, mcp_prompt};

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Args {
        topic: String,
        /// How many lines.
        count: u32,
    }

    /// Summarise, in `count` lines.
    #[mcp_prompt(scope = "t:read")]
    async fn summarise(a: Args) -> Result<PromptMessage, ToolError> {
        Ok(PromptMessage::user(format!("{} {}", a.topic, a.count)))
    }
}

mod optional_count {
    use aac_tools::{PromptMessage, ToolError, mcp_prompt};

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Args {
        count: Option<u32>,
    }

    /// Summarise.
    #[mcp_prompt(scope = "t:read")]
    async fn summarise_maybe(a: Args) -> Result<PromptMessage, ToolError> {
        Ok(PromptMessage::user(format!("{:?}", a.count)))
    }
}

#[test]
fn a_prompt_argument_that_is_no_string_is_refused() {
    let err = unusable("counted");
    assert!(err.contains("prompt `summarise`"), "{err}");
    assert!(err.contains("argument `count` is not a string"), "{err}");
    assert!(err.contains("make the field a `String`"), "{err}");
    let err = unusable("optional_count");
    assert!(err.contains("argument `count` is not a string"), "{err}");
}

mod numeric_id {
    use aac_tools::{ToolError, mcp_resource};

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct NoteUri {
        id: i64,
    }

    /// A note.
    #[mcp_resource(uri = "notes://{id}", scope = "t:read")]
    async fn note(u: NoteUri) -> Result<String, ToolError> {
        Ok(u.id.to_string())
    }
}

mod extra_field {
    use aac_tools::{ToolError, mcp_resource};

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct ExUri {
        a: String,
        other: String,
    }

    /// An example.
    #[mcp_resource(uri = "ex://{a}", scope = "t:read")]
    async fn ex(u: ExUri) -> Result<String, ToolError> {
        Ok(u.a + &u.other)
    }
}

mod dropped_variable {
    use aac_tools::{ToolError, mcp_resource};

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct TwoUri {
        a: String,
    }

    /// Two parts, one read.
    #[mcp_resource(uri = "two://{a}/{b}", scope = "t:read")]
    async fn two(u: TwoUri) -> Result<String, ToolError> {
        Ok(u.a)
    }
}

mod no_arguments {
    use aac_tools::{ToolError, mcp_resource};

    /// A variable for no one.
    #[mcp_resource(uri = "bare://{a}", scope = "t:read")]
    async fn bare() -> Result<String, ToolError> {
        Ok(String::new())
    }
}

#[test]
fn a_template_variable_must_be_a_string_field_and_every_required_field_a_variable() {
    let err = unusable("numeric_id");
    assert!(err.contains("resource `notes://{id}`"), "{err}");
    assert!(err.contains("field `id` is not a string"), "{err}");
    let err = unusable("extra_field");
    assert!(err.contains("resource `ex://{a}`"), "{err}");
    assert!(err.contains("requires the field `other`"), "{err}");
    let err = unusable("dropped_variable");
    assert!(err.contains("resource `two://{a}/{b}`"), "{err}");
    assert!(err.contains("has no field `b`"), "{err}");
    let err = unusable("no_arguments");
    assert!(err.contains("`{a}` reaches nothing"), "{err}");
}

mod usable {
    use aac_tools::{PromptMessage, ToolError, mcp_prompt, mcp_resource};

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct NoteUri {
        id: String,
        /// Not in the URI, and not required.
        #[serde(default)]
        version: Option<u32>,
    }

    /// A note.
    #[mcp_resource(uri = "notes://{id}", scope = "t:read")]
    async fn note(u: NoteUri) -> Result<String, ToolError> {
        Ok(format!("{}{:?}", u.id, u.version))
    }

    /// Every note.
    #[mcp_resource(uri = "notes://all", scope = "t:read")]
    async fn all() -> Result<String, ToolError> {
        Ok(String::new())
    }

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    enum Tone {
        Short,
        Long,
    }

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Args {
        topic: String,
        style: Option<String>,
        tone: Tone,
    }

    /// Summarise.
    #[mcp_prompt(scope = "t:read")]
    async fn summarise(a: Args) -> Result<PromptMessage, ToolError> {
        let tone = match a.tone {
            Tone::Short => "short",
            Tone::Long => "long",
        };
        Ok(PromptMessage::user(format!(
            "{}{:?}{tone}",
            a.topic, a.style
        )))
    }
}

#[test]
fn string_arguments_and_variables_start() {
    let registry = Registry::collect_module(&format!("{}::usable", module_path!())).unwrap();
    assert_eq!(
        (registry.resources().len(), registry.prompts().len()),
        (2, 1)
    );
}

mod same_shape {
    use aac_tools::{ToolError, mcp_resource};

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct A {
        a: String,
    }
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct B {
        b: String,
    }

    /// Public docs.
    #[mcp_resource(uri = "docs://{a}", scope = "public:read")]
    async fn public_doc(u: A) -> Result<String, ToolError> {
        Ok(u.a)
    }

    /// Secret docs: the same URIs, another scope.
    #[mcp_resource(uri = "docs://{b}", scope = "secret:read")]
    async fn secret_doc(u: B) -> Result<String, ToolError> {
        Ok(u.b)
    }
}

#[test]
fn templates_that_differ_only_in_their_variables_are_one_uri() {
    let err = Registry::collect_module(&format!("{}::same_shape", module_path!()))
        .map(|_| ())
        .unwrap_err();
    let RegistryError::DuplicateName {
        name,
        first,
        second,
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(name, "docs://{a}` and `docs://{b}");
    assert!(first.contains("public_doc") && second.contains("secret_doc"));
    assert!(
        err.to_string()
            .starts_with("two resources answer to `docs://{a}` and `docs://{b}`: "),
        "{err}"
    );
}
