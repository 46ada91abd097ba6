//! Benchmarks of aac-tools against rmcp's own macros, side by side; see
//! `docs/benchmarks.md`.
//!
//! The same 150 tools exist in two flavours: [`aac_flavour`] (`#[mcp_tool]`) and
//! [`rmcp_flavour`] (`#[tool]`, `#[tool_router]`, `#[tool_handler]`).

pub mod aac_flavour;
pub mod rmcp_flavour;
pub mod tools;
pub mod work;
