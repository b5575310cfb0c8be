//! Human review end to end, against the real binary and daemon: the escalations
//! CLI, the web page over real HTTP (token, cookie, CSRF, approve with a note),
//! `/metrics` on the page and the Unix socket, notification hooks (a command and a
//! webhook served by a real HTTP listener), GM records and reports.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use clawboard_tests::{Tree, sh_config, wait_until};

fn task_json(id: &str, description: &str) -> String {
    format!(r#"{{"taskId":"{id}","type":"coding","description":"{description}"}}"#)
}

/// A PM picking `esc` for "use-esc" tasks, whose run raises an escalation of `level`.
fn esc_config(level: &str, extra: &str) -> String {
    sh_config(&format!(
        r#"
[roles.esc]
command = ["sh", "-c", "cat >/dev/null; printf '{{\"summary\":\"asks\",\"escalations\":[{{\"level\":\"{level}\",\"issue\":\"spend 500 USD?\",\"suggestedAction\":\"approve if within budget\",\"requiresHumanApproval\":true}}]}}'"]
retry_backoff = "10ms"
{extra}"#
    ))
}

fn held(t: &Tree, n: u64) -> bool {
    t.daemon_status().is_some_and(|s| s["queue"]["held"] == n)
}

struct Response {
    status: u16,
    head: String,
    body: String,
}

/// One HTTP/1.1 request over a fresh connection (`Connection: close`).
fn http(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Response {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if method == "POST" {
        req.push_str(&format!("Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Response { status, head: head.to_owned(), body: body.to_owned() }
}

fn header<'a>(r: &'a Response, name: &str) -> Option<&'a str> {
    r.head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// A GET over the daemon's Unix socket.
fn unix_get(t: &Tree, path: &str) -> String {
    let mut s = std::os::unix::net::UnixStream::connect(t.root.join(".clawboard/api.sock")).unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: clawboard\r\n\r\n").as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn web_addr(t: &Tree) -> String {
    let file = t.root.join(".clawboard/web.addr");
    wait_until(10, "the web listener", || file.exists());
    std::fs::read_to_string(file).unwrap().trim().to_owned()
}

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
    for want in
        [&esc, "Pending escalations (1)", "High (1)", "spend 500 USD?", "Task w1", "use-esc ship it", "holds its task"]
    {
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
    let running = t.attempts("c1").into_iter().find(|a| a["step"] == "iter-1/esc").unwrap();
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
    let runs: Vec<serde_json::Value> = t.attempts("c1").into_iter().filter(|a| a["step"] == "iter-1/esc").collect();
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

/// A real HTTP listener that answers 500 to the first `fail` POSTs, then 200, and keeps the bodies.
fn webhook_server(fail: usize) -> (String, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let seen = bodies.clone();
    std::thread::spawn(move || {
        for (n, conn) in l.incoming().enumerate() {
            let Ok(mut conn) = conn else { continue };
            let mut r = BufReader::new(conn.try_clone().unwrap());
            let mut len = 0;
            let mut line = String::new();
            while r.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            let mut body = vec![0; len];
            r.read_exact(&mut body).unwrap();
            seen.lock().unwrap().push(String::from_utf8_lossy(&body).into_owned());
            let status = if n < fail { "500 Internal Server Error" } else { "200 OK" };
            let _ = conn
                .write_all(format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").as_bytes());
        }
    });
    (addr, bodies)
}

#[test]
fn critical_escalations_run_the_hooks_with_retries_and_a_failing_hook_blocks_nothing() {
    let t = Tree::init();
    let (addr, bodies) = webhook_server(1);
    let got = t.dir.path().join("hook-stdin.json");
    let hook = format!(
        "[notify]\nlevels = [\"critical\", \"high\"]\ncommand = [\"sh\", \"-c\", \"cat > {}; echo $CLAWBOARD_ESCALATION_LEVEL >> {}.level\"]\nwebhook = \"http://{addr}/bot123:SECRET/sendMessage?chat_id=42\"\nretries = 2\nretry_delay = \"50ms\"\n",
        got.display(),
        got.display()
    );
    t.config(&esc_config("critical", &hook));
    let d = t.daemon();
    t.drop_task("n1.json", &task_json("n1", "use-esc notify me"));
    // The hook writes the JSON, then the level: wait for the second, the JSON is whole by then.
    let level = std::path::PathBuf::from(format!("{}.level", got.display()));
    wait_until(30, "the command hook", || std::fs::read_to_string(&level).is_ok_and(|l| l.ends_with('\n')));
    let esc = t.escalation_of("n1").unwrap();
    let sent: serde_json::Value = serde_json::from_slice(&std::fs::read(&got).unwrap()).unwrap();
    assert_eq!(sent["level"], "critical");
    assert_eq!(sent["taskId"], "n1");
    assert_eq!(std::fs::read_to_string(format!("{}.level", got.display())).unwrap(), "critical\n");
    wait_until(30, "the webhook, retried once after a 500", || bodies.lock().unwrap().len() == 2);
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(bodies.lock().unwrap().len(), 2, "one failed POST, one that worked, nothing more");
    assert_eq!(
        std::fs::read_to_string(format!("{}.level", got.display())).unwrap(),
        "critical\n",
        "the command ran once"
    );
    let body: serde_json::Value = serde_json::from_str(&bodies.lock().unwrap()[1]).unwrap();
    assert_eq!(body["id"], esc.as_str());
    assert!(body["text"].as_str().unwrap().starts_with("[critical] escalation from esc (task n1): spend 500 USD?"));
    let log = d.output();
    assert!(log.contains("retry 1 of 2"), "{log}");
    assert!(!log.contains("SECRET"), "the bot token never reaches the log: {log}");
    assert_eq!(d.stop(), 0);

    // A hook that always fails: logged and counted, the task is held and decided as usual.
    t.config(&esc_config(
        "high",
        "[notify]\nlevels = [\"high\"]\ncommand = [\"sh\", \"-c\", \"echo no route >&2; exit 3\"]\nretries = 1\nretry_delay = \"10ms\"\n",
    ));
    let d = t.daemon();
    t.drop_task("n2.json", &task_json("n2", "use-esc again"));
    // n1, still waiting on its escalation from the first daemon, is held again too,
    // at start or after n2: the count passes 1 only for a moment, if at all.
    wait_until(30, "both tasks held", || held(&t, 2) && t.escalation_of("n2").is_some());
    wait_until(30, "the hook to give up", || d.output().contains("failed after 1 retries"));
    assert!(d.output().contains("exited with exit status: 3: no route"), "{}", d.output());
    t.run(&["escalations", "approve", &t.escalation_of("n2").unwrap()]).ok();
    wait_until(30, "the task to complete", || t.status_of("n2") == "completed");
    let m = unix_get(&t, "/metrics");
    assert!(m.contains("clawboard_notify_failures_total 1"), "{m}");
    assert_eq!(d.stop(), 0);
}

#[test]
fn an_escalation_whose_notification_a_crash_cut_off_is_notified_once_after_the_restart() {
    let t = Tree::init();
    let tried = t.dir.path().join("tried");
    let out = t.dir.path().join("notified");
    // The hook's first try fails and its retry waits a minute: the daemon dies in between.
    let hook = format!(
        "[notify]\nlevels = [\"critical\"]\ncommand = [\"sh\", \"-c\", \"if [ ! -e {tried} ]; then touch {tried}; exit 1; fi; echo $CLAWBOARD_ESCALATION_ID >> {out}\"]\nretries = 1\nretry_delay = \"60s\"\n",
        tried = tried.display(),
        out = out.display()
    );
    t.config(&esc_config("critical", &hook));
    let d = t.daemon();
    t.drop_task("k1.json", &task_json("k1", "use-esc notify me"));
    wait_until(30, "the hook's first, failing try", || tried.exists());
    wait_until(30, "the retry's wait", || d.output().contains("retry 1 of 1"));
    d.crash();
    assert!(!out.exists(), "nothing was notified before the crash");
    let esc = t.escalation_of("k1").unwrap();

    let d = t.daemon();
    wait_until(30, "the notification, sent by the restarted daemon", || out.exists());
    assert_eq!(d.stop(), 0);
    // A clean start after it sends nothing again.
    let d = t.daemon();
    std::thread::sleep(std::time::Duration::from_millis(1000));
    assert_eq!(d.stop(), 0);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), format!("{esc}\n"), "notified exactly once");

    // Notifications off: the cursor goes, so it cannot hold back journal compaction.
    assert!(t.root.join(".clawboard/cursors/notify").exists());
    t.config(&esc_config("critical", ""));
    t.daemon().stop();
    assert!(!t.root.join(".clawboard/cursors/notify").exists());
}

#[test]
fn gm_records_every_ended_task_and_arbitrates_a_validator_that_never_passes() {
    let t = Tree::init();
    let validator = r#"["sh", "-c", "ctx=$(cat); case \"$ctx\" in *never-good*) printf '{\"score\":3.5,\"pass\":false,\"issues\":[{\"severity\":\"high\",\"description\":\"tests fail\"}]}';; *) printf '{\"score\":9,\"pass\":true}';; esac"]"#;
    let cfg = sh_config("").replace(
        "[roles.validator]\ncommand = [\"sh\", \"-c\", \"cat >/dev/null; printf '{\\\"score\\\":9,\\\"pass\\\":true}'\"]",
        &format!("[roles.validator]\ncommand = {validator}"),
    );
    assert!(cfg.contains("never-good"), "the validator was replaced");
    t.config(&cfg.replace("max_tasks = 16", "max_tasks = 16\nmax_iterations = 2"));
    let d = t.daemon();
    t.drop_task("g1.json", &task_json("g1", "fine"));
    t.drop_task("g2.json", &task_json("g2", "never-good work"));
    wait_until(60, "both tasks to end", || t.status_of("g1") == "completed" && t.status_of("g2") == "failed");
    wait_until(30, "gm/pm-performance.json to count both", || {
        std::fs::read_to_string(t.root.join("gm/pm-performance.json")).is_ok_and(|p| p.contains("\"tasks\": 2"))
    });
    assert_eq!(d.stop(), 0);

    let perf: serde_json::Value =
        serde_json::from_slice(&std::fs::read(t.root.join("gm/pm-performance.json")).unwrap()).unwrap();
    let pm = &perf["pms"]["pm"];
    assert_eq!((pm["tasks"].as_u64(), pm["completed"].as_u64(), pm["failed"].as_u64()), (Some(2), Some(1), Some(1)));
    assert_eq!(pm["passRate"], 0.5);
    assert_eq!(pm["averageScore"], 6.25, "(9 + 3.5) / 2: {perf}");
    assert_eq!(pm["averageIterations"], 1.5, "(1 + 2) / 2: {perf}");
    t.run(&["validate", t.root.join("gm/pm-performance.json").to_str().unwrap()]).ok();

    let arb = std::fs::read_to_string(t.root.join("gm/arbitrations.md")).unwrap();
    assert!(arb.contains("task g2: validator and team disagree after 2 iterations"), "{arb}");
    assert!(arb.contains("[validation.json](../tasks/g2/validation.json)") && arb.contains("- tests fail"), "{arb}");
    assert!(!arb.contains("task g1"), "{arb}");

    // The reports see both tasks; bad dates are refused naming the flag.
    // The day the tasks ended (not today: the test may run across midnight UTC).
    let today = t.task("g1").unwrap()["completedAt"].as_str().unwrap()[..10].to_owned();
    let r = t.run(&["report", "daily", "--date", &today]);
    r.ok();
    assert_eq!(r.stdout.trim(), format!("Wrote reports/daily/{today}.md"));
    let report = std::fs::read_to_string(t.root.join(format!("reports/daily/{today}.md"))).unwrap();
    assert!(report.contains("| ended | 2 |") && report.contains("| pm | 2 | 1 | 1 | 50% | 6.2 | 1.5 |"), "{report}");
    let weekly = t.run(&["report", "weekly", "--date", "2026-11-20", "--stdout"]);
    weekly.ok();
    assert!(weekly.stdout.starts_with("# Weekly report — 2026-W47 (2026-11-16 to 2026-11-22)"), "{}", weekly.stdout);
    // The week before it (from 2026-11-09) reaches past the 7 days failed tasks are kept.
    assert!(
        weekly.stdout.contains("- Retention deletes failed tasks 7 days after they end (`retention.tasks.failed`)"),
        "{}",
        weekly.stdout
    );
    assert!(!t.root.join("reports/weekly/2026-W47.md").exists(), "--stdout writes nothing");
    let bad = t.run(&["report", "monthly", "--date", "2026-02-30"]);
    bad.expect_code(2);
    assert!(bad.stderr.contains("--date \"2026-02-30\": not a date"), "{}", bad.stderr);
}

#[test]
fn metrics_have_a_row_for_every_background_job() {
    let t = Tree::init();
    t.config(&esc_config("critical", "[notify]\nlevels = [\"critical\"]\ncommand = [\"true\"]\n"));
    let d = t.daemon();
    t.drop_task("m1.json", &task_json("m1", "use-esc"));
    wait_until(30, "the task held", || held(&t, 1));
    let rows = |m: &str, family: &str| -> Vec<(String, u64)> {
        m.lines()
            .filter_map(|l| l.strip_prefix(&format!("{family}{{job=\"")))
            .filter_map(|l| l.split_once("\"} "))
            .map(|(job, n)| (job.to_owned(), n.parse().unwrap()))
            .collect()
    };
    wait_until(30, "the notification round", || {
        rows(&unix_get(&t, "/metrics"), "clawboard_job_rounds_total").iter().any(|(j, n)| j == "notify" && *n > 0)
    });
    let m = unix_get(&t, "/metrics");
    let mut jobs: Vec<String> = rows(&m, "clawboard_job_rounds_total").into_iter().map(|(j, _)| j).collect();
    jobs.sort();
    let want = [
        "accepted-claims",
        "archive",
        "claims",
        "heartbeat",
        "intake",
        "notify",
        "pull",
        "push",
        "records",
        "retention",
    ];
    assert_eq!(jobs, want, "{m}");
    assert!(rows(&m, "clawboard_job_failing").iter().all(|(_, n)| *n == 0), "{m}");
    assert!(rows(&m, "clawboard_job_failures_total").iter().all(|(_, n)| *n == 0), "{m}");
    // Consumers report how far behind the journal they are; workers follow no journal.
    let lag: Vec<String> = rows(&m, "clawboard_job_lag_entries").into_iter().map(|(j, _)| j).collect();
    assert_eq!(lag, ["intake", "notify"], "{m}");
    assert!(
        !m.contains("clawboard_job_lag_entries{job=\"push\"}"),
        "the push keeps its own cursor: not a runner consumer"
    );
    assert_eq!(d.stop(), 0);
}
