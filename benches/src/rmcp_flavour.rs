//! The same 150 tools written with rmcp's own `#[tool]` / `#[tool_router]` /
//! `#[tool_handler]` macros: the baselines (c), with a stored router, and (d), with
//! `#[tool_handler]`'s default, which rebuilds the router on every call.

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::model::Tool;
use rmcp::{ServerHandler, tool, tool_handler, tool_router};

use crate::work::{BenchArgs, BenchOut, work};

/// Variant (c): the router is built once and stored (`#[tool_handler(router = self.tool_router)]`).
#[derive(Debug, Clone)]
pub struct StoredRouter {
    tool_router: ToolRouter<StoredRouter>,
}

impl StoredRouter {
    /// A server with its router built.
    pub fn new() -> StoredRouter {
        StoredRouter {
            tool_router: StoredRouter::tool_router(),
        }
    }

    /// The tools, as `tools/list` lists them.
    pub fn list(&self) -> Vec<Tool> {
        self.tool_router.list_all()
    }
}

impl Default for StoredRouter {
    fn default() -> Self {
        StoredRouter::new()
    }
}

/// Variant (d): plain `#[tool_handler]`, whose default router expression is
/// `Self::tool_router()`, evaluated on every `tools/call` and `tools/list`.
#[derive(Debug, Clone, Copy, Default)]
pub struct PerCallRouter;

impl PerCallRouter {
    /// The tools, as `tools/list` lists them (building the router, as every call does).
    pub fn list(&self) -> Vec<Tool> {
        PerCallRouter::tool_router().list_all()
    }
}

macro_rules! rmcp_flavour {
    (
        $ty:ident;
        read: [$($r:ident),* $(,)?],
        write: [$($w:ident),* $(,)?],
        destructive: [$($d:ident),* $(,)?] $(,)?
    ) => {
        #[tool_router]
        impl $ty {
            $(
                #[tool(
                    description = "Read a record (benchmark tool).",
                    annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
                )]
                async fn $r(&self, Parameters(args): Parameters<BenchArgs>) -> Result<Json<BenchOut>, String> {
                    Ok(Json(work(stringify!($r), args)))
                }
            )*
            $(
                #[tool(
                    description = "Update a record (benchmark tool).",
                    annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
                )]
                async fn $w(&self, Parameters(args): Parameters<BenchArgs>) -> Result<Json<BenchOut>, String> {
                    Ok(Json(work(stringify!($w), args)))
                }
            )*
            $(
                #[tool(
                    description = "Delete a record (benchmark tool).",
                    annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
                )]
                async fn $d(&self, Parameters(args): Parameters<BenchArgs>) -> Result<Json<BenchOut>, String> {
                    Ok(Json(work(stringify!($d), args)))
                }
            )*
        }
    };
}

crate::tools::with_tools!(rmcp_flavour, StoredRouter);
crate::tools::with_tools!(rmcp_flavour, PerCallRouter);

#[tool_handler(router = self.tool_router)]
impl ServerHandler for StoredRouter {}

#[tool_handler]
impl ServerHandler for PerCallRouter {}
