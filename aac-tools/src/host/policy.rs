//! The ask/retry policy over any server's MCP `Tool` definition.

use std::fmt;

use serde_json::{Map, Value};

/// The four annotation hints of a tool, as its server declared them; `None` is absent.
///
/// A hint that is present but not a JSON boolean counts as absent: the policy never
/// guesses what `"yes"` or `1` was meant to say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Hints {
    /// `readOnlyHint`: the tool does not modify its environment.
    pub read_only: Option<bool>,
    /// `destructiveHint`: the tool may perform destructive updates.
    pub destructive: Option<bool>,
    /// `idempotentHint`: calling it again with the same arguments has no further effect.
    pub idempotent: Option<bool>,
    /// `openWorldHint`: the tool reaches an open world of external entities.
    pub open_world: Option<bool>,
}

impl Hints {
    /// No hint at all: what the policy sees of a server it does not trust.
    pub const ABSENT: Hints = Hints {
        read_only: None,
        destructive: None,
        idempotent: None,
        open_world: None,
    };

    /// The hints in `tool["annotations"]` of an MCP `Tool` object.
    ///
    /// ```
    /// use aac_tools::host::Hints;
    /// let tool = serde_json::json!({
    ///     "name": "get_issue",
    ///     "annotations": {"readOnlyHint": true, "openWorldHint": "no"}
    /// });
    /// let hints = Hints::from_tool(&tool);
    /// assert_eq!(hints.read_only, Some(true));
    /// assert_eq!(hints.open_world, None); // not a boolean: absent
    /// assert_eq!(hints.destructive, None);
    /// ```
    pub fn from_tool(tool: &Value) -> Hints {
        let annotations = tool.get("annotations");
        let hint = |key: &str| {
            annotations
                .and_then(|a| a.get(key))
                .and_then(Value::as_bool)
        };
        Hints {
            read_only: hint("readOnlyHint"),
            destructive: hint("destructiveHint"),
            idempotent: hint("idempotentHint"),
            open_world: hint("openWorldHint"),
        }
    }

    /// What `tool["annotations"]` holds that counts as absent because it is not what the
    /// spec says: the keys of the hints present but neither a JSON boolean nor `null`, or
    /// `annotations` itself when it is present but not an object (or `null`). A host
    /// shows these, so that a server's typo does not pass silently as "destructive".
    ///
    /// ```
    /// use aac_tools::host::Hints;
    /// let tool = serde_json::json!({
    ///     "name": "odd",
    ///     "annotations": {"readOnlyHint": "true", "destructiveHint": 0, "idempotentHint": null}
    /// });
    /// assert_eq!(Hints::malformed(&tool), ["readOnlyHint", "destructiveHint"]);
    /// ```
    pub fn malformed(tool: &Value) -> Vec<&'static str> {
        const KEYS: [&str; 4] = [
            "readOnlyHint",
            "destructiveHint",
            "idempotentHint",
            "openWorldHint",
        ];
        match tool.get("annotations") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Object(annotations)) => KEYS
                .into_iter()
                .filter(|key| {
                    annotations
                        .get(*key)
                        .is_some_and(|v| !v.is_boolean() && !v.is_null())
                })
                .collect(),
            Some(_) => vec!["annotations"],
        }
    }

    /// The hints with the MCP defaults in place of the absent ones: `readOnlyHint` false,
    /// `destructiveHint` true, `idempotentHint` false, `openWorldHint` true.
    ///
    /// The spec gives `destructiveHint` and `idempotentHint` a meaning only when
    /// `readOnlyHint` is false; a read-only tool resolves to non-destructive and idempotent,
    /// whatever else it declares.
    pub fn resolve(self) -> ResolvedHints {
        let read_only = self.read_only.unwrap_or(false);
        ResolvedHints {
            read_only,
            destructive: !read_only && self.destructive.unwrap_or(true),
            idempotent: read_only || self.idempotent.unwrap_or(false),
            open_world: self.open_world.unwrap_or(true),
        }
    }
}

/// The hints with every absent one replaced by its MCP default (see [`Hints::resolve`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResolvedHints {
    /// The tool does not modify its environment.
    pub read_only: bool,
    /// The tool may perform destructive updates (never true for a read-only tool).
    pub destructive: bool,
    /// Repeating the call has no further effect (always true for a read-only tool).
    pub idempotent: bool,
    /// The tool reaches an open world of external entities.
    pub open_world: bool,
}

