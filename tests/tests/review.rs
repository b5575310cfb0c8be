//! Human review end to end, against the real binary and daemon: the escalations
//! CLI, the web page over real HTTP (token, cookie, CSRF, approve with a note),
//! `/metrics` on the page, escalations raised through the API (and across a
//! crash), and a bad review config. Notification hooks, GM records and the
//! metrics' job rows are in review_notify.rs; the helpers both use are
//! `clawboard_tests::review`.

use clawboard_tests::review::*;
use clawboard_tests::{Tree, sh_config, wait_until};

#[test]
fn escalations_are_listed_newest_first_and_shown_with_their_task() {
    let t = Tree::init();
    t.config(&esc_config("critical", ""));
    let d = t.daemon();
    t.drop_task("l1.json", &task_json("l1", "use-esc first"));
    wait_until(30, "the first escalation", || t.escalation_of("l1").is_some());
    std::thread::sleep(std::time::Duration::from_millis(20));
    t.drop_task("l2.json", &task_json("l2", "use-esc second"));
    wait_until(30, "both tasks held", || held(&t, 2));
    let (e1, e2) = (t.escalation_of("l1").unwrap(), t.escalation_of("l2").unwrap());

    let list = t.run(&["escalations", "list"]);
    list.ok();
    let lines: Vec<&str> = list.stdout.lines().collect();
    assert!(lines[0].starts_with("ID") && lines[0].contains("AGE") && lines[0].contains("ISSUE"), "{}", list.stdout);
    assert!(lines[1].starts_with(&e2) && lines[2].starts_with(&e1), "newest first:\n{}", list.stdout);
    assert!(lines[1].contains("critical") && lines[1].contains("pending (holds task)") && lines[1].contains("l2"));
    assert!(lines[1].contains("spend 500 USD?"), "{}", list.stdout);
    let json = t.run(&["escalations", "list", "--json"]).json();
    assert_eq!(json.as_array().unwrap().len(), 2);
    assert_eq!(json[0]["id"], e2.as_str());
    assert_eq!(json[0]["taskId"], "l2");
    assert!(t.run(&["escalations", "list", "--level", "high"]).stdout.contains("No escalations."));
    let bad = t.run(&["escalations", "list", "--level", "urgent"]);
    bad.expect_code(2);
    assert!(bad.stderr.contains("urgent"), "{}", bad.stderr);

    let show = t.run(&["escalations", "show", &e1]);
    show.ok();
    for want in [
        &format!("Escalation {e1}"),
        "level:     critical",
        "required (holds its task)",
        "spend 500 USD?",
        "Suggested action:",
        "Task l1: use-esc first",
        "status:    running",
        "step:      iter-1/esc",
        &format!("clawboard escalations approve {e1}"),
    ] {
        assert!(show.stdout.contains(want), "missing {want:?} in:\n{}", show.stdout);
    }
    let shown = t.run(&["escalations", "show", &e1, "--json"]).json();
    assert_eq!(shown["task"]["status"], "running");
    assert_eq!(shown["task"]["title"], "use-esc first");

    t.run(&["escalations", "approve", &e1, "--note", "ok"]).ok();
    t.run(&["escalations", "reject", &e2]).ok();
    wait_until(30, "both tasks to end", || t.status_of("l1") == "completed" && t.status_of("l2") == "failed");
    let pending = t.run(&["escalations", "list", "--pending"]);
    assert!(pending.stdout.contains("No pending escalations."), "{}", pending.stdout);
    let after = t.run(&["escalations", "show", &e1]);
    assert!(after.stdout.contains("decision:  approved by human") && after.stdout.contains("note:      ok"));
    assert!(after.stdout.contains("result:    esc: asks"), "{}", after.stdout);

    for (args, want) in [
        (vec!["escalations", "show", "nope"], "no escalation nope (looked for escalations/nope.json)"),
        (vec!["escalations", "show", "../etc/passwd"], "refused"),
        (vec!["escalations", "approve", "nope"], "no escalation nope"),
        (vec!["escalations", "approve", &e1], "was already approved by human"),
    ] {
        let r = t.run(&args);
        r.expect_code(2);
        assert!(r.stderr.contains(want), "{args:?}: {}", r.stderr);
    }
    // A terminal escape sequence in text a role wrote is shown, not obeyed.
    std::fs::write(
        t.root.join("escalations/20261122T000000.000000Z-e5c0.json"),
        r#"{"level":"normal","from":"r","issue":"clear\u001b[2Jscreen"}"#,
    )
    .unwrap();
    for args in [vec!["escalations", "list"], vec!["escalations", "show", "20261122T000000.000000Z-e5c0"]] {
        let r = t.run(&args);
        r.ok();
        assert!(r.stdout.contains("clear\u{FFFD}[2Jscreen") && !r.stdout.contains('\u{1b}'), "{}", r.stdout);
    }
    // An unreadable escalation file is skipped with a warning naming it, not fatal.
    std::fs::write(t.root.join("escalations/broken.json"), "{").unwrap();
    let r = t.run(&["escalations", "list"]);
    r.ok();
    assert!(r.stderr.contains("escalations/broken.json"), "{}", r.stderr);
    assert_eq!(d.stop(), 0);
}

