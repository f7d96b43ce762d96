//! The OX SOAP simulator over real HTTP, with SOAP bodies written as real clients send them
//! (`soapenv:`/`tns:` prefixes as the dBildungsplattform client, `ns0:`/`ns4:`/`ns5:` as zeep).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use reqwest::{Client, StatusCode};
use stagehand_simulators::http::FaultRule;
use stagehand_simulators::ox::xml::{self, DO_SOAP, Element, SOAP_ENV, TNS};
use stagehand_simulators::ox::{self, CONTEXT_ADMIN_ID, DEFAULT_GROUP_ID, OxConfig, OxSim};

const MASTER: &str = "admin";
const MASTER_PW: &str = "master-secret";
const OXADMIN_PW: &str = "oxadmin-secret";

struct World {
    sim: OxSim,
    alice: u32,
    bob: u32,
    staff: u32,
}

async fn world() -> World {
    let sim = ox::start(OxConfig::new(MASTER, MASTER_PW)).await.unwrap();
    let st = sim.state();
    st.add_context_with_admin(1, "context1", OXADMIN_PW);
    st.add_context(7, "other");
    let alice = st.add_user(1, "alice", "alice@example.org").unwrap();
    let bob = st.add_user(1, "bob", "bob@example.org").unwrap();
    let staff = st
        .add_group(1, "Staff", "All Staff", &[alice, bob])
        .unwrap();
    st.add_secondary_account(1, "team@example.org", "Team", &[alice, bob])
        .unwrap();
    st.add_secondary_account(1, "sales@example.org", "Sales", &[bob])
        .unwrap();
    World {
        sim,
        alice,
        bob,
        staff,
    }
}

/// A request shaped like dBildungsplattform's client: prefixes declared on the wrapper.
fn dbp(op: &str, inner: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/">
 <soapenv:Body>
  <tns:{op} xmlns:tns="http://soap.admin.openexchange.com"
            xmlns:ns2="http://dataobjects.rmi.admin.openexchange.com/xsd"
            xmlns:ns6="http://dataobjects.soap.admin.openexchange.com/xsd">
   {inner}
  </tns:{op}>
 </soapenv:Body>
</soapenv:Envelope>"#
    )
}

/// A request shaped like zeep's: prefixes declared on the envelope, a SOAP header present.
fn zeep(op: &str, inner: &str) -> String {
    format!(
        r#"<soap-env:Envelope xmlns:soap-env="http://schemas.xmlsoap.org/soap/envelope/" xmlns:ns0="http://soap.admin.openexchange.com" xmlns:ns4="http://dataobjects.soap.admin.openexchange.com/xsd" xmlns:ns5="http://dataobjects.rmi.admin.openexchange.com/xsd"><soap-env:Header/><soap-env:Body><ns0:{op}>{inner}</ns0:{op}></soap-env:Body></soap-env:Envelope>"#
    )
}

fn auth(login: &str, password: &str) -> String {
    format!(
        "<tns:auth><ns2:login>{login}</ns2:login><ns2:password>{password}</ns2:password></tns:auth>"
    )
}

fn master() -> String {
    auth(MASTER, MASTER_PW)
}

fn ctx(id: u32) -> String {
    format!("<tns:ctx><ns6:id>{id}</ns6:id></tns:ctx>")
}

struct Answer {
    status: StatusCode,
    content_type: String,
    text: String,
}

impl Answer {
    fn root(&self) -> Element {
        xml::parse(self.text.as_bytes()).unwrap_or_else(|e| panic!("{e}: {}", self.text))
    }

    /// The `{op}Response` element.
    fn response(&self, op: &str) -> Element {
        assert_eq!(self.status, StatusCode::OK, "{}", self.text);
        let root = self.root();
        let body = root.first(SOAP_ENV, "Body").unwrap().clone();
        let wrapper = body.first_element().unwrap().clone();
        assert!(wrapper.is(TNS, &format!("{op}Response")), "{}", self.text);
        wrapper
    }

