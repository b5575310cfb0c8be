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

/// The text of the element `css` finds. The page swaps its content in whenever the
/// tree changes (a task writing its status), which can leave an element stale
/// between finding and reading it: then it is found again.
async fn text_of(c: &fantoccini::Client, css: &str) -> String {
    for _ in 0..50 {
        let el = wait(c).for_element(Locator::Css(css)).await.unwrap();
        match el.text().await {
            Ok(text) => return text,
            Err(e) if e.is_stale_element_reference() => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("{css}: {e}"),
        }
    }
    panic!("{css}: still replaced after 50 tries");
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
    let token = t.run(&["web", "token"]).stdout.trim().to_owned();
    let addr_file = t.root.join(".clawboard/web.addr");
    wait_until(10, "the web listener", || addr_file.exists());
    let base = format!("http://{}", std::fs::read_to_string(&addr_file).unwrap().trim());
    t.drop_task("b1.json", r#"{"taskId":"b1","type":"coding","description":"use-esc release v1.2"}"#);
    wait_until(30, "the escalation", || t.escalation_of("b1").is_some());
    let esc = t.escalation_of("b1").unwrap();
    wait_until(30, "the task held", || t.daemon_status().is_some_and(|s| s["queue"]["held"] == 1));

    let (_driver, webdriver) = chromedriver();
    let caps: serde_json::Map<String, serde_json::Value> = serde_json::from_value(serde_json::json!({
        "goog:chromeOptions": {
            "binary": "/usr/bin/chromium",
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,1000"]
        }
    }))
    .unwrap();
    let c = ClientBuilder::new(HttpConnector::new())
        .capabilities(caps)
        .connect(&webdriver)
        .await
        .expect("a Chromium session");

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
            Err(e) if e.is_stale_element_reference() && tries < 50 => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("approving: {e}"),
        }
    }
    let flash = wait(&c).for_element(Locator::Css("#flash")).await.unwrap().text().await.unwrap();
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

    // An entry addressed to Human (seed 004) shows up beside the escalations, live,
    // and is closed from the page.
    let r = t.run(&[
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
        "doc_update_report",
        "--summary",
        "Doc Update done: phase 2",
    ]);
    r.ok();
    let entry = r.json()["id"].as_str().unwrap().to_owned();
    let row_css = format!("tr.entry-row[data-id='{entry}']");
    let row = text_of(&c, &row_css).await;
    for want in ["Gen", "doc_update_report", "open", "Doc Update done: phase 2"] {
        assert!(row.contains(want), "missing {want:?} in the entry's row:\n{row}");
    }
    assert_eq!(text_of(&c, "#entries h2").await, "Entries for Human (1)");
    for tries in 1.. {
        let row = wait(&c).for_element(Locator::Css(&row_css)).await.unwrap();
        let clicked = async { row.find(Locator::Css("button.approve")).await?.click().await };
        match clicked.await {
            Ok(()) => break,
            Err(e) if e.is_stale_element_reference() && tries < 50 => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("closing the entry: {e}"),
        }
    }
    // The old page's flash stays until the browser has followed the redirect.
    let (want, mut flash) = (format!("Entry {entry} done."), String::new());
    for _ in 0..200 {
        flash = text_of(&c, "#flash").await;
        if flash == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(flash, want);
    let shown = t.run(&["--json", "entry", "show", &entry]);
    shown.ok();
    assert_eq!(shown.json()["status"], "done");
    assert_eq!(text_of(&c, "#entries h2").await, "Entries for Human (0)");
    std::fs::write(shots.join("4-entry-closed.png"), c.screenshot().await.unwrap()).unwrap();
    eprintln!("screenshots in {}", shots.display());

    c.close().await.unwrap();
    assert_eq!(d.stop(), 0);
}
