//! The Provisioning API client's answer readers (actions/src/provisioning_drop_subscriptions.rs
//! over actions/src/clients/http.rs): the input, an HTTP answer (see src/lib.rs), read as the
//! answer to `GET /subscriptions` and to `DELETE /subscriptions/<name>`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stagehand_fuzz::parsers;

fuzz_target!(|data: &[u8]| {
    let answer = stagehand_fuzz::answer(data);
    let body = String::from_utf8_lossy(answer.body);
    let broken = parsers().provisioning(answer.status, &body);
    assert!(broken.is_empty(), "{broken:#?}");
});
