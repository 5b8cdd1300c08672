use super::*;

fn props(text: &str) -> Result<Properties, ParseError> {
    parse_properties(text.as_bytes(), Path::new("p"))
}

fn syntax_of(text: &str) -> (usize, SyntaxError) {
    match props(text) {
        Err(ParseError::Syntax { line, reason, .. }) => (line, reason),
        other => panic!("expected a syntax error for {text:?}, got {other:?}"),
    }
}

#[test]
fn keeps_order_and_unknown_keys() {
    let p = props("b 2\na 1\nfuture_key 18446744073709551615\n").unwrap();
    let keys: Vec<_> = p.iter().collect();
    assert_eq!(
        keys,
        vec![("b", 2), ("a", 1), ("future_key", u64::MAX)],
        "file order and u64::MAX kept"
    );
}

#[test]
fn tolerates_crlf_trailing_blanks_and_no_final_newline() {
    let p = props("a 1\r\nb\t2 \nc   3").unwrap();
    assert_eq!(p.get("a"), Some(1));
    assert_eq!(p.get("b"), Some(2));
    assert_eq!(p.get("c"), Some(3));
}

#[test]
fn sibling_map_is_a_list() {
    let p = props("level 1\nsibling_map 1,0,1\n").unwrap();
    assert_eq!(p.list("sibling_map"), Some("1,0,1"));
    assert_eq!(p.get("sibling_map"), None);
    // A list key holds a list even with one element.
    let p = props("sibling_map 1\n").unwrap();
    assert_eq!(p.list("sibling_map"), Some("1"));
    assert_eq!(
        syntax_of("sibling_map x\n").1,
        SyntaxError::NotANumber("x".into())
    );
    assert_eq!(
        syntax_of("sibling_map 1,,0\n").1,
        SyntaxError::NotANumber("1,,0".into())
    );
    // Lists are only accepted for list keys.
    assert_eq!(
        syntax_of("level 1,0\n").1,
        SyntaxError::NotANumber("1,0".into())
    );
}

#[test]
fn malformed_lines_name_the_line() {
    assert_eq!(syntax_of(""), (1, SyntaxError::Empty));
    assert_eq!(syntax_of("a 1\n\nb 2\n"), (2, SyntaxError::BlankLine));
    assert_eq!(syntax_of("a 1\n\n"), (2, SyntaxError::BlankLine));
    assert_eq!(
        syntax_of("a 1\nb\n"),
        (2, SyntaxError::MissingValue("b".into()))
    );
    assert_eq!(syntax_of("a x\n"), (1, SyntaxError::NotANumber("x".into())));
    assert_eq!(
        syntax_of("a -1\n"),
        (1, SyntaxError::NotANumber("-1".into()))
    );
    assert_eq!(
        syntax_of("a 0x10\n"),
        (1, SyntaxError::NotANumber("0x10".into()))
    );
    assert_eq!(
        syntax_of("a 1\nb 18446744073709551616\n"),
        (2, SyntaxError::Overflow("18446744073709551616".into()))
    );
    assert_eq!(
        syntax_of("a 1\na 2\n"),
        (2, SyntaxError::DuplicateKey("a".into()))
    );
    assert_eq!(
        syntax_of("a 1 2\n"),
        (1, SyntaxError::TrailingText("2".into()))
    );
    assert_eq!(syntax_of(" a 1\n"), (1, SyntaxError::BadKey("a".into())));
    assert_eq!(syntax_of("a-b 1\n"), (1, SyntaxError::BadKey("a-b".into())));
    let long = format!("{} 1\n", "k".repeat(65));
    assert!(matches!(syntax_of(&long).1, SyntaxError::BadKey(_)));
    assert_eq!(
        parse_properties(b"a 1\nb \xff\n", Path::new("p"))
            .unwrap_err()
            .to_string(),
        "p:2: not UTF-8 text"
    );
}

#[test]
fn single_value_files() {
    let p = Path::new("gpu_id");
    assert_eq!(parse_u32_file(b"42700", p).unwrap(), 42700);
    assert_eq!(parse_u32_file(b"42700\n", p).unwrap(), 42700);
    assert!(matches!(
        parse_u32_file(b"4294967296\n", p),
        Err(ParseError::Syntax {
            reason: SyntaxError::Overflow(_),
            ..
        })
    ));
    assert!(matches!(
        parse_u32_file(b"\n", p),
        Err(ParseError::Syntax {
            reason: SyntaxError::Empty,
            ..
        })
    ));
    assert!(matches!(
        parse_u64_file(b"1\n2\n", p),
        Err(ParseError::Syntax { line: 2, .. })
    ));
}

#[test]
fn error_messages_name_file_and_line() {
    let err = parse_properties(b"a 1\nb x\n", Path::new("/t/nodes/1/properties")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "/t/nodes/1/properties:2: \"x\" is not an unsigned decimal number"
    );
}
