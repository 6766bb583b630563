//! Kubernetes-shaped API errors, rendered as `kind: Status` bodies over HTTP.

use std::fmt;

use serde_json::{Value, json};

use super::types::ResourceType;

/// One field-level cause of an error (`details.causes[]` of a Status).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// Machine-readable cause, for example `FieldValueInvalid` or `FieldManagerConflict`.
    pub reason: String,
    /// Human-readable explanation.
    pub message: String,
    /// Path of the field the cause is about, for example `spec.replicas`.
    pub field: String,
}

impl Cause {
    /// A cause of the given reason about `field`.
    pub fn new(reason: &str, field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            reason: reason.to_string(),
            message: message.into(),
            field: field.into(),
        }
    }
}

/// `details` of a Status: which object the error is about and its field causes.
#[derive(Clone, Debug, Default)]
pub struct ErrorDetails {
    /// `details.name`.
    pub name: String,
    /// `details.group`.
    pub group: String,
    /// `details.kind` (the resource plural or the kind, as kube-apiserver sets it).
    pub kind: String,
    /// `details.causes`.
    pub causes: Vec<Cause>,
}

/// A Kubernetes-shaped error: HTTP code, reason, message and details.
#[derive(Clone, Debug)]
pub struct ApiError {
    /// HTTP status code (400, 404, 409, 410, 415, 422...).
    pub code: u16,
    /// `reason` of the Status, for example `NotFound` or `Conflict`.
    pub reason: String,
    /// Human-readable message, worded like kube-apiserver's.
    pub message: String,
    /// `details` of the Status, when the error is about an object.
    pub details: Option<Box<ErrorDetails>>,
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.reason, self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

/// `plural` or `plural.group`, the way kube-apiserver names a resource in messages.
pub(crate) fn qualified_resource(rt: &ResourceType) -> String {
    if rt.group.is_empty() {
        rt.plural.clone()
    } else {
        format!("{}.{}", rt.plural, rt.group)
    }
}

/// `Kind` or `Kind.group`, the way validation errors name a kind.
pub(crate) fn qualified_kind(rt: &ResourceType) -> String {
    if rt.group.is_empty() {
        rt.kind.clone()
    } else {
        format!("{}.{}", rt.kind, rt.group)
    }
}

impl ApiError {
    /// An error with no details.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.to_string(),
            message: message.into(),
            details: None,
        }
    }

    /// The field causes (empty when there are none).
    pub fn causes(&self) -> &[Cause] {
        self.details
            .as_deref()
            .map(|d| d.causes.as_slice())
            .unwrap_or(&[])
    }

    /// The details, created empty when missing.
    pub fn details_mut(&mut self) -> &mut ErrorDetails {
        self.details.get_or_insert_with(Default::default)
    }

    fn about(mut self, rt: &ResourceType, name: &str, kind: String) -> Self {
        let d = self.details_mut();
        d.name = name.to_string();
        d.group = rt.group.clone();
        d.kind = kind;
        self
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 404 NotFound for an object.
    pub fn not_found(rt: &ResourceType, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified_resource(rt)),
        )
        .about(rt, name, rt.plural.clone())
    }

    /// 404 NotFound for a path the server does not serve.
    pub fn path_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    /// 404 for a namespace that does not exist.
    pub fn namespace_not_found(namespace: &str) -> Self {
        let mut e = Self::new(
            404,
            "NotFound",
            format!("namespaces \"{namespace}\" not found"),
        );
        let d = e.details_mut();
        d.name = namespace.to_string();
        d.kind = "namespaces".to_string();
        e
    }

    /// 409 AlreadyExists.
    pub fn already_exists(rt: &ResourceType, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified_resource(rt)),
        )
        .about(rt, name, rt.plural.clone())
    }

    /// 409 Conflict on an optimistic-concurrency or precondition failure.
    pub fn conflict(rt: &ResourceType, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified_resource(rt)
            ),
        )
        .about(rt, name, rt.plural.clone())
    }

    /// 409 Conflict for a stale resourceVersion.
    pub fn stale(rt: &ResourceType, name: &str) -> Self {
        Self::conflict(
            rt,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 Invalid with field causes.
    pub fn invalid(rt: &ResourceType, name: &str, causes: Vec<Cause>) -> Self {
        let parts: Vec<String> = causes
            .iter()
            .map(|c| {
                if c.field.is_empty() {
                    c.message.clone()
                } else {
                    format!("{}: {}", c.field, c.message)
                }
            })
            .collect();
        let list = if parts.len() == 1 {
            parts[0].clone()
        } else {
            format!("[{}]", parts.join(", "))
        };
        let mut e = Self::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {list}", qualified_kind(rt)),
        )
        .about(rt, name, rt.kind.clone());
        e.details_mut().causes = causes;
        e
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml; got {content_type}"
            ),
        )
    }

    /// 410 Expired (too old resourceVersion or continue token).
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 403 Forbidden.
    pub fn forbidden(rt: &ResourceType, name: &str, why: &str) -> Self {
        Self::new(
            403,
            "Forbidden",
            format!("{} \"{name}\" is forbidden: {why}", qualified_resource(rt)),
        )
        .about(rt, name, rt.plural.clone())
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// The `meta/v1 Status` body of this error.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            // Like Go's `omitempty` on StatusDetails.
            let mut details = json!({});
            for (key, value) in [("name", &d.name), ("group", &d.group), ("kind", &d.kind)] {
                if !value.is_empty() {
                    details[key] = json!(value);
                }
            }
            if !d.causes.is_empty() {
                let causes: Vec<Value> = d
                    .causes
                    .iter()
                    .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                    .collect();
                details["causes"] = Value::Array(causes);
            }
            status["details"] = details;
        }
        status
    }

    /// Fills in the details of a patch or apply error that lacked the object's identity.
    pub(crate) fn about_object(mut self, rt: &ResourceType, name: &str) -> Self {
        if self.details.as_ref().is_none_or(|d| d.name.is_empty()) {
            let kind = if self.code == 422 {
                rt.kind.clone()
            } else {
                rt.plural.clone()
            };
            let d = self.details_mut();
            d.name = name.to_string();
            d.group = rt.group.clone();
            d.kind = kind;
        }
        if self.code == 422 && !self.message.contains(" is invalid: ") {
            self.message = format!(
                "{} \"{name}\" is invalid: {}",
                qualified_kind(rt),
                self.message
            );
        }
        if self.code == 409
            && self.reason == "Conflict"
            && !self.message.starts_with("Apply failed")
            && !self.message.starts_with("Operation cannot")
        {
            self.message = format!(
                "Operation cannot be fulfilled on {} \"{name}\": {}",
                qualified_resource(rt),
                self.message
            );
        }
        self
    }
}
