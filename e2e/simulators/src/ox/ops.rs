//! The SOAP operations: parameter extraction, authentication, the state changes, and the
//! response and fault documents.

use std::collections::BTreeSet;
use std::io;

use axum::http::StatusCode;
use axum::response::Response;

use super::xml::{self, DO_SOAP, EXCEPTIONS, Element, SOAP_ENV, SOAP12_ENV, TNS, XSI, XmlOut};
use super::{OxContext, OxGroup, OxSecondaryAccount, OxSoap, OxState, OxUser, Service, soap_xml};

/// The exceptions the simulator raises, by their detail element name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exception {
    InvalidCredentials,
    InvalidData,
    NoSuchContext,
    NoSuchUser,
    NoSuchObject,
    Storage,
}

impl Exception {
    fn element(self) -> &'static str {
        match self {
            Exception::InvalidCredentials => "InvalidCredentialsException",
            Exception::InvalidData => "InvalidDataException",
            Exception::NoSuchContext => "NoSuchContextException",
            Exception::NoSuchUser => "NoSuchUserException",
            Exception::NoSuchObject => "NoSuchObjectException",
            Exception::Storage => "StorageException",
        }
    }
}

/// Why a call failed.
#[derive(Debug)]
pub(crate) enum Fault {
    /// A server-side exception: `soap:Server` with an exception id and a typed detail.
    Server(Exception, String),
    /// A malformed request: `soap:Client`, no detail.
    Client(String),
    /// A SOAP 1.2 envelope.
    VersionMismatch,
}

fn invalid(message: impl Into<String>) -> Fault {
    Fault::Server(Exception::InvalidData, message.into())
}

fn auth_failed() -> Fault {
    Fault::Server(
        Exception::InvalidCredentials,
        "Authentication failed".to_string(),
    )
}

/// What an operation answers.
enum Reply {
    /// Users with every field.
    Users(Vec<OxUser>),
    /// Users with only the id set.
    UserIds(Vec<u32>),
    Groups(Vec<OxGroup>),
    Contexts(Vec<OxContext>),
    Accounts(Vec<OxSecondaryAccount>),
    Int(u32),
    Bool(bool),
    /// `change`: no return value.
    Void,
}

/// Handles one SOAP request to `service`.
pub(crate) fn call(sim: &OxSoap, service: Service, body: &[u8]) -> Response {
    let (op, result) = match parse_call(body) {
        Ok((op, wrapper)) => {
            let result = dispatch(sim, service, &op, &wrapper);
            (op, result)
        }
        Err(fault) => (String::new(), Err(fault)),
    };
    match result {
        Ok(reply) => {
            let empty_change = sim.lock().config.empty_change_response;
            match render_reply(&op, &reply, empty_change) {
                Ok(body) => soap_xml(StatusCode::OK, body),
                Err(e) => server_fault(
                    sim,
                    Exception::Storage,
                    &format!("cannot write the answer: {e}"),
                ),
            }
        }
        Err(Fault::Server(exception, message)) => server_fault(sim, exception, &message),
        Err(Fault::Client(message)) => plain_fault(sim, "soap:Client", &message),
        Err(Fault::VersionMismatch) => plain_fault(
            sim,
            "soap:VersionMismatch",
            "A SOAP 1.2 message is not valid when sent to a SOAP 1.1 only endpoint.",
        ),
    }
}

fn parse_call(body: &[u8]) -> Result<(String, Element), Fault> {
    let root = xml::parse(body)
        .map_err(|e| Fault::Client(format!("Error reading XMLStreamReader: {e}")))?;
    if root.is(SOAP12_ENV, "Envelope") {
        return Err(Fault::VersionMismatch);
    }
    if !root.is(SOAP_ENV, "Envelope") {
        return Err(Fault::Client(format!(
            "Not a SOAP 1.1 envelope: the root element is {{{}}}{}",
            root.ns.as_deref().unwrap_or(""),
            root.name
        )));
    }
    let body = root
        .first(SOAP_ENV, "Body")
        .ok_or_else(|| Fault::Client("The envelope has no Body".to_string()))?;
    let wrapper = body
        .first_element()
        .ok_or_else(|| Fault::Client("The Body holds no operation element".to_string()))?;
    if wrapper.ns.as_deref() != Some(TNS) {
        return Err(Fault::Client(format!(
            "Unexpected wrapper element {{{}}}{} found. Expected an operation in {{{TNS}}}",
            wrapper.ns.as_deref().unwrap_or(""),
            wrapper.name
        )));
    }
    Ok((wrapper.name.clone(), wrapper.clone()))
}

