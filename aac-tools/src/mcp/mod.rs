//! MCP itself, from `rmcp`, the official Rust SDK. Every rmcp type of this crate stays
//! inside this module, so that an rmcp upgrade touches one place.
//!
//! The server side is an rmcp `ServerHandler` (written by hand, without rmcp's macros)
//! over [`Server`](crate::Server): `tools/list` from the registry's tool objects, converted once;
//! `tools/call` through [`Server::call`](crate::Server::call), so that every check and the audit record
//! happen exactly as on every other transport; `logging/setLevel`; `ping`; and a
//! [`ClientPeer`](crate::ClientPeer) over rmcp's peer for progress, log messages,
//! sampling, elicitation and cancellation. Every protocol version rmcp supports is
//! accepted.
//!
//! Two transports use it: [`serve_stdio`] here (and [`serve_io`], the same over any
//! byte streams), and Streamable HTTP at `/mcp` in [`crate::http`].

#[cfg(feature = "mcp")]
mod handler;
#[cfg(feature = "mcp")]
mod level;
#[cfg(feature = "mcp")]
mod peer;
#[cfg(feature = "http")]
pub(crate) mod streamable;

#[cfg(feature = "host")]
pub mod client;

#[cfg(feature = "mcp")]
pub use self::stdio::{serve_io, serve_stdio};

#[cfg(feature = "mcp")]
mod stdio {
    use std::io;

    use rmcp::ServiceExt;
    use tokio::io::{AsyncRead, AsyncWrite};

    use super::handler::{McpHandler, Shared};
    use crate::context::Transport;
    use crate::server::Server;

    /// Serve MCP over stdin and stdout until the client closes stdin.
    ///
    /// `token` is the caller's bearer token (read it from `AAC_TOKEN`). It is verified
    /// on every `tools/call`, so a revoked or expired token stops working at once;
    /// without one, calls are refused with 401 unless the server was built with
    /// [`ServerBuilder::danger_allow_unauthenticated`](crate::ServerBuilder::danger_allow_unauthenticated).
    /// Audit records say `stdio`.
    ///
    /// Nothing but MCP may be written to stdout while this runs: send logs to stderr.
    ///
    /// When stdin and stdout are pipes (the way MCP clients start servers), they are read
    /// and written on the runtime's I/O reactor, without a hand-off to a blocking thread
    /// per message (on Linux, through rmcp's `stdio_pipes`, which reopens them so that
    /// the process's own standard streams stay blocking); otherwise they are used as
    /// they are. The runtime needs I/O enabled (`#[tokio::main]` has it).
    ///
    /// ```no_run
    /// # async fn run(server: aac_tools::Server) -> std::io::Result<()> {
    /// aac_tools::mcp::serve_stdio(server, std::env::var("AAC_TOKEN").ok()).await
    /// # }
    /// ```
    pub async fn serve_stdio(server: Server, token: Option<String>) -> io::Result<()> {
        let (read, write) = rmcp::transport::stdio_pipes();
        serve_io(server, token, read, write).await
    }

    /// Serve MCP with the stdio framing (one JSON-RPC message per line) over any byte
    /// streams: a socket, a child's pipes, an in-memory [`tokio::io::duplex`] in tests.
    /// Until `read` ends. Everything else is as [`serve_stdio`], whose records also say
    /// `stdio`.
    ///
    /// ```
    /// # async fn run(server: aac_tools::Server) -> std::io::Result<()> {
    /// let (client, server_end) = tokio::io::duplex(64 * 1024);
    /// let (read, write) = tokio::io::split(server_end);
    /// tokio::spawn(aac_tools::mcp::serve_io(server, Some("aac_…".to_owned()), read, write));
    /// // write JSON-RPC lines to `client`, read the answers from it
    /// # drop(client);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn serve_io<R, W>(
        server: Server,
        token: Option<String>,
        read: R,
        write: W,
    ) -> io::Result<()>
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let shared = Shared::new(server)?;
        let handler = McpHandler::new(shared, Transport::Stdio, token);
        let running = handler
            .serve((read, write))
            .await
            .map_err(|err| io::Error::other(format!("the MCP session did not start: {err}")))?;
        running
            .waiting()
            .await
            .map_err(|err| io::Error::other(format!("the MCP session failed: {err}")))?;
        Ok(())
    }
}

/// A principal the HTTP layer verified for this request, carried to the MCP handler in
/// the request's extensions.
#[cfg(feature = "http")]
#[derive(Clone, Debug)]
pub(crate) struct VerifiedPrincipal(pub(crate) std::sync::Arc<crate::Principal>);

/// An attempt the `/mcp` gate began, carried to the MCP handler in the request's
/// extensions, which takes it up ([`Attempt::dispatch`](crate::Attempt)). If the MCP layer
/// answers without dispatching the call, the gate records it ([`PendingAttempt::abandoned`]);
/// if the request is dropped later still untaken, the attempt records itself as not
/// dispatched, with the arguments read back from the body.
/// The attempt of a `resources/read`, `prompts/get` or `completion/complete` the `/mcp`
/// gate let through: recorded as `not_dispatched` if the MCP layer refuses the request
/// before the handler begins its own attempt.
#[cfg(feature = "http")]
#[derive(Clone)]
pub(crate) struct PendingItem(pub(crate) PendingAttempt);

#[cfg(feature = "http")]
#[derive(Clone)]
pub(crate) struct PendingAttempt(std::sync::Arc<std::sync::Mutex<Pending>>);

#[cfg(feature = "http")]
struct Pending {
    attempt: Option<crate::Attempt>,
    body: axum::body::Bytes,
    arguments: fn(&[u8]) -> Option<serde_json::Value>,
}

#[cfg(feature = "http")]
impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(mut attempt) = self.attempt.take() {
            attempt.set_arguments((self.arguments)(&self.body));
        }
    }
}

#[cfg(feature = "http")]
impl PendingAttempt {
    /// Carry `attempt`; `arguments` reads the call's arguments from `body` for the record
    /// of an attempt nobody took up.
    pub(crate) fn new(
        attempt: crate::Attempt,
        body: axum::body::Bytes,
        arguments: fn(&[u8]) -> Option<serde_json::Value>,
    ) -> PendingAttempt {
        PendingAttempt(std::sync::Arc::new(std::sync::Mutex::new(Pending {
            attempt: Some(attempt.undispatched()),
            body,
            arguments,
        })))
    }

    /// Take the attempt up (once).
    pub(crate) fn take(&self) -> Option<crate::Attempt> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .attempt
            .take()
    }

    /// The MCP handler began its own attempt for this request (a resource read, prompt or
    /// completion): the gate's is not needed and leaves no record.
    pub(crate) fn taken_up(&self) {
        if let Some(attempt) = self.take() {
            attempt.forget();
        }
    }

    /// The attempt, if nobody else holds the request any more and nobody took it up: the
    /// MCP layer answered without dispatching the call.
    pub(crate) fn abandoned(&self) -> Option<crate::Attempt> {
        if std::sync::Arc::strong_count(&self.0) == 1 {
            self.take()
        } else {
            None
        }
    }
}
