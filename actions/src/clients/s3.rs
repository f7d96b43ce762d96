//! The handover between the two stages (reference: `objectStore`, `ox_functional_accounts_export`,
//! `ox_shared_accounts_import`): an object in the Migration's S3-compatible bucket that the `pre`
//! stage writes and the `post` stage reads.
//!
//! * [`HandoverStore`] talks to the store: [`probe`](HandoverStore::probe) (planning and dry
//!   runs: the store answers, the credential is accepted, the bucket exists),
//!   [`read`](HandoverStore::read) and [`write_durable`](HandoverStore::write_durable) (PUT,
//!   then GET back and compare byte for byte, so nothing is deleted on the strength of a write
//!   that did not land).
//!
//! The document written there is the Functional Accounts migration's
//! (`crate::functional_accounts::record`); this module knows only bytes.
//!
//! Requests are signed with `rust-s3` (AWS Signature V4, as query parameters) and sent with an
//! HTTP client of this module, so that TLS follows the Migration's settings as for every other
//! client ([`client_builder`]): verified against the public web roots, the system's store and
//! the optional `caBundle` (a PEM file path or the PEM text), and skipped only when
//! `insecureSkipTlsVerify` is set, which the run records as a warning. Every request is bounded by the timeout given to
//! [`HandoverStore::connect`]. Errors name the endpoint, the bucket, the key and the access key
//! id, never the secret key or a signed URL.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use reqwest::{Method, StatusCode, Url};

use stagehand_config::ObjectStore;

use crate::action::{ActionContext, ActionError, SecretValue, Secrets, Warnings};
use crate::clients::http::{AnswerLimit, HttpTls, ReadError, client_builder, read_capped};

// ---------------------------------------------------------------------------------------------
// Settings
// ---------------------------------------------------------------------------------------------

/// A sensible timeout of one request to the store (the actions' configs name none for it).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest handover object [`HandoverStore::read`] accepts (a record is about 400 bytes per
/// account, so this is far beyond any deployment), and the most bytes read of any answer of
/// the store: an object whose `Content-Length` is larger is refused before its body is read,
/// any other is read into one buffer that stops growing at this size.
pub const MAX_OBJECT_BYTES: usize = 64 * 1024 * 1024;

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// Why the handover store could not do what was asked. Messages name the endpoint, the bucket,
/// the key and the access key id, and say what to check; they never carry the secret key or a
/// signed URL.
#[derive(Debug, thiserror::Error)]
pub enum HandoverError {
    /// The settings cannot be used (a bad endpoint, an unreadable CA bundle, ...).
    #[error("objectStore settings: {0}")]
    Settings(String),
    /// The store could not be reached, or its TLS certificate was refused.
    #[error(
        "cannot reach the object store at {endpoint} (bucket {bucket:?}) while {doing}: {cause}"
    )]
    Unreachable {
        /// The store's endpoint.
        endpoint: String,
        /// The bucket.
        bucket: String,
        /// What was being done, e.g. `reading "ox-functional-accounts.yaml"`.
        doing: String,
        /// Why, with a hint where one helps (e.g. the CA bundle for an untrusted certificate).
        cause: String,
    },
    /// The store did not answer within the timeout.
    #[error(
        "the object store at {endpoint} (bucket {bucket:?}) did not answer within {seconds}s while {doing}"
    )]
    Timeout {
        /// The store's endpoint.
        endpoint: String,
        /// The bucket.
        bucket: String,
        /// What was being done.
        doing: String,
        /// The timeout of one request.
        seconds: u64,
    },
    /// The store refused the credential or the operation.
    #[error(
        "the object store at {endpoint} refused access key id {access_key_id:?} on bucket {bucket:?} while {doing}: {detail}"
    )]
    Denied {
        /// The store's endpoint.
        endpoint: String,
        /// The bucket.
        bucket: String,
        /// The access key id that was used.
        access_key_id: String,
        /// What was being done.
        doing: String,
        /// The S3 error code (`InvalidAccessKeyId`, `SignatureDoesNotMatch`, `AccessDenied`,
        /// ...), the store's message and what to check.
        detail: String,
    },
    /// The bucket does not exist.
    #[error(
        "the object store at {endpoint} has no bucket {bucket:?} (NoSuchBucket): create it, or correct objectStore.bucket"
    )]
    NoSuchBucket {
        /// The store's endpoint.
        endpoint: String,
        /// The bucket.
        bucket: String,
    },
    /// Any other answer the store should not have given.
    #[error(
        "the object store at {endpoint} (bucket {bucket:?}) answered {status} while {doing}: {detail}"
    )]
    Store {
        /// The store's endpoint.
        endpoint: String,
        /// The bucket.
        bucket: String,
        /// What was being done.
        doing: String,
        /// The HTTP status.
        status: u16,
        /// The S3 error code and the store's message, shortened.
        detail: String,
    },
    /// An object read back differs from what was written.
    #[error(
        "the object {key:?} in bucket {bucket:?} at {endpoint} does not read back as written ({detail}): the store did not keep the handover, nothing was changed on the strength of it"
    )]
    ReadBackMismatch {
        /// The store's endpoint.
        endpoint: String,
        /// The bucket.
        bucket: String,
        /// The object key.
        key: String,
        /// How it differs.
        detail: String,
    },
    /// An object is larger than [`MAX_OBJECT_BYTES`].
    #[error(
        "the object {key:?} in bucket {bucket:?} at {endpoint} is larger than {limit} bytes: it is not a handover Stagehand wrote"
    )]
    TooLarge {
        /// The store's endpoint.
        endpoint: String,
        /// The bucket.
        bucket: String,
        /// The object key.
        key: String,
        /// The limit in bytes.
        limit: usize,
    },
    /// A handover document cannot be read or written as YAML of a known version.
    #[error("handover document: {0}")]
    Document(String),
}