fn dispatch(sim: &OxSoap, service: Service, op: &str, w: &Element) -> Result<Reply, Fault> {
    let mut state = sim.lock();
    let st = &mut *state;
    match (service, op) {
        (Service::Context, "listAll") => {
            auth_master(st, w)?;
            Ok(Reply::Contexts(st.contexts.values().cloned().collect()))
        }
        (Service::Context, "list") => {
            auth_master(st, w)?;
            let pattern = param_text(w, "search_pattern")?;
            Ok(Reply::Contexts(
                st.contexts
                    .values()
                    .filter(|c| like(&pattern, &c.name) || like(&pattern, &c.id.to_string()))
                    .cloned()
                    .collect(),
            ))
        }
        (Service::Context, "getData") => {
            auth_master(st, w)?;
            let id = context_id(st, w, "ctx", true)?;
            let ctx = st
                .contexts
                .get(&id)
                .cloned()
                .ok_or_else(|| no_context(id))?;
            Ok(Reply::Contexts(vec![ctx]))
        }
        (Service::Context, "getAdminId") => {
            auth_master(st, w)?;
            let id = context_id(st, w, "ctx", true)?;
            let ctx = st.contexts.get(&id).ok_or_else(|| no_context(id))?;
            Ok(Reply::Int(ctx.admin_id))
        }
        (Service::Context, "exists") => {
            auth_master(st, w)?;
            let id = context_id(st, w, "ctx", false)?;
            Ok(Reply::Bool(st.contexts.contains_key(&id)))
        }
        (Service::User, _) => user_op(st, op, w),
        (Service::Group, _) => group_op(st, op, w),
        (Service::SecondaryAccount, _) => account_op(st, op, w),
        (Service::Context, _) => Err(no_such_operation(op)),
    }
}

fn no_such_operation(op: &str) -> Fault {
    Fault::Client(format!("No such operation: {{{TNS}}}{op}"))
}

fn no_context(id: u32) -> Fault {
    Fault::Server(
        Exception::NoSuchContext,
        format!("Context {id} does not exist"),
    )
}

fn no_user(user: &str, ctx: u32) -> Fault {
    Fault::Server(
        Exception::NoSuchUser,
        format!("No such user {user} in context {ctx}"),
    )
}

fn no_group(group: &str, ctx: u32) -> Fault {
    Fault::Server(
        Exception::NoSuchObject,
        format!("No such group {group} in context {ctx}"),
    )
}

/// The `auth` parameter's login and password.
fn credentials(w: &Element) -> Option<(&str, &str)> {
    let auth = w.first(TNS, "auth")?;
    Some((auth.field_text("login")?, auth.field_text("password")?))
}

fn auth_master(st: &OxState, w: &Element) -> Result<(), Fault> {
    match credentials(w) {
        Some((login, password))
            if login == st.config.master_login && password == st.config.master_password =>
        {
            Ok(())
        }
        _ => Err(auth_failed()),
    }
}

/// Authenticates a per-context call; a context that does not exist fails authentication.
fn auth_context(st: &OxState, w: &Element, ctx: u32) -> Result<(), Fault> {
    let Some(context) = st.contexts.get(&ctx) else {
        return Err(auth_failed());
    };
    let Some((login, password)) = credentials(w) else {
        return Err(auth_failed());
    };
    let master = login == st.config.master_login && password == st.config.master_password;
    if master && st.config.master_account_override {
        return Ok(());
    }
    let admin_name = context
        .users
        .get(&context.admin_id)
        .map(|u| u.name.as_str())
        .unwrap_or_default();
    if login == admin_name && password == context.admin_password {
        Ok(())
    } else {
        Err(auth_failed())
    }
}

/// The text of a parameter (a direct child in the operations namespace).
fn param_text(w: &Element, name: &str) -> Result<String, Fault> {
    w.first(TNS, name)
        .map(|e| e.text.clone())
        .ok_or_else(|| invalid(format!("Missing parameter <{name}> in namespace {TNS}")))
}

fn parse_id(text: &str, what: &str) -> Result<u32, Fault> {
    text.trim().parse::<u32>().map_err(|_| {
        Fault::Client(format!(
            "Unmarshalling Error: {what} is not an integer: {text:?}"
        ))
    })
}

