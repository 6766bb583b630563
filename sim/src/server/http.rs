//! Request parsing and response helpers shared by the handlers.

use axum::body::Body;
use axum::http::{HeaderValue, Method, StatusCode, header, request::Parts};
use axum::response::Response;
use bytes::Bytes;
use percent_encoding::percent_decode_str;
use serde_json::Value;

use crate::store::ApiError;

/// What a handler needs from a request.
pub(crate) struct RequestContext {
    pub method: Method,
    pub accept: String,
    pub content_type: String,
    pub user_agent: String,
    pub query: Vec<(String, String)>,
    pub body: Bytes,
}

fn decode(s: &str) -> String {
    percent_decode_str(&s.replace('+', " "))
        .decode_utf8_lossy()
        .into_owned()
}

impl RequestContext {
    pub(crate) fn new(parts: &Parts, body: Bytes) -> Self {
        let header = |name: header::HeaderName| {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string()
        };
        let query = parts
            .uri
            .query()
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| match p.split_once('=') {
                Some((k, v)) => (decode(k), decode(v)),
                None => (decode(p), String::new()),
            })
            .collect();
        Self {
            method: parts.method.clone(),
            accept: header(header::ACCEPT),
            content_type: header(header::CONTENT_TYPE),
            user_agent: header(header::USER_AGENT),
            query,
            body,
        }
    }

    /// The last value of a query parameter.
    pub(crate) fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// A boolean query parameter (`true`/`1`).
    pub(crate) fn flag(&self, name: &str) -> bool {
        matches!(self.param(name), Some("true") | Some("1"))
    }

    /// `dryRun=All` (any other value is 400).
    pub(crate) fn dry_run(&self) -> Result<bool, ApiError> {
        let values: Vec<&str> = self
            .query
            .iter()
            .filter(|(k, _)| k == "dryRun")
            .map(|(_, v)| v.as_str())
            .collect();
        for v in &values {
            if *v != "All" {
                return Err(ApiError::bad_request(format!(
                    "Invalid dry run value: Unsupported value: \"{v}\": supported values: \"All\""
                )));
            }
        }
        Ok(!values.is_empty())
    }

    /// The body as JSON: parsed as JSON, YAML or protobuf as the content type says.
    pub(crate) fn body_value(&self) -> Result<Value, ApiError> {
        if self.body.is_empty() {
            return Err(ApiError::bad_request("the request body is empty"));
        }
        if self.content_type.contains("protobuf") {
            return super::protobuf::decode(&self.body);
        }
        // CBOR is out of scope: 415 makes client-go retry the write as JSON.
        if self.content_type.contains("cbor") {
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf; got {}",
                    self.content_type
                ),
            ));
        }
        let yaml = self.content_type.contains("yaml");
        if yaml {
            serde_yaml::from_slice::<Value>(&self.body)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
        } else {
            serde_json::from_slice::<Value>(&self.body).map_err(|e| {
                ApiError::bad_request(format!(
                    "the object provided is unrecognized or could not be decoded: {e}"
                ))
            })
        }
    }

    /// The field manager: `fieldManager`, else the User-Agent up to its first `/`.
    pub(crate) fn manager(&self) -> String {
        match self.param("fieldManager") {
            Some(m) if !m.is_empty() => m.to_string(),
            _ => self.user_agent.split('/').next().unwrap_or("").to_string(),
        }
    }
}

/// A JSON response with the given status.
pub(crate) fn json_response<T: serde::Serialize + ?Sized>(code: u16, value: &T) -> Response {
    let body = serde_json::to_vec(value).unwrap_or_default();
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::OK))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .expect("valid response")
}

/// A JSON response carrying `Warning` headers.
pub(crate) fn json_with_warnings(code: u16, value: &Value, warnings: &[String]) -> Response {
    let mut resp = json_response(code, value);
    for w in warnings {
        let text = format!("299 - \"{}\"", w.replace('"', "\\\""));
        if let Ok(v) = HeaderValue::from_str(&text) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    resp
}

/// The Status body of an error.
pub(crate) fn error_response(err: &ApiError) -> Response {
    json_response(err.code, &err.to_status())
}
