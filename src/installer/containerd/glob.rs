//! `imports` globs as containerd expands them: Go's `filepath.Glob` and `filepath.Match`.
//!
//! containerd treats an entry as a glob only when it contains `*` (an entry with only `?` or
//! `[` names one file literally); a glob is expanded with Go's rules: `*` and `?` never match
//! `/`, `[...]` classes with ranges and `^` negation, `\` escapes, wildcards in directory
//! parts, and the matches of each directory in sorted order. A malformed pattern matches
//! nothing here (containerd refuses to start with it, which its own dump reports).

use std::path::{Component, Path, PathBuf};

use super::error::ConfigError;
use super::host::{HostFs, entries_host};

/// Whether containerd expands an `imports` entry as a glob.
pub(crate) fn is_glob(entry: &str) -> bool {
    entry.contains('*')
}

/// Whether a path pattern has wildcards in Go's sense.
pub(crate) fn has_meta(text: &str) -> bool {
    text.contains(['*', '?', '[', '\\'])
}

/// The files an absolute, cleaned glob pattern matches on the host, in containerd's order.
pub(crate) fn expand(host: &dyn HostFs, pattern: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let Some(text) = pattern.to_str() else {
        return Err(ConfigError::NonUtf8Path {
            path: pattern.to_path_buf(),
        });
    };
    if !valid(text) {
        return Ok(Vec::new());
    }
    let mut found = vec![PathBuf::from("/")];
    for component in pattern.components() {
        let segment = match component {
            Component::RootDir => continue,
            Component::Normal(segment) => segment.to_string_lossy().into_owned(),
            // Cleaned patterns have no `.` or `..`; anything else matches nothing.
            _ => return Ok(Vec::new()),
        };
        let mut next = Vec::new();
        for dir in &found {
            if !has_meta(&segment) {
                next.push(dir.join(&segment));
                continue;
            }
            for name in entries_host(host, dir)? {
                if matches(&segment, &name) == Some(true) {
                    next.push(dir.join(name));
                }
            }
        }
        found = next;
    }
    Ok(found)
}

/// Whether every segment of a pattern is well formed (Go's `ErrBadPattern` otherwise).
fn valid(pattern: &str) -> bool {
    pattern
        .split('/')
        .all(|segment| matches(segment, "").is_some())
}

/// Go's `filepath.Match` of one pattern segment against one name; `None` for a malformed
/// pattern.
pub(crate) fn matches(pattern: &str, name: &str) -> Option<bool> {
    let pattern: Vec<char> = pattern.chars().collect();
    let name: Vec<char> = name.chars().collect();
    match_chars(&pattern, &name)
}

fn match_chars(pattern: &[char], name: &[char]) -> Option<bool> {
    let (mut pattern, mut name) = (pattern, name);
    'pattern: while !pattern.is_empty() {
        let (star, chunk, rest) = scan_chunk(pattern);
        if star && chunk.is_empty() {
            // A trailing `*` matches the rest of the name (never a `/`).
            return Some(!name.contains(&'/'));
        }
        let (remainder, ok) = match_chunk(chunk, name)?;
        if ok && (remainder.is_empty() || !rest.is_empty()) {
            name = remainder;
            pattern = rest;
            continue;
        }
        if star {
            let mut i = 0;
            while i < name.len() && name[i] != '/' {
                let (remainder, ok) = match_chunk(chunk, &name[i + 1..])?;
                // The last chunk must match the whole rest of the name.
                if ok && (remainder.is_empty() || !rest.is_empty()) {
                    name = remainder;
                    pattern = rest;
                    continue 'pattern;
                }
                i += 1;
            }
        }
        // No match: the rest of the pattern must still be well formed.
        let mut rest = rest;
        while !rest.is_empty() {
            let (_, chunk, tail) = scan_chunk(rest);
            match_chunk(chunk, &[])?;
            rest = tail;
        }
        return Some(false);
    }
    Some(name.is_empty())
}

