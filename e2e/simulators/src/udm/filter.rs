//! LDAP search filters (RFC 4515) as the UDM REST API accepts them in `filter=`: `(&…)`,
//! `(|…)`, `(!…)`, `(name=value)` with `*` wildcards and `\XX` escapes, `(name=*)`, `>=`, `<=`
//! and `~=`. Names are UDM property names (case-sensitive) or, failing that, a few LDAP
//! attribute names the module maps (case-insensitive); values compare case-insensitively, as
//! the directory's `caseIgnoreMatch` attributes do.

use serde_json::Value;

/// A parsed filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filter {
    /// Every sub-filter matches.
    And(Vec<Filter>),
    /// At least one sub-filter matches.
    Or(Vec<Filter>),
    /// The sub-filter does not match.
    Not(Box<Filter>),
    /// The attribute has a value.
    Present(String),
    /// The attribute has a value matching the pattern (literal pieces between `*`s).
    Equal {
        /// The attribute or property name.
        name: String,
        /// The pattern split at unescaped `*`: one piece means an exact match.
        pieces: Vec<String>,
    },
    /// The attribute has a value `>=` (`greater`) or `<=` the given one.
    Order {
        /// The attribute or property name.
        name: String,
        /// The value compared against.
        value: String,
        /// `>=` when true, `<=` when false.
        greater: bool,
    },
}

/// Why a filter cannot be parsed; the text the real server answers (`query.filter`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError(pub String);

impl Filter {
    /// Parses a filter; a bare `name=value` without parentheses is accepted as the real server
    /// does.
    pub fn parse(text: &str) -> Result<Filter, FilterError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(FilterError("Not a valid LDAP search filter: empty".into()));
        }
        let owned;
        let text = if text.starts_with('(') {
            text
        } else {
            owned = format!("({text})");
            owned.as_str()
        };
        let mut parser = Parser {
            chars: text.chars().collect(),
            pos: 0,
        };
        let filter = parser.filter()?;
        if parser.pos != parser.chars.len() {
            return Err(parser.error("trailing characters"));
        }
        Ok(filter)
    }

    /// Whether an object matches: `values(name)` answers the object's values of an attribute
    /// (empty when it has none or the name is unknown).
    pub fn matches(&self, values: &dyn Fn(&str) -> Vec<String>) -> bool {
        match self {
            Filter::And(items) => items.iter().all(|f| f.matches(values)),
            Filter::Or(items) => items.iter().any(|f| f.matches(values)),
            Filter::Not(inner) => !inner.matches(values),
            Filter::Present(name) => !values(name).is_empty(),
            Filter::Equal { name, pieces } => values(name)
                .iter()
                .any(|v| wildcard_match(&v.to_lowercase(), pieces)),
            Filter::Order {
                name,
                value,
                greater,
            } => values(name).iter().any(|v| {
                let ordering = match (v.parse::<i64>(), value.parse::<i64>()) {
                    (Ok(a), Ok(b)) => a.cmp(&b),
                    _ => v.to_lowercase().cmp(&value.to_lowercase()),
                };
                if *greater {
                    ordering.is_ge()
                } else {
                    ordering.is_le()
                }
            }),
        }
    }
}

/// Matches a lower-cased value against pieces split at `*` (pieces are lower-cased here).
fn wildcard_match(value: &str, pieces: &[String]) -> bool {
    let pieces: Vec<String> = pieces.iter().map(|p| p.to_lowercase()).collect();
    match pieces.as_slice() {
        [] => true,
        [only] => value == only,
        [first, middle @ .., last] => {
            if !value.starts_with(first.as_str()) {
                return false;
            }
            let mut rest = &value[first.len()..];
            for piece in middle {
                match rest.find(piece.as_str()) {
                    Some(at) => rest = &rest[at + piece.len()..],
                    None => return false,
                }
            }
            rest.len() >= last.len() && rest.ends_with(last.as_str())
        }
    }
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
}

