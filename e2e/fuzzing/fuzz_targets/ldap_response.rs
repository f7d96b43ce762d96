//! The LDAP readers (actions/src/clients/ldap/wire.rs and ldif.rs): the input framed and read
//! as the lean client reads a server's BER-encoded results, and read as `ldapsearch`'s LDIF
//! output with every entryUUID read as a UUID; its first line and the rest written as LDIF
//! lines for `ldapmodify` and read back (they must read back equal).
#![no_main]

use libfuzzer_sys::fuzz_target;
use stagehand_actions::fuzzing;

fuzz_target!(|data: &[u8]| {
    let broken = fuzzing::ldap(data);
    assert!(broken.is_empty(), "{broken:#?}");
});
