//! Version constraints of image-vector entries (`runtimeVersion`, `targetVersion`).
//!
//! Gardener evaluates them with Masterminds/semver; this is the subset image vectors use,
//! evaluated with the `semver` crate:
//!
//! - alternatives separated by `||`, each a list of comparators separated by `,` or spaces;
//! - operators `=` (also none), `!=`, `>`, `>=` (`=>`), `<`, `<=` (`=<`), `~` (`~>`), `^`;
//! - wildcards `x`, `X`, `*` in minor or patch (`1.30.x`, `1.x`), and a lone `*`;
//! - hyphen ranges `1.28 - 1.30` (inclusive);
//! - missing components count as 0 (`>= 1.30` is `>= 1.30.0`, `= 1.30` is exactly 1.30.0), as
//!   in Masterminds, except after `~` and `^`, where they widen the range (`~1` is `>=1, <2`).
//!
//! Versions are normalised as Gardener does before matching: a leading `v` and anything from
//! the first `-`, `+` or `~` on are dropped, so pre-release suffixes in constraints (`1.32-0`,
//! Gardener's idiom to include pre-releases) are irrelevant and are dropped too.
//! Not supported (rejected as invalid): pre-release ordering and Masterminds' rarely used
//! partial-wildcard forms of `>`/`<` with a major-only wildcard such as `> 1.x.3`.

use semver::{Comparator, Op, Prerelease, Version};

/// A parsed constraint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Constraint {
    alternatives: Vec<Vec<Term>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Term {
    Any,
    Is(Comparator),
    Not(Comparator),
}

/// Why a constraint or version does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConstraintError(String);

impl Constraint {
    pub fn parse(text: &str) -> Result<Constraint, ConstraintError> {
        let invalid =
            |why: &str| ConstraintError(format!("invalid version constraint {text:?}: {why}"));
        let mut alternatives = Vec::new();
        for group in text.split("||") {
            let group = group.trim();
            if group.is_empty() {
                return Err(invalid("empty alternative"));
            }
            let terms = match split_hyphen_range(group) {
                Some((low, high)) => vec![
                    term(">=", low).map_err(|e| invalid(&e))?,
                    term("<=", high).map_err(|e| invalid(&e))?,
                ],
                None => tokens(group)
                    .map_err(|e| invalid(&e))?
                    .into_iter()
                    .map(|(op, version)| term(op, version).map_err(|e| invalid(&e)))
                    .collect::<Result<_, _>>()?,
            };
            alternatives.push(terms);
        }
        Ok(Constraint { alternatives })
    }

    /// Whether the (normalised) version satisfies the constraint.
    pub fn matches(&self, version: &Version) -> bool {
        self.alternatives.iter().any(|terms| {
            terms.iter().all(|term| match term {
                Term::Any => true,
                Term::Is(c) => c.matches(version),
                Term::Not(c) => !c.matches(version),
            })
        })
    }
}

/// `A - B` with whitespace around the hyphen (a hyphen without spaces is a pre-release).
fn split_hyphen_range(group: &str) -> Option<(&str, &str)> {
    let words: Vec<&str> = group.split_whitespace().collect();
    match words.as_slice() {
        [low, "-", high] => Some((low, high)),
        _ => None,
    }
}

/// Splits `>= 1.30, < 1.32` into operator/version pairs; operators may be followed by spaces.
fn tokens(group: &str) -> Result<Vec<(&str, &str)>, String> {
    let mut out = Vec::new();
    let mut rest = group;
    loop {
        rest = rest.trim_start_matches(|c: char| c == ',' || c.is_whitespace());
        if rest.is_empty() {
            break;
        }
        let op_len = rest
            .find(|c: char| !matches!(c, '=' | '!' | '<' | '>' | '~' | '^'))
            .unwrap_or(rest.len());
        let (op, after) = rest.split_at(op_len);
        let after = after.trim_start();
        let version_len = after
            .find(|c: char| c == ',' || c.is_whitespace())
            .unwrap_or(after.len());
        if version_len == 0 {
            return Err(format!("operator {op:?} without a version"));
        }
        let (version, tail) = after.split_at(version_len);
        out.push((op, version));
        rest = tail;
    }
    if out.is_empty() {
        return Err("no comparator".into());
    }
    Ok(out)
}

