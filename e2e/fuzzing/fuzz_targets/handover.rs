//! The handover document reader (actions/src/functional_accounts/record.rs): the input read
//! as the import reads the handover from the object store, then written as the export writes
//! it and read back (it must read back equal), every account's Shared Account name and DNs
//! worked out as the import does; and the input read as the store's S3 error document.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stagehand_actions::fuzzing;

fuzz_target!(|data: &[u8]| {
    let broken = fuzzing::handover(data);
    assert!(broken.is_empty(), "{broken:#?}");
});
