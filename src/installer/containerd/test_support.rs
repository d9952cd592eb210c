//! What the planner's test modules share.

use super::{ContainerdVersion, MemoryHost, Ownership, Plan, RuntimeEntry, locate, plan_install};

/// Locates, plans and applies an install; returns the plan.
pub(super) fn install(
    host: &mut MemoryHost,
    containerd: ContainerdVersion,
    runtimes: &[RuntimeEntry],
    previous: &Ownership,
) -> Plan {
    let target = locate(host, containerd, None).unwrap();
    let plan = plan_install(host, &target, runtimes, previous).unwrap();
    host.apply(&plan);
    plan
}

/// One step from the old lines to the new: the index is into the side the line comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LineEdit {
    Kept(usize),
    Gone(usize),
    Added(usize),
}

/// The edits from `old` to `new` along a longest common subsequence of lines (a quadratic
/// table; the files are small). Where both are possible, a line goes before one is added.
pub(super) fn line_edits(old: &[&str], new: &[&str]) -> Vec<LineEdit> {
    let (a, b) = (old, new);
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let mut edits = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            edits.push(LineEdit::Kept(i));
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            edits.push(LineEdit::Gone(i));
            i += 1;
        } else {
            edits.push(LineEdit::Added(j));
            j += 1;
        }
    }
    edits
}
