#!/usr/bin/env python3
"""The components of seed 001's writing blueprints (docs/BLUEPRINTS.md), one
deterministic program: the component is argv[1].

  content-curator    skill   content.results.curate: what to build on (a string)
  trend-tracker      worker  content.trends: keywords, angles, hashtags
  title-worker       worker  content.hook: three competing titles (candidate 1..3)
  hook-generator     skill   content.hook: title and opening (Skill 模式)
  body-worker        worker  content.body: a short body; a better one from round 2
  narrative-builder  skill   content.body: a long body with sections (and body-worker's fallback)
  thread-worker      worker  content.thread: a numbered thread of tweets
  analysis-skill     skill   content.analysis: angles and an outline (deep_analysis' strategy)
  virality-scorer    middleware  control.quality_scores, computed from the title and body text
  cta-worker         worker  content.cta
  hashtag-worker     worker  content.hashtags
  platform-adapter   worker  content.platform_versions for the task's platform
  sensitive-filter   middleware  control.sensitive_filter: the built-in filter as a role
  strategy-skill     skill   analysis-skill, as seed 001's adaptive example names it
  narrative-skill    skill   narrative-builder, as seed 001's adaptive example names it

Stdin is the step's context (`slice`, `step_id`, `round`, `candidate`,
`candidates`, `platform`, `feedback`, ...); stdout is one JSON object,
`{"output": VALUE, "score": N}` (`score` only where a selector or the quality
gate reads one). No network, no keys, no randomness, no clock: the output is a
pure function of stdin, so a blueprint resumed after a crash writes the same
board. On a retry, `feedback` is heeded: the words a sensitive-word refusal
quotes are left out, and after a platform_compliance refusal the text is shorter.

Misbehaviour switches for tests, read from the environment only and off unless
set. Each takes a comma-separated list; a COMPONENT is one of the names above,
a CANDIDATE is a number (the `candidate` of a competing step) or `*` (any run):

  WRITING_FAIL=COMPONENT[:N]          exit 1; with `:N` on the component's first N
                                      runs only, counted in
                                      $CLAWBOARD_ROOT/.writing-fail-count/COMPONENT
                                      (the current directory without CLAWBOARD_ROOT),
                                      over every task and candidate under that root
  WRITING_SLEEP=COMPONENT:CANDIDATE:SECONDS
                                      sleep that long before answering (a timeout)
  WRITING_GARBAGE=COMPONENT:CANDIDATE print text that is not JSON, exit 0
  WRITING_SENSITIVE=COMPONENT[:always]
                                      put 国家级 (a word with no replacement) in the
                                      output; a retry whose feedback names it leaves
                                      it out again (the seed's self-healing retry),
                                      unless `:always` (then the step falls back)
  WRITING_ESCALATE=COMPONENT          raise an escalation that needs a human's
                                      approval (`escalations` in the output)
"""
import fcntl
import json
import os
import re
import sys
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MIDDLEWARE_TOML = REPO / "config" / "blueprints" / "middleware.toml"

# The sensitive-filter role's words when config/blueprints/middleware.toml is
# absent; a word without a replacement (国家级) fails the check.
DEFAULT_WORDS = ["最好", "最佳", "第一", "国家级", "绝对", "顶级"]
DEFAULT_REPLACEMENTS = {"最好": "很好", "最佳": "很棒", "第一": "领先", "绝对": "非常", "顶级": "高端"}
UNFIXABLE = "国家级"

# Title limits per platform (characters), for the titles made here; the
# platform_compliance middleware enforces its own.
TITLE_MAX = {"xiaohongshu": 20, "wechat": 64, "twitter": 100, "general": 30}
TWEET_MAX = 140
PLATFORMS = ("xiaohongshu", "wechat", "twitter", "general")

EMOJI = re.compile("[\U0001F300-\U0001FAFF\u2600-\u27BF\u2B50\u2B55]")
HOOK_WORDS = ("姐妹", "亲测", "干货", "收藏", "建议", "秘诀", "避坑", "必看")


# --- what the topic is about: a few fixed tables, so the text reads sensibly ---

