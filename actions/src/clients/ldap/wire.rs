//! A lean LDAPv3 client (RFC 4511) for the one job that has to be fast: many modify/replace
//! operations on one connection. Requests are BER-encoded here and written in batches (many
//! requests per write), up to a window of outstanding requests; responses are matched to
//! their entries by message id as they come back, in any order. Everything else (binding for
//! searches, paged searches) goes through the `ldap3` crate.
//!
//! Transports: `ldap://` (TCP, optionally upgraded with StartTLS), `ldaps://` (TLS through
//! rustls with the ring provider, set up by [`crate::clients::tls`]) and `ldapi://` (a Unix
//! socket).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Semaphore, watch};

use super::{Refused, Replace};
use crate::progress::Progress;

/// A byte stream to an LDAP server.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Where an LDAP URL points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// `ldap://host:port`.
    Tcp { host: String, port: u16 },
    /// `ldaps://host:port`.
    Tls { host: String, port: u16 },
    /// `ldapi://<percent-encoded socket path>`.
    Unix { path: String },
}

/// Why the lean client could not do its job. Each message says what and where, as it did when
/// these were plain strings; the variant says whose fault it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum WireError {
    /// The URL cannot be used (not an LDAP URL, no host, a bad port or %-escape).
    #[error("{0}")]
    Url(String),
    /// No connection (refused, TLS, a timeout), or it broke or went silent.
    #[error("{0}")]
    Connection(String),
    /// What the server sent is not the LDAP message it should be.
    #[error("{0}")]
    Protocol(String),
}

/// The default socket of `ldapi:///` (Debian's slapd).
const DEFAULT_LDAPI: &str = "/var/run/slapd/ldapi";

fn percent_decode(text: &str) -> Result<String, WireError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| WireError::Url(format!("{text:?} has an invalid %-escape")))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out)
        .map_err(|_| WireError::Url(format!("{text:?} is not UTF-8 once decoded")))
}

/// Reads `ldap://host[:port][/...]`, `ldaps://...` or `ldapi://[socket]`.
pub(crate) fn parse_url(url: &str) -> Result<Target, WireError> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| WireError::Url(format!("{url:?} is not an LDAP URL")))?;
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    match scheme.to_ascii_lowercase().as_str() {
        "ldapi" => {
            let path = percent_decode(authority)?;
            Ok(Target::Unix {
                path: if path.is_empty() {
                    DEFAULT_LDAPI.to_string()
                } else {
                    path
                },
            })
        }
        scheme @ ("ldap" | "ldaps") => {
            let default_port = if scheme == "ldap" { 389 } else { 636 };
            let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
                let (host, after) = v6
                    .split_once(']')
                    .ok_or_else(|| WireError::Url(format!("{url:?}: unclosed [ in the host")))?;
                (host.to_string(), after.strip_prefix(':'))
            } else {
                match authority.rsplit_once(':') {
                    Some((h, p)) => (h.to_string(), Some(p)),
                    None => (authority.to_string(), None),
                }
            };
            if host.is_empty() {
                return Err(WireError::Url(format!("{url:?} names no host")));
            }
            let port = match port {
                Some(p) => p
                    .parse::<u16>()
                    .map_err(|_| WireError::Url(format!("{url:?}: {p:?} is not a port")))?,
                None => default_port,
            };
            Ok(if scheme == "ldap" {
                Target::Tcp { host, port }
            } else {
                Target::Tls { host, port }
            })
        }
        other => Err(WireError::Url(format!(
            "{url:?}: {other:?} is not an LDAP scheme"
        ))),
    }
}

/// How a connection is secured with TLS: the rustls config (built by [`crate::clients::tls`])
/// and whether an `ldap://` connection upgrades with StartTLS first. An `ldaps://` URL uses
/// TLS from the start.
#[derive(Clone)]
pub(crate) struct WireTls {
    /// The client config.
    pub(crate) config: Arc<rustls::ClientConfig>,
    /// StartTLS on `ldap://`.
    pub(crate) starttls: bool,
}

