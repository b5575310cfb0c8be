#!/usr/bin/env python3
"""Self-test of scripts/roles/writing.py and config/blueprints/*.json:

  python3 scripts/roles/test_writing.py

Feeds writing.py contexts shaped like the blueprint VM's (docs/BLUEPRINTS.md, "What
a step's role gets and prints") and checks determinism, the title candidates, the
virality of loop rounds 1 and 2, that outputs fit the board's field types
(crates/core/src/formats/board.rs), and the misbehaviour switches. It also walks
each blueprint the way the VM does (slices built as crates/board's scope.rs and
template.rs build them, competing candidates, the sensitive filter's replacements,
the loop), without token budgets, so a blueprint that names a path no one writes,
or a role that cannot read its slice, fails here first."""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import tomllib
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SCRIPT = HERE / "writing.py"
BLUEPRINTS = REPO / "config" / "blueprints"
TEMPLATES = REPO / "config" / "templates"
CONFIG = REPO / "config" / "examples" / "blueprints.toml"
MIDDLEWARE = BLUEPRINTS / "middleware.toml"

TOPIC = "秋冬护肤"
INPUT = {"topic": TOPIC, "platform": "xiaohongshu", "style": "casual",
         "constraints": {"word_count": {"min": 200, "max": 600}, "tone": "亲切", "must_include": ["保湿"]}}