DOMAINS = [
    (("护肤", "皮肤", "保湿", "面霜", "防晒"), {
        "tips": [
            ("温和清洁", "洗脸水温接近体温，选氨基酸类洁面，早晚各一次就够。"),
            ("加强保湿", "洗完脸三分钟内涂保湿产品，干燥的地方再叠一层面霜。"),
            ("修护屏障", "换季时少去角质、少刷酸，给皮肤留出自我修复的时间。"),
        ],
        "extra": ("坚持防晒", "秋冬紫外线依然存在，出门前涂防晒，阴天也别偷懒。"),
        "keywords": ["保湿", "修护", "换季", "屏障"],
        "emoji": ["💧", "🧴", "🌿", "🌞"],
        "audience": "换季时皮肤干燥、容易泛红的年轻人",
    }),
    (("健身", "减脂", "运动", "跑步", "瘦身"), {
        "tips": [
            ("循序渐进", "从每周三次、每次三十分钟开始，身体适应了再加量。"),
            ("动作标准", "先用轻重量练好动作，再追求次数和重量。"),
            ("吃够蛋白", "每餐有一掌心的蛋白质，少喝含糖饮料。"),
        ],
        "extra": ("睡足恢复", "每晚睡够七小时，肌肉在休息时才会长。"),
        "keywords": ["训练", "饮食", "恢复", "坚持"],
        "emoji": ["💪", "🏃", "🥗", "😴"],
        "audience": "想开始运动却总是坚持不下去的上班族",
    }),
    (("AI", "工具", "效率", "软件"), {
        "tips": [
            ("明确需求", "先写下要解决的一件事，再去挑工具，别被功能清单带着走。"),
            ("小步试用", "用一个真实任务试一周，记下省了多少时间。"),
            ("建立流程", "把好用的提示词和步骤存成模板，下次直接套用。"),
        ],
        "extra": ("定期复盘", "每月检查一次，用不上的工具就果断放下。"),
        "keywords": ["效率", "工具", "流程", "模板"],
        "emoji": ["🤖", "⚡", "📋", "🔁"],
        "audience": "想用新工具提升效率的职场人",
    }),
    (("理财", "投资", "基金", "存钱", "省钱"), {
        "tips": [
            ("先记账", "连续记一个月账，弄清钱都花在了哪里。"),
            ("留备用金", "先存下三到六个月的生活费，再考虑投资。"),
            ("分散配置", "不把钱放在一个篮子里，按风险承受力分配。"),
        ],
        "extra": ("长期坚持", "定投贵在坚持，别因为短期涨跌频繁操作。"),
        "keywords": ["记账", "储蓄", "配置", "长期"],
        "emoji": ["💰", "📒", "🧺", "📈"],
        "audience": "刚开始打理自己收入的年轻人",
    }),
]
GENERIC = {
    "tips": [
        ("先定目标", "把想达到的效果写成一句话，越具体越好。"),
        ("拆成小步", "把目标拆成每天十五分钟能完成的小事。"),
        ("每天记录", "用一句话记下今天做了什么、感觉怎样。"),
    ],
    "extra": ("每周复盘", "周末回看记录，留下有效的，换掉没用的。"),
    "keywords": ["方法", "习惯", "经验", "复盘"],
    "emoji": ["✨", "📝", "🎯", "🔁"],
    "audience": "想把这件事做好却不知从何下手的人",
}


def domain(topic):
    for words, d in DOMAINS:
        if any(w in topic for w in words):
            return d
    return GENERIC


# --- reading the context ---

def text(v):
    """A value as text: strings as they are, lists joined, objects by their content."""
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, list):
        return "\n".join(text(x) for x in v)
    if isinstance(v, dict):
        for k in ("content", "selected", "title", "primary"):
            if isinstance(v.get(k), str):
                return v[k]
        return ""
    return str(v)


def first(s, *keys):
    """The first of `keys` in the slice (or its meta_zone, for scope `all`) with a value."""
    meta = s.get("meta_zone") if isinstance(s.get("meta_zone"), dict) else {}
    for k in keys:
        for src in (s, meta):
            v = src.get(k)
            if v not in (None, "", [], {}):
                return v
    return None


def topic_of(s):
    """The topic; a template's `topic` is meta.intent, which may be a sentence
    (seed 003's "写一篇关于AI的小红书"): then what it is about."""
    t = text(first(s, "topic", "intent")) or text(first(s, "title", "selected")) or "这个话题"
    m = re.search(r"关于(.+?)的", t)
    return m.group(1) if m else t


def title_of(s):
    v = first(s, "title", "selected")
    if v is None and isinstance(s.get("hook"), dict):
        v = s["hook"].get("selected") or s["hook"].get("title")
    return text(v)


