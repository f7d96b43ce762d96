//! Escaping of values that go into LDAP filters (RFC 4515) and DNs (RFC 4514), so that a name
//! taken from data can never change the filter's or DN's structure.

/// A value for an assertion in a search filter (RFC 4515 section 3): `*`, `(`, `)`, `\` and
/// NUL become `\2a`, `\28`, `\29`, `\5c` and `\00`. Everything else (UTF-8 included) stays.
pub fn filter_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '*' => out.push_str("\\2a"),
            '(' => out.push_str("\\28"),
            ')' => out.push_str("\\29"),
            '\\' => out.push_str("\\5c"),
            '\0' => out.push_str("\\00"),
            c => out.push(c),
        }
    }
    out
}

/// An equality filter `(attr=value)` with the value escaped.
pub fn equality_filter(attr: &str, value: &str) -> String {
    format!("({attr}={})", filter_value(value))
}

/// An attribute value for a DN (RFC 4514 section 2.4): `"`, `+`, `,`, `;`, `<`, `>`, `\` and
/// `=` get a backslash, as do a leading `#` or space and a trailing space; NUL becomes `\00`.
pub fn dn_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        match c {
            '"' | '+' | ',' | ';' | '<' | '>' | '\\' | '=' => {
                out.push('\\');
                out.push(c);
            }
            '#' if i == 0 => out.push_str("\\#"),
            ' ' if i == 0 || i == last => out.push_str("\\ "),
            '\0' => out.push_str("\\00"),
            c => out.push(c),
        }
    }
    out
}

/// The DN `attr=value,parent` with the value escaped (`parent` is a DN already).
pub fn child_dn(attr: &str, value: &str, parent: &str) -> String {
    if parent.is_empty() {
        format!("{attr}={}", dn_value(value))
    } else {
        format!("{attr}={},{parent}", dn_value(value))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn filter_values_cannot_change_the_filter() {
        assert_eq!(filter_value("a*b(c)d\\e\0"), "a\\2ab\\28c\\29d\\5ce\\00");
        assert_eq!(
            equality_filter("uid", "*)(uid=*"),
            "(uid=\\2a\\29\\28uid=\\2a)"
        );
        assert_eq!(filter_value("Jürgen"), "Jürgen");
    }

    #[test]
    fn dn_values_cannot_change_the_dn() {
        assert_eq!(dn_value("Sales, EMEA"), "Sales\\, EMEA");
        assert_eq!(
            dn_value("a+b=c;d<e>f\"g\\h"),
            "a\\+b\\=c\\;d\\<e\\>f\\\"g\\\\h"
        );
        assert_eq!(dn_value("#1"), "\\#1");
        assert_eq!(dn_value("a#1"), "a#1");
        assert_eq!(dn_value(" x "), "\\ x\\ ");
        assert_eq!(dn_value(" "), "\\ ");
        assert_eq!(dn_value("Müller"), "Müller");
        assert_eq!(
            child_dn("cn", "Sales, EMEA", "cn=groups,dc=x"),
            "cn=Sales\\, EMEA,cn=groups,dc=x"
        );
        assert_eq!(child_dn("dc", "x", ""), "dc=x");
    }
}
