//! toxiproxy between each operator replica and the API server: one proxy per replica, so a
//! toxic (latency, resets, a blackhole) hits that replica alone, through toxiproxy's HTTP API.
//! TLS passes through untouched: the API server's certificate names 127.0.0.1, which is also
//! where every proxy listens.

use std::fs::File;
use std::net::TcpListener;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

/// A running toxiproxy-server, killed when dropped.
pub struct Toxiproxy {
    _child: tokio::process::Child,
    api: String,
    http: reqwest::Client,
}

impl Toxiproxy {
    /// Starts `binary` with its API on a free loopback port, its log in `log`, and waits until
    /// the API answers.
    pub async fn start(binary: &Path, log: &Path) -> Result<Toxiproxy, String> {
        let port = free_port();
        let out = File::create(log).map_err(|e| format!("create {}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = tokio::process::Command::new(binary)
            .args(["-host", "127.0.0.1", "-port", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", binary.display()))?;
        let proxy = Toxiproxy {
            _child: child,
            api: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .map_err(|e| e.to_string())?,
        };
        for _ in 0..100 {
            if proxy
                .http
                .get(format!("{}/version", proxy.api))
                .send()
                .await
                .is_ok()
            {
                return Ok(proxy);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(format!("toxiproxy's API at {} never answered", proxy.api))
    }

    /// Creates proxy `name` from a free loopback port to `upstream` (`host:port`) and returns
    /// the address it listens on.
    pub async fn proxy(&self, name: &str, upstream: &str) -> Result<String, String> {
        let listen = format!("127.0.0.1:{}", free_port());
        self.call(
            reqwest::Method::POST,
            "/proxies",
            Some(json!({"name": name, "listen": listen, "upstream": upstream, "enabled": true})),
        )
        .await?;
        Ok(listen)
    }

    /// Adds toxic `toxic` of `kind` with `attributes` to proxy `proxy`, in both directions
    /// (as `<toxic>-downstream` and `<toxic>-upstream`).
    pub async fn add_toxic(
        &self,
        proxy: &str,
        toxic: &str,
        kind: &str,
        attributes: Value,
    ) -> Result<(), String> {
        for stream in ["downstream", "upstream"] {
            self.call(
                reqwest::Method::POST,
                &format!("/proxies/{proxy}/toxics"),
                Some(json!({
                    "name": format!("{toxic}-{stream}"),
                    "type": kind,
                    "stream": stream,
                    "toxicity": 1.0,
                    "attributes": attributes,
                })),
            )
            .await?;
        }
        Ok(())
    }

    /// Removes toxic `toxic` (both directions) from proxy `proxy`.
    pub async fn remove_toxic(&self, proxy: &str, toxic: &str) -> Result<(), String> {
        for stream in ["downstream", "upstream"] {
            self.call(
                reqwest::Method::DELETE,
                &format!("/proxies/{proxy}/toxics/{toxic}-{stream}"),
                None,
            )
            .await?;
        }
        Ok(())
    }

    /// Removes every toxic of every proxy (the soak's clean-up, whatever was left).
    pub async fn clear(&self) -> Result<(), String> {
        let proxies = self.call(reqwest::Method::GET, "/proxies", None).await?;
        for (name, proxy) in proxies.as_object().into_iter().flatten() {
            for toxic in proxy["toxics"].as_array().into_iter().flatten() {
                if let Some(toxic) = toxic["name"].as_str() {
                    self.call(
                        reqwest::Method::DELETE,
                        &format!("/proxies/{name}/toxics/{toxic}"),
                        None,
                    )
                    .await?;
                }
            }
        }
        Ok(())
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, String> {
        let mut request = self
            .http
            .request(method.clone(), format!("{}{path}", self.api));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| format!("toxiproxy {method} {path}: {e}"))?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        if !status.is_success() {
            return Err(format!("toxiproxy {method} {path}: {status}: {text}"));
        }
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral port")
}
