//! How the actions word their messages: one place for the helpers every summary and error
//! uses, so that they read alike.

/// `1 account`, `2 accounts`.
pub fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Shortens a server's or tool's message for an error: at most `max` characters, on one line.
pub fn one_line(text: &str, max: usize) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if joined.chars().count() <= max {
        joined
    } else {
        let cut: String = joined.chars().take(max).collect();
        format!("{cut}...")
    }
}

/// A byte count for people: `812 B`, `4.2 KiB`, `1.9 MiB`.
pub fn bytes(n: usize) -> String {
    if n < 1024 {
        format!("{n} B")
    } else if n < 1024 * 1024 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", n as f64 / (1024.0 * 1024.0))
    }
}

/// A duration for people, to the hundredth of a second: `1.25s`.
pub fn seconds(d: std::time::Duration) -> String {
    format!("{:.2}s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plural_says_one_or_many() {
        assert_eq!(plural(0, "account"), "0 accounts");
        assert_eq!(plural(1, "account"), "1 account");
        assert_eq!(plural(2, "account"), "2 accounts");
    }

    #[test]
    fn one_line_joins_and_shortens() {
        assert_eq!(one_line("a\n\tb  c", 10), "a b c");
        assert_eq!(one_line("abcdefghijkl", 5), "abcde...");
    }

    #[test]
    fn bytes_for_people() {
        assert_eq!(bytes(812), "812 B");
        assert_eq!(bytes(4300), "4.2 KiB");
    }
}
