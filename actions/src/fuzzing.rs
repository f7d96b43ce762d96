//! Entry points for the cargo-fuzz targets of `e2e/fuzzing` (docs/reliability.md, "Fuzzing"):
//! each feeds bytes straight to the code a client runs on what a server answered, with no
//! network, exactly as the client runs it. Not an API: hidden from the documentation, and
//! nothing in the actions calls it.
//!
//! Every function reads its input every way the product reads such an answer and returns the
//! *broken invariants* it found (empty: none). A parser refusing its input is not one; a
//! panic, a hang or a huge allocation is caught by the fuzzer itself. The invariants are the
//! round trips the actions rely on: whatever a server answers, a handover the export writes
//! reads back the same; a request value the SOAP client writes reads back the same; an LDIF
//! value written for `ldapmodify` reads back the same; a UUID read and written reads back.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::action::{ActionError, SecretValue};
use crate::clients::http::{FullResponse, HttpApi, Response};
use crate::clients::ldap::dn::{first_rdn_value, norm_dn};
use crate::clients::ldap::{ldif, wire};
use crate::clients::ox::{self, OxClient, Service, soap};
use crate::clients::udm::FUNCTIONAL_ACCOUNT;
use crate::clients::udm::{UdmClient, UdmObject};
use crate::functional_accounts::record::OxFunctionalAccounts;
use crate::functional_accounts::{export, name};
use crate::ldap_entryuuid_to_object_identifier::{format_uuid, parse_uuid};
use crate::provisioning_drop_subscriptions as provisioning;

/// The request every answer is read as the answer to, in messages.
const WHAT: &str = "fuzzing";

/// The clients whose answer readers the targets drive (built once; nothing is sent).
#[derive(Debug)]
pub struct Parsers {
    udm: UdmClient,
    ox: OxClient,
    provisioning_api: HttpApi,
    provisioning: provisioning::Config,
    export: export::Config,
}

impl Parsers {
    /// The clients at made-up addresses.
    pub fn new() -> Result<Self, ActionError> {
        let timeout = Duration::from_secs(5);
        let secret = || SecretValue::new("fuzz-password");
        let udm = UdmClient::new(
            "http://udm.fuzz.invalid/univention/udm/",
            "cn=admin",
            secret(),
            timeout,
            &Default::default(),
        )
        .map_err(|e| ActionError::Failed(e.to_string()))?;
        let ox = OxClient::new(
            "http://ox.fuzz.invalid",
            "oxadminmaster",
            secret(),
            timeout,
            &Default::default(),
        )
        .map_err(|e| ActionError::Failed(e.to_string()))?;
        let provisioning = provisioning::Config {
            provisioning: provisioning::Provisioning::default(),
            subscriptions: vec!["ox-connector".to_string()],
        };
        let provisioning_api = HttpApi::new(
            "the Provisioning API",
            &provisioning.provisioning.url,
            &provisioning.provisioning.username,
            secret(),
            timeout,
            provisioning.provisioning.answer_limit(),
            &Default::default(),
        )?;
        Ok(Self {
            udm,
            ox,
            provisioning_api,
            provisioning,
            export: export::Config::default(),
        })
    }

    /// An answer of the UDM REST API (`status`, the headers that parse, `body`) read as the
    /// answer to every request the client makes; every object it holds read with every
    /// property accessor and recorded as the export records a Functional Account, and the
    /// handover of those accounts written and read back.
    pub fn udm(&self, status: u16, headers: &[(&[u8], &[u8])], body: &str) -> Vec<String> {
        let mut broken = Vec::new();
        let Ok(status) = StatusCode::from_u16(status) else {
            return broken;
        };
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            if let (Ok(name), Ok(value)) =
                (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
            {
                map.append(name, value);
            }
        }
        let response = FullResponse {
            status,
            headers: map,
            body: body.to_string(),
        };
        let udm = &self.udm;
        let mut objects = Vec::new();
        let mut failures = Vec::new();
        match udm.read_search(FUNCTIONAL_ACCOUNT, WHAT, &response) {
            Ok(found) => objects.extend(found),
            Err(e) => failures.push(e),
        }
        match udm.read_object(WHAT, &response) {
            Ok(found) => objects.extend(found),
            Err(e) => failures.push(e),
        }
        failures.extend(udm.read_access(WHAT, &response).err());
        failures.extend(udm.read_created(FUNCTIONAL_ACCOUNT, WHAT, &response).err());
        failures.extend(udm.read_modified(WHAT, &response).err());
        failures.extend(udm.read_deleted(WHAT, &response).err());
        match udm.retry_wait(WHAT, 1, &response) {
            Ok(wait) if wait > Duration::from_secs(30) => {
                broken.push(format!("a 503 is retried after {wait:?}, beyond the cap"));
            }
            Ok(_) => {}
            Err(e) => failures.push(e),
        }
        for e in &failures {
            let _ = (e.to_string(), e.status(), e.details());
            let _ = e.is_located_at(&["properties", "mailPrimaryAddress"]);
            let _ = e.is_located_at(&[]);
        }
        let origin = udm.base_url().origin();
        for o in &objects {
            // The credential goes to the API's host only, whatever the server says.
            if o.uri.origin() != origin {
                broken.push(format!("the object {:?} is addressed at {}", o.dn, o.uri));
            }
            for name in o.properties.keys() {
                let _ = (o.property(name), o.property_str(name), o.property_i64(name));
                let _ = (o.property_strings(name), o.flag(name));
            }
            let _ = o.object_identifier();
        }
        self.record_accounts(&objects, &mut broken);
        broken
    }