def run(component, ctx, env=None, timeout=30):
    """(exit code, stdout bytes, stderr text) of one run."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("WRITING_")}
    e.update(env or {})
    r = subprocess.run([sys.executable, str(SCRIPT), component], input=json.dumps(ctx, ensure_ascii=False).encode(),
                       capture_output=True, env=e, timeout=timeout)
    return r.returncode, r.stdout, r.stderr.decode()


def out(component, ctx, env=None):
    code, stdout, stderr = run(component, ctx, env)
    assert code == 0, f"{component} exited {code}: {stderr}"
    return json.loads(stdout)


def context(component, slice_, step_id="step", round_=1, candidate=None, platform="xiaohongshu", feedback=None):
    ctx = {"taskId": "t-1", "role": component, "step": f"bp/r{round_}/{step_id}", "kind": "blueprint",
           "iteration": 1, "slice": slice_, "sliceTokens": 10, "budget": 500, "tokenizer": "o200k_base",
           "blueprint_id": "xiaohongshu_viral", "step_id": step_id, "component_type": "worker",
           "round": round_, "platform": platform}
    if candidate is not None:
        ctx.update(candidate=candidate, candidates=3, step=f"bp/r{round_}/{step_id}-c{candidate}")
    if feedback:
        ctx["feedback"] = feedback
    return ctx


# --- the board's field types (crates/core/src/formats/board.rs), the parts used here ---

STR, NUM, INT, BOOL, ANY = "str", "num", "int", "bool", "any"
STYLES = ["professional", "casual", "humorous", "inspirational", "educational"]
PLATFORMS = ["xiaohongshu", "wechat", "twitter", "general"]
TYPES = {
    "meta": {"intent": STR, "style": ("enum", STYLES), "platform": ("enum", PLATFORMS), "topic": STR,
             "reference_summary": STR,
             "constraints": {"word_count": {"min": INT, "max": INT}, "tone": STR, "must_include": [STR],
                             "must_avoid": [STR]}},
    "content": {
        "hook": {"title": STR, "opening": STR, "selected": STR, "variants": [{"type": STR, "content": STR, "score": NUM}]},
        "body": {"content": STR, "sections": [{"title": STR, "content": STR}], "key_points": [STR], "quotes": [STR]},
        "cta": {"primary": STR, "secondary": STR, "type": ("enum", ["follow", "share", "comment", "save", "click"])},
        "hashtags": [STR],
        "platform_versions": ("map", {"title": STR, "body": STR, "hashtags": [STR], "word_count": INT,
                                      "emoji_density": STR}),
    },
    "control": {
        "quality_scores": {"virality": NUM, "hook_strength": NUM, "emotional_resonance": NUM, "platform_fit": NUM},
        "sensitive_filter": {"passed": BOOL, "findings": [ANY], "fixes_applied": [STR]},
    },
}


def check_type(ty, v, at):
    """Raises AssertionError naming the path when `v` is not of type `ty`."""
    if ty == ANY or ty is None:
        return
    if ty == STR:
        assert isinstance(v, str), f"{at}: {v!r} is not a string"
    elif ty == NUM:
        assert isinstance(v, (int, float)) and not isinstance(v, bool), f"{at}: {v!r} is not a number"
    elif ty == INT:
        assert isinstance(v, int) and not isinstance(v, bool), f"{at}: {v!r} is not an integer"
    elif ty == BOOL:
        assert isinstance(v, bool), f"{at}: {v!r} is not a bool"
    elif isinstance(ty, tuple) and ty[0] == "enum":
        assert v in ty[1], f"{at}: {v!r} is not one of {ty[1]}"
    elif isinstance(ty, tuple) and ty[0] == "map":
        assert isinstance(v, dict), f"{at}: {v!r} is not an object"
        for k, x in v.items():
            check_type(ty[1], x, f"{at}.{k}")
    elif isinstance(ty, list):
        assert isinstance(v, list), f"{at}: {v!r} is not an array"
        for i, x in enumerate(v):
            check_type(ty[0], x, f"{at}.{i}")
    elif isinstance(ty, dict):
        assert isinstance(v, dict), f"{at}: {v!r} is not an object"
        for k, t in ty.items():
            if k in v:
                check_type(t, v[k], f"{at}.{k}")


def type_at(path):
    """The board type of a path (`content.body`), None where any value goes."""
    zone, *keys = path.split(".")
    ty = TYPES[zone]
    for k in keys:
        if isinstance(ty, dict):
            ty = ty.get(k)
        elif isinstance(ty, tuple) and ty[0] == "map":
            ty = ty[1]
        else:
            return None
        if ty is None:
            return None
    return ty


def filter_words(platform):
    doc = tomllib.loads(MIDDLEWARE.read_text()) if MIDDLEWARE.exists() else {}
    bp = doc.get("blueprints", {})
    lists = bp.get("sensitive_words") or {"all": ["最好", "最佳", "第一", "国家级", "绝对", "顶级"]}
    reps = bp.get("replacements") or {"最好": "很好", "最佳": "很棒", "第一": "领先", "绝对": "非常", "顶级": "高端"}
    words = list(lists.get("all", [])) + list(lists.get(platform, []))
    return sorted(words, key=lambda w: -len(w)), reps


def strings(v):
    if isinstance(v, str):
        yield v
    elif isinstance(v, list):
        for x in v:
            yield from strings(x)
    elif isinstance(v, dict):
        for x in v.values():
            yield from strings(x)


# --- a small blueprint VM: the slices and writes the Rust one makes, no budgets ---

class SensitiveFailed(Exception):
    pass


def get(board, path):
    zone, *keys = path.split(".")
    v = board[zone]
    for k in keys:
        if not isinstance(v, dict) or k not in v:
            return None
        v = v[k]
    return v


def put(board, path, value):
    zone, *keys = path.split(".")
    v = board[zone]
    for k in keys[:-1]:
        v = v.setdefault(k, {})
    v[keys[-1]] = value


def build_scope(board, items):
    data, missing = {}, []
    for item in items:
        if item == "all":
            return {"meta_zone": board["meta"], "content_zone": board["content"], "control_zone": board["control"]}, []
        if item.endswith(".*"):  # every key under it, each under its own name (scope.rs)
            under = board[item[:-2]] if "." not in item[:-2] else get(board, item[:-2])
            if not under:
                missing.append(item)
            for key, v in (under or {}).items():
                assert key not in data, f"scope {items}: two items land on {key!r}"
                data[key] = v
            continue
        v = get(board, item)
        if v is None:
            missing.append(item)
            continue
        key = item.split(".")[-1]
        assert key not in data, f"scope {items}: two items land on {key!r}"
        data[key] = v
    return data, missing


def render_template(board, tpl):
    """template.rs: a placeholder names a path without its zone, resolved by the scope item it starts with."""
    def resolve(p):
        best = None
        for item in tpl["scope"]:
            bare = item.split(".", 1)[1]
            if p == bare or p.startswith(bare + "."):
                if best is None or len(bare) > len(best[1]):
                    best = (item.split(".")[0], bare)
        assert best, f"{tpl['template_id']}: placeholder {p} is not in the scope"
        return get(board, f"{best[0]}.{p}")

    def walk(fmt):
        data, missing = {}, []
        for k, v in fmt.items():
            if isinstance(v, dict):
                data[k], m = walk(v)
                missing += m
                continue
            ps = re.findall(r"\{([^}]*)\}", v)
            if len(ps) == 1 and v == "{" + ps[0] + "}":
                x = resolve(ps[0])
                if x is None:
                    missing.append(k)
                else:
                    data[k] = x
            else:
                vals = [resolve(p) for p in ps]
                if any(x is None for x in vals):
                    missing.append(k)
                else:
                    s = v
                    for p, x in zip(ps, vals):
                        s = s.replace("{" + p + "}", x if isinstance(x, str) else json.dumps(x))
                    data[k] = s
        return data, missing
    return walk(tpl["output_format"])


def condition(board, text, execution):
    m = re.fullmatch(r"\s*([\w.]+)\s*(<=|>=|==|!=|<|>)\s*(.+?)\s*", text)
    assert m, f"bad condition {text!r}"
    path, op, raw = m.groups()
    if raw.startswith("$"):
        value = execution[raw[1:]]
    elif raw.startswith('"'):
        value = json.loads(raw)
    else:
        value = json.loads(raw)
    v = get(board, path)
    if v is None:
        return op in ("<", "<=", "!=")
    return {"<": v < value, "<=": v <= value, ">": v > value, ">=": v >= value,
            "==": v == value, "!=": v != value}[op]


def sensitive(value, platform):
    """The built-in filter's fixes: replaced words; a word with no replacement raises."""
    words, reps = filter_words(platform)
    if isinstance(value, str):
        for w in words:
            if w in value:
                if w not in reps:
                    raise SensitiveFailed(f'sensitive word "{w}" (no replacement configured)')
                value = value.replace(w, reps[w])
        return value
    if isinstance(value, list):
        return [sensitive(x, platform) for x in value]
    if isinstance(value, dict):
        return {k: sensitive(x, platform) for k, x in value.items()}
    return value