/// The context a call names, by `<id>` (or, when `by_name`, `<name>`).
fn context_id(st: &OxState, w: &Element, param: &str, by_name: bool) -> Result<u32, Fault> {
    let ctx = w
        .first(TNS, param)
        .ok_or_else(|| invalid(format!("Missing parameter <{param}> in namespace {TNS}")))?;
    if let Some(id) = ctx.field_text("id") {
        return parse_id(id, "the context id");
    }
    if by_name && let Some(name) = ctx.field_text("name") {
        return st
            .contexts
            .values()
            .find(|c| c.name == name)
            .map(|c| c.id)
            .ok_or_else(|| {
                Fault::Server(
                    Exception::NoSuchContext,
                    format!("Context {name} does not exist"),
                )
            });
    }
    Err(invalid(format!(
        "Context invalid: <{param}> has no <id> in namespace {DO_SOAP}"
    )))
}

/// Resolves the context of a per-context call and authenticates it.
fn enter<'a>(
    st: &'a mut OxState,
    w: &Element,
    param: &str,
) -> Result<(u32, &'a mut OxContext), Fault> {
    let id = context_id(st, w, param, false)?;
    auth_context(st, w, id)?;
    let ctx = st.contexts.get_mut(&id).ok_or_else(auth_failed)?;
    Ok((id, ctx))
}

/// The user an element (`user`, `usrdata`, one of `users`) names, by id or else by name.
fn find_user(ctx: &OxContext, e: &Element) -> Result<u32, Fault> {
    if let Some(id) = e.field_text("id") {
        let id = parse_id(id, "the user id")?;
        return if ctx.users.contains_key(&id) {
            Ok(id)
        } else {
            Err(no_user(&id.to_string(), ctx.id))
        };
    }
    if let Some(name) = e.field_text("name") {
        return ctx
            .user_by_name(name)
            .map(|u| u.id)
            .ok_or_else(|| no_user(name, ctx.id));
    }
    Err(invalid("The user has neither an id nor a name"))
}

fn find_group(ctx: &OxContext, e: &Element) -> Result<u32, Fault> {
    if let Some(id) = e.field_text("id") {
        let id = parse_id(id, "the group id")?;
        return if ctx.groups.contains_key(&id) {
            Ok(id)
        } else {
            Err(no_group(&id.to_string(), ctx.id))
        };
    }
    if let Some(name) = e.field_text("name") {
        return ctx
            .group_by_name(name)
            .map(|g| g.id)
            .ok_or_else(|| no_group(name, ctx.id));
    }
    Err(invalid("The group has neither an id nor a name"))
}

fn user_op(st: &mut OxState, op: &str, w: &Element) -> Result<Reply, Fault> {
    let username_changeable = st.config.username_changeable;
    let renames_lost = st.renames_lost;
    match op {
        "listAll" => {
            let (_, ctx) = enter(st, w, "ctx")?;
            Ok(Reply::UserIds(ctx.users.keys().copied().collect()))
        }
        "list" => {
            let pattern = param_text(w, "search_pattern")?;
            let (_, ctx) = enter(st, w, "ctx")?;
            Ok(Reply::UserIds(
                ctx.users
                    .values()
                    .filter(|u| {
                        like(&pattern, &u.name)
                            || like(&pattern, &u.display_name)
                            || like(&pattern, &u.primary_email)
                    })
                    .map(|u| u.id)
                    .collect(),
            ))
        }
        "getData" => {
            let (_, ctx) = enter(st, w, "ctx")?;
            let user = w
                .first(TNS, "user")
                .ok_or_else(|| invalid(format!("Missing parameter <user> in namespace {TNS}")))?;
            let id = find_user(ctx, user)?;
            Ok(Reply::Users(users_by_id(ctx, &[id])))
        }
        "getMultipleData" => {
            let (_, ctx) = enter(st, w, "ctx")?;
            let ids = w
                .all(TNS, "users")
                .map(|u| find_user(ctx, u))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Reply::Users(users_by_id(ctx, &ids)))
        }
        "getContextAdmin" => {
            let (_, ctx) = enter(st, w, "ctx")?;
            Ok(Reply::Users(users_by_id(ctx, &[ctx.admin_id])))
        }
        "exists" => {
            let (_, ctx) = enter(st, w, "ctx")?;
            let user = w
                .first(TNS, "user")
                .ok_or_else(|| invalid(format!("Missing parameter <user> in namespace {TNS}")))?;
            Ok(Reply::Bool(find_user(ctx, user).is_ok()))
        }
        "change" => {
            let (ctx_id, ctx) = enter(st, w, "ctx")?;
            let data = w.first(TNS, "usrdata").ok_or_else(|| {
                invalid(format!("Missing parameter <usrdata> in namespace {TNS}"))
            })?;
            let id = find_user(ctx, data)?;
            let renamed = change_user(ctx, ctx_id, id, data, username_changeable, renames_lost)?;
            if renamed && !renames_lost {
                st.renames += 1;
            }
            Ok(Reply::Void)
        }
        _ => Err(no_such_operation(op)),
    }
}

