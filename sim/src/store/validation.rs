//! Built-in validation kube-apiserver applies to every object (metadata) and to the kinds
//! the simulation serves with controllers (immutable fields, selectors matching templates).

use serde_json::Value;

use super::error::Cause;
use super::meta;
use super::selector::LabelSelector;
use super::types::ResourceType;

const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const LABEL_KEY_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

fn is_label_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

fn is_qualified_name(s: &str) -> bool {
    match s.split_once('/') {
        Some((prefix, name)) => meta::is_dns_subdomain(prefix) && is_label_name(name),
        None => is_label_name(s),
    }
}

/// Labels, annotations and owner references of any object.
fn metadata(obj: &Value, causes: &mut Vec<Cause>) {
    labels(obj, causes);
    if let Some(annotations) =
        meta::at(obj, &["metadata", "annotations"]).and_then(Value::as_object)
    {
        for k in annotations.keys() {
            if !is_qualified_name(k) {
                causes.push(Cause::new(
                    "FieldValueInvalid",
                    "metadata.annotations",
                    format!("Invalid value: {k:?}: {LABEL_KEY_MSG}"),
                ));
            }
        }
    }
    owner_references(obj, causes);
}

/// Label keys are qualified names; values empty or label names of at most 63 characters.
fn labels(obj: &Value, causes: &mut Vec<Cause>) {
    let Some(labels) = meta::labels(obj) else {
        return;
    };
    for (k, v) in labels {
        if !is_qualified_name(k) {
            causes.push(Cause::new(
                "FieldValueInvalid",
                "metadata.labels",
                format!("Invalid value: {k:?}: {LABEL_KEY_MSG}"),
            ));
        }
        match v.as_str() {
            Some(v) if v.is_empty() || is_label_name(v) => {}
            Some(v) if v.len() > 63 => causes.push(Cause::new(
                "FieldValueInvalid",
                "metadata.labels",
                format!("Invalid value: {v:?}: must be no more than 63 characters"),
            )),
            _ => causes.push(Cause::new(
                "FieldValueInvalid",
                "metadata.labels",
                format!("Invalid value: {v}: {LABEL_VALUE_MSG}"),
            )),
        }
    }
}

/// Every owner reference names its owner fully, and at most one is the controller.
fn owner_references(obj: &Value, causes: &mut Vec<Cause>) {
    let owners = meta::at(obj, &["metadata", "ownerReferences"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for o in &owners {
        for (field, what) in [
            ("apiVersion", "version"),
            ("kind", "kind"),
            ("name", "name"),
            ("uid", "uid"),
        ] {
            if o.get(field)
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
            {
                causes.push(Cause::new(
                    "FieldValueInvalid",
                    format!("metadata.ownerReferences.{field}"),
                    format!("Invalid value: \"\": {what} must not be empty"),
                ));
            }
        }
    }
    let controllers: Vec<&Value> = owners
        .iter()
        .filter(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
        .collect();
    if controllers.len() > 1 {
        let names: Vec<String> = controllers
            .iter()
            .map(|o| {
                format!(
                    "{}/{}",
                    o["kind"].as_str().unwrap_or(""),
                    o["name"].as_str().unwrap_or("")
                )
            })
            .collect();
        causes.push(Cause::new(
            "FieldValueInvalid",
            "metadata.ownerReferences",
            format!(
                "Invalid value: []v1.OwnerReference: Only one reference can have Controller set to true. Found \"true\" in references for {}",
                names.join(" and ")
            ),
        ));
    }
}

/// A workload's selector must be set and select its pod template's labels.
fn selector_matches_template(obj: &Value, causes: &mut Vec<Cause>) {
    let Some(sel) = meta::at(obj, &["spec", "selector"]) else {
        causes.push(Cause::new(
            "FieldValueRequired",
            "spec.selector",
            "Required value",
        ));
        return;
    };
    let Ok(selector) = LabelSelector::from_label_selector(sel) else {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "spec.selector",
            "Invalid value: invalid label selector",
        ));
        return;
    };
    if selector.is_empty() {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "spec.selector",
            "Invalid value: \"\": empty selector is invalid for deployment",
        ));
        return;
    }
    let template = serde_json::json!({
        "metadata": {"labels": meta::at(obj, &["spec", "template", "metadata", "labels"]).cloned().unwrap_or(Value::Null)}
    });
    if !selector.matches(&template) {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "spec.template.metadata.labels",
            "Invalid value: `selector` does not match template `labels`",
        ));
    }
}

