//! trybuild cases for `#[mcp_tool]`: see `tests/ui.rs`.
