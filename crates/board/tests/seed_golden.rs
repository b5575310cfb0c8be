#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Golden tests from the seeds' own examples: seed 003's scope path table, seed
//! 000's title and body flows, seed 003's four templates and its compression
//! example; then properties of slices over random boards.

mod common;

use clawboard_board::slice::{self, DEFAULT_TRUNCATE_TOKENS, Source, Spec, count_value};
use clawboard_board::{BoardPath, Caller, Error, Scope, TaskBoard, Template, template, tokens};
use clawboard_core::acl::Component;
use clawboard_core::formats::BoardFile;
use clawboard_core::{Id, Store};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

use common::{acl, store};

const TASK: &str = "t-golden";

fn scope(items: &[&str]) -> Scope {
    Scope::parse(&items.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>()).unwrap()
}

fn unlimited<'a>(step: &str, source: Source<'a>) -> Spec<'a> {
    Spec { step: step.into(), source, max_tokens: None, truncate_tokens: DEFAULT_TRUNCATE_TOKENS }
}

fn table_rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("|--"))
        .skip(1)
        .map(|l| l.trim_matches('|').split('|').map(|c| c.trim().trim_matches('`').to_owned()).collect())
        .collect()
}

// ---------------------------------------------------------------- seed 003: paths

/// Seed 003, Scope 语法 示例, as the seed writes it.
const SEED_PATH_TABLE: &str = "
| Scope Path | 解析为 | 数据类型 |
|------------|--------|----------|
| `meta.intent` | `blackboard.meta_zone.intent` | string |
| `meta.platform` | `blackboard.meta_zone.platform` | enum |
| `meta.constraints.word_count` | `blackboard.meta_zone.constraints.word_count` | object |
| `content.hook.selected` | `blackboard.content_zone.hook.selected` | string |
| `content.hook.variants` | `blackboard.content_zone.hook.variants` | array |
| `content.body.content` | `blackboard.content_zone.body.content` | string |
| `content.body.sections` | `blackboard.content_zone.body.sections` | array |
| `control.quality_scores.virality` | `blackboard.control_zone.quality_scores.virality` | number |
| `control.step_status` | `blackboard.control_zone.step_status` | object |
";

#[test]
fn seed_003_path_table() {
    let (_dir, store) = store();
    let board = TaskBoard::new(&store, TASK).unwrap();
    let (acl, d) = (acl(), Caller::daemon());
    let values = [
        ("meta.intent", json!("写一篇关于AI的小红书")),
        ("meta.platform", json!("xiaohongshu")),
        ("meta.constraints.word_count", json!({"min": 300, "max": 800})),
        ("content.hook.selected", json!("5个AI工具让你效率翻倍")),
        ("content.hook.variants", json!([{"type": "numeric", "content": "5个AI工具让你效率翻倍", "score": 85}])),
        ("content.body.content", json!("第一个工具是……")),
        ("content.body.sections", json!([{"title": "ChatGPT", "content": "写作助手"}])),
        ("control.quality_scores.virality", json!(82.5)),
    ];
    for (path, v) in &values {
        let op = clawboard_board::Op::set(BoardPath::parse(path).unwrap(), v.clone()).unwrap();
        board.write(&acl, &d, op).unwrap();
    }
    board.update_step_status(&acl, &d, "title", "completed").unwrap();
    board.update_step_status(&acl, &d, "body", "running").unwrap();
    let b = board.load().unwrap();
    let zones = b.zones();
    let value_of = |path: &str| -> Value {
        if path == "control.step_status" {
            json!({"title": "completed", "body": "running"})
        } else {
            values.iter().find(|(p, _)| *p == path).unwrap().1.clone()
        }
    };

    let rows = table_rows(SEED_PATH_TABLE);
    assert_eq!(rows.len(), 9);
    for row in rows {
        let (path, resolved, ty) = (row[0].as_str(), row[1].as_str(), row[2].as_str());
        let expected = value_of(path);
        // 解析为: blackboard.meta_zone.intent is where the value sits on the board.
        let pointer = format!("/{}", resolved.strip_prefix("blackboard.").unwrap().replace('.', "/"));
        assert_eq!(zones.pointer(&pointer), Some(&expected), "{path} → {resolved}");
        // The slice holds the value under the path's last segment.
        let raw = Scope::parse(&[path.to_owned()]).unwrap().build(&b).unwrap();
        let last = path.rsplit('.').next().unwrap();
        let mut want = Map::new();
        want.insert(last.to_owned(), expected.clone());
        assert_eq!(raw.data, want, "{path}");
        assert_eq!(raw.sources.get(last), Some(&BoardPath::parse(path).unwrap()), "{path}");
        assert!(raw.missing.is_empty(), "{path}: {:?}", raw.missing);
        // 数据类型.
        let kind_ok = match ty {
            "string" | "enum" => expected.is_string(),
            "object" => expected.is_object(),
            "array" => expected.is_array(),
            "number" => expected.is_number(),
            other => panic!("the seed has no type {other}"),
        };
        assert!(kind_ok, "{path}: {expected} is not {ty}");
        // The same through the slicer's entry point, unlimited.
        let s = Scope::parse(&[path.to_owned()]).unwrap();
        let out = slice::build(&b, &unlimited("row", Source::Scope(&s))).unwrap();
        assert_eq!(out.data, Value::Object(want));
        assert_eq!(out.tokens, count_value(&out.data));
    }
    // An enum row holds one of the seed's values: another is refused on the way in.
    assert!(board.write_meta(&acl, &d, "platform", json!("weibo")).is_err());
}