    /// The export's reading of UDM objects into handover records, and the handover of them
    /// written and read back.
    fn record_accounts(&self, objects: &[UdmObject], broken: &mut Vec<String>) {
        let by_dn: BTreeMap<String, Option<UdmObject>> = objects
            .iter()
            .map(|o| (norm_dn(&o.dn), Some(o.clone())))
            .collect();
        let mut doc = OxFunctionalAccounts::new("v1.18.0", "2026-03-02T10:15:00Z");
        for o in objects {
            if let Ok(account) = self.export.record(o, &by_dn, &by_dn) {
                doc.accounts.push(account);
            }
        }
        let _ = name::shared_account_names(
            doc.accounts
                .iter()
                .map(|a| (a.name.as_str(), a.dn.as_str())),
        );
        round_trip_handover(&doc, broken);
    }

    /// An answer of OX App Suite's SOAP API (`status`, `body`) read as the answer to every
    /// operation the client calls. When `body` is text, it is also written into a request as
    /// a value, the login and the password, and the request read back.
    pub fn ox(&self, status: u16, body: &[u8]) -> Vec<String> {
        let mut broken = Vec::new();
        if let Ok(text) = std::str::from_utf8(body) {
            round_trip_envelope(text, &mut broken);
        }
        let Ok(status) = StatusCode::from_u16(status) else {
            return broken;
        };
        let (s, op) = (Service::User, "getMultipleData");
        let url = self.ox.service_url(s);
        let returns = match ox::read_response(
            format!("{}.{op}", s.name()),
            &url,
            status,
            Some("text/xml"),
            body,
        ) {
            Ok(returns) => returns,
            Err(e) => {
                let _ = (e.to_string(), e.is_authentication());
                if let Some(f) = e.fault() {
                    let _ = (
                        f.message(),
                        f.is_not_found(),
                        f.is_username_not_changeable(),
                    );
                }
                return broken;
            }
        };
        let client = &self.ox;
        let _ = client
            .objects(s, op, returns.clone(), ox::read_context)
            .and_then(|all| client.one(s, op, all));
        let _ = client
            .objects(s, op, returns.clone(), ox::read_user)
            .and_then(|all| client.one(s, op, all));
        let _ = client
            .objects(s, op, returns.clone(), ox::read_group)
            .and_then(|all| client.one(s, op, all));
        let _ = client.objects(s, op, returns.clone(), ox::read_account);
        let _ = client
            .objects(s, op, returns.clone(), |r| {
                ox::number(&r.text, "the admin id")
            })
            .and_then(|all| client.one(s, op, all));
        let _ = client.read_deleted(&returns).map_err(|e| e.to_string());
        broken
    }

    /// An answer of the Provisioning API (`status`, `body`) read as the answer to the listing
    /// of the subscriptions and to the drop of one.
    pub fn provisioning(&self, status: u16, body: &str) -> Vec<String> {
        let Ok(status) = StatusCode::from_u16(status) else {
            return Vec::new();
        };
        let response = Response {
            status,
            content_type: Some("application/json".into()),
            body: body.to_string(),
        };
        let api = &self.provisioning_api;
        let _ = self
            .provisioning
            .read_listing(api, &response)
            .map_err(|e| e.to_string());
        let _ = provisioning::read_drop(api, "ox-connector", &response).map_err(|e| e.to_string());
        Vec::new()
    }
}

