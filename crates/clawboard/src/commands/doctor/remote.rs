//! The doctor's questions to servers: the bucket (reachable, credentials,
//! conditional create honoured, ETags in listings, clock skew), the archive's
//! git remote (reachable, auth, branch), the GitHub token against its
//! repository, and each model server (reachable, serving its model). Each
//! writes nothing but the bucket's probe object, which it removes.

use std::time::{Duration, SystemTime};

use clawboard_sync::{AnyRemote, Body, Condition, Failure, Metadata, Remote};

use super::Check;
use crate::config::Settings;

/// How long one question to a server may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// A model server's bound: its listing and one short completion (a server on a
/// CPU may take seconds to answer the first).
const MODEL_TIMEOUT: Duration = Duration::from_secs(60);

/// A clock this far from the bucket's is worth a warning; this far, a failure
/// (S3 refuses a request signed more than 15 minutes off).
const SKEW_WARN: Duration = Duration::from_secs(30);
const SKEW_FAIL: Duration = Duration::from_secs(300);

pub async fn checks(s: &Settings) -> Vec<Check> {
    let mut checks = bucket(s).await;
    checks.extend(archive(s).await);
    checks.extend(github(s).await);
    checks.extend(models(s).await);
    checks.push(telemetry(s).await);
    checks
}

/// The OTLP endpoint, if telemetry is on: an empty export must be taken.
async fn telemetry(s: &Settings) -> Check {
    let Some(t) = &s.telemetry else {
        return Check::ok("telemetry", "off (no [telemetry] otlp_endpoint)");
    };
    let client = match crate::telemetry::client(t.timeout) {
        Ok(c) => c,
        Err(e) => return Check::fail("telemetry", format!("cannot build an HTTP client: {e}"), "see the error"),
    };
    match crate::telemetry::post(&client, &t.url, &t.headers, crate::telemetry::empty_request()).await {
        Ok(()) => Check::ok("telemetry", format!("{} takes OTLP spans (service {})", t.url, t.service_name)),
        Err(e) => Check::fail(
            "telemetry",
            format!("spans cannot be sent: {e}"),
            "start the collector, or correct [telemetry] otlp_endpoint or its headers (docs/TELEMETRY.md); tasks run the same, their spans are dropped",
        ),
    }
}

/// The bucket, if sync is on.
async fn bucket(s: &Settings) -> Vec<Check> {
    if !s.sync.enabled {
        return vec![Check::ok("bucket", "sync is off ([sync] enabled = false)")];
    }
    if let clawboard_sync::Backend::Dir(d) = &s.sync.backend
        && (d.is_relative() || d.starts_with(&s.root))
        && !s.root.join(clawboard_core::layout::STATE).is_dir()
    {
        // Opening it would make it, inside a directory that is no blackboard.
        return vec![Check::warn(
            "bucket",
            format!("the local bucket {} is inside a root that is not initialized", d.display()),
            "initialize the root first (clawboard init)",
        )];
    }
    let remote = match AnyRemote::open(&s.sync.backend, &s.root).await {
        Ok(r) => r,
        Err(e) => {
            return vec![Check::fail("bucket", e.to_string(), "correct [sync.s3] or its credentials (docs/SYNC.md)")];
        }
    };
    let node = clawboard_sync::node_id(&s.root, s.node_id.as_deref()).unwrap_or_else(|_| "doctor".into());
    let s3 = matches!(s.sync.backend, clawboard_sync::Backend::S3(_));
    let mut checks =
        probe_bucket(&remote, &format!("{}{node}-{}", clawboard_sync::shared::DOCTOR_PREFIX, std::process::id()), s3)
            .await;
    if let clawboard_sync::Backend::S3(cfg) = &s.sync.backend {
        checks.push(clock_skew(cfg).await);
    }
    checks
}