def body_of(s):
    v = first(s, "body", "content")
    if isinstance(v, dict):
        v = v.get("content")
    if v is None and s.get("thread"):
        v = s["thread"]
    return text(v)


def platform_of(s, ctx):
    p = text(first(s, "platform")) or text(ctx.get("platform"))
    return p if p in PLATFORMS else "general"


def constraints_of(s):
    c = first(s, "constraints")
    return c if isinstance(c, dict) else {}


def must_include(s):
    words = first(s, "must_include") or constraints_of(s).get("must_include") or []
    return [w for w in words if isinstance(w, str) and w]


def word_limit(s):
    v = first(s, "word_limit")
    if v is None:
        v = (constraints_of(s).get("word_count") or {}).get("max")
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def keywords_of(s, topic):
    kw = first(s, "keywords")
    if isinstance(kw, list) and kw:
        return [k for k in kw if isinstance(k, str)]
    for key in ("trends", "analysis"):
        v = first(s, key)
        if isinstance(v, dict) and isinstance(v.get("keywords"), list) and v["keywords"]:
            return [k for k in v["keywords"] if isinstance(k, str)]
    return domain(topic)["keywords"]


def shorter(ctx):
    """True when an earlier attempt was refused as too long (platform_compliance)."""
    return any(re.search(r"compliance|max_chars|thread_max|too long|\bover\b|\ballows \d+", str(f)) for f in ctx.get("feedback") or [])


def fit(topic, suffix, limit):
    """`topic + suffix` within `limit` characters, cutting the topic."""
    room = max(2, limit - len(suffix))
    return topic[:room] + suffix


# --- the components ---

def content_curator(ctx, s):
    topic = topic_of(s)
    d = domain(topic)
    intent = text(first(s, "intent")) or topic
    ref = text(first(s, "reference_summary"))
    parts = [f"主题：{topic}", f"意图：{intent}", f"受众：{d['audience']}",
             "要点：" + "、".join(name for name, _ in d["tips"] + [d["extra"]])]
    if ref:
        parts.append("参考：" + (ref if len(ref) <= 120 else ref[:120] + "…"))
    return {"output": "；".join(parts)}


def trend_tracker(ctx, s):
    topic = topic_of(s)
    kw = domain(topic)["keywords"]
    return {"output": {
        "platform": platform_of(s, ctx),
        "keywords": [topic] + kw,
        "angles": [f"{topic}的常见误区", f"{topic}的{kw[0]}方法", f"新手也能做到的{topic}"],
        "hashtags": [topic, f"{topic}攻略"] + kw[:2],
    }}


def title_candidates(topic, platform):
    limit = TITLE_MAX.get(platform, 30)
    return [
        {"type": "question", "content": fit(topic, "怎么做才不踩坑？", limit), "score": 72},
        {"type": "superlative", "content": fit(topic, "最好的三个习惯", limit), "score": 88},
        {"type": "list", "content": fit(topic, "的3个实用技巧", limit), "score": 80},
    ]


def best_of(variants):
    """The highest score, the first on a tie (the max_score selector)."""
    best = variants[0]
    for v in variants[1:]:
        if v["score"] > best["score"]:
            best = v
    return best


def compete_or_hook(ctx, cands, extra=None):
    """A competing candidate's `{type, content}`, or, not competing, the whole hook."""
    c = ctx.get("candidate")
    if isinstance(c, int) and c >= 1:
        pick = cands[(c - 1) % len(cands)]
        return {"output": {"type": pick["type"], "content": pick["content"]}, "score": pick["score"]}
    best = best_of(cands)
    hook = {"title": best["content"], "selected": best["content"], "variants": cands}
    hook.update(extra or {})
    return {"output": hook, "score": best["score"]}


def title_worker(ctx, s):
    return compete_or_hook(ctx, title_candidates(topic_of(s), platform_of(s, ctx)))


def hook_generator(ctx, s):
    topic = topic_of(s)
    limit = TITLE_MAX.get(platform_of(s, ctx), 30)
    kw = [k for k in keywords_of(s, topic) if k != topic] or [topic]
    d = domain(topic)
    cands = [
        {"type": "insight", "content": fit(topic, f"：把{kw[0]}这件事讲清楚", limit), "score": 84},
        {"type": "question", "content": fit(topic, "，你真的做对了吗？", limit), "score": 78},
        {"type": "guide", "content": fit(topic, "：从入门到进阶的完整指南", limit), "score": 81},
    ]
    opening = (f"这两年，越来越多人开始关注{topic}。可真正做起来，很多人在{kw[0]}上走了弯路。"
               f"这篇文章写给{d['audience']}，讲清楚该做什么、为什么这样做。")
    return compete_or_hook(ctx, cands, {"opening": opening})