/// A handover document read as the import reads it from the store (and as the export reads
/// an existing one back), every account's names worked out as the import does, and a document
/// that reads written again and read back. Also the store's reading of an S3 error document.
pub fn handover(bytes: &[u8]) -> Vec<String> {
    let mut broken = Vec::new();
    let _ = crate::clients::s3::s3_error(bytes);
    let doc = match OxFunctionalAccounts::from_yaml(bytes) {
        Ok(doc) => doc,
        Err(e) => {
            let _ = e.to_string();
            return broken;
        }
    };
    if let Err(e) = doc.may_replace(&doc) {
        broken.push(format!("a handover may not replace itself: {e}"));
    }
    for a in &doc.accounts {
        let _ = name::shared_account_name(&a.name, &a.dn);
        let _ = (norm_dn(&a.dn), first_rdn_value(&a.dn, "cn"));
        for u in &a.users {
            let _ = (norm_dn(&u.dn), first_rdn_value(&u.dn, "uid"));
        }
    }
    round_trip_handover(&doc, &mut broken);
    broken
}

/// Bytes an LDAP server sent read as the lean client frames and reads them (`LDAPMessage`s
/// carrying an LDAPResult), and as text as `ldapsearch`'s LDIF output; every entryUUID read as
/// a UUID. The text is also written as an LDIF change for `ldapmodify` and read back.
pub fn ldap(bytes: &[u8]) -> Vec<String> {
    let mut broken = Vec::new();
    let mut rest = bytes;
    while let Ok(Some((_, _, total))) = wire::tlv(rest) {
        let _ = wire::parse_response(&rest[..total]);
        rest = &rest[total..];
    }
    let text = String::from_utf8_lossy(bytes);
    let text: &str = text.as_ref();
    if let Ok(entries) = ldif::parse_entries(text) {
        for entry in &entries {
            for value in entry.values("entryUUID") {
                if let Some(uuid) = parse_uuid(value)
                    && parse_uuid(&format_uuid(uuid)) != Some(uuid)
                {
                    broken.push(format!("the UUID {value:?} does not read back"));
                }
            }
        }
    }
    // The lines `ldapmodify` is given (`ldif::line`) read back by the LDIF reader.
    let (dn, value) = text.split_once('\n').unwrap_or((text, ""));
    let attr = "univentionObjectIdentifier";
    let written = format!("{}\n{}\n", ldif::line("dn", dn), ldif::line(attr, value));
    match ldif::parse_entries(&written) {
        Ok(entries) => {
            let back = entries.first().map(|e| (e.dn.as_str(), e.values(attr)));
            if back != Some((dn, std::slice::from_ref(&value.to_string()))) {
                broken.push(format!(
                    "the LDIF lines {written:?} read back as {back:?}, not {dn:?} and {value:?}"
                ));
            }
        }
        Err(e) => broken.push(format!("the LDIF lines {written:?} do not read: {e}")),
    }
    broken
}

/// `doc` written as the export writes it and read back as the import reads it: either the
/// writer refuses it or it reads back equal.
fn round_trip_handover(doc: &OxFunctionalAccounts, broken: &mut Vec<String>) {
    let Ok(yaml) = doc.to_yaml() else {
        return;
    };
    match OxFunctionalAccounts::from_yaml(&yaml) {
        Ok(back) if back == *doc => {}
        Ok(back) => broken.push(format!(
            "the handover reads back different: wrote {doc:?} as {:?}, read {back:?}",
            String::from_utf8_lossy(&yaml)
        )),
        Err(e) => broken.push(format!(
            "the handover written as {:?} does not read back: {e}",
            String::from_utf8_lossy(&yaml)
        )),
    }
}

/// `text` written into a SOAP request as a data object's field, a simple value, the login and
/// the password: either the writer refuses it (a character XML cannot carry) or every value
/// reads back equal.
fn round_trip_envelope(text: &str, broken: &mut Vec<String>) {
    let params = [
        soap::Param::Object {
            name: "usrdata",
            fields: vec![("name", text.to_string())],
        },
        soap::Param::Text {
            name: "primaryAddress",
            value: text.to_string(),
        },
        soap::Param::Auth,
    ];
    let Ok(xml) = soap::envelope("change", &params, text, text) else {
        return;
    };
    let root = match soap::parse(&xml) {
        Ok(root) => root,
        Err(e) => {
            broken.push(format!("the request {xml:?} does not parse: {e}"));
            return;
        }
    };
    let op = root.children.first().and_then(|body| body.children.first());
    let read = |param: &str, field: Option<&str>| -> Option<String> {
        let p = op?.children.iter().find(|c| c.name == param)?;
        match field {
            Some(f) => p.field(f).map(str::to_string),
            None => Some(p.text.clone()),
        }
    };
    for (param, field) in [
        ("usrdata", Some("name")),
        ("primaryAddress", None),
        ("auth", Some("login")),
        ("auth", Some("password")),
    ] {
        let back = read(param, field);
        if back.as_deref() != Some(text) {
            broken.push(format!(
                "{param}.{} written as {:?} reads back as {back:?}, not {text:?}",
                field.unwrap_or(""),
                String::from_utf8_lossy(&xml)
            ));
        }
    }
}