/// Splits off leading stars and the chunk up to the next unbracketed `*`.
fn scan_chunk(pattern: &[char]) -> (bool, &[char], &[char]) {
    let mut pattern = pattern;
    let mut star = false;
    while let Some(('*', rest)) = pattern.split_first() {
        pattern = rest;
        star = true;
    }
    let mut in_range = false;
    let mut i = 0;
    while i < pattern.len() {
        match pattern[i] {
            // The escaped character cannot end the chunk.
            '\\' if i + 1 < pattern.len() => i += 1,
            '[' => in_range = true,
            ']' => in_range = false,
            '*' if !in_range => break,
            _ => {}
        }
        i += 1;
    }
    (star, &pattern[..i], &pattern[i..])
}

/// Matches one chunk (no `*`) at the start of `name`; returns the rest of the name and whether
/// it matched, or `None` for a malformed chunk.
fn match_chunk<'n>(chunk: &[char], name: &'n [char]) -> Option<(&'n [char], bool)> {
    let mut chunk = chunk;
    let mut name = name;
    // Like Go, keep scanning after a mismatch so that a malformed chunk is always reported.
    let mut failed = false;
    while let Some((&first, rest)) = chunk.split_first() {
        if !failed && name.is_empty() {
            failed = true;
        }
        match first {
            '[' => {
                let mut current = None;
                if !failed {
                    current = Some(name[0]);
                    name = &name[1..];
                }
                chunk = rest;
                let negated = chunk.first() == Some(&'^');
                if negated {
                    chunk = &chunk[1..];
                }
                let mut matched = false;
                let mut ranges = 0;
                loop {
                    if chunk.first() == Some(&']') && ranges > 0 {
                        chunk = &chunk[1..];
                        break;
                    }
                    let (low, tail) = escaped(chunk)?;
                    chunk = tail;
                    let mut high = low;
                    if chunk.first() == Some(&'-') {
                        let (upper, tail) = escaped(&chunk[1..])?;
                        high = upper;
                        chunk = tail;
                    }
                    if current.is_some_and(|c| low <= c && c <= high) {
                        matched = true;
                    }
                    ranges += 1;
                }
                if matched == negated {
                    failed = true;
                }
            }
            '?' => {
                if !failed {
                    if name[0] == '/' {
                        failed = true;
                    }
                    name = &name[1..];
                }
                chunk = rest;
            }
            '\\' => {
                let (&literal, tail) = rest.split_first()?;
                if !failed {
                    if literal != name[0] {
                        failed = true;
                    }
                    name = &name[1..];
                }
                chunk = tail;
            }
            literal => {
                if !failed {
                    if literal != name[0] {
                        failed = true;
                    }
                    name = &name[1..];
                }
                chunk = rest;
            }
        }
    }
    Some(if failed { (&[], false) } else { (name, true) })
}

