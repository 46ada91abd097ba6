//! The CLI's log lines, written to stderr by a thread of their own, so that a log line
//! never blocks the server: a host that starts a stdio server and never reads its stderr
//! fills the pipe (64 KiB), and a worker thread blocked in that write held up every call
//! and SIGTERM. Past [`QUEUE`] lines waiting to be written, a line is dropped and
//! counted; the count is written before the next line that is.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// How many log lines may wait to be written.
pub(crate) const QUEUE: usize = 1024;

/// The longest log line written whole. A line is as long as what it quotes, and some
/// quote what a caller sent (rmcp's warning of an unknown method prints the request's id,
/// its notice of a notification prints its params: 5.7 MB for a notification of 1 MiB of
/// `[1,1,…]`): past this, its start is written, then how much was cut. So the queue
/// holds at most [`QUEUE`] × this, and stderr grows by at most this a request.
pub(crate) const MAX_LINE: usize = 8 * 1024;

/// Whether the log's format writes colour (stderr is a terminal): only then does a
/// colour code in a line stand for the format's own, and is let through.
static COLOUR: AtomicBool = AtomicBool::new(false);

/// Say whether the log's format writes colour (set once, as the subscriber is built).
pub(crate) fn set_colour(on: bool) {
    COLOUR.store(on, Ordering::Relaxed);
}

/// `line` as written: one line, whatever it quotes, and nothing in it that drives the
/// operator's terminal: a line break, a carriage return or another control character is
/// escaped (`\n`, `\r`, `\x07`: a request's id holding line breaks forged 2,688 log
/// lines), and so are the escape byte, C1 controls (`\u{9b}`, an 8-bit CSI), bidi
/// overrides and invisible characters (a client's `\x1b[8m` hid the rest of the line from
/// `tail`, its U+202E reordered it), but for the colour codes of the log's own format
/// when it writes colour; cut to [`MAX_LINE`]: its start, and the count of bytes cut.
fn bounded_line(line: &[u8]) -> Vec<u8> {
    bounded_line_with(line, COLOUR.load(Ordering::Relaxed))
}

fn bounded_line_with(line: &[u8], colour: bool) -> Vec<u8> {
    let text = String::from_utf8_lossy(line);
    let body = text.strip_suffix('\n').unwrap_or(&text);
    let mut out = Vec::with_capacity(body.len().min(MAX_LINE) + 1);
    let mut cut_at = None;
    for (i, c) in body.char_indices() {
        if out.len() >= MAX_LINE - 64 {
            cut_at = Some(i);
            break;
        }
        match c {
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.push(b'\t'),
            '\x1b' if colour && is_colour_code(&body.as_bytes()[i..]) => out.push(0x1b),
            '\0'..='\x1f' | '\x7f' => {
                out.extend_from_slice(format!("\\x{:02x}", u32::from(c)).as_bytes())
            }
            c if c.is_ascii() => out.push(c as u8),
            c if c.is_control() || crate::confirm::is_invisible(c) => {
                out.extend_from_slice(format!("\\u{{{:x}}}", u32::from(c)).as_bytes());
            }
            c => {
                let mut utf8 = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
            }
        }
    }
    if let Some(i) = cut_at {
        out.extend_from_slice(format!("… [{} bytes cut]", body.len() - i).as_bytes());
    }
    out.push(b'\n');
    out
}

/// Whether `at` starts a colour code of the kind the log's format writes to a terminal
/// (`ESC [ 1;33 m`: bold, dim, italic, underline, colours and their resets). Not every
/// SGR code: `ESC [ 8 m` (conceal) hides what follows.
fn is_colour_code(at: &[u8]) -> bool {
    let Some(rest) = at.strip_prefix(b"\x1b[") else {
        return false;
    };
    let params = rest
        .iter()
        .take_while(|b| b.is_ascii_digit() || **b == b';')
        .count();
    rest.get(params) == Some(&b'm')
        && rest[..params].split(|b| *b == b';').all(|p| {
            matches!(
                p,
                b"" | b"0" | b"1" | b"2" | b"3" | b"4" | b"22" | b"23" | b"24" | b"39"
            ) || matches!(p, [b'3' | b'9', b'0'..=b'7'])
        })
}

struct Logs {
    lines: SyncSender<Vec<u8>>,
    /// Lines handed over and not yet written.
    pending: AtomicUsize,
    /// Lines dropped since the last that was written.
    dropped: AtomicU64,
}

static LOGS: OnceLock<Option<Arc<Logs>>> = OnceLock::new();

