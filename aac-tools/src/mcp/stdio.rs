//! MCP over stdio, and over any byte streams with the stdio framing: one JSON-RPC
//! message per line.
//!
//! The framing is a small rmcp [`Transport`] of ours rather than rmcp's `AsyncRwTransport`
//! for one reason: a `tools/list` answer is the same bytes every time (the list is fixed
//! when the server is built), about 200 KB for 150 tools, and rmcp can only send it by
//! cloning and serializing every tool again. So the first plain `tools/list` of a
//! connection is answered by rmcp, as any request is, and its serialized result is kept;
//! the later ones are answered with those bytes, without reaching rmcp. Only a request
//! whose answer cannot differ is answered so: no parameters (no cursor, no `_meta`, which
//! may carry a protocol version of its own), on a server whose list is the same for every
//! principal. Everything else is rmcp's, as its own transport does it: lines of at most
//! 16 MiB (a longer one is dropped and logged, and answered under the id its start
//! gives), a byte-order mark and `\r` allowed, unparsable lines ignored, a well-formed
//! request of the wrong shape answered with "Invalid request". Unlike rmcp's, no more
//! is read while [`MAX_UNWRITTEN`] messages wait to be written or [`MAX_IN_FLIGHT`]
//! requests are in hand: a client that does not read its answers, or sends faster than
//! they come, stops being read.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex as StdMutex};
use std::task::{Context, Poll};

use rmcp::ServiceExt;
use rmcp::model::{
    ClientNotification, ClientRequest, ErrorCode, GetExtensions, JsonRpcMessage, JsonRpcRequest,
    RequestId, ServerResult,
};
use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio_util::bytes::Bytes;

use super::handler::{McpHandler, Shared};
use super::{PendingAttempt, PendingItem};
use crate::BoxFuture;
use crate::audit::Check;
use crate::context::Transport as Via;
use crate::error::{Status, ToolError};
use crate::pipeline::probe::{self, Unread, json_rpc_id, top_level_id};
use crate::server::{CallRequest, Credentials, Server};

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
/// the process's own standard streams stay blocking). Otherwise (a terminal, a file, a
/// socket) stdin is read and stdout written by threads of their own, not the runtime's
/// blocking pool: a read that may never end (a terminal nobody types in), or a write to
/// a client that no longer reads, then never holds the runtime, and so the process,
/// once the session is over. The runtime needs I/O enabled (`#[tokio::main]`
/// has it).
///
/// ```no_run
/// # async fn run(server: aac_tools::Server) -> std::io::Result<()> {
/// aac_tools::mcp::serve_stdio(server, std::env::var("AAC_TOKEN").ok()).await
/// # }
/// ```
pub async fn serve_stdio(server: Server, token: Option<String>) -> io::Result<()> {
    let (read, write) = standard_streams()?;
    serve_io(server, token, read, write).await
}

/// [`serve_stdio`] until stdin ends or `shutdown` is cancelled (cancel it on SIGTERM and
/// Ctrl-C): then no more is read, as if stdin had ended, and the session ends as it does
/// at the end of stdin, every call read so far taken to its end and recorded (one that
/// waits for a person, `cancelled`). The lines already read off stdin (into the reader's
/// buffer) are handled first, as at the end of stdin, but a line the stop cut short is
/// dropped, its rest unread. Once the session has no room for another request (64 in
/// hand, or 64 answers the client has not read), each request among the rest is not run
/// but refused: recorded (503 `server_stopping`), and answered "Server stopping"
/// (-32000) if the client reads its answers within 5 s. Killed by a signal instead, a
/// process loses the records its audit sink had not yet written, of calls whose work may
/// be done.
///
/// ```no_run
/// # async fn run(server: aac_tools::Server) -> std::io::Result<()> {
/// let shutdown = tokio_util::sync::CancellationToken::new();
/// let on_signal = shutdown.clone();
/// tokio::spawn(async move {
///     let _ = tokio::signal::ctrl_c().await;
///     on_signal.cancel();
/// });
/// aac_tools::mcp::serve_stdio_until(server, std::env::var("AAC_TOKEN").ok(), shutdown).await
/// # }
/// ```
pub async fn serve_stdio_until(
    server: Server,
    token: Option<String>,
    shutdown: tokio_util::sync::CancellationToken,
) -> io::Result<()> {
    let (read, write) = standard_streams()?;
    let read = UntilCancelled::new(read, shutdown.clone());
    serve_io_until(server, token, read, write, Some(shutdown)).await
}

/// The process's stdin and stdout as a session's streams: rmcp's `stdio_pipes` when both
/// are pipes (on Linux, it reads and writes them on the reactor), else stdin read by
/// [`ThreadedStdin`] and stdout written by [`ThreadedStdout`].
fn standard_streams() -> io::Result<(StandardIn, StandardOut)> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::FileTypeExt;
        let fifo = |fd: u8| {
            std::fs::metadata(format!("/proc/self/fd/{fd}")).is_ok_and(|m| m.file_type().is_fifo())
        };
        if fifo(0) && fifo(1) {
            let (read, write) = rmcp::transport::stdio_pipes();
            return Ok((StandardIn::Pipe(read), StandardOut::Pipe(write)));
        }
    }
    Ok((
        StandardIn::Thread(ThreadedStdin::spawn()?),
        StandardOut::Thread(ThreadedStdout::spawn()?),
    ))
}

/// stdin, read on the reactor or by a thread of its own.
enum StandardIn {
    Pipe(rmcp::transport::StdioReader),
    Thread(ThreadedStdin),
}

impl AsyncRead for StandardIn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            StandardIn::Pipe(read) => Pin::new(read).poll_read(cx, buf),
            StandardIn::Thread(read) => Pin::new(read).poll_read(cx, buf),
        }
    }
}

/// stdout, on the reactor or written by a thread of its own.
enum StandardOut {
    Pipe(rmcp::transport::StdioWriter),
    Thread(ThreadedStdout),
}

impl AsyncWrite for StandardOut {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            StandardOut::Pipe(write) => Pin::new(write).poll_write(cx, buf),
            StandardOut::Thread(write) => Pin::new(write).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            StandardOut::Pipe(write) => Pin::new(write).poll_flush(cx),
            StandardOut::Thread(write) => Pin::new(write).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            StandardOut::Pipe(write) => Pin::new(write).poll_shutdown(cx),
            StandardOut::Thread(write) => Pin::new(write).poll_shutdown(cx),
        }
    }
}

/// stdout written by a thread of its own, which takes what is written through a short
/// queue. Tokio's own stdout writes on the runtime's blocking pool, and a runtime does not
/// finish shutting down until its blocking writes return: one to a client that no longer
/// reads never does, so a server stopped by SIGTERM would wait for ever. A plain thread
/// does not hold the process. The queue is short (a few writes), so a client that does
/// not read still holds the writer back, and so stops being read.
struct ThreadedStdout {
    chunks: tokio_util::sync::PollSender<Vec<u8>>,
    /// Fires when the thread is done (everything written, or stdout failed).
    done: tokio::sync::oneshot::Receiver<()>,
    /// At shutdown, how long the thread has left to write what is queued.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// How long a shutdown waits for the queued answers to be written (rmcp waits as long for
/// the answers in hand): past it, a client that does not read loses them, and the
/// process is free to exit.
const STDOUT_DRAIN: std::time::Duration = std::time::Duration::from_secs(5);

impl ThreadedStdout {
    fn spawn() -> io::Result<ThreadedStdout> {
        let (send, mut chunks) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
        let (finished, done) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("aac-stdout".to_owned())
            .spawn(move || {
                use std::io::Write;
                let mut stdout = std::io::stdout().lock();
                while let Some(chunk) = chunks.blocking_recv() {
                    if stdout
                        .write_all(&chunk)
                        .and_then(|()| stdout.flush())
                        .is_err()
                    {
                        // The reader left: nothing more can be written.
                        break;
                    }
                }
                let _ = finished.send(());
            })?;
        Ok(ThreadedStdout {
            chunks: tokio_util::sync::PollSender::new(send),
            done,
            deadline: None,
        })
    }
}

impl AsyncWrite for ThreadedStdout {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let gone = || io::Error::new(io::ErrorKind::BrokenPipe, "stdout is closed");
        if std::task::ready!(self.chunks.poll_reserve(cx)).is_err() {
            return Poll::Ready(Err(gone()));
        }
        match self.chunks.send_item(buf.to_vec()) {
            Ok(()) => Poll::Ready(Ok(buf.len())),
            Err(_) => Poll::Ready(Err(gone())),
        }
    }

    /// What was written is the thread's to write (and flush) as it comes.
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Nothing more is queued; returns once the thread has written what was (a client
    /// that reads gets every answer before the process exits), or after [`STDOUT_DRAIN`].
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.chunks.close();
        if Pin::new(&mut self.done).poll(cx).is_ready() {
            return Poll::Ready(Ok(()));
        }
        let deadline = self
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(STDOUT_DRAIN)));
        if deadline.as_mut().poll(cx).is_ready() {
            tracing::warn!("stdout is not read: the answers not yet written are dropped");
            return Poll::Ready(Ok(()));
        }
        Poll::Pending
    }
}

/// stdin read by a thread of its own, which hands over what it reads. Tokio's own stdin
/// reads on the runtime's blocking pool, and a runtime does not finish shutting down
/// until its blocking reads return: one of a terminal nobody types in never does, so a
/// server stopped by SIGTERM would wait for a key. A plain thread does not hold the
/// process: when `main` returns, it ends with it.
struct ThreadedStdin {
    chunks: tokio::sync::mpsc::Receiver<io::Result<Vec<u8>>>,
    chunk: Vec<u8>,
    at: usize,
}

impl ThreadedStdin {
    fn spawn() -> io::Result<ThreadedStdin> {
        let (send, chunks) = tokio::sync::mpsc::channel(4);
        std::thread::Builder::new()
            .name("aac-stdin".to_owned())
            .spawn(move || {
                use std::io::Read;
                let mut stdin = std::io::stdin().lock();
                let mut buf = vec![0; 64 * 1024];
                loop {
                    let read = match stdin.read(&mut buf) {
                        Ok(0) => return,
                        Ok(n) => Ok(buf[..n].to_vec()),
                        Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                        Err(err) => Err(err),
                    };
                    let failed = read.is_err();
                    // The session no longer reads (it ended): nothing more to hand over.
                    if send.blocking_send(read).is_err() || failed {
                        return;
                    }
                }
            })?;
        Ok(ThreadedStdin {
            chunks,
            chunk: Vec::new(),
            at: 0,
        })
    }
}