def simulate(blueprint_id, user_input, threshold=75, max_retries=3, env=None):
    bp = json.loads((BLUEPRINTS / f"{blueprint_id}.json").read_text())
    templates = {p.stem: json.loads(p.read_text()) for p in TEMPLATES.glob("*.json")}
    platform = user_input.get("platform", "general")
    board = {"meta": {}, "content": {}, "control": {}}
    meta = board["meta"]
    meta["topic"] = user_input["topic"]
    meta["intent"] = user_input.get("intent", user_input["topic"])
    for k in ("style", "platform", "constraints"):
        if k in user_input:
            meta[k] = user_input[k]
    if user_input.get("reference_materials"):
        meta["reference_summary"] = "\n".join(user_input["reference_materials"])
    execution = {"quality_threshold": threshold, "max_retries": max_retries}
    log = []

    def step_run(step, round_):
        role = step.get("worker") or step.get("skill")
        if "template" in step:
            data, missing = render_template(board, templates[step["template"]])
        else:
            data, missing = build_scope(board, step["scope"])
        data = json.loads(json.dumps(data))  # a copy: the board changes later
        ctx = context(role, data, step["id"], round_, platform=platform)
        ctx["blueprint_id"] = blueprint_id
        ctx["component_type"] = "worker" if "worker" in step else "skill"
        if step.get("compete"):
            cands = []
            for c in range(1, step["compete"] + 1):
                cctx = dict(ctx, candidate=c, candidates=step["compete"])
                cands.append(out(role, cctx, env))
            best = max(range(len(cands)), key=lambda i: (cands[i]["score"], -i))
            variants = [{"type": c["output"]["type"], "content": c["output"]["content"], "score": c["score"]}
                        for c in cands]
            win = sensitive(variants[best]["content"], platform)
            value = {"variants": sensitive(variants, platform), "selected": win, "title": win}
            log.append((step["id"], round_, data, missing, cands))
        else:
            feedback = None
            for _ in range(1 + step.get("retry", 1)):
                r = out(role, dict(ctx, feedback=feedback) if feedback else ctx, env)
                try:
                    value = sensitive(r["output"], platform) if "output" in step else None
                    break
                except SensitiveFailed as e:
                    feedback = [str(e)]
            else:
                raise SensitiveFailed(f"step {step['id']}: every attempt refused")
            log.append((step["id"], round_, data, missing, r))
        if "output" in step:
            if step.get("compete"):
                base = get(board, step["output"]) or {}
                base.update(value)
                value = base
            ty = type_at(step["output"])
            check_type(ty, value, step["output"])
            put(board, step["output"], value)

    loop = bp.get("loop")
    steps = bp["steps"]
    for step in steps:
        if "when" in step and not condition(board, step["when"], execution):
            log.append((step["id"], 1, None, [], "skipped"))
            continue
        step_run(step, 1)
        if loop and step["id"] == loop["steps"][-1]:
            extra, limit = 0, execution[loop["max"][1:]] if isinstance(loop["max"], str) else loop["max"]
            while condition(board, loop["while"], execution) and extra < limit:
                extra += 1
                for sid in loop["steps"]:
                    step_run(next(s for s in steps if s["id"] == sid), 1 + extra)
    return board, log


