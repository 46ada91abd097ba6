//! Every combination of flags, and the hints each one advertises.

use aac_tools::{Registry, Text, ToolError, mcp_tool};
use serde_json::json;

macro_rules! tools {
    ($($name:ident: ($($flag:ident),*);)*) => {$(
        /// A tool.
        #[mcp_tool($($flag,)* scope = "flags:test")]
        async fn $name() -> Result<Text, ToolError> {
            Ok(Text(stringify!($name).into()))
        }
    )*};
}

tools! {
    plain: ();
    idem: (idempotent);
    open: (open_world);
    idem_open: (idempotent, open_world);
    ro: (read_only);
    ro_idem: (read_only, idempotent);
    ro_open: (read_only, open_world);
    ro_idem_open: (open_world, idempotent, read_only);
    de: (destructive);
    de_idem: (destructive, idempotent);
    de_open: (destructive, open_world);
    de_idem_open: (destructive, idempotent, open_world);
}

fn main() {
    let registry = Registry::collect().unwrap();
    // (readOnlyHint, destructiveHint, idempotentHint, openWorldHint, access level)
    let expected = [
        ("plain", false, false, false, false, "write"),
        ("idem", false, false, true, false, "write"),
        ("open", false, false, false, true, "write"),
        ("idem_open", false, false, true, true, "write"),
        ("ro", true, false, true, false, "read"),
        ("ro_idem", true, false, true, false, "read"),
        ("ro_open", true, false, true, true, "read"),
        ("ro_idem_open", true, false, true, true, "read"),
        ("de", false, true, false, false, "delete"),
        ("de_idem", false, true, true, false, "delete"),
        ("de_open", false, true, false, true, "delete"),
        ("de_idem_open", false, true, true, true, "delete"),
    ];
    assert_eq!(registry.len(), expected.len());
    for (name, read_only, destructive, idempotent, open_world, access) in expected {
        let tool = registry.get(name).unwrap().json();
        assert_eq!(
            tool["annotations"]["readOnlyHint"],
            json!(read_only),
            "{name}"
        );
        assert_eq!(
            tool["annotations"]["destructiveHint"],
            json!(destructive),
            "{name}"
        );
        assert_eq!(
            tool["annotations"]["idempotentHint"],
            json!(idempotent),
            "{name}"
        );
        assert_eq!(
            tool["annotations"]["openWorldHint"],
            json!(open_world),
            "{name}"
        );
        assert_eq!(
            tool["_meta"]["aac-tools.dev/access"],
            json!(access),
            "{name}"
        );
        let confirm = &tool["inputSchema"]["properties"]["confirm"];
        assert_eq!(confirm.is_object(), destructive, "{name}");
    }
}