/// Applies a `change` to a user; answers whether it asked for a new name (kept as it was when
/// `renames_lost`).
fn change_user(
    ctx: &mut OxContext,
    ctx_id: u32,
    id: u32,
    data: &Element,
    username_changeable: bool,
    renames_lost: bool,
) -> Result<bool, Fault> {
    let current = ctx
        .users
        .get(&id)
        .cloned()
        .ok_or_else(|| no_user(&id.to_string(), ctx_id))?;
    let mut renamed = false;
    // Only a user named by id can be renamed: by name, the name is the lookup key.
    if data.field_text("id").is_some()
        && let Some(new_name) = data.field_text("name")
        && new_name != current.name
    {
        if !username_changeable {
            return Err(invalid("Changing username is disabled!"));
        }
        if new_name.trim().is_empty() {
            return Err(invalid("Invalid username: the name is empty"));
        }
        if ctx
            .users
            .values()
            .any(|u| u.id != id && u.name.eq_ignore_ascii_case(new_name))
        {
            return Err(invalid(format!(
                "User {new_name} already exists in this context"
            )));
        }
        renamed = true;
    }
    let Some(user) = ctx.users.get_mut(&id) else {
        return Err(no_user(&id.to_string(), ctx_id));
    };
    if renamed
        && !renames_lost
        && let Some(new_name) = data.field_text("name")
    {
        user.name = new_name.to_string();
    }
    if let Some(v) = data.field_text("display_name") {
        user.display_name = v.to_string();
    }
    if let Some(v) = data.field_text("given_name") {
        user.given_name = v.to_string();
    }
    if let Some(v) = data.field_text("sur_name") {
        user.sur_name = v.to_string();
    }
    if let Some(v) = data.field_text("primaryEmail") {
        user.primary_email = v.to_string();
    }
    if let Some(v) = data.field_text("email1") {
        user.email1 = v.to_string();
    }
    Ok(renamed)
}

fn users_by_id(ctx: &OxContext, ids: &[u32]) -> Vec<OxUser> {
    ids.iter()
        .filter_map(|id| ctx.users.get(id).cloned())
        .collect()
}

fn group_op(st: &mut OxState, op: &str, w: &Element) -> Result<Reply, Fault> {
    let renames_lost = st.renames_lost;
    match op {
        "listAll" => {
            let (_, ctx) = enter(st, w, "ctx")?;
            Ok(Reply::Groups(ctx.groups.values().cloned().collect()))
        }
        "list" => {
            let pattern = param_text(w, "pattern")?;
            let (_, ctx) = enter(st, w, "ctx")?;
            Ok(Reply::Groups(
                ctx.groups
                    .values()
                    .filter(|g| like(&pattern, &g.name) || like(&pattern, &g.displayname))
                    .cloned()
                    .collect(),
            ))
        }
        "getData" => {
            let (_, ctx) = enter(st, w, "ctx")?;
            let grp = w
                .first(TNS, "grp")
                .ok_or_else(|| invalid(format!("Missing parameter <grp> in namespace {TNS}")))?;
            let id = find_group(ctx, grp)?;
            Ok(Reply::Groups(groups_by_id(ctx, &[id])))
        }
        "getMultipleData" => {
            let (_, ctx) = enter(st, w, "ctx")?;
            let ids = w
                .all(TNS, "grps")
                .map(|g| find_group(ctx, g))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Reply::Groups(groups_by_id(ctx, &ids)))
        }
        "getDefaultGroup" => {
            let (_, ctx) = enter(st, w, "ctx")?;
            Ok(Reply::Groups(groups_by_id(ctx, &[ctx.default_group_id])))
        }
        "change" => {
            let (ctx_id, ctx) = enter(st, w, "ctx")?;
            let grp = w
                .first(TNS, "grp")
                .ok_or_else(|| invalid(format!("Missing parameter <grp> in namespace {TNS}")))?;
            let id = find_group(ctx, grp)?;
            let renamed = change_group(ctx, ctx_id, id, grp, renames_lost)?;
            if renamed && !renames_lost {
                st.renames += 1;
            }
            Ok(Reply::Void)
        }
        _ => Err(no_such_operation(op)),
    }
}

