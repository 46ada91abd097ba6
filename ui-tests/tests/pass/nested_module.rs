//! Tools inside nested modules are registered, and can be collected by module.

mod api {
    pub mod notes {
        use aac_tools::{Text, ToolError, mcp_tool};

        /// Deep inside.
        #[mcp_tool(read_only, scope = "notes:read")]
        pub async fn deep() -> Result<Text, ToolError> {
            Ok(Text("deep".into()))
        }
    }

    pub mod tags {
        use aac_tools::{Text, ToolError, mcp_tool};

        /// Beside it.
        #[mcp_tool(read_only, scope = "tags:read")]
        async fn beside() -> Result<Text, ToolError> {
            Ok(Text("beside".into()))
        }
    }
}

fn main() {
    use aac_tools::Registry;
    assert_eq!(Registry::collect().unwrap().len(), 2);
    let notes = Registry::collect_module(concat!(module_path!(), "::api::notes")).unwrap();
    let names: std::vec::Vec<&str> = notes.tools().iter().map(|t| t.name()).collect();
    assert_eq!(names, ["deep"]);
    let _ = api::notes::deep;
}