// ------------------------------------------------------ seed 000: the data flows

const INTENT: &str = "写一篇关于AI的小红书";
const BEST: &str = "5个AI工具让你效率翻倍";
const BODY: &str = "最近我试了几十个AI工具，留下了这5个：ChatGPT写初稿，Notion AI整理笔记，Midjourney出配图，Gamma做PPT，Perplexity查资料。";

fn title_variants() -> Value {
    json!([
        {"type": "numeric", "content": BEST, "score": 85},
        {"type": "suspense", "content": "用了这些工具，我每天早下班2小时", "score": 78},
        {"type": "pain_point", "content": "还在手动整理资料？这5个AI工具帮你搞定", "score": 72}
    ])
}

fn sections() -> Value {
    json!([
        {"title": "写作：ChatGPT", "content": "初稿十分钟"},
        {"title": "笔记：Notion AI", "content": "自动整理要点"}
    ])
}

/// Seed 000's 标题生成流程 and Body 生成流程, each step by the component the seed
/// names, through the board's operations. Returns the board.
fn run_the_seeds_flows(store: &Store) -> TaskBoard {
    let board = TaskBoard::new(store, TASK).unwrap();
    let acl = acl();
    let orchestrator = Caller::role("pm", "inst-pm", Component::Orchestrator, "seed 000");
    let title_worker = Caller::role("title-worker", "inst-t", Component::Worker, "seed 000");
    let body_worker = Caller::role("body-worker", "inst-b", Component::Worker, "seed 000");
    let slicer = Caller::role("slicer", "inst-s", Component::Slicer, "seed 000");
    let middleware = Caller::role("sensitive-filter", "inst-m", Component::Middleware, "seed 000");

    // 标题生成流程 1. 用户输入 → Meta Zone
    board.write_meta(&acl, &orchestrator, "intent", json!(INTENT)).unwrap();
    board.write_meta(&acl, &orchestrator, "platform", json!("xiaohongshu")).unwrap();
    // 2. Title Worker: slice = get_slice(["meta.intent", "meta.platform"])
    let s = scope(&["meta.intent", "meta.platform"]);
    let sl = slice::build(&board.load().unwrap(), &unlimited("title", Source::Scope(&s))).unwrap();
    assert_eq!(sl.data, json!({"intent": INTENT, "platform": "xiaohongshu"}));
    assert!(sl.missing.is_empty());
    board.write_content(&acl, &title_worker, "hook", "variants", title_variants()).unwrap();
    // 3. best = select_best(read_content("hook", "variants"))
    let variants = board.read_content(&acl, &slicer, "hook", "variants").unwrap().unwrap();
    let best = variants
        .as_array()
        .unwrap()
        .iter()
        .max_by(|a, b| a["score"].as_f64().unwrap().total_cmp(&b["score"].as_f64().unwrap()))
        .unwrap()["content"]
        .clone();
    board.write_content(&acl, &title_worker, "hook", "selected", best).unwrap();
    // 4. 敏感字检查 (Middleware)
    let content = board.read_content(&acl, &middleware, "hook", "selected").unwrap().unwrap();
    assert_eq!(content, json!(BEST));
    let filter_result = json!({"passed": true, "findings": [], "fixes_applied": []});
    board.write_control(&acl, &middleware, "sensitive_filter", filter_result).unwrap();

    // Body 生成流程 1. slice = get_slice(["meta.intent", "meta.style", "content.hook.selected"])
    let s = scope(&["meta.intent", "meta.style", "content.hook.selected"]);
    let sl = slice::build(&board.load().unwrap(), &unlimited("body", Source::Scope(&s))).unwrap();
    assert_eq!(sl.data, json!({"intent": INTENT, "selected": BEST}));
    assert_eq!(sl.missing, ["meta.style"], "no style was written: left out, noted missing");
    // 2. Body Worker
    board.write_content(&acl, &body_worker, "body", "content", json!(BODY)).unwrap();
    board.write_content(&acl, &body_worker, "body", "sections", sections()).unwrap();
    // 3. 质量评分
    let body = board.read_content(&acl, &middleware, "body", "content").unwrap().unwrap();
    assert_eq!(body, json!(BODY));
    board.write_control(&acl, &middleware, "quality_scores.virality", json!(82)).unwrap();
    board
}