fn change_group(
    ctx: &mut OxContext,
    ctx_id: u32,
    id: u32,
    data: &Element,
    renames_lost: bool,
) -> Result<bool, Fault> {
    let mut renamed = false;
    if data.field_text("id").is_some()
        && let Some(new_name) = data.field_text("name")
    {
        let current = ctx
            .groups
            .get(&id)
            .map(|g| g.name.clone())
            .ok_or_else(|| no_group(&id.to_string(), ctx_id))?;
        if new_name != current {
            if new_name.trim().is_empty() {
                return Err(invalid("Invalid group name: the name is empty"));
            }
            if ctx
                .groups
                .values()
                .any(|g| g.id != id && g.name == new_name)
            {
                return Err(invalid(format!(
                    "Group {new_name} already exists in this context"
                )));
            }
            renamed = true;
        }
    }
    let Some(group) = ctx.groups.get_mut(&id) else {
        return Err(no_group(&id.to_string(), ctx_id));
    };
    if renamed
        && !renames_lost
        && let Some(new_name) = data.field_text("name")
    {
        group.name = new_name.to_string();
    }
    if let Some(v) = data.field_text("displayname") {
        group.displayname = v.to_string();
    }
    Ok(renamed)
}

fn groups_by_id(ctx: &OxContext, ids: &[u32]) -> Vec<OxGroup> {
    ids.iter()
        .filter_map(|id| ctx.groups.get(id).cloned())
        .collect()
}

/// The users named by the `users` and `groups` parameters (group id 0 is every user); `None`
/// when neither is given.
fn selected_users(ctx: &OxContext, w: &Element) -> Result<Option<BTreeSet<u32>>, Fault> {
    let users: Vec<&Element> = w.all(TNS, "users").collect();
    let groups: Vec<&Element> = w.all(TNS, "groups").collect();
    if users.is_empty() && groups.is_empty() {
        return Ok(None);
    }
    let mut selected = BTreeSet::new();
    for u in users {
        selected.insert(find_user(ctx, u)?);
    }
    for g in groups {
        let id = g
            .field_text("id")
            .ok_or_else(|| invalid("A group has no id"))
            .and_then(|t| parse_id(t, "the group id"))?;
        if id == 0 {
            selected.extend(ctx.users.keys().copied());
        } else {
            let group = ctx
                .groups
                .get(&id)
                .ok_or_else(|| no_group(&id.to_string(), ctx.id))?;
            selected.extend(group.members.iter().copied());
        }
    }
    Ok(Some(selected))
}

fn account_op(st: &mut OxState, op: &str, w: &Element) -> Result<Reply, Fault> {
    let come_back = st.accounts_come_back;
    match op {
        "list" => {
            let (_, ctx) = enter(st, w, "context")?;
            let selected = selected_users(ctx, w)?;
            Ok(Reply::Accounts(
                ctx.secondary_accounts
                    .iter()
                    .filter(|a| selected.as_ref().is_none_or(|s| s.contains(&a.user_id)))
                    .cloned()
                    .collect(),
            ))
        }
        "delete" => {
            let address = param_text(w, "primaryAddress")?;
            let (_, ctx) = enter(st, w, "context")?;
            let Some(selected) = selected_users(ctx, w)? else {
                return Err(invalid(
                    "Neither users nor groups given: name the users whose account to delete, or group 0 for all",
                ));
            };
            let matches = |a: &OxSecondaryAccount| {
                a.primary_address.eq_ignore_ascii_case(&address) && selected.contains(&a.user_id)
            };
            let found = ctx.secondary_accounts.iter().any(matches);
            if !come_back {
                ctx.secondary_accounts.retain(|a| !matches(a));
            }
            Ok(Reply::Bool(found))
        }
        _ => Err(no_such_operation(op)),
    }
}

