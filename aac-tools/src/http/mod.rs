//! The HTTP surface: Streamable HTTP at `/mcp`, `GET /tools`, `POST /tools/{name}` and
//! the OAuth protected-resource metadata, on axum.
