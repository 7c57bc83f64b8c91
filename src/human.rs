//! Figures as a person reads them in logs and messages, where Rust's debug
//! form (`1.5s`, `Exited(0)`, `Some(..)`) would otherwise creep in; and text a
//! client wrote (owners, reasons, output), made safe to show ([`printable`]).

use std::borrow::Cow;
use std::fmt::Write as _;
use std::time::Duration;

/// `250 ms`, `1.5 s`, `3 min 4 s`, `2 h 5 min`: whole milliseconds below a
/// second, one decimal below a minute, then the two largest units.
pub fn duration(duration: Duration) -> String {
    let ms = duration.as_millis();
    let s = duration.as_secs();
    match s {
        0 => format!("{ms} ms"),
        1..60 => match ms % 1000 / 100 {
            0 => format!("{s} s"),
            tenth => format!("{s}.{tenth} s"),
        },
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        3600..86_400 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    }
}

/// Text a client wrote (an owner, a reason, a sender's name, a property), as a
/// person may be shown it on a terminal or a page: every control character,
/// and the bidirectional controls that reorder a line, written as an escape
/// (`\x1b`, `\n`, `\u{202e}`), so the text cannot clear a terminal, move the
/// cursor, or start a line of its own that looks like gridfold's. Everything
/// else (letters of any script, punctuation, spaces) is kept as it is.
pub fn printable(text: &str) -> Cow<'_, str> {
    escape_controls(text, false)
}

/// [`printable`] for text of several lines (a task's output, an error tail, an
/// explanation): line breaks and tabs are kept, every other control escaped.
pub fn printable_lines(text: &str) -> Cow<'_, str> {
    escape_controls(text, true)
}

fn escape_controls(text: &str, keep_lines: bool) -> Cow<'_, str> {
    let escaped = |c: char| {
        let bidi = matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        (c.is_control() || bidi) && !(keep_lines && matches!(c, '\n' | '\t'))
    };
    if !text.chars().any(escaped) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            _ if !escaped(c) => out.push(c),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\0'..='\x7f' => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            _ => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_a_client_wrote_are_shown_escaped() {
        let owner = "mallory\x1b[2J\nfake-job     active";
        assert_eq!(printable(owner), "mallory\\x1b[2J\\nfake-job     active");
        assert_eq!(printable("a\tb\rc\x7fd\u{9b}e\u{202e}f"), "a\\tb\\rc\\x7fd\\u{9b}e\\u{202e}f");
        assert!(matches!(printable("plain élève 名前 -_./"), Cow::Borrowed("plain élève 名前 -_./")), "nothing to escape: borrowed");
        assert_eq!(printable_lines("line 1\n\tline 2\x1b[31m\r\n"), "line 1\n\tline 2\\x1b[31m\\r\n");
    }

    #[test]
    fn durations_read_as_a_person_says_them() {
        let cases = [
            (Duration::ZERO, "0 ms"),
            (Duration::from_millis(250), "250 ms"),
            (Duration::from_secs(5), "5 s"),
            (Duration::from_millis(1_550), "1.5 s"),
            (Duration::from_secs(184), "3 min 4 s"),
            (Duration::from_secs(7_500), "2 h 5 min"),
            (Duration::from_secs(3 * 86_400 + 4 * 3600), "3 d 4 h"),
        ];
        for (d, text) in cases {
            assert_eq!(duration(d), text);
        }
    }
}