/// Lists, creates an object twice with `If-None-Match: *` (the second must be
/// refused), finds it in a listing with its ETag (`etags`: an S3 server's
/// listings must carry them; a local directory's carry none), and removes it.
pub async fn probe_bucket<R: Remote>(remote: &R, key: &str, etags: bool) -> Vec<Check> {
    let at = remote.describe();
    let prefix = key.rsplit_once('/').map_or("", |(p, _)| p);
    if let Err(e) = remote.list(prefix, None, 1).await {
        let fix = match e.failure {
            Failure::Retryable => "start the server, or correct sync.s3.endpoint",
            _ => "check the credentials (sync.s3.credentials_file, profile or AWS_* variables) and the bucket's name",
        };
        return vec![Check::fail("bucket", format!("{at}: {e}"), fix)];
    }
    let mut checks = vec![Check::ok("bucket", format!("{at}: reachable and listable"))];
    let body = || Body::Bytes(b"clawboard doctor\n".to_vec().into());
    if let Err(e) = remote.put(key, body(), &Metadata::new(), &Condition::Absent).await {
        checks.push(Check::fail(
            "bucket.write",
            format!("{at}: cannot create {key}: {e}"),
            "give the credentials write access to the bucket (PutObject, DeleteObject)",
        ));
        return checks;
    }
    checks.push(match remote.put(key, body(), &Metadata::new(), &Condition::Absent).await {
        Err(e) if e.failure == Failure::PreconditionFailed => {
            Check::ok("bucket.conditional", "a create over an existing object is refused (If-None-Match: *)")
        }
        Err(e) => Check::warn(
            "bucket.conditional",
            format!("the second create failed otherwise than refused: {e}"),
            "run clawboard doctor again",
        ),
        Ok(_) => Check::fail(
            "bucket.conditional",
            format!("{at} ignored If-None-Match: * and replaced {key}: two nodes could claim the same task"),
            "use a server that honours conditional writes (Cloudflare R2, AWS S3, MinIO)",
        ),
    });
    if etags {
        checks.push(listed_etag(remote, prefix, key).await);
    }
    if let Err(e) = remote.delete(key).await {
        checks.push(Check::warn("bucket.cleanup", format!("cannot remove {key}: {e}"), format!("delete {key}")));
    }
    checks
}

/// Whether a listing of `prefix` carries `key`'s ETag.
async fn listed_etag<R: Remote>(remote: &R, prefix: &str, key: &str) -> Check {
    let at = remote.describe();
    match remote.list(prefix, None, 1000).await {
        Ok(page) => match page.objects.iter().find(|o| o.key == key) {
            Some(o) if o.etag.is_some() => Check::ok("bucket.etags", "listings carry ETags"),
            Some(_) => Check::warn(
                "bucket.etags",
                format!(
                    "{at}: listings carry no ETags: a full pull sends a HEAD per object, and each tick reads every node's heartbeat again"
                ),
                "for a large tree, a server whose ListObjectsV2 carries ETags (Cloudflare R2, AWS S3, MinIO)",
            ),
            None => Check::warn(
                "bucket.etags",
                format!("{key} was created but is not listed yet"),
                "run clawboard doctor again",
            ),
        },
        Err(e) => Check::fail("bucket.etags", format!("{at}: listing {prefix}/: {e}"), "run clawboard doctor again"),
    }
}

/// The server's `Date` against this machine's clock.
async fn clock_skew(cfg: &clawboard_sync::s3::S3Config) -> Check {
    let url = cfg.endpoint.clone().unwrap_or_else(|| format!("https://s3.{}.amazonaws.com", cfg.region));
    let date = async {
        let client = reqwest::Client::builder().timeout(TIMEOUT).build().map_err(|e| e.to_string())?;
        let resp = client.head(&url).send().await.map_err(|e| e.without_url().to_string())?;
        let date = resp.headers().get(reqwest::header::DATE).ok_or("no Date header")?;
        let date = date.to_str().map_err(|e| e.to_string())?;
        chrono::DateTime::parse_from_rfc2822(date).map_err(|e| format!("Date {date:?}: {e}"))
    };
    let theirs = match date.await {
        Ok(d) => SystemTime::from(d),
        Err(e) => {
            return Check::warn("bucket.clock", format!("{url}: cannot read its clock: {e}"), "check the endpoint");
        }
    };
    skew_verdict(SystemTime::now(), theirs)
}

