//! The `meta/v1` schemas custom resource documents refer to: object and list metadata,
//! with the fields kubectl explain shows, described briefly.

use serde_json::{Value, json};

pub(super) const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
pub(super) const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
const OWNER_REFERENCE: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference";
const MANAGED_FIELDS_ENTRY: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ManagedFieldsEntry";
const TIME: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Time";

/// A property that refers to a definition, in the `allOf` form OpenAPI v3 needs for a
/// reference with a description beside it.
pub(super) fn reference(name: &str, description: &str) -> Value {
    json!({
        "description": description,
        "allOf": [{"$ref": format!("#/components/schemas/{name}")}],
    })
}

fn string(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

fn string_map(description: &str) -> Value {
    json!({
        "type": "object",
        "description": description,
        "additionalProperties": {"type": "string", "default": ""},
    })
}

fn list_of(name: &str, description: &str) -> Value {
    json!({
        "type": "array",
        "description": description,
        "items": {"allOf": [{"$ref": format!("#/components/schemas/{name}")}], "default": {}},
    })
}

/// The definitions, by name.
pub(super) fn schemas() -> Vec<(String, Value)> {
    let object_meta = json!({
        "description": "ObjectMeta is metadata that all persisted resources must have, which includes all objects users must create.",
        "type": "object",
        "properties": {
            "name": string("Name must be unique within a namespace. Cannot be updated."),
            "generateName": string("An optional prefix the server uses to generate a unique name, when name is not given."),
            "namespace": string("The namespace the object lives in; empty for cluster-scoped objects."),
            "uid": string("The unique identifier of this object in time and space, set by the server."),
            "resourceVersion": string("An opaque value identifying the internal version of this object, for optimistic concurrency and watches."),
            "generation": {"type": "integer", "format": "int64", "description": "A sequence number representing a specific generation of the desired state, set by the server."},
            "creationTimestamp": reference(TIME, "When the object was created, set by the server."),
            "deletionTimestamp": reference(TIME, "When the object will be deleted, set by the server when deletion is requested."),
            "deletionGracePeriodSeconds": {"type": "integer", "format": "int64", "description": "Seconds allowed for graceful termination before the object is removed."},
            "labels": string_map("Map of string keys and values to organize and categorize (scope and select) objects."),
            "annotations": string_map("Unstructured key value map stored with a resource that may be set by external tools."),
            "ownerReferences": list_of(OWNER_REFERENCE, "Objects this object depends on; it is garbage collected when they are all gone."),
            "finalizers": {
                "type": "array",
                "description": "Must be empty before the object is deleted from the registry.",
                "items": {"type": "string", "default": ""},
                "x-kubernetes-list-type": "set",
            },
            "managedFields": list_of(MANAGED_FIELDS_ENTRY, "Which field managers own which fields, maintained by server-side apply."),
        },
    });
    let list_meta = json!({
        "description": "ListMeta describes metadata that synthetic resources must have, including lists and various status objects.",
        "type": "object",
        "properties": {
            "resourceVersion": string("The version of the list, for watches from it."),
            "continue": string("Set when the list was limited: the token that fetches the next page."),
            "remainingItemCount": {"type": "integer", "format": "int64", "description": "The number of items after this page, when known."},
        },
    });
    let owner_reference = json!({
        "description": "OwnerReference contains enough information to let you identify an owning object.",
        "type": "object",
        "required": ["apiVersion", "kind", "name", "uid"],
        "properties": {
            "apiVersion": string("API version of the referent."),
            "kind": string("Kind of the referent."),
            "name": string("Name of the referent."),
            "uid": string("UID of the referent."),
            "controller": {"type": "boolean", "description": "If true, this reference points to the managing controller."},
            "blockOwnerDeletion": {"type": "boolean", "description": "If true, the owner cannot be deleted in the foreground before this object is."},
        },
        "x-kubernetes-map-type": "atomic",
    });
    let managed_fields_entry = json!({
        "description": "ManagedFieldsEntry is a workflow-id, a FieldSet and the group version of the resource that the fieldset applies to.",
        "type": "object",
        "properties": {
            "manager": string("The identifier of the workflow managing these fields."),
            "operation": string("The type of operation which lead to this entry: Apply or Update."),
            "apiVersion": string("The version of the resource this field set applies to."),
            "time": reference(TIME, "When the entry was last changed."),
            "fieldsType": string("The discriminator for the format of the fields: FieldsV1."),
            "fieldsV1": {"type": "object", "description": "The set of fields managed."},
            "subresource": string("The subresource used to update the object, if any."),
        },
    });
    let time = json!({
        "description": "Time is a wrapper around time.Time which supports correct marshaling to YAML and JSON.",
        "type": "string",
        "format": "date-time",
    });
    [
        (OBJECT_META, object_meta),
        (LIST_META, list_meta),
        (OWNER_REFERENCE, owner_reference),
        (MANAGED_FIELDS_ENTRY, managed_fields_entry),
        (TIME, time),
    ]
    .into_iter()
    .map(|(name, schema)| (name.to_string(), schema))
    .collect()
}