    fn returns(&self, op: &str) -> Vec<Element> {
        self.response(op).all(TNS, "return").cloned().collect()
    }

    /// (faultcode, faultstring, detail exception name)
    fn fault(&self) -> (String, String, Option<String>) {
        assert_eq!(
            self.status,
            StatusCode::INTERNAL_SERVER_ERROR,
            "{}",
            self.text
        );
        let root = self.root();
        let fault = root
            .first(SOAP_ENV, "Body")
            .unwrap()
            .first(SOAP_ENV, "Fault")
            .unwrap()
            .clone();
        let child = |name: &str| {
            fault
                .children
                .iter()
                .find(|c| c.name == name && c.ns.is_none())
                .map(|c| c.text.clone())
        };
        let detail = fault
            .children
            .iter()
            .find(|c| c.name == "detail")
            .and_then(|d| d.first_element())
            .map(|e| {
                assert_eq!(e.ns.as_deref(), Some(TNS));
                e.name.clone()
            });
        (
            child("faultcode").unwrap(),
            child("faultstring").unwrap(),
            detail,
        )
    }
}

async fn post(sim: &OxSim, service: &str, body: String) -> Answer {
    let op = body
        .split("Body>")
        .nth(1)
        .and_then(|s| s.split(['<', ' ', '>']).find(|t| t.contains(':')))
        .map(|t| t.split(':').nth(1).unwrap_or_default().to_string())
        .unwrap_or_default();
    let response = Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
        .post(sim.service_url(service))
        .header("content-type", "text/xml;charset=UTF-8")
        .header(
            "SOAPAction",
            format!("\"http://soap.admin.openexchange.com/{op}\""),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    Answer {
        status: response.status(),
        content_type: response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default(),
        text: response.text().await.unwrap(),
    }
}

fn field(e: &Element, name: &str) -> Option<String> {
    e.first(DO_SOAP, name).map(|f| f.text.clone())
}

fn assert_exception_id(faultstring: &str) {
    let (_, id) = faultstring.rsplit_once("; exceptionId ").unwrap();
    let parts: Vec<&str> = id.trim_start_matches('-').split('-').collect();
    assert_eq!(parts.len(), 2, "{faultstring}");
    assert!(
        parts.iter().all(|p| p.parse::<u64>().is_ok()),
        "{faultstring}"
    );
}

#[tokio::test]
async fn context_service_needs_the_master_admin() {
    let w = world().await;
    let all = post(&w.sim, "OXContextService", dbp("listAll", &master())).await;
    assert_eq!(all.content_type, "text/xml;charset=UTF-8");
    let contexts = all.returns("listAll");
    let ids: Vec<String> = contexts.iter().map(|c| field(c, "id").unwrap()).collect();
    assert_eq!(ids, vec!["1", "7"]);
    assert_eq!(field(&contexts[0], "name").unwrap(), "context1");
    assert_eq!(field(&contexts[0], "enabled").unwrap(), "true");

    let wrong = post(
        &w.sim,
        "OXContextService",
        dbp("listAll", &auth(MASTER, "wrong")),
    )
    .await;
    let (code, string, detail) = wrong.fault();
    assert_eq!(code, "soap:Server");
    assert!(
        string.starts_with("Authentication failed; exceptionId "),
        "{string}"
    );
    assert_exception_id(&string);
    assert_eq!(detail.as_deref(), Some("InvalidCredentialsException"));

    // The context admin is not the master admin.
    let oxadmin = post(
        &w.sim,
        "OXContextService",
        dbp("listAll", &auth("oxadmin", OXADMIN_PW)),
    )
    .await;
    assert_eq!(
        oxadmin.fault().2.as_deref(),
        Some("InvalidCredentialsException")
    );

    let admin_id = post(
        &w.sim,
        "OXContextService",
        dbp("getAdminId", &format!("{}{}", ctx(1), master())),
    )
    .await;
    let response = admin_id.response("getAdminId");
    assert_eq!(
        response.first(TNS, "return").unwrap().text,
        CONTEXT_ADMIN_ID.to_string()
    );

    let data = post(
        &w.sim,
        "OXContextService",
        dbp("getData", &format!("{}{}", ctx(7), master())),
    )
    .await;
    assert_eq!(field(&data.returns("getData")[0], "name").unwrap(), "other");

    let missing = post(
        &w.sim,
        "OXContextService",
        dbp("getData", &format!("{}{}", ctx(99), master())),
    )
    .await;
    let (_, string, detail) = missing.fault();
    assert!(
        string.starts_with("Context 99 does not exist; exceptionId"),
        "{string}"
    );
    assert_eq!(detail.as_deref(), Some("NoSuchContextException"));

    let list = post(
        &w.sim,
        "OXContextService",
        dbp(
            "list",
            &format!("<tns:search_pattern>oth*</tns:search_pattern>{}", master()),
        ),
    )
    .await;
    assert_eq!(list.returns("list").len(), 1);
}

#[tokio::test]
async fn user_lists_carry_ids_only_and_get_multiple_data_the_names() {
    let w = world().await;
    let listed = post(
        &w.sim,
        "OXUserService",
        zeep(
            "listAll",
            &format!(
                "<ns0:ctx><ns4:id>1</ns4:id></ns0:ctx><ns0:auth><ns5:login>{MASTER}</ns5:login><ns5:password>{MASTER_PW}</ns5:password></ns0:auth>"
            ),
        ),
    )
    .await;
    let users = listed.returns("listAll");
    let ids: Vec<u32> = users
        .iter()
        .map(|u| field(u, "id").unwrap().parse().unwrap())
        .collect();
    assert_eq!(ids, vec![CONTEXT_ADMIN_ID, w.alice, w.bob]);
    assert!(
        users.iter().all(|u| field(u, "name").is_none()),
        "names are nil in lists"
    );
    assert!(
        listed.text.contains(r#"<ns2:name xsi:nil="true"/>"#),
        "{}",
        listed.text
    );

    let list = post(
        &w.sim,
        "OXUserService",
        dbp(
            "list",
            &format!(
                "{}<tns:search_pattern>AL*</tns:search_pattern>{}",
                ctx(1),
                master()
            ),
        ),
    )
    .await;
    let found = list.returns("list");
    assert_eq!(found.len(), 1);
    assert_eq!(field(&found[0], "id").unwrap(), w.alice.to_string());

    let multiple = post(
        &w.sim,
        "OXUserService",
        dbp(
            "getMultipleData",
            &format!(
                "{}<tns:users><ns6:id>{}</ns6:id></tns:users><tns:users><ns6:id>{}</ns6:id></tns:users>{}",
                ctx(1),
                w.bob,
                CONTEXT_ADMIN_ID,
                master()
            ),
        ),
    )
    .await;
    let full = multiple.returns("getMultipleData");
    let names: Vec<String> = full.iter().map(|u| field(u, "name").unwrap()).collect();
    assert_eq!(names, vec!["bob", "oxadmin"]);
    assert_eq!(field(&full[0], "primaryEmail").unwrap(), "bob@example.org");
    assert_eq!(field(&full[0], "email1").unwrap(), "bob@example.org");
    assert_eq!(field(&full[0], "display_name").unwrap(), "bob");

    let by_name = post(
        &w.sim,
        "OXUserService",
        dbp(
            "getData",
            &format!(
                "{}<tns:user><ns6:name>alice</ns6:name></tns:user>{}",
                ctx(1),
                master()
            ),
        ),
    )
    .await;
    assert_eq!(
        field(&by_name.returns("getData")[0], "id").unwrap(),
        w.alice.to_string()
    );

    let admin = post(
        &w.sim,
        "OXUserService",
        dbp(
            "getContextAdmin",
            &format!("{}{}", ctx(1), auth("oxadmin", OXADMIN_PW)),
        ),
    )
    .await;
    let admin = admin.returns("getContextAdmin");
    assert_eq!(
        field(&admin[0], "id").unwrap(),
        CONTEXT_ADMIN_ID.to_string()
    );
    assert_eq!(field(&admin[0], "name").unwrap(), "oxadmin");

    let unknown = post(
        &w.sim,
        "OXUserService",
        dbp(
            "getData",
            &format!(
                "{}<tns:user><ns6:id>99</ns6:id></tns:user>{}",
                ctx(1),
                master()
            ),
        ),
    )
    .await;
    let (_, string, detail) = unknown.fault();
    assert!(
        string.starts_with("No such user 99 in context 1; exceptionId"),
        "{string}"
    );
    assert_eq!(detail.as_deref(), Some("NoSuchUserException"));
}

#[tokio::test]
async fn per_context_authentication() {
    let w = world().await;
    // A context that does not exist fails authentication, as on the real server.
    let missing = post(
        &w.sim,
        "OXUserService",
        dbp("listAll", &format!("{}{}", ctx(42), master())),
    )
    .await;
    let (_, string, detail) = missing.fault();
    assert!(string.starts_with("Authentication failed"), "{string}");
    assert_eq!(detail.as_deref(), Some("InvalidCredentialsException"));

    // oxadmin of context 1 is not admin of context 7 (another password there).
    let other = post(
        &w.sim,
        "OXGroupService",
        dbp(
            "listAll",
            &format!("{}{}", ctx(7), auth("oxadmin", OXADMIN_PW)),
        ),
    )
    .await;
    assert_eq!(
        other.fault().2.as_deref(),
        Some("InvalidCredentialsException")
    );

    // Without MASTER_ACCOUNT_OVERRIDE only oxadmin may.
    w.sim.state().set_master_account_override(false);
    let as_master = post(
        &w.sim,
        "OXGroupService",
        dbp("listAll", &format!("{}{}", ctx(1), master())),
    )
    .await;
    assert_eq!(
        as_master.fault().2.as_deref(),
        Some("InvalidCredentialsException")
    );
    let as_oxadmin = post(
        &w.sim,
        "OXGroupService",
        dbp(
            "listAll",
            &format!("{}{}", ctx(1), auth("oxadmin", OXADMIN_PW)),
        ),
    )
    .await;
    assert_eq!(as_oxadmin.returns("listAll").len(), 2);

    // Credentials in the wrong namespace are no credentials.
    let wrong_ns = post(
        &w.sim,
        "OXGroupService",
        dbp(
            "listAll",
            &format!("{}<tns:auth><tns:login>oxadmin</tns:login><tns:password>{OXADMIN_PW}</tns:password></tns:auth>", ctx(1)),
        ),
    )
    .await;
    assert_eq!(
        wrong_ns.fault().2.as_deref(),
        Some("InvalidCredentialsException")
    );
}

fn rename_user(id: u32, name: &str) -> String {
    dbp(
        "change",
        &format!(
            "{}<tns:usrdata><ns6:id>{id}</ns6:id><ns6:name>{name}</ns6:name></tns:usrdata>{}",
            ctx(1),
            master()
        ),
    )
}

fn rename_group(id: u32, name: &str) -> String {
    dbp(
        "change",
        &format!(
            "{}<tns:grp><ns6:id>{id}</ns6:id><ns6:name>{name}</ns6:name></tns:grp>{}",
            ctx(1),
            master()
        ),
    )
}

#[tokio::test]
async fn renaming_users() {
    let w = world().await;
    let uuid = "3f2a6b1c-0d4e-4f5a-9b8c-7d6e5f4a3b2c";
    let done = post(&w.sim, "OXUserService", rename_user(w.alice, uuid)).await;
    let response = done.response("change");
    assert!(response.children.is_empty(), "{}", done.text);
    assert_eq!(w.sim.state().user(1, w.alice).unwrap().name, uuid);
    assert_eq!(w.sim.state().rename_count(), 1);

    // The same name again is no rename and no error (a resumed run).
    let again = post(&w.sim, "OXUserService", rename_user(w.alice, uuid)).await;
    again.response("change");
    assert_eq!(w.sim.state().rename_count(), 1);

    let duplicate = post(&w.sim, "OXUserService", rename_user(w.bob, uuid)).await;
    let (_, string, detail) = duplicate.fault();
    assert!(
        string.starts_with(&format!(
            "User {uuid} already exists in this context; exceptionId"
        )),
        "{string}"
    );
    assert_eq!(detail.as_deref(), Some("InvalidDataException"));

    let unknown = post(&w.sim, "OXUserService", rename_user(99, "x")).await;
    let (_, string, detail) = unknown.fault();
    assert!(
        string.starts_with("No such user 99 in context 1"),
        "{string}"
    );
    assert_eq!(detail.as_deref(), Some("NoSuchUserException"));

    w.sim.state().set_username_changeable(false);
    let disabled = post(&w.sim, "OXUserService", rename_user(w.bob, "bob-new")).await;
    let (code, string, detail) = disabled.fault();
    assert_eq!(code, "soap:Server");
    assert!(
        string.starts_with("Changing username is disabled!; exceptionId"),
        "{string}"
    );
    assert_eq!(detail.as_deref(), Some("InvalidDataException"));
    assert_eq!(w.sim.state().user(1, w.bob).unwrap().name, "bob");

    // A void change may come back as an empty Body.
    w.sim.state().set_username_changeable(true);
    w.sim.state().set_empty_change_response(true);
    let empty = post(&w.sim, "OXUserService", rename_user(w.bob, "bob-new")).await;
    assert_eq!(empty.status, StatusCode::OK);
    assert!(
        empty
            .root()
            .first(SOAP_ENV, "Body")
            .unwrap()
            .children
            .is_empty(),
        "{}",
        empty.text
    );
    assert_eq!(w.sim.state().user(1, w.bob).unwrap().name, "bob-new");
}

#[tokio::test]
async fn lost_renames_answer_success_and_keep_the_name() {
    let w = world().await;
    w.sim.state().set_renames_lost(true);
    post(&w.sim, "OXUserService", rename_user(w.alice, "alice-new"))
        .await
        .response("change");
    post(&w.sim, "OXGroupService", rename_group(w.staff, "Staff-new"))
        .await
        .response("change");
    assert_eq!(w.sim.state().user(1, w.alice).unwrap().name, "alice");
    assert_eq!(w.sim.state().group(1, w.staff).unwrap().name, "Staff");
    assert_eq!(w.sim.state().rename_count(), 0);
    w.sim.state().set_renames_lost(false);
    post(&w.sim, "OXUserService", rename_user(w.alice, "alice-new"))
        .await
        .response("change");
    assert_eq!(w.sim.state().user(1, w.alice).unwrap().name, "alice-new");
    assert_eq!(w.sim.state().rename_count(), 1);
}

#[tokio::test]
async fn values_are_escaped_both_ways() {
    let w = world().await;
    let evil = "a<b>&\"c'";
    let escaped = "a&lt;b&gt;&amp;&quot;c&apos;";
    post(&w.sim, "OXUserService", rename_user(w.alice, escaped))
        .await
        .response("change");
    assert_eq!(w.sim.state().user(1, w.alice).unwrap().name, evil);
    let data = post(
        &w.sim,
        "OXUserService",
        dbp(
            "getData",
            &format!(
                "{}<tns:user><ns6:id>{}</ns6:id></tns:user>{}",
                ctx(1),
                w.alice,
                master()
            ),
        ),
    )
    .await;
    assert!(!data.text.contains(evil), "{}", data.text);
    assert_eq!(field(&data.returns("getData")[0], "name").unwrap(), evil);
    // The nested user attributes hold a "name" key that is not the user's name.
    assert!(data.text.contains("not-the-user-name"));
}

#[tokio::test]
async fn groups_and_the_default_group() {
    let w = world().await;
    let all = post(
        &w.sim,
        "OXGroupService",
        dbp("listAll", &format!("{}{}", ctx(1), master())),
    )
    .await;
    let groups = all.returns("listAll");
    assert_eq!(groups.len(), 2);
    let staff = &groups[1];
    assert_eq!(field(staff, "name").unwrap(), "Staff");
    assert_eq!(field(staff, "displayname").unwrap(), "All Staff");
    let members: Vec<String> = staff
        .all(DO_SOAP, "members")
        .map(|m| m.text.clone())
        .collect();
    assert_eq!(members, vec![w.alice.to_string(), w.bob.to_string()]);

    let default = post(
        &w.sim,
        "OXGroupService",
        dbp("getDefaultGroup", &format!("{}{}", ctx(1), master())),
    )
    .await;
    let default = default.returns("getDefaultGroup");
    assert_eq!(
        field(&default[0], "id").unwrap(),
        DEFAULT_GROUP_ID.to_string()
    );
    assert_eq!(field(&default[0], "name").unwrap(), "users");
    let default_members: Vec<String> = default[0]
        .all(DO_SOAP, "members")
        .map(|m| m.text.clone())
        .collect();
    assert_eq!(default_members.len(), 3, "oxadmin and both users");

    // Renames keep the case.
    post(
        &w.sim,
        "OXGroupService",
        rename_group(w.staff, "Staff-UUID-AbC"),
    )
    .await
    .response("change");
    assert_eq!(
        w.sim.state().group(1, w.staff).unwrap().name,
        "Staff-UUID-AbC"
    );

    let taken = post(&w.sim, "OXGroupService", rename_group(w.staff, "users")).await;
    let (_, string, detail) = taken.fault();
    assert!(
        string.starts_with("Group users already exists in this context"),
        "{string}"
    );
    assert_eq!(detail.as_deref(), Some("InvalidDataException"));

    let unknown = post(
        &w.sim,
        "OXGroupService",
        dbp(
            "getData",
            &format!(
                "{}<tns:grp><ns6:id>404</ns6:id></tns:grp>{}",
                ctx(1),
                master()
            ),
        ),
    )
    .await;
    let (_, string, detail) = unknown.fault();
    assert!(
        string.starts_with("No such group 404 in context 1"),
        "{string}"
    );
    assert_eq!(detail.as_deref(), Some("NoSuchObjectException"));

    let multiple = post(
        &w.sim,
        "OXGroupService",
        dbp(
            "getMultipleData",
            &format!(
                "{}<tns:grps><ns6:id>{}</ns6:id></tns:grps><tns:grps><ns6:name>users</ns6:name></tns:grps>{}",
                ctx(1),
                w.staff,
                master()
            ),
        ),
    )
    .await;
    let names: Vec<String> = multiple
        .returns("getMultipleData")
        .iter()
        .map(|g| field(g, "name").unwrap())
        .collect();
    assert_eq!(names, vec!["Staff-UUID-AbC", "users"]);
}

fn accounts_call(op: &str, extra: &str) -> String {
    dbp(
        op,
        &format!(
            "{extra}<tns:context><ns6:id>1</ns6:id></tns:context>{}",
            master()
        ),
    )
}

#[tokio::test]
async fn secondary_accounts_list_and_delete() {
    let w = world().await;
    let listed = post(
        &w.sim,
        "OXSecondaryAccountService",
        accounts_call("list", ""),
    )
    .await;
    let rows = listed.returns("list");
    assert_eq!(rows.len(), 3, "one row per linked user");
    let team: Vec<&Element> = rows
        .iter()
        .filter(|r| field(r, "primaryAddress").as_deref() == Some("team@example.org"))
        .collect();
    assert_eq!(team.len(), 2);
    assert_eq!(field(team[0], "userId").unwrap(), w.alice.to_string());
    assert_eq!(field(team[0], "name").unwrap(), "Team");
    assert_eq!(field(team[0], "login").unwrap(), "team@example.org/alice");

    let only_alice = post(
        &w.sim,
        "OXSecondaryAccountService",
        accounts_call(
            "list",
            &format!("<tns:users><ns6:id>{}</ns6:id></tns:users>", w.alice),
        ),
    )
    .await;
    assert_eq!(only_alice.returns("list").len(), 1);

    let neither = post(
        &w.sim,
        "OXSecondaryAccountService",
        accounts_call(
            "delete",
            "<tns:primaryAddress>team@example.org</tns:primaryAddress>",
        ),
    )
    .await;
    assert_eq!(neither.fault().2.as_deref(), Some("InvalidDataException"));

    let delete_all = || {
        accounts_call(
            "delete",
            "<tns:primaryAddress>team@example.org</tns:primaryAddress><tns:groups><ns6:id>0</ns6:id></tns:groups>",
        )
    };
    // "Comes back": answered as deleted, still there.
    w.sim.state().set_accounts_come_back(true);
    let fake = post(&w.sim, "OXSecondaryAccountService", delete_all()).await;
    assert_eq!(
        fake.response("delete").first(TNS, "return").unwrap().text,
        "true"
    );
    assert_eq!(w.sim.state().secondary_accounts(1).len(), 3);

    w.sim.state().set_accounts_come_back(false);
    let deleted = post(&w.sim, "OXSecondaryAccountService", delete_all()).await;
    assert_eq!(
        deleted
            .response("delete")
            .first(TNS, "return")
            .unwrap()
            .text,
        "true"
    );
    let left = w.sim.state().secondary_accounts(1);
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].primary_address, "sales@example.org");

    let again = post(&w.sim, "OXSecondaryAccountService", delete_all()).await;
    assert_eq!(
        again.response("delete").first(TNS, "return").unwrap().text,
        "false"
    );

    let empty = post(
        &w.sim,
        "OXSecondaryAccountService",
        dbp(
            "list",
            &format!("<tns:context><ns6:id>7</ns6:id></tns:context>{}", master()),
        ),
    )
    .await;
    let response = empty.response("list");
    assert!(
        response.first(TNS, "return").is_none(),
        "an empty list has no <return>"
    );
}

