//! A client of OX App Suite's SOAP provisioning API (`<soapUrl>/webservices/<Service>`), for the
//! actions that rename users and groups and remove secondary accounts.
//!
//! Every call authenticates with the same credentials (the master admin in openDesk; per-context
//! services accept it while the server runs with `MASTER_ACCOUNT_OVERRIDE=true`). Requests are
//! SOAP 1.1 document/literal envelopes ([`soap`]), `POST`ed with `Content-Type:
//! text/xml;charset=UTF-8` and `SOAPAction: "http://soap.admin.openexchange.com/<op>"`. A SOAP
//! fault (HTTP 500 on OX) becomes [`OxError::Fault`] carrying the server's `faultstring`; any
//! other non-200 answer becomes [`OxError::Http`]. The password is sent in the envelope and
//! appears in no error.

pub mod soap;

use std::time::Duration;

use reqwest::Url;

use crate::action::{ActionError, SecretValue};
use crate::clients::http::{
    AnswerLimit, HttpTls, MIB, ReadError, client_builder, read_capped, transport_failure,
};
use crate::clients::tls::TlsError;
pub use soap::SoapFault;
use soap::{Answer, Element, Param, ParseError};

/// How many ids one `getMultipleData` call asks for.
pub const MULTIPLE_DATA_CHUNK: usize = 100;

/// The most bytes read of one answer unless the action's `oxAppSuite.maxResponseBytes` says
/// otherwise. The largest answer is `OXUserService.listAll` of a context: one `<return>` a
/// user, with every unset field written as `xsi:nil` a few KiB each, so 16 MiB holds a
/// context of some thousands of users; `getMultipleData` asks for [`MULTIPLE_DATA_CHUNK`]
/// users at a time. Parsed, an answer takes several times its size, which is what bounds it.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 16 * MIB;

/// The config key that raises the limit, for the message of an answer that is larger.
pub const MAX_RESPONSE_BYTES_KEY: &str = "oxAppSuite.maxResponseBytes";

/// The SOAP services of the provisioning API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// `OXContextService` (master admin only).
    Context,
    /// `OXUserService`.
    User,
    /// `OXGroupService`.
    Group,
    /// `OXSecondaryAccountService` (OX 7.10.6 and later).
    SecondaryAccount,
}

impl Service {
    /// The service's name, the last segment of its URL.
    pub fn name(self) -> &'static str {
        match self {
            Service::Context => "OXContextService",
            Service::User => "OXUserService",
            Service::Group => "OXGroupService",
            Service::SecondaryAccount => "OXSecondaryAccountService",
        }
    }
}

/// An OX context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    /// The context id.
    pub id: u32,
    /// Its name, when the server sent one.
    pub name: Option<String>,
}

/// An OX user (`listAll` sets only the id; `getData`/`getMultipleData` the rest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// The numeric id, stable across renames.
    pub id: u32,
    /// The login name.
    pub name: Option<String>,
    /// `display_name`.
    pub display_name: Option<String>,
    /// `primaryEmail`.
    pub primary_email: Option<String>,
}

/// An OX group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// The numeric id, stable across renames.
    pub id: u32,
    /// The name.
    pub name: Option<String>,
    /// `displayname`.
    pub display_name: Option<String>,
    /// The member user ids.
    pub members: Vec<u32>,
}

/// One row of a secondary account (OX keeps one per user the account is linked to).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecondaryAccount {
    /// The row's account id.
    pub id: Option<u32>,
    /// The user the row belongs to.
    pub user_id: Option<u32>,
    /// The address all rows of one account share.
    pub primary_address: Option<String>,
    /// The account's name.
    pub name: Option<String>,
    /// The login.
    pub login: Option<String>,
}

