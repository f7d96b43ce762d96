//! Reading DNs as the directory writes them: comparing two, taking one apart (the
//! counterpart of [`super::escape`], which builds them from data).

/// A DN normalized for comparison: lower case, no blanks around `,` and `=`.
pub fn norm_dn(dn: &str) -> String {
    split_dn(dn)
        .iter()
        .map(|rdn| match rdn.split_once('=') {
            Some((a, v)) => format!("{}={}", a.trim(), v.trim()),
            None => rdn.trim().to_string(),
        })
        .collect::<Vec<_>>()
        .join(",")
        .to_lowercase()
}

/// The RDNs of a DN (escaped commas stay inside their RDN).
pub fn split_dn(dn: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut escaped = false;
    for c in dn.chars() {
        if escaped {
            current.push(c);
            escaped = false;
        } else if c == '\\' {
            current.push(c);
            escaped = true;
        } else if c == ',' {
            parts.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    if !current.is_empty() || !parts.is_empty() {
        parts.push(current);
    }
    parts
}

/// The value of the first RDN when its attribute is `attr` (`uid=anna,...` → `anna`), with
/// RFC 4514 escapes (`\,`, `\2C`) undone; `None` for another attribute or a multi-valued RDN.
pub fn first_rdn_value(dn: &str, attr: &str) -> Option<String> {
    let first = split_dn(dn).into_iter().next()?;
    let (a, v) = first.split_once('=')?;
    if !a.trim().eq_ignore_ascii_case(attr) {
        return None;
    }
    let v = v.trim();
    let mut out = Vec::with_capacity(v.len());
    let bytes = v.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'+' {
            return None;
        }
        if b == b'\\' && i + 1 < bytes.len() {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            match hex {
                Some(byte) => {
                    out.push(byte);
                    i += 3;
                }
                None => {
                    out.push(bytes[i + 1]);
                    i += 2;
                }
            }
            continue;
        }
        out.push(b);
        i += 1;
    }
    String::from_utf8(out).ok().filter(|s| !s.is_empty())
}

/// The parent of a DN (everything after the first unescaped comma).
pub fn parent_of(dn: &str) -> &str {
    let mut escaped = false;
    for (i, c) in dn.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == ',' {
            return &dn[i + 1..];
        }
    }
    ""
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_and_rdns() {
        assert_eq!(
            norm_dn("UID=Anna , cn=users,DC=x"),
            "uid=anna,cn=users,dc=x"
        );
        assert_eq!(
            first_rdn_value("uid=anna,cn=users,dc=x", "uid").as_deref(),
            Some("anna")
        );
        assert_eq!(
            first_rdn_value(r"uid=a\,b\2Bc,cn=users,dc=x", "UID").as_deref(),
            Some("a,b+c")
        );
        assert_eq!(first_rdn_value("cn=anna,dc=x", "uid"), None);
        assert_eq!(first_rdn_value("uid=a+cn=b,dc=x", "uid"), None);
    }

    #[test]
    fn parents() {
        assert_eq!(parent_of(r"cn=a\,b,cn=c,dc=x"), "cn=c,dc=x");
        assert_eq!(parent_of("dc=x"), "");
    }
}