#[test]
fn seed_000_title_and_body_flows() {
    let (_dir, store) = store();
    let board = run_the_seeds_flows(&store);
    let snapshot = board.snapshot(&acl(), &Caller::daemon()).unwrap();
    let expected = json!({
        "meta_zone": {
            "intent": "写一篇关于AI的小红书",
            "platform": "xiaohongshu"
        },
        "content_zone": {
            "hook": {
                "variants": [
                    {"type": "numeric", "content": "5个AI工具让你效率翻倍", "score": 85},
                    {"type": "suspense", "content": "用了这些工具，我每天早下班2小时", "score": 78},
                    {"type": "pain_point", "content": "还在手动整理资料？这5个AI工具帮你搞定", "score": 72}
                ],
                "selected": "5个AI工具让你效率翻倍"
            },
            "body": {
                "content": "最近我试了几十个AI工具，留下了这5个：ChatGPT写初稿，Notion AI整理笔记，Midjourney出配图，Gamma做PPT，Perplexity查资料。",
                "sections": [
                    {"title": "写作：ChatGPT", "content": "初稿十分钟"},
                    {"title": "笔记：Notion AI", "content": "自动整理要点"}
                ]
            }
        },
        "control_zone": {
            "sensitive_filter": {"passed": true, "findings": [], "fixes_applied": []},
            "quality_scores": {"virality": 82}
        }
    });
    assert_eq!(snapshot, expected);
    // The history says who did what, in the seed's order.
    let h = board.history(None).unwrap();
    let who: Vec<(&str, &str, &str)> =
        h.iter().map(|r| (r.op.as_str(), r.path.as_str(), r.component.as_str())).collect();
    assert_eq!(
        who,
        [
            ("write_meta", "meta.intent", "orchestrator"),
            ("write_meta", "meta.platform", "orchestrator"),
            ("write_content", "content.hook.variants", "worker"),
            ("write_content", "content.hook.selected", "worker"),
            ("write_control", "control.sensitive_filter", "middleware"),
            ("write_content", "content.body.content", "worker"),
            ("write_content", "content.body.sections", "worker"),
            ("write_control", "control.quality_scores.virality", "middleware"),
        ]
    );
    assert_eq!(board.at(h.len() as u64).unwrap().zones(), expected);
}

// --------------------------------------------------------- seed 003: templates