/// Whose secondary account a `delete` removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccountOwners<'a> {
    /// These users.
    Users(&'a [u32]),
    /// The members of these groups.
    Groups(&'a [u32]),
    /// Every user of the context (group id 0, as ox-connector sends it).
    Everyone,
}

/// Why a call failed. Messages name the call and the URL, never the password.
#[derive(Debug, thiserror::Error)]
pub enum OxError {
    /// The client cannot be built from its settings.
    #[error("OX App Suite SOAP API: {0}")]
    Config(String),
    /// The client's TLS cannot be set up (`oxAppSuite.caBundle` missing or unreadable).
    #[error("OX App Suite SOAP API: {0}")]
    Tls(TlsError),
    /// A value cannot be put into a request.
    #[error("OX App Suite {call}: {source}")]
    Request {
        /// `Service.operation`.
        call: String,
        /// What is wrong with the value.
        source: soap::EnvelopeError,
    },
    /// No answer: connection refused, timeout, TLS, a connection closed without an answer.
    #[error("OX App Suite {call} at {url}: {kind}{cause}")]
    Transport {
        /// `Service.operation`.
        call: String,
        /// The endpoint.
        url: String,
        /// `timed out`, `could not connect` or `failed`.
        kind: &'static str,
        /// `: <the underlying reason>` or empty.
        cause: String,
    },
    /// The server answered with a SOAP fault.
    #[error("OX App Suite {call} at {url} failed: {}", fault.faultstring)]
    Fault {
        /// `Service.operation`.
        call: String,
        /// The endpoint.
        url: String,
        /// The fault.
        fault: SoapFault,
    },
    /// The server (or a proxy in front of it) answered an HTTP error that is not a SOAP fault.
    #[error("OX App Suite {call} at {url} answered HTTP {status}: {body}")]
    Http {
        /// `Service.operation`.
        call: String,
        /// The endpoint.
        url: String,
        /// The status.
        status: u16,
        /// The start of the body, on one line.
        body: String,
    },
    /// The answer is larger than the client reads ([`OxClient::with_max_response_bytes`]).
    #[error("{0}")]
    TooLarge(String),
    /// The answer is not what the operation returns.
    #[error("OX App Suite {call} at {url}: unexpected answer: {message}")]
    Answer {
        /// `Service.operation`.
        call: String,
        /// The endpoint.
        url: String,
        /// What is wrong with it.
        message: String,
    },
}

impl OxError {
    /// The SOAP fault, when the server answered with one.
    pub fn fault(&self) -> Option<&SoapFault> {
        match self {
            OxError::Fault { fault, .. } => Some(fault),
            _ => None,
        }
    }

    /// The server refused the credentials.
    pub fn is_authentication(&self) -> bool {
        self.fault().is_some_and(SoapFault::is_authentication)
    }
}

impl From<OxError> for ActionError {
    /// By what happened: no answer is [`ActionError::Unavailable`]; a fault refusing the
    /// credentials or the change (`Changing username is disabled!`) [`ActionError::Refused`],
    /// one naming a missing object [`ActionError::NotFound`] (any other fault
    /// [`ActionError::Failed`]); an HTTP error by its status ([`ActionError::for_status`]);
    /// an answer that is not the operation's [`ActionError::InvalidAnswer`]. The message is
    /// the OX error's.
    fn from(e: OxError) -> Self {
        let message = e.to_string();
        match &e {
            OxError::Transport { .. } => ActionError::Unavailable(message),
            OxError::Fault { fault, .. } if fault.is_authentication() => {
                ActionError::Refused(message)
            }
            OxError::Fault { fault, .. } if fault.is_username_not_changeable() => {
                ActionError::Refused(message)
            }
            OxError::Fault { fault, .. } if fault.is_not_found() => ActionError::NotFound(message),
            OxError::Http { status, .. } => ActionError::for_status(*status, message),
            OxError::Answer { .. } | OxError::TooLarge(_) => ActionError::InvalidAnswer(message),
            OxError::Tls(TlsError::Missing { .. }) => ActionError::NotFound(message),
            OxError::Config(_)
            | OxError::Tls(_)
            | OxError::Request { .. }
            | OxError::Fault { .. } => ActionError::Failed(message),
        }
    }
}

/// A client of one OX App Suite's SOAP API.
#[derive(Debug, Clone)]
pub struct OxClient {
    http: reqwest::Client,
    base: Url,
    login: String,
    password: SecretValue,
    limit: AnswerLimit,
    /// The config key of the section (`oxAppSuite`), for a refused certificate.
    tls_key: &'static str,
}

impl OxClient {
    /// A client of the API at `soap_url` (`http://host[:port][/prefix]`; the services are at
    /// `<soap_url>/webservices/<Service>`, a trailing `/webservices` is accepted too) that
    /// authenticates as `login`; every request times out after `timeout`; the server's
    /// certificate is checked as `tls` says.
    pub fn new(
        soap_url: &str,
        login: &str,
        password: SecretValue,
        timeout: Duration,
        tls: &HttpTls,
    ) -> Result<Self, OxError> {
        let base = Self::check_url(soap_url)?;
        let http = client_builder(timeout, tls, &base)
            .map_err(OxError::Tls)?
            .build()
            .map_err(|e| OxError::Config(format!("cannot build an HTTP client: {e}")))?;
        Ok(Self {
            http,
            base,
            login: login.to_string(),
            password,
            tls_key: tls.key,
            limit: AnswerLimit::configured(
                None,
                DEFAULT_MAX_RESPONSE_BYTES,
                MAX_RESPONSE_BYTES_KEY,
            ),
        })
    }

    /// Reads at most `bytes` of one answer ([`DEFAULT_MAX_RESPONSE_BYTES`] unless changed).
    pub fn with_max_response_bytes(mut self, bytes: u64) -> Self {
        self.limit = AnswerLimit::configured(
            Some(bytes),
            DEFAULT_MAX_RESPONSE_BYTES,
            MAX_RESPONSE_BYTES_KEY,
        );
        self
    }

    /// The base URL the services are below, from the configured `soap_url` (with or without
    /// its `/webservices` suffix), or why it cannot be used. Validating a config calls it
    /// without building a client.
    pub fn check_url(soap_url: &str) -> Result<Url, OxError> {
        let mut base = Url::parse(soap_url)
            .map_err(|e| OxError::Config(format!("the URL {soap_url:?} is not valid: {e}")))?;
        if base.cannot_be_a_base() || !matches!(base.scheme(), "http" | "https") {
            return Err(OxError::Config(format!(
                "the URL {soap_url:?} must be an http:// or https:// URL"
            )));
        }
        if !base.username().is_empty() || base.password().is_some() {
            return Err(OxError::Config(format!(
                "the URL {} must not carry credentials: the password comes from the secret file",
                base.host_str().unwrap_or_default()
            )));
        }
        base.set_query(None);
        base.set_fragment(None);
        if let Ok(mut segments) = base.path_segments_mut() {
            segments.pop_if_empty();
        }
        if base.path().ends_with("/webservices")
            && let Ok(mut segments) = base.path_segments_mut()
        {
            segments.pop();
        }
        Ok(base)
    }

    /// The base URL the services are below.
    pub fn base_url(&self) -> &str {
        self.base.as_str()
    }

    /// The user the client authenticates as.
    pub fn login(&self) -> &str {
        &self.login
    }

    /// The endpoint of `service`.
    pub fn service_url(&self, service: Service) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut segments) = url.path_segments_mut() {
            segments
                .pop_if_empty()
                .extend(["webservices", service.name()]);
        }
        url
    }

    /// Calls `op` of `service` and returns the `<return>` elements of the answer.
    pub async fn call(
        &self,
        service: Service,
        op: &str,
        params: &[Param<'_>],
    ) -> Result<Vec<Element>, OxError> {
        let call = format!("{}.{op}", service.name());
        let url = self.service_url(service);
        let body =
            soap::envelope(op, params, &self.login, self.password.expose()).map_err(|source| {
                OxError::Request {
                    call: call.clone(),
                    source,
                }
            })?;
        let response = self
            .http
            .post(url.clone())
            .header(reqwest::header::CONTENT_TYPE, "text/xml;charset=UTF-8")
            .header("SOAPAction", format!("\"{}/{op}\"", soap::TNS))
            .body(body)
            .send()
            .await
            .map_err(|e| transport_error(&call, &url, &e, self.tls_key))?;
        let status = response.status();
        let content_type = crate::clients::http::content_type(response.headers());
        let request = format!("OX App Suite {call} (POST {url})");
        let bytes = read_capped(response, self.limit, &request)
            .await
            .map_err(|e| match e {
                ReadError::Transport(e) => transport_error(&call, &url, &e, self.tls_key),
                too_large => OxError::TooLarge(too_large.to_string()),
            })?;
        read_response(call, &url, status, content_type.as_deref(), &bytes)
    }

    fn answer_error(&self, service: Service, op: &str, message: String) -> OxError {
        OxError::Answer {
            call: format!("{}.{op}", service.name()),
            url: self.service_url(service).to_string(),
            message,
        }
    }

    /// Reads the `<return>` elements as data objects.
    pub(crate) fn objects<T>(
        &self,
        service: Service,
        op: &str,
        returns: Vec<Element>,
        read: fn(&Element) -> Result<T, ParseError>,
    ) -> Result<Vec<T>, OxError> {
        returns
            .iter()
            .map(|r| read(r).map_err(|m| self.answer_error(service, op, m.0)))
            .collect()
    }

    /// `<service>.getMultipleData`: the objects with these ids (each sent as a `param`
    /// element), in chunks of [`MULTIPLE_DATA_CHUNK`].
    async fn multiple_data<T>(
        &self,
        service: Service,
        param: &'static str,
        ctx: u32,
        ids: &[u32],
        read: fn(&Element) -> Result<T, ParseError>,
    ) -> Result<Vec<T>, OxError> {
        let op = "getMultipleData";
        let mut all = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(MULTIPLE_DATA_CHUNK) {
            let mut params = vec![Param::id("ctx", ctx)];
            params.extend(chunk.iter().map(|id| Param::id(param, *id)));
            params.push(Param::Auth);
            let returns = self.call(service, op, &params).await?;
            all.extend(self.objects(service, op, returns, read)?);
        }
        Ok(all)
    }

    /// A call answering exactly one object.
    async fn read_one<T>(
        &self,
        service: Service,
        op: &str,
        params: &[Param<'_>],
        read: fn(&Element) -> Result<T, ParseError>,
    ) -> Result<T, OxError> {
        let returns = self.call(service, op, params).await?;
        let all = self.objects(service, op, returns, read)?;
        self.one(service, op, all)
    }

    /// `<service>.change` with `<object>{id, name}`: renames a user or a group.
    async fn rename(
        &self,
        service: Service,
        object: &'static str,
        ctx: u32,
        id: u32,
        name: &str,
    ) -> Result<(), OxError> {
        let params = [
            Param::id("ctx", ctx),
            Param::Object {
                name: object,
                fields: vec![("id", id.to_string()), ("name", name.to_string())],
            },
            Param::Auth,
        ];
        self.call(service, "change", &params).await?;
        Ok(())
    }

    pub(crate) fn one<T>(&self, service: Service, op: &str, mut all: Vec<T>) -> Result<T, OxError> {
        match all.len() {
            1 => all
                .pop()
                .ok_or_else(|| self.answer_error(service, op, "no <return> element".to_string())),
            n => Err(self.answer_error(
                service,
                op,
                format!("{n} <return> elements where one belongs"),
            )),
        }
    }

    // ---- OXContextService ----------------------------------------------------------------

    /// `OXContextService.listAll`: every context (needs the master admin).
    pub async fn list_contexts(&self) -> Result<Vec<Context>, OxError> {
        let (s, op) = (Service::Context, "listAll");
        let returns = self.call(s, op, &[Param::Auth]).await?;
        self.objects(s, op, returns, read_context)
    }

    /// `OXContextService.getAdminId`: the user id of the context's admin (`oxadmin`).
    pub async fn context_admin_id(&self, ctx: u32) -> Result<u32, OxError> {
        let (s, op) = (Service::Context, "getAdminId");
        let returns = self
            .call(s, op, &[Param::id("ctx", ctx), Param::Auth])
            .await?;
        let values = self.objects(s, op, returns, |r| number(&r.text, "the admin id"))?;
        self.one(s, op, values)
    }

    // ---- OXUserService -------------------------------------------------------------------

    /// `OXUserService.listAll`: the ids of the context's users (guests excluded; the server
    /// sets no other field).
    pub async fn list_user_ids(&self, ctx: u32) -> Result<Vec<u32>, OxError> {
        let (s, op) = (Service::User, "listAll");
        let returns = self
            .call(s, op, &[Param::id("ctx", ctx), Param::Auth])
            .await?;
        let users = self.objects(s, op, returns, read_user)?;
        Ok(users.into_iter().map(|u| u.id).collect())
    }

    /// `OXUserService.getMultipleData`: the users with these ids, in chunks of
    /// [`MULTIPLE_DATA_CHUNK`].
    pub async fn users(&self, ctx: u32, ids: &[u32]) -> Result<Vec<User>, OxError> {
        self.multiple_data(Service::User, "users", ctx, ids, read_user)
            .await
    }

    /// `OXUserService.getData`: one user by id.
    pub async fn user(&self, ctx: u32, id: u32) -> Result<User, OxError> {
        let params = [Param::id("ctx", ctx), Param::id("user", id), Param::Auth];
        self.read_one(Service::User, "getData", &params, read_user)
            .await
    }

    /// `OXUserService.getContextAdmin`: the context's admin.
    pub async fn context_admin(&self, ctx: u32) -> Result<User, OxError> {
        let params = [Param::id("ctx", ctx), Param::Auth];
        self.read_one(Service::User, "getContextAdmin", &params, read_user)
            .await
    }

    /// `OXUserService.change` with `usrdata{id, name}`: renames a user (needs
    /// `USERNAME_CHANGEABLE=true` on the server).
    pub async fn rename_user(&self, ctx: u32, id: u32, name: &str) -> Result<(), OxError> {
        self.rename(Service::User, "usrdata", ctx, id, name).await
    }

    // ---- OXGroupService ------------------------------------------------------------------

    /// `OXGroupService.listAll`: the context's groups (the default group included).
    pub async fn list_groups(&self, ctx: u32) -> Result<Vec<Group>, OxError> {
        let (s, op) = (Service::Group, "listAll");
        let returns = self
            .call(s, op, &[Param::id("ctx", ctx), Param::Auth])
            .await?;
        self.objects(s, op, returns, read_group)
    }

    /// `OXGroupService.getMultipleData`: the groups with these ids, in chunks of
    /// [`MULTIPLE_DATA_CHUNK`].
    pub async fn groups(&self, ctx: u32, ids: &[u32]) -> Result<Vec<Group>, OxError> {
        self.multiple_data(Service::Group, "grps", ctx, ids, read_group)
            .await
    }

    /// `OXGroupService.getData`: one group by id.
    pub async fn group(&self, ctx: u32, id: u32) -> Result<Group, OxError> {
        let params = [Param::id("ctx", ctx), Param::id("grp", id), Param::Auth];
        self.read_one(Service::Group, "getData", &params, read_group)
            .await
    }

    /// `OXGroupService.getDefaultGroup`: the context's standard group (`users`).
    pub async fn default_group(&self, ctx: u32) -> Result<Group, OxError> {
        let params = [Param::id("ctx", ctx), Param::Auth];
        self.read_one(Service::Group, "getDefaultGroup", &params, read_group)
            .await
    }

    /// `OXGroupService.change` with `grp{id, name}`: renames a group.
    pub async fn rename_group(&self, ctx: u32, id: u32, name: &str) -> Result<(), OxError> {
        self.rename(Service::Group, "grp", ctx, id, name).await
    }

    // ---- OXSecondaryAccountService -------------------------------------------------------

    /// `OXSecondaryAccountService.list`: every secondary account row of the context.
    pub async fn list_secondary_accounts(
        &self,
        ctx: u32,
    ) -> Result<Vec<SecondaryAccount>, OxError> {
        let (s, op) = (Service::SecondaryAccount, "list");
        let returns = self
            .call(s, op, &[Param::id("context", ctx), Param::Auth])
            .await?;
        self.objects(s, op, returns, read_account)
    }

    /// `OXSecondaryAccountService.delete`: removes the account `primary_address` from `owners`;
    /// answers whether the server reported rows removed (read back to be sure).
    pub async fn delete_secondary_account(
        &self,
        ctx: u32,
        primary_address: &str,
        owners: AccountOwners<'_>,
    ) -> Result<bool, OxError> {
        let (s, op) = (Service::SecondaryAccount, "delete");
        let mut params = vec![
            Param::Text {
                name: "primaryAddress",
                value: primary_address.to_string(),
            },
            Param::id("context", ctx),
        ];
        match owners {
            AccountOwners::Users(ids) => {
                params.extend(ids.iter().map(|id| Param::id("users", *id)))
            }
            AccountOwners::Groups(ids) => {
                params.extend(ids.iter().map(|id| Param::id("groups", *id)));
            }
            AccountOwners::Everyone => params.push(Param::id("groups", 0)),
        }
        params.push(Param::Auth);
        let returns = self.call(s, op, &params).await?;
        self.read_deleted(&returns)
    }

    /// The `<return>` elements of `OXSecondaryAccountService.delete`: whether rows were
    /// removed.
    pub(crate) fn read_deleted(&self, returns: &[Element]) -> Result<bool, OxError> {
        let (s, op) = (Service::SecondaryAccount, "delete");
        match returns {
            [] => Ok(true),
            [one] => match one.text.trim() {
                "true" | "1" => Ok(true),
                "false" | "0" => Ok(false),
                other => Err(self.answer_error(
                    s,
                    op,
                    format!("<return>{other}</return> is not a boolean"),
                )),
            },
            more => Err(self.answer_error(
                s,
                op,
                format!("{} <return> elements where one belongs", more.len()),
            )),
        }
    }
}

/// The answer of `call` at `url` (HTTP `status`, its `content_type`, the body `bytes`): its
/// `<return>` elements, or the fault, HTTP error or malformed answer as an error. An HTTP
/// error quotes the body only as [`crate::clients::http::quoted_body`] allows.
pub(crate) fn read_response(
    call: String,
    url: &Url,
    status: reqwest::StatusCode,
    content_type: Option<&str>,
    bytes: &[u8],
) -> Result<Vec<Element>, OxError> {
    match soap::read_answer(bytes) {
        Ok(Answer::Fault(fault)) => Err(OxError::Fault {
            call,
            url: url.to_string(),
            fault,
        }),
        Ok(Answer::Returns(returns)) if status.is_success() => Ok(returns),
        Ok(Answer::Returns(_)) | Err(_) if !status.is_success() => Err(OxError::Http {
            call,
            url: url.to_string(),
            status: status.as_u16(),
            body: crate::clients::http::quoted_body(
                status,
                content_type,
                &String::from_utf8_lossy(bytes),
            ),
        }),
        Ok(Answer::Returns(_)) => Err(OxError::Answer {
            call,
            url: url.to_string(),
            message: format!("HTTP {status} with a SOAP answer"),
        }),
        Err(message) => Err(OxError::Answer {
            call,
            url: url.to_string(),
            message: message.0,
        }),
    }
}

pub(crate) fn number(text: &str, what: &str) -> Result<u32, ParseError> {
    text.trim()
        .parse()
        .map_err(|_| ParseError(format!("{what} {:?} is not a number", text.trim())))
}

fn opt_string(e: &Element, field: &str) -> Option<String> {
    e.field(field).map(str::to_string)
}

fn required_id(e: &Element, what: &str) -> Result<u32, ParseError> {
    match e.field("id") {
        Some(id) => number(id, &format!("the {what} id")),
        None => Err(ParseError(format!("a {what} without an id"))),
    }
}

pub(crate) fn read_context(e: &Element) -> Result<Context, ParseError> {
    Ok(Context {
        id: required_id(e, "context")?,
        name: opt_string(e, "name"),
    })
}

pub(crate) fn read_user(e: &Element) -> Result<User, ParseError> {
    Ok(User {
        id: required_id(e, "user")?,
        name: opt_string(e, "name"),
        display_name: opt_string(e, "display_name"),
        primary_email: opt_string(e, "primaryEmail"),
    })
}

pub(crate) fn read_group(e: &Element) -> Result<Group, ParseError> {
    Ok(Group {
        id: required_id(e, "group")?,
        name: opt_string(e, "name"),
        display_name: opt_string(e, "displayname"),
        members: e
            .fields("members")
            .map(|m| number(m, "a group member id"))
            .collect::<Result<_, _>>()?,
    })
}

pub(crate) fn read_account(e: &Element) -> Result<SecondaryAccount, ParseError> {
    let opt_number = |field: &str| -> Result<Option<u32>, ParseError> {
        e.field(field)
            .map(|t| number(t, &format!("the account's {field}")))
            .transpose()
    };
    Ok(SecondaryAccount {
        id: opt_number("id")?,
        user_id: opt_number("userId")?,
        primary_address: opt_string(e, "primaryAddress"),
        name: opt_string(e, "name"),
        login: opt_string(e, "login"),
    })
}

fn transport_error(call: &str, url: &Url, e: &reqwest::Error, key: &str) -> OxError {
    let failure = transport_failure(e, key);
    OxError::Transport {
        call: call.to_string(),
        url: url.to_string(),
        kind: failure.kind,
        cause: failure.cause.map(|c| format!(": {c}")).unwrap_or_default(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn client(url: &str) -> Result<OxClient, OxError> {
        OxClient::new(
            url,
            "admin",
            SecretValue::new("pw"),
            Duration::from_secs(5),
            &HttpTls::default(),
        )
    }

    #[test]
    fn service_urls_are_below_webservices() {
        let c = client("http://ox.example:8009").unwrap();
        assert_eq!(
            c.service_url(Service::User).as_str(),
            "http://ox.example:8009/webservices/OXUserService"
        );
        let c = client("https://ox.example/prefix/").unwrap();
        assert_eq!(
            c.service_url(Service::SecondaryAccount).as_str(),
            "https://ox.example/prefix/webservices/OXSecondaryAccountService"
        );
        let c = client("http://ox.example/webservices/").unwrap();
        assert_eq!(
            c.service_url(Service::Context).as_str(),
            "http://ox.example/webservices/OXContextService"
        );
    }

    #[test]
    fn unusable_urls_are_refused() {
        assert!(client("ox.example").is_err());
        assert!(client("ftp://ox.example").is_err());
        let err = client("http://admin:hunter2@ox.example").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    fn answered(status: u16, body: &str) -> ActionError {
        let url = Url::parse("http://ox.example/webservices/OXUserService").unwrap();
        let status = reqwest::StatusCode::from_u16(status).unwrap();
        let e = read_response(
            "OXUserService.change".into(),
            &url,
            status,
            Some("text/html"),
            body.as_bytes(),
        )
        .unwrap_err();
        let text = e.to_string();
        let action = ActionError::from(e);
        assert_eq!(action.to_string(), text, "the message is kept");
        action
    }

    fn fault(faultstring: &str, exception: &str) -> String {
        format!(
            r#"<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body><soap:Fault><faultcode>soap:Server</faultcode><faultstring>{faultstring}</faultstring><detail><{exception} xmlns="http://soap.admin.openexchange.com"/></detail></soap:Fault></soap:Body></soap:Envelope>"#
        )
    }

    #[test]
    fn ox_answers_become_the_action_error_that_says_what_happened() {
        let auth = fault(
            "Authentication failed; exceptionId 1-2",
            "InvalidCredentialsException",
        );
        assert!(matches!(answered(500, &auth), ActionError::Refused(_)));
        let disabled = fault(
            "Changing username is disabled!; exceptionId 1-3",
            "InvalidDataException",
        );
        assert!(matches!(answered(500, &disabled), ActionError::Refused(_)));
        let missing = fault(
            "No such user 99 in context 1; exceptionId 1-4",
            "NoSuchUserException",
        );
        assert!(matches!(answered(500, &missing), ActionError::NotFound(_)));
        let other = fault("SQL problem; exceptionId 1-5", "StorageException");
        assert!(matches!(answered(500, &other), ActionError::Failed(_)));
        assert!(matches!(
            answered(403, "<html>forbidden</html>"),
            ActionError::Refused(_)
        ));
        assert!(matches!(
            answered(503, "<html>down</html>"),
            ActionError::Unavailable(_)
        ));
        let redirect = answered(302, "<html>a login page, with a token</html>");
        assert!(
            redirect.to_string().ends_with(
                "answered HTTP 302: (the body is not quoted: a redirect (302 Found), not followed)"
            ),
            "{redirect}"
        );
        let url = Url::parse("http://ox.example/webservices/OXUserService").unwrap();
        let binary = read_response(
            "OXUserService.change".into(),
            &url,
            reqwest::StatusCode::INTERNAL_SERVER_ERROR,
            Some("application/octet-stream"),
            b"secret bytes",
        )
        .unwrap_err()
        .to_string();
        assert!(!binary.contains("secret"), "{binary}");
        let long = answered(500, &"y".repeat(300)).to_string();
        assert!(
            long.ends_with(&format!(": {}...", "y".repeat(200))),
            "{long}"
        );
        let unreadable = answered(200, "<html>not SOAP</html>");
        assert!(
            matches!(unreadable, ActionError::InvalidAnswer(_)),
            "{unreadable:?}"
        );
    }

    #[test]
    fn data_objects_are_read_from_direct_children() {
        let root = soap::parse(
            br#"<return xmlns:d="x"><d:id>7</d:id><d:name>Staff</d:name><d:displayname>All Staff</d:displayname><d:members>3</d:members><d:members>4</d:members></return>"#,
        )
        .unwrap();
        let g = read_group(&root).unwrap();
        assert_eq!(g.id, 7);
        assert_eq!(g.name.as_deref(), Some("Staff"));
        assert_eq!(g.members, [3, 4]);
        let bad = soap::parse(br#"<return><id>x</id></return>"#).unwrap();
        assert!(read_user(&bad).unwrap_err().0.contains("not a number"));
        let none = soap::parse(br#"<return><name>a</name></return>"#).unwrap();
        assert!(read_context(&none).is_err());
    }
}