impl Parser {
    fn error(&self, what: &str) -> FilterError {
        FilterError(format!(
            "Not a valid LDAP search filter: {what} at position {}",
            self.pos
        ))
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn expect(&mut self, c: char) -> Result<(), FilterError> {
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(&format!("expected {c:?}")))
        }
    }

    fn filter(&mut self) -> Result<Filter, FilterError> {
        self.expect('(')?;
        let filter = match self.peek() {
            Some('&') => {
                self.pos += 1;
                Filter::And(self.list()?)
            }
            Some('|') => {
                self.pos += 1;
                Filter::Or(self.list()?)
            }
            Some('!') => {
                self.pos += 1;
                Filter::Not(Box::new(self.filter()?))
            }
            _ => self.item()?,
        };
        self.expect(')')?;
        Ok(filter)
    }

    fn list(&mut self) -> Result<Vec<Filter>, FilterError> {
        let mut items = Vec::new();
        while self.peek() == Some('(') {
            items.push(self.filter()?);
        }
        if items.is_empty() {
            return Err(self.error("an empty filter list"));
        }
        Ok(items)
    }

    fn item(&mut self) -> Result<Filter, FilterError> {
        let start = self.pos;
        while let Some(c) = self.peek() {
            if c.is_ascii_alphanumeric() || c == '-' || c == ';' || c == '_' || c == '.' {
                self.pos += 1;
            } else {
                break;
            }
        }
        let name: String = self.chars[start..self.pos].iter().collect();
        if name.is_empty() {
            return Err(self.error("an attribute name is missing"));
        }
        let op = match (self.peek(), self.chars.get(self.pos + 1).copied()) {
            (Some('='), _) => {
                self.pos += 1;
                "="
            }
            (Some('>'), Some('=')) => {
                self.pos += 2;
                ">="
            }
            (Some('<'), Some('=')) => {
                self.pos += 2;
                "<="
            }
            (Some('~'), Some('=')) => {
                self.pos += 2;
                "~="
            }
            _ => return Err(self.error("expected a comparison")),
        };
        let pieces = self.value()?;
        if op == ">=" || op == "<=" {
            if pieces.len() != 1 {
                return Err(self.error("a wildcard in an ordering comparison"));
            }
            return Ok(Filter::Order {
                name,
                value: pieces.concat(),
                greater: op == ">=",
            });
        }
        if pieces.len() == 2 && pieces.iter().all(String::is_empty) {
            return Ok(Filter::Present(name));
        }
        Ok(Filter::Equal { name, pieces })
    }

    /// The assertion value up to the closing parenthesis, split at unescaped `*`.
    fn value(&mut self) -> Result<Vec<String>, FilterError> {
        let mut pieces = vec![String::new()];
        let mut bytes: Vec<u8> = Vec::new();
        let flush = |bytes: &mut Vec<u8>, pieces: &mut Vec<String>| {
            if let Some(last) = pieces.last_mut() {
                last.push_str(&String::from_utf8_lossy(bytes));
            }
            bytes.clear();
        };
        loop {
            match self.peek() {
                None => return Err(self.error("an unclosed parenthesis")),
                Some(')') => break,
                Some('(') => return Err(self.error("an unescaped '('")),
                Some('*') => {
                    self.pos += 1;
                    flush(&mut bytes, &mut pieces);
                    pieces.push(String::new());
                }
                Some('\\') => {
                    let hi = self.chars.get(self.pos + 1).and_then(|c| c.to_digit(16));
                    let lo = self.chars.get(self.pos + 2).and_then(|c| c.to_digit(16));
                    match (hi, lo) {
                        (Some(hi), Some(lo)) => {
                            bytes.push((hi * 16 + lo) as u8);
                            self.pos += 3;
                        }
                        _ => return Err(self.error("an invalid escape")),
                    }
                }
                Some(c) => {
                    self.pos += 1;
                    let mut buf = [0u8; 4];
                    bytes.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
            }
        }
        flush(&mut bytes, &mut pieces);
        Ok(pieces)
    }
}

/// The strings a JSON property value matches as: strings as they are, numbers and booleans
/// written out, lists element by element, and pairs (the shared account's `[user, permission]`)
/// as `"<a> with <b>"`, the way they are stored in LDAP.
pub fn value_strings(value: &Value) -> Vec<String> {
    match value {
        Value::Null => Vec::new(),
        Value::String(s) if s.is_empty() => Vec::new(),
        Value::String(s) => vec![s.clone()],
        Value::Number(n) => vec![n.to_string()],
        Value::Bool(b) => vec![if *b { "TRUE" } else { "FALSE" }.to_string()],
        Value::Array(items) => items
            .iter()
            .flat_map(|item| match item {
                Value::Array(pair) => vec![
                    pair.iter()
                        .map(|p| value_strings(p).concat())
                        .collect::<Vec<_>>()
                        .join(" with "),
                ],
                other => value_strings(other),
            })
            .collect(),
        Value::Object(_) => vec![value.to_string()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values_of<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Vec<String> + 'a {
        move |name: &str| {
            pairs
                .iter()
                .filter(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
                .collect()
        }
    }

    fn parse(text: &str) -> Filter {
        Filter::parse(text).unwrap_or(Filter::And(Vec::new()))
    }

    #[test]
    fn simple_and_wildcards() {
        let alice = [("username", "Alice"), ("mailPrimaryAddress", "a@x.org")];
        let v = values_of(&alice);
        assert!(parse("(username=alice)").matches(&v));
        assert!(parse("username=ali*").matches(&v));
        assert!(parse("(username=*lic*)").matches(&v));
        assert!(parse("(username=*e)").matches(&v));
        assert!(!parse("(username=*x*)").matches(&v));
        assert!(parse("(username=*)").matches(&v));
        assert!(!parse("(lastname=*)").matches(&v));
        assert!(parse("(&(username=alice)(mailPrimaryAddress=a@x.org))").matches(&v));
        assert!(parse("(|(username=bob)(mailPrimaryAddress=a@*))").matches(&v));
        assert!(parse("(!(username=bob))").matches(&v));
        assert!(!parse("(&(username=alice)(!(username=al*)))").matches(&v));
    }

    #[test]
    fn escapes_are_literal() {
        let odd = [("name", "a*b(c)\\")];
        let v = values_of(&odd);
        assert!(parse(r"(name=a\2ab\28c\29\5c)").matches(&v));
        assert!(!parse(r"(name=a\2a)").matches(&v));
        assert!(parse("(name=a*)").matches(&v));
    }

    #[test]
    fn ordering_is_numeric_when_it_can_be() {
        let ctx = [("oxContext", "10")];
        let v = values_of(&ctx);
        assert!(parse("(oxContext>=9)").matches(&v));
        assert!(!parse("(oxContext<=9)").matches(&v));
    }

    #[test]
    fn malformed_filters_are_rejected() {
        for bad in [
            "(",
            "(a=b",
            "(&)",
            "(=b)",
            "(a=b)(c=d)",
            r"(a=\zz)",
            "(a~b)",
            "",
        ] {
            assert!(Filter::parse(bad).is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn pairs_match_as_stored_in_ldap() {
        let value = serde_json::json!([["u1", "p1"], ["u2", "p2"]]);
        assert_eq!(value_strings(&value), vec!["u1 with p1", "u2 with p2"]);
        assert_eq!(value_strings(&serde_json::json!(1)), vec!["1"]);
    }
}