class Determinism(unittest.TestCase):
    def test_same_stdin_same_bytes(self):
        cases = [
            ("title-worker", context("title-worker", {"topic": TOPIC, "platform": "xiaohongshu"}, "title", 1, 2)),
            ("body-worker", context("body-worker", {"topic": TOPIC, "title": "t", "word_limit": 600}, "body", 2)),
            ("narrative-builder", context("narrative-builder", {"topic": TOPIC}, "body", 1, platform="wechat")),
            ("platform-adapter", context("platform-adapter", {"platform": "xiaohongshu", "topic": TOPIC,
                                                              "selected": "t", "content": "b💧"}, "adapt")),
        ]
        for component, ctx in cases:
            a, b = run(component, ctx), run(component, ctx)
            self.assertEqual(a, b, component)
            self.assertEqual(a[0], 0, a[2])
            # One line, keys sorted, no ASCII escapes.
            self.assertTrue(a[1].endswith(b"\n") and a[1].count(b"\n") == 1)
            self.assertNotIn(b"\\u", a[1])
            doc = json.loads(a[1])
            self.assertEqual(a[1].decode(), json.dumps(doc, ensure_ascii=False, sort_keys=True) + "\n")

    def test_whole_blueprints_twice_give_the_same_board(self):
        for bp in ("xiaohongshu_viral", "twitter_thread"):
            self.assertEqual(simulate(bp, INPUT)[0], simulate(bp, INPUT)[0], bp)


class Titles(unittest.TestCase):
    def test_three_candidates(self):
        got = [out("title-worker", context("title-worker", {"topic": TOPIC, "platform": "xiaohongshu", "style": "casual"},
                                           "title", 1, c)) for c in (1, 2, 3)]
        self.assertEqual([g["score"] for g in got], [72, 88, 80])
        self.assertEqual(got[0]["output"]["type"], "question")
        self.assertTrue(got[0]["output"]["content"].endswith("？"))
        self.assertEqual(got[1]["output"]["content"], "秋冬护肤最好的三个习惯")
        self.assertEqual(got[2]["output"]["type"], "list")
        for g in got:
            self.assertEqual(set(g["output"]), {"type", "content"})
            self.assertLessEqual(len(g["output"]["content"]), 20)

    def test_long_topics_still_fit_twenty_characters(self):
        for c in (1, 2, 3):
            t = out("title-worker", context("title-worker", {"topic": "如何在三十天内学会做饭并坚持下去", "platform": "xiaohongshu"},
                                            "title", 1, c))["output"]["content"]
            self.assertLessEqual(len(t), 20, t)

    def test_not_competing_writes_the_whole_hook(self):
        doc = out("title-worker", context("title-worker", {"topic": TOPIC}, "title"))
        check_type(type_at("content.hook"), doc["output"], "content.hook")
        self.assertEqual(len(doc["output"]["variants"]), 3)
        self.assertEqual(doc["output"]["selected"], "秋冬护肤最好的三个习惯")

    def test_feedback_words_are_left_out(self):
        fb = ['sensitive word "最好" in content.hook.selected (no replacement configured)']
        doc = out("title-worker", context("title-worker", {"topic": TOPIC}, "title", 1, 2, feedback=fb))
        self.assertNotIn("最好", doc["output"]["content"])


def scored(round_, platform="xiaohongshu", component="body-worker", title="秋冬护肤很好的三个习惯"):
    body = out(component, context(component, {"topic": TOPIC, "title": title, "word_limit": 600}, "body", round_,
                                  platform=platform))["output"]
    return out("virality-scorer", context("virality-scorer", {"platform": platform, "selected": title,
                                                              "content": body["content"]}, "score", round_,
                                          platform=platform))


