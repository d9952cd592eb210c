//! What the operator allows of custom (non-catalog) shims: whether they are allowed at all,
//! and from which download hosts and image registries their files may come.
//!
//! A custom shim puts a binary of the shoot owner's choosing on every selected node, run as
//! root by containerd. An operator who wants only reviewed runtimes switches custom shims off;
//! one who trusts certain sources lists them. The default allows everything, as before.

use std::fmt;

/// The operator's rules for custom shims.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CustomShimPolicy {
    /// `false`: only catalog shims.
    pub disallowed: bool,
    /// Hosts `url` downloads may come from: `example.com` exactly, or `*.example.com` for its
    /// subdomains. Empty: any host.
    pub download_hosts: Vec<String>,
    /// Where `image` files may come from: a registry (`ghcr.io`) or a repository prefix
    /// (`ghcr.io/example`). Empty: any registry.
    pub image_registries: Vec<String>,
}

/// A list entry the controller cannot use: reported at start-up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyError {
    pub flag: &'static str,
    pub value: String,
    pub problem: &'static str,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "--{} {:?}: {}", self.flag, self.value, self.problem)
    }
}

impl std::error::Error for PolicyError {}

pub const DOWNLOAD_HOSTS_FLAG: &str = "custom-shim-download-hosts";
pub const IMAGE_REGISTRIES_FLAG: &str = "custom-shim-image-registries";

impl CustomShimPolicy {
    /// Checks and normalises (lower case) the operator's lists.
    pub fn new(
        allowed: bool,
        download_hosts: &[String],
        image_registries: &[String],
    ) -> Result<CustomShimPolicy, PolicyError> {
        let mut hosts = Vec::new();
        for host in download_hosts.iter().map(|h| h.trim().to_ascii_lowercase()) {
            let bare = host.strip_prefix("*.").unwrap_or(&host);
            if !is_dns_name(bare) {
                return Err(PolicyError {
                    flag: DOWNLOAD_HOSTS_FLAG,
                    value: host,
                    problem: "is not a host name (example.com) or a subdomain pattern (*.example.com)",
                });
            }
            hosts.push(host);
        }
        let mut registries = Vec::new();
        for registry in image_registries
            .iter()
            .map(|r| r.trim().trim_end_matches('/').to_ascii_lowercase())
        {
            let host = registry.split('/').next().unwrap_or_default();
            let host = host.split(':').next().unwrap_or_default();
            let path_ok = registry.split('/').skip(1).all(|c| {
                !c.is_empty()
                    && c.chars()
                        .all(|ch| ch.is_ascii_alphanumeric() || "._-".contains(ch))
            });
            if !(is_dns_name(host) || host == "localhost") || !path_ok {
                return Err(PolicyError {
                    flag: IMAGE_REGISTRIES_FLAG,
                    value: registry,
                    problem: "is not a registry (ghcr.io, registry.example.com:5000) or a repository prefix (ghcr.io/example)",
                });
            }
            registries.push(registry);
        }
        Ok(CustomShimPolicy {
            disallowed: !allowed,
            download_hosts: hosts,
            image_registries: registries,
        })
    }

    /// Whether a download from `url` (a valid https URL) is allowed.
    pub fn check_url(&self, url: &str) -> Result<(), String> {
        if self.download_hosts.is_empty() {
            return Ok(());
        }
        let host = url_host(url);
        let allowed = self
            .download_hosts
            .iter()
            .any(|pattern| match pattern.strip_prefix("*.") {
                Some(domain) => host
                    .strip_suffix(domain)
                    .is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
                None => host == *pattern,
            });
        if allowed {
            Ok(())
        } else {
            Err(format!(
                "downloads from host {host:?}, which the operator does not allow (allowed: {})",
                self.download_hosts.join(", ")
            ))
        }
    }