impl AsyncRead for ThreadedStdin {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if self.at < self.chunk.len() {
                let n = buf.remaining().min(self.chunk.len() - self.at);
                let at = self.at;
                buf.put_slice(&self.chunk[at..at + n]);
                self.at += n;
                return Poll::Ready(Ok(()));
            }
            match std::task::ready!(self.chunks.poll_recv(cx)) {
                Some(Ok(chunk)) => {
                    self.chunk = chunk;
                    self.at = 0;
                }
                Some(Err(err)) => return Poll::Ready(Err(err)),
                // The end of stdin.
                None => return Poll::Ready(Ok(())),
            }
        }
    }
}

/// A reader that ends (reads nothing more, as at the end of its stream) once its token is
/// cancelled.
struct UntilCancelled<R> {
    read: R,
    cancelled: Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
    ended: bool,
}

impl<R> UntilCancelled<R> {
    fn new(read: R, shutdown: tokio_util::sync::CancellationToken) -> Self {
        UntilCancelled {
            read,
            cancelled: Box::pin(shutdown.cancelled_owned()),
            ended: false,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for UntilCancelled<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.ended || self.cancelled.as_mut().poll(cx).is_ready() {
            self.ended = true;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.read).poll_read(cx, buf)
    }
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
    serve_io_until(server, token, read, write, None).await
}

/// [`serve_io`], whose wait for room to read (a client that does not read its answers)
/// also ends when `stop` is cancelled.
async fn serve_io_until<R, W>(
    server: Server,
    token: Option<String>,
    read: R,
    write: W,
    stop: Option<tokio_util::sync::CancellationToken>,
) -> io::Result<()>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    // A list that depends on who asks is never replayed.
    let replay = !server.listing().filters_by_scope();
    let refusals = Refusals {
        server: server.clone(),
        token: token.clone(),
    };
    let counts = server.clone();
    let shared = Shared::new(server)?;
    let closed = tokio_util::sync::CancellationToken::new();
    let handler = McpHandler::new(shared, Via::Stdio, token).with_connection_closed(closed.clone());
    let running = match handler
        .serve(LineTransport::new(
            read, write, replay, refusals, closed, stop,
        ))
        .await
    {
        Ok(running) => running,
        // The client left before it initialized a session (an empty input, a client that
        // only probed the protocol's version): the end of its input, not a failure.
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => return Ok(()),
        Err(err) => {
            return Err(io::Error::other(format!(
                "the MCP session did not start: {err}"
            )));
        }
    };
    let ended = running.waiting().await;
    // What the principal's rate counted and did not record (past the rate, refusals are
    // counted), before the session's end is reported.
    counts.flush_rate_limited().await;
    ended.map_err(|err| io::Error::other(format!("the MCP session failed: {err}")))?;
    Ok(())
}

/// The longest line read: a longer one is dropped (rmcp's limit, as over HTTP).
const MAX_LINE: usize = 16 * 1024 * 1024;

/// The most JSON values (objects, arrays, strings, numbers and literals, keys included) a
/// line may hold. Parsed, each value takes 32 bytes and each array or object an allocation
/// of its own, and a line is parsed more than once while its call is in hand: 16 MiB of
/// `[[[…` took 3.5 GB, of empty strings or of `1 1 1…` (values one after the other)
/// 350 MB. A message of 1 MiB (the HTTP body limit) holds at most about half a million
/// values, so only longer lines are counted, and refused past this.
const MAX_VALUES: usize = 512 * 1024;

/// Whether `line` holds more than [`MAX_VALUES`] values, counted for lines over 1 MiB
/// only ([`crate::mcp::more_values_than`]).
fn too_many_values(line: &[u8]) -> bool {
    line.len() > 1024 * 1024 && crate::mcp::more_values_than(line, MAX_VALUES)
}

/// The JSON-RPC lines of one connection.
struct LineTransport<R, W> {
    read: BufReader<R>,
    /// The line being read; it survives a cancelled `receive` (rmcp polls it in a
    /// `select!`), so the next call goes on with it.
    line: Vec<u8>,
    /// Dropping the rest of a line that was too long.
    discarding: bool,
    out: Arc<tokio::sync::Mutex<Out<W>>>,
    /// An answer `receive` owes (a replayed list, "Invalid request"), written before the
    /// next line is read, or what is left of it after a cancelled `receive`.
    owed: Owed,
    /// The kept `tools/list` answer, when this connection may replay one.
    lists: Option<Arc<StdMutex<Lists>>>,
    /// Where a line that is no MCP message but a `tools/call` is recorded.
    refusals: Refusals,
    /// The record of such a line, being written: finished before the next line is read
    /// (whatever cancels `receive`), so that a flood of them waits for the audit sink.
    recording: Option<BoxFuture<'static, ()>>,
    /// The line whose refusal is being recorded, when its calls turn out past the
    /// connection's rate (the record says so, [`LineRefusal::record`]): answered with the
    /// rate's error under these ids (in one array when it was a batch), in place of what
    /// it owes, once the record is written.
    limited: Option<(RateVerdict, Vec<serde_json::Value>, bool)>,
    /// The attempts of the calls (and reads, prompts, completions) handed to rmcp and not
    /// yet answered, by request id: one rmcp answers with an error of its own before the
    /// handler took it up (a request before `initialize`, a protocol version it does not
    /// support) is recorded before that answer is written.
    pending: Pendings,
    /// Cancelled when the input ends (or fails): a call waiting for the client's answer
    /// (a person asked to confirm) stops waiting at once, rather than after rmcp's drain.
    closed: tokio_util::sync::CancellationToken,
    /// When the input ended: from then on, the answers still to write have
    /// [`STDOUT_DRAIN`] in all (the writes waiting and the end of the output share it),
    /// not each its own.
    ended_at: Arc<std::sync::OnceLock<tokio::time::Instant>>,
    /// What is in hand: past [`MAX_UNWRITTEN`] or [`MAX_IN_FLIGHT`], no more is read.
    /// (Told, through each request's [`InHand`], when a question of the server's is no
    /// longer awaited.)
    backlog: Arc<Backlog>,
    /// Cancelled when the server stops (SIGTERM): a wait for room ends then too, as if
    /// the input had ended.
    stop: Option<tokio_util::sync::CancellationToken>,
    /// Stopped with no room to take another request (or while an answer of `receive`'s
    /// waited to be written): the lines already read off the stream (in `read`'s buffer)
    /// are taken, and nothing more is read; each request among them is refused and
    /// recorded, not run.
    stopping: bool,
    /// Whether the session's lifecycle has begun: an `initialize` handed to rmcp, or a
    /// request carrying the 2026-07-28 lifecycle in its `_meta`. Until then rmcp ends the
    /// session on anything but a request, so a notification or a stray answer is dropped
    /// here instead (see [`starts_lifecycle`]).
    lifecycle: bool,
}

/// Whether `message`, read from `line`, is an `initialize` past its bounds: a line over
/// [`MAX_INITIALIZE_BYTES`](crate::mcp::MAX_INITIALIZE_BYTES) that names the method, or
/// an `initialize` of more than [`MAX_INITIALIZE_VALUES`](crate::mcp::MAX_INITIALIZE_VALUES)
/// JSON values (what it says of the client is kept, parsed, for the session's life).
fn initialize_over_bounds(line: &[u8], message: &RxJsonRpcMessage<RoleServer>) -> bool {
    let is_initialize = matches!(message, JsonRpcMessage::Request(request)
        if matches!(request.request, ClientRequest::InitializeRequest(_)));
    (line.len() > crate::mcp::MAX_INITIALIZE_BYTES
        && probe::may_be_method(trim_line(line), "initialize"))
        || (is_initialize && crate::mcp::more_values_than(line, crate::mcp::MAX_INITIALIZE_VALUES))
}

/// Whether rmcp, before a session's lifecycle, begins one with `request`: an
/// `initialize`, or a request other than `ping` and `server/discover` whose `_meta` holds
/// what the 2026-07-28 lifecycle needs (rmcp answers the others and waits on). A request
/// whose inline version rmcp does not support is taken to begin one too: after it, rmcp
/// is given what it would have been given before this check.
fn starts_lifecycle(request: &ClientRequest) -> bool {
    use rmcp::model::{GetMeta, ProtocolVersion};
    match request {
        ClientRequest::InitializeRequest(_) => true,
        ClientRequest::PingRequest(_) | ClientRequest::DiscoverRequest(_) => false,
        other => {
            let meta = other.get_meta();
            meta.protocol_version().is_some()
                && meta
                    .missing_required_keys(&ProtocolVersion::V_2026_07_28)
                    .is_empty()
        }
    }
}

/// Reads a request's arguments back from its line, for the record of an attempt nobody
/// took up.
type ReadArguments = fn(&[u8]) -> Option<serde_json::Value>;

/// The attempts of requests handed to rmcp, by id.
type Pendings = Arc<StdMutex<std::collections::HashMap<RequestId, PendingAttempt>>>;

/// From how many unanswered requests on, the framing looks for those rmcp dropped without
/// an answer (cancelled before they were handled, say): recorded if nobody took them up,
/// and forgotten.
const SWEEP_PENDING: usize = 64;

/// How many unanswered requests the framing keeps track of: a further one is not tracked
/// (its attempt still records itself if it is dropped untaken).
const MAX_PENDING: usize = 1024;

/// Records the calls that never reach the tools: a line rmcp cannot read, or reads only
/// as a method it does not know (a `tools/call`, `resources/read`, `prompts/get` or
/// `completion/complete` with malformed parameters, in a batch, without an id), which
/// rmcp answers "Invalid request" or "Method not found" without the handler. One record
/// each, as every refused call has (check `protocol`, reason `not_dispatched`), with the
/// connection's principal when its token is valid.
#[derive(Clone)]
struct Refusals {
    server: Server,
    token: Option<String>,
}

impl Refusals {
    /// The refusal of the calls in `line`, if it holds any: [`LineRefusal::record`].
    fn of(&self, line: &[u8]) -> Option<LineRefusal> {
        let request = probe::tool_call_request(line).or_else(|| probe::item_request(line))?;
        // A batch (which rmcp refuses whole): each of its calls, not only the first.
        let (rest, more, unread) = probe::rest_of_batch_read(line);
        let mut first = self.begin(request);
        // The batch goes through the rate once, for every record it writes.
        let records = 1 + rest.len() as u64 + more.by_kind().count() as u64;
        let rate = first.first_of_batch(records);
        let mut rest: Vec<_> = rest
            .into_iter()
            .map(|request| (self.begin(request), not_read()))
            .collect();
        // One record per kind counted (the reads of the rest as reads).
        for (kind, more) in more.by_kind() {
            let counted = ToolError::bad_request(
                "not_dispatched",
                format!(
                    "the MCP layer could not read the request: nothing was called; the \
                     batch held {more} more calls, not recorded one by one"
                ),
            );
            // The count in the record's arguments too, for whoever reads the trail.
            let mut attempt = self.begin(probe::count_request(kind));
            attempt.account(probe::count_of_the_rest(more, unread));
            rest.push((attempt, counted));
        }
        Some(LineRefusal {
            server: self.server.clone(),
            first,
            rest,
            rate,
            records,
        })
    }

