//! Hostile and broken input, through the real binary: each case exits 2 with a
//! message naming the file, the field and the reason, and leaves the tree unchanged.

use clawboard_tests::Tree;
use rstest::rstest;

fn task_with_id(id: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"taskId": id, "type": "coding", "description": "d"})).unwrap()
}

fn deep(n: usize) -> Vec<u8> {
    let mut v = b"{\"type\":\"coding\",\"description\":\"d\",\"x\":".to_vec();
    v.extend(std::iter::repeat_n(b'[', n));
    v.extend(std::iter::repeat_n(b']', n));
    v.push(b'}');
    v
}

fn huge() -> Vec<u8> {
    let mut v = br#"{"type":"coding","description":""#.to_vec();
    v.extend(std::iter::repeat_n(b'x', 20 * 1024 * 1024));
    v.extend(br#""}"#);
    v
}

#[rstest]
#[case::missing_required(br#"{"type":"coding"}"#.to_vec(), "/description: is required but missing")]
#[case::wrong_enum(br#"{"type":"coding","description":"d","priority":"urgent"}"#.to_vec(), r#"/priority: "urgent" is not one of high, normal, low"#)]
#[case::wrong_type(br#"{"type":"coding","description":42}"#.to_vec(), "/description: expected a string, found the number 42")]
#[case::wrong_nested_type(br#"{"type":"coding","description":"d","context":"telegram"}"#.to_vec(), r#"/context: expected an object, found "telegram""#)]
#[case::bad_timestamp(br#"{"type":"coding","description":"d","deadline":"tomorrow"}"#.to_vec(), r#"/deadline: "tomorrow" is not an RFC 3339 timestamp"#)]
#[case::completed_at(br#"{"type":"coding","description":"d","completedAt":"2026-02'26T10:00:00Z"}"#.to_vec(), "/completedAt: is set by clawboard when the task ends; a new task has none")]
#[case::not_new(br#"{"type":"coding","description":"d","status":"completed"}"#.to_vec(), r#"/status: a new task must be "pending""#)]
#[case::trailing_garbage(br#"{"type":"coding","description":"d"} trailing"#.to_vec(), "/: unexpected text after the JSON value at line 1, column 37")]
#[case::bom(b"\xEF\xBB\xBF{\"type\":\"coding\",\"description\":\"d\"}".to_vec(), "/: the file starts with a UTF-8 byte-order mark (BOM)")]
#[case::empty(Vec::new(), "/: the file is empty")]
#[case::whitespace_only(b"  \n".to_vec(), "/: the file is empty")]
#[case::not_an_object(b"[1,2]".to_vec(), "/: expected an object, found an array")]
#[case::truncated(br#"{"type":"coding","desc"#.to_vec(), "/: the JSON ends too early")]
#[case::deep_nesting(deep(100_000), "/: JSON nested deeper than 128 levels")]
#[case::too_large(
    huge(),
    "/: the file is 20.0 MiB (20971554 bytes), over the 16 MiB limit (config limits.max_file_size)"
)]
#[case::id_dotdot(task_with_id(".."), r#"/taskId: id ".." is "..", which names a directory"#)]
#[case::id_slash(task_with_id("a/b"), r#"/taskId: id "a/b" contains a path separator '/'"#)]
#[case::id_backslash(task_with_id("a\\b"), r#"/taskId: id "a\\b" contains a path separator '\\'"#)]
#[case::id_nul(task_with_id("a\0b"), r#"/taskId: id "a\0b" contains a NUL byte"#)]
#[case::id_absolute(task_with_id("/etc/passwd"), r#"/taskId: id "/etc/passwd" contains a path separator '/'"#)]
#[case::id_empty(task_with_id(""), r#"/taskId: id "" is empty"#)]
#[case::id_too_long(task_with_id(&"a".repeat(129)), &format!(r#"/taskId: id "{}"… is 129 bytes long; at most 128 are allowed"#, "a".repeat(57)))]
#[case::id_hidden(task_with_id(".git"), r#"/taskId: id ".git" starts with '.'"#)]
fn refused_with_field_and_reason(#[case] body: Vec<u8>, #[case] want: &str) {
    let t = Tree::init();
    let file = t.scratch("task.json", &body);
    let before = t.snapshot();

    // Submitting it is refused …
    let r = t.run(&["task", "submit", file.to_str().unwrap()]);
    r.expect_code(2);
    let named = format!("{}: {want}", file.display());
    assert!(r.stderr.contains(&named), "submit: want {named:?}\n--- stderr\n{}", r.stderr);
    assert_eq!(t.snapshot(), before, "a refused submit changed the tree");

    // … and so is it on standard input, named <stdin> …
    if body.len() < 1024 * 1024 {
        let r = t.run_with_stdin(&["task", "submit", "-"], &body);
        r.expect_code(2);
        assert!(r.stderr.contains(&format!("<stdin>: {want}")), "stdin: want {want:?}\n{}", r.stderr);
        assert_eq!(t.snapshot(), before);
    }

    // … and validate says the same.
    let r = t.run(&["validate", file.to_str().unwrap()]);
    r.expect_code(2);
    assert!(r.stdout.contains(&named), "validate: want {named:?}\n--- stdout\n{}", r.stdout);
    assert_eq!(t.snapshot(), before);
}

#[test]
fn huge_stdin_is_cut_off_at_the_limit() {
    let t = Tree::init();
    let before = t.snapshot();
    let r = t.run_with_stdin(&["task", "submit", "-"], &huge());
    r.expect_code(2);
    assert!(r.stderr.contains("<stdin>: /: the task is over the 16 MiB limit"), "{}", r.stderr);
    assert_eq!(t.snapshot(), before);
}

#[test]
fn missing_file_is_bad_input() {
    let t = Tree::init();
    let r = t.run(&["task", "submit", "/nonexistent/task.json"]);
    r.expect_code(2);
    assert!(r.stderr.contains("/nonexistent/task.json: not found"), "{}", r.stderr);
}
