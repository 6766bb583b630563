//! The serving certificate of `/metrics`: one mounted from a directory (`tls.crt` and `tls.key`,
//! as a `kubernetes.io/tls` Secret mounts them, cert-manager's included) and reloaded when it
//! changes, or a self-signed one generated at start when none is mounted.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::crypto::{CryptoProvider, ring};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::server::TlsStream;
use tracing::{info, warn};

/// The certificate file in a certificate directory.
pub const CERT_FILE: &str = "tls.crt";
/// The private key file in a certificate directory.
pub const KEY_FILE: &str = "tls.key";

/// How often a mounted certificate is checked for a change. The kubelet refreshes a mounted
/// Secret within a minute or so; this adds at most a few seconds to that.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(5);

/// The longest a client may take over its TLS handshake; a slower one is dropped, so it holds
/// no connection open.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a certificate could not be loaded or made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file of the directory could not be read.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The certificate file has no certificate.
    #[error("{path} holds no PEM certificate")]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// The key file has no key.
    #[error("{path} holds no PEM private key")]
    NoKey {
        /// The file.
        path: PathBuf,
    },
    /// The key is not the certificate's, or of a kind rustls cannot sign with.
    #[error("the certificate and key do not make a usable pair")]
    Pair(#[source] rustls::Error),
    /// No certificate could be made.
    #[error("generating a self-signed certificate")]
    Generate(#[source] rcgen::Error),
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(ring::default_provider())
}

/// The pair in `cert_pem` and `key_pem`, checked to belong together. `path` names the
/// directory in errors.
pub fn pair_from_pem(
    path: &Path,
    cert_pem: &[u8],
    key_pem: &[u8],
) -> Result<CertifiedKey, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .filter_map(Result::ok)
        .collect();
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.join(CERT_FILE),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|_| TlsError::NoKey {
        path: path.join(KEY_FILE),
    })?;
    CertifiedKey::from_der(chain, key, &provider()).map_err(TlsError::Pair)
}

/// A self-signed certificate for `names` (the pod's addresses are unknown to it: scrapers
/// that verify it need a mounted one).
pub fn self_signed(names: &[String]) -> Result<CertifiedKey, TlsError> {
    let generated =
        rcgen::generate_simple_self_signed(names.to_vec()).map_err(TlsError::Generate)?;
    let key = PrivatePkcs8KeyDer::from(generated.signing_key.serialize_der());
    CertifiedKey::from_der(
        vec![generated.cert.der().clone()],
        PrivateKeyDer::Pkcs8(key),
        &provider(),
    )
    .map_err(TlsError::Pair)
}

/// The files of a certificate directory as last read.
#[derive(Debug, PartialEq, Eq)]
struct Files {
    cert: Vec<u8>,
    key: Vec<u8>,
}

fn read_files(dir: &Path) -> Result<Files, TlsError> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path).map_err(|source| TlsError::Read { path, source })
    };
    Ok(Files {
        cert: read(CERT_FILE)?,
        key: read(KEY_FILE)?,
    })
}

/// The certificate served to every client, swapped in place when the mounted one changes.
#[derive(Debug)]
pub struct ServingCert {
    current: RwLock<Arc<CertifiedKey>>,
}

impl ServingCert {
    /// Serves `key` until [`ServingCert::replace`].
    pub fn new(key: CertifiedKey) -> Arc<Self> {
        Arc::new(Self {
            current: RwLock::new(Arc::new(key)),
        })
    }