fn skew_verdict(ours: SystemTime, theirs: SystemTime) -> Check {
    let (skew, ahead) = match ours.duration_since(theirs) {
        Ok(d) => (d, "ahead of"),
        Err(e) => (e.duration(), "behind"),
    };
    // The Date header has whole seconds.
    let detail = format!("this machine's clock is {}s {ahead} the bucket's", skew.as_secs());
    let fix = "synchronise the clock (systemctl enable --now systemd-timesyncd, or chrony)";
    if skew >= SKEW_FAIL {
        Check::fail("bucket.clock", detail, fix)
    } else if skew >= SKEW_WARN {
        Check::warn("bucket.clock", detail, fix)
    } else {
        Check::ok("bucket.clock", detail)
    }
}

/// The archive's remote, if one is set.
async fn archive(s: &Settings) -> Vec<Check> {
    let Some(url) = s.archive.settings.remote.as_deref() else {
        return vec![Check::ok("archive", "no archive.remote: commits stay local")];
    };
    let url = clawboard_archive::repo::redact(url);
    let settings = s.archive.settings.clone();
    let probe = tokio::task::spawn_blocking(move || clawboard_archive::probe_remote(&settings)).await;
    let branch = &s.archive.settings.branch;
    vec![match probe {
        Ok(Ok(Some(p))) => {
            let there = if p.branch_exists { "exists" } else { "is made by the first push" };
            Check::ok(
                "archive",
                format!("{url}: reachable, {} accepted; branch {branch} {there}", p.authenticated_with),
            )
        }
        Ok(Ok(None)) => Check::ok("archive", "no archive.remote: commits stay local"),
        Ok(Err(e @ clawboard_archive::Error::Auth { .. })) => Check::fail(
            "archive",
            e.to_string(),
            "give a token that may push (CLAWBOARD_GIT_TOKEN, GITHUB_TOKEN or archive.token_file), or archive.ssh_key",
        ),
        Ok(Err(e)) => Check::fail("archive", e.to_string(), "correct archive.remote, or start the git server"),
        Err(e) => Check::fail("archive", format!("the check did not finish: {e}"), "run clawboard doctor again"),
    }]
}

/// The GitHub bridge, if it is on.
async fn github(s: &Settings) -> Vec<Check> {
    if !s.github.enabled {
        return vec![Check::ok("github", "the bridge is off ([github] enabled = false)")];
    }
    let state = clawboard_github::state_dir(&s.root);
    let mut client = match clawboard_github::Client::new(&s.github, state) {
        Ok(c) => c,
        Err(e) => return vec![Check::fail("github", e.to_string(), "correct [github] (docs/ENTRIES.md)")],
    };
    let repo = s.github.repository.as_ref().map_or_else(String::new, ToString::to_string);
    vec![match tokio::time::timeout(TIMEOUT, client.check_access()).await {
        Ok(Ok(())) => Check::ok("github", format!("{repo}: the token may list its issues ({})", s.github.api)),
        Ok(Err(e)) => Check::fail(
            "github",
            format!("{repo}: {e}"),
            "give a token that may read and comment on the repository's issues (github.token_env or github.token_file)",
        ),
        Err(_) => Check::fail("github", format!("{}: no answer within {TIMEOUT:?}", s.github.api), "check github.api"),
    }]
}