impl From<HandoverError> for ActionError {
    /// By what happened: the store unreachable or silent [`ActionError::Unavailable`], the
    /// access key or the operation refused [`ActionError::Refused`], no bucket
    /// [`ActionError::NotFound`], another answer by its status ([`ActionError::for_status`]),
    /// an object that is not a handover [`ActionError::InvalidAnswer`]; the settings and an
    /// object that did not read back as written [`ActionError::Failed`]. The message is the
    /// store error's.
    fn from(e: HandoverError) -> Self {
        let message = e.to_string();
        match e {
            HandoverError::Unreachable { .. } | HandoverError::Timeout { .. } => {
                ActionError::Unavailable(message)
            }
            HandoverError::Denied { .. } => ActionError::Refused(message),
            HandoverError::NoSuchBucket { .. } => ActionError::NotFound(message),
            HandoverError::Store { status, .. } => ActionError::for_status(status, message),
            HandoverError::TooLarge { .. } | HandoverError::Document(_) => {
                ActionError::InvalidAnswer(message)
            }
            HandoverError::Settings(_) | HandoverError::ReadBackMismatch { .. } => {
                ActionError::Failed(message)
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The store
// ---------------------------------------------------------------------------------------------

/// A connection to the handover bucket.
#[derive(Clone)]
pub struct HandoverStore {
    client: reqwest::Client,
    bucket: Box<s3::Bucket>,
    endpoint: String,
    bucket_name: String,
    access_key_id: String,
    secret_key_file: String,
    timeout: Duration,
}

impl fmt::Debug for HandoverStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandoverStore")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket_name)
            .field("access_key_id", &self.access_key_id)
            .field("secret_key_file", &self.secret_key_file)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Transient failures are retried this many times in all (connection refused or reset, 500,
/// 502, 503, 504); a timeout is not retried.
const ATTEMPTS: u32 = 3;

/// The operations, for signing and for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Probe,
    Get,
    Put,
    Delete,
}

/// A request that failed, and whether trying again may help.
struct Failed {
    error: HandoverError,
    transient: bool,
}

impl Failed {
    fn permanent(error: HandoverError) -> Self {
        Self {
            error,
            transient: false,
        }
    }
}

/// A whole response.
struct Answer {
    status: StatusCode,
    /// The `Content-Type` header, for what a message may quote (`http::quoted_body`).
    content_type: Option<String>,
    body: Vec<u8>,
}

impl HandoverStore {
    /// Prepares the client: checks the settings, builds the TLS configuration and the signer.
    /// Talks to nobody; [`probe`](Self::probe) does. `secret_key` is the value of the
    /// `secretFiles` entry the settings name (a trailing line break, as files often end with,
    /// is dropped). `timeout` bounds every request. TLS is the one story of every client
    /// ([`client_builder`]: `objectStore.caBundle`, a PEM file path or the PEM text); with
    /// `objectStore.insecureSkipTlsVerify` the warning is recorded in `warnings`.
    pub fn connect(
        settings: &ObjectStore,
        secret_key: &SecretValue,
        timeout: Duration,
        warnings: &Warnings,
    ) -> Result<Self, HandoverError> {
        let endpoint = normalize_endpoint(&settings.endpoint)?;
        let bucket_name = settings.bucket.trim();
        if bucket_name.is_empty() || bucket_name.contains('/') {
            return Err(HandoverError::Settings(format!(
                "bucket {:?} is not a bucket name",
                settings.bucket
            )));
        }
        let access_key_id = settings.access_key_id.trim();
        if access_key_id.is_empty() {
            return Err(HandoverError::Settings("accessKeyId is empty".into()));
        }
        let secret = secret_key
            .expose()
            .strip_suffix('\n')
            .map(|s| s.strip_suffix('\r').unwrap_or(s))
            .unwrap_or(secret_key.expose());
        if secret.is_empty() {
            return Err(HandoverError::Settings(format!(
                "the secret file {:?} (objectStore.secretKeyFile) is empty",
                settings.secret_key_file
            )));
        }
        if timeout.is_zero() {
            return Err(HandoverError::Settings(
                "the timeout must be positive".into(),
            ));
        }

        let https = endpoint.starts_with("https://");
        let ca_bundle = settings
            .ca_bundle
            .as_deref()
            .filter(|p| !p.trim().is_empty());
        if ca_bundle.is_some() && !https {
            return Err(HandoverError::Settings(format!(
                "caBundle is only used with an https:// endpoint, and the endpoint is {endpoint}"
            )));
        }
        let server = Url::parse(&endpoint)
            .map_err(|e| HandoverError::Settings(format!("endpoint {endpoint:?}: {e}")))?;
        let tls = HttpTls::new(
            "objectStore",
            ca_bundle,
            settings.insecure_skip_tls_verify(),
            warnings,
        );
        let builder = client_builder(timeout, &tls, &server)
            .map_err(|e| HandoverError::Settings(e.to_string()))?
            .redirect(reqwest::redirect::Policy::none());
        let client = builder
            .build()
            .map_err(|e| HandoverError::Settings(format!("cannot build the HTTP client: {e}")))?;

        let region = s3::Region::Custom {
            region: settings.region().to_string(),
            endpoint: endpoint.clone(),
        };
        let credentials =
            s3::creds::Credentials::new(Some(access_key_id), Some(secret), None, None, None)
                .map_err(|_| HandoverError::Settings("cannot use the credential".into()))?;
        let mut bucket = s3::Bucket::new(bucket_name, region, credentials).map_err(|e| {
            HandoverError::Settings(format!("cannot set up bucket {bucket_name:?}: {e}"))
        })?;
        if settings.path_style() {
            bucket = bucket.with_path_style();
        }
        Ok(Self {
            client,
            bucket,
            endpoint,
            bucket_name: bucket_name.to_string(),
            access_key_id: access_key_id.to_string(),
            secret_key_file: settings.secret_key_file.clone(),
            timeout,
        })
    }

    /// [`connect`](Self::connect) with the secret key taken from the run's secrets, by the
    /// `secretFiles` name the settings give (`objectStore.secretKeyFile`).
    pub fn connect_with_secrets(
        settings: &ObjectStore,
        secrets: &Secrets,
        timeout: Duration,
        warnings: &Warnings,
    ) -> Result<Self, ActionError> {
        let secret = secrets.get(&settings.secret_key_file)?;
        Ok(Self::connect(settings, secret, timeout, warnings)?)
    }

    /// The handover store of a run: the Migration's `objectStore` with its secret key file.
    /// `action` (the id of the action that hands over) is named when the Migration declares no
    /// store.
    pub fn for_run(ctx: &ActionContext, action: &str) -> Result<Self, ActionError> {
        let Some(settings) = &ctx.object_store else {
            return Err(ActionError::Failed(format!(
                "{action} hands the Functional Accounts over in the Migration's object store, and the Migration declares none: set spec.objectStore (endpoint, bucket, accessKeyId, secretKeyFile) to the deployment's migrations bucket"
            )));
        };
        Self::connect_with_secrets(settings, &ctx.secrets, DEFAULT_TIMEOUT, &ctx.warnings)
    }

    /// The endpoint, as used (`scheme://host[:port]`).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket_name
    }

    /// `bucket "migrations" at https://…`, for summaries.
    pub fn describe(&self) -> String {
        format!("bucket {:?} at {}", self.bucket_name, self.endpoint)
    }

    /// Proves, without changing anything, that the store answers, accepts the credential and
    /// holds the bucket (one `ListObjectsV2` of at most one key: the identity needs
    /// `s3:ListBucket` on the bucket, as well as `s3:GetObject` and `s3:PutObject` on its
    /// objects). For planning, and therefore for dry runs.
    pub async fn probe(&self) -> Result<(), HandoverError> {
        let answer = self.send(Op::Probe, "", None).await?;
        if answer.status.is_success() {
            Ok(())
        } else {
            Err(self.failure(Op::Probe, "", &answer))
        }
    }

    /// The object `key`, or `None` when the bucket holds no such object.
    ///
    /// Only the store's own `NoSuchKey` means "no such object": a 404 without it (a missing
    /// bucket, or an endpoint that is not an S3 API) is an error, so that a wrong endpoint is
    /// never taken for an empty handover.
    pub async fn read(&self, key: &str) -> Result<Option<Vec<u8>>, HandoverError> {
        let answer = self.send(Op::Get, key, None).await?;
        if answer.status.is_success() {
            return Ok(Some(answer.body));
        }
        if answer.status == StatusCode::NOT_FOUND
            && s3_error(&answer.body).0.as_deref() == Some("NoSuchKey")
        {
            return Ok(None);
        }
        Err(self.failure(Op::Get, key, &answer))
    }

    /// Writes `bytes` as `key`, then reads the object back and compares it byte for byte: only
    /// an `Ok` means the store holds exactly this. Transient failures of either request are
    /// retried; a read-back that differs is an error.
    ///
    /// The store is handed `bytes` themselves (no copy is made for the request, nor for a
    /// retry of it).
    pub async fn write_durable(
        &self,
        key: &str,
        bytes: impl Into<Bytes>,
    ) -> Result<(), HandoverError> {
        let bytes: Bytes = bytes.into();
        let answer = self.send(Op::Put, key, Some(&bytes)).await?;
        if !answer.status.is_success() {
            return Err(self.failure(Op::Put, key, &answer));
        }
        match self.read(key).await? {
            Some(back) if back == bytes => Ok(()),
            Some(back) => Err(HandoverError::ReadBackMismatch {
                endpoint: self.endpoint.clone(),
                bucket: self.bucket_name.clone(),
                key: key.to_string(),
                detail: if back.len() == bytes.len() {
                    format!(
                        "{} bytes written, the same length read with different content",
                        bytes.len()
                    )
                } else {
                    format!("{} bytes written, {} read", bytes.len(), back.len())
                },
            }),
            None => Err(HandoverError::ReadBackMismatch {
                endpoint: self.endpoint.clone(),
                bucket: self.bucket_name.clone(),
                key: key.to_string(),
                detail: format!("{} bytes written, the object is not there", bytes.len()),
            }),
        }
    }

    /// Deletes the object `key` (no error when it is not there). Not used by the actions,
    /// which never delete a handover; for tooling and tests.
    pub async fn delete(&self, key: &str) -> Result<(), HandoverError> {
        let answer = self.send(Op::Delete, key, None).await?;
        if answer.status.is_success() || answer.status == StatusCode::NOT_FOUND {
            let (code, _) = s3_error(&answer.body);
            if code.as_deref() != Some("NoSuchBucket") {
                return Ok(());
            }
        }
        Err(self.failure(Op::Delete, key, &answer))
    }

    fn doing(op: Op, key: &str) -> String {
        match op {
            Op::Probe => "checking the bucket (ListObjectsV2)".to_string(),
            Op::Get => format!("reading {key:?}"),
            Op::Put => format!("writing {key:?}"),
            Op::Delete => format!("deleting {key:?}"),
        }
    }

    /// A presigned URL for one request, valid a little longer than the request may take.
    async fn presign(&self, op: Op, key: &str) -> Result<Url, HandoverError> {
        let expiry = u32::try_from(self.timeout.as_secs().saturating_add(60))
            .unwrap_or(u32::MAX)
            .min(604_800);
        let path = format!("/{key}");
        let signed = match op {
            Op::Probe => {
                let query = HashMap::from([
                    ("list-type".to_string(), "2".to_string()),
                    ("max-keys".to_string(), "1".to_string()),
                ]);
                self.bucket.presign_get("/", expiry, Some(query)).await
            }
            Op::Get => self.bucket.presign_get(&path, expiry, None).await,
            Op::Put => self.bucket.presign_put(&path, expiry, None, None).await,
            Op::Delete => self.bucket.presign_delete(&path, expiry).await,
        };
        let signed = signed.map_err(|e| {
            HandoverError::Settings(format!(
                "cannot sign a request to {} while {}: {e}",
                self.describe(),
                Self::doing(op, key)
            ))
        })?;
        Url::parse(&signed).map_err(|e| {
            HandoverError::Settings(format!(
                "cannot sign a request to {} while {}: the signed URL does not parse: {e}",
                self.describe(),
                Self::doing(op, key)
            ))
        })
    }

    /// Sends one request (re-signed per attempt), retrying transient failures.
    async fn send(&self, op: Op, key: &str, body: Option<&Bytes>) -> Result<Answer, HandoverError> {
        if op != Op::Probe && (key.is_empty() || key.starts_with('/')) {
            return Err(HandoverError::Settings(format!(
                "the object key {key:?} is not usable (empty or starting with '/')"
            )));
        }
        let mut attempt = 1;
        loop {
            let (result, transient) = match self.send_once(op, key, body).await {
                Ok(a) => {
                    let transient = matches!(a.status.as_u16(), 500 | 502 | 503 | 504);
                    (Ok(a), transient)
                }
                Err(Failed { error, transient }) => (Err(error), transient),
            };
            if !transient || attempt >= ATTEMPTS {
                return result;
            }
            tracing::debug!(
                endpoint = %self.endpoint,
                bucket = %self.bucket_name,
                key,
                attempt,
                "object store request failed transiently; retrying"
            );
            tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt))).await;
            attempt += 1;
        }
    }

