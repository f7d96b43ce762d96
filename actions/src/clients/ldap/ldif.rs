//! LDIF (RFC 2849) as `ldapsearch` prints it and `ldapmodify` reads it: folded lines, base64
//! (`::`) values, comments, and `changetype: modify` records.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::{Entry, Replace};

/// Why `ldapsearch` output cannot be read as LDIF: the message names the line and what is
/// wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LdifError(pub String);

/// Reads the entries of `ldapsearch` output. Handles folded lines (a line starting with one
/// space continues the previous one), base64 values (`attr:: ...`, `dn:: ...`), comments,
/// a `version:` line and CRLF line ends. Values by URL (`attr:< file://...`) are refused.
pub fn parse_entries(text: &str) -> Result<Vec<Entry>, LdifError> {
    let mut entries = Vec::new();
    let mut record: Vec<String> = Vec::new();
    let mut first_line_no = 0;
    for (no, raw) in text.split('\n').enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if line.is_empty() {
            if !record.is_empty() {
                if let Some(entry) = parse_record(&record, first_line_no)? {
                    entries.push(entry);
                }
                record.clear();
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix(' ') {
            match record.last_mut() {
                Some(last) => last.push_str(rest),
                None => {
                    return Err(LdifError(format!(
                        "line {}: a continuation line with nothing to continue",
                        no + 1
                    )));
                }
            }
            continue;
        }
        if record.is_empty() {
            first_line_no = no + 1;
        }
        record.push(line.to_string());
    }
    if !record.is_empty()
        && let Some(entry) = parse_record(&record, first_line_no)?
    {
        entries.push(entry);
    }
    Ok(entries)
}

/// One record's unfolded lines to an entry; `None` for records that are not entries (only
/// comments, `version: 1`, the `search:`/`result:` trailer of `ldapsearch -L`).
fn parse_record(lines: &[String], line_no: usize) -> Result<Option<Entry>, LdifError> {
    let mut entry: Option<Entry> = None;
    for line in lines.iter().filter(|l| !l.starts_with('#')) {
        let (name, value) =
            attr_value(line).map_err(|e| LdifError(format!("record at line {line_no}: {e}")))?;
        match entry.as_mut() {
            None if name.eq_ignore_ascii_case("dn") => entry = Some(Entry::new(value)),
            None if ["version", "search", "result", "text", "ref", "control"]
                .iter()
                .any(|n| name.eq_ignore_ascii_case(n)) => {}
            None => {
                return Err(LdifError(format!(
                    "record at line {line_no}: starts with {name:?} instead of dn"
                )));
            }
            Some(e) => e.push(&name, value),
        }
    }
    Ok(entry)
}

/// `name: value`, `name:: base64` or `name:` (empty value).
fn attr_value(line: &str) -> Result<(String, String), LdifError> {
    let Some((name, rest)) = line.split_once(':') else {
        return Err(LdifError(format!(
            "{:?} is not an `attribute: value` line",
            short(line)
        )));
    };
    if name.is_empty() {
        return Err(LdifError(format!(
            "{:?} has no attribute name",
            short(line)
        )));
    }
    if let Some(b64) = rest.strip_prefix(':') {
        let bytes = STANDARD
            .decode(b64.trim_matches(' '))
            .map_err(|e| LdifError(format!("{name}: invalid base64 value: {e}")))?;
        return Ok((
            name.to_string(),
            String::from_utf8_lossy(&bytes).into_owned(),
        ));
    }
    if rest.starts_with('<') {
        return Err(LdifError(format!(
            "{name}: values given by URL are not supported"
        )));
    }
    Ok((name.to_string(), rest.trim_start_matches(' ').to_string()))
}

fn short(line: &str) -> String {
    line.chars().take(60).collect()
}

/// Whether `value` can be written as `name: value` (RFC 2849 SAFE-STRING, and no trailing
/// space); otherwise it goes base64.
fn is_safe(value: &str) -> bool {
    let bytes = value.as_bytes();
    match bytes.first() {
        None => true,
        Some(&first) => {
            !matches!(first, b' ' | b':' | b'<')
                && bytes
                    .iter()
                    .all(|&b| (0x01..=0x7f).contains(&b) && b != b'\n' && b != b'\r')
                && !value.ends_with(' ')
        }
    }
}

/// One LDIF line for an attribute and value, base64-encoded when it is not a safe string.
pub fn line(name: &str, value: &str) -> String {
    if is_safe(value) {
        format!("{name}: {value}")
    } else {
        format!("{name}:: {}", STANDARD.encode(value.as_bytes()))
    }
}

/// The change records that make every replacement (`changetype: modify`, `replace:`), one
/// record per entry, for `ldapmodify`.
pub fn modify_records(changes: &[Replace]) -> String {
    let mut out = String::with_capacity(changes.len() * 160);
    for change in changes {
        out.push_str(&line("dn", &change.dn));
        out.push_str("\nchangetype: modify\n");
        out.push_str(&line("replace", &change.attr));
        out.push('\n');
        out.push_str(&line(&change.attr, &change.value));
        out.push_str("\n-\n\n");
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn reads_folded_base64_and_comments() {
        let text = "version: 1\n\n# extended LDIF\n# comment that\n  is folded\ndn: uid=alice,cn=users,dc=swp-ldap,dc=inter\n nal\nentryUUID: 0d4f8a30-1b2c-103f-8\n a1e-5b1f2c3d4e5f\nunivention\n ObjectIdentifier: ABC\n\ndn:: dWlkPU3DvGxsZXIsY249dXNlcnMsZGM9eA==\r\nuid:: TcO8bGxlcg==\r\ndescription:\r\n\r\n# search result\nsearch: 2\nresult: 0 Success\n";
        let entries = parse_entries(text).unwrap();
        assert_eq!(entries.len(), 2, "{entries:?}");
        assert_eq!(entries[0].dn, "uid=alice,cn=users,dc=swp-ldap,dc=internal");
        assert_eq!(
            entries[0].values("entryuuid"),
            ["0d4f8a30-1b2c-103f-8a1e-5b1f2c3d4e5f"]
        );
        assert_eq!(entries[0].values("univentionObjectIdentifier"), ["ABC"]);
        assert_eq!(entries[1].dn, "uid=Müller,cn=users,dc=x");
        assert_eq!(entries[1].values("uid"), ["Müller"]);
        assert_eq!(entries[1].values("description"), [""]);
    }

    #[test]
    fn multiple_values_and_no_trailing_newline() {
        let entries = parse_entries("dn: cn=g,dc=x\nmember: a\nmember: b").unwrap();
        assert_eq!(entries[0].values("member"), ["a", "b"]);
        assert!(parse_entries("").unwrap().is_empty());
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        assert!(
            parse_entries(" dangling")
                .unwrap_err()
                .0
                .contains("continuation")
        );
        assert!(
            parse_entries("uid: x\n")
                .unwrap_err()
                .0
                .contains("instead of dn")
        );
        assert!(
            parse_entries("dn: x\njpegPhoto:< file:///x\n")
                .unwrap_err()
                .0
                .contains("URL")
        );
        assert!(
            parse_entries("dn: x\nuid:: !!!\n")
                .unwrap_err()
                .0
                .contains("base64")
        );
        assert!(
            parse_entries("dn: x\nno colon\n")
                .unwrap_err()
                .0
                .contains("attribute: value")
        );
    }

    #[test]
    fn writes_replace_records_base64_when_needed() {
        let ldif = modify_records(&[
            Replace {
                dn: "uid=alice,dc=x".into(),
                attr: "univentionObjectIdentifier".into(),
                value: "0d4f8a30-1b2c-103f-8a1e-5b1f2c3d4e5f".into(),
            },
            Replace {
                dn: "uid=Müller,dc=x".into(),
                attr: "description".into(),
                value: " leading space".into(),
            },
        ]);
        assert_eq!(
            ldif,
            "dn: uid=alice,dc=x\nchangetype: modify\nreplace: univentionObjectIdentifier\nuniventionObjectIdentifier: 0d4f8a30-1b2c-103f-8a1e-5b1f2c3d4e5f\n-\n\n\
             dn:: dWlkPU3DvGxsZXIsZGM9eA==\nchangetype: modify\nreplace: description\ndescription:: IGxlYWRpbmcgc3BhY2U=\n-\n\n"
        );
        // What is written reads back the same.
        let back = parse_entries("dn:: dWlkPU3DvGxsZXIsZGM9eA==\n").unwrap();
        assert_eq!(back[0].dn, "uid=Müller,dc=x");
    }

    #[test]
    fn safe_strings() {
        assert!(is_safe("abc"));
        assert!(is_safe(""));
        assert!(!is_safe(":abc"));
        assert!(!is_safe("<abc"));
        assert!(!is_safe("a\nb"));
        assert!(!is_safe("trailing "));
        assert!(!is_safe("é"));
    }
}
