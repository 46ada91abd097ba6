//! MCP itself, from `rmcp`, the official Rust SDK. Every rmcp type of this crate stays
//! inside this module, so that an rmcp upgrade touches one place.

#[cfg(feature = "host")]
pub mod client;