    /// The record of a call (read, prompt, completion) refused because a request of the
    /// connection with its id is still in flight.
    fn in_flight(&self, line: &[u8]) -> Option<BoxFuture<'static, ()>> {
        let request = probe::tool_call_request(line).or_else(|| probe::item_request(line))?;
        let err = ToolError::new(
            Status::Conflict,
            "duplicate_request_id",
            "a request of this connection with the same JSON-RPC id is still in flight: ids \
             must be unique among a connection's requests in flight",
        );
        Some(self.refuse(request, err))
    }

    /// The record of a call (read, prompt, completion) refused because [`MAX_IN_FLIGHT`]
    /// requests of the connection are in hand.
    fn busy(&self, line: &[u8]) -> Option<BoxFuture<'static, ()>> {
        let request = probe::tool_call_request(line).or_else(|| probe::item_request(line))?;
        let err = ToolError::new(
            Status::TooManyRequests,
            "too_many_in_flight",
            format!(
                "{MAX_IN_FLIGHT} requests of this connection were in hand, waiting for answers \
                 to the server's questions: nothing was called"
            ),
        );
        Some(self.refuse(request, err))
    }

    /// The record of a call (read, prompt, completion) read before the server stopped and
    /// refused unrun: [`MAX_IN_FLIGHT`] requests were in hand, or answers unwritten.
    fn stopping(&self, line: &[u8]) -> Option<BoxFuture<'static, ()>> {
        let request = probe::tool_call_request(line).or_else(|| probe::item_request(line))?;
        let err = ToolError::new(
            Status::Unavailable,
            "server_stopping",
            "the server was stopping when the request was read, with no room to take it: \
             nothing was called",
        );
        Some(self.refuse(request, err))
    }

    /// The record of a line over [`MAX_LINE`], dropped unread: it may have carried a
    /// `tools/call`, so it is recorded as one, as the `/mcp` gate records a body over its
    /// limit: of the tool and under the id its first [`MAX_LINE`] bytes name, if they do,
    /// else of a tool nobody can know.
    fn too_long(&self, start: &Unread) -> BoxFuture<'static, ()> {
        let err = ToolError::new(
            Status::PayloadTooLarge,
            "body_too_large",
            format!(
                "an MCP message over stdio is limited to {MAX_LINE} bytes; the line was dropped"
            ),
        );
        self.refuse(start.request(), err)
    }

    /// The record of a line of more than [`MAX_VALUES`] JSON values, refused unparsed: as
    /// [`Self::too_long`], of what its top level names.
    fn too_many_values(&self, line: &Unread) -> BoxFuture<'static, ()> {
        let err = ToolError::new(
            Status::PayloadTooLarge,
            "body_too_large",
            format!(
                "an MCP message over stdio holds at most {MAX_VALUES} JSON values; the line was \
                 refused unparsed"
            ),
        );
        self.refuse(line.request(), err)
    }

    fn refuse(&self, request: CallRequest, err: ToolError) -> BoxFuture<'static, ()> {
        refuse(self.begin(request), err)
    }

    /// The attempt of `request`, as this connection's caller makes it.
    fn begin(&self, request: CallRequest) -> crate::Attempt {
        self.server.begin(
            request
                .transport(Via::Stdio)
                .credentials(match &self.token {
                    Some(token) => Credentials::Bearer(token.clone()),
                    None => Credentials::None,
                }),
        )
    }

    /// The attempt of a call, read (a subscription's too), prompt or completion rmcp
    /// parsed from `line`, put in the request's extensions for the handler to take up;
    /// `None` for other requests.
    fn pend(
        &self,
        request: &mut JsonRpcRequest<ClientRequest>,
        line: &[u8],
    ) -> Option<PendingAttempt> {
        let id = request.id.to_string();
        let (call, arguments): (_, ReadArguments) = match &request.request {
            ClientRequest::CallToolRequest(call) => (
                CallRequest::new(call.params.name.to_string(), None),
                probe::tool_call_arguments,
            ),
            ClientRequest::ReadResourceRequest(_)
            | ClientRequest::SubscribeRequest(_)
            | ClientRequest::UnsubscribeRequest(_)
            | ClientRequest::GetPromptRequest(_)
            | ClientRequest::CompleteRequest(_) => {
                (probe::item_request(line)?, probe::item_arguments)
            }
            _ => return None,
        };
        let mut attempt = self.begin(call.request_id(id));
        if matches!(request.request, ClientRequest::CallToolRequest(_)) {
            let (arguments, answer) = probe::repeated_call_keys(line);
            attempt.arguments_repeat(arguments);
            attempt.answer_repeats(answer);
        }
        let pending = PendingAttempt::new(attempt, Bytes::copy_from_slice(line), arguments);
        let is_call = matches!(request.request, ClientRequest::CallToolRequest(_));
        let extensions = request.request.extensions_mut();
        if is_call {
            extensions.insert(pending.clone());
        } else {
            extensions.insert(PendingItem(pending.clone()));
        }
        Some(pending)
    }
}

/// Record `attempt` as refused by the MCP layer (`err`).
fn refuse(mut attempt: crate::Attempt, err: ToolError) -> BoxFuture<'static, ()> {
    Box::pin(async move {
        // For the record only: the refusal is the line's, whoever sent it.
        let _ = attempt.authenticate().await;
        attempt.refuse(Check::Protocol, err).await;
    })
}

/// The refusal of a line's calls the MCP layer cannot read: nothing was called.
fn not_read() -> ToolError {
    ToolError::bad_request(
        "not_dispatched",
        "the MCP layer could not read the request: nothing was called",
    )
}

/// The records of the calls of a refused line ([`Refusals::of`]): its first call's, and
/// those of the rest of its batch, which go through the rate with it.
struct LineRefusal {
    server: Server,
    first: crate::Attempt,
    rest: Vec<(crate::Attempt, ToolError)>,
    rate: crate::pipeline::BatchRate,
    /// How many records in all.
    records: u64,
}

/// Set, by the record of a refused line, to the rate's error when its calls were past the
/// connection's rate (the line is then answered with it), else to `None`.
type RateVerdict = Arc<tokio::sync::SetOnce<Option<ToolError>>>;

impl LineRefusal {
    /// Record the calls, as unread, or (when the connection's rate would refuse them:
    /// checked first, as for a call that reaches a tool) as the 429 the line is then
    /// answered with, told through `verdict`: the first as that 429 (the first refusal
    /// past the rate), the rest counted.
    fn record(self, verdict: RateVerdict) -> BoxFuture<'static, ()> {
        let LineRefusal {
            server,
            mut first,
            rest,
            rate,
            records,
        } = self;
        Box::pin(async move {
            // For the record only: the refusal is the line's, whoever sent it.
            let principal = first.authenticate().await.ok();
            let past = server.past_the_rate(principal.as_deref(), records);
            let _ = verdict.set(past.clone());
            match past {
                Some(err) => {
                    first.refuse(Check::RateLimit, err).await;
                }
                None => {
                    first.refuse(Check::Protocol, not_read()).await;
                }
            }
            // The others follow the first through the rate: recorded with it, or
            // counted with it.
            for (mut attempt, err) in rest {
                attempt.rest_of_batch(&rate);
                refuse(attempt, err).await;
            }
        })
    }
}

/// The refusal recorded for a request rmcp answered with `message` without handing it on.
fn not_dispatched(message: &str) -> ToolError {
    ToolError::bad_request(
        "not_dispatched",
        format!(
            "the MCP layer refused the request before it was handled: {}",
            crate::audit::bounded(message, 512)
        ),
    )
}

/// Whether rmcp reads `message` as a method it does not know: such a message is refused
/// without reaching the handler.
fn is_unknown_method(message: &RxJsonRpcMessage<RoleServer>) -> bool {
    match message {
        JsonRpcMessage::Request(request) => {
            matches!(request.request, ClientRequest::CustomRequest(_))
        }
        JsonRpcMessage::Notification(notification) => matches!(
            notification.notification,
            ClientNotification::CustomNotification(_)
        ),
        _ => false,
    }
}

/// An answer `receive` writes itself.
enum Owed {
    Nothing,
    /// Not yet handed to [`Out`].
    Line(Vec<Bytes>),
    /// Handed to [`Out`], whose write was cancelled: its rest is `Out::pending`.
    Rest,
}

/// The most plain `tools/list` requests awaiting rmcp's answer that are kept track of;
/// past it, the answer of a further one is not kept (it is still answered).
const MAX_ASKED: usize = 16;

/// The plain `tools/list` requests rmcp is answering, and the answer once it did.
#[derive(Default)]
struct Lists {
    asked: Vec<RequestId>,
    answer: Option<Bytes>,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> LineTransport<R, W> {
    /// Write what `receive` owes. Cancellation safe: the parts move into [`Out`] once
    /// its lock is held, and `Out` keeps whatever of them a cancelled write left.
    async fn pay(&mut self) -> io::Result<()> {
        if matches!(self.owed, Owed::Nothing) {
            return Ok(());
        }
        let mut out = self.out.lock().await;
        let parts = match std::mem::replace(&mut self.owed, Owed::Rest) {
            Owed::Line(parts) => parts,
            Owed::Nothing | Owed::Rest => Vec::new(),
        };
        out.line(parts).await?;
        self.owed = Owed::Nothing;
        Ok(())
    }

    /// Begin the attempt of `request` (read from `self.line`), if it is a call, read,
    /// prompt or completion, and keep it until rmcp answers.
    fn track(&mut self, request: &mut JsonRpcRequest<ClientRequest>) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if pending.len() >= SWEEP_PENDING {
            let mut gone = Vec::new();
            pending.retain(|_, p| {
                if !p.is_dropped() {
                    return true;
                }
                gone.extend(p.refused());
                false
            });
            if !gone.is_empty() {
                let before = self.recording.take();
                self.recording = Some(Box::pin(async move {
                    if let Some(before) = before {
                        before.await;
                    }
                    for attempt in gone {
                        refuse(
                            attempt,
                            not_dispatched("the request was dropped unanswered"),
                        )
                        .await;
                    }
                }));
            }
            if pending.len() >= MAX_PENDING {
                drop(pending);
                // Not tracked: its attempt records itself if it is dropped untaken.
                let _ = self.refusals.pend(request, trim_line(&self.line));
                return;
            }
        }
        let id = request.id.clone();
        if let Some(attempt) = self.refusals.pend(request, trim_line(&self.line)) {
            pending.insert(id, attempt);
        }
    }