impl std::fmt::Debug for WireTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireTls")
            .field("starttls", &self.starttls)
            .finish_non_exhaustive()
    }
}

/// The StartTLS extended operation's name (RFC 4511 section 4.14).
const START_TLS_OID: &str = "1.3.6.1.4.1.1466.20037";

/// Asks for StartTLS on a fresh `ldap://` connection and waits for the server's yes.
async fn start_tls(io: &mut tokio::net::TcpStream) -> Result<(), WireError> {
    let broken = |e: std::io::Error| WireError::Connection(format!("StartTLS: {e}"));
    io.write_all(&encode_start_tls(1)).await.map_err(broken)?;
    io.flush().await.map_err(broken)?;
    let mut buf = Vec::new();
    match next_response(io, &mut buf).await? {
        Some(r) if r.op == 0x78 && r.code == 0 => Ok(()),
        Some(r) if r.op == 0x78 => Err(WireError::Connection(format!(
            "the server refused StartTLS (result code {}): {} (does it have a certificate? else use tls: none or ldaps)",
            r.code, r.message
        ))),
        Some(r) => Err(WireError::Protocol(format!(
            "unexpected answer 0x{:02x} to StartTLS",
            r.op
        ))),
        None => Err(WireError::Connection(
            "the server closed the connection at StartTLS".into(),
        )),
    }
}

/// A TLS handshake on `stream` with `host`'s name (or address).
async fn handshake(
    stream: tokio::net::TcpStream,
    host: &str,
    tls: &WireTls,
) -> Result<Box<dyn Io>, WireError> {
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| WireError::Url(format!("{host:?} is not a server name: {e}")))?;
    let stream = tokio_rustls::TlsConnector::from(tls.config.clone())
        .connect(name, stream)
        .await
        .map_err(|e| WireError::Connection(format!("TLS: {e}")))?;
    Ok(Box::new(stream))
}

/// Opens a connection to `url` within `timeout`.
/// `tls` is required for `ldaps://`, and with `starttls` upgrades an `ldap://` connection.
pub(crate) async fn connect(
    url: &str,
    timeout: Duration,
    tls: Option<&WireTls>,
) -> Result<Box<dyn Io>, WireError> {
    let target = parse_url(url)?;
    let broken = WireError::Connection;
    let open = async {
        Ok::<Box<dyn Io>, WireError>(match target {
            Target::Tcp { host, port } => {
                let mut stream = tokio::net::TcpStream::connect((host.as_str(), port))
                    .await
                    .map_err(|e| broken(e.to_string()))?;
                let _ = stream.set_nodelay(true);
                match tls.filter(|t| t.starttls) {
                    Some(tls) => {
                        start_tls(&mut stream).await?;
                        handshake(stream, &host, tls).await?
                    }
                    None => Box::new(stream),
                }
            }
            Target::Tls { host, port } => {
                let tls = tls.ok_or_else(|| {
                    WireError::Url(format!(
                        "{url:?} is ldaps:// but no TLS settings were given"
                    ))
                })?;
                let stream = tokio::net::TcpStream::connect((host.as_str(), port))
                    .await
                    .map_err(|e| broken(e.to_string()))?;
                let _ = stream.set_nodelay(true);
                handshake(stream, &host, tls).await?
            }
            Target::Unix { path } => Box::new(
                tokio::net::UnixStream::connect(&path)
                    .await
                    .map_err(|e| broken(format!("{path}: {e}")))?,
            ),
        })
    };
    match tokio::time::timeout(timeout, open).await {
        Ok(r) => r,
        Err(_) => Err(broken(format!(
            "no connection after {}s",
            timeout.as_secs()
        ))),
    }
}

// --- BER encoding ------------------------------------------------------------------------

fn length_len(len: usize) -> usize {
    if len < 0x80 {
        1
    } else {
        1 + (usize::BITS as usize / 8 - len.leading_zeros() as usize / 8)
    }
}