    async fn send_once(&self, op: Op, key: &str, body: Option<&Bytes>) -> Result<Answer, Failed> {
        let url = self.presign(op, key).await.map_err(Failed::permanent)?;
        let method = match op {
            Op::Probe | Op::Get => Method::GET,
            Op::Put => Method::PUT,
            Op::Delete => Method::DELETE,
        };
        let mut request = self.client.request(method, url);
        if let Some(body) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/yaml")
                .body(body.clone());
        }
        let response = request
            .send()
            .await
            .map_err(|e| self.transport(op, key, e))?;
        let status = response.status();
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let limit = AnswerLimit {
            bytes: MAX_OBJECT_BYTES as u64,
            raise: "nothing: a handover is never that large",
        };
        // The message names no URL: a signed one carries a signature.
        let body = read_capped(response, limit, &Self::doing(op, key))
            .await
            .map_err(|e| match e {
                ReadError::Transport(e) => self.transport(op, key, e),
                ReadError::TooLarge { .. } => Failed::permanent(HandoverError::TooLarge {
                    endpoint: self.endpoint.clone(),
                    bucket: self.bucket_name.clone(),
                    key: key.to_string(),
                    limit: MAX_OBJECT_BYTES,
                }),
            })?;
        Ok(Answer {
            status,
            content_type,
            body,
        })
    }

    /// A transport error, without the (signed) URL. Transient unless it is a timeout (which
    /// already waited long) or a refused TLS certificate (which stays refused).
    fn transport(&self, op: Op, key: &str, e: reqwest::Error) -> Failed {
        let e = e.without_url();
        if e.is_timeout() {
            return Failed::permanent(HandoverError::Timeout {
                endpoint: self.endpoint.clone(),
                bucket: self.bucket_name.clone(),
                doing: Self::doing(op, key),
                seconds: self.timeout.as_secs().max(1),
            });
        }
        let mut causes = Vec::new();
        let mut source: Option<&dyn std::error::Error> = Some(&e);
        while let Some(s) = source {
            let text = s.to_string();
            if !causes.contains(&text) {
                causes.push(text);
            }
            source = s.source();
        }
        let chain = causes.join(": ");
        let lower = chain.to_ascii_lowercase();
        let hint = crate::clients::tls::certificate_hint("objectStore", &chain);
        let tls = hint.is_some() || lower.contains("certificate");
        let cause = if let Some(hint) = hint {
            format!("{chain} ({hint})")
        } else if tls {
            format!(
                "{chain} (the store's TLS certificate was refused: it must be valid for the endpoint's host name and issued by a CA in the public web roots, the system's store or objectStore.caBundle)"
            )
        } else if lower.contains("connection refused") {
            format!("{chain} (is the store running and listening at that address?)")
        } else {
            chain
        };
        Failed {
            error: HandoverError::Unreachable {
                endpoint: self.endpoint.clone(),
                bucket: self.bucket_name.clone(),
                doing: Self::doing(op, key),
                cause,
            },
            transient: !tls,
        }
    }

    /// The error for an answer that is not a success.
    fn failure(&self, op: Op, key: &str, answer: &Answer) -> HandoverError {
        let (code, message) = s3_error(&answer.body);
        let code = code.unwrap_or_default();
        // The store's own message, as the one rule for quoting an answer allows (only an error
        // status; at most QUOTED_BODY_CHARS): never a redirect's.
        let message = if answer.status.is_client_error() || answer.status.is_server_error() {
            crate::text::one_line(
                &message.unwrap_or_default(),
                crate::clients::http::QUOTED_BODY_CHARS,
            )
        } else {
            String::new()
        };
        if code == "NoSuchBucket" {
            return HandoverError::NoSuchBucket {
                endpoint: self.endpoint.clone(),
                bucket: self.bucket_name.clone(),
            };
        }
        let denied_hint = match code.as_str() {
            "InvalidAccessKeyId" => Some(format!(
                "the store knows no access key id {:?}: check objectStore.accessKeyId",
                self.access_key_id
            )),
            "SignatureDoesNotMatch" => Some(format!(
                "the secret key in the secret file {:?} (objectStore.secretKeyFile) does not belong to this access key id",
                self.secret_key_file
            )),
            "AccessDenied" | "AllAccessDisabled" => Some(format!(
                "the identity may not do this: grant it s3:ListBucket on the bucket and s3:GetObject and s3:PutObject on {}/*",
                self.bucket_name
            )),
            "RequestTimeTooSkewed" => Some(
                "the clocks of this host and the store differ by too much: fix the time synchronisation"
                    .to_string(),
            ),
            "AuthorizationHeaderMalformed" | "AuthorizationQueryParametersError" | "InvalidRegion" => {
                Some("check objectStore.region: it must be the region the store expects".to_string())
            }
            "ExpiredToken" | "InvalidToken" | "TokenRefreshRequired" => {
                Some("the credential has expired: rotate the secret".to_string())
            }
            _ if answer.status == StatusCode::FORBIDDEN || answer.status == StatusCode::UNAUTHORIZED => {
                Some("check objectStore.accessKeyId and the secret key file".to_string())
            }
            _ => None,
        };
        if let Some(hint) = denied_hint {
            return HandoverError::Denied {
                endpoint: self.endpoint.clone(),
                bucket: self.bucket_name.clone(),
                access_key_id: self.access_key_id.clone(),
                doing: Self::doing(op, key),
                detail: if code.is_empty() {
                    format!("{}: {message} ({hint})", answer.status)
                } else {
                    format!("{code}: {message} ({hint})")
                },
            };
        }
        let message = if code.as_str() == "PermanentRedirect" || answer.status.is_redirection() {
            format!(
                "{message} (the bucket is served elsewhere: check objectStore.endpoint, objectStore.region and objectStore.pathStyle)"
            )
        } else if code.is_empty() {
            format!(
                "no S3 error document in the answer, is objectStore.endpoint an S3 API? {}",
                crate::clients::http::quoted_body(
                    answer.status,
                    answer.content_type.as_deref(),
                    &String::from_utf8_lossy(&answer.body),
                )
            )
        } else {
            message
        };
        HandoverError::Store {
            endpoint: self.endpoint.clone(),
            bucket: self.bucket_name.clone(),
            doing: Self::doing(op, key),
            status: answer.status.as_u16(),
            detail: if code.is_empty() {
                message
            } else {
                format!("{code}: {message}")
            },
        }
    }
}