    fn new(
        read: R,
        write: W,
        replay: bool,
        refusals: Refusals,
        closed: tokio_util::sync::CancellationToken,
        stop: Option<tokio_util::sync::CancellationToken>,
    ) -> Self {
        let backlog = Arc::<Backlog>::default();
        LineTransport {
            read: BufReader::new(read),
            line: Vec::new(),
            discarding: false,
            out: Arc::new(tokio::sync::Mutex::new(Out {
                write: Some(write),
                pending: Vec::new(),
            })),
            owed: Owed::Nothing,
            lists: replay.then(Arc::default),
            refusals,
            recording: None,
            limited: None,
            pending: Arc::default(),
            closed,
            ended_at: Arc::default(),
            backlog,
            stop,
            stopping: false,
            lifecycle: false,
        }
    }

    /// The input ended (or the server stops): calls waiting for the client stop waiting,
    /// and the answers still to write have [`STDOUT_DRAIN`] from now.
    fn end_input(&self) {
        let _ = self.ended_at.set(tokio::time::Instant::now());
        self.closed.cancel();
    }

    /// Stopped: the input ends now (calls waiting for the client stop waiting), and the
    /// lines already read are taken from the buffer only, each request refused.
    fn stop_reading(&mut self) {
        self.stopping = true;
        self.end_input();
    }

    /// Read up to the next `\n` into `self.line`, never past [`MAX_LINE`]. Cancellation
    /// safe: bytes are moved from the buffer to `line` with no await in between. Once
    /// stopping, from the buffer only: its end is the end of the input.
    async fn read_line(&mut self) -> io::Result<Line> {
        loop {
            let available = if self.stopping {
                self.read.buffer()
            } else {
                self.read.fill_buf().await?
            };
            if available.is_empty() {
                // Stopped mid-line: its rest was never read, and a line cut short is no
                // request (answered "Parse error", its call would be recorded refused
                // when the client sent it whole).
                let stopped = self.stopping || self.stop.as_ref().is_some_and(|s| s.is_cancelled());
                // The last line, without its `\n`: read as a line (as rmcp's own framing
                // does), not dropped unanswered and unrecorded.
                if !self.line.is_empty() && !self.discarding && !stopped {
                    // One byte past the limit was kept in case it was a `\r` before a
                    // `\n`: at the end, it is not.
                    if self.line.len() > MAX_LINE && self.line.last() != Some(&b'\r') {
                        let start = Unread::of_start(&self.line);
                        self.line.clear();
                        return Ok(Line::TooLong(start));
                    }
                    return Ok(Line::Whole);
                }
                if !self.line.is_empty() && stopped {
                    tracing::warn!("the server stopped mid-line: the line's start is dropped");
                }
                return Ok(Line::Eof);
            }
            let newline = available.iter().position(|&b| b == b'\n');
            let take = newline.map_or(available.len(), |i| i + 1);
            // The limit is the message's: its line ending (`\n` or `\r\n`) is not counted.
            // Until the `\n` comes, one byte more is kept, which may be the `\r` of one.
            let over = match newline {
                Some(i) => {
                    let before = match i {
                        0 => self.line.last().copied(),
                        _ => Some(available[i - 1]),
                    };
                    self.line.len() + i - usize::from(before == Some(b'\r')) > MAX_LINE
                }
                None => self.line.len().saturating_add(take) > MAX_LINE + 1,
            };
            let mut step = None;
            if self.discarding {
                if newline.is_some() {
                    self.discarding = false;
                }
            } else if over {
                let start = Unread::of_start(&self.line);
                self.line.clear();
                self.discarding = newline.is_none();
                step = Some(Line::TooLong(start));
            } else {
                self.line.extend_from_slice(&available[..take]);
                if newline.is_some() {
                    step = Some(Line::Whole);
                }
            }
            self.read.consume(take);
            if let Some(step) = step {
                return Ok(step);
            }
        }
    }
}

enum Line {
    Whole,
    TooLong(Unread),
    Eof,
}

/// How many answers (and other messages to the client) may wait to be written before no
/// more is read: a client that sends requests and never reads its answers stops being
/// read, rather than having the server run its calls and keep their answers without end.
const MAX_UNWRITTEN: usize = 64;

/// How many of the client's requests may be in hand (read, not yet answered) before no
/// more is read, unless the server waits for an answer of the client's (a person asked to
/// confirm), which can only come by reading on: calls that take long, or a client that
/// sends faster than they are answered, never pile up more than this.
const MAX_IN_FLIGHT: usize = 64;

/// The JSON-RPC error of a request refused because [`MAX_IN_FLIGHT`] are in hand, or the
/// server stopped with no room to take it (one of the codes JSON-RPC leaves to servers):
/// worth sending again later, unlike "Invalid request".
const SERVER_BUSY: ErrorCode = ErrorCode(-32000);

/// What the connection has in hand: the messages to the client not yet written, the
/// client's requests not yet answered, the server's requests the client has not yet
/// answered; and a wake-up for a reader waiting for any of them to change.
#[derive(Default)]
struct Backlog {
    unwritten: std::sync::atomic::AtomicUsize,
    in_flight: StdMutex<std::collections::HashSet<RequestId>>,
    asking: StdMutex<std::collections::HashSet<RequestId>>,
    /// Questions no longer awaited before they were sent (a call cancelled at once): not
    /// taken among those asked when they are. At most [`MAX_IN_FLIGHT`] kept.
    ended_unsent: StdMutex<std::collections::VecDeque<RequestId>>,
    changed: tokio::sync::Notify,
}

/// A client's request in hand, carried in its extensions, which rmcp keeps in the
/// handler's context until the handler is done: its id stays in flight (a second request
/// under it is refused) and it counts among the [`MAX_IN_FLIGHT`] in hand until then,
/// whether it was answered or cancelled. (Freed when its cancellation came, a call past
/// its checks ran on: its id could be sent again and take the first call's answer, and
/// calls cancelled as soon as sent ran without bound.)
#[derive(Clone)]
pub(super) struct InHand(Arc<InHandId>);

impl InHand {
    /// Whom to tell when a question of the server's, asked during this request, is no
    /// longer awaited.
    pub(super) fn question_ends(&self) -> super::peer::QuestionEnds {
        super::peer::QuestionEnds(Arc::clone(&self.0.backlog) as _)
    }
}

struct InHandId {
    backlog: Arc<Backlog>,
    id: RequestId,
}

impl Drop for InHandId {
    fn drop(&mut self) {
        self.backlog.done(&self.id);
    }
}

/// One message counted in [`Backlog::unwritten`] until it is dropped (written, failed or
/// given up).
struct UnwrittenGuard(Arc<Backlog>);

impl UnwrittenGuard {
    fn new(backlog: &Arc<Backlog>) -> UnwrittenGuard {
        backlog
            .unwritten
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        UnwrittenGuard(Arc::clone(backlog))
    }
}

impl Drop for UnwrittenGuard {
    fn drop(&mut self) {
        self.0
            .unwritten
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        self.0.changed.notify_waiters();
    }
}

impl Backlog {
    fn set(
        set: &StdMutex<std::collections::HashSet<RequestId>>,
    ) -> std::sync::MutexGuard<'_, std::collections::HashSet<RequestId>> {
        set.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a request of the client's under `id` is in hand.
    fn in_flight(&self, id: &RequestId) -> bool {
        Backlog::set(&self.in_flight).contains(id)
    }

    /// The client's request `id` is handed on to be answered: in hand while the
    /// [`InHand`] lives.
    fn took(self: &Arc<Self>, id: RequestId) -> InHand {
        Backlog::set(&self.in_flight).insert(id.clone());
        InHand(Arc::new(InHandId {
            backlog: Arc::clone(self),
            id,
        }))
    }

    /// rmcp is done with the client's request `id`.
    fn done(&self, id: &RequestId) {
        if Backlog::set(&self.in_flight).remove(id) {
            self.changed.notify_waiters();
        }
    }

    /// The server asks the client (`id`): its answer comes on the input.
    fn asked(&self, id: RequestId) {
        {
            let mut ended = self.ended_unsent.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(at) = ended.iter().position(|e| *e == id) {
                ended.remove(at);
                return;
            }
        }
        Backlog::set(&self.asking).insert(id);
        self.changed.notify_waiters();
    }
}

impl super::peer::EndsQuestions for Backlog {
    /// The server no longer awaits the answer to its question `id`, and none was read
    /// (it timed out, or its call was cancelled): the input is no longer read on past its
    /// bounds for it.
    fn question_ended(&self, id: &RequestId) {
        if Backlog::set(&self.asking).remove(id) {
            self.changed.notify_waiters();
            return;
        }
        let mut ended = self.ended_unsent.lock().unwrap_or_else(|e| e.into_inner());
        if ended.len() == MAX_IN_FLIGHT {
            ended.pop_front();
        }
        ended.push_back(id.clone());
    }
}

impl Backlog {
    /// Whether the server asked the client `id` and awaits its answer.
    fn is_asking(&self, id: &RequestId) -> bool {
        asked_as(&Backlog::set(&self.asking), id).is_some()
    }

    /// The client answered the server's request `id`.
    fn answered(&self, id: &RequestId) {
        let mut asking = Backlog::set(&self.asking);
        if let Some(asked) = asked_as(&asking, id)
            && asking.remove(&asked)
        {
            drop(asking);
            self.changed.notify_waiters();
        }
    }

    /// Whether a further request of the client's may be taken: fewer than
    /// [`MAX_IN_FLIGHT`] are in hand. (Past it, the input is still read while the server
    /// waits for answers of the client's, and requests are refused.)
    fn takes_requests(&self) -> bool {
        Backlog::set(&self.in_flight).len() < MAX_IN_FLIGHT
    }

    fn has_room(&self) -> bool {
        use std::sync::atomic::Ordering;
        self.unwritten.load(Ordering::Acquire) < MAX_UNWRITTEN
            && (Backlog::set(&self.in_flight).len() < MAX_IN_FLIGHT
                || !Backlog::set(&self.asking).is_empty())
    }