fn tlv_len(content: usize) -> usize {
    1 + length_len(content) + content
}

fn header(out: &mut Vec<u8>, tag: u8, len: usize) {
    out.push(tag);
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
}

fn integer_bytes(value: i32) -> Vec<u8> {
    let bytes = value.to_be_bytes();
    let mut start = 0;
    while start < 3
        && ((bytes[start] == 0 && bytes[start + 1] & 0x80 == 0)
            || (bytes[start] == 0xff && bytes[start + 1] & 0x80 != 0))
    {
        start += 1;
    }
    bytes[start..].to_vec()
}

fn octets(out: &mut Vec<u8>, tag: u8, value: &[u8]) {
    header(out, tag, value.len());
    out.extend_from_slice(value);
}

/// `LDAPMessage { messageID, ModifyRequest { dn, [ replace: attr = { value } ] } }`.
pub(crate) fn encode_modify_replace(out: &mut Vec<u8>, id: i32, change: &Replace) {
    let id_bytes = integer_bytes(id);
    let value = tlv_len(change.value.len());
    let vals = tlv_len(value);
    let partial = tlv_len(tlv_len(change.attr.len()) + vals);
    let one_change = tlv_len(3 + partial);
    let changes = tlv_len(one_change);
    let request_content = tlv_len(change.dn.len()) + changes;
    header(
        out,
        0x30,
        tlv_len(id_bytes.len()) + tlv_len(request_content),
    );
    octets(out, 0x02, &id_bytes);
    header(out, 0x66, request_content);
    octets(out, 0x04, change.dn.as_bytes());
    header(out, 0x30, one_change);
    header(out, 0x30, 3 + partial);
    out.extend_from_slice(&[0x0a, 0x01, 0x02]);
    header(out, 0x30, tlv_len(change.attr.len()) + vals);
    octets(out, 0x04, change.attr.as_bytes());
    header(out, 0x31, value);
    octets(out, 0x04, change.value.as_bytes());
}

/// `LDAPMessage { messageID, BindRequest { version 3, name, simple password } }`.
fn encode_bind(id: i32, dn: &str, password: &str) -> Vec<u8> {
    let id_bytes = integer_bytes(id);
    let content = 3 + tlv_len(dn.len()) + tlv_len(password.len());
    let mut out = Vec::with_capacity(16 + content);
    header(&mut out, 0x30, tlv_len(id_bytes.len()) + tlv_len(content));
    octets(&mut out, 0x02, &id_bytes);
    header(&mut out, 0x60, content);
    out.extend_from_slice(&[0x02, 0x01, 0x03]);
    octets(&mut out, 0x04, dn.as_bytes());
    octets(&mut out, 0x80, password.as_bytes());
    out
}

/// `LDAPMessage { messageID, ExtendedRequest { requestName StartTLS } }`.
fn encode_start_tls(id: i32) -> Vec<u8> {
    let id_bytes = integer_bytes(id);
    let content = tlv_len(START_TLS_OID.len());
    let mut out = Vec::with_capacity(40);
    header(&mut out, 0x30, tlv_len(id_bytes.len()) + tlv_len(content));
    octets(&mut out, 0x02, &id_bytes);
    header(&mut out, 0x77, content);
    octets(&mut out, 0x80, START_TLS_OID.as_bytes());
    out
}

/// `LDAPMessage { messageID, UnbindRequest }`.
fn encode_unbind(id: i32) -> Vec<u8> {
    let id_bytes = integer_bytes(id);
    let mut out = Vec::with_capacity(10);
    header(&mut out, 0x30, tlv_len(id_bytes.len()) + 2);
    octets(&mut out, 0x02, &id_bytes);
    out.extend_from_slice(&[0x42, 0x00]);
    out
}

// --- BER decoding ------------------------------------------------------------------------

/// A decoded TLV: tag, content, and how many bytes it took.
type Tlv<'a> = (u8, &'a [u8], usize);

