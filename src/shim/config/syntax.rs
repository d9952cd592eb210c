//! Syntax rules for the strings of a providerConfig and the catalog.
//!
//! Each check returns the problem as text ("is not a valid DNS-1123 label") so the caller can
//! put the field path and the value in front of it. The rules are deliberately narrow: every
//! string here ends up in a host path, a containerd TOML key, a Kubernetes object or a pod
//! spec, and rejecting an odd character is cheaper than escaping it correctly in four places.

/// Kubernetes' DNS-1123 label: handlers, shim names.
pub fn dns1123_label(s: &str) -> Result<(), String> {
    if s.len() > 63 {
        return Err(format!(
            "is not a valid DNS-1123 label: {} characters, at most 63 allowed",
            s.len()
        ));
    }
    if is_dns_label(s) {
        Ok(())
    } else {
        Err("is not a valid DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit)".into())
    }
}

/// Kubernetes' DNS-1123 subdomain: RuntimeClass names, label key prefixes.
pub fn dns1123_subdomain(s: &str) -> Result<(), String> {
    if s.len() > 253 {
        return Err(format!(
            "is not a valid DNS-1123 subdomain: {} characters, at most 253 allowed",
            s.len()
        ));
    }
    if !s.is_empty() && s.split('.').all(is_dns_label) {
        Ok(())
    } else {
        Err("is not a valid DNS-1123 subdomain (dot-separated DNS-1123 labels)".into())
    }
}

fn is_dns_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            alnum(first) && alnum(last) && bytes.iter().all(|b| alnum(b) || *b == b'-')
        }
        _ => false,
    }
}

/// The name part of a label key or a label value: up to 63 of `[A-Za-z0-9_.-]`, starting and
/// ending alphanumeric.
fn is_label_name(s: &str) -> bool {
    let bytes = s.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            s.len() <= 63
                && first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// A label or annotation key: `[prefix/]name`.
pub fn qualified_name(s: &str) -> Result<(), String> {
    const RULE: &str = "is not a valid qualified name ([DNS-1123 subdomain '/'] name of at most 63 characters [A-Za-z0-9_.-], starting and ending alphanumeric)";
    let (prefix, name) = match s.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, s),
    };
    if let Some(prefix) = prefix
        && dns1123_subdomain(prefix).is_err()
    {
        return Err(RULE.into());
    }
    if is_label_name(name) {
        Ok(())
    } else {
        Err(RULE.into())
    }
}

/// A label value: empty, or a label name.
pub fn label_value(s: &str) -> Result<(), String> {
    if s.is_empty() || is_label_name(s) {
        Ok(())
    } else {
        Err("is not a valid label value (at most 63 characters [A-Za-z0-9_.-], starting and ending alphanumeric)".into())
    }
}