class Feedback(unittest.TestCase):
    def test_an_intent_sentence_gives_its_topic(self):
        doc = out("title-worker", context("title-worker", {"topic": "写一篇关于AI的小红书"}, "title", 1, 3))
        self.assertEqual(doc["output"]["content"], "AI的3个实用技巧")

    def test_compliance_feedback_shortens(self):
        s = {"topic": TOPIC, "title": "t"}
        fb = ["content.body.content is 1200 chars; xiaohongshu allows 1000"]
        for component in ("body-worker", "narrative-builder"):
            for platform in ("xiaohongshu", "wechat"):
                full = out(component, context(component, s, "body", platform=platform))["output"]["content"]
                short = out(component, context(component, s, "body", platform=platform, feedback=fb))["output"]["content"]
                self.assertLess(len(short), len(full), f"{component} {platform}")
        full = out("thread-worker", context("thread-worker", s, "thread"))["output"]
        short = out("thread-worker", context("thread-worker", s, "thread", feedback=fb))["output"]
        self.assertLess(len(short), len(full))

    def test_other_feedback_changes_no_words(self):
        ctx = context("title-worker", {"topic": TOPIC}, "title", 1, 2)
        plain = out("title-worker", ctx)
        self.assertEqual(out("title-worker", dict(ctx, feedback=['invalid output: "最好" is not JSON'])), plain)
        # A fixed finding names its replacement too; only the refused word counts.
        fb = ['sensitive word "国家级" in content.hook.selected (no replacement configured)',
              'sensitive word "最好" replaced by "很好" in content.hook.selected']
        healed = out("title-worker", dict(ctx, feedback=fb))["output"]["content"]
        self.assertEqual(healed, "秋冬护肤很好的三个习惯")


class Virality(unittest.TestCase):
    def test_round_one_under_and_round_two_over_the_threshold(self):
        r1, r2 = scored(1), scored(2)
        self.assertLess(r1["output"]["virality"], 75)
        self.assertGreaterEqual(r2["output"]["virality"], 75)
        self.assertEqual(r1["score"], r1["output"]["virality"])

    def test_every_platform_and_the_fallback(self):
        for platform in PLATFORMS:
            for component in ("body-worker", "narrative-builder"):
                v1, v2 = (scored(r, platform, component)["output"]["virality"] for r in (1, 2))
                self.assertTrue(v1 < 75 <= v2, f"{platform} {component}: {v1} {v2}")

    def test_scores_fit_the_board(self):
        check_type(type_at("control.quality_scores"), scored(1)["output"], "control.quality_scores")


class BoardTypes(unittest.TestCase):
    def test_each_component_fits_its_output_path(self):
        body = out("body-worker", context("body-worker", {"topic": TOPIC, "title": "t"}, "body"))["output"]
        cases = {
            "content.body": ("body-worker", {"topic": TOPIC, "title": "t", "word_limit": 600}),
            "content.cta": ("cta-worker", {"topic": TOPIC, "platform": "xiaohongshu"}),
            "content.hashtags": ("hashtag-worker", {"topic": TOPIC, "platform": "xiaohongshu", "keywords": ["保湿"]}),
            "content.platform_versions": ("platform-adapter", {"platform": "xiaohongshu", "topic": TOPIC, "selected": "t",
                                                               "content": body["content"], "primary": "收藏",
                                                               "hashtags": ["秋冬护肤"]}),
            "content.results.curate": ("content-curator", {"topic": TOPIC, "intent": "种草"}),
            "content.hook": ("hook-generator", {"topic": TOPIC, "platform": "wechat"}),
            "control.sensitive_filter": ("sensitive-filter", {"platform": "xiaohongshu",
                                                              "content": {"title": "最好", "body": "b", "hashtags": []}}),
        }
        for path, (component, s) in cases.items():
            doc = out(component, context(component, s, "x"))
            check_type(type_at(path), doc["output"], path)
        pv = out("platform-adapter", context("platform-adapter", cases["content.platform_versions"][1], "adapt"))["output"]
        self.assertEqual(list(pv), ["xiaohongshu"])
        self.assertIn("#秋冬护肤", pv["xiaohongshu"]["body"])
        self.assertEqual(pv["xiaohongshu"]["hashtags"], ["秋冬护肤"])

    def test_must_include_and_word_limit(self):
        b = out("body-worker", context("body-worker", {"topic": "读书", "title": "t", "must_include": ["番茄钟", "笔记"]},
                                       "body"))["output"]
        self.assertIn("番茄钟", b["content"])
        self.assertIn("笔记", b["content"])
        short = out("body-worker", context("body-worker", {"topic": TOPIC, "title": "t", "word_limit": 120}, "body"))
        full = out("body-worker", context("body-worker", {"topic": TOPIC, "title": "t"}, "body"))
        self.assertLess(len(short["output"]["content"]), len(full["output"]["content"]))

    def test_tweets_within_limits(self):
        t = out("thread-worker", context("thread-worker", {"topic": TOPIC, "selected": "秋冬护肤的5个实用技巧"}, "thread",
                                         platform="twitter"))["output"]
        self.assertTrue(2 <= len(t) <= 25 and all(isinstance(x, str) and len(x) <= 280 for x in t), t)

    def test_sensitive_filter_role(self):
        doc = out("sensitive-filter", context("sensitive-filter", {"platform": "xiaohongshu", "content": {
            "title": "秋冬护肤最好的三个习惯", "body": "正文", "hashtags": ["护肤"]}}, "check"))["output"]
        self.assertTrue(doc["passed"])
        self.assertEqual(doc["fixed"]["content"]["title"], "秋冬护肤很好的三个习惯")
        self.assertEqual(len(doc["fixes_applied"]), 1)
        doc = out("sensitive-filter", context("sensitive-filter", {"platform": "xiaohongshu", "content": {
            "title": "t", "body": "国家级认证", "hashtags": []}}, "check"))["output"]
        self.assertFalse(doc["passed"])
        self.assertEqual(doc["findings"][0]["word"], "国家级")


