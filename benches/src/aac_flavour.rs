//! The 150 tools written with `#[mcp_tool]`, for variants (a) and (b).

use aac_tools::{Registry, RegistryError, ToolError, mcp_tool};

use crate::work::{BenchArgs, BenchOut, work};

/// The scope of the read-only tools.
pub const SCOPE_READ: &str = "bench:read";
/// The scope of the write and destructive tools.
pub const SCOPE_WRITE: &str = "bench:write";

macro_rules! aac_flavour {
    (
        ;
        read: [$($r:ident),* $(,)?],
        write: [$($w:ident),* $(,)?],
        destructive: [$($d:ident),* $(,)?] $(,)?
    ) => {
        $(
            /// Read a record (benchmark tool).
            #[mcp_tool(read_only, scope = "bench:read")]
            async fn $r(args: BenchArgs) -> Result<BenchOut, ToolError> {
                Ok(work(stringify!($r), args))
            }
        )*
        $(
            /// Update a record (benchmark tool).
            #[mcp_tool(idempotent, scope = "bench:write")]
            async fn $w(args: BenchArgs) -> Result<BenchOut, ToolError> {
                Ok(work(stringify!($w), args))
            }
        )*
        $(
            /// Delete a record (benchmark tool).
            #[mcp_tool(destructive, idempotent, scope = "bench:write")]
            async fn $d(args: BenchArgs) -> Result<BenchOut, ToolError> {
                Ok(work(stringify!($d), args))
            }
        )*
    };
}

crate::tools::with_tools!(aac_flavour);

/// The registry of the 150 aac-tools benchmark tools.
pub fn registry() -> Result<Registry, RegistryError> {
    Registry::collect_module(module_path!())
}