/// SQL `LIKE` as OX applies a search pattern: `*` and `%` match any run, `_` one character,
/// `\` escapes; case-insensitive like the database's collation.
fn like(pattern: &str, value: &str) -> bool {
    #[derive(Clone, Copy, PartialEq)]
    enum Tok {
        Any,
        One,
        Lit(char),
    }
    let mut toks = Vec::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        toks.push(match c {
            '*' | '%' => Tok::Any,
            '_' => Tok::One,
            '\\' => Tok::Lit(chars.next().unwrap_or('\\')),
            c => Tok::Lit(c),
        });
    }
    let value: Vec<char> = value.chars().flat_map(char::to_lowercase).collect();
    let toks: Vec<Tok> = toks
        .into_iter()
        .map(|t| match t {
            Tok::Lit(c) => Tok::Lit(c.to_lowercase().next().unwrap_or(c)),
            t => t,
        })
        .collect();
    // Classic wildcard matching with backtracking over the last `Any`.
    let (mut p, mut v) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while v < value.len() {
        match toks.get(p) {
            Some(Tok::Any) => {
                star = Some((p, v));
                p += 1;
            }
            Some(Tok::One) => {
                p += 1;
                v += 1;
            }
            Some(Tok::Lit(c)) if *c == value[v] => {
                p += 1;
                v += 1;
            }
            _ => match star {
                Some((sp, sv)) => {
                    p = sp + 1;
                    v = sv + 1;
                    star = Some((sp, sv + 1));
                }
                None => return false,
            },
        }
    }
    toks[p.min(toks.len())..].iter().all(|t| *t == Tok::Any)
}

const RESPONSE_NAMESPACES: [(&str, &str); 6] = [
    ("xmlns", TNS),
    ("xmlns:ns2", DO_SOAP),
    ("xmlns:ns3", xml::DO_RMI),
    ("xmlns:ns4", "http://rmi.java/xsd"),
    ("xmlns:ns5", EXCEPTIONS),
    ("xmlns:xsi", XSI),
];

fn render_reply(op: &str, reply: &Reply, empty_change: bool) -> io::Result<Vec<u8>> {
    let mut out = XmlOut::new();
    out.start("soap:Envelope", &[("xmlns:soap", SOAP_ENV)])?;
    if matches!(reply, Reply::Void) && empty_change {
        out.empty("soap:Body", &[])?;
        out.end("soap:Envelope")?;
        return Ok(out.finish());
    }
    out.start("soap:Body", &[])?;
    let wrapper = format!("{op}Response");
    if matches!(reply, Reply::Void) {
        out.empty(&wrapper, &RESPONSE_NAMESPACES)?;
        out.end("soap:Body")?;
        out.end("soap:Envelope")?;
        return Ok(out.finish());
    }
    out.start(&wrapper, &RESPONSE_NAMESPACES)?;
    match reply {
        Reply::Users(users) => {
            for u in users {
                write_user(&mut out, u)?;
            }
        }
        Reply::UserIds(ids) => {
            for id in ids {
                out.start("return", &[])?;
                out.nil("ns2:display_name")?;
                out.text("ns2:id", &id.to_string())?;
                out.nil("ns2:name")?;
                out.nil("ns2:primaryEmail")?;
                out.end("return")?;
            }
        }
        Reply::Groups(groups) => {
            for g in groups {
                out.start("return", &[])?;
                out.text("ns2:displayname", &g.displayname)?;
                out.text("ns2:id", &g.id.to_string())?;
                for m in &g.members {
                    out.text("ns2:members", &m.to_string())?;
                }
                out.text("ns2:name", &g.name)?;
                out.end("return")?;
            }
        }
        Reply::Contexts(contexts) => {
            for c in contexts {
                out.start("return", &[])?;
                out.nil("ns2:average_size")?;
                out.text("ns2:enabled", if c.enabled { "true" } else { "false" })?;
                out.text("ns2:filestoreId", "3")?;
                out.text("ns2:id", &c.id.to_string())?;
                out.text("ns2:loginMappings", &c.name)?;
                out.text("ns2:maxQuota", "-1")?;
                out.text("ns2:name", &c.name)?;
                out.nil("ns2:readDatabase")?;
                out.text("ns2:usedQuota", "0")?;
                out.end("return")?;
            }
        }
        Reply::Accounts(accounts) => {
            for a in accounts {
                out.start("return", &[])?;
                out.text("ns2:id", &a.id.to_string())?;
                out.text("ns2:login", &a.login)?;
                out.text("ns2:name", &a.name)?;
                out.text("ns2:primaryAddress", &a.primary_address)?;
                out.text("ns2:userId", &a.user_id.to_string())?;
                out.end("return")?;
            }
        }
        Reply::Int(n) => out.text("return", &n.to_string())?,
        Reply::Bool(b) => out.text("return", if *b { "true" } else { "false" })?,
        Reply::Void => {}
    }
    out.end(&wrapper)?;
    out.end("soap:Body")?;
    out.end("soap:Envelope")?;
    Ok(out.finish())
}

