//! A `tokio_postgres` connection driven by the thread that uses it, without a runtime.
//!
//! The audit sink's appends are made by whichever thread leads its group commit: a
//! caller's (a worker of the server's runtime) or the sink's writer thread. Driving the
//! connection there, on a runtime of the sink's own, meant leaving the caller's runtime
//! first (`block_in_place`, which hands the worker's core to another thread at every
//! call). Here the connection's socket is non-blocking, and [`Link::run`] polls the
//! request and the connection in turn on the calling thread, waiting on the socket
//! itself (`epoll`, through `mio`) when neither can go on: nothing leaves the thread, and
//! nothing runs between two appends (as before: the connection ran only inside the
//! sink's runtime).
//!
//! [`connect`] honours what `Config::connect` does of the sink's configuration: the
//! hosts (TCP or Unix-domain), `hostaddr`, the ports, `connect_timeout` (for each
//! attempt, the start-up exchange included), the TCP keepalives, `tcp_user_timeout`,
//! and `target_session_attrs`. TLS is not offered: the sink connects with `NoTls`, as it
//! did.

use std::future::Future;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use mio::{Events, Interest, Token};
use socket2::{SockRef, TcpKeepalive};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::config::{Host, TargetSessionAttrs};
use tokio_postgres::tls::NoTlsStream;
use tokio_postgres::{Client, Config, Connection, NoTls, SimpleQueryMessage};

use super::describe;

/// The connection's socket, non-blocking: a read or write that would block is
/// `Pending`, and [`Link::run`] waits for the socket before polling again.
#[derive(Debug)]
pub(crate) enum Socket {
    Tcp(mio::net::TcpStream),
    #[cfg(unix)]
    Unix(mio::net::UnixStream),
}

impl Socket {
    fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Socket::Tcp(s) => s,
            #[cfg(unix)]
            Socket::Unix(s) => s,
        }
    }

    fn io<T>(
        &mut self,
        mut op: impl FnMut(&mut dyn ReadWrite) -> io::Result<T>,
    ) -> Poll<io::Result<T>> {
        loop {
            let done = match self {
                Socket::Tcp(s) => op(s),
                #[cfg(unix)]
                Socket::Unix(s) => op(s),
            };
            match done {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
                done => return Poll::Ready(done),
            }
        }
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let unfilled = buf.initialize_unfilled();
        match self.get_mut().io(|s| s.read(unfilled)) {
            Poll::Ready(Ok(n)) => {
                buf.advance(n);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().io(|s| s.write(buf))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().io(|s| s.flush())
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let shut = match self.get_mut() {
            Socket::Tcp(s) => s.shutdown(std::net::Shutdown::Write),
            #[cfg(unix)]
            Socket::Unix(s) => s.shutdown(std::net::Shutdown::Write),
        };
        Poll::Ready(match shut {
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
            shut => shut,
        })
    }
}

/// A waker that only notes it was woken: [`Link::run`] polls again instead of waiting.
#[derive(Debug, Default)]
struct Woken(AtomicBool);

impl Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
}

/// The connection's half of a [`Client`], and the poller of its socket.
pub(crate) struct Link {
    /// `None` once it ended (the server closed it, or it failed): the client is closed.
    connection: Option<Connection<Socket, NoTlsStream>>,
    poll: mio::Poll,
    events: Events,
    /// Set by the waker of every poll [`Link::run`] makes.
    woken: Arc<Woken>,
    waker: Waker,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("open", &self.connection.is_some())
            .finish_non_exhaustive()
    }
}

impl Link {
    fn new(mut socket: Socket) -> io::Result<(Link, Socket)> {
        let poll = mio::Poll::new()?;
        poll.registry().register(
            socket.source(),
            Token(0),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        let woken = Arc::new(Woken::default());
        let link = Link {
            connection: None,
            poll,
            events: Events::with_capacity(4),
            waker: Waker::from(Arc::clone(&woken)),
            woken,
        };
        Ok((link, socket))
    }

    /// Run `future` (requests of this link's client) to its end on this thread, driving the
    /// connection meanwhile. `Err` only when the socket cannot be waited on, or
    /// `deadline` passed first (`TimedOut`).
    pub(crate) fn run<F: Future>(
        &mut self,
        future: F,
        deadline: Option<Instant>,
    ) -> io::Result<F::Output> {
        let mut future = pin!(future);
        let waker = self.waker.clone();
        let mut cx = Context::from_waker(&waker);
        loop {
            self.woken.0.store(false, Ordering::Release);
            if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
                return Ok(output);
            }
            if let Some(connection) = self.connection.as_mut()
                && let Poll::Ready(ended) = Pin::new(connection).poll(&mut cx)
            {
                if let Err(err) = ended {
                    tracing::debug!(error = %describe(&err), "the audit database's connection ended");
                }
                // Its client's requests fail from now on, and the client is closed.
                self.connection = None;
                continue;
            }
            if self.woken.0.load(Ordering::Acquire) {
                continue;
            }
            // Neither can go on until the socket can (the connection reads and writes
            // until either would block, so an edge-triggered wait misses nothing).
            let timeout = match deadline {
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "the audit database did not answer in time",
                        ));
                    }
                    Some(left)
                }
                None => None,
            };
            match self.poll.poll(&mut self.events, timeout) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
                Ok(()) => {}
            }
        }
    }
}

