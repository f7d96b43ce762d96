//! A counting TCP proxy in front of a real Redis or LDAP server, for the fault tests: it reads
//! the client's requests as the protocol frames them (RESP arrays, LDAP messages), logs every
//! destructive one (Redis `UNLINK`/`DEL` with its keys; LDAP modify, add and delete with its
//! DN), and can hold the client's next destructive request once `k` have been forwarded, so
//! that a test knows exactly how many the server has served when it kills the client. The
//! server is real and unchanged; the proxy only frames, counts and (when told) waits.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// The protocol the proxy frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// Redis: RESP arrays of bulk strings.
    Resp,
    /// LDAP: BER-encoded LDAPMessages.
    Ldap,
}

/// One destructive request, as forwarded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destructive {
    /// `UNLINK`, `DEL`, `modify`, `add` or `delete`.
    pub op: String,
    /// The keys (Redis) or the one DN (LDAP) it changes.
    pub targets: Vec<String>,
}

#[derive(Debug, Default)]
struct State {
    ignore: Option<String>,
    forwarded: Vec<Destructive>,
    hold_after: Option<usize>,
    holding: bool,
    /// Bumped by [`WireProxy::drop_held`]: a connection holding a request when it changes
    /// forwards nothing more.
    drops: u64,
}

/// The proxy, serving until dropped.
#[derive(Debug)]
pub struct WireProxy {
    port: u16,
    state: Arc<Mutex<State>>,
    release: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl WireProxy {
    /// Listens on a loopback port and forwards every connection to `127.0.0.1:upstream`.
    pub async fn start(wire: Wire, upstream: u16) -> Self {
        let listener = match TcpListener::bind("127.0.0.1:0").await {
            Ok(l) => l,
            Err(e) => panic!("cannot bind the wire proxy: {e}"),
        };
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        let state = Arc::new(Mutex::new(State::default()));
        let release = Arc::new(Notify::new());
        let (s, r) = (state.clone(), release.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (s, r) = (s.clone(), r.clone());
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await {
                        pump(wire, client, server, s, r).await;
                    }
                });
            }
        });
        Self {
            port,
            state,
            release,
            task,
        }
    }

    /// The proxy's port (what the client is configured with).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Neither counts nor holds a destructive request whose every target contains `marker`
    /// (a permission probe of a key that cannot exist, say); it is forwarded all the same.
    pub fn ignore_containing(&self, marker: &str) {
        self.lock().ignore = Some(marker.to_string());
    }

    /// Holds every destructive request after the first `k` forwarded from now on (counting
    /// those already forwarded).
    pub fn hold_after(&self, k: usize) {
        self.lock().hold_after = Some(k);
    }

    /// Whether a destructive request is being held (the `k + 1`-th arrived).
    pub fn holding(&self) -> bool {
        self.lock().holding
    }

    /// Waits (up to `timeout`) until a destructive request is held; `false` on timeout.
    pub async fn wait_holding(&self, timeout: Duration) -> bool {
        let until = tokio::time::Instant::now() + timeout;
        while tokio::time::Instant::now() < until {
            if self.holding() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        false
    }

    /// Stops holding: held requests of live connections go on, new ones are not held.
    pub fn release(&self) {
        let mut s = self.lock();
        s.hold_after = None;
        s.holding = false;
        drop(s);
        self.release.notify_waiters();
    }

    /// Drops the held requests instead of forwarding them: each connection holding one waits
    /// (up to 5 s) until the server has answered the destructive requests it forwarded, then
    /// closes both sides without forwarding anything more. For a killed client: what it sent
    /// after the `k`-th never reaches the server, and what reached it was carried out. New
    /// requests are not held.
    pub fn drop_held(&self) {
        let mut s = self.lock();
        s.hold_after = None;
        s.holding = false;
        s.drops += 1;
        drop(s);
        self.release.notify_waiters();
    }

    /// Every destructive request forwarded so far.
    pub fn forwarded(&self) -> Vec<Destructive> {
        self.lock().forwarded.clone()
    }

    /// Forgets what was forwarded.
    pub fn clear(&self) {
        self.lock().forwarded.clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for WireProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pump(
    wire: Wire,
    client: TcpStream,
    server: TcpStream,
    state: Arc<Mutex<State>>,
    release: Arc<Notify>,
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    // The server's answers to destructive requests on this connection (LDAP only: RESP
    // replies do not say what they answer).
    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = answered.clone();
    let answers = tokio::spawn(async move {
        let mut pending = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        let mut client_gone = false;
        loop {
            let n = match server_read.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if wire == Wire::Ldap {
                pending.extend_from_slice(&chunk[..n]);
                while let Some(len) = frame_len(wire, &pending) {
                    let frame: Vec<u8> = pending.drain(..len).collect();
                    if ldap_change_response(&frame) {
                        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                }
            }
            // A killed client no longer reads; the answers are still counted.
            if !client_gone && client_write.write_all(&chunk[..n]).await.is_err() {
                client_gone = true;
            }
        }
        let _ = client_write.shutdown().await;
    });
    let mut sent = 0usize;
    let mut buffer = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    'read: loop {
        let n = match client_read.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        buffer.extend_from_slice(&chunk[..n]);
        while let Some(len) = frame_len(wire, &buffer) {
            let frame: Vec<u8> = buffer.drain(..len).collect();
            let counted = destructive(wire, &frame).filter(|d| {
                let s = state
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                s.ignore
                    .as_deref()
                    .is_none_or(|m| !d.targets.iter().all(|t| t.contains(m)))
            });
            if let Some(d) = counted {
                let mut held_at = None;
                loop {
                    let notified = release.notified();
                    let dropped = {
                        let mut s = state
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        if held_at.is_some_and(|drops| drops != s.drops) {
                            true
                        } else {
                            match s.hold_after {
                                Some(k) if s.forwarded.len() >= k => {
                                    s.holding = true;
                                    held_at = Some(s.drops);
                                }
                                _ => {
                                    s.forwarded.push(d.clone());
                                    sent += 1;
                                    break;
                                }
                            }
                            false
                        }
                    };
                    if dropped {
                        // Dropped: the forwarded ones answered, then nothing more.
                        let until = tokio::time::Instant::now() + Duration::from_secs(5);
                        while wire == Wire::Ldap
                            && answered.load(std::sync::atomic::Ordering::SeqCst) < sent
                            && tokio::time::Instant::now() < until
                        {
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                        break 'read;
                    }
                    notified.await;
                }
            }
            if server_write.write_all(&frame).await.is_err() {
                break 'read;
            }
        }
    }
    let _ = server_write.shutdown().await;
    let _ = answers.await;
}

/// Whether an LDAP message is the answer to a modify, add or delete request.
fn ldap_change_response(frame: &[u8]) -> bool {
    let Some((header, _)) = ber_element(frame) else {
        return false;
    };
    let Some((id_header, id_len)) = frame.get(header..).and_then(ber_element) else {
        return false;
    };
    // modifyResponse, addResponse, delResponse.
    matches!(
        frame.get(header + id_header + id_len),
        Some(0x67 | 0x69 | 0x6b)
    )
}

/// The length of the first complete frame in `buf`, if there is one.
pub fn frame_len(wire: Wire, buf: &[u8]) -> Option<usize> {
    match wire {
        Wire::Resp => resp_frame(buf).map(|(len, _)| len),
        Wire::Ldap => ber_element(buf).map(|(header, len)| header + len),
    }
}

/// A complete RESP request at the start of `buf`: its length and its arguments.
fn resp_frame(buf: &[u8]) -> Option<(usize, Vec<Vec<u8>>)> {
    let (count, mut at) = resp_line(buf, 0)?;
    if buf.first() != Some(&b'*') {
        // An inline command: one line.
        let line = &buf[..at.saturating_sub(2)];
        let args = line
            .split(|b| *b == b' ')
            .filter(|a| !a.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        return Some((at, args));
    }
    let count: usize = count.parse().ok()?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        if buf.get(at) != Some(&b'$') {
            return None;
        }
        let (len, next) = resp_line(buf, at)?;
        let len: usize = len.parse().ok()?;
        let end = next + len;
        if buf.len() < end + 2 {
            return None;
        }
        args.push(buf[next..end].to_vec());
        at = end + 2;
    }
    Some((at, args))
}

/// The text after the type byte of the line starting at `from`, and where the next begins.
fn resp_line(buf: &[u8], from: usize) -> Option<(String, usize)> {
    let rest = buf.get(from..)?;
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    let text = String::from_utf8_lossy(rest.get(1..end).unwrap_or_default()).into_owned();
    Some((text, from + end + 2))
}

/// A complete BER element at the start of `buf`: its header's length and its content's.
fn ber_element(buf: &[u8]) -> Option<(usize, usize)> {
    let first = *buf.get(1)?;
    let (header, len) = if first < 0x80 {
        (2, usize::from(first))
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let bytes = buf.get(2..2 + n)?;
        let len = bytes
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (2 + n, len)
    };
    (buf.len() >= header + len).then_some((header, len))
}

/// The destructive request a frame holds, if it is one.
fn destructive(wire: Wire, frame: &[u8]) -> Option<Destructive> {
    match wire {
        Wire::Resp => {
            let (_, args) = resp_frame(frame)?;
            let op = String::from_utf8_lossy(args.first()?).to_ascii_uppercase();
            matches!(op.as_str(), "UNLINK" | "DEL").then(|| Destructive {
                op,
                targets: args[1..]
                    .iter()
                    .map(|k| String::from_utf8_lossy(k).into_owned())
                    .collect(),
            })
        }
        Wire::Ldap => {
            // LDAPMessage ::= SEQUENCE { messageID INTEGER, protocolOp CHOICE, ... }
            let (header, _) = ber_element(frame)?;
            let id = frame.get(header..)?;
            let (id_header, id_len) = ber_element(id)?;
            let op_at = header + id_header + id_len;
            let tag = *frame.get(op_at)?;
            let (op, dn) = match tag {
                // modifyRequest and addRequest are constructed: their first element is the DN.
                0x66 | 0x68 => {
                    let (op_header, _) = ber_element(frame.get(op_at..)?)?;
                    let dn_at = op_at + op_header;
                    let (dn_header, dn_len) = ber_element(frame.get(dn_at..)?)?;
                    let dn = frame.get(dn_at + dn_header..dn_at + dn_header + dn_len)?;
                    (if tag == 0x66 { "modify" } else { "add" }, dn)
                }
                // delRequest is primitive: its content is the DN.
                0x4a => {
                    let (op_header, op_len) = ber_element(frame.get(op_at..)?)?;
                    (
                        "delete",
                        frame.get(op_at + op_header..op_at + op_header + op_len)?,
                    )
                }
                _ => return None,
            };
            Some(Destructive {
                op: op.into(),
                targets: vec![String::from_utf8_lossy(dn).into_owned()],
            })
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn resp_frames_are_found_whole_and_unlinks_are_destructive() {
        let unlink = b"*3\r\n$6\r\nUNLINK\r\n$5\r\nsess:\r\n$6\r\nsess:1\r\n";
        assert_eq!(frame_len(Wire::Resp, &unlink[..unlink.len() - 1]), None);
        assert_eq!(frame_len(Wire::Resp, unlink), Some(unlink.len()));
        let d = destructive(Wire::Resp, unlink).unwrap();
        assert_eq!(d.op, "UNLINK");
        assert_eq!(d.targets, ["sess:", "sess:1"]);
        assert_eq!(
            destructive(Wire::Resp, b"*2\r\n$4\r\nSCAN\r\n$1\r\n0\r\n"),
            None
        );
    }

    #[test]
    fn ldap_modify_and_delete_name_their_dn() {
        // messageID 2, modifyRequest "uid=a" with an empty change list.
        let modify = [
            0x30, 0x0e, 0x02, 0x01, 0x02, 0x66, 0x09, 0x04, 0x05, b'u', b'i', b'd', b'=', b'a',
            0x30, 0x00,
        ];
        assert_eq!(frame_len(Wire::Ldap, &modify[..15]), None);
        let two = [&modify[..], &modify[..]].concat();
        assert_eq!(frame_len(Wire::Ldap, &two), Some(16));
        let d = destructive(Wire::Ldap, &modify).unwrap();
        assert_eq!((d.op.as_str(), d.targets[0].as_str()), ("modify", "uid=a"));
        let delete = [
            0x30, 0x0a, 0x02, 0x01, 0x03, 0x4a, 0x05, b'u', b'i', b'd', b'=', b'b',
        ];
        let d = destructive(Wire::Ldap, &delete).unwrap();
        assert_eq!((d.op.as_str(), d.targets[0].as_str()), ("delete", "uid=b"));
        // A search is not destructive.
        let search = [0x30, 0x05, 0x02, 0x01, 0x04, 0x63, 0x00];
        assert_eq!(destructive(Wire::Ldap, &search), None);
    }

    #[test]
    fn ldap_change_responses_are_told_from_other_answers() {
        // messageID 2, modifyResponse success (resultCode 0, empty matchedDN and message).
        let modified = [
            0x30, 0x0c, 0x02, 0x01, 0x02, 0x67, 0x07, 0x0a, 0x01, 0x00, 0x04, 0x00, 0x04, 0x00,
        ];
        assert!(ldap_change_response(&modified));
        let mut deleted = modified;
        deleted[5] = 0x6b;
        assert!(ldap_change_response(&deleted));
        // searchResDone is not.
        let mut done = modified;
        done[5] = 0x65;
        assert!(!ldap_change_response(&done));
        assert!(!ldap_change_response(&[0x30]));
    }
}
