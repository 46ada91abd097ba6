//! Benchmarks of aac-tools against rmcp's own macros, side by side; see
//! `docs/benchmarks.md`.
//!
//! The same 150 tools exist in two flavours: [`aac_flavour`] (`#[mcp_tool]`) and
//! [`rmcp_flavour`] (`#[tool]`, `#[tool_router]`, `#[tool_handler]`). [`variant`] serves
//! them as the four servers compared, [`load`] drives them with real MCP clients,
//! [`pipeline`] measures the pipeline alone, [`mem`] reads resident sets and
//! [`compile`] times the build of a 150-tool crate in each flavour.

pub mod aac_flavour;
pub mod compile;
pub mod durable;
pub mod load;
pub mod mem;
pub mod pipeline;
pub mod postgres_audit;
pub mod report;
pub mod rmcp_flavour;
pub mod stats;
pub mod tools;
pub mod variant;
pub mod work;