def body_object(paragraphs, sections, key_points, quotes, must):
    content = "\n\n".join(paragraphs)
    missing = [w for w in must if w not in content]
    if missing:
        content += "\n\n关键词：" + "、".join(missing)
    return {"content": content, "sections": sections, "key_points": key_points, "quotes": quotes}


def thread_body(s, must):
    """body-worker on a thread (twitter_thread): the tweets, one section each."""
    tweets = [text(t) for t in first(s, "thread")]
    n = len(tweets)
    return body_object(tweets, [{"title": f"{i + 1}/{n}", "content": t} for i, t in enumerate(tweets)],
                       [t.split("：")[0] for t in tweets[1:-1] if "：" in t], [], must)


def body_worker(ctx, s):
    topic = topic_of(s)
    title = title_of(s) or topic
    must = must_include(s)
    if isinstance(first(s, "thread"), list):
        return {"output": thread_body(s, must)}
    d = domain(topic)
    emo = d["emoji"]
    limit = word_limit(s)
    improved = int(ctx.get("round") or 1) >= 2
    extra_name, extra_desc = d["extra"]
    # Longest first; the reminder, then the last habits, give way to a word limit.
    variants = ((d["tips"], True), (d["tips"], False), (d["tips"][:2], False))
    for tips, extra in variants[-1:] if shorter(ctx) else variants:
        if improved:
            paras = [f"姐妹们！{topic}你真的做对了吗？{emo[0]}", "亲测有效的干货来了，建议先收藏再看！"]
            for i, (name, desc) in enumerate(tips):
                ask = "你做到了吗？" if i % 2 == 0 else ""
                paras.append(f"{emo[i % len(emo)]} {name}：{desc}{ask}")
            if extra:
                paras.append(f"{emo[3 % len(emo)]} 另外别忘了{extra_name}：{extra_desc}")
            paras.append(f"你还有哪些{topic}的小秘诀？评论区告诉我吧！💬")
        else:
            paras = [title, f"{topic}是很多人关心的话题，养成下面几个习惯，效果会稳定很多。"]
            for i, (name, desc) in enumerate(tips):
                paras.append(f"{i + 1}. {name}：{desc}")
            if extra:
                paras.append(f"另外，{extra_name}也很重要：{extra_desc}")
            paras.append("以上是我的一些经验，供大家参考。")
        body = body_object(paras, [{"title": n, "content": c} for n, c in tips], [n for n, _ in tips],
                           [f"{tips[0][0]}，是{topic}的基础。"], must)
        if limit is None or len(body["content"]) <= limit:
            break
    return {"output": body}


# Why a habit slips, and what helps: one per section of a long body, in turn.
ELABORATIONS = [
    "很多人知道这一点，却在执行时打了折扣：三天打鱼两天晒网，效果自然看不出来。",
    "难的不是知道，而是每天都做到。把它放进固定的时间点，比靠意志力可靠得多。",
    "一开始不必追求完美，先做到七八成，习惯稳定了再慢慢调整细节。",
    "可以用一张简单的表记录两周，变化往往比想象中来得早。",
]