/// The logs' writer thread, started at the first use (`None`: no thread could start,
/// and lines go to stderr directly).
fn logs() -> Option<&'static Arc<Logs>> {
    LOGS.get_or_init(|| {
        let (lines, queue) = std::sync::mpsc::sync_channel::<Vec<u8>>(QUEUE);
        let logs = Arc::new(Logs {
            lines,
            pending: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
        });
        let thread_logs = Arc::clone(&logs);
        std::thread::Builder::new()
            .name("aac-logs".to_owned())
            .spawn(move || {
                let mut stderr = std::io::stderr();
                for line in queue {
                    let dropped = thread_logs.dropped.swap(0, Ordering::AcqRel);
                    if dropped > 0 {
                        let _ = writeln!(
                            stderr,
                            "({dropped} log lines dropped: stderr was not read fast enough)"
                        );
                    }
                    let _ = stderr.write_all(&line);
                    thread_logs.pending.fetch_sub(1, Ordering::AcqRel);
                }
            })
            .ok()
            .map(|_| logs)
    })
    .as_ref()
}

/// One log line (or part of one) for the logs' thread.
pub(crate) struct QueuedStderr;

impl Write for QueuedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let Some(logs) = logs() else {
            std::io::stderr().write_all(&bounded_line(buf))?;
            return Ok(buf.len());
        };
        logs.pending.fetch_add(1, Ordering::AcqRel);
        match logs.lines.try_send(bounded_line(buf)) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                logs.pending.fetch_sub(1, Ordering::AcqRel);
                logs.dropped.fetch_add(1, Ordering::AcqRel);
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The `tracing_subscriber` writer of the CLI's logs.
pub(crate) fn writer() -> fn() -> QueuedStderr {
    || QueuedStderr
}

/// Wait, at most `limit`, for the lines handed over to be written (before the process
/// exits); a stderr nobody reads is not waited for longer.
pub(crate) fn flush(limit: Duration) {
    let Some(Some(logs)) = LOGS.get() else {
        return;
    };
    let deadline = Instant::now() + limit;
    while logs.pending.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_line_is_cut_to_its_start_and_a_count() {
        let line = format!("WARN {}\n", "é".repeat(1 << 20));
        let cut = bounded_line(line.as_bytes());
        assert!(cut.len() <= MAX_LINE, "{}", cut.len());
        let text = std::str::from_utf8(&cut).expect("cut between characters");
        assert!(text.starts_with("WARN éé"), "{}", &text[..20]);
        let kept = text.find('…').unwrap();
        assert!(
            // (The cut's count leaves out the line's own end.)
            text.ends_with(&format!("… [{} bytes cut]\n", line.len() - 1 - kept)),
            "{}",
            &text[text.len() - 40..]
        );
        let short = "a short line\n";
        assert_eq!(bounded_line(short.as_bytes()), short.as_bytes());
    }

    #[test]
    fn a_line_stays_one_line_whatever_it_quotes() {
        let forged =
            "WARN id=\"1\n2026-12-06T00:00:00Z  INFO forged\r\x07\x1b]0;title\x07\" done\n";
        assert_eq!(
            String::from_utf8(bounded_line(forged.as_bytes())).unwrap(),
            "WARN id=\"1\\n2026-12-06T00:00:00Z  INFO forged\\r\\x07\\x1b]0;title\\x07\" done\n"
        );
        // The format's own colours stay when it writes colour, and only then.
        let coloured = "\x1b[33mWARN\x1b[0m a\tb\n";
        assert_eq!(
            bounded_line_with(coloured.as_bytes(), true),
            coloured.as_bytes()
        );
        assert_eq!(
            String::from_utf8(bounded_line_with(coloured.as_bytes(), false)).unwrap(),
            "\\x1b[33mWARN\\x1b[0m a\tb\n"
        );
    }

    /// What a client can put in a line (its request's id, quoted by a warning) cannot
    /// hide the rest of the line, reorder it or drive the terminal: a conceal code (even
    /// when the log writes colour), a C1 CSI, bidi overrides and invisible characters are
    /// escaped; other text, accents and emoji included, is kept.
    #[test]
    fn a_line_cannot_hide_or_reorder_what_follows() {
        let line = "WARN id=a\x1b[8mHIDDEN\x1b[0m \u{202e}evil\u{9b}2J \u{200b}é😀\n";
        for colour in [false, true] {
            let written = String::from_utf8(bounded_line_with(line.as_bytes(), colour)).unwrap();
            assert!(!written.contains("\x1b[8m"), "{written:?}");
            assert!(
                !written.contains(['\u{202e}', '\u{9b}', '\u{200b}']),
                "{written:?}"
            );
            assert!(
                written.contains("\\u{202e}evil\\u{9b}2J \\u{200b}é😀"),
                "{written:?}"
            );
        }
    }

    #[test]
    fn lines_are_handed_over_without_waiting_and_written_by_the_flush() {
        for i in 0..16 {
            let line = format!("(a test of the log queue: line {i})\n");
            assert_eq!(writer()().write(line.as_bytes()).unwrap(), line.len());
        }
        flush(Duration::from_secs(10));
        let logs = logs().expect("the logs' thread");
        assert_eq!(logs.pending.load(Ordering::Acquire), 0);
    }
}
