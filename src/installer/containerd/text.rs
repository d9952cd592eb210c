//! Text-level details that toml_edit does not preserve on its own, and Go-template files.

use std::path::Path;

use toml_edit::DocumentMut;

use super::error::ConfigError;

/// Renders an edited document so that it keeps the original's line endings and its (missing)
/// final newline. toml_edit keeps every untouched byte except these two: it ends each line it
/// writes with `\n`, including the last one. Without this, install followed by uninstall would
/// not give back a CRLF file, or a file without a final newline, byte for byte.
pub(crate) fn render_like(doc: &DocumentMut, original: &str) -> String {
    let mut out = doc.to_string();
    // toml_edit drops a leading byte-order mark when it parses; put it back (found by the
    // fuzz target `containerd_config`: install + uninstall lost it).
    if original.starts_with(BOM) && !out.starts_with(BOM) {
        out.insert(0, BOM);
    }
    let crlf = original.contains('\n') && !has_bare_lf(original);
    if crlf {
        out = to_crlf(&out);
    }
    if !original.is_empty() && !original.ends_with('\n') {
        if let Some(stripped) = out.strip_suffix("\r\n").filter(|_| crlf) {
            out.truncate(stripped.len());
        } else if let Some(stripped) = out.strip_suffix('\n') {
            out.truncate(stripped.len());
        }
    }
    out
}

/// U+FEFF at the start of a file: a UTF-8 byte-order mark.
const BOM: char = '\u{feff}';

fn has_bare_lf(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes
        .iter()
        .enumerate()
        .any(|(i, &b)| b == b'\n' && (i == 0 || bytes[i - 1] != b'\r'))
}

fn to_crlf(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 16);
    let mut previous = '\0';
    for c in text.chars() {
        if c == '\n' && previous != '\r' {
            out.push('\r');
        }
        out.push(c);
        previous = c;
    }
    out
}

/// A template file split into the Go-template header lines (kept verbatim) and the TOML body.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct TemplateParts<'a> {
    pub header: &'a str,
    pub body: &'a str,
}

/// The header k3s and rke2 templates use to extend the distribution's own config.
pub(crate) const BASE_TEMPLATE_HEADER: &str = "{{ template \"base\" . }}\n\n";

/// Splits a k3s/rke2 template: leading lines that are blank, comments or whole-line template
/// actions (`{{ template "base" . }}`) form the header; the rest must be plain TOML. A template
/// action anywhere in the body (a value like `"{{ .NodeConfig.AgentConfig.PauseImage }}"`) means
/// the body is not TOML we can edit safely, so it is refused.
pub(crate) fn split_template<'a>(
    path: &Path,
    text: &'a str,
) -> Result<TemplateParts<'a>, ConfigError> {
    let mut header_end = 0;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim();
        let is_action = trimmed.starts_with("{{") && trimmed.ends_with("}}");
        if is_action {
            header_end = offset + line.len();
        } else if !(trimmed.is_empty() || trimmed.starts_with('#')) {
            break;
        }
        offset += line.len();
    }
    let (header, body) = text.split_at(header_end);
    if let Some(position) = body.find("{{") {
        let absolute = header_end + position;
        let line = text[..absolute].matches('\n').count() + 1;
        let text_line = text[absolute..].lines().next().unwrap_or_default();
        let line_start = text[..absolute].rfind('\n').map_or(0, |i| i + 1);
        let full_line = text[line_start..absolute].to_string() + text_line;
        return Err(ConfigError::UnsafeTemplate {
            path: path.to_path_buf(),
            line,
            text: full_line.trim().to_string(),
        });
    }
    Ok(TemplateParts { header, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(text: &str) -> String {
        render_like(&text.parse::<DocumentMut>().unwrap(), text)
    }

    #[test]
    fn keeps_line_endings_and_a_missing_final_newline() {
        for text in [
            "version = 2",
            "version = 2\n",
            "a = 1\r\nb = 2\r\n",
            "a = 1\r\nb = 2",
            "[x]\r\n# c\r\ny = 1",
            "",
            "# only a comment",
        ] {
            assert_eq!(round_trip(text), text, "{text:?}");
        }
    }

    #[test]
    fn keeps_a_byte_order_mark() {
        for text in ["\u{feff}version = 2\n", "\u{feff}[a]\r\nb = 1", "\u{feff}"] {
            assert_eq!(round_trip(text), text, "{text:?}");
        }
        let text = "\u{feff}a = 1\n";
        let mut doc: DocumentMut = text.parse().unwrap();
        doc["b"] = toml_edit::value(2);
        assert_eq!(render_like(&doc, text), "\u{feff}a = 1\nb = 2\n");
    }

    #[test]
    fn converts_added_lines_to_crlf() {
        let text = "a = 1\r\n";
        let mut doc: DocumentMut = text.parse().unwrap();
        doc["b"] = toml_edit::value(2);
        assert_eq!(render_like(&doc, text), "a = 1\r\nb = 2\r\n");
    }

    #[test]
    fn splits_template_header_from_body() {
        let path = Path::new("/t");
        let text = "# k3s template\n{{ template \"base\" . }}\n\n[plugins.x]\n  a = 1\n";
        let parts = split_template(path, text).unwrap();
        assert_eq!(parts.header, "# k3s template\n{{ template \"base\" . }}\n");
        assert_eq!(parts.body, "\n[plugins.x]\n  a = 1\n");
        let plain = "version = 2\n";
        assert_eq!(
            split_template(path, plain).unwrap(),
            TemplateParts {
                header: "",
                body: plain
            }
        );
    }

    #[test]
    fn refuses_actions_in_the_body() {
        let text = "{{ template \"base\" . }}\n[plugins.x]\n  image = \"{{ .PauseImage }}\"\n";
        let err = split_template(Path::new("/var/lib/t.tmpl"), text).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("/var/lib/t.tmpl"), "{message}");
        assert!(message.contains("line 3"), "{message}");
        assert!(
            message.contains("image = \\\"{{ .PauseImage }}\\\""),
            "{message}"
        );
    }
}