/// Connect as `config` says, on this thread: each host in turn (each address of a
/// name), every attempt within `connect_timeout`, until one accepts.
pub(crate) fn connect(config: &Config) -> Result<(Client, Link), String> {
    let hosts = config.get_hosts();
    let hostaddrs = config.get_hostaddrs();
    if hosts.is_empty() && hostaddrs.is_empty() {
        return Err("both host and hostaddr are missing".to_owned());
    }
    let count = hosts.len().max(hostaddrs.len());
    let ports = config.get_ports();
    if ports.len() > 1 && ports.len() != count {
        return Err("invalid number of ports".to_owned());
    }
    let timeout = config.get_connect_timeout().copied();
    let mut last = None;
    for i in 0..count {
        let port = ports
            .get(i)
            .or_else(|| ports.first())
            .copied()
            .unwrap_or(5432);
        let sockets: Vec<io::Result<Socket>> = match (hostaddrs.get(i), hosts.get(i)) {
            (Some(ip), _) => vec![tcp(config, SocketAddr::new(*ip, port), timeout)],
            (None, Some(Host::Tcp(name))) => match (name.as_str(), port).to_socket_addrs() {
                Ok(addrs) => addrs.map(|addr| tcp(config, addr, timeout)).collect(),
                Err(e) => vec![Err(e)],
            },
            #[cfg(unix)]
            (None, Some(Host::Unix(dir))) => {
                let path = dir.join(format!(".s.PGSQL.{port}"));
                vec![std::os::unix::net::UnixStream::connect(path).and_then(|s| {
                    s.set_nonblocking(true)?;
                    Ok(Socket::Unix(mio::net::UnixStream::from_std(s)))
                })]
            }
            (None, None) => Vec::new(),
        };
        for socket in sockets {
            match socket.map_err(|e| e.to_string()).and_then(|socket| {
                let deadline = timeout.map(|t| Instant::now() + t);
                start(config, socket, deadline)
            }) {
                Ok(connected) => return Ok(connected),
                Err(e) => last = Some(e),
            }
        }
    }
    Err(last.unwrap_or_else(|| "could not resolve any addresses".to_owned()))
}

/// A TCP connection to `addr`, set up as `tokio_postgres` sets its own.
fn tcp(config: &Config, addr: SocketAddr, timeout: Option<Duration>) -> io::Result<Socket> {
    let stream = match timeout {
        Some(timeout) => TcpStream::connect_timeout(&addr, timeout)?,
        None => TcpStream::connect(addr)?,
    };
    stream.set_nodelay(true)?;
    let sock = SockRef::from(&stream);
    #[cfg(target_os = "linux")]
    if let Some(user_timeout) = config.get_tcp_user_timeout() {
        sock.set_tcp_user_timeout(Some(*user_timeout))?;
    }
    if config.get_keepalives() {
        let mut keepalive = TcpKeepalive::new().with_time(config.get_keepalives_idle());
        if let Some(interval) = config.get_keepalives_interval() {
            keepalive = keepalive.with_interval(interval);
        }
        if let Some(retries) = config.get_keepalives_retries() {
            keepalive = keepalive.with_retries(retries);
        }
        sock.set_tcp_keepalive(&keepalive)?;
    }
    stream.set_nonblocking(true)?;
    Ok(Socket::Tcp(mio::net::TcpStream::from_std(stream)))
}

/// The start-up exchange on `socket`, then the session's check.
fn start(
    config: &Config,
    socket: Socket,
    deadline: Option<Instant>,
) -> Result<(Client, Link), String> {
    let (mut link, socket) = Link::new(socket).map_err(|e| e.to_string())?;
    let (client, connection) = link
        .run(config.connect_raw(socket, NoTls), deadline)
        .map_err(|e| e.to_string())?
        .map_err(|e| describe(&e))?;
    link.connection = Some(connection);
    let wanted = match config.get_target_session_attrs() {
        TargetSessionAttrs::ReadWrite => "off",
        TargetSessionAttrs::ReadOnly => "on",
        _ => return Ok((client, link)),
    };
    let answer = link
        .run(client.simple_query("SHOW transaction_read_only"), deadline)
        .map_err(|e| e.to_string())?
        .map_err(|e| describe(&e))?;
    let read_only = answer.iter().find_map(|m| match m {
        SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
        _ => None,
    });
    if read_only.as_deref() == Some(wanted) {
        Ok((client, link))
    } else {
        Err("the database's session does not have the target session attributes".to_owned())
    }
}