#[test]
fn seed_003_templates_over_the_flows_board() {
    let (_dir, store) = store();
    let board = run_the_seeds_flows(&store).load().unwrap();
    let templates = template::load(None).unwrap();
    let expected = [
        (
            "title_generation",
            json!({"topic": "写一篇关于AI的小红书", "platform": "xiaohongshu"}),
            vec!["style (meta.style)"],
        ),
        (
            "body_generation",
            json!({"topic": "写一篇关于AI的小红书", "title": "5个AI工具让你效率翻倍"}),
            vec!["word_limit (meta.constraints.word_count.max)"],
        ),
        (
            "platform_adaptation",
            json!({
                "platform": "xiaohongshu",
                "title": "5个AI工具让你效率翻倍",
                "body": "最近我试了几十个AI工具，留下了这5个：ChatGPT写初稿，Notion AI整理笔记，Midjourney出配图，Gamma做PPT，Perplexity查资料。"
            }),
            vec!["cta (content.cta.primary)"],
        ),
        (
            "sensitive_check",
            json!({
                "platform": "xiaohongshu",
                "content": {
                    "title": "5个AI工具让你效率翻倍",
                    "body": "最近我试了几十个AI工具，留下了这5个：ChatGPT写初稿，Notion AI整理笔记，Midjourney出配图，Gamma做PPT，Perplexity查资料。"
                }
            }),
            vec!["content.hashtags (content.hashtags)"],
        ),
    ];
    assert_eq!(templates.len(), expected.len());
    for (id, data, missing) in expected {
        let t = &templates[id];
        let out = slice::build(&board, &unlimited(id, Source::Template(t))).unwrap();
        assert_eq!(out.data, data, "{id}");
        assert_eq!(out.missing, missing, "{id}");
        assert!(out.rungs.is_empty(), "{id}");
        assert_eq!(out.tokens, count_value(&data), "{id}");
        let r = t.render(&board);
        assert_eq!(Value::Object(r.data), data, "{id}");
        assert_eq!(r.missing, missing, "{id}");
    }

    // Once the missing values are written, nothing is missing.
    let (acl, d) = (acl(), Caller::daemon());
    let tb = TaskBoard::new(&store, TASK).unwrap();
    tb.write_meta(&acl, &d, "style", json!("casual")).unwrap();
    tb.write_meta(&acl, &d, "constraints.word_count", json!({"min": 300, "max": 800})).unwrap();
    tb.write_content(&acl, &d, "cta", "primary", json!("关注我")).unwrap();
    tb.write_content(&acl, &d, "hashtags", "", json!(["AI工具", "效率"])).unwrap();
    let board = tb.load().unwrap();
    for t in templates.values() {
        let out = slice::build(&board, &unlimited(&t.id, Source::Template(t))).unwrap();
        assert!(out.missing.is_empty(), "{}: {:?}", t.id, out.missing);
    }
    let sc = slice::build(&board, &unlimited("s", Source::Template(&templates["sensitive_check"]))).unwrap();
    assert_eq!(sc.data["content"]["hashtags"], json!(["AI工具", "效率"]), "a whole placeholder keeps the array");
    let body = slice::build(&board, &unlimited("b", Source::Template(&templates["body_generation"]))).unwrap();
    assert_eq!(body.data["word_limit"], json!(800), "a whole placeholder keeps the number");
}

#[test]
fn seed_003_worker_and_skill_scopes_fit_their_budgets() {
    let (_dir, store) = store();
    let board = run_the_seeds_flows(&store).load().unwrap();
    // Seed 003, 切片策略: Worker 模式 and Skill 模式.
    let steps: [(&str, &[&str], u64); 5] = [
        ("title-worker", &["meta.intent", "meta.platform", "meta.style"], 200),
        ("body-worker", &["meta.intent", "content.hook.selected", "meta.constraints"], 400),
        ("cta-worker", &["meta.platform", "content.hook.selected"], 100),
        ("narrative-builder", &["meta.*", "content.hook.*", "content.body.key_points"], 1500),
        ("hook-generator", &["meta.*", "control.quality_scores"], 800),
    ];
    for (step, items, budget) in steps {
        let s = scope(items);
        let spec =
            Spec { step: step.into(), source: Source::Scope(&s), max_tokens: Some(budget), truncate_tokens: 100 };
        let out = slice::build(&board, &spec).unwrap();
        assert!(out.tokens <= budget && out.tokens == count_value(&out.data), "{step}: {}", out.tokens);
        assert!(out.rungs.is_empty(), "{step}: {:?}", out.rungs);
    }
    let s = scope(&["meta.*", "content.hook.*", "content.body.key_points"]);
    let out = slice::build(&board, &unlimited("narrative-builder", Source::Scope(&s))).unwrap();
    assert_eq!(
        out.data,
        json!({"intent": INTENT, "platform": "xiaohongshu", "variants": title_variants(), "selected": BEST})
    );
    assert_eq!(out.missing, ["content.body.key_points"]);
}