fn write_user(out: &mut XmlOut, u: &OxUser) -> io::Result<()> {
    let non_empty = |s: &str| (!s.is_empty()).then_some(s.to_string());
    out.start("return", &[])?;
    if !u.primary_email.is_empty() {
        out.text("ns2:aliases", &u.primary_email)?;
    }
    out.nil("ns2:default_group")?;
    out.opt("ns2:display_name", non_empty(&u.display_name).as_deref())?;
    out.opt("ns2:email1", non_empty(&u.email1).as_deref())?;
    out.opt("ns2:given_name", non_empty(&u.given_name).as_deref())?;
    out.text("ns2:id", &u.id.to_string())?;
    out.text("ns2:language", "de_DE")?;
    out.text("ns2:mailenabled", "true")?;
    out.text("ns2:name", &u.name)?;
    out.nil("ns2:password")?;
    out.opt("ns2:primaryEmail", non_empty(&u.primary_email).as_deref())?;
    out.opt("ns2:sur_name", non_empty(&u.sur_name).as_deref())?;
    // A nested map, as real answers carry: clients must not mistake its keys for fields.
    out.start("ns2:userAttributes", &[])?;
    out.start("ns2:entries", &[])?;
    out.text("ns2:key", "config")?;
    out.start("ns2:value", &[])?;
    out.start("ns2:entries", &[])?;
    out.text("ns2:key", "name")?;
    out.text("ns2:value", "not-the-user-name")?;
    out.end("ns2:entries")?;
    out.end("ns2:value")?;
    out.end("ns2:entries")?;
    out.end("ns2:userAttributes")?;
    out.end("return")
}

/// A `soap:Server` fault with an exception id and a typed detail.
pub(crate) fn server_fault(sim: &OxSoap, exception: Exception, message: &str) -> Response {
    let faultstring = format!("{message}; exceptionId {}", sim.next_exception_id());
    let body = fault_document("soap:Server", &faultstring, Some(exception));
    soap_xml(StatusCode::INTERNAL_SERVER_ERROR, body)
}

fn plain_fault(_sim: &OxSoap, code: &str, message: &str) -> Response {
    let body = fault_document(code, message, None);
    soap_xml(StatusCode::INTERNAL_SERVER_ERROR, body)
}

fn fault_document(code: &str, faultstring: &str, exception: Option<Exception>) -> Vec<u8> {
    let write = || -> io::Result<Vec<u8>> {
        let mut out = XmlOut::new();
        out.start("soap:Envelope", &[("xmlns:soap", SOAP_ENV)])?;
        out.start("soap:Body", &[])?;
        out.start("soap:Fault", &[])?;
        out.text("faultcode", code)?;
        out.text("faultstring", faultstring)?;
        if let Some(exception) = exception {
            let name = exception.element();
            out.start("detail", &[])?;
            out.start(name, &RESPONSE_NAMESPACES)?;
            out.start(name, &[])?;
            out.nil("Exception")?;
            out.nil("ns5:objectname")?;
            out.end(name)?;
            out.end(name)?;
            out.end("detail")?;
        }
        out.end("soap:Fault")?;
        out.end("soap:Body")?;
        out.end("soap:Envelope")?;
        Ok(out.finish())
    };
    write().unwrap_or_else(|_| faultstring.as_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::like;

    #[test]
    fn like_patterns() {
        assert!(like("*", "anything"));
        assert!(like("al*", "Alice"));
        assert!(like("*ic*", "alice"));
        assert!(like("a_ice", "alice"));
        assert!(!like("a_ice", "aice"));
        assert!(like("\\_x", "_x"));
        assert!(!like("\\_x", "ax"));
        assert!(!like("bob", "alice"));
        assert!(like("%", ""));
    }
}