    /// Until there is room to read the next message ([`MAX_UNWRITTEN`], [`MAX_IN_FLIGHT`]),
    /// or `stop` is cancelled (then `false`: read nothing more). Cancellation safe.
    async fn room(&self, stop: Option<&tokio_util::sync::CancellationToken>) -> bool {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.has_room() {
                return true;
            }
            let stopped = async {
                match stop {
                    Some(stop) => stop.cancelled().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = changed => {}
                () = stopped => return false,
            }
        }
    }
}

/// What one line holds.
enum Parsed {
    Message(Box<RxJsonRpcMessage<RoleServer>>),
    /// Not JSON, a notification we do not know, or an empty line: nothing to answer.
    Ignored,
    /// No message of the protocol, answered with this error: JSON that is not a request of
    /// MCP's shapes ("Invalid request", or "Invalid params" for a known method whose
    /// `params` are of the wrong shape), or a request whose `id` and `method` can be read
    /// but that does not parse (nested past serde_json's 128 levels, a number out of range,
    /// cut short: "Parse error", so that its client does not wait for ever). Under the
    /// line's `id` when it is a valid one, else `null` (JSON-RPC never leaves it out).
    Refused {
        id: serde_json::Value,
        code: ErrorCode,
        message: String,
    },
    /// An object of a response's keys (`result` or `error`, no `method`) that is not a
    /// response (both keys, no `"jsonrpc": "2.0"`…), under this `id`: JSON-RPC answers no
    /// response, so it is not answered; when it names a question of the server's, it
    /// ends that question as an error (the client's answer could not be read).
    BadAnswer(serde_json::Value),
    /// Several messages one after the other on the line (`{…}{…}`), which JSON-RPC over
    /// stdio does not allow: every request among them is answered, under its own id.
    RefusedEach(Vec<serde_json::Value>),
    /// A JSON-RPC batch (an array), which rmcp does not take: every request in it is
    /// refused under its own id, in one array, as JSON-RPC answers a batch, so that a
    /// client of a version that allowed batches (2025-03-26) is not left waiting.
    RefusedBatch(Vec<serde_json::Value>),
}

impl Parsed {
    /// The ids this refusal is answered under (and whether in one array, as a batch), for
    /// an answer in its place (the rate's error); `None` for a message handed on or not
    /// answered.
    fn answered_ids(&self) -> Option<(Vec<serde_json::Value>, bool)> {
        match self {
            Parsed::Refused { id, .. } => Some((vec![id.clone()], false)),
            Parsed::RefusedEach(ids) => Some((ids.clone(), false)),
            Parsed::RefusedBatch(ids) => Some((ids.clone(), true)),
            Parsed::Message(_) | Parsed::Ignored | Parsed::BadAnswer(_) => None,
        }
    }
}

/// A JSON-RPC error answer.
fn error_answer(id: serde_json::Value, code: ErrorCode, message: &str) -> serde_json::Value {
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": code.0, "message": message},
    })
}

/// `answer` on a line of its own.
fn as_line(answer: &serde_json::Value) -> Vec<u8> {
    let mut line = serde_json::to_vec(answer).unwrap_or_default();
    line.push(b'\n');
    line
}

/// One line of a JSON-RPC error answer.
fn error_line(id: serde_json::Value, code: ErrorCode, message: String) -> Vec<u8> {
    as_line(&error_answer(id, code, &message))
}

/// One line answering a batch: an array of one error per request, under its id.
fn batch_refused(ids: Vec<serde_json::Value>) -> Vec<u8> {
    const MESSAGE: &str = "Invalid request: this server does not take JSON-RPC batches; send \
                           each message on a line of its own";
    as_line(&serde_json::Value::Array(
        ids.into_iter()
            .map(|id| error_answer(id, ErrorCode::INVALID_REQUEST, MESSAGE))
            .collect(),
    ))
}

/// A line without its `\n`, `\r` and byte-order mark.
fn trim_line(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line)
}

fn parse(line: &[u8]) -> Parsed {
    let line = trim_line(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Parsed::Ignored;
    }
    match serde_json::from_slice(line) {
        Ok(message) => Parsed::Message(Box::new(message)),
        // One JSON value, of another shape than a message. (Several values fail on the
        // first one's shape as well when it is not a message: `1 {…}`; they are read as
        // messages one after the other, below.)
        Err(err)
            if err.is_data() && serde_json::from_slice::<serde::de::IgnoredAny>(line).is_ok() =>
        {
            tracing::debug!(error = %err, "a line that is not an MCP message");
            let value = serde_json::from_slice::<serde_json::Value>(line).ok();
            if let Some(serde_json::Value::Array(items)) = &value
                && !items.is_empty()
            {
                // As JSON-RPC answers a batch: a request under its id, anything that is
                // no message under `null`; a notification or a response gets nothing.
                let ids = items
                    .iter()
                    .filter_map(|item| match item.as_object() {
                        Some(o) if o.contains_key("method") => o
                            .contains_key("id")
                            .then(|| json_rpc_id(o.get("id").cloned())),
                        Some(o) if o.contains_key("result") || o.contains_key("error") => None,
                        _ => Some(serde_json::Value::Null),
                    })
                    // Bounded: the line's values are (`MAX_VALUES`), its answers are too.
                    .take(MAX_EACH_ANSWERED)
                    .collect();
                return Parsed::RefusedBatch(ids);
            }
            let object = value.as_ref().and_then(serde_json::Value::as_object);
            // A notification (an object without an id) is never answered (JSON-RPC);
            // rmcp ignores the ones it does not know.
            if object.is_some_and(|o| !o.contains_key("id")) {
                return Parsed::Ignored;
            }
            // An answer of the client's that is not one (both a `result` and an `error`,
            // or neither: an id alone): answered under its id, the error would read as the
            // answer to the client's own request of that id.
            if let Some(o) = object
                && !o.contains_key("method")
                && (o.contains_key("result")
                    || o.contains_key("error")
                    || !o.contains_key("params"))
            {
                return Parsed::BadAnswer(o.get("id").cloned().unwrap_or_default());
            }
            let id = json_rpc_id(object.and_then(|o| o.get("id")).cloned());
            // rmcp reads a method it does not know as a custom request whatever its
            // params: a 2.0 request with a method and params that it could not read is of
            // a known method whose params are not of its shape.
            let method = object
                .filter(|o| {
                    o.get("jsonrpc").and_then(serde_json::Value::as_str) == Some("2.0")
                        && o.contains_key("params")
                })
                .and_then(|o| o.get("method"))
                .and_then(serde_json::Value::as_str)
                .filter(|_| !id.is_null());
            // A key of the message itself repeated, or an id no request can have, is said
            // as what it is, not taken for params of the wrong shape.
            let repeated = probe::repeated_key(line)
                .filter(|pointer| pointer.len() > 1 && !pointer[1..].contains('/'));
            let huge_id = object
                .and_then(|o| o.get("id"))
                .is_some_and(|id| id.is_u64() && !id.is_i64());
            let (code, message) = match (method, repeated) {
                (_, Some(pointer)) => (
                    ErrorCode::INVALID_REQUEST,
                    format!(
                        "Invalid request: the key `{}` appears more than once in the message",
                        &pointer[1..]
                    ),
                ),
                _ if huge_id => (
                    ErrorCode::INVALID_REQUEST,
                    "Invalid request: an integer id must fit in 64 bits, signed".to_owned(),
                ),
                (Some(method), None) => (
                    ErrorCode::INVALID_PARAMS,
                    format!("Invalid params: the params of `{method}` are not of its shape"),
                ),
                // A request of the wrong shape, a batch, a bare value: as from rmcp.
                (None, None) => (
                    ErrorCode::INVALID_REQUEST,
                    "Invalid request: not a JSON-RPC request, notification or response".to_owned(),
                ),
            };
            Parsed::Refused { id, code, message }
        }
        Err(err) => {
            // Messages one after the other (separated by any white space a lenient reader
            // skips, U+2028 among it): each request among them waits for an answer.
            let (values, end) = probe::in_sequence::<serde_json::Value>(line);
            // One message inside such white space (U+2028 before it, a second byte-order
            // mark): not run, as JSON does not allow it, but answered under its id, and
            // recorded as the request it is.
            if let [value] = values.as_slice()
                && end == line.len()
            {
                let object = value.as_object();
                return match object.and_then(|o| o.get("id")) {
                    Some(id) if object.is_some_and(|o| o.contains_key("method")) => {
                        Parsed::Refused {
                            id: json_rpc_id(Some(id.clone())),
                            code: ErrorCode::INVALID_REQUEST,
                            message: "Invalid request: the line holds white space JSON does \
                                      not allow around its message"
                                .to_owned(),
                        }
                    }
                    _ => Parsed::Ignored,
                };
            }
            if values.len() >= 2 {
                // (A batch among them: each of its requests, too.)
                let ids = values
                    .iter()
                    .flat_map(probe::messages)
                    .filter_map(serde_json::Value::as_object)
                    .filter(|o| o.contains_key("method"))
                    .map(|o| json_rpc_id(o.get("id").cloned()))
                    .filter(|id| !id.is_null())
                    // Bounded: the line's values are (`MAX_VALUES`), its answers are too.
                    .take(MAX_EACH_ANSWERED)
                    .collect();
                return Parsed::RefusedEach(ids);
            }
            // A batch no reader parses whole (an element nested past 128 levels, a number
            // out of range): its requests wait for answers, and JSON-RPC answers a batch
            // it cannot parse with one "Parse error" under `null`.
            if line.trim_ascii_start().starts_with(b"[") {
                return Parsed::Refused {
                    id: serde_json::Value::Null,
                    code: ErrorCode::PARSE_ERROR,
                    message: format!(
                        "Parse error: the batch is not JSON this server can read: {}",
                        crate::audit::bounded(&err.to_string(), 300)
                    ),
                };
            }
            // A request whose id and method can be read without parsing the rest is
            // waiting for an answer: it gets one.
            let top = probe::top_level(line);
            if top.id.is_some() && top.method.is_some() {
                tracing::debug!(error = %err, "a request that does not parse");
                return Parsed::Refused {
                    id: top_level_id(&top),
                    code: ErrorCode::PARSE_ERROR,
                    message: format!(
                        "Parse error: the message is not JSON this server can read: {}",
                        crate::audit::bounded(&err.to_string(), 300)
                    ),
                };
            }
            // Not JSON: there is no id to answer to, and answering could start an error
            // storm with a peer that echoes it (rmcp and the other SDKs ignore it too).
            tracing::debug!(error = %err, "ignoring an unparsable line");
            Parsed::Ignored
        }
    }
}