/// A component as written: a number, a wildcard, or absent.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Number(u64),
    Wild,
    Absent,
}

fn term(op: &str, version: &str) -> Result<Term, String> {
    let core = strip_suffixes(version.strip_prefix('v').unwrap_or(version));
    if core == "*" || core.eq_ignore_ascii_case("x") {
        return match op {
            "" | "=" | ">=" | "=>" | "<=" | "=<" | "~" | "~>" | "^" => Ok(Term::Any),
            _ => Err(format!(
                "operator {op:?} cannot be used with a lone wildcard"
            )),
        };
    }
    let mut parts = [Part::Absent; 3];
    let pieces: Vec<&str> = core.split('.').collect();
    if pieces.len() > 3 {
        return Err(format!("{version:?} has more than three components"));
    }
    for (slot, piece) in parts.iter_mut().zip(&pieces) {
        *slot = match *piece {
            "x" | "X" | "*" => Part::Wild,
            digits if !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()) => {
                Part::Number(
                    digits
                        .parse()
                        .map_err(|_| format!("{version:?} has a component out of range"))?,
                )
            }
            _ => return Err(format!("{version:?} is not a version")),
        };
    }
    let Part::Number(major) = parts[0] else {
        return Err(format!("{version:?} needs a numeric major version"));
    };
    // A wildcard must not be followed by a number (`1.x.3`).
    if parts[1] == Part::Wild && matches!(parts[2], Part::Number(_)) {
        return Err(format!("{version:?} has a number after a wildcard"));
    }
    let widening = matches!(op, "~" | "~>" | "^");
    let component = |part: Part| match part {
        Part::Number(n) => Some(n),
        Part::Wild => None,
        Part::Absent if widening => None,
        Part::Absent => Some(0),
    };
    let minor = component(parts[1]);
    let patch = if minor.is_none() {
        None
    } else {
        component(parts[2])
    };
    let op_kind = match op {
        "" | "=" | "!=" => Op::Exact,
        ">" => Op::Greater,
        ">=" | "=>" => Op::GreaterEq,
        "<" => Op::Less,
        "<=" | "=<" => Op::LessEq,
        "~" | "~>" => Op::Tilde,
        "^" => Op::Caret,
        other => return Err(format!("unknown operator {other:?}")),
    };
    let comparator = Comparator {
        op: op_kind,
        major,
        minor,
        patch,
        pre: Prerelease::EMPTY,
    };
    Ok(if op == "!=" {
        Term::Not(comparator)
    } else {
        Term::Is(comparator)
    })
}

fn strip_suffixes(s: &str) -> &str {
    s.find(['-', '+', '~']).map_or(s, |i| &s[..i])
}

/// Gardener's version normalisation: drop a leading `v` and every suffix from the first `-`,
/// `+` or `~`; fill missing components with 0.
pub fn normalize(version: &str) -> Result<Version, ConstraintError> {
    let core = strip_suffixes(version.trim().trim_start_matches('v'));
    let pieces: Vec<&str> = core.split('.').collect();
    if pieces.is_empty() || pieces.len() > 3 {
        return Err(ConstraintError(format!("{version:?} is not a version")));
    }
    let mut numbers = [0u64; 3];
    for (slot, piece) in numbers.iter_mut().zip(&pieces) {
        if piece.is_empty() || !piece.chars().all(|c| c.is_ascii_digit()) {
            return Err(ConstraintError(format!("{version:?} is not a version")));
        }
        *slot = piece
            .parse()
            .map_err(|_| ConstraintError(format!("{version:?} is not a version")))?;
    }
    Ok(Version::new(numbers[0], numbers[1], numbers[2]))
}

