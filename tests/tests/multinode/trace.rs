//! One trace across nodes: a task whose node is killed mid-step and taken over
//! by another node goes on in the trace the first node opened, read back from a
//! real Arize Phoenix (`scripts/phoenix`); the killed node, back, is fenced in it.

use std::path::Path;

use clawboard_tests::phoenix::{self, attr, names, trace_of, wait_spans};
use clawboard_tests::s3::{Bucket, Kind};
use clawboard_tests::wait_until;
use serde_json::Value;

use super::Cluster;

/// The cluster's usual roles, every node exporting spans to Phoenix.
fn traced_roles(runlog: &Path) -> String {
    format!("{}\n{}", super::roles(runlog), phoenix::telemetry_config(""))
}

/// The run log's lines for `task`: (role, node, the `TRACEPARENT` its run was handed).
fn traced_runs(c: &Cluster, task: &str) -> Vec<(String, String, String)> {
    let text = std::fs::read_to_string(&c.runlog).unwrap();
    let parents: Vec<&str> = text.lines().filter(|l| l.starts_with(&format!("{task} "))).collect();
    let runs: Vec<(String, String, String)> = c.runs().into_iter().filter(|(t, _, _)| t == task).collect();
    assert_eq!(runs.len(), parents.len(), "{text}");
    runs.into_iter()
        .zip(parents)
        .map(|((_, role, node), line)| (role, node, line.rsplit(' ').next().unwrap().to_owned()))
        .collect()
}

#[test]
fn a_task_taken_over_by_another_node_is_one_trace_in_phoenix() {
    let scratch = tempfile::tempdir().unwrap();
    let bucket = Bucket::new(Kind::S3s, scratch.path());
    let c = Cluster::with_roles(&bucket, traced_roles, "push_each_step = true\n");
    let mut daemons = c.start();
    let b = &c.node("node-b").t;
    // Killed after it pushed the task's progress (and its trace.json) and exported its PM's span.
    super::kill_b_while_slow_runs(&c, &mut daemons, "t-traced");
    wait_until(60, "node-a or node-c to complete t-traced", || {
        ["node-a", "node-c"].iter().any(|id| c.node(id).t.status_of("t-traced") == "completed")
    });
    let runs = traced_runs(&c, "t-traced");
    let taker = runs.iter().rev().find(|(r, _, _)| r == "slow").unwrap().1.clone();
    assert_ne!(taker, "node-b");
    // node-b comes back and finds the task taken: fenced.
    let returned = b.daemon();
    c.converge(40, "after node-b returned");

    let (trace, root) = trace_of(&c.node(&taker).t.root, "t-traced");
    assert_eq!(trace_of(&b.root, "t-traced"), (trace.clone(), root.clone()), "one trace.json everywhere");
    let spans = wait_spans(&trace, 60, |s| {
        s.iter().any(|s| s["context"]["span_id"] == root.as_str())
            && s.iter().any(|s| s["name"] == "taken_over")
            && s.iter().any(|s| s["name"] == "fenced")
    });
    let roots: Vec<&Value> = spans.iter().filter(|s| s["parent_id"].is_null()).collect();
    assert_eq!(roots.len(), 1, "one root: {:#?}", names(&spans));
    assert_eq!(roots[0]["context"]["span_id"], root.as_str());
    assert_eq!(attr(roots[0], "clawboard.task.status"), "completed");
    for s in spans.iter().filter(|s| !s["parent_id"].is_null()) {
        assert_eq!(s["parent_id"], root.as_str(), "{s:#}");
    }
    // Every run, on either node, was handed a span of this trace; the PM's span
    // (node-b, before the kill) and the taker's runs are in Phoenix.
    let span_ids: Vec<&str> = spans.iter().filter_map(|s| s["context"]["span_id"].as_str()).collect();
    for (role, node, parent) in &runs {
        let parts: Vec<&str> = parent.split('-').collect();
        assert_eq!(parts.get(1), Some(&trace.as_str()), "{role} on {node}: {parent}");
        if (role == "pm" && node == "node-b") || node == &taker {
            assert!(span_ids.contains(&parts[2]), "{role} on {node}: span {} not in {:#?}", parts[2], names(&spans));
        }
    }
    assert!(runs.iter().any(|(r, n, _)| r == "pm" && n == "node-b"), "{runs:?}");
    // The takeover, from node-b, and the run it cut short; node-b's fence.
    let taken: Vec<&Value> = spans.iter().filter(|s| s["name"] == "taken_over").collect();
    assert_eq!(taken.len(), 1, "{:#?}", names(&spans));
    assert_eq!(attr(taken[0], "clawboard.claim.from"), "node-b");
    assert!(attr(taken[0], "clawboard.claim.generation").as_u64().unwrap() >= 2, "{:#}", taken[0]);
    let cut: Vec<&Value> = spans.iter().filter(|s| attr(s, "clawboard.attempt.status") == "interrupted").collect();
    assert_eq!(cut.len(), 1, "{:#?}", names(&spans));
    assert_eq!(attr(cut[0], "gen_ai.agent.name"), "slow");
    assert_eq!(spans.iter().filter(|s| s["name"] == "resumed").count(), 1, "{:#?}", names(&spans));
    assert_eq!(spans.iter().filter(|s| s["name"] == "fenced").count(), 1, "{:#?}", names(&spans));
    drop(returned);
    drop(daemons);
}