/// `scheme://host[:port]` of an endpoint, or why it cannot be used.
fn normalize_endpoint(raw: &str) -> Result<String, HandoverError> {
    let trimmed = raw.trim();
    let url = Url::parse(trimmed).map_err(|e| {
        HandoverError::Settings(format!(
            "endpoint {trimmed:?} is not a URL ({e}): write it as https://host[:port]"
        ))
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(HandoverError::Settings(format!(
            "endpoint {trimmed:?} must start with http:// or https://"
        )));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(HandoverError::Settings(
            "endpoint must not carry credentials: put the access key id in accessKeyId and the secret key in the secret file".into(),
        ));
    }
    let Some(host) = url.host_str() else {
        return Err(HandoverError::Settings(format!(
            "endpoint {trimmed:?} names no host"
        )));
    };
    if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
        return Err(HandoverError::Settings(format!(
            "endpoint {trimmed:?} must be only scheme, host and port (no path or query): the bucket goes into objectStore.bucket"
        )));
    }
    Ok(match url.port() {
        Some(port) => format!("{}://{host}:{port}", url.scheme()),
        None => format!("{}://{host}", url.scheme()),
    })
}

/// `Code` and `Message` of an S3 XML error document, when the body is one.
pub(crate) fn s3_error(body: &[u8]) -> (Option<String>, Option<String>) {
    let text = String::from_utf8_lossy(body);
    let field = |tag: &str| -> Option<String> {
        let open = format!("<{tag}>");
        let close = format!("</{tag}>");
        let start = text.find(&open)? + open.len();
        let end = start + text[start..].find(&close)?;
        let raw = &text[start..end];
        let value = quick_xml::escape::unescape(raw)
            .map(|v| v.into_owned())
            .unwrap_or_else(|_| raw.to_string());
        Some(value.chars().take(300).collect())
    };
    (field("Code"), field("Message"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn endpoints_are_checked_and_normalized() {
        assert_eq!(
            normalize_endpoint("http://minio:9000/").unwrap(),
            "http://minio:9000"
        );
        assert_eq!(
            normalize_endpoint(" https://s3.example.org ").unwrap(),
            "https://s3.example.org"
        );
        for bad in [
            "minio:9000",
            "ftp://x",
            "https://user:pw@s3.example.org",
            "https://s3.example.org/migrations",
            "not a url",
        ] {
            let e = normalize_endpoint(bad).unwrap_err().to_string();
            assert!(!e.contains("pw@"), "{e}");
        }
    }

    #[test]
    fn s3_error_documents_are_read() {
        let body = br#"<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message><Key>a&amp;b</Key></Error>"#;
        let (code, message) = s3_error(body);
        assert_eq!(code.as_deref(), Some("NoSuchKey"));
        assert_eq!(
            message.as_deref(),
            Some("The specified key does not exist.")
        );
        assert_eq!(s3_error(b""), (None, None));
    }

    #[test]
    fn settings_errors_never_show_the_secret() {
        let settings = ObjectStore {
            endpoint: "https://s3.example.org".into(),
            bucket: "migrations".into(),
            access_key_id: "ak".into(),
            secret_key_file: "objectstore-migrations-secret-key".into(),
            ca_bundle: Some("not pem".into()),
            ..ObjectStore::default()
        };
        let secret = SecretValue::new("TOP-SECRET-VALUE\n");
        let e = HandoverStore::connect(
            &settings,
            &secret,
            Duration::from_secs(5),
            &Warnings::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("caBundle"), "{e}");
        assert!(!format!("{e} {e:?}").contains("TOP-SECRET"));
        let ok = ObjectStore {
            ca_bundle: None,
            ..settings
        };
        let store =
            HandoverStore::connect(&ok, &secret, Duration::from_secs(5), &Warnings::default())
                .unwrap();
        assert!(!format!("{store:?}").contains("TOP-SECRET"));
        assert_eq!(store.endpoint(), "https://s3.example.org");
    }

    #[test]
    fn store_answers_become_the_action_error_that_says_what_happened() {
        let settings = ObjectStore {
            endpoint: "https://s3.example.org".into(),
            bucket: "migrations".into(),
            access_key_id: "ak".into(),
            secret_key_file: "objectstore-migrations-secret-key".into(),
            ..ObjectStore::default()
        };
        let store = HandoverStore::connect(
            &settings,
            &SecretValue::new("sk"),
            Duration::from_secs(5),
            &Warnings::default(),
        )
        .unwrap();
        let answered = |status: u16, code: &str| {
            let body = format!("<Error><Code>{code}</Code><Message>m</Message></Error>");
            let answer = Answer {
                status: StatusCode::from_u16(status).unwrap(),
                content_type: Some("application/xml".into()),
                body: body.into_bytes(),
            };
            let e = store.failure(Op::Get, "k.yaml", &answer);
            let text = e.to_string();
            let action = ActionError::from(e);
            assert_eq!(action.to_string(), text, "the message is kept");
            action
        };
        assert!(matches!(
            answered(403, "AccessDenied"),
            ActionError::Refused(_)
        ));
        assert!(matches!(
            answered(404, "NoSuchBucket"),
            ActionError::NotFound(_)
        ));
        assert!(matches!(
            answered(409, "OperationAborted"),
            ActionError::Conflict(_)
        ));
        assert!(matches!(
            answered(503, "SlowDown"),
            ActionError::Unavailable(_)
        ));
        assert!(matches!(
            answered(500, "InternalError"),
            ActionError::Failed(_)
        ));
        assert!(matches!(
            ActionError::from(HandoverError::Document("not YAML".into())),
            ActionError::InvalidAnswer(_)
        ));

        // What reaches the run's status of an answer (http::quoted_body's rule): the store's
        // message of an error, at most 200 characters; never a redirect's, never a body that is
        // not text.
        let text = |status: u16, content_type: &str, body: &str| {
            let answer = Answer {
                status: StatusCode::from_u16(status).unwrap(),
                content_type: Some(content_type.into()),
                body: body.as_bytes().to_vec(),
            };
            store.failure(Op::Get, "k.yaml", &answer).to_string()
        };
        let long = "x".repeat(500);
        let capped = text(
            500,
            "application/xml",
            &format!("<Error><Code>InternalError</Code><Message>{long}</Message></Error>"),
        );
        assert!(
            capped.contains(&format!("{}...", "x".repeat(200))),
            "{capped}"
        );
        assert!(!capped.contains(&"x".repeat(201)), "{capped}");
        let redirect = text(
            301,
            "application/xml",
            "<Error><Code>PermanentRedirect</Code><Message>secret-detail</Message></Error>",
        );
        assert!(!redirect.contains("secret-detail"), "{redirect}");
        assert!(
            redirect.contains("check objectStore.endpoint"),
            "{redirect}"
        );
        let binary = text(500, "application/octet-stream", "secret-page");
        assert!(!binary.contains("secret-page"), "{binary}");
        assert!(binary.contains("not quoted"), "{binary}");
    }
}