#[test]
fn the_page_needs_the_token_refuses_cross_site_posts_and_approves_with_a_note() {
    let t = Tree::init();
    t.config(&esc_config("high", "\n[web]\nlisten = \"127.0.0.1:0\"\n"));
    let d = t.daemon();
    let addr = web_addr(&t);
    let status = t.run(&["status"]);
    assert!(status.stdout.contains(&format!("web          http://{addr}/")), "{}", status.stdout);
    let token = t.run(&["web", "token"]);
    token.ok();
    let token = token.stdout.trim().to_owned();
    assert_eq!(token.len(), 64, "256 bits as hex: {token}");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(t.root.join(".clawboard/web-token")).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);

    // No token, a wrong one: refused, and nothing of the tree is shown.
    t.drop_task("w1.json", &task_json("w1", "use-esc ship it"));
    wait_until(30, "the task held", || held(&t, 1));
    let esc = t.escalation_of("w1").unwrap();
    // Each refusal says whether a token came and did not match, or none came.
    let (none, bad_token, bad_session) = ("no token given", "the token is not valid", "the session is not valid");
    for (r, why) in [
        (http(&addr, "GET", "/", &[], ""), none),
        (http(&addr, "GET", "/?token=wrong", &[], ""), bad_token),
        (http(&addr, "GET", "/fragment", &[("Authorization", "Bearer wrong")], ""), bad_token),
        (http(&addr, "GET", "/fragment", &[("Cookie", "clawboard_session=wrong")], ""), bad_session),
        // The token is not a session: only the id the login handed out is.
        (http(&addr, "GET", "/fragment", &[("Cookie", &format!("clawboard_session={token}"))], ""), bad_session),
        (http(&addr, "GET", "/metrics", &[], ""), none),
        (http(&addr, "POST", &format!("/escalations/{esc}/approve"), &[], "note=x"), none),
    ] {
        assert_eq!(r.status, 401, "{}", r.head);
        assert!(!r.body.contains(&esc) && r.body.contains("clawboard web token"), "{}", r.body);
        assert!(r.body.contains(&format!("<p id=\"refused\">{why}")), "want {why:?}: {}", r.body);
    }
    let log = d.output();
    assert!(
        log.contains("web: refused a request: the token is not valid")
            && log.contains("web: refused a request: no token given"),
        "{log}"
    );

    // ?token= sets an HttpOnly, SameSite=Strict cookie and cleans the URL.
    let login = http(&addr, "GET", &format!("/?token={token}"), &[], "");
    assert_eq!(login.status, 303);
    assert_eq!(header(&login, "location"), Some("/"));
    let cookie = header(&login, "set-cookie").unwrap();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
    let cookie = cookie.split(';').next().unwrap().to_owned();
    assert!(!cookie.contains(&token), "the cookie is a session id, not the token");
    let page = http(&addr, "GET", "/", &[("Cookie", &cookie)], "");
    assert_eq!(page.status, 200);
    for (name, want) in [("cache-control", "no-store"), ("x-frame-options", "DENY"), ("referrer-policy", "same-origin")]
    {
        assert_eq!(header(&page, name), Some(want), "{}", page.head);
    }
    // Inline script and style run only with this response's nonce: never 'unsafe-inline'.
    let policy = header(&page, "content-security-policy").unwrap();
    assert!(policy.contains("frame-ancestors 'none'") && !policy.contains("unsafe-inline"), "{policy}");
    let nonce = policy.split("script-src 'nonce-").nth(1).unwrap().split('\'').next().unwrap();
    assert!(nonce.len() >= 32 && policy.contains(&format!("style-src 'nonce-{nonce}'")), "{policy}");
    assert!(page.body.contains(&format!("<script nonce=\"{nonce}\">")), "the page's own script carries it");
    assert!(page.body.contains(&format!("<style nonce=\"{nonce}\">")), "the page's own style carries it");
    let again = http(&addr, "GET", "/", &[("Cookie", &cookie)], "");
    assert!(!header(&again, "content-security-policy").unwrap().contains(nonce), "a new nonce for each page");
    let frag = http(&addr, "GET", "/fragment", &[("Cookie", &cookie)], "");
    let frag_policy = header(&frag, "content-security-policy").unwrap();
    assert!(!frag_policy.contains("script-src") && frag_policy.starts_with("default-src 'none'"), "{frag_policy}");
    for want in [
        &esc,
        "Pending escalations (1)",
        "High (1)",
        "spend 500 USD?",
        "Task <a href=\"/tasks/w1\">w1</a>",
        "use-esc ship it",
        "holds its task",
    ] {
        assert!(page.body.contains(want), "missing {want:?}");
    }
    let csrf = page.body.split("name=\"csrf\" value=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();

    // POSTs without the page's CSRF token, or from another origin, are refused.
    let approve = format!("/escalations/{esc}/approve");
    let auth = [("Cookie", cookie.as_str())];
    let r = http(&addr, "POST", &approve, &auth, "note=x");
    assert_eq!(r.status, 403, "no csrf");
    let r = http(&addr, "POST", &approve, &[auth[0], ("Origin", "http://evil.example")], &format!("csrf={csrf}"));
    assert_eq!(r.status, 403, "another origin");
    let r = http(&addr, "POST", &approve, &[auth[0], ("Sec-Fetch-Site", "cross-site")], &format!("csrf={csrf}"));
    assert_eq!(r.status, 403, "cross-site fetch");
    let r = http(&addr, "POST", &approve, &[auth[0], ("Origin", "null")], &format!("csrf={csrf}"));
    assert_eq!(r.status, 403, "a hidden origin, and no Sec-Fetch-Site to vouch for it");
    // `none` is a request the user typed or a program sent, never a form of the page.
    let r = http(&addr, "POST", &approve, &[auth[0], ("Sec-Fetch-Site", "none")], &format!("csrf={csrf}"));
    assert_eq!(r.status, 403, "Sec-Fetch-Site: none");
    let none_null = [auth[0], ("Sec-Fetch-Site", "none"), ("Origin", "null")];
    let r = http(&addr, "POST", &approve, &none_null, &format!("csrf={csrf}"));
    assert_eq!(r.status, 403, "Origin: null vouched for only by Sec-Fetch-Site: none");
    assert_eq!(t.status_of("w1"), "running");
    let e: serde_json::Value =
        serde_json::from_slice(&std::fs::read(t.root.join(format!("escalations/{esc}.json"))).unwrap()).unwrap();
    assert!(e.get("decision").is_none(), "refused POSTs decide nothing: {e}");

    // The real thing: approved with a note, the task resumes, decisions.md has it.
    let origin = format!("http://{addr}");
    let ok = http(
        &addr,
        "POST",
        &approve,
        &[auth[0], ("Origin", &origin), ("Sec-Fetch-Site", "same-origin")],
        &format!("csrf={csrf}&note=within+budget%2C+go"),
    );
    assert_eq!(ok.status, 303, "{}", ok.head);
    assert!(header(&ok, "location").unwrap().contains("outcome=approved"));
    wait_until(30, "the task to complete", || t.status_of("w1") == "completed");
    let decisions = std::fs::read_to_string(t.root.join("gm/decisions.md")).unwrap();
    assert!(decisions.contains(&format!("escalation {esc} approved")), "{decisions}");
    assert!(decisions.contains("- by: human (web)") && decisions.contains("- note: within budget, go"), "{decisions}");
    let again = http(&addr, "POST", &approve, &auth, &format!("csrf={csrf}"));
    assert!(header(&again, "location").unwrap().contains("already%20approved"), "{}", again.head);
    let page = http(&addr, "GET", "/fragment", &[("Authorization", &format!("Bearer {token}"))], "");
    assert!(page.body.contains("No pending escalations.") && page.body.contains("within budget, go"));

    // Text a role wrote is escaped, never markup.
    std::fs::write(
        t.root.join("escalations/20261122T000000.000000Z-beef.json"),
        r#"{"level":"normal","from":"\"><img src=x onerror=alert(1)>","issue":"<script>alert(1)</script>","taskId":"w1"}"#,
    )
    .unwrap();
    let page = http(&addr, "GET", "/fragment", &[("Authorization", &format!("Bearer {token}"))], "");
    assert!(page.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "{}", page.body);
    assert!(!page.body.contains("<script>alert") && !page.body.contains("<img src=x"), "{}", page.body);

    // Metrics, on the page (token) and on the Unix socket.
    let m = http(&addr, "GET", "/metrics", &[("Authorization", &format!("Bearer {token}"))], "");
    assert_eq!(m.status, 200);
    assert!(header(&m, "content-type").unwrap().starts_with("text/plain; version=0.0.4"));
    for want in [
        "clawboard_tasks{status=\"completed\"} 1",
        "clawboard_escalations_pending{level=\"high\"} 0",
        "clawboard_escalations_pending{level=\"normal\"} 1",
        "clawboard_intake_to_dispatch_seconds_count 1",
        "clawboard_role_runs_total{outcome=\"failed\"} 0",
        "# TYPE clawboard_intake_to_dispatch_seconds histogram",
        "clawboard_scrape_errors{source=\"tasks\"} 0",
        "clawboard_scrape_errors{source=\"escalations\"} 0",
    ] {
        assert!(m.body.contains(want), "missing {want:?} in\n{}", m.body);
    }
    let ok_runs: u64 = m
        .body
        .lines()
        .find_map(|l| l.strip_prefix("clawboard_role_runs_total{outcome=\"ok\"} "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(ok_runs >= 4, "pm, esc, validator, harvester: {ok_runs}");
    let refused: u64 =
        m.body.lines().find_map(|l| l.strip_prefix("clawboard_web_refusals_total ")).unwrap().parse().unwrap();
    assert_eq!(refused, 13, "7 without a valid token or session, 6 cross-site");
    let socket = unix_get(&t, "/metrics");
    assert!(
        socket.starts_with("HTTP/1.0 200") && socket.contains("clawboard_tasks{status=\"completed\"} 1"),
        "{socket}"
    );

    // A flood of long escalations: the page shows the newest per level, cut short,
    // and says how many more there are.
    let long = "A".repeat(200_000);
    for i in 0..30 {
        std::fs::write(
            t.root.join(format!("escalations/20261123T0000{i:02}.000000Z-f100.json")),
            format!(
                r#"{{"level":"critical","from":"w","issue":"flood {i} {long}","suggestedAction":"{long}","createdAt":"2026-11-23T00:00:{i:02}Z"}}"#
            ),
        )
        .unwrap();
    }
    let page = http(&addr, "GET", "/fragment", &[("Authorization", &format!("Bearer {token}"))], "");
    assert_eq!(page.status, 200);
    assert!(page.body.len() < 200_000, "the page stays small: {} bytes", page.body.len());
    assert!(page.body.contains("Pending escalations (31)") && page.body.contains("Critical (30)"));
    assert_eq!(page.body.matches("<article class=\"esc critical\"").count(), 20, "the newest 20 critical");
    assert!(page.body.contains("flood 29 ") && !page.body.contains("flood 9 "), "newest first");
    assert!(
        page.body.contains("… and 10 older critical (clawboard escalations list --pending --level critical)"),
        "the rest are counted"
    );
    assert!(page.body.contains("AAAA…</p>"), "long text is cut with an ellipsis");
    assert!(page.body.contains("<code>20261122T000000.000000Z-beef</code>"), "another level still shows");
    assert_eq!(d.stop(), 0);
    assert!(!t.root.join(".clawboard/web.addr").exists(), "the address file goes with the daemon");
}

/// A role that raises its escalation with `clawboard write` (not in its output), and
/// tries paths under `escalations/` that no human would ever see.
fn api_esc_config(t: &Tree) -> String {
    let dir = t.dir.path();
    std::fs::write(
        dir.join("hold.json"),
        r#"{"level":"critical","from":"someone-else","issue":"STOP: do not deploy until I say so","requiresHumanApproval":true,"createdAt":"2001-01-01T00:00:00Z"}"#,
    )
    .unwrap();
    std::fs::write(dir.join("plain.json"), r#"{"level":"normal","from":"x","issue":"i"}"#).unwrap();
    let bin = clawboard_tests::bin();
    let write = |path: &str, body: &str| {
        format!(
            "{} write {path} < {}/{body} >/dev/null 2>>{}/err.log; c=\"$c $?\"; ",
            bin.display(),
            dir.display(),
            dir.display()
        )
    };
    let script = format!(
        "cat >/dev/null; c=; {}{}{}{}{}echo $c > {}/codes-$CLAWBOARD_TASK_ID; printf '{{\"summary\":\"asked\"}}'",
        write("escalations/hold-$CLAWBOARD_TASK_ID.json", "hold.json"),
        write("escalations/sub/nested.json", "plain.json"),
        write("escalations/x.conflict-n1-1.json", "plain.json"),
        write("escalations/_bad.json", "plain.json"),
        write("escalations/notes.md", "plain.json"),
        dir.display(),
    );
    // A TOML literal string: the script's quotes stay as they are.
    sh_config(&format!("[roles.esc]\ncommand = [\"sh\", \"-c\", '''{script}''']\nretry_backoff = \"10ms\"\n"))
}

#[test]
fn an_escalation_a_role_writes_through_the_api_holds_its_task_like_one_in_its_output() {
    let t = Tree::init();
    t.config(&api_esc_config(&t));
    let d = t.daemon();
    t.drop_task("a1.json", &task_json("a1", "use-esc reject me"));
    t.drop_task("a2.json", &task_json("a2", "use-esc approve me"));
    wait_until(30, "both tasks held", || {
        for id in ["a1", "a2"] {
            assert_ne!(t.status_of(id), "completed", "{id} ran on past its escalation:\n{}", d.output());
        }
        held(&t, 2)
    });
    for id in ["a1", "a2"] {
        let e: serde_json::Value =
            serde_json::from_slice(&std::fs::read(t.root.join(format!("escalations/hold-{id}.json"))).unwrap())
                .unwrap();
        assert_eq!((e["from"].as_str(), e["taskId"].as_str()), (Some("esc"), Some(id)), "{e}");
        // The daemon says when it was raised, not the role.
        let at = chrono::DateTime::parse_from_rfc3339(e["createdAt"].as_str().unwrap()).unwrap();
        let age = chrono::Utc::now().signed_duration_since(at);
        assert!(age >= chrono::Duration::zero() && age < chrono::Duration::minutes(5), "{e}");
        let attempt = t.attempts(id).into_iter().find(|a| a["step"] == "iter-1/esc").unwrap();
        assert_eq!(attempt["escalations"], serde_json::json!([format!("hold-{id}")]), "{attempt}");
        // Paths under escalations/ that no human would see are refused (exit 2).
        let codes = std::fs::read_to_string(t.dir.path().join(format!("codes-{id}"))).unwrap();
        assert_eq!(codes.trim(), "0 2 2 2 2", "{}", std::fs::read_to_string(t.dir.path().join("err.log")).unwrap());
    }
    let err = std::fs::read_to_string(t.dir.path().join("err.log")).unwrap();
    for want in [
        "escalations/sub/nested.json: refused: an escalation is escalations/{id}.json, directly under escalations/",
        "escalations/x.conflict-n1-1.json: refused: x.conflict-n1-1.json is a sync conflict copy's",
        "escalations/_bad.json: refused: an escalation is escalations/{id}.json: escalation id starts with '_'",
        "escalations/notes.md: refused: an escalation is escalations/{id}.json; other files are never read",
    ] {
        assert!(err.contains(want), "missing {want:?} in\n{err}");
    }
    assert!(!t.root.join("escalations/sub").exists() && !t.root.join("escalations/_bad.json").exists());
    let list = t.run(&["escalations", "list", "--pending"]);
    assert!(list.stdout.contains("hold-a1") && list.stdout.contains("pending (holds task)"), "{}", list.stdout);
    assert_eq!(t.status_of("a1"), "running");

    // Reject: the task fails with the note. Approve: it resumes and completes.
    t.run(&["escalations", "reject", "hold-a1", "--note", "do not deploy"]).ok();
    t.run(&["escalations", "approve", "hold-a2", "--note", "go"]).ok();
    wait_until(30, "both tasks to end", || t.status_of("a1") == "failed" && t.status_of("a2") == "completed");
    let errors = std::fs::read_to_string(t.root.join("tasks/a1/errors.log")).unwrap();
    assert!(errors.contains("escalation hold-a1 was rejected by human: do not deploy"), "{errors}");
    assert!(t.attempts("a2").iter().any(|a| a["step"] == "harvest" && a["status"] == "ok"), "a2 ran to its end");
    assert_eq!(d.stop(), 0);
}

/// The daemon is killed after a role raised an escalation through the API and before
/// its attempt was recorded: after the restart, the escalation still holds the task
/// (the cut-short attempt's record names it), and approving it lets the task end.
#[test]
fn an_escalation_raised_through_the_api_just_before_a_crash_still_holds_its_task() {
    let t = Tree::init();
    let dir = t.dir.path();
    std::fs::write(
        dir.join("hold.json"),
        r#"{"level":"critical","from":"x","issue":"wait for me","requiresHumanApproval":true}"#,
    )
    .unwrap();
    // The first run raises the escalation, then hangs until the crash; the second
    // (after the restart) answers at once.
    let script = format!(
        "cat >/dev/null; m={d}/ran-$CLAWBOARD_TASK_ID; if [ ! -e $m ]; then {bin} write escalations/cut-$CLAWBOARD_TASK_ID.json < {d}/hold.json >/dev/null 2>>{d}/err.log && touch $m; sleep 60; fi; printf '{{\"summary\":\"asked\"}}'",
        d = dir.display(),
        bin = clawboard_tests::bin().display()
    );
    t.config(&sh_config(&format!(
        "[roles.esc]\ncommand = [\"sh\", \"-c\", '''{script}''']\nretry_backoff = \"10ms\"\n"
    )));
    let d = t.daemon();
    t.drop_task("c1.json", &task_json("c1", "use-esc"));
    wait_until(30, "the escalation", || dir.join("ran-c1").exists());
    // The daemon writes its records' files a few milliseconds after their log
    // entry: wait for them rather than read them at once.
    let esc_runs =
        || -> Vec<serde_json::Value> { t.attempts("c1").into_iter().filter(|a| a["step"] == "iter-1/esc").collect() };
    wait_until(10, "the running attempt's record", || esc_runs().len() == 1);
    let running = esc_runs().remove(0);
    assert_eq!(running["status"], "running");
    let e: serde_json::Value =
        serde_json::from_slice(&std::fs::read(t.root.join("escalations/cut-c1.json")).unwrap()).unwrap();
    assert_eq!(e["instanceId"], running["instanceId"], "the daemon names the instance that raised it: {e}");
    d.crash();

    let d = t.daemon();
    wait_until(30, "the task to be held", || {
        assert_ne!(t.status_of("c1"), "completed", "c1 ran on past its escalation:\n{}", d.output());
        held(&t, 1)
    });
    wait_until(10, "the second run's record", || esc_runs().iter().filter(|a| a["status"] != "running").count() == 2);
    let runs = esc_runs();
    assert_eq!(runs.len(), 2, "{runs:#?}");
    assert_eq!((runs[0]["status"].as_str(), runs[1]["status"].as_str()), (Some("interrupted"), Some("ok")));
    assert_eq!(runs[0]["escalations"], serde_json::json!(["cut-c1"]), "{:#}", runs[0]);
    t.run(&["escalations", "approve", "cut-c1"]).ok();
    wait_until(30, "the task to complete", || t.status_of("c1") == "completed");
    assert_eq!(d.stop(), 0);
}

#[test]
fn bad_review_config_is_refused_naming_the_key() {
    let t = Tree::init();
    for (section, want) in [
        ("[web]\nlisten = \"0.0.0.0:8470\"\n", "key web.listen: 0.0.0.0:8470 is not a loopback address"),
        ("[web]\nlisten = \"localhost\"\n", "key web.listen: \"localhost\" is not an address:port"),
        ("[web]\nlisten = \"127.0.0.1:1\"\ntoken = \"short\"\n", "key web.token: is 5 characters"),
        ("[web]\ncolor = \"red\"\n", "unknown field `color`"),
        ("[notify]\nlevels = [\"urgent\"]\n", "key notify.levels"),
        ("[notify]\nwebhook = \"ftp://x\"\n", "key notify.webhook: is not an http:// or https:// URL"),
        ("[notify]\ncommand = []\n", "key notify.command: is empty"),
        ("[notify]\nretry_delay = \"soon\"\n", "key notify.retry_delay"),
        ("[reports]\ndaily = \"every day\"\n", "key reports.daily"),
    ] {
        let cfg = t.config(section);
        let r = t.run(&["--config", cfg.to_str().unwrap(), "status"]);
        r.expect_code(2);
        assert!(r.stderr.contains(want), "{section}: {}", r.stderr);
    }
    // A non-loopback address is served only when asked for explicitly.
    let cfg = t.config("[web]\nlisten = \"0.0.0.0:0\"\nallow_remote = true\n");
    t.run(&["--config", cfg.to_str().unwrap(), "status"]).ok();
}