/// The most requests of one line of several messages that are answered (each is
/// recorded, up to the batch's bound).
const MAX_EACH_ANSWERED: usize = 64;

/// The id of a `tools/list` whose answer cannot differ from the last one: no cursor and
/// no `_meta`.
fn plain_list(message: &RxJsonRpcMessage<RoleServer>) -> Option<&RequestId> {
    let JsonRpcMessage::Request(request) = message else {
        return None;
    };
    let ClientRequest::ListToolsRequest(list) = &request.request else {
        return None;
    };
    match &list.params {
        None => Some(&request.id),
        Some(params) if params.cursor.is_none() && params.meta.is_none() => Some(&request.id),
        Some(_) => None,
    }
}

/// The writing side, shared by rmcp's concurrent sends and the replayed lists.
struct Out<W> {
    /// `None` once closed.
    write: Option<W>,
    /// What is left of a line whose write was cancelled: finished before anything else
    /// is written, so that lines never mix.
    pending: Vec<Bytes>,
}

impl<W: AsyncWrite + Unpin> Out<W> {
    /// Write one line, given in parts, and flush it.
    async fn line(&mut self, parts: impl IntoIterator<Item = Bytes>) -> io::Result<()> {
        // Whatever a cancelled write left goes first; the new parts queue behind it.
        self.pending.extend(parts);
        let Some(write) = self.write.as_mut() else {
            self.pending.clear();
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the transport is closed",
            ));
        };
        while let Some(part) = self.pending.first_mut() {
            if part.is_empty() {
                self.pending.remove(0);
                continue;
            }
            let n = write.write(part).await?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            let _ = part.split_to(n);
        }
        write.flush().await
    }
}

/// The envelope of a response whose result is already serialized.
fn response(id: &RequestId, result: Bytes) -> io::Result<[Bytes; 3]> {
    let mut head = br#"{"jsonrpc":"2.0","id":"#.to_vec();
    serde_json::to_writer(&mut head, id)?;
    head.extend_from_slice(br#","result":"#);
    Ok([Bytes::from(head), result, Bytes::from_static(b"}\n")])
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), io::Error>> + Send + 'static {
        let out = Arc::clone(&self.out);
        let lists = self.lists.clone();
        let unwritten = UnwrittenGuard::new(&self.backlog);
        let closed = self.closed.clone();
        let ended_at = Arc::clone(&self.ended_at);
        // A request of the server's: its answer will come on the input. (A request of
        // the client's stays in hand until rmcp is done with it, answered or not: see
        // [`InHand`].)
        if let JsonRpcMessage::Request(request) = &item {
            self.backlog.asked(request.id.clone());
        }
        // The answer to a request the framing began an attempt for: if rmcp answers it
        // with an error before the handler took it up, that refusal is recorded first.
        let answered = match &item {
            JsonRpcMessage::Response(answer) => Some((&answer.id, None)),
            JsonRpcMessage::Error(answer) => answer
                .id
                .as_ref()
                .map(|id| (id, Some(answer.error.message.as_ref()))),
            _ => None,
        };
        let refused = answered.and_then(|(id, error)| {
            let pending = self
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(id)?;
            let attempt = error.and_then(|_| pending.refused())?;
            Some(refuse(attempt, not_dispatched(error.unwrap_or_default())))
        });
        async move {
            if let Some(recording) = refused {
                recording.await;
            }
            let parts = match (&item, lists) {
                (JsonRpcMessage::Response(answer), Some(lists))
                    if matches!(answer.result, ServerResult::InitializeResult(_)) =>
                {
                    // A list kept under another negotiation is not this one's.
                    lists.lock().unwrap_or_else(|e| e.into_inner()).answer = None;
                    vec![Bytes::from(serialize_line(&item)?)]
                }
                (JsonRpcMessage::Response(answer), Some(lists))
                    if matches!(answer.result, ServerResult::ListToolsResult(_)) =>
                {
                    let mut kept = lists.lock().unwrap_or_else(|e| e.into_inner());
                    let asked = kept.asked.iter().position(|id| *id == answer.id);
                    if let Some(i) = asked {
                        kept.asked.swap_remove(i);
                        let result = Bytes::from(serde_json::to_vec(&answer.result)?);
                        kept.answer = Some(result.clone());
                        drop(kept);
                        response(&answer.id, result)?.to_vec()
                    } else {
                        drop(kept);
                        vec![Bytes::from(serialize_line(&item)?)]
                    }
                }
                _ => vec![Bytes::from(serialize_line(&item)?)],
            };
            // Once the input ended, a write the client does not take gives up at the
            // drain's end, or [`STDOUT_DRAIN`] after it began if it began later (an
            // answer of a call that ran long): rmcp waits for the calls' answers before
            // it ends the output, and that wait and the output's end each took a drain of
            // their own (SIGTERM took 10 s, not 5).
            let write = async { out.lock().await.line(parts).await };
            // The write first: one that goes through at once never waits on the input's end.
            let written = tokio::select! {
                biased;
                written = write => written,
                () = drained(&closed, &ended_at) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the MCP output is not read: an answer was dropped",
                )),
            };
            drop(unwritten);
            written
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            if let Some(recording) = self.recording.as_mut() {
                recording.await;
                self.recording = None;
            }
            // A refused line past the connection's rate: the rate's error under its ids,
            // as its record says, in place of its protocol error.
            if let Some((verdict, ids, batch)) = self.limited.take()
                && let Some(Some(err)) = verdict.get()
            {
                let answers: Vec<_> = ids
                    .into_iter()
                    .map(|id| {
                        serde_json::json!({
                            "jsonrpc": "2.0",
                            "id": id,
                            "error": crate::mcp::handler::rate_limited_error(err),
                        })
                    })
                    .collect();
                self.owed = match (answers.is_empty(), batch) {
                    // (Only notifications: JSON-RPC answers nothing.)
                    (true, _) => Owed::Nothing,
                    (false, true) => Owed::Line(vec![Bytes::from(as_line(
                        &serde_json::Value::Array(answers),
                    ))]),
                    (false, false) => {
                        Owed::Line(answers.iter().map(|a| Bytes::from(as_line(a))).collect())
                    }
                };
            }
            // What `receive` owes (a refusal of its own, a replayed list) is written
            // before the next line is read; a client that does not read holds that write,
            // and SIGTERM must still end the session (it waited for ever): stopping, the
            // write gives up at the drain's end.
            if !matches!(self.owed, Owed::Nothing) {
                let paid = if self.stopping {
                    tokio::time::timeout_at(drain_end(&self.ended_at), self.pay())
                        .await
                        .ok()
                } else if let Some(stop) = self.stop.clone() {
                    tokio::select! {
                        biased;
                        paid = self.pay() => Some(paid),
                        () = stop.cancelled() => None,
                    }
                } else {
                    Some(self.pay().await)
                };
                if let Some(Err(err)) = &paid {
                    tracing::error!(error = %err, "cannot write to the MCP stream");
                }
                match paid {
                    Some(Ok(())) => {}
                    // Stopping: the lines read are still each recorded, unanswered.
                    _ if self.stopping => self.owed = Owed::Nothing,
                    // Stopped while it waited: nothing more is read, the lines already
                    // read are refused, and the write goes on until the drain's end.
                    None => {
                        self.stop_reading();
                        continue;
                    }
                    // A write that failed: as if the input had ended.
                    Some(Err(_)) => {
                        self.end_input();
                        return None;
                    }
                }
            }
            // Stopped while waiting for room: nothing more is read, and the lines already
            // read are refused (the room may never come: a client that does not read its
            // answers).
            if !self.stopping && !self.backlog.room(self.stop.as_ref()).await {
                self.stop_reading();
            }
            match self.read_line().await {
                Ok(Line::Whole) => {}
                Ok(Line::TooLong(start)) => {
                    tracing::error!(
                        max_line_length = MAX_LINE,
                        "an incoming MCP message was longer than the limit; dropped"
                    );
                    self.recording = Some(self.refusals.too_long(&start));
                    // A request whose id its start gives is answered, rather than left
                    // waiting for ever.
                    if !start.id.is_null() {
                        let answer = error_line(
                            start.id,
                            ErrorCode::INVALID_REQUEST,
                            format!(
                                "Invalid request: a message over stdio is limited to {MAX_LINE} bytes; the line was dropped"
                            ),
                        );
                        self.owed = Owed::Line(vec![Bytes::from(answer)]);
                    }
                    continue;
                }
                Ok(Line::Eof) => {
                    self.end_input();
                    return None;
                }
                Err(err) => {
                    tracing::error!(error = %err, "cannot read the MCP stream");
                    self.end_input();
                    return None;
                }
            }
            if too_many_values(&self.line) {
                tracing::error!(
                    max_values = MAX_VALUES,
                    "an incoming MCP message held too many JSON values; refused"
                );
                // What its top level names, as for an over-long line.
                let top = Unread::of_start(trim_line(&self.line));
                self.recording = Some(self.refusals.too_many_values(&top));
                let id = top.id;
                if !id.is_null() {
                    let answer = error_line(
                        id,
                        ErrorCode::INVALID_REQUEST,
                        format!(
                            "Invalid request: a message over stdio holds at most {MAX_VALUES} JSON values"
                        ),
                    );
                    self.owed = Owed::Line(vec![Bytes::from(answer)]);
                }
                self.line.clear();
                continue;
            }
            let mut parsed = parse(&self.line);
            // The client's `initialize` is kept for the whole session (rmcp keeps what it
            // says of the client), parsed: one of 1 MiB of `[[],[],…]` held 23 MB. (A line
            // of several messages is refused whatever they are, each answered and each
            // call among them recorded, below.)
            if let Parsed::Message(message) = &parsed
                && initialize_over_bounds(&self.line, message)
            {
                tracing::warn!("an initialize message over its limit; refused");
                parsed = match message.as_ref() {
                    JsonRpcMessage::Request(request) => Parsed::Refused {
                        id: serde_json::to_value(&request.id).unwrap_or_default(),
                        code: ErrorCode::INVALID_REQUEST,
                        message: crate::mcp::initialize_too_large(),
                    },
                    _ => Parsed::Ignored,
                };
            }
            // The client's answer to a question of the server's (a person's answer to a
            // confirmation) that repeats a key goes on as an error: read as rmcp reads
            // JSON the last value would win (`"action":"decline","action":"accept"`
            // confirms), where a host or proxy reading the first saw a no.
            if let Parsed::Message(message) = &mut parsed
                && let JsonRpcMessage::Response(answer) = message.as_ref()
                && self.backlog.is_asking(&answer.id)
                && probe::may_repeat_a_key(&self.line)
                && let Some(pointer) = probe::repeated_key(trim_line(&self.line))
                && let Ok(id) = serde_json::to_value(&answer.id)
                && let Ok(error) = serde_json::from_value(probe::ambiguous_answer(&id, &pointer))
            {
                **message = error;
            }
            // An answer that is not one ends the question it names, if any, as an error:
            // its call is refused now, not when the question times out.
            if let Parsed::BadAnswer(id) = &parsed {
                parsed = match serde_json::from_value::<RequestId>(id.clone()) {
                    Ok(asked) if self.backlog.is_asking(&asked) => {
                        match serde_json::from_value(serde_json::json!({
                            "jsonrpc": "2.0",
                            "id": id,
                            "error": {
                                "code": ErrorCode::INVALID_REQUEST.0,
                                "message": "the answer is not a JSON-RPC response (a `result` or \
                                            an `error`, not both, under `\"jsonrpc\": \"2.0\"`)",
                            },
                        })) {
                            Ok(error) => Parsed::Message(Box::new(error)),
                            Err(_) => Parsed::Ignored,
                        }
                    }
                    _ => Parsed::Ignored,
                };
            }
            // One request in flight per id: a second under the id of a call (or read,
            // prompt, completion) not yet answered is refused, and recorded when it is one
            // (rmcp would answer one of the two and lose the other).
            if let Parsed::Message(message) = &parsed
                && let JsonRpcMessage::Request(request) = message.as_ref()
                && self.backlog.in_flight(&request.id)
            {
                let id = serde_json::to_value(&request.id).unwrap_or_default();
                self.recording = self.refusals.in_flight(trim_line(&self.line));
                let answer = error_line(
                    id,
                    ErrorCode::INVALID_REQUEST,
                    "Invalid request: a request with this id is still in flight: ids must be \
                     unique among a connection's requests in flight"
                        .to_owned(),
                );
                self.owed = Owed::Line(vec![Bytes::from(answer)]);
                self.line.clear();
                continue;
            }
            // Stopping: a request read before the stop and not yet taken is refused and
            // recorded, not run.
            if let Parsed::Message(message) = &parsed
                && let JsonRpcMessage::Request(request) = message.as_ref()
                && self.stopping
            {
                let id = serde_json::to_value(&request.id).unwrap_or_default();
                self.recording = self.refusals.stopping(trim_line(&self.line));
                let answer = error_line(
                    id,
                    SERVER_BUSY,
                    "Server stopping: the request was read as the server stopped, with no \
                     room to take it; nothing was called"
                        .to_owned(),
                );
                self.owed = Owed::Line(vec![Bytes::from(answer)]);
                self.line.clear();
                continue;
            }
            // Past MAX_IN_FLIGHT requests in hand the input is read on only for the client's
            // answers to the server's questions (a person asked to confirm): a further
            // request is refused, and recorded when it is a call, rather than kept (each
            // call waiting for a person holds its request, up to MAX_LINE bytes of it).
            if let Parsed::Message(message) = &parsed
                && let JsonRpcMessage::Request(request) = message.as_ref()
                && !self.backlog.takes_requests()
            {
                let id = serde_json::to_value(&request.id).unwrap_or_default();
                self.recording = self.refusals.busy(trim_line(&self.line));
                let answer = error_line(
                    id,
                    SERVER_BUSY,
                    format!(
                        "Server busy: {MAX_IN_FLIGHT} requests of this connection are in hand, \
                         waiting for answers to the server's questions; send it again once \
                         they are answered"
                    ),
                );
                self.owed = Owed::Line(vec![Bytes::from(answer)]);
                self.line.clear();
                continue;
            }
            let refused = match &parsed {
                Parsed::Message(message) => is_unknown_method(message),
                Parsed::Ignored
                | Parsed::BadAnswer(_)
                | Parsed::Refused { .. }
                | Parsed::RefusedEach(_)
                | Parsed::RefusedBatch(_) => true,
            };
            if refused && let Some(calls) = self.refusals.of(trim_line(&self.line)) {
                // The connection's rate first: past it, the line's calls are answered
                // with the rate's error under their ids, as they are recorded, whatever
                // else is wrong with them (decided by the record, before the answer is
                // written; a message handed on is answered so by the handler, which asks
                // the rate as the record does).
                let verdict = RateVerdict::default();
                match parsed.answered_ids() {
                    Some((ids, batch)) => self.limited = Some((Arc::clone(&verdict), ids, batch)),
                    // Handed on: the handler answers it, with the verdict.
                    None => {
                        if let Parsed::Message(message) = &mut parsed
                            && let JsonRpcMessage::Request(request) = message.as_mut()
                        {
                            let rate = super::LineRate(Arc::clone(&verdict));
                            request.request.extensions_mut().insert(rate);
                        }
                    }
                }
                self.recording = Some(calls.record(verdict));
            }
            if let Parsed::Message(message) = &mut parsed
                && let JsonRpcMessage::Request(request) = message.as_mut()
            {
                self.track(request);
            }
            let message = match parsed {
                Parsed::Message(message) => {
                    self.line.clear();
                    message
                }
                // (Made a message or ignored above.)
                Parsed::Ignored | Parsed::BadAnswer(_) => {
                    self.line.clear();
                    continue;
                }
                Parsed::Refused { id, code, message } => {
                    let answer = error_line(id, code, message);
                    self.line.clear();
                    self.owed = Owed::Line(vec![Bytes::from(answer)]);
                    continue;
                }
                Parsed::RefusedEach(ids) => {
                    let answers = ids
                        .into_iter()
                        .map(|id| {
                            Bytes::from(error_line(
                                id,
                                ErrorCode::INVALID_REQUEST,
                                "Invalid request: one JSON-RPC message per line, and this line \
                                 holds several"
                                    .to_owned(),
                            ))
                        })
                        .collect();
                    self.line.clear();
                    self.owed = Owed::Line(answers);
                    continue;
                }
                Parsed::RefusedBatch(ids) => {
                    self.line.clear();
                    // Only notifications: JSON-RPC answers nothing.
                    if !ids.is_empty() {
                        self.owed = Owed::Line(vec![Bytes::from(batch_refused(ids))]);
                    }
                    continue;
                }
            };
            if let Some(lists) = &self.lists
                && let Some(id) = plain_list(&message)
            {
                let mut kept = lists.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(answer) = kept.answer.clone() {
                    drop(kept);
                    self.owed = Owed::Line(response(id, answer).ok()?.to_vec());
                    continue;
                }
                // Bounded: a list rmcp never answers (cancelled) stays here, and a
                // hostile client could send a great many.
                if kept.asked.len() < MAX_ASKED {
                    kept.asked.push(id.clone());
                }
            }
            // Before the lifecycle begins, rmcp takes only requests: it ends the session on a
            // notification (a `notifications/roots/list_changed` after a 2026-07-28
            // client's `server/discover`, a cancellation) or a stray answer, which the
            // protocol does not forbid there. Those are dropped, as JSON-RPC lets a
            // notification go unanswered.
            if !self.lifecycle {
                match message.as_ref() {
                    JsonRpcMessage::Request(request) => {
                        self.lifecycle = starts_lifecycle(&request.request);
                    }
                    _ => {
                        tracing::debug!(
                            "a notification or an answer before the session's lifecycle began: ignored"
                        );
                        continue;
                    }
                }
            }
            let mut message = message;
            match message.as_mut() {
                // In hand until rmcp is done with it (answered, or its handler ended after
                // a cancellation, whose answer rmcp drops).
                JsonRpcMessage::Request(request) => {
                    let in_hand = self.backlog.took(request.id.clone());
                    let extensions = request.request.extensions_mut();
                    extensions.insert(in_hand);
                }
                // The client's answer to the server's request.
                JsonRpcMessage::Response(answer) => self.backlog.answered(&answer.id),
                JsonRpcMessage::Error(answer) => {
                    if let Some(id) = &answer.id {
                        self.backlog.answered(id);
                    }
                }
                // A cancelled request is answered by nobody (MCP), but its handler may
                // run on (a tool past its checks finishes): it stays in hand, its id in
                // flight, until that ends.
                JsonRpcMessage::Notification(_) => {}
            }
            return Some(*message);
        }
    }

    /// The end of the output: once what is being written is written, or after
    /// [`STDOUT_DRAIN`] (a client that does not read holds a write for ever, and the
    /// session must still end).
    async fn close(&mut self) -> Result<(), io::Error> {
        let deadline = drain_end(&self.ended_at);
        let dropped = || {
            tracing::warn!("the MCP output is not read: the answers not yet written are dropped");
            Ok(())
        };
        let Ok(mut out) = tokio::time::timeout_at(deadline, self.out.lock()).await else {
            return dropped();
        };
        if let Some(mut write) = out.write.take() {
            let Ok(shut) = tokio::time::timeout_at(deadline, write.shutdown()).await else {
                return dropped();
            };
            shut?;
        }
        Ok(())
    }
}

