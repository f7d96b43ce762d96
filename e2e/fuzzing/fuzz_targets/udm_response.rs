//! The UDM REST client's answer readers (actions/src/clients/udm/): the input, an HTTP answer
//! (status line, headers, body; see src/lib.rs), read as the answer to a search, a read, a
//! create, a modify, a delete, the access check and a 503's retry; every object in it read
//! with every property accessor and recorded as the Functional Accounts export records it,
//! and the handover of those records written and read back (it must read back equal).
#![no_main]

use libfuzzer_sys::fuzz_target;
use stagehand_fuzz::parsers;

fuzz_target!(|data: &[u8]| {
    let answer = stagehand_fuzz::answer(data);
    // reqwest's `text()`, which the client reads the body with, replaces invalid UTF-8.
    let body = String::from_utf8_lossy(answer.body);
    let broken = parsers().udm(answer.status, &answer.headers, &body);
    assert!(broken.is_empty(), "{broken:#?}");
});
