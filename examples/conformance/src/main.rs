//! An aac-tools server implementing the tool scenarios of the official MCP conformance
//! suite (`@modelcontextprotocol/conformance`), over Streamable HTTP at `/mcp`.
//!
//! ```text
//! cargo run -p conformance -- 127.0.0.1:3001
//! ```
//!
//! The suite's client sends no token, so this server opts in to unauthenticated calls
//! with `ServerBuilder::danger_allow_unauthenticated`: anyone who reaches it acts as the
//! principal `conformance-suite` with the scope `conformance:run`. Never copy that line
//! into a real server.

mod items;
mod tools;

use std::process::ExitCode;

use aac_tools::audit::JsonLinesSink;
use aac_tools::http::{HttpOptions, serve};
use aac_tools::{Principal, Registry, Server};

const USAGE: &str =
    "usage: conformance [ADDR]   (default 127.0.0.1:3001; port 0 picks a free port)";

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let addr = match (args.next(), args.next()) {
        (None, _) => "127.0.0.1:3001".to_owned(),
        (Some(flag), _) if flag == "-h" || flag == "--help" => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        (Some(addr), None) => addr,
        (Some(_), Some(_)) => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&addr).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("conformance: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run(addr: &str) -> Result<(), Box<dyn std::error::Error>> {
    let server = Server::builder(Registry::collect()?)
        .name("aac-tools-conformance", env!("CARGO_PKG_VERSION"))
        // The suite's client sends no token. Only for this test server.
        .danger_allow_unauthenticated(Principal::new("conformance-suite", [tools::SCOPE]))
        // One JSON line per call on stderr.
        .audit(JsonLinesSink::stderr())
        .build()?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    // The first line on stdout says where the server listens (scripts read it).
    println!("listening on http://{local}/mcp");
    serve(server, listener, HttpOptions::default()).await?;
    Ok(())
}
