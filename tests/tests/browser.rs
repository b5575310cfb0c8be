//! The review page in a real browser: Debian's headless Chromium driven over
//! WebDriver (`chromedriver`, installed by `scripts/test` from the `chromium` and
//! `chromium-driver` packages) with the `fantoccini` client.
//!
//! Without the token the page refuses; with it, a pending escalation is shown with
//! its task, approved with a note typed into the page, the task resumes, and
//! `gm/decisions.md` has the entry. A second escalation appears without a reload.
//! An entry addressed to Human appears beside them and is closed from the page.
//! Screenshots go to `target/tmp/browser/`.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use clawboard_tests::{Tree, sh_config, wait_until};
use fantoccini::{ClientBuilder, Locator};
// chromedriver is on 127.0.0.1: plain HTTP, no TLS stack needed.
use hyper_util::client::legacy::connect::HttpConnector;

struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts `chromedriver` on a free port and waits until it listens.
fn chromedriver() -> (Driver, String) {
    let bin = ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("chromedriver is not installed: `apt-get install chromium chromium-driver` (scripts/test does)");
    let port = free_port();
    let child = Command::new(bin)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting chromedriver");
    let driver = Driver(child);
    wait_until(20, "chromedriver to listen", || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    (driver, format!("http://127.0.0.1:{port}"))
}

fn wait(c: &fantoccini::Client) -> fantoccini::wait::Wait<'_> {
    c.wait().at_most(Duration::from_secs(20)).every(Duration::from_millis(100))
}

/// Whether `e` says the element was swapped out of the page between finding and
/// using it: WebDriver's stale element reference, or Chromium's inspector error
/// for a node that left the document, which some versions return instead.
fn replaced(e: &fantoccini::error::CmdError) -> bool {
    e.is_stale_element_reference() || e.to_string().contains("does not belong to the document")
}

/// The text of the element `css` finds. The page swaps its content in whenever the
/// tree changes (a task writing its status), which can leave an element stale
/// between finding and reading it: then it is found again.
async fn text_of(c: &fantoccini::Client, css: &str) -> String {
    for _ in 0..50 {
        let el = wait(c).for_element(Locator::Css(css)).await.unwrap();
        match el.text().await {
            Ok(text) => return text,
            Err(e) if replaced(&e) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("{css}: {e}"),
        }
    }
    panic!("{css}: still replaced after 50 tries");
}

/// A headless Chromium session with a window of `size`.
async fn chromium(webdriver: &str, size: (u32, u32)) -> fantoccini::Client {
    let caps: serde_json::Map<String, serde_json::Value> = serde_json::from_value(serde_json::json!({
        "goog:chromeOptions": {
            "binary": "/usr/bin/chromium",
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     format!("--window-size={},{}", size.0, size.1)]
        }
    }))
    .unwrap();
    ClientBuilder::new(HttpConnector::new()).capabilities(caps).connect(webdriver).await.expect("a Chromium session")
}

/// The review page's base URL and the human token of the daemon running on `t`.
fn web_of(t: &Tree) -> (String, String) {
    let token = t.run(&["web", "token"]).stdout.trim().to_owned();
    let addr_file = t.root.join(".clawboard/web.addr");
    wait_until(10, "the web listener", || addr_file.exists());
    (format!("http://{}", std::fs::read_to_string(&addr_file).unwrap().trim()), token)
}

/// Clicks the element `css` finds, found again when the page swapped it out
/// between finding and clicking (its live refresh).
async fn click(c: &fantoccini::Client, css: &str) {
    for tries in 1.. {
        let el = wait(c).for_element(Locator::Css(css)).await.unwrap();
        match el.click().await {
            Ok(()) => return,
            Err(e) if replaced(&e) && tries < 50 => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("clicking {css}: {e}"),
        }
    }
}

/// `clawboard entry new` from Gen to Human in vpm-mini (naming `task`, if
/// given); the entry's id.
fn human_entry(t: &Tree, kind: &str, summary: &str, task: Option<&str>) -> String {
    let mut args = vec![
        "--json",
        "entry",
        "new",
        "--project",
        "vpm-mini",
        "--from",
        "Gen",
        "--to",
        "Human",
        "--kind",
        kind,
        "--summary",
        summary,
    ];
    if let Some(task) = task {
        args.extend(["--task", task]);
    }
    let r = t.run(&args);
    r.ok();
    r.json()["id"].as_str().unwrap().to_owned()
}