/// The line of a model server that answered doctor's request: what its `/models`
/// said of the model, and the reply format it took (a warning when that is
/// plainer than the configured one: say it in the config, and no request is refused).
fn model_check(key: &str, at: &str, p: &clawboard_roles::runner::ModelProbe) -> Check {
    use clawboard_roles::runner::Listing;
    let listing = match &p.listing {
        Listing::Listed => "serves the model".to_owned(),
        Listing::Unlisted(others) => format!("answers the model, though GET /models lists only {others}"),
        Listing::None(status) => format!("answers the model (GET /models gave {status} and lists none)"),
    };
    let took = format!(
        "{at}: {listing}; a schema-shaped request was answered with reply_format {} in {} ms",
        p.format.name(),
        p.elapsed.as_millis()
    );
    if p.format == p.asked {
        Check::ok(format!("model {key}"), took)
    } else {
        Check::warn(
            format!("model {key}"),
            format!("{took} (it refused {})", p.asked.name()),
            format!("set reply_format = \"{}\" in {key}", p.format.name()),
        )
    }
}

/// Every model server the config names, each endpoint and model once.
async fn models(s: &Settings) -> Vec<Check> {
    let providers = s.roles.llm.providers.iter().map(|(name, p)| {
        (format!("llm.providers.{name}"), name.clone(), clawboard_roles::config::LlmConfig::from_provider(name, p))
    });
    let own = s.roles.roles.iter().filter_map(|(id, r)| {
        let llm = r.llm.as_ref().filter(|l| l.provider.is_none())?;
        Some((format!("roles.{id}.llm"), id.clone(), llm.clone()))
    });
    let mut seen = std::collections::BTreeSet::new();
    let mut checks = Vec::new();
    for (key, name, llm) in providers.chain(own) {
        if !seen.insert((llm.base_url.clone(), llm.model.clone())) {
            continue;
        }
        let at = format!("{} ({})", llm.base_url, llm.model);
        checks.push(match clawboard_roles::runner::probe_model(&llm, &name, MODEL_TIMEOUT).await {
            Ok(p) => model_check(&key, &at, &p),
            Err(e) => Check::fail(format!("model {key}"), e, model_fix(s, &key, &name)),
        });
    }
    checks
}

/// What to set when a model server does not answer: for a provider, the
/// variables that point it elsewhere (and where they go).
fn model_fix(s: &Settings, key: &str, name: &str) -> String {
    if !key.starts_with("llm.providers.") {
        return format!("start the model server, or correct {key}'s base_url, model or key (docs/LLM.md)");
    }
    let var = |k: &str| clawboard_roles::config::llm::provider_env_var(name, k);
    let place = s.env_file.as_ref().map_or_else(|| "the service's environment".to_owned(), |f| f.display().to_string());
    format!(
        "start the model server, or set {} and {} (a hosted API's key: {}) in {place}, or correct {key} (docs/LLM.md)",
        var("base_url"),
        var("model"),
        var("api_key_file"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::doctor::Level;

    #[test]
    fn clock_skew_is_judged_both_ways() {
        let now = SystemTime::now();
        assert_eq!(skew_verdict(now, now - Duration::from_secs(2)).level, Level::Ok);
        let behind = skew_verdict(now, now + Duration::from_secs(40));
        assert_eq!(
            (behind.level, behind.detail.as_str()),
            (Level::Warn, "this machine's clock is 40s behind the bucket's")
        );
        assert_eq!(skew_verdict(now, now - Duration::from_secs(301)).level, Level::Fail);
    }

    #[tokio::test]
    async fn the_local_bucket_honours_conditional_creates_and_is_left_as_found() {
        let dir = tempfile::tempdir().unwrap();
        let remote = clawboard_sync::dir::DirRemote::open(dir.path()).unwrap();
        let checks = probe_bucket(&remote, "_doctor/n1", false).await;
        let levels: Vec<(&str, Level)> = checks.iter().map(|c| (c.check.as_str(), c.level)).collect();
        assert_eq!(levels, [("bucket", Level::Ok), ("bucket.conditional", Level::Ok)], "{checks:#?}");
        assert!(remote.list("_doctor", None, 10).await.unwrap().objects.is_empty(), "the probe is removed");
    }
}
