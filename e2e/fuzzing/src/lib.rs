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

use std::alloc::{GlobalAlloc, Layout, System};

/// The largest single allocation a target may make: 1 GiB (`FUZZ_RSS_LIMIT_MB` of `e2e/fuzz`
/// bounds the whole process).
pub const ALLOCATION_LIMIT: usize = 1 << 30;

/// The targets' allocator: the system's, but an allocation over [`ALLOCATION_LIMIT`] aborts
/// the process, which libFuzzer reports as a crash and keeps the input of. libFuzzer's own
/// `-malloc_limit_mb` needs a sanitizer's allocator hooks; this one holds without a sanitizer
/// (the targets are safe Rust: e2e/fuzz builds them with `--sanitizer none`, which builds and
/// runs several times faster).
pub struct Limited;

// SAFETY: every call is passed to `System` unchanged, or the process aborts before it.
unsafe impl GlobalAlloc for Limited {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        over_limit(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        over_limit(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        over_limit(new_size);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Aborts when `size` is over the limit (without allocating: the message is static).
fn over_limit(size: usize) {
    if size > ALLOCATION_LIMIT {
        use std::io::Write;
        let _ = std::io::stderr()
            .write_all(b"stagehand-fuzz: a single allocation of more than 1 GiB; aborting\n");
        std::process::abort();
    }
}

#[global_allocator]
static ALLOCATOR: Limited = Limited;

/// The clients' answer readers, built once per process (every HTTP target calls them).
pub fn parsers() -> &'static stagehand_actions::fuzzing::Parsers {
    static PARSERS: std::sync::OnceLock<stagehand_actions::fuzzing::Parsers> =
        std::sync::OnceLock::new();
    PARSERS.get_or_init(|| {
        stagehand_actions::fuzzing::Parsers::new().expect("the clients build")
    })
}

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
    fn an_allocation_up_to_the_limit_is_served() {
        let v: Vec<u8> = Vec::with_capacity(1 << 20);
        assert!(v.capacity() >= 1 << 20);
    }

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