/// Whether the host trusts the server's annotations.
///
/// The spec: clients must consider tool annotations untrusted unless they come from a
/// trusted server. An untrusted server's hints are treated as absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Trust {
    /// The host trusts this server: its hints are used as declared.
    Trusted,
    /// The host does not trust this server: its hints are ignored.
    Untrusted,
}

/// Must the user be asked before the call?
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Consent {
    /// Read-only, from a trusted server: may run without asking.
    NotNeeded,
    /// A trusted server declares the tool as writing but not destructive (additive updates
    /// only): neither read-only nor destructive, so whether to ask is the host's choice.
    HostChoice,
    /// Must ask first, for the reason given.
    Required(AskReason),
    /// A trusted server asks the person itself before this destructive tool runs (it
    /// advertises `aac-tools.dev/confirm: "user"`, [`crate::META_CONFIRM`]): the host shows
    /// the server's question when it comes (an elicitation) instead of asking first, and
    /// sends [`ToolPolicy::confirmed_arguments`]. A server that falls back to the model's
    /// `confirm: true` (`user-or-argument`) does not count: the host might not be asked.
    AskedByServer,
}

/// Why a tool must be confirmed by the user before it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AskReason {
    /// The trusted server declares `destructiveHint: true`.
    Destructive,
    /// The trusted server leaves out a hint that would clear the tool, so the spec default
    /// (destructive) applies.
    HintsMissing,
    /// The server is not trusted, so its hints count as absent and the tool is destructive
    /// by default.
    Untrusted,
}

impl AskReason {
    /// A short lowercase explanation, for a prompt.
    pub const fn describe(self) -> &'static str {
        match self {
            AskReason::Destructive => "the server declares this tool destructive",
            AskReason::HintsMissing => {
                "the server does not declare this tool read-only or non-destructive, \
                 so it is treated as destructive"
            }
            AskReason::Untrusted => {
                "the server is not trusted, so its annotations are ignored \
                 and the tool is treated as destructive"
            }
        }
    }
}

impl fmt::Display for AskReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// May a call be sent again after a transport failure, when nobody knows whether the
/// server received it?
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Retry {
    /// Read-only or idempotent: a second delivery changes nothing, so retry with backoff.
    Safe,
    /// Not idempotent: never retried automatically; report the failure instead.
    Never,
}

/// A tool definition the policy cannot read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidTool(String);

impl fmt::Display for InvalidTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidTool {}

/// What a host should do with one tool of one server.
///
/// Built from the `Tool` object of any MCP server's `tools/list` (not only servers built
/// with aac-tools) and from whether the host trusts that server.
///
/// ```
/// use aac_tools::host::{AskReason, Consent, Retry, ToolPolicy, Trust};
/// use serde_json::json;
///
/// let delete = json!({
///     "name": "delete_issue",
///     "title": "Delete issue",
///     "inputSchema": {"type": "object", "properties": {"id": {"type": "string"}, "confirm": {"type": "boolean"}}},
///     "annotations": {"readOnlyHint": false, "destructiveHint": true, "idempotentHint": true, "openWorldHint": false}
/// });
/// let policy = ToolPolicy::new(&delete, Trust::Trusted).unwrap();
/// assert_eq!(policy.consent(), Consent::Required(AskReason::Destructive));
/// assert_eq!(policy.retry(), Retry::Safe);
/// assert!(policy.declares_confirm());
///
/// // The same definition from a server the host does not trust: hints ignored.
/// let policy = ToolPolicy::new(&delete, Trust::Untrusted).unwrap();
/// assert_eq!(policy.consent(), Consent::Required(AskReason::Untrusted));
/// assert_eq!(policy.retry(), Retry::Never);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolPolicy {
    name: String,
    title: String,
    declared: Hints,
    malformed: Vec<&'static str>,
    trust: Trust,
    resolved: ResolvedHints,
    consent: Consent,
    retry: Retry,
    declares_confirm: bool,
}

