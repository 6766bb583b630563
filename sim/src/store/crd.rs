//! CustomResourceDefinitions: validation of the definition, its status conditions, and the
//! resource types it serves.

use std::sync::Arc;

use serde_json::{Value, json};

use super::error::{ApiError, Cause};
use super::meta;
use super::state::Sub;
use super::types::{PrinterColumn, ResourceType, ScaleSubresource};

/// Finalizer kube-apiserver puts on every CRD so its instances are deleted first.
pub(crate) const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

fn s<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    meta::str_at(v, path).unwrap_or("")
}

/// Storage key of a CRD's instances (all versions share it).
pub(crate) fn storage_key(crd: &Value) -> String {
    format!(
        "{}/{}",
        s(crd, &["spec", "group"]),
        s(crd, &["spec", "names", "plural"])
    )
}

fn versions(crd: &Value) -> Vec<Value> {
    meta::at(crd, &["spec", "versions"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The resource types a CRD serves, one per served version.
pub(crate) fn resource_types(crd: &Value) -> Vec<Arc<ResourceType>> {
    let base = common_type(crd);
    versions(crd)
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool) == Some(true))
        .map(|v| Arc::new(version_type(&base, v)))
        .collect()
}

/// What every version of a CRD serves alike: names, scope and storage; the per-version
/// parts left empty for [`version_type`].
fn common_type(crd: &Value) -> ResourceType {
    let group = s(crd, &["spec", "group"]).to_string();
    let names = meta::at(crd, &["spec", "names"])
        .cloned()
        .unwrap_or(json!({}));
    let kind = s(&names, &["kind"]).to_string();
    let plural = s(&names, &["plural"]).to_string();
    let singular = match s(&names, &["singular"]) {
        "" => kind.to_lowercase(),
        other => other.to_string(),
    };
    ResourceType {
        storage: format!("{group}/{plural}"),
        group,
        version: String::new(),
        kind,
        plural,
        namespaced: s(crd, &["spec", "scope"]) != "Cluster",
        singular,
        short_names: strings(&names, "shortNames"),
        categories: strings(&names, "categories"),
        status_subresource: false,
        scale: None,
        printer_columns: Vec::new(),
        has_generation: true,
        selectable_fields: Vec::new(),
        crd: Some(meta::name(crd).to_string()),
        storage_version: storage_version(crd).unwrap_or_default(),
        schema: None,
    }
}

/// The type one served version `v` of a CRD serves: `base` with that version's
/// subresources, printer columns, selectable fields and schema.
fn version_type(base: &ResourceType, v: &Value) -> ResourceType {
    let subresources = v.get("subresources").cloned().unwrap_or(json!({}));
    ResourceType {
        version: s(v, &["name"]).to_string(),
        status_subresource: subresources.get("status").is_some(),
        scale: subresources.get("scale").map(|sc| ScaleSubresource {
            spec_replicas_path: s(sc, &["specReplicasPath"]).to_string(),
            status_replicas_path: s(sc, &["statusReplicasPath"]).to_string(),
            label_selector_path: sc
                .get("labelSelectorPath")
                .and_then(Value::as_str)
                .map(String::from),
        }),
        printer_columns: printer_columns(v),
        selectable_fields: v
            .get("selectableFields")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|f| f.get("jsonPath").and_then(Value::as_str))
                    .map(|p| p.trim_start_matches('.').to_string())
                    .collect()
            })
            .unwrap_or_default(),
        schema: v
            .get("schema")
            .and_then(|s| s.get("openAPIV3Schema"))
            .cloned()
            .map(Arc::new),
        ..base.clone()
    }
}