def narrative_builder(ctx, s):
    topic = topic_of(s)
    title = title_of(s) or topic
    d = domain(topic)
    kw = [k for k in keywords_of(s, topic) if k != topic] or [topic]
    must = must_include(s)
    limit = word_limit(s)
    improved = int(ctx.get("round") or 1) >= 2
    analysis = first(s, "analysis")
    if analysis is None and isinstance(first(s, "outline"), list):
        analysis = {"outline": first(s, "outline")}  # scope content.analysis.outline
    points = d["tips"] + [d["extra"]]
    if isinstance(analysis, dict) and isinstance(analysis.get("outline"), list):
        outline = [(text(o.get("title")), text(o.get("point"))) for o in analysis["outline"] if isinstance(o, dict)]
        points = [p for p in outline if p[0]] or points
    short = platform_of(s, ctx) == "xiaohongshu"
    opening = text(first(s, "opening")) or f"{topic}看起来简单，做好却不容易。"
    # Longest first, shorter while over a word limit.
    variants = ((not short, len(points)), (False, len(points)), (False, 3))
    for elaborate, n in variants[-1:] if shorter(ctx) else variants:
        sections = []
        if not short:
            sections.append({"title": f"为什么要关注{topic}",
                             "content": f"{opening}围绕{'、'.join(kw[:3])}，下面分几部分展开。"})
        for i, (name, desc) in enumerate(points[:n]):
            body = desc + (ELABORATIONS[i % len(ELABORATIONS)] if elaborate else "")
            if improved:
                mark = d["emoji"][i % len(d["emoji"])]
                body = f"{mark} {body}你做到了吗？" if i % 2 == 0 else f"{mark} {body}"
            sections.append({"title": name, "content": body})
        if not short:
            sections.append({"title": "常见误区",
                             "content": f"做{topic}时，贪多求快是常见问题。一次只改一个习惯，效果更容易看清。"})
        closing = (f"你在{topic}上踩过哪些坑？欢迎在评论区分享你的经验！干货建议收藏！💬" if improved
                   else f"{topic}没有捷径，把基础做好，时间会给出答案。")
        sections.append({"title": "总结", "content": closing})
        head = f"{title}\n\n朋友们！这篇是亲测有效的{topic}干货，你准备好了吗？✨" if improved else title
        paras = [head] + [f"{sec['title']}\n{sec['content']}" for sec in sections]
        body = body_object(paras, sections, [name for name, _ in points[:n]],
                           [f"{points[0][0]}，是{topic}的基础。"], must)
        # What a reader skimming the whole body would judge it by, for steps that
        # need no more (the long-form blueprints' scorer): its opening and closing
        # paragraphs, each section's first and last words, its length and its
        # paragraph count.
        skim = [c["content"] if len(c["content"]) <= 16 else f"{c['content'][:8]}…{c['content'][-8:]}"
                for c in sections[:-1]]
        body["digest"] = {"lede": head, "skim": skim, "closing": closing,
                          "word_count": len(re.sub(r"\s", "", body["content"])),
                          "paragraphs": body["content"].count("\n\n") + 1}
        if limit is None or len(body["content"]) <= limit:
            break
    return {"output": body}


def thread_worker(ctx, s):
    topic = topic_of(s)
    title = title_of(s) or topic
    d = domain(topic)
    points = d["tips"] if shorter(ctx) else d["tips"] + [d["extra"]]
    n = len(points) + 2
    emo = d["emoji"]
    tweets = [f"{title}｜你做对了吗？一条串讲清楚 🧵 (1/{n})"]
    for i, (name, desc) in enumerate(points):
        tweets.append(f"{emo[i % len(emo)]} {name}：{desc} ({i + 2}/{n})")
    tweets.append(f"{topic}没有捷径，把这几件事坚持下来就好。你准备先从哪一条开始？觉得有用就转发给朋友吧！({n}/{n})")
    return {"output": [t if len(t) <= TWEET_MAX else t[:TWEET_MAX - 1] + "…" for t in tweets]}


def analysis_skill(ctx, s):
    topic = topic_of(s)
    d = domain(topic)
    ref = text(first(s, "reference_summary"))
    points = d["tips"] + [d["extra"]]
    out = {
        "topic": topic,
        "intent": text(first(s, "intent")) or topic,
        "audience": d["audience"],
        "angles": [f"{topic}的现状", f"{topic}的关键因素", f"{topic}的实践路径"],
        "outline": [{"title": name, "point": desc} for name, desc in points],
        "key_points": [name for name, _ in points],
        "keywords": keywords_of(s, topic),
    }
    if ref:
        out["reference"] = ref if len(ref) <= 200 else ref[:200] + "…"
    return {"output": out}


def count(t, chars):
    return sum(t.count(c) for c in chars)