const STS_MUTABLE: &[&str] = &[
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "revisionHistoryLimit",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
];

fn without(spec: Option<&Value>, keys: &[&str]) -> Value {
    let mut v = spec.cloned().unwrap_or(Value::Null);
    if let Some(m) = v.as_object_mut() {
        for k in keys {
            m.remove(*k);
        }
    }
    v
}

/// Causes for an object about to be stored (`old` is the stored object on updates).
pub(crate) fn validate(rt: &ResourceType, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    metadata(obj, &mut causes);
    if rt.is_custom() {
        return causes;
    }
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("apps", "statefulsets" | "deployments" | "replicasets" | "daemonsets") => {
            selector_matches_template(obj, &mut causes);
            if let Some(old) = old {
                if rt.plural == "statefulsets" {
                    if without(obj.get("spec"), STS_MUTABLE)
                        != without(old.get("spec"), STS_MUTABLE)
                    {
                        causes.push(Cause::new(
                            "FieldValueForbidden",
                            "spec",
                            "Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
                        ));
                    }
                } else if meta::at(obj, &["spec", "selector"])
                    != meta::at(old, &["spec", "selector"])
                {
                    causes.push(Cause::new(
                        "FieldValueInvalid",
                        "spec.selector",
                        "Invalid value: field is immutable",
                    ));
                }
            }
        }
        ("", "configmaps" | "secrets") => {
            if let Some(old) = old
                && old.get("immutable").and_then(Value::as_bool) == Some(true)
            {
                for field in ["data", "binaryData", "stringData", "immutable"] {
                    if obj.get(field) != old.get(field) {
                        causes.push(Cause::new(
                            "FieldValueForbidden",
                            field,
                            "Forbidden: field is immutable when `immutable` is set",
                        ));
                    }
                }
            }
        }
        _ => {}
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::types::builtin_types;
    use serde_json::json;

    fn rt(kind: &str) -> std::sync::Arc<ResourceType> {
        builtin_types()
            .into_iter()
            .find(|t| t.kind == kind && t.group != "events.k8s.io")
            .unwrap()
    }

    #[test]
    fn two_controller_owner_references_are_invalid() {
        let o = json!({"metadata": {"name": "c", "ownerReferences": [
            {"apiVersion": "v1", "kind": "A", "name": "a", "uid": "1", "controller": true},
            {"apiVersion": "v1", "kind": "B", "name": "b", "uid": "2", "controller": true}
        ]}});
        let causes = validate(&rt("ConfigMap"), &o, None);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "metadata.ownerReferences");
    }

    #[test]
    fn statefulset_selector_must_match_and_stay() {
        let sts = json!({"metadata": {"name": "w"}, "spec": {"selector": {"matchLabels": {"app": "w"}},
            "serviceName": "w", "template": {"metadata": {"labels": {"app": "other"}}}}});
        assert_eq!(
            validate(&rt("StatefulSet"), &sts, None)[0].field,
            "spec.template.metadata.labels"
        );
        let ok = json!({"metadata": {"name": "w"}, "spec": {"selector": {"matchLabels": {"app": "w"}},
            "serviceName": "w", "replicas": 1, "template": {"metadata": {"labels": {"app": "w"}}}}});
        let mut renamed = ok.clone();
        renamed["spec"]["serviceName"] = json!("x");
        renamed["spec"]["replicas"] = json!(3);
        assert!(validate(&rt("StatefulSet"), &ok, None).is_empty());
        assert_eq!(
            validate(&rt("StatefulSet"), &renamed, Some(&ok))[0].field,
            "spec"
        );
    }

    #[test]
    fn bad_label_values_are_invalid() {
        let o = json!({"metadata": {"name": "c", "labels": {"app": "has space"}}});
        assert_eq!(validate(&rt("ConfigMap"), &o, None).len(), 1);
    }
}