#[tokio::test]
async fn fail_after_n_successful_renames() {
    let w = world().await;
    // Renames 1 and 2 succeed, every change from the 3rd on fails.
    w.sim
        .faults()
        .add(FaultRule::op("change").from_nth(3).status(500));
    let carol = w
        .sim
        .state()
        .add_user(1, "carol", "carol@example.org")
        .unwrap();
    for (id, name) in [(w.alice, "u-1"), (w.bob, "u-2")] {
        post(&w.sim, "OXUserService", rename_user(id, name))
            .await
            .response("change");
    }
    let third = post(&w.sim, "OXUserService", rename_user(carol, "u-3")).await;
    let (code, string, detail) = third.fault();
    assert_eq!(code, "soap:Server");
    assert!(string.contains("exceptionId"), "{string}");
    assert_eq!(detail.as_deref(), Some("StorageException"));
    assert_eq!(w.sim.state().user(1, carol).unwrap().name, "carol");
    assert_eq!(w.sim.state().rename_count(), 2);

    // Reads are not affected; the log names each operation.
    post(
        &w.sim,
        "OXUserService",
        dbp("listAll", &format!("{}{}", ctx(1), master())),
    )
    .await
    .returns("listAll");
    let ops: Vec<(String, Option<u16>)> = w
        .sim
        .requests()
        .into_iter()
        .map(|r| (r.op.unwrap_or_default(), r.status))
        .collect();
    assert_eq!(
        ops,
        vec![
            ("change".to_string(), Some(200)),
            ("change".to_string(), Some(200)),
            ("change".to_string(), Some(500)),
            ("listAll".to_string(), Some(200)),
        ]
    );
    // And the object each change is for (a read names none).
    let objects: Vec<Option<String>> = w.sim.requests().into_iter().map(|r| r.object).collect();
    assert_eq!(
        objects,
        vec![
            Some(format!("context 1 user {}", w.alice)),
            Some(format!("context 1 user {}", w.bob)),
            Some(format!("context 1 user {carol}")),
            None,
        ]
    );

    // A rename whose answer is lost: done on the server, the client sees no answer.
    w.sim.faults().clear();
    w.sim.faults().add(
        FaultRule::op("change")
            .nth(1)
            .after_apply()
            .drop_connection(),
    );
    let err = Client::new()
        .post(w.sim.service_url("OXUserService"))
        .header("content-type", "text/xml;charset=UTF-8")
        .body(rename_user(carol, "u-3"))
        .send()
        .await
        .unwrap_err();
    assert!(err.status().is_none());
    assert_eq!(w.sim.state().user(1, carol).unwrap().name, "u-3");
}

