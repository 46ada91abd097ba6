//! The interop test server as a process.
//!
//! ```text
//! interop-server --db PATH --audit PATH [--read-only] [--confirm POLICY] stdio
//! interop-server --db PATH --audit PATH [--read-only] http ADDR [--stateless]
//! interop-server --db PATH --audit PATH token SUBJECT [SCOPE...]
//! ```
//!
//! Over stdio the bearer token comes from `AAC_TOKEN`. Over HTTP the first line on
//! stdout is `listening on http://ADDR/mcp`.

use std::process::ExitCode;

use aac_tools::audit::JsonLinesSink;
use aac_tools::http::{HttpOptions, serve};
use interop_tests::{Options, build_server, open_database};

const USAGE: &str = "usage: interop-server --db PATH --audit PATH [--read-only] [--confirm POLICY] \
                     (stdio | http ADDR [--stateless] | token SUBJECT [SCOPE...])";

/// The authorization server named in the protected-resource metadata.
const AUTHORIZATION_SERVER: &str = "https://auth.example.test";

#[tokio::main]
async fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("interop-server: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Vec<String>) -> Result<(), Box<dyn std::error::Error>> {
    let mut db = None;
    let mut audit = None;
    let mut read_only = false;
    let mut stateless = false;
    let mut confirmation = aac_tools::confirm::ConfirmPolicy::Argument;
    let mut rest = Vec::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--db" => db = args.next(),
            "--audit" => audit = args.next(),
            "--read-only" => read_only = true,
            "--stateless" => stateless = true,
            "--confirm" => confirmation = args.next().unwrap_or_default().parse()?,
            _ => rest.push(arg),
        }
    }
    let (Some(db), Some(audit)) = (db, audit) else {
        return Err(USAGE.into());
    };
    let db = open_database(db)?;
    let server = build_server(
        &db,
        JsonLinesSink::file(audit)?,
        Options {
            read_only,
            confirmation,
            ..Options::default()
        },
    )?;
    match rest.as_slice() {
        [mode, subject, scopes @ ..] if mode == "token" => {
            let scopes: Vec<&str> = scopes.iter().map(String::as_str).collect();
            let store = aac_tools::sqlite::TokenStore::open(&db)?;
            println!(
                "{}",
                store.create(subject, Some("interop"), &scopes, None)?.token
            );
        }
        [mode] if mode == "stdio" => {
            aac_tools::mcp::serve_stdio(server, std::env::var("AAC_TOKEN").ok()).await?;
        }
        [mode, addr] if mode == "http" => {
            let listener = tokio::net::TcpListener::bind(addr).await?;
            println!("listening on http://{}/mcp", listener.local_addr()?);
            // MCP clients require at least one authorization server in the RFC 9728
            // metadata; this one only has to be a URL (no client here runs OAuth).
            let options = HttpOptions::default()
                .stateless(stateless)
                .authorization_servers(vec![AUTHORIZATION_SERVER.to_owned()]);
            serve(server, listener, options).await?;
        }
        _ => return Err(USAGE.into()),
    }
    Ok(())
}