/// containerd's `runtime_type` naming: `io.containerd.<name>.<version>`, which containerd maps to
/// the binary `containerd-shim-<name>-<version>`.
pub fn runtime_type(s: &str) -> Result<(), String> {
    const RULE: &str = "is not a valid runtime type: expected io.containerd.<name>.v<N> with <name> of lower-case letters, digits, '-' and '_'";
    let Some(rest) = s.strip_prefix("io.containerd.") else {
        return Err(RULE.into());
    };
    let Some((name, version)) = rest.rsplit_once('.') else {
        return Err(RULE.into());
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    let version_ok = version
        .strip_prefix('v')
        .is_some_and(|n| !n.is_empty() && n.len() <= 3 && n.chars().all(|c| c.is_ascii_digit()));
    if name_ok && version_ok {
        Ok(())
    } else {
        Err(RULE.into())
    }
}

/// A plain file name (no directories, not `.`/`..`): binary and config-file names, which
/// become host paths below the shim's own directory.
pub fn file_name(s: &str) -> Result<(), String> {
    if s.contains('/') || s.contains("..") {
        return Err("is not a plain file name: it must not contain '/' or '..'".into());
    }
    if is_safe_component(s, 128) {
        Ok(())
    } else {
        Err("is not a plain file name (at most 128 characters [A-Za-z0-9._+-], starting alphanumeric)".into())
    }
}

/// A shim version: part of a versioned directory name on the host.
pub fn version(s: &str) -> Result<(), String> {
    if s.contains('/') || s.contains("..") {
        return Err("is not a valid version: it must not contain '/' or '..'".into());
    }
    if is_safe_component(s, 64) {
        Ok(())
    } else {
        Err(
            "is not a valid version (at most 64 characters [A-Za-z0-9._+-], starting alphanumeric)"
                .into(),
        )
    }
}

fn is_safe_component(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-'))
}

/// An absolute path inside an image: normalised, without `.`/`..` components.
pub fn absolute_path(s: &str) -> Result<(), String> {
    const RULE: &str = "is not a normalised absolute path (components of [A-Za-z0-9._+-], no '.', '..' or empty components)";
    if s.len() > 256 {
        return Err(format!(
            "is not a valid path: {} characters, at most 256 allowed",
            s.len()
        ));
    }
    let Some(rest) = s.strip_prefix('/') else {
        return Err(RULE.into());
    };
    let ok = rest.split('/').all(|component| {
        component != "."
            && component != ".."
            && !component.is_empty()
            && component
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-'))
    });
    if ok { Ok(()) } else { Err(RULE.into()) }
}

/// Lower-case hex sha256.
pub fn sha256_hex(s: &str) -> Result<(), String> {
    if s.len() == 64
        && s.chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    {
        Ok(())
    } else {
        Err("is not a sha256 digest: expected 64 lower-case hex characters".into())
    }
}

/// An `https://` URL the installer downloads from.
///
/// Credentials in the URL would end up in a ConfigMap and in logs, and a fragment is never
/// sent to the server, so both are rejected rather than silently carried along.
pub fn https_url(s: &str) -> Result<(), String> {
    if s.len() > 2048 {
        return Err(format!(
            "is not a valid URL: {} characters, at most 2048 allowed",
            s.len()
        ));
    }
    if !s.starts_with("https://") {
        return Err("is not an https:// URL".into());
    }
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("is not a valid URL: it contains whitespace or control characters".into());
    }
    if s.contains('#') {
        return Err("is not a valid download URL: it has a fragment".into());
    }
    let uri: http::Uri = s.parse().map_err(|e| format!("is not a valid URL: {e}"))?;
    let Some(authority) = uri.authority() else {
        return Err("is not a valid URL: it has no host".into());
    };
    if authority.as_str().contains('@') {
        return Err("is not a valid download URL: it must not contain credentials".into());
    }
    if authority.host().is_empty() {
        return Err("is not a valid URL: it has no host".into());
    }
    Ok(())
}

/// An OCI image reference: `[registry[:port]/]repository[:tag][@sha256:<hex>]`.
pub fn image_reference(s: &str) -> Result<(), String> {
    const RULE: &str =
        "is not a valid image reference ([registry[:port]/]repository[:tag][@sha256:<64 hex>])";
    if s.len() > 512 {
        return Err(format!(
            "is not a valid image reference: {} characters, at most 512 allowed",
            s.len()
        ));
    }
    let (name_and_tag, digest) = match s.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (s, None),
    };
    if let Some(digest) = digest {
        let hex = digest.strip_prefix("sha256:").ok_or(RULE)?;
        sha256_hex(hex).map_err(|_| RULE.to_string())?;
    }
    let last_slash = name_and_tag.rfind('/');
    let (name, tag) = match name_and_tag.rfind(':') {
        Some(colon) if last_slash.is_none_or(|slash| colon > slash) => {
            (&name_and_tag[..colon], Some(&name_and_tag[colon + 1..]))
        }
        _ => (name_and_tag, None),
    };
    if let Some(tag) = tag {
        let ok = !tag.is_empty()
            && tag.len() <= 128
            && tag.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
            && tag
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
        if !ok {
            return Err(RULE.into());
        }
    }
    let mut components: Vec<&str> = name.split('/').collect();
    if components.len() > 1 {
        let first = components[0];
        if first.contains('.') || first.contains(':') || first == "localhost" {
            if !is_registry_host(first) {
                return Err(RULE.into());
            }
            components.remove(0);
        }
    }
    if components.iter().all(|c| is_repository_component(c)) {
        Ok(())
    } else {
        Err(RULE.into())
    }
}

fn is_registry_host(s: &str) -> bool {
    let (host, port) = match s.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (s, None),
    };
    let host_ok = !host.is_empty()
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.starts_with(|c: char| c.is_ascii_alphanumeric())
                && label.ends_with(|c: char| c.is_ascii_alphanumeric())
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        });
    let port_ok =
        port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.chars().all(|c| c.is_ascii_digit()));
    host_ok && port_ok
}

fn is_repository_component(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !s.is_empty()
        && s.starts_with(alnum)
        && s.ends_with(alnum)
        && !s.contains("..")
        && s.chars().all(|c| alnum(c) || matches!(c, '.' | '_' | '-'))
}

