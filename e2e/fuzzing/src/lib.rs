//! What the fuzz targets share: reading an input as an HTTP answer.
//!
//! The targets of the HTTP clients read their input as a raw HTTP/1.1 response, the form
//! `curl -si` prints and the seed files under `corpus/` are written in:
//!
//! ```text
//! HTTP/1.1 200 OK
//! ETag: "abc"
//!
//! {"dn": "..."}
//! ```
//!
//! Leniently, so that most mutations still reach the body parser: without a blank line the
//! whole input is the body of a `200`; a status line without a number is a `200`; header lines
//! without a colon are left out.

/// An HTTP answer read from fuzz input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer<'a> {
    /// The status code (any number; the client decides what it means).
    pub status: u16,
    /// The header lines, name and value, trimmed.
    pub headers: Vec<(&'a [u8], &'a [u8])>,
    /// Everything after the blank line.
    pub body: &'a [u8],
}

/// Reads `data` as an HTTP answer (see the module's documentation).
pub fn answer(data: &[u8]) -> Answer<'_> {
    let split = find(data, b"\r\n\r\n")
        .map(|at| (at, at + 4))
        .or_else(|| find(data, b"\n\n").map(|at| (at, at + 2)));
    let Some((head_end, body_start)) = split else {
        return Answer {
            status: 200,
            headers: Vec::new(),
            body: data,
        };
    };
    let mut lines = data[..head_end]
        .split(|b| *b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let status = lines
        .next()
        .and_then(|line| line.split(|b| *b == b' ').nth(1))
        .and_then(|code| std::str::from_utf8(code).ok())
        .and_then(|code| code.parse().ok())
        .unwrap_or(200);
    let headers = lines
        .filter_map(|line| {
            let colon = line.iter().position(|b| *b == b':')?;
            Some((line[..colon].trim_ascii(), line[colon + 1..].trim_ascii()))
        })
        .collect();
    Answer {
        status,
        headers,
        body: &data[body_start..],
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_response_and_a_bare_body() {
        let a = answer(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 2\r\nbad\r\n\r\n{}");
        assert_eq!(a.status, 503);
        assert_eq!(a.headers, [(&b"Retry-After"[..], &b"2"[..])]);
        assert_eq!(a.body, b"{}");
        let bare = answer(b"{\"x\": 1}");
        assert_eq!((bare.status, bare.body), (200, &b"{\"x\": 1}"[..]));
    }
}
