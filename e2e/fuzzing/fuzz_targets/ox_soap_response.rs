//! The OX SOAP client's answer readers (actions/src/clients/ox/soap.rs and the readers of
//! actions/src/clients/ox/mod.rs): the input, an HTTP answer (see src/lib.rs), read as the
//! answer to every operation the client calls (its faults, its `<return>` elements as
//! contexts, users, groups, secondary accounts, an id, a delete's flag); and the body, when it
//! is text, written into a request as values, login and password and read back (it must read
//! back equal).
#![no_main]

use libfuzzer_sys::fuzz_target;
use stagehand_fuzz::parsers;

fuzz_target!(|data: &[u8]| {
    let answer = stagehand_fuzz::answer(data);
    let broken = parsers().ox(answer.status, answer.body);
    assert!(broken.is_empty(), "{broken:#?}");
});