// ------------------------------------------------- seed 003: compression example

/// The seed's intent, "写一篇关于AI的小红书文章，介绍5个提升效率的AI工具...(省略500字)",
/// written out to 500 characters.
fn long_intent() -> String {
    let mut s = "写一篇关于AI的小红书文章，介绍5个提升效率的AI工具".to_owned();
    let filler = "，每个工具都要写清楚它适合的使用场景、上手的具体步骤、免费和付费版本的区别、真实使用一周后的体验和需要注意的坑";
    while s.chars().count() < 500 {
        s.push_str(filler);
    }
    s.chars().take(500).collect()
}

fn seed_variants() -> Value {
    json!([
        {"type": "numeric", "content": "5个AI工具...", "score": 85},
        {"type": "suspense", "content": "用了这些工具...", "score": 78},
        {"type": "pain_point", "content": "还在手动...", "score": 72}
    ])
}

#[test]
fn seed_003_compression_example() {
    let (_dir, store) = store();
    let tb = TaskBoard::new(&store, TASK).unwrap();
    let (acl, d) = (acl(), Caller::daemon());
    let intent = long_intent();
    assert_eq!(intent.chars().count(), 500);
    tb.write_meta(&acl, &d, "intent", json!(intent)).unwrap();
    tb.write_content(&acl, &d, "hook", "variants", seed_variants()).unwrap();
    let board = tb.load().unwrap();
    let t = Template::parse(
        "compress.json",
        r#"{
            "template_id": "compress",
            "scope": ["meta.intent", "content.hook.variants"],
            "flatten": true,
            "output_format": {"intent": "{intent}", "hook_variants": "{hook.variants}"}
        }"#,
    )
    .unwrap();

    // The original slice, as the seed shows it.
    let original = slice::build(&board, &unlimited("compress", Source::Template(&t))).unwrap();
    assert_eq!(original.data, json!({"intent": intent, "hook_variants": seed_variants()}));

    // The budget: what the truncated intent with the top variant takes, and less than
    // the truncated intent with every variant.
    let n = DEFAULT_TRUNCATE_TOKENS;
    let cut = format!("{}...", tokens::truncate(&intent, n));
    let truncated_only = count_value(&json!({"intent": cut, "hook_variants": seed_variants()}));
    let with_top = count_value(&json!({"intent": cut, "hook": "5个AI工具..."}));
    assert!(original.tokens > truncated_only, "truncating the intent saves tokens");
    assert!(truncated_only > with_top + 4, "{truncated_only} vs {with_top}");
    let budget = with_top + (truncated_only - with_top) / 2;
    assert!(budget < truncated_only && budget >= with_top);

    let spec =
        Spec { step: "compress".into(), source: Source::Template(&t), max_tokens: Some(budget), truncate_tokens: n };
    let out = slice::build(&board, &spec).unwrap();
    assert_eq!(out.rungs, ["truncate", "drop_variants"]);
    assert_eq!(out.data["hook"], json!("5个AI工具..."), "only the best variant is kept");
    assert!(out.data.get("hook_variants").is_none());
    let got = out.data["intent"].as_str().unwrap();
    assert!(got.ends_with("..."), "{got}");
    let kept = got.strip_suffix("...").unwrap();
    assert!(intent.starts_with(kept) && kept.chars().count() < 500, "{got}");
    assert!(got.starts_with("写一篇关于AI的小红书文章，介绍5个提升效率的AI工具"), "{got}");
    assert!(tokens::count(kept) <= n, "cut to at most {n} tokens");
    assert!(out.tokens <= budget, "{} > {budget}", out.tokens);
    assert_eq!(out.tokens, count_value(&out.data));
    assert_eq!(out.budget, Some(budget));

    // One token less than the truncation alone needs is still past the first rung;
    // and a budget below the top variant's slice fails, naming the rungs tried.
    let spec = Spec { max_tokens: Some(truncated_only - 1), ..spec };
    assert_eq!(slice::build(&board, &spec).unwrap().rungs, ["truncate", "drop_variants"]);
    let spec = Spec { max_tokens: Some(with_top - 1), ..spec };
    match slice::build(&board, &spec).unwrap_err() {
        Error::OverBudget { step, budget, size, rungs } => {
            assert_eq!(
                (step.as_str(), budget, rungs),
                ("compress", with_top - 1, vec!["truncate".into(), "drop_variants".into()])
            );
            assert!(size > budget);
        }
        e => panic!("{e}"),
    }
    // A budget the truncation alone meets stops there.
    let spec = Spec { max_tokens: Some(truncated_only), ..spec };
    assert_eq!(slice::build(&board, &spec).unwrap().rungs, ["truncate"]);
}

