//! Text from a server made safe to print on a person's terminal.
//!
//! One definition, shared by [`crate::mcp::client::ChildStderr::Escaped`] (a stdio
//! server's logs) and a host's own printing (`aac-host`'s names, titles, messages and
//! questions), so that what a server writes is escaped the same wherever it shows.

/// True for a character a host prints escaped: a control character, an invisible one
/// ([`crate::confirm::is_invisible`]), a blank that looks like a space but is none, or a
/// mark drawn across or around the letters before it (an overlay such as U+0336, which
/// strikes a tool's title through, or an enclosing mark such as U+20DD, which circles it).
pub fn must_escape(c: char) -> bool {
    c.is_control()
        || crate::confirm::is_invisible(c)
        || matches!(
            c,
            // Blanks that are no space.
            '\u{a0}'
                | '\u{1680}'
                | '\u{2000}'..='\u{200a}'
                | '\u{202f}'
                | '\u{205f}'
                | '\u{3000}'
                // Overlays (canonical combining class 1) drawn across the letters.
                | '\u{334}'..='\u{338}'
                | '\u{1cd4}'
                | '\u{1ce2}'..='\u{1ce8}'
                | '\u{20d2}'..='\u{20d3}'
                | '\u{20d8}'..='\u{20da}'
                | '\u{20e5}'..='\u{20e6}'
                | '\u{20ea}'..='\u{20eb}'
                | '\u{10a39}'
                | '\u{16af0}'..='\u{16af4}'
                | '\u{1bc9e}'
                | '\u{1d167}'..='\u{1d169}'
                // Enclosing marks (general category Me), drawn around them.
                | '\u{488}'..='\u{489}'
                | '\u{1abe}'
                | '\u{20dd}'..='\u{20e0}'
                | '\u{20e2}'..='\u{20e4}'
                | '\u{a670}'..='\u{a672}'
        )
}

/// The longest run of spaces printed as it is: a longer one (padding that pushes the
/// rest of a line out of view) is shown by its length.
const MAX_SPACES: usize = 4;

/// Server text on one line: control characters (line breaks and tabs included) and the
/// others of [`must_escape`] escaped (`\n`, `\u{202e}`), and a run of more than four
/// spaces shown by its length (`[300 spaces]`), so that a title, a message or a log line
/// cannot start a line of its own, move the cursor, rewrite a question, strike itself
/// through or push the rest of the line out of view.
pub fn escape_line(text: &str) -> String {
    escape(text, false)
}

/// [`escape_line`] for text of several lines (a tool's text result): line breaks, tabs
/// and runs of spaces (indentation) are kept.
pub fn escape_text(text: &str) -> String {
    escape(text, true)
}

fn escape(text: &str, keep_lines: bool) -> String {
    let mut out = String::with_capacity(text.len());
    let mut spaces = 0usize;
    let flush = |out: &mut String, spaces: &mut usize| {
        if *spaces > MAX_SPACES {
            out.push_str(&format!(" [{spaces} spaces] "));
        } else {
            out.extend(std::iter::repeat_n(' ', *spaces));
        }
        *spaces = 0;
    };
    for c in text.chars() {
        // A tool's text result keeps its indentation; one line of server text is shown
        // whole.
        if c == ' ' && !keep_lines {
            spaces += 1;
            continue;
        }
        flush(&mut out, &mut spaces);
        match c {
            '\n' | '\t' if keep_lines => out.push(c),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if must_escape(c) => out.extend(c.escape_unicode()),
            c => out.push(c),
        }
    }
    flush(&mut out, &mut spaces);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_stays_one_line() {
        assert_eq!(escape_line("a\nb\tc\rd"), r"a\nb\tc\rd");
        assert_eq!(escape_line("x\u{1b}[2K\u{202e}y"), r"x\u{1b}[2K\u{202e}y");
        assert_eq!(escape_line("é ✓ 日本"), "é ✓ 日本");
        assert_eq!(escape_text("a\nb\u{200b}"), "a\nb\\u{200b}");
        assert_eq!(escape_line("De\u{336}l"), r"De\u{336}l");
        assert_eq!(escape_line("a\u{a0}b\u{3000}c"), r"a\u{a0}b\u{3000}c");
        assert_eq!(
            escape_line(&format!("Read{}(harmless)", " ".repeat(300))),
            "Read [300 spaces] (harmless)"
        );
        assert_eq!(escape_line("a  b"), "a  b");
    }

    #[test]
    fn overlays_and_enclosing_marks_are_escaped() {
        for c in [
            '\u{1cd4}',
            '\u{1ce2}',
            '\u{1ce8}',
            '\u{10a39}',
            '\u{16af0}',
            '\u{16af4}',
            '\u{1bc9e}',
            '\u{1d167}',
            '\u{1d169}',
            '\u{488}',
            '\u{489}',
            '\u{20dd}',
            '\u{20e0}',
            '\u{20e2}',
            '\u{20e4}',
            '\u{a670}',
            '\u{a672}',
        ] {
            assert!(must_escape(c), "U+{:04X}", u32::from(c));
            assert_eq!(
                escape_line(&format!("Delete{c}")),
                format!("Delete\\u{{{:x}}}", u32::from(c))
            );
        }
        // Marks drawn above or below a letter, not across it, are text.
        for c in ['\u{301}', '\u{323}', '\u{20d0}', '\u{1d165}'] {
            assert!(!must_escape(c), "U+{:04X}", u32::from(c));
        }
    }
}