/// One possibly escaped character of a class; `None` where Go reports a bad pattern.
fn escaped(chunk: &[char]) -> Option<(char, &[char])> {
    let (&first, mut rest) = chunk.split_first()?;
    if first == '-' || first == ']' {
        return None;
    }
    let mut character = first;
    if first == '\\' {
        let (&next, tail) = rest.split_first()?;
        character = next;
        rest = tail;
    }
    if rest.is_empty() {
        return None;
    }
    Some((character, rest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::installer::containerd::MemoryHost;

    #[test]
    fn matches_like_go() {
        // Cases of Go's own `filepath.Match` tests.
        for (pattern, name, expected) in [
            ("abc", "abc", Some(true)),
            ("*", "abc", Some(true)),
            ("*c", "abc", Some(true)),
            ("a*", "a", Some(true)),
            ("a*", "abc", Some(true)),
            ("a*", "ab/c", Some(false)),
            ("a*/b", "abc/b", Some(true)),
            ("a*/b", "a/c/b", Some(false)),
            ("a*b*c*d*e*/f", "axbxcxdxe/f", Some(true)),
            ("a*b*c*d*e*/f", "axbxcxdxexxx/f", Some(true)),
            ("a*b*c*d*e*/f", "axbxcxdxe/xxx/f", Some(false)),
            ("a*b*c*d*e*/f", "axbxcxdxexxx/fff", Some(false)),
            ("a*b?c*x", "abxbbxdbxebxczzx", Some(true)),
            ("a*b?c*x", "abxbbxdbxebxczzy", Some(false)),
            ("ab[c]", "abc", Some(true)),
            ("ab[b-d]", "abc", Some(true)),
            ("ab[e-g]", "abc", Some(false)),
            ("ab[^c]", "abc", Some(false)),
            ("ab[^b-d]", "abc", Some(false)),
            ("ab[^e-g]", "abc", Some(true)),
            ("a\\*b", "a*b", Some(true)),
            ("a\\*b", "ab", Some(false)),
            ("a?b", "a☺b", Some(true)),
            ("a[^a]b", "a☺b", Some(true)),
            ("a???b", "a☺b", Some(false)),
            ("a[^a][^a][^a]b", "a☺b", Some(false)),
            ("[a-ζ]*", "α", Some(true)),
            ("*[a-ζ]", "A", Some(false)),
            ("a?b", "a/b", Some(false)),
            ("a*b", "a/b", Some(false)),
            ("[\\]a]", "]", Some(true)),
            ("[\\-]", "-", Some(true)),
            ("[x\\-]", "x", Some(true)),
            ("[x\\-]", "-", Some(true)),
            ("[x\\-]", "z", Some(false)),
            ("[\\-x]", "x", Some(true)),
            ("[\\-x]", "-", Some(true)),
            ("[\\-x]", "a", Some(false)),
            ("[]a]", "]", None),
            ("[-]", "-", None),
            ("[x-]", "x", None),
            ("[x-]", "-", None),
            ("[x-]", "z", None),
            ("[-x]", "x", None),
            ("[-x]", "-", None),
            ("[-x]", "a", None),
            ("\\", "a", None),
            ("[a-b-c]", "a", None),
            ("[", "a", None),
            ("[^", "a", None),
            ("[^bc", "a", None),
            ("a[", "a", None),
            ("a[", "ab", None),
            ("a[", "x", None),
            ("a/b[", "x", None),
            ("*x", "xxx", Some(true)),
        ] {
            assert_eq!(matches(pattern, name), expected, "{pattern:?} ~ {name:?}");
        }
    }

    #[test]
    fn globs_only_entries_with_a_star() {
        assert!(is_glob("/etc/containerd/conf.d/*.toml"));
        assert!(!is_glob("/etc/containerd/conf.d/a.tom?"));
        assert!(!is_glob("/etc/containerd/conf.d/[a].toml"));
    }

    #[test]
    fn expands_over_the_host_in_sorted_order() {
        let host = MemoryHost::new()
            .with("/etc/containerd/conf.d/20-b.toml", "")
            .with("/etc/containerd/conf.d/10-a.toml", "")
            .with("/etc/containerd/conf.d/notes.txt", "")
            .with("/etc/containerd/conf.d/sub/30-c.toml", "")
            .with("/etc/containerd/other.d/40-d.toml", "");
        let expand = |pattern: &str| -> Vec<String> {
            expand(&host, Path::new(pattern))
                .unwrap()
                .into_iter()
                .map(|p| p.display().to_string())
                .collect()
        };
        assert_eq!(
            expand("/etc/containerd/conf.d/*.toml"),
            [
                "/etc/containerd/conf.d/10-a.toml",
                "/etc/containerd/conf.d/20-b.toml"
            ]
        );
        assert_eq!(
            expand("/etc/containerd/*.d/*.toml"),
            [
                "/etc/containerd/conf.d/10-a.toml",
                "/etc/containerd/conf.d/20-b.toml",
                "/etc/containerd/other.d/40-d.toml"
            ]
        );
        assert_eq!(
            expand("/etc/containerd/conf.d/[1]*"),
            ["/etc/containerd/conf.d/10-a.toml"]
        );
        assert!(expand("/etc/containerd/missing/*.toml").is_empty());
        assert!(expand("/etc/containerd/conf.d/[*.toml").is_empty());
    }
}