    /// Serves `key` from the next handshake on.
    pub fn replace(&self, key: CertifiedKey) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(key);
    }

    fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A TLS server configuration serving this certificate (HTTP/1.1, which Prometheus scrapes
    /// with).
    pub fn server_config(self: &Arc<Self>) -> Arc<ServerConfig> {
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// The certificate from `dir` if given, else a self-signed one; with `dir`, a task that
/// reloads it every `interval` while the process runs.
pub fn serving_cert(dir: Option<&Path>, interval: Duration) -> Result<Arc<ServingCert>, TlsError> {
    let Some(dir) = dir else {
        info!("/metrics: a self-signed certificate (no --metrics-cert-dir)");
        return Ok(ServingCert::new(self_signed(&["localhost".to_owned()])?));
    };
    let files = read_files(dir)?;
    let cert = ServingCert::new(pair_from_pem(dir, &files.cert, &files.key)?);
    info!(dir = %dir.display(), "/metrics: the mounted certificate");
    tokio::spawn(reload(cert.clone(), dir.to_path_buf(), files, interval));
    Ok(cert)
}

/// Re-reads `dir` every `interval`; a changed pair that loads replaces the served one, one that
/// does not is logged and the served one kept.
async fn reload(cert: Arc<ServingCert>, dir: PathBuf, mut last: Files, interval: Duration) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let loaded = read_files(&dir).and_then(|files| {
            if files == last {
                return Ok(None);
            }
            let pair = pair_from_pem(&dir, &files.cert, &files.key)?;
            Ok(Some((files, pair)))
        });
        match loaded {
            Ok(None) => {}
            Ok(Some((files, pair))) => {
                cert.replace(pair);
                last = files;
                info!(dir = %dir.display(), "reloaded the /metrics certificate");
            }
            Err(error) => {
                warn!(error = %error_chain(&error), "keeping the current /metrics certificate")
            }
        }
    }
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// TCP connections that have completed a TLS handshake, for `axum::serve`. Handshakes run
/// in tasks of their own, so a slow client delays no other.
pub struct TlsListener {
    accepted: mpsc::Receiver<(TlsStream<TcpStream>, std::net::SocketAddr)>,
    local_addr: std::net::SocketAddr,
}

impl TlsListener {
    /// Accepts on `listener` with `config`.
    pub fn new(listener: TcpListener, config: Arc<ServerConfig>) -> std::io::Result<Self> {
        let local_addr = listener.local_addr()?;
        let (send, accepted) = mpsc::channel(16);
        tokio::spawn(accept_loop(listener, TlsAcceptor::from(config), send));
        Ok(Self {
            accepted,
            local_addr,
        })
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    send: mpsc::Sender<(TlsStream<TcpStream>, std::net::SocketAddr)>,
) {
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors and the like: wait rather than spin.
                warn!(error = %error, "accepting a /metrics connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (acceptor, handshaken) = (acceptor.clone(), send.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => {
                    let _ = handshaken.send((tls, peer)).await;
                }
                Ok(Err(error)) => tracing::debug!(%peer, error = %error, "TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        });
        if send.is_closed() {
            return;
        }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.accepted.recv().await {
            Some(accepted) => accepted,
            // The accept loop ends only once this receiver is gone.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local_addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pem_pair(name: &str) -> (String, String) {
        let generated = rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
        (generated.cert.pem(), generated.signing_key.serialize_pem())
    }

    #[test]
    fn a_pem_pair_loads_and_a_mismatched_one_is_refused() {
        let (cert, key) = pem_pair("a.example");
        let (_, other_key) = pem_pair("b.example");
        let dir = Path::new("/certs");
        assert!(pair_from_pem(dir, cert.as_bytes(), key.as_bytes()).is_ok());
        assert!(matches!(
            pair_from_pem(dir, cert.as_bytes(), other_key.as_bytes()),
            Err(TlsError::Pair(_))
        ));
        assert!(matches!(
            pair_from_pem(dir, b"", key.as_bytes()),
            Err(TlsError::NoCertificate { .. })
        ));
        assert!(matches!(
            pair_from_pem(dir, cert.as_bytes(), b"not a key"),
            Err(TlsError::NoKey { .. })
        ));
    }

    #[tokio::test]
    async fn a_changed_pair_is_served_and_a_broken_one_keeps_the_last() {
        let dir = tempfile::tempdir().unwrap();
        let write = |(cert, key): &(String, String)| {
            std::fs::write(dir.path().join(CERT_FILE), cert).unwrap();
            std::fs::write(dir.path().join(KEY_FILE), key).unwrap();
        };
        let (first, second) = (pem_pair("first"), pem_pair("second"));
        write(&first);
        let interval = Duration::from_millis(20);
        let served = serving_cert(Some(dir.path()), interval).unwrap();
        let der = |pem: &str| CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
        assert_eq!(served.current().cert[0], der(&first.0));
        write(&second);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while served.current().cert[0] != der(&second.0) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "not reloaded in 10 s"
            );
            tokio::time::sleep(interval).await;
        }
        // A broken pair, seen by several polls, leaves the last good one served.
        std::fs::write(dir.path().join(KEY_FILE), "garbage").unwrap();
        tokio::time::sleep(interval * 5).await;
        assert_eq!(served.current().cert[0], der(&second.0));
    }
}