class Blueprints(unittest.TestCase):
    ALLOWED = {"id", "worker", "skill", "scope", "template", "max_tokens", "output", "retry", "fallback",
               "depends_on", "parallel", "compete", "selector", "middleware", "when"}
    INPUT_META = {"topic", "intent", "style", "platform", "constraints", "reference_summary"}

    def roles(self):
        return tomllib.loads(CONFIG.read_text())["roles"]

    def test_files_are_well_formed(self):
        roles = self.roles()
        templates = {p.stem for p in TEMPLATES.glob("*.json")}
        for path in sorted(BLUEPRINTS.glob("*.json")):
            bp = json.loads(path.read_text())
            self.assertEqual(set(bp) - {"blueprint_id", "type", "description", "steps", "loop"}, set(), path)
            self.assertEqual(bp["blueprint_id"], path.stem)
            self.assertIn(bp["type"], ("static_linear", "adaptive"))
            seen, outputs = [], []
            for step in bp["steps"]:
                at = f"{path.name} step {step['id']}"
                self.assertEqual(set(step) - self.ALLOWED, set(), at)
                self.assertRegex(step["id"], r"^[A-Za-z0-9_-]+$")
                self.assertNotIn(step["id"], seen, at)
                self.assertEqual(("worker" in step) + ("skill" in step), 1, at)
                self.assertEqual(("scope" in step) + ("template" in step), 1, at)
                self.assertGreater(step["max_tokens"], 0, at)
                role = step.get("worker") or step.get("skill")
                self.assertIn(role, roles, at)
                # A step's writes are held to seed 000's zone table as its role's
                # component: a step that writes control runs a middleware role.
                kind = "worker" if "worker" in step else "skill"
                if step.get("output", "").startswith("control."):
                    kind = "middleware"
                self.assertEqual(roles[role]["component"], kind, at)
                self.assertFalse(step.get("output", "").startswith("meta."), f"{at}: only the orchestrator writes meta")
                if "fallback" in step:
                    self.assertEqual(roles[step["fallback"]]["component"], "skill", at)
                if "template" in step:
                    self.assertIn(step["template"], templates, at)
                scope = step.get("scope") or json.loads((TEMPLATES / f"{step['template']}.json").read_text())["scope"]
                for item in scope:
                    if item in ("all", "meta.*"):
                        continue
                    zone, key = item.split(".")[0], item.split(".")[1]
                    if zone == "meta":
                        self.assertIn(key, self.INPUT_META, at)
                    else:
                        self.assertTrue(any(item == o or item.startswith(o + ".") or o.startswith(item + ".")
                                            for o in outputs), f"{at}: no earlier step writes {item}")
                for d in step.get("depends_on", []):
                    self.assertIn(d, seen, at)
                if step.get("compete"):
                    self.assertGreaterEqual(step["compete"], 2)
                    self.assertEqual(step["selector"], "max_score")
                    self.assertIn("output", step)
                for m in step.get("middleware", []):
                    self.assertIn(m, ("sensitive_filter", "quality_gate", "platform_compliance"), at)
                if bp["type"] == "static_linear":
                    self.assertNotIn("when", step, at)
                seen.append(step["id"])
                if "output" in step:
                    outputs.append(step["output"])
            if "loop" in bp:
                self.assertEqual(bp["type"], "adaptive")
                self.assertEqual(bp["loop"]["steps"], [s for s in seen if s in bp["loop"]["steps"]])

    def test_the_four_of_the_seed(self):
        self.assertEqual(sorted(p.stem for p in BLUEPRINTS.glob("*.json")),
                         ["deep_analysis", "twitter_thread", "wechat_longform", "xiaohongshu_viral"])

    def test_config_roles_run_this_script(self):
        for rid, r in self.roles().items():
            if "writing.py" in " ".join(r["command"]):
                self.assertEqual(r["command"], ["python3", "scripts/roles/writing.py", rid])
                self.assertEqual((r["timeout"], r["max_retries"], r["retry_backoff"]), ("20s", 1, "100ms"))


