//! Building HTML safely: every piece of text that reaches a page goes through
//! [`escape`] (element text and attribute values alike), and [`Html`] is the one
//! type a view returns, so an unescaped string cannot slip in by accident: the
//! only ways to add text are [`Html::text`] and [`Html::text_lines`] (escaped,
//! control characters written out as by [`crate::human::printable`]) and
//! [`Html::raw`] for markup written in this module's callers as literals.

use std::fmt::Write as _;

/// `text` with `& < > " '` replaced by character references: safe inside an
/// element and inside a quoted attribute value.
pub fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// A piece of a page under construction.
#[derive(Debug, Default, Clone)]
pub struct Html(String);

impl Html {
    pub fn new() -> Html {
        Html(String::new())
    }

    /// Markup written by gridfold itself (tags, attribute names): never user input.
    pub fn raw(&mut self, markup: &'static str) -> &mut Html {
        self.0.push_str(markup);
        self
    }

    /// Text, escaped; a control character (a line break too) is written out as
    /// an escape ([`crate::human::printable`]).
    pub fn text(&mut self, text: impl std::fmt::Display) -> &mut Html {
        self.0.push_str(&escape(&crate::human::printable(&text.to_string())));
        self
    }

    /// Text of several lines (for a `<pre>`: output, an error tail, an
    /// explanation), escaped; line breaks and tabs kept, every other control
    /// character written out ([`crate::human::printable_lines`]).
    pub fn text_lines(&mut self, text: &str) -> &mut Html {
        self.0.push_str(&escape(&crate::human::printable_lines(text)));
        self
    }

    /// Markup generated in this module's siblings from numbers and literals only
    /// (the throughput plot's SVG): never from user input.
    pub(super) fn push_generated(&mut self, markup: String) -> &mut Html {
        self.0.push_str(&markup);
        self
    }

    /// Markup already built by another [`Html`].
    pub fn push(&mut self, other: &Html) -> &mut Html {
        self.0.push_str(&other.0);
        self
    }

    /// A number (never needs escaping).
    pub fn num(&mut self, number: impl Into<f64>) -> &mut Html {
        let number: f64 = number.into();
        if number.fract() == 0.0 && number.abs() < 1e15 {
            let _ = write!(self.0, "{}", number as i64);
        } else {
            let _ = write!(self.0, "{number:.2}");
        }
        self
    }

    /// `<a href="HREF">TEXT</a>`, both escaped.
    pub fn link(&mut self, href: &str, text: impl std::fmt::Display) -> &mut Html {
        self.raw("<a href=\"").text(href).raw("\">").text(text).raw("</a>")
    }

    /// `<tag>TEXT</tag>` for a literal tag name.
    pub fn element(&mut self, tag: &'static str, text: impl std::fmt::Display) -> &mut Html {
        self.0.push('<');
        self.0.push_str(tag);
        self.0.push('>');
        self.text(text);
        self.0.push_str("</");
        self.0.push_str(tag);
        self.0.push('>');
        self
    }

    /// A table header row of literal column names.
    pub fn header_row(&mut self, columns: &[&'static str]) -> &mut Html {
        self.raw("<tr>");
        for column in columns {
            self.element("th", column);
        }
        self.raw("</tr>")
    }

    pub fn into_string(self) -> String {
        self.0
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Percent-encodes a path segment (a job id, `JOB/INDEX`) for a link.
pub fn url_segment(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            encoded.push(byte as char);
        } else {
            let _ = write!(encoded, "%{byte:02X}");
        }
    }
    encoded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_characters_are_escaped_in_text_and_links() {
        assert_eq!(escape(r#"<script>alert("x")</script> & 'y'"#), "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;");
        let mut html = Html::new();
        html.link("/jobs/\"><script>", "<b>").element("td", "a<b");
        assert_eq!(html.as_str(), "<a href=\"/jobs/&quot;&gt;&lt;script&gt;\">&lt;b&gt;</a><td>a&lt;b</td>");
        assert_eq!(url_segment("a b/<c>"), "a%20b%2F%3Cc%3E");
    }

    #[test]
    fn control_characters_are_written_out_in_text_and_kept_only_as_line_breaks_in_lines() {
        let mut html = Html::new();
        html.element("td", "eve\x1b[2J\nfake <row>");
        assert_eq!(html.as_str(), "<td>eve\\x1b[2J\\nfake &lt;row&gt;</td>");
        let mut pre = Html::new();
        pre.text_lines("line 1\nline\x1b[31m 2\n");
        assert_eq!(pre.as_str(), "line 1\nline\\x1b[31m 2\n");
    }
}