fn shots_dir() -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reviewer_approves_an_escalation_in_headless_chromium() {
    let t = Tree::init();
    t.config(&sh_config(
        r#"
[roles.esc]
command = ["sh", "-c", "cat >/dev/null; printf '{\"summary\":\"ready\",\"escalations\":[{\"level\":\"critical\",\"issue\":\"deploy v1.2 to production?\",\"requiresHumanApproval\":true}]}'"]
retry_backoff = "10ms"

[web]
listen = "127.0.0.1:0"
"#,
    ));
    let d = t.daemon();
    let (base, token) = web_of(&t);
    t.drop_task("b1.json", r#"{"taskId":"b1","type":"coding","description":"use-esc release v1.2"}"#);
    wait_until(30, "the escalation", || t.escalation_of("b1").is_some());
    let esc = t.escalation_of("b1").unwrap();
    wait_until(30, "the task held", || t.daemon_status().is_some_and(|s| s["queue"]["held"] == 1));

    let (_driver, webdriver) = chromedriver();
    let c = chromium(&webdriver, (1200, 1000)).await;

    // Without the token: refused, and nothing of the tree is on the page.
    c.goto(&base).await.unwrap();
    let refused = c.find(Locator::Css("#refused")).await.unwrap().text().await.unwrap();
    assert_eq!(refused, "no token given");
    assert!(!c.source().await.unwrap().contains(&esc));
    c.goto(&format!("{base}/?token=not-the-token")).await.unwrap();
    let wrong = c.find(Locator::Css("#refused")).await.unwrap().text().await.unwrap();
    assert!(wrong.starts_with("the token is not valid"), "{wrong}");

    // With it: the token becomes a cookie, the URL is clean, the escalation is there.
    c.goto(&format!("{base}/?token={token}")).await.unwrap();
    assert_eq!(c.current_url().await.unwrap().as_str(), format!("{base}/"));
    let card_css = format!("article[data-id='{esc}']");
    let text = text_of(&c, &card_css).await;
    for want in ["CRITICAL", "deploy v1.2 to production?", "Task b1", "use-esc release v1.2", "holds its task"] {
        assert!(text.contains(want), "missing {want:?} in the card:\n{text}");
    }
    let heading = text_of(&c, "#escalations h3").await;
    assert_eq!(heading, "Critical (1)");
    // The page's own style applies (its nonce is in the policy); an inline event
    // handler that is not the page's never runs, whatever the markup.
    let js = |s: &'static str| c.execute(s, vec![]);
    let bg = js("return getComputedStyle(document.querySelector('header')).backgroundColor").await.unwrap();
    assert_eq!(bg, "rgb(29, 35, 40)", "the page's style");
    js("var i=document.createElement('img');i.setAttribute('onerror','window.injected=1');i.src='x';document.body.appendChild(i)")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(js("return window.injected === undefined").await.unwrap(), true, "an injected onerror= ran");
    let shots = shots_dir();
    std::fs::write(shots.join("1-pending.png"), c.screenshot().await.unwrap()).unwrap();

    // Approve with a note typed into the page (again, on a card swapped in meanwhile;
    // while the note has the focus, the page swaps nothing).
    for tries in 1.. {
        let card = wait(&c).for_element(Locator::Css(&card_css)).await.unwrap();
        let approved = async {
            let note = card.find(Locator::Css("textarea[name='note']")).await?;
            note.clear().await?;
            note.send_keys("approved from the browser").await?;
            card.find(Locator::Css("button.approve")).await?.click().await
        };
        match approved.await {
            Ok(()) => break,
            Err(e) if replaced(&e) && tries < 50 => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("approving: {e}"),
        }
    }
    let flash = text_of(&c, "#flash").await;
    assert_eq!(flash, format!("Escalation {esc} approved."));
    wait_until(30, "the task to resume and complete", || t.status_of("b1") == "completed");
    let decisions = std::fs::read_to_string(t.root.join("gm/decisions.md")).unwrap();
    assert!(decisions.contains(&format!("escalation {esc} approved")), "{decisions}");
    assert!(
        decisions.contains("- by: human (web)") && decisions.contains("- note: approved from the browser"),
        "{decisions}"
    );
    std::fs::write(shots.join("2-approved.png"), c.screenshot().await.unwrap()).unwrap();

    // The page follows the tree without a reload: a new escalation shows up, and the
    // first task's row says completed.
    t.drop_task("b2.json", r#"{"taskId":"b2","type":"coding","description":"use-esc hotfix"}"#);
    wait_until(30, "the second escalation", || t.escalation_of("b2").is_some());
    let esc2 = t.escalation_of("b2").unwrap();
    wait(&c).for_element(Locator::Css(&format!("article[data-id='{esc2}']"))).await.expect("the new escalation, live");
    let row = text_of(&c, "tr.task-row[data-id='b1'] td.status").await;
    assert_eq!(row, "completed");
    let decided = text_of(&c, &format!("tr.decided[data-id='{esc}']")).await;
    assert!(decided.contains("approved") && decided.contains("approved from the browser"), "{decided}");
    std::fs::write(shots.join("3-live-update.png"), c.screenshot().await.unwrap()).unwrap();

    an_entry_for_human_is_closed_from_the_page(&c, &t).await;
    std::fs::write(shots.join("4-entry-closed.png"), c.screenshot().await.unwrap()).unwrap();
    eprintln!("screenshots in {}", shots.display());

    c.close().await.unwrap();
    assert_eq!(d.stop(), 0);
}

/// An entry addressed to Human (seed 004) shows up beside the escalations, live,
/// and is closed from the page.
async fn an_entry_for_human_is_closed_from_the_page(c: &fantoccini::Client, t: &Tree) {
    let entry = human_entry(t, "doc_update_report", "Doc Update done: phase 2", None);
    let row_css = format!("tr.entry-row[data-id='{entry}']");
    let row = text_of(c, &row_css).await;
    for want in ["Gen", "doc_update_report", "open", "Doc Update done: phase 2"] {
        assert!(row.contains(want), "missing {want:?} in the entry's row:\n{row}");
    }
    assert_eq!(text_of(c, "#entries h2").await, "Entries for Human (1)");
    click(c, &format!("{row_css} button.approve")).await;
    // The old page's flash stays until the browser has followed the redirect.
    let (want, mut flash) = (format!("Entry {entry} done."), String::new());
    for _ in 0..200 {
        flash = text_of(c, "#flash").await;
        if flash == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(flash, want);
    let shown = t.run(&["--json", "entry", "show", &entry]);
    shown.ok();
    assert_eq!(shown.json()["status"], "done");
    assert_eq!(text_of(c, "#entries h2").await, "Entries for Human (0)");
}

/// Text meant to break out of the page: markup, a script, an event handler, quotes.
const HOSTILE: &str = "<script>window.injected=1</script><img src=x onerror=\"window.injected=2\">\"'&秋冬护肤";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_page_shows_a_blueprint_tasks_board_steps_and_ledger_in_headless_chromium() {
    use clawboard_tests::blueprints::{bp_task, config, task_dir, wait_task, xhs_input};

    let t = Tree::init();
    t.config(&config(&[], "[web]\nlisten = \"127.0.0.1:0\"\n"));
    let d = t.daemon();
    let (base, token) = web_of(&t);
    let hostile_input = serde_json::json!({"topic": HOSTILE, "platform": "xiaohongshu"});
    t.drop_task("bp-hostile.json", &bp_task("bp-hostile", "xiaohongshu_viral", hostile_input, None));
    t.drop_task("bp-plain.json", &bp_task("bp-plain", "xiaohongshu_viral", xhs_input(), None));
    for id in ["bp-hostile", "bp-plain"] {
        wait_task(&t, id, 120);
    }
    let entry = |summary: &str| human_entry(&t, "note", summary, Some("bp-hostile"));
    let first = entry(HOSTILE);
    let count = |dir: &str| {
        std::fs::read_dir(task_dir(&t, "bp-hostile").join(dir))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "json"))
            .count()
    };
    let (runs, slices) = (count("attempts"), count("board/slices"));
    assert!(runs >= 10 && slices >= 10, "{runs} runs, {slices} slices");

    let (_driver, webdriver) = chromedriver();
    let c = chromium(&webdriver, (1280, 3000)).await;
    c.goto(&format!("{base}/tasks/bp-hostile")).await.unwrap();
    assert_eq!(text_of(&c, "#refused").await, "no token given", "the task page needs the token too");
    c.goto(&format!("{base}/?token={token}")).await.unwrap();

    // Linked from the tasks table.
    click(&c, "tr.task-row[data-id='bp-hostile'] a").await;

    // Hostile text shows as text; nothing of it runs or becomes markup.
    let js = |s: &'static str| c.execute(s, vec![]);
    assert_eq!(text_of(&c, "#title").await, HOSTILE);
    assert_eq!(c.current_url().await.unwrap().as_str(), format!("{base}/tasks/bp-hostile"));
    assert!(text_of(&c, "#zone-meta").await.contains(HOSTILE), "the topic in the meta zone");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(js("return window.injected === undefined").await.unwrap(), true, "injected script ran");
    assert_eq!(js("return document.scripts.length").await.unwrap(), 1, "only the page's own script");
    assert_eq!(js("return document.images.length").await.unwrap(), 0, "an injected <img>");

    // The board's three zones, the runs as a timeline, the ledger as a chart.
    for zone in ["meta", "content", "control"] {
        wait(&c).for_element(Locator::Css(&format!("#zone-{zone} dl dt"))).await.unwrap();
    }
    assert!(!text_of(&c, "dd[data-key='content.hook']").await.is_empty());
    let n = |css: &'static str| js(css);
    assert_eq!(n("return document.querySelectorAll('#timeline g.run').length").await.unwrap(), runs);
    let tags = n("return Array.from(document.querySelectorAll('#timeline g.run')).map(g => g.dataset.tags).join(';')")
        .await
        .unwrap();
    let tags = tags.as_str().unwrap();
    assert!(tags.contains("candidate 3") && tags.contains("round 2"), "{tags}");
    assert_eq!(n("return document.querySelectorAll('#ledger-chart g.step').length").await.unwrap(), slices);
    // Every step's slice is drawn beside the whole board it was cut from, and shorter.
    let widths = n("return Array.from(document.querySelectorAll('#ledger-chart g.step')).map(g => \
                    [g.querySelector('rect.bar-slice').getBBox().width, g.querySelector('rect.bar-full').getBBox().width])")
        .await
        .unwrap();
    for pair in widths.as_array().unwrap() {
        let (slice, full) = (pair[0].as_f64().unwrap(), pair[1].as_f64().unwrap());
        assert!(slice > 0.0 && slice < full, "slice {slice} against the board {full}");
    }
    assert!(
        n("return document.querySelectorAll('#ledger-chart line.budget').length").await.unwrap().as_u64().unwrap() > 0
    );
    let totals = text_of(&c, "#ledger-totals").await;
    assert!(totals.contains(&format!("{slices} slices handed")), "{totals}");
    assert_eq!(text_of(&c, &format!("#task-entries tr[data-id='{first}'] td:nth-child(6)")).await, HOSTILE);
    std::fs::write(shots_dir().join("5-task-page-hostile.png"), c.screenshot().await.unwrap()).unwrap();

    // Live: an entry naming the task shows up without a reload.
    let second = entry("a second note");
    wait(&c).for_element(Locator::Css(&format!("#task-entries tr[data-id='{second}']"))).await.expect("live");
    assert_eq!(text_of(&c, "#task-entries h2").await, "Entries (2)");

    // A task that does not exist, and an id that cannot be one: a page saying so.
    c.goto(&format!("{base}/tasks/no-such-task")).await.unwrap();
    assert!(text_of(&c, "#missing").await.contains("there is no task no-such-task"));
    c.goto(&format!("{base}/tasks/..%2Fetc")).await.unwrap();
    assert!(text_of(&c, "#missing").await.contains("is not a task id"));

    // The page of a plain run, as the README shows it.
    c.goto(&format!("{base}/tasks/bp-plain")).await.unwrap();
    wait(&c).for_element(Locator::Css("#ledger-chart g.step")).await.unwrap();
    let shot = shots_dir().join("task-page.png");
    std::fs::write(&shot, c.screenshot().await.unwrap()).unwrap();
    eprintln!("the task page: {}", shot.display());

    a_fork_is_linked_both_ways(&c, &t, &base).await;
    c.close().await.unwrap();
    assert_eq!(d.stop(), 0);
}

/// `bp-plain` forked at its body step and run by the daemon: its page lists the
/// fork, the fork's page says where it came from, and its runs before the fork
/// point are marked as the recorded task's.
async fn a_fork_is_linked_both_ways(c: &fantoccini::Client, t: &Tree, base: &str) {
    let r = t.run(&["--json", "task", "fork", "bp-plain", "--at", "bp/body"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let fork = r.json()["task"].as_str().unwrap().to_owned();
    assert_eq!(clawboard_tests::blueprints::wait_task(t, &fork, 120), "completed");

    c.goto(&format!("{base}/tasks/bp-plain")).await.unwrap();
    assert!(text_of(c, "#forks").await.contains(&fork));
    click(c, &format!("#forks a[href='/tasks/{fork}']")).await;
    assert_eq!(c.current_url().await.unwrap().as_str(), format!("{base}/tasks/{fork}"));
    let from = text_of(c, "#forked-from").await;
    assert!(from.starts_with("Forked from bp-plain at step bp/body"), "{from}");
    wait(c).for_element(Locator::Css("#timeline g.run")).await.unwrap();
    let runs = c
        .execute(
            "return Array.from(document.querySelectorAll('#timeline g.run')).map(g => [g.dataset.step, g.dataset.tags])",
            vec![],
        )
        .await
        .unwrap();
    let runs: Vec<(String, String)> = serde_json::from_value(runs).unwrap();
    let recorded: Vec<&str> =
        runs.iter().filter(|(_, tags)| tags.contains("recorded in bp-plain")).map(|(s, _)| s.as_str()).collect();
    assert!(recorded.contains(&"bp/curate") && recorded.contains(&"bp/title-c1"), "{runs:?}");
    assert!(!recorded.iter().any(|s| s.starts_with("bp/body")), "the body ran in the fork: {runs:?}");
    assert!(runs.iter().any(|(s, _)| s == "bp/body"), "{runs:?}");
    std::fs::write(shots_dir().join("task-page-fork.png"), c.screenshot().await.unwrap()).unwrap();
}