/// A Kubernetes quantity that is not negative (`250m`, `160Mi`, `1.5`, `2e3`).
pub fn non_negative_quantity(s: &str) -> Result<(), String> {
    const RULE: &str = "is not a valid quantity (e.g. 250m, 1, 160Mi, 1Gi)";
    if s.is_empty() || s.len() > 64 {
        return Err(RULE.into());
    }
    let (negative, unsigned) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let number_end = unsigned
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_end);
    let dots = number.chars().filter(|c| *c == '.').count();
    if number.is_empty() || number == "." || dots > 1 {
        return Err(RULE.into());
    }
    let suffix_ok = matches!(
        suffix,
        "" | "n"
            | "u"
            | "m"
            | "k"
            | "M"
            | "G"
            | "T"
            | "P"
            | "E"
            | "Ki"
            | "Mi"
            | "Gi"
            | "Ti"
            | "Pi"
            | "Ei"
    ) || suffix
        .strip_prefix(['e', 'E'])
        .map(|exp| exp.strip_prefix(['+', '-']).unwrap_or(exp))
        .is_some_and(|digits| {
            !digits.is_empty() && digits.len() <= 2 && digits.chars().all(|c| c.is_ascii_digit())
        });
    if !suffix_ok {
        return Err(RULE.into());
    }
    let is_zero = number.chars().all(|c| c == '0' || c == '.');
    if negative && !is_zero {
        return Err("must not be negative".into());
    }
    Ok(())
}

/// An entry of containerd's `pod_annotations`: an annotation key, or a scoped key prefix
/// followed by one `*` (containerd matches these as globs). The prefix must end at a scope
/// boundary (`.` or `/`) of a dotted domain, such as `io.katacontainers.config.runtime.` or
/// `example.com/`, so that it cannot reach into other tools' annotations by accident; a bare
/// `*` would hand every annotation of every pod to the shim.
pub fn annotation_pattern(s: &str) -> Result<(), String> {
    match s.strip_suffix('*') {
        Some(stem) => {
            let ok = !stem.is_empty()
                && (stem.ends_with('.') || stem.ends_with('/'))
                && stem.contains('.')
                && !stem.contains("..")
                && stem.len() <= 253
                && stem.starts_with(|c: char| c.is_ascii_alphanumeric())
                && stem.matches('/').count() <= 1
                && stem
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'));
            if ok {
                Ok(())
            } else {
                Err("is not a valid annotation pattern (an annotation key, or a dotted key prefix ending in '.' or '/' and then one '*', such as example.com/*)".into())
            }
        }
        None => qualified_name(s).map_err(|_| {
            "is not a valid annotation pattern (an annotation key, or a dotted key prefix ending in '.' or '/' and then one '*', such as example.com/*)".into()
        }),
    }
}

/// A key of a containerd runtime `options` table: a TOML bare key that a Go options struct
/// can carry (`SystemdCgroup`, `ConfigPath`).
pub fn option_key(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 64
        && s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err("is not a valid option key (at most 64 characters [A-Za-z0-9_], starting with a letter)".into())
    }
}

/// A string option value: printable, bounded.
pub fn option_string(s: &str) -> Result<(), String> {
    if s.len() > 1024 {
        return Err(format!(
            "is too long: {} characters, at most 1024 allowed",
            s.len()
        ));
    }
    if s.chars().any(char::is_control) {
        return Err("must not contain control characters".into());
    }
    Ok(())
}

/// Handlers that belong to the node's own containerd configuration.
pub const RESERVED_HANDLERS: &[&str] = &["runc", "default"];

