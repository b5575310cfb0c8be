use super::*;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// A one-request HTTP server on 127.0.0.1 that answers `status` with `body` and
/// hands back the request it got.
async fn serve_once(status: &'static str, body: &'static str) -> (String, tokio::task::JoinHandle<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/run", listener.local_addr().unwrap());
    let h = tokio::spawn(async move {
        let (sock, _) = listener.accept().await.unwrap();
        let mut r = BufReader::new(sock);
        let mut head = String::new();
        let mut len = 0;
        loop {
            let mut line = String::new();
            r.read_line(&mut line).await.unwrap();
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap();
            }
            if line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let mut req_body = vec![0; len];
        r.read_exact(&mut req_body).await.unwrap();
        let resp = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        r.get_mut().write_all(resp.as_bytes()).await.unwrap();
        format!("{head}\n{}", String::from_utf8_lossy(&req_body))
    });
    (url, h)
}

fn http_role(url: &str) -> RoleConfig {
    serde_json::from_value(serde_json::json!({"http": {"url": url, "headers": {"x-team": "a"}}})).unwrap()
}

fn who() -> RunIdentity {
    RunIdentity {
        root: "/r".into(),
        task_id: "t9".into(),
        role: "reviewer".into(),
        instance_id: "inst-9".into(),
        token: "secret".into(),
        sandbox: None,
        trace: None,
    }
}

#[tokio::test]
async fn posts_the_context_with_identity_headers() {
    let (url, got) = serve_once("200 OK", r#"{"summary":"reviewed"}"#).await;
    let (_tx, mut rx) = watch::channel(false);
    let out = run(&http_role(&url), br#"{"ctx":1}"#, &who(), &mut rx).await;
    assert_eq!(out.status, RunStatus::Exited, "{:?}", out.error);
    assert_eq!(String::from_utf8_lossy(&out.stdout), r#"{"summary":"reviewed"}"#);
    let req = got.await.unwrap().to_ascii_lowercase();
    assert!(req.starts_with("post /run http/1.1"), "{req}");
    for h in [
        "authorization: bearer secret",
        "x-clawboard-task-id: t9",
        "x-clawboard-role: reviewer",
        "x-clawboard-instance-id: inst-9",
        "x-team: a",
    ] {
        assert!(req.contains(h), "missing {h} in {req}");
    }
    assert!(req.ends_with(r#"{"ctx":1}"#), "{req}");
}

#[tokio::test]
async fn an_error_status_fails_with_the_body_kept() {
    let (url, _got) = serve_once("503 Service Unavailable", "overloaded").await;
    let (_tx, mut rx) = watch::channel(false);
    let out = run(&http_role(&url), b"{}", &who(), &mut rx).await;
    assert_eq!(out.status, RunStatus::Failed);
    assert!(out.error.unwrap().contains("answered 503"));
    assert_eq!(out.stderr, b"overloaded");
}

#[tokio::test]
async fn connection_refused_fails() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/run", listener.local_addr().unwrap());
    drop(listener);
    let (_tx, mut rx) = watch::channel(false);
    let out = run(&http_role(&url), b"{}", &who(), &mut rx).await;
    assert_eq!(out.status, RunStatus::Failed);
    assert!(out.error.unwrap().starts_with("POST http://127.0.0.1:"));
}