def scores(title, body, platform, n=None, paragraphs=None):
    """The four quality scores, from the text alone (`n` non-space characters
    and `paragraphs` when `body` is a digest of a longer text)."""
    e = len(EMOJI.findall(body))
    q = count(body, "？?")
    x = count(body, "！!")
    you = body.count("你")
    k = sum(1 for w in HOOK_WORDS if w in body)
    hook = 55
    hook += 10 if re.search(r"[0-9一二三四五六七八九十两]", title) else 0
    hook += 10 if count(title, "？?") else 0
    hook += 8 if re.search("技巧|习惯|方法|攻略|指南|秘诀|清单", title) else 0
    hook += 5 if EMOJI.search(title) else 0
    emotion = 59 + 2 * min(e, 8) + 2 * min(q, 4) + min(x, 5) + min(you, 6) + min(k, 5)
    n = len(re.sub(r"\s", "", body)) if n is None else n
    breaks = body.count("\n\n") if paragraphs is None else max(0, paragraphs - 1)
    if platform == "xiaohongshu":
        fit_ = 70 + (10 if 150 <= n <= 1000 else 0) + 2 * min(e, 5)
    elif platform == "wechat":
        fit_ = 70 + (10 if n >= 600 else 0) + 2 * min(breaks, 5)
    elif platform == "twitter":
        fit_ = 70 + (10 if n <= 1400 else 0) + 2 * min(e, 5)
    else:
        fit_ = 75 + (5 if n >= 200 else 0)
    hook, emotion, fit_ = (min(95, v) for v in (hook, emotion, fit_))
    virality = round(0.35 * hook + 0.45 * emotion + 0.20 * fit_)
    return {"virality": virality, "hook_strength": hook, "emotional_resonance": emotion, "platform_fit": fit_}


def virality_scorer(ctx, s):
    digest = first(s, "digest")
    if isinstance(digest, dict) and not body_of(s):
        # A long body's digest (narrative-builder): its opening and closing, length and paragraphs.
        text_ = "\n\n".join([text(digest.get("lede")), text(digest.get("skim")), text(digest.get("closing"))])
        q = scores(title_of(s), text_, platform_of(s, ctx), n=digest.get("word_count") or 0,
                   paragraphs=digest.get("paragraphs") or 1)
        return {"output": q, "score": q["virality"]}
    q = scores(title_of(s), body_of(s), platform_of(s, ctx))
    return {"output": q, "score": q["virality"]}


CTA = {
    "xiaohongshu": ("觉得有用就收藏起来，下次{t}照着做～", "评论区说说你的经验，一起交流", "save"),
    "wechat": ("觉得有启发，就转发给需要的朋友吧", "关注我们，获取更多{t}的深度内容", "share"),
    "twitter": ("关注我，持续分享{t}的实用经验", "觉得有用就转发给朋友", "follow"),
    "general": ("你怎么看{t}？欢迎留言讨论", "关注获取后续更新", "comment"),
}


def cta_worker(ctx, s):
    topic = topic_of(s)
    primary, secondary, kind = CTA[platform_of(s, ctx)]
    return {"output": {"primary": primary.format(t=topic), "secondary": secondary.format(t=topic), "type": kind}}


def hashtag_worker(ctx, s):
    topic = topic_of(s)
    platform = platform_of(s, ctx)
    tags = [topic, f"{topic}攻略"] + [k for k in keywords_of(s, topic) if k != topic]
    seen = []
    for t in tags:
        t = re.sub(r"[\s#]", "", t)
        if t and t not in seen:
            seen.append(t)
    return {"output": seen[: 3 if platform == "twitter" else 5]}


def emoji_density(body):
    n = max(1, len(body))
    e = len(EMOJI.findall(body))
    return "high" if e * 40 >= n else "medium" if e * 150 >= n else "low"