/// The string list at `key` of the CRD's `names` (short names, categories).
fn strings(names: &Value, key: &str) -> Vec<String> {
    names
        .get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// A version's `additionalPrinterColumns`.
fn printer_columns(v: &Value) -> Vec<PrinterColumn> {
    v.get("additionalPrinterColumns")
        .and_then(Value::as_array)
        .map(|cols| {
            cols.iter()
                .map(|c| PrinterColumn {
                    name: s(c, &["name"]).to_string(),
                    type_: s(c, &["type"]).to_string(),
                    format: s(c, &["format"]).to_string(),
                    description: s(c, &["description"]).to_string(),
                    json_path: s(c, &["jsonPath"]).to_string(),
                    priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Checks a CRD's names, scope and versions; every violation is one cause (422).
fn validate(rt: &ResourceType, crd: &Value) -> Result<(), ApiError> {
    let name = meta::name(crd);
    let mut causes = Vec::new();
    check_names(crd, &mut causes);
    let scope = s(crd, &["spec", "scope"]);
    if scope != "Namespaced" && scope != "Cluster" {
        causes.push(Cause::new(
            "FieldValueNotSupported",
            "spec.scope",
            format!(
                "Unsupported value: \"{scope}\": supported values: \"Cluster\", \"Namespaced\""
            ),
        ));
    }
    check_versions(&versions(crd), &mut causes);
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(rt, name, causes))
    }
}

/// Group, plural and kind are required, and the CRD is named `<plural>.<group>`.
fn check_names(crd: &Value, causes: &mut Vec<Cause>) {
    let mut require = |path: &[&str], field: &str| {
        if s(crd, path).is_empty() {
            causes.push(Cause::new("FieldValueRequired", field, "Required value"));
        }
    };
    require(&["spec", "group"], "spec.group");
    require(&["spec", "names", "plural"], "spec.names.plural");
    require(&["spec", "names", "kind"], "spec.names.kind");
    let name = meta::name(crd);
    let group = s(crd, &["spec", "group"]);
    let plural = s(crd, &["spec", "names", "plural"]);
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "metadata.name",
            format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
        ));
    }
}

/// At least one version, exactly one of them the storage version, and each with an object
/// schema and its `served` and `storage` flags.
fn check_versions(vs: &[Value], causes: &mut Vec<Cause>) {
    if vs.is_empty() {
        causes.push(Cause::new(
            "FieldValueRequired",
            "spec.versions",
            "Required value: must have exactly one version marked as storage version",
        ));
    }
    let storage = vs
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .count();
    if !vs.is_empty() && storage != 1 {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "spec.versions",
            "Invalid value: must have exactly one version marked as storage version",
        ));
    }
    for (i, v) in vs.iter().enumerate() {
        if v.get("schema")
            .and_then(|s| s.get("openAPIV3Schema"))
            .is_none()
        {
            causes.push(Cause::new(
                "FieldValueRequired",
                format!("spec.versions[{i}].schema.openAPIV3Schema"),
                "Required value: schemas are required",
            ));
        } else if meta::str_at(v, &["schema", "openAPIV3Schema", "type"]) != Some("object") {
            causes.push(Cause::new(
                "FieldValueInvalid",
                format!("spec.versions[{i}].schema.openAPIV3Schema.type"),
                "Invalid value: must be object at the root",
            ));
        }
        for key in ["served", "storage"] {
            if !v.get(key).is_some_and(Value::is_boolean) {
                causes.push(Cause::new(
                    "FieldValueRequired",
                    format!("spec.versions[{i}].{key}"),
                    "Required value",
                ));
            }
        }
    }
}

fn fill_names(crd: &mut Value) {
    let kind = s(crd, &["spec", "names", "kind"]).to_string();
    if let Some(names) = crd
        .get_mut("spec")
        .and_then(|s| s.get_mut("names"))
        .and_then(Value::as_object_mut)
    {
        names
            .entry("singular")
            .or_insert_with(|| json!(kind.to_lowercase()));
        names
            .entry("listKind")
            .or_insert_with(|| json!(format!("{kind}List")));
    }
    if let Some(spec) = crd.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("conversion")
            .or_insert_with(|| json!({"strategy": "None"}));
    }
}

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": type_, "status": status, "lastTransitionTime": meta::now(), "reason": reason, "message": message})
}

fn storage_version(crd: &Value) -> Option<String> {
    versions(crd)
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .and_then(|v| v.get("name").and_then(Value::as_str))
        .map(String::from)
}

/// Validates a new CRD and gives it the status of an established definition.
pub(crate) fn prepare_create(rt: &ResourceType, crd: &mut Value) -> Result<(), ApiError> {
    validate(rt, crd)?;
    fill_names(crd);
    let mut finalizers = meta::finalizers(crd);
    if !finalizers.iter().any(|f| f == CLEANUP_FINALIZER) {
        finalizers.push(CLEANUP_FINALIZER.into());
    }
    meta::meta_mut(crd).insert("finalizers".into(), json!(finalizers));
    let names = meta::at(crd, &["spec", "names"])
        .cloned()
        .unwrap_or(json!({}));
    crd["status"] = json!({
        "conditions": [
            condition("NamesAccepted", "True", "NoConflicts", "no conflicts found"),
            condition("Established", "True", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "acceptedNames": names,
        "storedVersions": storage_version(crd).into_iter().collect::<Vec<_>>(),
    });
    Ok(())
}

/// Validates an updated CRD; keeps accepted names and stored versions current.
pub(crate) fn prepare_update(
    rt: &ResourceType,
    cur: &Value,
    crd: &mut Value,
    sub: Sub,
) -> Result<(), ApiError> {
    if sub == Sub::Status {
        return Ok(());
    }
    validate(rt, crd)?;
    fill_names(crd);
    let names = meta::at(crd, &["spec", "names"])
        .cloned()
        .unwrap_or(json!({}));
    let mut stored: Vec<Value> = meta::at(cur, &["status", "storedVersions"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(v) = storage_version(crd)
        && !stored.contains(&json!(v))
    {
        stored.push(json!(v));
    }
    let status = crd
        .as_object_mut()
        .expect("object")
        .entry("status")
        .or_insert_with(|| json!({}));
    status["acceptedNames"] = names;
    status["storedVersions"] = Value::Array(stored);
    Ok(())
}

/// Adds the `Terminating` condition of a CRD being deleted.
pub(crate) fn mark_terminating(crd: &mut Value) {
    let status = crd
        .as_object_mut()
        .expect("object")
        .entry("status")
        .or_insert_with(|| json!({}));
    let conds = status
        .as_object_mut()
        .expect("object")
        .entry("conditions")
        .or_insert_with(|| json!([]));
    if let Some(list) = conds.as_array_mut() {
        list.retain(|c| c.get("type").and_then(Value::as_str) != Some("Terminating"));
        list.push(condition(
            "Terminating",
            "True",
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
        ));
    }
}