class Runs(unittest.TestCase):
    """Each blueprint walked as the VM walks it."""

    def assert_clean(self, board, platform):
        words, _ = filter_words(platform)
        for s in strings(board["content"]):
            for w in words:
                self.assertNotIn(w, s)

    def assert_slices_fit(self, blueprint_id, log):
        """No slice misses a key its step relies on; its JSON stays within the budget in characters."""
        steps = {s["id"]: s for s in json.loads((BLUEPRINTS / f"{blueprint_id}.json").read_text())["steps"]}
        optional = {"meta.reference_summary", "meta.style", "meta.constraints", "content.cta.primary"}
        for sid, round_, data, missing, _ in log:
            if data is None:
                continue
            self.assertEqual([m for m in missing if m not in optional and m not in ("platform", "style")], [],
                             f"{blueprint_id} {sid}")
            size = len(json.dumps(data, ensure_ascii=False, separators=(",", ":")))
            self.assertLessEqual(size, steps[sid]["max_tokens"], f"{blueprint_id} {sid} round {round_}: {size} chars")

    def test_xiaohongshu_viral(self):
        board, log = simulate("xiaohongshu_viral", INPUT)
        hook = board["content"]["hook"]
        self.assertEqual(hook["selected"], "秋冬护肤很好的三个习惯")
        self.assertEqual([v["score"] for v in hook["variants"]], [72, 88, 80])
        scores = [r["output"]["virality"] for sid, _, _, _, r in log if sid == "score"]
        self.assertEqual(len(scores), 2, "one quality iteration")
        self.assertTrue(scores[0] < 75 <= scores[1], scores)
        body = board["content"]["body"]["content"]
        self.assertIn("保湿", body)
        self.assertLess(len(body), 600)
        pv = board["content"]["platform_versions"]["xiaohongshu"]
        self.assertLessEqual(len(pv["title"]), 20)
        self.assertLess(len(pv["body"]), 1000)
        self.assertEqual(board["content"]["cta"]["type"], "save")
        self.assert_clean(board, "xiaohongshu")
        self.assert_slices_fit("xiaohongshu_viral", log)

    def test_with_an_intent_and_references(self):
        board, log = simulate("xiaohongshu_viral", dict(INPUT, intent="种草", reference_materials=["秋冬皮肤容易干燥。"]))
        self.assertIn("参考：秋冬皮肤容易干燥", board["content"]["results"]["curate"])
        self.assert_slices_fit("xiaohongshu_viral", log)

    def test_wechat_longform(self):
        board, log = simulate("wechat_longform", dict(INPUT, platform="wechat", style="professional",
                                                      constraints={"must_include": ["屏障"]}))
        body = board["content"]["body"]
        self.assertGreaterEqual(len(body["sections"]), 5)
        self.assertIn("屏障", body["content"])
        self.assertTrue(board["content"]["hook"]["opening"])
        scores = [r["output"]["virality"] for sid, _, _, _, r in log if sid == "score"]
        self.assertTrue(len(scores) == 2 and scores[0] < 75 <= scores[1], scores)
        self.assertIn("wechat", board["content"]["platform_versions"])
        self.assert_clean(board, "wechat")
        self.assert_slices_fit("wechat_longform", log)

    def test_twitter_thread(self):
        board, log = simulate("twitter_thread", dict(INPUT, platform="twitter"))
        thread = board["content"]["thread"]
        self.assertTrue(all(len(t) <= 280 for t in thread))
        self.assertEqual(board["content"]["body"]["content"], "\n\n".join(thread))
        self.assertLessEqual(len(board["content"]["hashtags"]), 3)
        self.assertEqual(board["content"]["cta"]["type"], "follow")
        self.assertIn("twitter", board["content"]["platform_versions"])
        self.assert_clean(board, "twitter")
        self.assert_slices_fit("twitter_thread", log)

    def test_deep_analysis(self):
        board, log = simulate("deep_analysis", dict(INPUT, platform="general", topic="AI工具与职场效率"))
        self.assertIn("outline", board["content"]["analysis"])
        self.assertNotIn("cta", board["content"], "cta is skipped on general")
        self.assertIn("general", board["content"]["platform_versions"])
        scores = [r["output"]["virality"] for sid, _, _, _, r in log if sid == "score"]
        self.assertTrue(len(scores) == 2 and scores[0] < 75 <= scores[1], scores)
        self.assert_clean(board, "general")
        self.assert_slices_fit("deep_analysis", log)
        board, _ = simulate("deep_analysis", dict(INPUT, platform="wechat"))
        self.assertEqual(board["content"]["cta"]["type"], "share")

    def test_a_lower_threshold_needs_no_iteration(self):
        _, log = simulate("xiaohongshu_viral", INPUT, threshold=60)
        self.assertEqual(len([1 for sid, *_ in log if sid == "score"]), 1)