/// One TLV at the start of `buf`: `(tag, content, total length)`; `Ok(None)` when `buf`
/// does not hold all of it yet.
pub(crate) fn tlv(buf: &[u8]) -> Result<Option<Tlv<'_>>, WireError> {
    let (Some(&tag), Some(&first)) = (buf.first(), buf.get(1)) else {
        return Ok(None);
    };
    let (len, header_len) = if first < 0x80 {
        (usize::from(first), 2)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return Err(WireError::Protocol(format!(
                "unsupported BER length form 0x{first:02x}"
            )));
        }
        let Some(bytes) = buf.get(2..2 + n) else {
            return Ok(None);
        };
        (
            bytes
                .iter()
                .fold(0usize, |acc, b| (acc << 8) | usize::from(*b)),
            2 + n,
        )
    };
    match buf.get(header_len..header_len + len) {
        Some(content) => Ok(Some((tag, content, header_len + len))),
        None => Ok(None),
    }
}

/// A TLV that must be complete inside an already complete message.
fn inner(buf: &[u8]) -> Result<Tlv<'_>, WireError> {
    tlv(buf)?.ok_or_else(|| WireError::Protocol("truncated LDAP message".to_string()))
}

fn integer(content: &[u8]) -> i64 {
    let mut value: i64 = if content.first().is_some_and(|b| b & 0x80 != 0) {
        -1
    } else {
        0
    };
    for b in content.iter().take(8) {
        value = (value << 8) | i64::from(*b);
    }
    value
}

/// A response: its message id, protocol op tag, result code and diagnostic message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Response {
    pub(crate) id: i64,
    pub(crate) op: u8,
    pub(crate) code: u32,
    pub(crate) message: String,
}

/// Reads one complete `LDAPMessage` carrying an LDAPResult.
pub(crate) fn parse_response(message: &[u8]) -> Result<Response, WireError> {
    let (tag, content, _) = inner(message)?;
    if tag != 0x30 {
        return Err(WireError::Protocol(format!(
            "expected an LDAPMessage, got tag 0x{tag:02x}"
        )));
    }
    let (id_tag, id, used) = inner(content)?;
    if id_tag != 0x02 {
        return Err(WireError::Protocol(
            "LDAPMessage without a message id".into(),
        ));
    }
    let (op, result, _) = inner(&content[used..])?;
    let (code_tag, code, used) = inner(result)?;
    if code_tag != 0x0a {
        return Err(WireError::Protocol(format!(
            "response 0x{op:02x} without a result code"
        )));
    }
    let (_, _matched, used2) = inner(&result[used..])?;
    let (_, diagnostic, _) = inner(&result[used + used2..])?;
    Ok(Response {
        id: integer(id),
        op,
        code: u32::try_from(integer(code)).unwrap_or(u32::MAX),
        message: String::from_utf8_lossy(diagnostic).into_owned(),
    })
}

