//! LDAP search filters for the UDM REST API's `filter=` parameter, built from data with every
//! value escaped (RFC 4515), so a name such as `Sales (EU)*` matches itself and nothing else.
//!
//! The attribute names are UDM property names (`name`, `mailPrimaryAddress`, ...), which the
//! server maps to LDAP attributes. They are `&'static str`: names come from code, values from
//! data.

use std::fmt;

/// A filter, such as `(&(name=Sales \28EU\29)(oxContext=1))`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter(String);

impl Filter {
    /// Every object of the module: `(objectClass=*)`.
    pub fn all() -> Filter {
        Filter("(objectClass=*)".into())
    }

    /// The property equals `value` (the server compares case-insensitively for most
    /// properties); `*` and the other special characters in `value` are literal.
    pub fn eq(property: &'static str, value: &str) -> Filter {
        Filter(format!("({property}={})", escape_value(value)))
    }

    /// The property has a value starting with `prefix` (literal).
    pub fn starts_with(property: &'static str, prefix: &str) -> Filter {
        Filter(format!("({property}={}*)", escape_value(prefix)))
    }

    /// The property has a value ending with `suffix` (literal), such as the shared accounts
    /// linking a permission: `users` values are stored as `<user> with <permission>`.
    pub fn ends_with(property: &'static str, suffix: &str) -> Filter {
        Filter(format!("({property}=*{})", escape_value(suffix)))
    }

    /// The property has any value.
    pub fn present(property: &'static str) -> Filter {
        Filter(format!("({property}=*)"))
    }

    /// Every filter matches; no filter at all matches everything.
    pub fn and(filters: impl IntoIterator<Item = Filter>) -> Filter {
        let filters: Vec<Filter> = filters.into_iter().collect();
        match filters.len() {
            0 => Filter::all(),
            1 => filters.into_iter().next().unwrap_or_else(Filter::all),
            _ => Filter(format!("(&{})", concat(&filters))),
        }
    }

    /// At least one filter matches; no filter at all matches nothing.
    pub fn or(filters: impl IntoIterator<Item = Filter>) -> Filter {
        let filters: Vec<Filter> = filters.into_iter().collect();
        match filters.len() {
            0 => Filter("(!(objectClass=*))".into()),
            1 => filters.into_iter().next().unwrap_or_else(Filter::all),
            _ => Filter(format!("(|{})", concat(&filters))),
        }
    }

    /// The filter does not match.
    pub fn negate(filter: Filter) -> Filter {
        Filter(format!("(!{})", filter.0))
    }

    /// The filter text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn concat(filters: &[Filter]) -> String {
    filters.iter().map(|f| f.0.as_str()).collect()
}

impl fmt::Display for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Escapes an assertion value (RFC 4515): `\`, `*`, `(`, `)` and NUL as `\XX`.
pub fn escape_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\5c"),
            '*' => out.push_str("\\2a"),
            '(' => out.push_str("\\28"),
            ')' => out.push_str("\\29"),
            '\0' => out.push_str("\\00"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_escaped() {
        assert_eq!(
            Filter::eq("name", r"Sales (EU)* \o/").as_str(),
            r"(name=Sales \28EU\29\2a \5co/)"
        );
        assert_eq!(Filter::starts_with("name", "a*").as_str(), r"(name=a\2a*)");
        assert_eq!(
            Filter::ends_with("users", " with p1").as_str(),
            r"(users=* with p1)"
        );
    }

    #[test]
    fn combinations() {
        assert_eq!(Filter::and([]).as_str(), "(objectClass=*)");
        assert_eq!(Filter::or([]).as_str(), "(!(objectClass=*))");
        assert_eq!(Filter::and([Filter::eq("a", "1")]).as_str(), "(a=1)");
        assert_eq!(
            Filter::and([Filter::eq("a", "1"), Filter::negate(Filter::present("b"))]).to_string(),
            "(&(a=1)(!(b=*)))"
        );
        assert_eq!(
            Filter::or([Filter::eq("a", "1"), Filter::eq("a", "2")]).to_string(),
            "(|(a=1)(a=2))"
        );
    }
}