def platform_adapter(ctx, s):
    # Run once per target platform, each run told its own in the context.
    platform = ctx.get("platform") if ctx.get("platform") in PLATFORMS else platform_of(s, ctx)
    topic = topic_of(s)
    title = title_of(s) or topic
    limit = TITLE_MAX.get(platform, 30)
    title = title if len(title) <= limit else title[:limit]
    thread = first(s, "thread")
    body = "\n\n".join(text(t) for t in thread) if isinstance(thread, list) and thread else body_of(s)
    cta = text(first(s, "primary", "cta"))
    tags = first(s, "hashtags")
    tags = [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else hashtag_worker(ctx, s)["output"]
    if platform == "twitter":
        # A thread, tweet by tweet (platform compliance weighs each as Twitter
        # does, against 280): the thread's tweets (or the body cut into tweets),
        # then the CTA and the hashtags as the last tweet.
        tweets = [text(t) for t in thread] if isinstance(thread, list) and thread else chunks(body, 270)
        last = " ".join(p for p in [cta, " ".join("#" + t for t in tags)] if p)
        if last:
            tweets.append(cut(last, 280))
        full = "\n\n".join(tweets)
        return {"output": {platform: {
            "title": title,
            "body": full,
            "thread": tweets,
            "hashtags": tags,
            "word_count": len(re.sub(r"\s", "", full)),
            "emoji_density": emoji_density(full),
        }}}
    parts = [body]
    if cta:
        parts.append(cta)
    if tags and platform == "xiaohongshu":
        parts.append(" ".join("#" + t for t in tags))
    full = "\n\n".join(p for p in parts if p)
    return {"output": {platform: {
        "title": title,
        "body": full,
        "hashtags": tags,
        "word_count": len(re.sub(r"\s", "", full)),
        "emoji_density": emoji_density(full),
    }}}


def weight(text):
    """A tweet's length as Twitter counts it (twitter-text v3, as platform
    compliance does): 1 for U+0000-U+10FF and a few punctuation ranges, 2 for
    any other character (Chinese, emoji). An emoji of several code points is
    over-counted here, which only makes a tweet shorter."""
    light = lambda c: ord(c) <= 0x10FF or 0x2000 <= ord(c) <= 0x200D or 0x2010 <= ord(c) <= 0x201F or 0x2032 <= ord(c) <= 0x2037
    return sum(1 if light(c) else 2 for c in str(text))


def cut(text, size):
    """The longest start of `text` weighing at most `size`."""
    out, n = "", 0
    for c in str(text):
        n += weight(c)
        if n > size:
            break
        out += c
    return out


def chunks(body, size):
    """`body` as tweets weighing at most `size` (see `weight`), cut at paragraph
    breaks where possible."""
    out, cur = [], ""
    for para in [p for p in str(body).split("\n\n") if p]:
        while weight(para) > size:
            if cur:
                out.append(cur)
                cur = ""
            head = cut(para, size)
            out.append(head)
            para = para[len(head):]
        if cur and weight(cur) + 2 + weight(para) > size:
            out.append(cur)
            cur = para
        else:
            cur = f"{cur}\n\n{para}" if cur else para
    if cur:
        out.append(cur)
    return out


def filter_config(platform):
    """The words for `platform` and their replacements: middleware.toml's, else the defaults."""
    if not MIDDLEWARE_TOML.exists():
        return DEFAULT_WORDS, dict(DEFAULT_REPLACEMENTS)
    with open(MIDDLEWARE_TOML, "rb") as f:
        doc = tomllib.load(f)
    doc = doc.get("blueprints", doc)
    lists = doc.get("sensitive_words") or {}
    words = []
    for key in ("all", platform):
        for w in lists.get(key) or []:
            if w not in words:
                words.append(w)
    reps = {k: v for k, v in (doc.get("replacements") or {}).items() if isinstance(v, str)}
    return words, reps


def longest_first(words):
    return sorted(words, key=lambda w: -len(w))


def sensitive_filter(ctx, s):
    """The built-in sensitive-word filter as a role ([blueprints]
    sensitive_filter_role): every string of every slice value but `platform` is
    checked; a word with a replacement is replaced, one without fails the check.
    Prints {"output": {"passed", "findings", "fixes_applied", "fixed": {key: value}}}."""
    platform = platform_of(s, ctx)
    if isinstance(ctx.get("sensitive_words"), list):
        # The daemon hands over the words in force (its config's [blueprints]).
        words = [w for w in ctx["sensitive_words"] if isinstance(w, str)]
        reps = {k: v for k, v in (ctx.get("replacements") or {}).items() if isinstance(v, str)}
    else:
        words, reps = filter_config(platform)
    findings, fixes, fixed, passed = [], [], {}, True

    def clean(path, value):
        nonlocal passed
        if isinstance(value, list):
            return [clean(f"{path}.{i}", v) for i, v in enumerate(value)]
        if isinstance(value, dict):
            return {k: clean(f"{path}.{k}", v) for k, v in value.items()}
        if not isinstance(value, str):
            return value
        for w in longest_first(words):
            if w in value:
                rep = reps.get(w)
                findings.append({"path": path, "word": w, "replacement": rep, "fixed": rep is not None})
                if rep is None:
                    passed = False
                else:
                    value = value.replace(w, rep)
                    fixes.append(f'sensitive word "{w}" replaced by "{rep}" in {path}')
        return value

    for key, value in s.items():
        if key != "platform":
            fixed[key] = clean(key, value)
    return {"output": {"passed": passed, "findings": findings, "fixes_applied": fixes, "fixed": fixed}}


COMPONENTS = {
    "content-curator": content_curator,
    "trend-tracker": trend_tracker,
    "title-worker": title_worker,
    "hook-generator": hook_generator,
    "body-worker": body_worker,
    "narrative-builder": narrative_builder,
    "thread-worker": thread_worker,
    "analysis-skill": analysis_skill,
    "virality-scorer": virality_scorer,
    "cta-worker": cta_worker,
    "hashtag-worker": hashtag_worker,
    "platform-adapter": platform_adapter,
    "sensitive-filter": sensitive_filter,
    # Seed 001's own examples (config/blueprints/examples/) name these two.
    "strategy-skill": analysis_skill,
    "narrative-skill": narrative_builder,
}


# --- feedback and the misbehaviour switches ---

def flagged(ctx):
    """Words an earlier attempt was refused for: `sensitive word "国家级" in
    content.body.content (no replacement configured)` names 国家级."""
    out = []
    for f in ctx.get("feedback") or []:
        for w in re.findall(r'sensitive word "([^"]+)"', str(f)):
            if w not in out:
                out.append(w)
    return out


def scrub(v, words):
    """`v` with `words` left out of every string (their default replacement if any)."""
    if isinstance(v, str):
        for w in words:
            v = v.replace(w, DEFAULT_REPLACEMENTS.get(w, ""))
        return v
    if isinstance(v, list):
        return [scrub(x, words) for x in v]
    if isinstance(v, dict):
        return {k: scrub(x, words) for k, x in v.items()}
    return v


def inject(v, word):
    """`v` with `word` in its main text (numbers only: unchanged)."""
    if isinstance(v, str):
        return word + v
    if isinstance(v, list):
        return [word] if not v else [inject(v[0], word)] + v[1:]
    if isinstance(v, dict):
        v = dict(v)
        for k in ("content", "selected", "title", "primary"):
            if isinstance(v.get(k), str):
                v[k] = word + v[k]
                if k == "selected" and isinstance(v.get("title"), str):
                    v["title"] = word + v["title"]
                return v
        for k in sorted(v):
            if isinstance(v[k], (str, list, dict)) and inject(v[k], word) != v[k]:
                v[k] = inject(v[k], word)
                return v
    return v


def switches(name):
    return [x.strip() for x in os.environ.get(name, "").split(",") if x.strip()]


def matches(cand, ctx):
    return cand == "*" or str(ctx.get("candidate")) == cand


def fail_now(component):
    """WRITING_FAIL: true when this run should fail (counting runs when limited)."""
    for sw in switches("WRITING_FAIL"):
        comp, _, n = sw.partition(":")
        if comp != component:
            continue
        if not n:
            return True
        d = Path(os.environ.get("CLAWBOARD_ROOT") or ".") / ".writing-fail-count"
        d.mkdir(parents=True, exist_ok=True)
        with open(d / component, "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            runs = int(f.read().strip() or 0) + 1
            f.seek(0)
            f.truncate()
            f.write(str(runs))
        return runs <= int(n)
    return False


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in COMPONENTS:
        sys.stderr.write(f"usage: writing.py COMPONENT (one of {', '.join(COMPONENTS)})\n")
        return 2
    component = sys.argv[1]
    ctx = json.load(sys.stdin)
    if fail_now(component):
        sys.stderr.write(f"{component}: failing as WRITING_FAIL asks\n")
        return 1
    for sw in switches("WRITING_SLEEP"):
        comp, cand, secs = (sw.split(":") + ["", ""])[:3]
        if comp == component and matches(cand, ctx):
            time.sleep(float(secs or 0))
    for sw in switches("WRITING_GARBAGE"):
        comp, _, cand = sw.partition(":")
        if comp == component and matches(cand or "*", ctx):
            sys.stdout.write(f"{component} says: this is not JSON {{\n")
            return 0
    s = ctx.get("slice")
    s = s if isinstance(s, dict) else {}
    doc = COMPONENTS[component](ctx, s)
    words = flagged(ctx)
    if words:
        doc["output"] = scrub(doc["output"], words)
    for sw in switches("WRITING_SENSITIVE"):
        comp, _, mode = sw.partition(":")
        if comp == component and (mode == "always" or UNFIXABLE not in words):
            doc["output"] = inject(doc["output"], UNFIXABLE)
    if component in switches("WRITING_ESCALATE"):
        doc["escalations"] = [{"level": "critical", "issue": f"{component}: may this go out?",
                               "requiresHumanApproval": True}]
    sys.stdout.write(json.dumps(doc, ensure_ascii=False, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