/// Reads the next complete response from `io`, buffering in `buf`; `Ok(None)` at the end of
/// the stream.
async fn next_response(
    io: &mut (impl AsyncRead + Unpin),
    buf: &mut Vec<u8>,
) -> Result<Option<Response>, WireError> {
    loop {
        if let Some((_, _, total)) = tlv(buf)? {
            let response = parse_response(&buf[..total]);
            buf.drain(..total);
            return response.map(Some);
        }
        let mut chunk = [0u8; 64 * 1024];
        let n = io
            .read(&mut chunk)
            .await
            .map_err(|e| WireError::Connection(e.to_string()))?;
        if n == 0 {
            return if buf.is_empty() {
                Ok(None)
            } else {
                Err(WireError::Connection(
                    "the connection closed inside a message".into(),
                ))
            };
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Why a bind failed.
#[derive(Debug)]
pub(crate) enum BindFailure {
    /// The server answered with this result (`code`, text).
    Refused(u32, String),
    /// No usable answer.
    Broken(String),
}

/// A connection bound as a DN.
pub(crate) struct Bound {
    io: Box<dyn Io>,
    buf: Vec<u8>,
}

impl std::fmt::Debug for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Bound")
    }
}

/// Simple bind on a fresh connection.
pub(crate) async fn bind(
    mut io: Box<dyn Io>,
    dn: &str,
    password: &str,
    timeout: Duration,
) -> Result<Bound, BindFailure> {
    let exchange = async {
        io.write_all(&encode_bind(1, dn, password))
            .await
            .map_err(|e| BindFailure::Broken(e.to_string()))?;
        io.flush()
            .await
            .map_err(|e| BindFailure::Broken(e.to_string()))?;
        let mut buf = Vec::new();
        match next_response(&mut io, &mut buf).await {
            Ok(Some(r)) if r.id == 1 && r.op == 0x61 && r.code == 0 => Ok(buf),
            Ok(Some(r)) if r.id == 1 && r.op == 0x61 => {
                Err(BindFailure::Refused(r.code, r.message))
            }
            Ok(Some(r)) => Err(BindFailure::Broken(format!(
                "unexpected answer to the bind: {}",
                r.message
            ))),
            Ok(None) => Err(BindFailure::Broken(
                "the server closed the connection".into(),
            )),
            Err(e) => Err(BindFailure::Broken(e.to_string())),
        }
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(Ok(buf)) => Ok(Bound { io, buf }),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(BindFailure::Broken(format!(
            "no answer to the bind after {}s",
            timeout.as_secs()
        ))),
    }
}

/// The result of a modify the server did not carry out: `(code, text)`.
pub(crate) type Outcome = (String, u32, String);

impl Bound {
    /// Sends every change as a modify/replace, at most `window` unanswered at a time,
    /// batching the requests that are ready into one write, each answer counted in
    /// `answered`. Returns the changes the server refused (DN, result code, text). Fails when the connection breaks or the server stays
    /// silent for `timeout` with requests outstanding.
    pub(crate) async fn modify_all(
        self,
        changes: impl Stream<Item = Replace> + Send,
        window: usize,
        timeout: Duration,
        answered: &Progress,
    ) -> Result<(usize, Vec<Outcome>), WireError> {
        let Bound { io, mut buf } = self;
        let (mut reader, mut writer) = tokio::io::split(io);
        // slapd stops reading from (and eventually drops) a connection with more than
        // `conn_max_pending_auth` (default 1,000) requests pending: stay well below.
        let window = window.clamp(1, 512);
        let permits = Arc::new(Semaphore::new(window));
        let pending: Arc<Mutex<HashMap<i64, String>>> = Arc::default();
        let (sent_tx, mut sent_rx) = watch::channel::<Option<usize>>(None);

        let write = {
            let permits = permits.clone();
            let pending = pending.clone();
            async move {
                let broken = WireError::Connection;
                let mut id: i32 = 2;
                let mut sent = 0usize;
                let mut batches = Box::pin(changes.ready_chunks(256));
                let mut out = Vec::with_capacity(64 * 1024);
                while let Some(batch) = batches.next().await {
                    for change in batch {
                        permits
                            .acquire()
                            .await
                            .map_err(|e| broken(e.to_string()))?
                            .forget();
                        encode_modify_replace(&mut out, id, &change);
                        if let Ok(mut p) = pending.lock() {
                            p.insert(i64::from(id), change.dn);
                        }
                        id = id.checked_add(1).ok_or_else(|| {
                            WireError::Protocol("too many requests on one connection".into())
                        })?;
                        sent += 1;
                        // Write when the window is full or enough is buffered; never hold
                        // requests back while waiting for answers.
                        if permits.available_permits() == 0 || out.len() >= 64 * 1024 {
                            writer
                                .write_all(&out)
                                .await
                                .map_err(|e| broken(e.to_string()))?;
                            out.clear();
                        }
                    }
                    if !out.is_empty() {
                        writer
                            .write_all(&out)
                            .await
                            .map_err(|e| broken(e.to_string()))?;
                        out.clear();
                    }
                    writer.flush().await.map_err(|e| broken(e.to_string()))?;
                }
                let _ = sent_tx.send(Some(sent));
                Ok::<_, WireError>((writer, id))
            }
        };

        let read = async {
            let mut received = 0usize;
            let mut refused: Vec<Outcome> = Vec::new();
            loop {
                if let Some(total) = *sent_rx.borrow()
                    && received >= total
                {
                    return Ok((received, refused));
                }
                let outstanding = pending.lock().map(|p| p.len()).unwrap_or(0);
                tokio::select! {
                    changed = sent_rx.changed() => {
                        if changed.is_err() && sent_rx.borrow().is_none() {
                            // The writer stopped early; its error is reported.
                            return Ok((received, refused));
                        }
                    }
                    response = async {
                        if outstanding > 0 {
                            tokio::time::timeout(timeout, next_response(&mut reader, &mut buf))
                                .await
                                .unwrap_or_else(|_| Err(WireError::Connection(format!(
                                    "no answer for {}s with {outstanding} modifications outstanding",
                                    timeout.as_secs()
                                ))))
                        } else {
                            next_response(&mut reader, &mut buf).await
                        }
                    } => {
                        let response = response?.ok_or_else(|| {
                            WireError::Connection(format!("the server closed the connection after {received} answers"))
                        })?;
                        if response.id == 0 {
                            return Err(WireError::Connection(format!("the server ended the session: {}", response.message)));
                        }
                        let dn = pending
                            .lock()
                            .ok()
                            .and_then(|mut p| p.remove(&response.id))
                            .ok_or_else(|| WireError::Protocol(format!("an answer to unknown message {}", response.id)))?;
                        permits.add_permits(1);
                        received += 1;
                        answered.add(1);
                        if response.code != 0 {
                            refused.push((dn, response.code, response.message));
                        }
                    }
                }
            }
        };

        // Either side failing ends both: a writer waiting for a window slot must not wait for
        // a reader that has given up (the connection broke).
        let ((mut writer, id), (received, refused)) = tokio::try_join!(write, read)?;
        let _ = writer.write_all(&encode_unbind(id)).await;
        let _ = writer.shutdown().await;
        Ok((received, refused))
    }
}

/// Turns refused outcomes into [`Refused`] with `describe` naming the result code.
pub(crate) fn refused(
    outcomes: Vec<Outcome>,
    describe: impl Fn(u32, &str) -> String,
) -> Vec<Refused> {
    outcomes
        .into_iter()
        .map(|(dn, code, text)| Refused {
            dn: Some(dn),
            message: describe(code, &text),
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            parse_url("ldap://ums-ldap-server-primary:389").unwrap(),
            Target::Tcp {
                host: "ums-ldap-server-primary".into(),
                port: 389
            }
        );
        assert_eq!(
            parse_url("ldaps://ldap.example/").unwrap(),
            Target::Tls {
                host: "ldap.example".into(),
                port: 636
            }
        );
        assert_eq!(
            parse_url("ldap://[::1]:1389").unwrap(),
            Target::Tcp {
                host: "::1".into(),
                port: 1389
            }
        );
        assert_eq!(
            parse_url("ldapi://%2Ftmp%2Fx%2Fldapi").unwrap(),
            Target::Unix {
                path: "/tmp/x/ldapi".into()
            }
        );
        assert_eq!(
            parse_url("ldapi:///").unwrap(),
            Target::Unix {
                path: DEFAULT_LDAPI.into()
            }
        );
        assert!(parse_url("http://x").is_err());
        assert!(parse_url("ldap://:389").is_err());
        assert!(parse_url("ldap://x:http").is_err());
        assert!(parse_url("ldapi://%zz").is_err());
    }

    #[test]
    fn lengths_and_integers() {
        let mut out = Vec::new();
        header(&mut out, 0x04, 5);
        header(&mut out, 0x04, 200);
        header(&mut out, 0x04, 70000);
        assert_eq!(
            out,
            [0x04, 5, 0x04, 0x81, 200, 0x04, 0x83, 0x01, 0x11, 0x70]
        );
        assert_eq!(tlv_len(5), 7);
        assert_eq!(tlv_len(200), 203);
        assert_eq!(tlv_len(70000), 70005);
        assert_eq!(integer_bytes(1), [1]);
        assert_eq!(integer_bytes(128), [0, 128]);
        assert_eq!(integer_bytes(70000), [0x01, 0x11, 0x70]);
        assert_eq!(integer_bytes(-1), [0xff]);
        assert_eq!(integer(&[0, 128]), 128);
        assert_eq!(integer(&[0xff]), -1);
    }

    #[test]
    fn a_modify_request_is_valid_ber() {
        let change = Replace {
            dn: "uid=alice,dc=x".into(),
            attr: "univentionObjectIdentifier".into(),
            value: "0d4f8a30-1b2c-103f-8a1e-5b1f2c3d4e5f".into(),
        };
        let mut out = Vec::new();
        encode_modify_replace(&mut out, 300, &change);
        // Walk it back.
        let (tag, msg, total) = tlv(&out).unwrap().unwrap();
        assert_eq!((tag, total), (0x30, out.len()));
        let (_, id, used) = inner(msg).unwrap();
        assert_eq!(integer(id), 300);
        let (op, req, used2) = inner(&msg[used..]).unwrap();
        assert_eq!(op, 0x66);
        assert_eq!(used + used2, msg.len());
        let (_, dn, used) = inner(req).unwrap();
        assert_eq!(dn, change.dn.as_bytes());
        let (_, changes, _) = inner(&req[used..]).unwrap();
        let (_, one, _) = inner(changes).unwrap();
        assert_eq!(&one[..3], [0x0a, 0x01, 0x02]);
        let (_, partial, _) = inner(&one[3..]).unwrap();
        let (_, attr, used) = inner(partial).unwrap();
        assert_eq!(attr, change.attr.as_bytes());
        let (set_tag, set, _) = inner(&partial[used..]).unwrap();
        assert_eq!(set_tag, 0x31);
        let (_, value, _) = inner(set).unwrap();
        assert_eq!(value, change.value.as_bytes());

        // A long DN needs long-form lengths at every level.
        let long = Replace {
            dn: format!("uid={},dc=x", "a".repeat(300)),
            ..change
        };
        let mut out = Vec::new();
        encode_modify_replace(&mut out, 2, &long);
        let (_, msg, total) = tlv(&out).unwrap().unwrap();
        assert_eq!(total, out.len());
        let (_, _, used) = inner(msg).unwrap();
        let (_, req, _) = inner(&msg[used..]).unwrap();
        let (_, dn, _) = inner(req).unwrap();
        assert_eq!(dn, long.dn.as_bytes());
    }

    #[test]
    fn responses_are_read_and_incomplete_ones_wait() {
        // ModifyResponse, id 7, insufficientAccessRights (50), text "no write access".
        let text = b"no write access";
        let mut op = vec![0x0a, 0x01, 50, 0x04, 0x00, 0x04, text.len() as u8];
        op.extend_from_slice(text);
        let mut msg = vec![0x02, 0x01, 7, 0x67, op.len() as u8];
        msg.extend_from_slice(&op);
        let mut full = vec![0x30, msg.len() as u8];
        full.extend_from_slice(&msg);
        assert!(tlv(&full[..full.len() - 1]).unwrap().is_none());
        let r = parse_response(&full).unwrap();
        assert_eq!(
            r,
            Response {
                id: 7,
                op: 0x67,
                code: 50,
                message: "no write access".into()
            }
        );
        assert!(
            tlv(&[0x30, 0x80]).is_err(),
            "indefinite lengths are not LDAP"
        );
    }

    /// A server that answers the bind and two modifications, then hangs up while the client
    /// waits for answers (its window full): the pipeline fails naming what happened instead of
    /// waiting forever for a window slot.
    #[tokio::test]
    async fn a_connection_lost_midway_fails_the_pipeline() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = Vec::new();
            let answer = |id: u8, op: u8| {
                vec![
                    0x30, 0x0c, 0x02, 0x01, id, op, 0x07, 0x0a, 0x01, 0x00, 0x04, 0x00, 0x04, 0x00,
                ]
            };
            // The bind.
            let _ = next_message(&mut socket, &mut buf).await;
            socket.write_all(&answer(1, 0x61)).await.unwrap();
            for id in 2..4u8 {
                let _ = next_message(&mut socket, &mut buf).await;
                socket.write_all(&answer(id, 0x67)).await.unwrap();
            }
            // Take in everything the client sends until it waits for answers, then hang up
            // (an orderly close, with requests outstanding).
            let mut chunk = [0u8; 65536];
            while let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_millis(300), socket.read(&mut chunk)).await
            {
                if n == 0 {
                    break;
                }
            }
        });
        let io = connect(
            &format!("ldap://127.0.0.1:{port}"),
            Duration::from_secs(5),
            None,
        )
        .await
        .unwrap();
        let bound = bind(io, "cn=admin", "pw", Duration::from_secs(5))
            .await
            .unwrap();
        let changes = (0..1000).map(|i| Replace {
            dn: format!("uid=u{i},dc=x"),
            attr: "univentionObjectIdentifier".into(),
            value: "0d4f8a30-1b2c-103f-8a1e-5b1f2c3d4e5f".into(),
        });
        let answered = Progress::default();
        answered.phase("setting", Some(1000), "entries");
        let result = tokio::time::timeout(
            Duration::from_secs(20),
            bound.modify_all(
                futures::stream::iter(changes),
                64,
                Duration::from_secs(5),
                &answered,
            ),
        )
        .await
        .expect("the pipeline ends");
        let err = result.unwrap_err();
        assert!(
            err.to_string()
                .contains("closed the connection after 2 answers"),
            "{err}"
        );
        assert_eq!(
            answered.snapshot().unwrap().done,
            2,
            "the answers received are counted, the unanswered ones are not"
        );
        server.await.unwrap();
    }

    /// Reads one complete BER message (any tag) from a test server's socket.
    async fn next_message(io: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) -> Vec<u8> {
        loop {
            if let Some((_, _, total)) = tlv(buf).unwrap() {
                return buf.drain(..total).collect();
            }
            let mut chunk = [0u8; 4096];
            let n = io.read(&mut chunk).await.unwrap();
            assert!(n > 0, "client hung up");
            buf.extend_from_slice(&chunk[..n]);
        }
    }

    #[test]
    fn a_start_tls_request_is_valid_ber() {
        let encoded = encode_start_tls(1);
        let (tag, content, total) = tlv(&encoded).unwrap().unwrap();
        assert_eq!((tag, total), (0x30, encoded.len()));
        let (id_tag, id, used) = inner(content).unwrap();
        assert_eq!((id_tag, integer(id)), (0x02, 1));
        let (op, request, _) = inner(&content[used..]).unwrap();
        assert_eq!(op, 0x77);
        let (name_tag, name, _) = inner(request).unwrap();
        assert_eq!(name_tag, 0x80);
        assert_eq!(name, START_TLS_OID.as_bytes());
    }

    #[test]
    fn bind_and_unbind_requests() {
        let bind = encode_bind(1, "cn=admin,dc=x", "pw");
        let (tag, msg, total) = tlv(&bind).unwrap().unwrap();
        assert_eq!((tag, total), (0x30, bind.len()));
        let (_, _, used) = inner(msg).unwrap();
        let (op, req, _) = inner(&msg[used..]).unwrap();
        assert_eq!(op, 0x60);
        assert_eq!(&req[..3], [0x02, 0x01, 0x03]);
        assert_eq!(encode_unbind(5), [0x30, 0x05, 0x02, 0x01, 0x05, 0x42, 0x00]);
    }
}
