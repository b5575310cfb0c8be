//! What a blueprint's steps read, write and wait for: the loop, the order in
//! which values are written and read, the paths nothing writes, and cycles.

use std::collections::{BTreeMap, BTreeSet};

use clawboard_board::BoardPath;
use clawboard_core::formats::Zone;

use super::{Count, INPUT_META, Loop, RawCount, RawLoop, Step, VM_CONTROL};
use crate::condition::Condition;
use crate::error::{Error, Result};

pub(super) fn check_loop(file: &str, l: RawLoop, steps: &[Step], outputs: &[(String, BoardPath)]) -> Result<Loop> {
    let bad = |field: &str, reason: String| Error::invalid(file, None, field, reason);
    if l.steps.is_empty() {
        return Err(bad("loop.steps", "is empty; name the steps to run again".into()));
    }
    for s in &l.steps {
        if !steps.iter().any(|x| &x.id == s) {
            return Err(bad("loop.steps", format!("{s:?} is not a step of this blueprint")));
        }
    }
    let ordered: Vec<String> = steps.iter().filter(|s| l.steps.contains(&s.id)).map(|s| s.id.clone()).collect();
    let condition = Condition::parse(&l.condition).map_err(|r| bad("loop.while", r))?;
    if let Some(reason) = unwritten_path(&condition.path, outputs) {
        return Err(bad("loop.while", format!("{}: {reason}", condition.path)));
    }
    let max = match &l.max {
        RawCount::Number(n) => match n.as_u64() {
            Some(n) if n <= 10 => Count::Fixed(n as u32),
            Some(n) => return Err(bad("loop.max", format!("{n} rounds; at most 10"))),
            None => return Err(bad("loop.max", format!("{n} is not a count of rounds (0 to 10)"))),
        },
        RawCount::String(v) if v == "$max_retries" => Count::MaxRetries,
        other => return Err(bad("loop.max", format!("{other} is neither a number (0 to 10) nor \"$max_retries\""))),
    };
    Ok(Loop { steps: ordered, condition, max })
}