/// When the answers still to write are given up: [`STDOUT_DRAIN`] after the input ended,
/// or from now if it has not.
fn drain_end(ended_at: &std::sync::OnceLock<tokio::time::Instant>) -> tokio::time::Instant {
    ended_at
        .get()
        .copied()
        .unwrap_or_else(tokio::time::Instant::now)
        + STDOUT_DRAIN
}

/// Resolves, once the input has ended, at the drain's end or [`STDOUT_DRAIN`] after the
/// write began to wait (its first poll), whichever is later.
async fn drained(
    closed: &tokio_util::sync::CancellationToken,
    ended_at: &std::sync::OnceLock<tokio::time::Instant>,
) {
    let started = tokio::time::Instant::now();
    closed.cancelled().await;
    tokio::time::sleep_until(drain_end(ended_at).max(started + STDOUT_DRAIN)).await;
}

fn serialize_line(item: &TxJsonRpcMessage<RoleServer>) -> io::Result<Vec<u8>> {
    let mut line = serde_json::to_vec(item)?;
    line.push(b'\n');
    Ok(line)
}

/// The question of the server's that an answer's `id` names, as rmcp matches them: the
/// same id, or a string that reads as an integer (`"1"`, `"+1"`, `"01"`) for the question
/// of that number (rmcp's own are numbers). Matched otherwise, an answer rmcp takes for a
/// person's would escape the checks of answers, and its question stay asked.
fn asked_as(asking: &std::collections::HashSet<RequestId>, id: &RequestId) -> Option<RequestId> {
    if asking.contains(id) {
        return Some(id.clone());
    }
    match id {
        RequestId::String(text) => text
            .parse::<i64>()
            .ok()
            .map(RequestId::Number)
            .filter(|number| asking.contains(number)),
        RequestId::Number(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use super::*;

    /// A writer that takes three bytes per write, and is not ready every other poll.
    #[derive(Default)]
    struct Trickle {
        written: Vec<u8>,
        ready: bool,
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.ready = !self.ready;
            if !self.ready {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            let n = buf.len().min(3);
            self.written.extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// A line whose write is cancelled halfway is finished before the next line: lines
    /// never mix, and none is lost.
    #[tokio::test]
    async fn a_cancelled_write_is_finished_before_the_next_line() {
        let mut out = Out {
            write: Some(Trickle::default()),
            pending: Vec::new(),
        };
        let first = [
            Bytes::from_static(b"{\"id\":"),
            Bytes::from_static(b"1,\"x\":\"abcdefgh\"}\n"),
        ];
        {
            // Poll the write a few times, then drop it unfinished.
            let write = out.line(first);
            tokio::pin!(write);
            for _ in 0..2 {
                let polled = std::future::poll_fn(|cx| Poll::Ready(write.as_mut().poll(cx))).await;
                assert!(
                    polled.is_pending(),
                    "a 24-byte line takes more than two polls"
                );
            }
        }
        let written = out.write.as_ref().unwrap().written.len();
        assert!(
            written > 0 && written < 24,
            "{written} bytes written before the cancel"
        );
        out.line([Bytes::from_static(b"{\"id\":2}\n")])
            .await
            .unwrap();
        let all = out.write.unwrap().written;
        assert_eq!(all, b"{\"id\":1,\"x\":\"abcdefgh\"}\n{\"id\":2}\n");
    }

    #[test]
    fn a_replayed_answer_has_the_request_s_id() {
        for (id, head) in [
            (RequestId::Number(7), r#"{"jsonrpc":"2.0","id":7,"result":"#),
            (
                RequestId::String("a\"b".into()),
                r#"{"jsonrpc":"2.0","id":"a\"b","result":"#,
            ),
        ] {
            let parts = response(&id, Bytes::from_static(b"{\"tools\":[]}")).unwrap();
            let line: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
            assert!(line.starts_with(head.as_bytes()));
            let parsed: serde_json::Value = serde_json::from_slice(&line).unwrap();
            assert_eq!(parsed["result"], serde_json::json!({"tools": []}));
            assert_eq!(line.last(), Some(&b'\n'));
        }
    }

    /// A tool that takes a while: long enough that the calls in hand are still running
    /// when the test stops the session, on a loaded machine too.
    fn slow(_: crate::tool::Call) -> crate::tool::HandlerFuture {
        Box::pin(async {
            tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
            Ok(crate::tool::ToolOutput::text("done"))
        })
    }

    /// A tool that answers at once.
    fn fast(_: crate::tool::Call) -> crate::tool::HandlerFuture {
        Box::pin(async { Ok(crate::tool::ToolOutput::text("done")) })
    }

    const fn tool(name: &'static str, handler: crate::tool::Handler) -> crate::tool::ToolParts {
        crate::tool::hand_built_parts(name, &["x:y"], true, false, handler)
    }

    static SLOW: crate::tool::ToolDef = crate::tool::ToolDef::__from_parts(tool("slow", slow));
    static FAST: crate::tool::ToolDef = crate::tool::ToolDef::__from_parts(tool("fast", fast));

    /// A reader that counts the bytes read through it.
    struct Counted<R> {
        read: R,
        count: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl<R: AsyncRead + Unpin> AsyncRead for Counted<R> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let before = buf.filled().len();
            std::task::ready!(Pin::new(&mut self.read).poll_read(cx, buf))?;
            let read = buf.filled().len() - before;
            self.count
                .fetch_add(read, std::sync::atomic::Ordering::SeqCst);
            Poll::Ready(Ok(()))
        }
    }

    type ClientLines = tokio::io::Lines<BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>;

    /// A session served as `serve_stdio_until` serves one, over a pipe of `capacity`
    /// bytes, whose client initialized it.
    struct Stoppable {
        lines: ClientLines,
        write: tokio::io::WriteHalf<tokio::io::DuplexStream>,
        stop: tokio_util::sync::CancellationToken,
        serving: tokio::task::JoinHandle<io::Result<()>>,
        sink: crate::audit::MemorySink,
        /// The bytes the server read, and how many of them were the session's start.
        consumed: Arc<std::sync::atomic::AtomicUsize>,
        head: usize,
    }

    impl Stoppable {
        async fn start(def: &'static crate::tool::ToolDef, capacity: usize) -> Stoppable {
            use tokio::io::AsyncBufReadExt as _;
            let sink = crate::audit::MemorySink::new();
            let server = Server::builder(crate::Registry::from_defs([def]).unwrap())
                .verifier(crate::StaticTokens::new().with("t", crate::Principal::new("p", ["x:y"])))
                .audit(sink.clone())
                .build()
                .unwrap();
            let (client, server_end) = tokio::io::duplex(capacity);
            let (read, write) = tokio::io::split(server_end);
            let consumed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let read = Counted {
                read,
                count: Arc::clone(&consumed),
            };
            let stop = tokio_util::sync::CancellationToken::new();
            let serving = tokio::spawn(serve_io_until(
                server,
                Some("t".to_owned()),
                UntilCancelled::new(read, stop.clone()),
                write,
                Some(stop.clone()),
            ));
            let (read, mut write) = tokio::io::split(client);
            let mut lines = BufReader::new(read).lines();
            let mut head = serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"}}})
            .to_string();
            head.push('\n');
            write.write_all(head.as_bytes()).await.unwrap();
            let answer = lines.next_line().await.unwrap().unwrap();
            assert!(answer.contains(r#""id":0"#), "{answer}");
            let initialized = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n";
            head.push_str(initialized);
            write.write_all(initialized.as_bytes()).await.unwrap();
            Stoppable {
                lines,
                write,
                stop,
                serving,
                sink,
                consumed,
                head: head.len(),
            }
        }

        /// How many of the lines `sent` after the start the server read whole.
        fn read_whole(&self, sent: &str) -> usize {
            let consumed = self.consumed.load(std::sync::atomic::Ordering::SeqCst);
            let consumed = consumed.saturating_sub(self.head);
            sent.as_bytes()[..consumed]
                .iter()
                .filter(|&&b| b == b'\n')
                .count()
        }

        /// The records, by request id; each must have one.
        fn records(&self) -> std::collections::BTreeMap<u64, crate::audit::AuditRecord> {
            let mut by_id = std::collections::BTreeMap::new();
            for record in self.sink.records() {
                let id = record.request_id.as_deref().unwrap().parse().unwrap();
                assert!(
                    by_id.insert(id, record).is_none(),
                    "two records of call {id}"
                );
            }
            by_id
        }
    }

    /// Calls 1 to `calls` of `tool`, a line each.
    fn calls(tool: &str, calls: usize) -> String {
        (1..=calls)
            .map(|i| {
                format!(
                    "{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"tools/call\",\"params\":{{\"name\":\"{tool}\",\"arguments\":{{}}}}}}\n"
                )
            })
            .collect()
    }

    /// Stopped (SIGTERM) while 64 calls are in hand and more lines are read off the pipe:
    /// nothing more is read, and every call on a line read whole is answered and recorded
    /// once: those in hand run to their end, the others are refused (503
    /// `server_stopping`), not dropped unanswered and unrecorded.
    #[tokio::test]
    async fn every_call_read_before_a_stop_is_answered_and_recorded_once() {
        let mut session = Stoppable::start(&SLOW, 1 << 20).await;
        // More calls than are taken in hand (64), all written at once.
        let sent = calls("slow", 150);
        session.write.write_all(sent.as_bytes()).await.unwrap();
        // Stopped as soon as more calls are read than are taken in hand.
        tokio::time::timeout(std::time::Duration::from_secs(5), async {
            while session.read_whole(&sent) <= MAX_IN_FLIGHT {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the server reads the calls");
        session.stop.cancel();
        let mut answered = std::collections::BTreeMap::new();
        while let Some(line) = tokio::time::timeout(
            std::time::Duration::from_secs(20),
            session.lines.next_line(),
        )
        .await
        .expect("the session ends")
        .unwrap()
        {
            let answer: serde_json::Value = serde_json::from_str(&line).unwrap();
            let id = answer["id"].as_u64().unwrap();
            assert!(
                answered.insert(id, answer).is_none(),
                "answered twice: {line}"
            );
        }
        (&mut session.serving).await.unwrap().unwrap();
        let read = session.read_whole(&sent);
        assert!(read > MAX_IN_FLIGHT, "only {read} calls were read");
        let expected: Vec<u64> = (1..=read as u64).collect();
        assert_eq!(answered.keys().copied().collect::<Vec<_>>(), expected);
        let records = session.records();
        assert_eq!(
            records.keys().copied().collect::<Vec<_>>(),
            expected,
            "one record per call read"
        );
        let mut refused = 0;
        for (id, record) in &records {
            let answer = &answered[id];
            if record.reason.as_deref() == Some("server_stopping") {
                refused += 1;
                assert_eq!(record.status, 503, "{record:?}");
                assert_eq!(answer["error"]["code"], SERVER_BUSY.0, "{answer}");
            } else {
                assert_eq!(answer["result"]["isError"], false, "{answer}");
            }
        }
        assert!(refused > 0, "no call was refused for the stop");
    }

    /// Stopped while a client that does not read its answers holds 64 of them unwritten:
    /// the session still ends (the answers give up at the drain's end), and every call on
    /// a line read whole is recorded once, run or refused.
    #[tokio::test]
    async fn a_client_that_does_not_read_cannot_hold_a_stop_nor_lose_a_record() {
        let mut session = Stoppable::start(&FAST, 4 * 1024).await;
        let sent = calls("fast", 400);
        // The server stops reading once its answers are not read: the write stops
        // halfway.
        let written = tokio::time::timeout(
            std::time::Duration::from_millis(500),
            session.write.write_all(sent.as_bytes()),
        )
        .await;
        assert!(
            written.is_err(),
            "the server read on while its answers were not read"
        );
        session.stop.cancel();
        tokio::time::timeout(std::time::Duration::from_secs(15), &mut session.serving)
            .await
            .expect("the stop ends the session")
            .unwrap()
            .unwrap();
        let read = session.read_whole(&sent);
        assert!(read > 0, "no call was read");
        let records = session.records();
        assert_eq!(
            records.keys().copied().collect::<Vec<_>>(),
            (1..=read as u64).collect::<Vec<_>>(),
            "one record per call read"
        );
    }
}