#[tokio::test]
async fn malformed_requests_get_client_faults() {
    let w = world().await;
    let not_xml = post(&w.sim, "OXUserService", "<soapenv:Envelope".to_string()).await;
    let (code, _, detail) = not_xml.fault();
    assert_eq!(code, "soap:Client");
    assert_eq!(detail, None);

    let wrong_wrapper_ns = post(
        &w.sim,
        "OXUserService",
        r#"<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Body><listAll xmlns="urn:wrong"/></s:Body></s:Envelope>"#.to_string(),
    )
    .await;
    let (code, string, _) = wrong_wrapper_ns.fault();
    assert_eq!(code, "soap:Client");
    assert!(
        string.contains("Unexpected wrapper element {urn:wrong}listAll"),
        "{string}"
    );

    let soap12 = post(
        &w.sim,
        "OXUserService",
        r#"<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope"><s:Body/></s:Envelope>"#
            .to_string(),
    )
    .await;
    assert_eq!(soap12.fault().0, "soap:VersionMismatch");

    let unknown_op = post(&w.sim, "OXUserService", dbp("frobnicate", &master())).await;
    assert_eq!(unknown_op.fault().0, "soap:Client");

    // A field in a wrong namespace is ignored: the context has no id.
    let wrong_field_ns = post(
        &w.sim,
        "OXUserService",
        dbp(
            "listAll",
            &format!("<tns:ctx><tns:id>1</tns:id></tns:ctx>{}", master()),
        ),
    )
    .await;
    let (_, string, detail) = wrong_field_ns.fault();
    assert_eq!(detail.as_deref(), Some("InvalidDataException"), "{string}");

    let c = Client::new();
    let nowhere = c
        .post(format!("{}/webservices/OXNothing", w.sim.soap_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(nowhere.status(), StatusCode::NOT_FOUND);
    let get = c
        .get(w.sim.service_url("OXUserService"))
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn state_dump_and_seed_over_http() {
    let w = world().await;
    let c = Client::new();
    let seed = serde_json::json!({
        "contexts": [{"id": 9, "name": "seeded", "admin_password": "p9",
            "users": [{"name": "dora", "email": "dora@example.org"}],
            "groups": [{"name": "Team", "members": ["dora"]}],
            "secondary_accounts": [{"primary_address": "fa@example.org", "users": ["dora"]}]}]
    });
    let r = c
        .post(format!("{}/_sim/seed", w.sim.base_url()))
        .json(&seed)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let dora = w.sim.state().user_by_name(9, "dora").unwrap();
    assert_eq!(w.sim.state().secondary_accounts(9)[0].user_id, dora.id);
    let team = w
        .sim
        .state()
        .groups(9)
        .into_iter()
        .find(|g| g.name == "Team")
        .unwrap();
    assert_eq!(team.members, vec![dora.id]);

    let bad = c
        .post(format!("{}/_sim/seed", w.sim.base_url()))
        .json(&serde_json::json!({"contexts": [{"id": 9, "groups": [{"name": "X", "members": ["nobody"]}]}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);

    let state: serde_json::Value = c
        .get(format!("{}/_sim/state", w.sim.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let contexts = state["contexts"].as_array().unwrap();
    assert_eq!(contexts.len(), 3);
    assert!(!state.to_string().contains(OXADMIN_PW) && !state.to_string().contains("p9"));
    // oxadmin of the seeded context authenticates with its own password.
    let r = post(
        &w.sim,
        "OXUserService",
        dbp(
            "getContextAdmin",
            &format!("{}{}", ctx(9), auth("oxadmin", "p9")),
        ),
    )
    .await;
    assert_eq!(r.returns("getContextAdmin").len(), 1);
}