/// A step reads only what is there when it runs: for each value its slice or its
/// `when` names, a step that writes it runs before it (`depends_on`, or file
/// order), or, in an adaptive loop, a step of the loop it is in writes it (seen
/// from the second round on). The input's meta and the VM's control are there
/// from the start. Otherwise the step would always see nothing, or, beside a
/// parallel writer, sometimes.
pub(super) fn check_order(
    file: &str,
    steps: &[Step],
    reads: &[(&'static str, Vec<String>)],
    repeat: Option<&Loop>,
    outputs: &[(String, BoardPath)],
) -> Result<()> {
    let index: BTreeMap<&str, usize> = steps.iter().enumerate().map(|(i, s)| (s.id.as_str(), i)).collect();
    // Every step that finishes before each one (no cycles: checked before).
    let mut before: Vec<Option<BTreeSet<usize>>> = vec![None; steps.len()];
    fn ancestors(
        i: usize,
        steps: &[Step],
        index: &BTreeMap<&str, usize>,
        memo: &mut Vec<Option<BTreeSet<usize>>>,
    ) -> BTreeSet<usize> {
        if let Some(done) = &memo[i] {
            return done.clone();
        }
        let mut all = BTreeSet::new();
        for d in &steps[i].after {
            if let Some(&j) = index.get(d.as_str()) {
                all.insert(j);
                all.extend(ancestors(j, steps, index, memo));
            }
        }
        memo[i] = Some(all.clone());
        all
    }
    let in_loop = |id: &str| repeat.is_some_and(|l| l.steps.iter().any(|s| s == id));
    for (i, s) in steps.iter().enumerate() {
        let earlier = ancestors(i, steps, &index, &mut before);
        let (field, texts) = &reads[i];
        let when = s.when.as_ref().map(|c| ("when", c.path.clone()));
        let named = texts
            .iter()
            .filter(|t| t.as_str() != "all")
            .filter_map(|t| BoardPath::parse(t.strip_suffix(".*").unwrap_or(t)).ok().map(|p| (*field, p)))
            .chain(when);
        for (field, path) in named {
            if path.keys.is_empty() {
                continue;
            }
            let from_start = there_from_the_start(&path);
            let writers: Vec<&str> = outputs
                .iter()
                .filter(|(_, o)| path.is_within(o) || o.is_within(&path))
                .map(|(id, _)| id.as_str())
                .collect();
            let ready = writers.iter().any(|w| index.get(w).is_some_and(|j| earlier.contains(j)))
                || (in_loop(&s.id) && writers.iter().any(|w| in_loop(w)));
            if from_start || writers.is_empty() || ready {
                continue;
            }
            let names: Vec<String> = writers.iter().map(|w| format!("{w:?}")).collect();
            return Err(Error::invalid(
                file,
                Some(&s.id),
                field,
                format!(
                    "{path}: written only by step {}, which does not run before this one; add it to depends_on",
                    names.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// Why no one writes what a scope names, if no one does.
pub(super) fn unwritten(text: &str, outputs: &[(String, BoardPath)]) -> Option<String> {
    let base = text.strip_suffix(".*").unwrap_or(text);
    if text == "all" {
        return None;
    }
    let Ok(path) = BoardPath::parse(base) else { return None };
    unwritten_path(&path, outputs)
}

/// Why no one writes `path`, if no one does: no step's output, not the input's
/// meta, not the VM's control.
pub(super) fn unwritten_path(path: &BoardPath, outputs: &[(String, BoardPath)]) -> Option<String> {
    path.keys.first()?;
    if outputs.iter().any(|(_, o)| path.is_within(o) || o.is_within(path)) {
        return None;
    }
    if there_from_the_start(path) {
        return None;
    }
    match path.zone {
        Zone::Meta => Some(format!(
            "no step writes it and the input has no such field (meta from the input: {})",
            INPUT_META.join(", ")
        )),
        _ => Some("no step writes it (no step's `output` is it, inside it or above it)".into()),
    }
}

/// The first cycle in the dependencies (`depends_on`, and each non-parallel step
/// after the one before it), as step ids from and back to its start.
pub(super) fn find_cycle(steps: &[Step]) -> Option<Vec<String>> {
    let deps: BTreeMap<&str, &[String]> = steps.iter().map(|s| (s.id.as_str(), s.after.as_slice())).collect();
    // 0 unvisited, 1 on the path, 2 done.
    let mut state: BTreeMap<&str, u8> = BTreeMap::new();
    fn visit<'a>(
        id: &'a str,
        deps: &BTreeMap<&'a str, &'a [String]>,
        state: &mut BTreeMap<&'a str, u8>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        match state.get(id) {
            Some(2) => return None,
            Some(1) => {
                let start = path.iter().position(|p| *p == id).unwrap_or(0);
                let mut cycle: Vec<String> = path[start..].iter().map(|s| (*s).to_owned()).collect();
                cycle.push(id.to_owned());
                return Some(cycle);
            }
            _ => {}
        }
        state.insert(id, 1);
        path.push(id);
        for d in deps.get(id).copied().unwrap_or_default() {
            if let Some(c) = visit(d.as_str(), deps, state, path) {
                return Some(c);
            }
        }
        path.pop();
        state.insert(id, 2);
        None
    }
    for s in steps {
        if let Some(c) = visit(&s.id, &deps, &mut state, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

/// A value on the board before the first step: the input's meta (written from
/// the input contract) and the control the VM keeps.
fn there_from_the_start(path: &BoardPath) -> bool {
    let Some(first) = path.keys.first() else { return false };
    match path.zone {
        Zone::Meta => INPUT_META.contains(&first.as_str()),
        Zone::Control => VM_CONTROL.contains(&first.as_str()),
        Zone::Content => false,
    }
}
