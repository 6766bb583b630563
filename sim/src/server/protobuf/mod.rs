//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`) of built-in kinds,
//! decoded into the JSON object a JSON request would carry. kubectl's `create <generator>`
//! subcommands send them.
//!
//! The envelope is the magic `k8s\0` and a `runtime.Unknown` whose `raw` is the object's
//! own message; [`k8s_pb`] decodes the messages and `kinds` lists the ones served.

mod json;
mod kinds;

use k8s_pb::apimachinery::pkg::runtime::Unknown;
use prost::Message;
use serde_json::{Value, json};

use crate::store::ApiError;

const MAGIC: &[u8] = b"k8s\0";

/// The JSON object of a protobuf-encoded body.
pub(crate) fn decode(body: &[u8]) -> Result<Value, ApiError> {
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| ApiError::bad_request("protobuf body does not start with the k8s magic"))?;
    let unknown = Unknown::decode(envelope).map_err(|e| {
        ApiError::bad_request(format!("the protobuf envelope could not be decoded: {e}"))
    })?;
    if unknown
        .content_encoding
        .as_deref()
        .is_some_and(|e| !e.is_empty())
    {
        return Err(ApiError::bad_request(format!(
            "unsupported protobuf content encoding {:?}",
            unknown.content_encoding.unwrap_or_default()
        )));
    }
    let type_meta = unknown.type_meta.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    let raw = unknown.raw.unwrap_or_default();
    let mut object = kinds::decode(&api_version, &kind, &raw)
        .ok_or_else(|| unsupported_kind(&api_version, &kind))?
        .map_err(|e| {
            ApiError::bad_request(format!(
                "the {kind} in the protobuf body could not be decoded: {e}"
            ))
        })?;
    object["apiVersion"] = json!(api_version);
    object["kind"] = json!(kind);
    Ok(object)
}

fn unsupported_kind(api_version: &str, kind: &str) -> ApiError {
    ApiError::new(
        415,
        "UnsupportedMediaType",
        format!(
            "kube-sim does not decode {kind} ({api_version}) from protobuf; send it as application/json"
        ),
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_pb::api::core::v1::{ConfigMap, Secret};
    use k8s_pb::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_pb::apimachinery::pkg::runtime::TypeMeta;

    use super::*;

    /// The body client-go sends: magic, then an Unknown around the object's message.
    fn body(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let unknown = Unknown {
            type_meta: Some(TypeMeta {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        [MAGIC, &unknown.encode_to_vec()].concat()
    }

    /// ObjectMeta as gogo-protobuf writes it: every non-pointer field, empty or not.
    fn meta(name: &str, namespace: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            generate_name: Some(String::new()),
            namespace: Some(namespace.into()),
            self_link: Some(String::new()),
            uid: Some(String::new()),
            resource_version: Some(String::new()),
            generation: Some(0),
            creation_timestamp: Some(Time::default()),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn a_config_map_with_binary_data_decodes_to_its_json() {
        let cm = ConfigMap {
            metadata: Some(meta("foo", "swarm")),
            immutable: None,
            data: BTreeMap::from([("a".into(), "b".into()), ("empty".into(), String::new())]),
            binary_data: BTreeMap::from([("bin".into(), vec![0, 159, 255])]),
        };
        let json = decode(&body("v1", "ConfigMap", cm.encode_to_vec())).unwrap();
        assert_eq!(
            json,
            json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "foo", "namespace": "swarm", "creationTimestamp": null},
                "data": {"a": "b", "empty": ""},
                "binaryData": {"bin": "AJ//"},
            })
        );
    }

    #[test]
    fn a_secret_keeps_binary_data_type_labels_and_a_false_immutable() {
        let mut metadata = meta("creds", "swarm");
        metadata.labels = BTreeMap::from([("app".into(), "swarm".into())]);
        metadata.creation_timestamp = Some(Time {
            seconds: Some(1_700_000_000),
            nanos: Some(0),
        });
        let secret = Secret {
            metadata: Some(metadata),
            immutable: Some(false),
            data: BTreeMap::from([("key".into(), b"\x00\x01secret".to_vec())]),
            string_data: BTreeMap::new(),
            r#type: Some("Opaque".into()),
        };
        let json = decode(&body("v1", "Secret", secret.encode_to_vec())).unwrap();
        assert_eq!(
            json,
            json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": "creds",
                    "namespace": "swarm",
                    "labels": {"app": "swarm"},
                    "creationTimestamp": "2023-11-14T22:13:20Z",
                },
                "immutable": false,
                "data": {"key": "AAFzZWNyZXQ="},
                "type": "Opaque",
            })
        );
    }

    #[test]
    fn an_unlisted_kind_is_415_naming_it() {
        let err = decode(&body("apps/v1", "Deployment", Vec::new())).unwrap_err();
        assert_eq!(err.code, 415);
        assert!(
            err.message.contains("Deployment (apps/v1)"),
            "{}",
            err.message
        );
    }

    #[test]
    fn a_body_without_the_magic_is_a_bad_request() {
        let err = decode(b"{}").unwrap_err();
        assert_eq!(err.code, 400);
    }
}