/// A containerd handler name: a DNS-1123 label that is not one of the node's own runtimes.
pub fn handler(s: &str) -> Result<(), String> {
    dns1123_label(s)?;
    if RESERVED_HANDLERS.contains(&s) {
        return Err("is reserved for the node's default runtime".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_subdomains() {
        for ok in ["spin", "kata-qemu", "a", "0", "a1-b2"] {
            assert!(dns1123_label(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Spin_V2", "-a", "a-", "a.b", &"a".repeat(64)] {
            assert!(dns1123_label(bad).is_err(), "{bad}");
        }
        assert!(dns1123_subdomain("wasmtime-spin-v2").is_ok());
        assert!(dns1123_subdomain("a.b.c").is_ok());
        for bad in ["", "a..b", ".a", "A", "a_b"] {
            assert!(dns1123_subdomain(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn qualified_names_and_label_values() {
        for ok in [
            "a",
            "example.com/x",
            "kubernetes.io/arch",
            "A_b.c-d",
            "io.katacontainers.config",
        ] {
            assert!(qualified_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "/a", "a/", "Example.com/x", "a/b/c", "-a", "a b"] {
            assert!(qualified_name(bad).is_err(), "{bad}");
        }
        assert!(label_value("").is_ok());
        assert!(label_value("amd64").is_ok());
        assert!(label_value("a b").is_err());
        assert!(label_value(&"a".repeat(64)).is_err());
    }

    #[test]
    fn runtime_types() {
        for ok in [
            "io.containerd.spin.v2",
            "io.containerd.kata-qemu.v2",
            "io.containerd.runsc.v1",
            "io.containerd.my_shim.v10",
        ] {
            assert!(runtime_type(ok).is_ok(), "{ok}");
        }
        for bad in [
            "io.containerd.spin",
            "spin.v2",
            "io.containerd..v2",
            "io.containerd.Spin.v2",
            "io.containerd.spin.2",
            "io.containerd.sp/in.v2",
            "io.containerd.spin.v",
            "/usr/bin/shim",
        ] {
            assert!(runtime_type(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn file_names_and_versions_are_not_paths() {
        for ok in ["runsc", "containerd-shim-spin-v2", "runsc.toml", "a+b"] {
            assert!(file_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "../x", "..", ".", "a/b", ".hidden", "a b", "a..b"] {
            assert!(file_name(bad).is_err(), "{bad}");
        }
        assert!(version("v0.22.0").is_ok());
        assert!(version("1.0.0+build.1").is_ok());
        for bad in ["", "..", "../v1", "v1/x", "-v1"] {
            assert!(version(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn absolute_paths() {
        assert!(absolute_path("/assets/containerd-shim-spin-v2").is_ok());
        for bad in ["assets/x", "/", "/a//b", "/a/../b", "/a/./b", "/a/", "/a b"] {
            assert!(absolute_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn digests() {
        assert!(sha256_hex(&"a".repeat(64)).is_ok());
        assert!(sha256_hex(&"A".repeat(64)).is_err());
        assert!(sha256_hex(&"a".repeat(63)).is_err());
        assert!(sha256_hex(&"g".repeat(64)).is_err());
    }

    #[test]
    fn urls() {
        assert!(https_url("https://github.com/x/y/releases/download/v1/shim.tar.gz").is_ok());
        assert!(https_url("https://example.com:8443/a?b=c").is_ok());
        for bad in [
            "http://example.com/x",
            "ftp://example.com/x",
            "https://",
            "https:///x",
            "https://user:pw@example.com/x",
            "https://example.com/a b",
            "https://example.com/x#frag",
            "https://exa mple.com/",
            "HTTPS://example.com/x",
        ] {
            assert!(https_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn image_references() {
        for ok in [
            "ghcr.io/spinframework/containerd-shim-spin/node-installer:v0.22.0",
            "localhost:5000/x",
            "busybox",
            "library/busybox:1.36",
            &format!("registry.example.com/a/b@sha256:{}", "0".repeat(64)),
            &format!("registry.example.com/a/b:v1@sha256:{}", "0".repeat(64)),
            // The tests' registry: an IP address with a port, images by digest.
            &format!(
                "10.255.255.2:5443/containerd-shim-payload/crun@sha256:{}",
                "0".repeat(64)
            ),
        ] {
            assert!(image_reference(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "UPPER/case",
            "ghcr.io/x:",
            "ghcr.io/x@sha256:abc",
            "ghcr.io/../x",
            "ghcr.io//x",
            "ghcr.io/x:tag with space",
            "-bad.io/x",
        ] {
            assert!(image_reference(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn quantities() {
        for ok in [
            "250m", "1", "160Mi", "1.5", "1Gi", "2e3", "0", "+1", ".5", "1E-2",
        ] {
            assert!(non_negative_quantity(ok).is_ok(), "{ok}");
        }
        for bad in ["", "abc", "1.2.3", "10Q", "1e", "m", ".", "1 Gi"] {
            assert!(non_negative_quantity(bad).is_err(), "{bad}");
        }
        assert_eq!(
            non_negative_quantity("-1").unwrap_err(),
            "must not be negative"
        );
        assert!(non_negative_quantity("-0").is_ok());
    }

    #[test]
    fn annotation_patterns() {
        for ok in [
            "io.katacontainers.*",
            "example.com/*",
            "dev.gvisor.spec.mount",
            "example.com/x",
        ] {
            assert!(annotation_pattern(ok).is_ok(), "{ok}");
        }
        for bad in [
            "*", "", "a*b", "**", "/x*", "a/b/c*", "io.*.x", "io.k*", "example*", "x/*", "io..*",
        ] {
            assert!(annotation_pattern(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn options() {
        assert!(option_key("SystemdCgroup").is_ok());
        assert!(option_key("binary_name").is_ok());
        for bad in ["", "1a", "a.b", "a-b", "a b"] {
            assert!(option_key(bad).is_err(), "{bad}");
        }
        assert!(option_string("/usr/bin/crun").is_ok());
        assert!(option_string("a\nb").is_err());
        assert!(option_string(&"a".repeat(1025)).is_err());
    }
}