/// Gardener scores a constraint that pins a version (starts with a full `x.y.z` or `=`) higher
/// than a range.
pub fn is_exact(constraint: &str) -> bool {
    if constraint.starts_with('=') {
        return true;
    }
    let rest = constraint.strip_prefix('v').unwrap_or(constraint);
    let mut parts = rest.splitn(3, '.');
    let numeric = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    let major = parts.next().is_some_and(numeric);
    let minor = parts.next().is_some_and(numeric);
    let patch = parts.next().is_some_and(|s| {
        let digits = s.len() - s.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        digits > 0
    });
    major && minor && patch
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(constraint: &str, version: &str) -> bool {
        Constraint::parse(constraint)
            .unwrap()
            .matches(&normalize(version).unwrap())
    }

    #[test]
    fn comparison_operators_fill_missing_components_with_zero() {
        assert!(check(">= 1.30", "1.30.0"));
        assert!(check(">= 1.30", "v1.31.2"));
        assert!(!check(">= 1.30", "1.29.9"));
        assert!(check("< 1.31", "1.30.9"));
        assert!(!check("< 1.31", "1.31.0"));
        assert!(check("> 1.30", "1.30.1"), "Masterminds: > 1.30 is > 1.30.0");
        assert!(
            !check("<= 1.30", "1.30.1"),
            "Masterminds: <= 1.30 is <= 1.30.0"
        );
        assert!(check("=< 1.30.1", "1.30.1"));
        assert!(check("=> 1.30", "1.30.0"));
    }

    #[test]
    fn exact_and_wildcards() {
        assert!(check("1.30.2", "1.30.2"));
        assert!(!check("1.30.2", "1.30.3"));
        assert!(check("= 1.30", "1.30.0"));
        assert!(!check("= 1.30", "1.30.1"));
        assert!(check("1.30.x", "1.30.7"));
        assert!(!check("1.30.x", "1.31.0"));
        assert!(check("1.x", "1.99.0"));
        assert!(check("1.*", "1.2.3"));
        assert!(check("*", "0.0.1"));
        assert!(check("!= 1.30.x", "1.31.0"));
        assert!(!check("!= 1.30.x", "1.30.4"));
        assert!(!check("!= 1.30.1", "1.30.1"));
    }

    #[test]
    fn tilde_caret_and_hyphen_ranges() {
        assert!(check("~1.30", "1.30.9"));
        assert!(!check("~1.30", "1.31.0"));
        assert!(check("~1", "1.40.0"));
        assert!(check("~ 1.28.x-0", "1.28.3"));
        assert!(check("^1.2", "1.9.0"));
        assert!(!check("^1.2", "2.0.0"));
        assert!(check("1.28 - 1.30", "1.29.5"));
        assert!(check("1.28 - 1.30", "1.30.0"));
        assert!(!check("1.28 - 1.30", "1.30.1"));
    }

    #[test]
    fn and_or_and_prerelease_suffixes() {
        assert!(check(">= 1.28, < 1.31", "1.30.4"));
        assert!(!check(">= 1.28, < 1.31", "1.31.0"));
        assert!(check(">= 1.28 < 1.31", "1.28.0"));
        assert!(check("< 1.20 || >= 1.30", "1.19.0"));
        assert!(check("< 1.20 || >= 1.30", "1.33.1"));
        assert!(!check("< 1.20 || >= 1.30", "1.25.0"));
        assert!(check(">= 1.32-0", "1.32.0-rc.1"));
        assert!(!check("< 1.33-0", "1.33.0"));
    }

    #[test]
    fn invalid_constraints_and_versions_are_errors() {
        for bad in ["", ">=", "abc", "1.2.3.4", "|| 1.2", "?1.2", "1.x.3", "> *"] {
            assert!(Constraint::parse(bad).is_err(), "{bad:?}");
        }
        for bad in ["", "x", "1.2.3.4", "1..2"] {
            assert!(normalize(bad).is_err(), "{bad:?}");
        }
        assert_eq!(normalize("v1.30").unwrap(), Version::new(1, 30, 0));
        assert_eq!(
            normalize("1.30.2-gardener.1").unwrap(),
            Version::new(1, 30, 2)
        );
    }

    #[test]
    fn exactness_follows_gardener() {
        assert!(is_exact("= 1.30"));
        assert!(is_exact("1.30.2"));
        assert!(is_exact("v1.30.2"));
        assert!(!is_exact(">= 1.30"));
        assert!(!is_exact("1.30.x"));
        assert!(!is_exact("1.30"));
    }
}