    /// Whether files may come from the image `reference` (a valid image reference).
    pub fn check_image(&self, reference: &str) -> Result<(), String> {
        if self.image_registries.is_empty() {
            return Ok(());
        }
        let repository = qualified_repository(reference);
        let allowed = self.image_registries.iter().any(|prefix| {
            repository == *prefix
                || repository
                    .strip_prefix(prefix.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        });
        if allowed {
            Ok(())
        } else {
            Err(format!(
                "is in repository {repository:?}, which the operator does not allow (allowed: {})",
                self.image_registries.join(", ")
            ))
        }
    }
}

fn is_dns_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

/// The host of an https URL, lower case, without credentials or port.
fn url_host(url: &str) -> String {
    let rest = url.strip_prefix("https://").unwrap_or(url);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host_port.split(':').next().unwrap_or_default(),
    };
    host.to_ascii_lowercase()
}

/// The repository of an image reference with its registry spelled out, the way a container
/// runtime resolves it: `busybox` is `docker.io/library/busybox`, `example/x` is
/// `docker.io/example/x`.
fn qualified_repository(reference: &str) -> String {
    let name = reference.split('@').next().unwrap_or_default();
    let last_slash = name.rfind('/');
    let name = match name.rfind(':') {
        Some(colon) if last_slash.is_none_or(|slash| colon > slash) => &name[..colon],
        _ => name,
    };
    let name = name.to_ascii_lowercase();
    match name.split_once('/') {
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => name,
        Some(_) => format!("docker.io/{name}"),
        None => format!("docker.io/library/{name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn the_default_allows_everything() {
        let policy = CustomShimPolicy::default();
        assert!(!policy.disallowed);
        assert!(policy.check_url("https://anything.example/x").is_ok());
        assert!(policy.check_image("busybox").is_ok());
    }

    #[test]
    fn download_hosts_match_exactly_or_as_subdomains() {
        let policy =
            CustomShimPolicy::new(true, &strings(&["github.com", "*.Example.com"]), &[]).unwrap();
        for ok in [
            "https://github.com/o/r/releases/download/v1/shim",
            "https://GitHub.com:443/x",
            "https://dl.example.com/shim",
            "https://a.b.example.com/shim",
        ] {
            assert!(policy.check_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "https://objects.githubusercontent.com/x",
            "https://github.com.evil.io/x",
            "https://example.com/shim",
            "https://notexample.com/shim",
            "https://user@evil.io/x",
        ] {
            let err = policy.check_url(bad).unwrap_err();
            assert!(err.contains("the operator does not allow"), "{bad}: {err}");
        }
    }

    #[test]
    fn registries_match_the_registry_or_a_repository_prefix() {
        let policy = CustomShimPolicy::new(
            true,
            &[],
            &strings(&[
                "ghcr.io/spinframework",
                "registry.example.com:5000",
                "docker.io/library",
            ]),
        )
        .unwrap();
        for ok in [
            "ghcr.io/spinframework/containerd-shim-spin/node-installer:v0.24.0",
            "registry.example.com:5000/shims/x:v1",
            "busybox:1.37",
            "docker.io/library/alpine",
        ] {
            assert!(policy.check_image(ok).is_ok(), "{ok}");
        }
        for bad in [
            "ghcr.io/spinframework-evil/x",
            "ghcr.io/other/x",
            "example/x",
            "registry.example.com/shims/x",
        ] {
            let err = policy.check_image(bad).unwrap_err();
            assert!(err.contains("the operator does not allow"), "{bad}: {err}");
        }
    }

    #[test]
    fn bad_list_entries_name_the_flag_and_the_value() {
        let err = CustomShimPolicy::new(true, &strings(&["https://github.com"]), &[]).unwrap_err();
        assert_eq!(err.flag, DOWNLOAD_HOSTS_FLAG);
        assert!(err.to_string().contains("\"https://github.com\""), "{err}");
        let err = CustomShimPolicy::new(true, &[], &strings(&["ghcr.io//x"])).unwrap_err();
        assert_eq!(err.flag, IMAGE_REGISTRIES_FLAG);
        assert!(CustomShimPolicy::new(false, &[], &[]).unwrap().disallowed);
    }
}