impl ToolPolicy {
    /// The policy for one `Tool` object of `tools/list`.
    ///
    /// Fails only when the definition is not an object with a string `name`.
    pub fn new(tool: &Value, trust: Trust) -> Result<ToolPolicy, InvalidTool> {
        let Some(object) = tool.as_object() else {
            return Err(InvalidTool(
                "a tool definition must be a JSON object".into(),
            ));
        };
        let Some(name) = object.get("name").and_then(Value::as_str) else {
            return Err(InvalidTool(
                "a tool definition must have a string `name`".into(),
            ));
        };
        let title = object
            .get("title")
            .and_then(Value::as_str)
            .or_else(|| {
                object
                    .get("annotations")
                    .and_then(|a| a.get("title"))
                    .and_then(Value::as_str)
            })
            .filter(|t| !t.trim().is_empty())
            .unwrap_or(name)
            .to_owned();
        let declared = Hints::from_tool(tool);
        let used = match trust {
            Trust::Trusted => declared,
            Trust::Untrusted => Hints::ABSENT,
        };
        let resolved = used.resolve();
        let consent = if resolved.read_only {
            Consent::NotNeeded
        } else if !resolved.destructive {
            Consent::HostChoice
        } else if trust == Trust::Untrusted {
            Consent::Required(AskReason::Untrusted)
        } else if used.destructive == Some(true)
            && object
                .get("_meta")
                .and_then(|m| m.get(crate::registry::META_CONFIRM))
                .and_then(Value::as_str)
                == Some("user")
        {
            Consent::AskedByServer
        } else if used.destructive == Some(true) {
            Consent::Required(AskReason::Destructive)
        } else {
            Consent::Required(AskReason::HintsMissing)
        };
        let retry = if resolved.read_only || resolved.idempotent {
            Retry::Safe
        } else {
            Retry::Never
        };
        let declares_confirm = object
            .get("inputSchema")
            .and_then(|s| s.get("properties"))
            .and_then(Value::as_object)
            .is_some_and(|p| p.contains_key("confirm"));
        Ok(ToolPolicy {
            name: name.to_owned(),
            title,
            declared,
            malformed: Hints::malformed(tool),
            trust,
            resolved,
            consent,
            retry,
            declares_confirm,
        })
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name to show a person: `title`, else `annotations.title`, else the name.
    pub fn title(&self) -> &str {
        &self.title
    }

    /// The hints as the server declared them, trusted or not.
    pub fn declared(&self) -> Hints {
        self.declared
    }

    /// The hints the server declared in a form that counts as absent (see
    /// [`Hints::malformed`]), trusted or not: empty for a well-formed definition.
    pub fn malformed_hints(&self) -> &[&'static str] {
        &self.malformed
    }

    /// Whether the host trusts the server.
    pub fn trust(&self) -> Trust {
        self.trust
    }

    /// The hints the policy decided on: the declared ones if the server is trusted, none
    /// otherwise, with the spec defaults in place of the absent ones.
    pub fn resolved(&self) -> ResolvedHints {
        self.resolved
    }

    /// Must the user be asked first?
    pub fn consent(&self) -> Consent {
        self.consent
    }

    /// True for a read-only tool of a trusted server.
    pub fn may_run_without_asking(&self) -> bool {
        self.consent == Consent::NotNeeded
    }

    /// True when the tool is destructive, declared or by default, and the host must ask
    /// before it calls (not when the server asks the person itself:
    /// [`Consent::AskedByServer`]).
    pub fn must_ask(&self) -> bool {
        matches!(self.consent, Consent::Required(_))
    }

    /// May the call be retried after a transport failure?
    pub fn retry(&self) -> Retry {
        self.retry
    }

    /// True for a read-only or idempotent tool.
    pub fn safe_to_retry(&self) -> bool {
        self.retry == Retry::Safe
    }

    /// Whether the tool's input schema declares a `confirm` property.
    pub fn declares_confirm(&self) -> bool {
        self.declares_confirm
    }

    /// The arguments to send once the user has said yes: `confirm: true` added when the
    /// tool declares a `confirm` property, the arguments unchanged otherwise.
    ///
    /// Call it only after an explicit yes; an unconfirmed call sends the arguments as given
    /// (or, for a tool that must ask, nothing at all).
    pub fn confirmed_arguments(&self, mut arguments: Map<String, Value>) -> Map<String, Value> {
        if self.declares_confirm {
            arguments.insert("confirm".to_owned(), Value::Bool(true));
        }
        arguments
    }
}
