//! An MCP client for hosts (rmcp's client), used by the host-side policy.