class Switches(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.ctx = context("body-worker", {"topic": TOPIC, "title": "t"}, "body")

    def tearDown(self):
        self.tmp.cleanup()

    def test_off_by_default(self):
        self.assertEqual(run("body-worker", self.ctx)[0], 0)

    def test_fail_always(self):
        code, stdout, stderr = run("body-worker", self.ctx, {"WRITING_FAIL": "body-worker"})
        self.assertEqual((code, stdout), (1, b""))
        self.assertIn("WRITING_FAIL", stderr)
        self.assertEqual(run("cta-worker", self.ctx, {"WRITING_FAIL": "body-worker"})[0], 0)

    def test_fail_the_first_n_runs(self):
        env = {"WRITING_FAIL": "title-worker,body-worker:2", "CLAWBOARD_ROOT": self.tmp.name}
        self.assertEqual([run("body-worker", self.ctx, env)[0] for _ in range(4)], [1, 1, 0, 0])
        counter = Path(self.tmp.name) / ".writing-fail-count" / "body-worker"
        self.assertEqual(counter.read_text(), "4")

    def test_sleep(self):
        slow = context("title-worker", {"topic": TOPIC}, "title", 1, 2)
        fast = context("title-worker", {"topic": TOPIC}, "title", 1, 1)
        env = {"WRITING_SLEEP": "title-worker:2:3"}
        with self.assertRaises(subprocess.TimeoutExpired):
            run("title-worker", slow, env, timeout=1)
        t = time.monotonic()
        self.assertEqual(run("title-worker", fast, env)[0], 0)
        self.assertLess(time.monotonic() - t, 2)

    def test_garbage(self):
        env = {"WRITING_GARBAGE": "title-worker:2"}
        code, stdout, _ = run("title-worker", context("title-worker", {"topic": TOPIC}, "title", 1, 2), env)
        self.assertEqual(code, 0)
        with self.assertRaises(json.JSONDecodeError):
            json.loads(stdout)
        json.loads(run("title-worker", context("title-worker", {"topic": TOPIC}, "title", 1, 3), env)[1])
        self.assertRaises(json.JSONDecodeError, json.loads,
                          run("body-worker", self.ctx, {"WRITING_GARBAGE": "body-worker:*"})[1])

    def test_sensitive(self):
        env = {"WRITING_SENSITIVE": "body-worker"}
        self.assertIn("国家级", out("body-worker", self.ctx, env)["output"]["content"])
        fb = ['sensitive word "国家级" in content.body.content (no replacement configured)']
        retry = dict(self.ctx, feedback=fb)
        self.assertNotIn("国家级", out("body-worker", retry, env)["output"]["content"])
        self.assertIn("国家级", out("body-worker", retry, {"WRITING_SENSITIVE": "body-worker:always"})["output"]["content"])
        title = out("title-worker", context("title-worker", {"topic": TOPIC}, "title", 1, 1),
                    {"WRITING_SENSITIVE": "title-worker"})
        self.assertIn("国家级", title["output"]["content"])

    def test_sensitive_retry_heals_in_the_vm(self):
        board, log = simulate("xiaohongshu_viral", INPUT, env={"WRITING_SENSITIVE": "cta-worker"})
        self.assertNotIn("国家级", board["content"]["cta"]["primary"])
        with self.assertRaises(SensitiveFailed):
            simulate("xiaohongshu_viral", INPUT, env={"WRITING_SENSITIVE": "cta-worker:always"})


if __name__ == "__main__":
    os.chdir(REPO)
    unittest.main(verbosity=1)