// ------------------------------------------------------------------ properties

fn json_tree() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        "\\PC{0,24}".prop_map(Value::String),
        "[a-z ]{0,40}".prop_map(Value::String),
        any::<i32>().prop_map(|n| json!(n)),
    ];
    leaf.prop_recursive(4, 48, 5, |inner| {
        prop_oneof![
            prop::collection::btree_map("[a-z_]{1,8}", inner.clone(), 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            prop::collection::vec(inner, 0..4).prop_map(Value::Array),
        ]
    })
}

fn zone() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map("[a-z_]{1,8}", json_tree(), 0..5).prop_map(|m| m.into_iter().collect())
}

fn random_board() -> impl Strategy<Value = BoardFile> {
    (zone(), zone(), zone()).prop_map(|(m, c, k)| {
        let mut b = BoardFile::empty(Id::new(TASK).unwrap());
        b.meta_zone = m;
        b.content_zone = c;
        b.control_zone = k;
        b
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_slice_of_all_is_the_snapshot(board in random_board()) {
        let s = scope(&["all"]);
        let raw = s.build(&board).unwrap();
        prop_assert_eq!(Value::Object(raw.data), board.zones());
        prop_assert!(raw.missing.is_empty());
        let out = slice::build(&board, &unlimited("all", Source::Scope(&s))).unwrap();
        prop_assert_eq!(&out.data, &board.zones());
        prop_assert_eq!(out.tokens, count_value(&board.zones()));
        prop_assert_eq!(out.tokens, slice::full_tokens(&board));
    }

    #[test]
    fn a_slice_is_within_budget_or_over_budget(
        board in random_board(),
        which in 0usize..3,
        budget in 0u64..600,
        truncate in 0u64..60,
    ) {
        let items: &[&str] = match which {
            0 => &["all"],
            1 => &["meta.*"],
            _ => &["content.*"],
        };
        let s = scope(items);
        let spec = Spec { step: "p".into(), source: Source::Scope(&s), max_tokens: Some(budget), truncate_tokens: truncate };
        match slice::build(&board, &spec) {
            Ok(out) => {
                prop_assert!(out.tokens <= budget, "{} > {}", out.tokens, budget);
                prop_assert_eq!(out.tokens, count_value(&out.data));
                prop_assert_eq!(out.budget, Some(budget));
            }
            Err(Error::OverBudget { step, budget: b, size, .. }) => {
                prop_assert_eq!(step.as_str(), "p");
                prop_assert_eq!(b, budget);
                prop_assert!(size > budget);
            }
            Err(e) => prop_assert!(false, "neither a slice nor over budget: {}", e),
        }
    }

    /// The first rung's cut: a prefix of the text, of at most `n` tokens.
    #[test]
    fn truncation_is_a_prefix_within_n_tokens(text in "\\PC{0,200}", n in 0u64..40) {
        let cut = tokens::truncate(&text, n);
        prop_assert!(text.starts_with(cut));
        prop_assert!(tokens::count(cut) <= n, "{:?} is {} tokens", cut, tokens::count(cut));
        if tokens::count(&text) <= n {
            prop_assert_eq!(cut, text.as_str());
        }
    }
}
