//! `components.schemas` of a custom resource version, built from its CRD's
//! `openAPIV3Schema` the way apiextensions-apiserver's OpenAPI builder does: `apiVersion`,
//! `kind` and a `metadata` reference added (also in embedded resources), the
//! `x-kubernetes-group-version-kind` that kubectl looks the schema up by, and the list kind.

use serde_json::{Map, Value, json};

use super::meta_schemas::{LIST_META, OBJECT_META, reference};
use crate::store::ResourceType;

const API_VERSION_DESCRIPTION: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND_DESCRIPTION: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
const METADATA_DESCRIPTION: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const LIST_METADATA_DESCRIPTION: &str = "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";

/// `io.swarm.v1.SwarmPool` for `swarm.io/v1` `SwarmPool`: the group reversed, as
/// kube-openapi names definitions.
pub(super) fn definition_name(t: &ResourceType, kind: &str) -> String {
    let mut parts: Vec<&str> = t.group.split('.').collect();
    parts.reverse();
    format!("{}.{}.{kind}", parts.join("."), t.version)
}

/// The schemas of a custom resource version and its list, by definition name.
pub(super) fn schemas(t: &ResourceType, schema: &Value) -> Vec<(String, Value)> {
    let gvk = |kind: &str| json!([{"group": t.group, "version": t.version, "kind": kind}]);
    let mut object = schema.clone();
    add_type_meta(&mut object);
    object["properties"]["metadata"] = reference(OBJECT_META, METADATA_DESCRIPTION);
    add_embedded_meta(&mut object);
    object["x-kubernetes-group-version-kind"] = gvk(&t.kind);

    let name = definition_name(t, &t.kind);
    let list_kind = format!("{}List", t.kind);
    let mut list = json!({
        "description": format!("{list_kind} is a list of {}", t.kind),
        "type": "object",
        "required": ["items"],
        "properties": {
            "items": {
                "description": format!("List of {}. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md", t.plural),
                "type": "array",
                "items": {"$ref": format!("#/components/schemas/{name}")},
            },
            "metadata": reference(LIST_META, LIST_METADATA_DESCRIPTION),
        },
        "x-kubernetes-group-version-kind": gvk(&list_kind),
    });
    add_type_meta(&mut list);
    vec![(definition_name(t, &list_kind), list), (name, object)]
}

fn add_type_meta(schema: &mut Value) {
    if !schema["properties"].is_object() {
        schema["properties"] = Value::Object(Map::new());
    }
    schema["properties"]["apiVersion"] =
        json!({"type": "string", "description": API_VERSION_DESCRIPTION});
    schema["properties"]["kind"] = json!({"type": "string", "description": KIND_DESCRIPTION});
}

/// Objects marked `x-kubernetes-embedded-resource` get type and object metadata too.
fn add_embedded_meta(schema: &mut Value) {
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        props.values_mut().for_each(add_embedded_meta);
    }
    for key in ["items", "additionalProperties"] {
        if let Some(inner) = schema.get_mut(key).filter(|v| v.is_object()) {
            add_embedded_meta(inner);
        }
    }
    if schema["x-kubernetes-embedded-resource"] == json!(true) {
        add_type_meta(schema);
        schema["properties"]["metadata"] = reference(OBJECT_META, METADATA_DESCRIPTION);
        let required = schema["required"].as_array().cloned().unwrap_or_default();
        let mut required: Vec<Value> = required;
        for field in ["kind", "apiVersion"] {
            if !required.iter().any(|r| r == field) {
                required.push(json!(field));
            }
        }
        schema["required"] = Value::Array(required);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    fn widget() -> ResourceType {
        let mut t = (*Store::new().resource_types()[0]).clone();
        t.group = "example.kube-sim.io".into();
        t.version = "v1".into();
        t.kind = "Widget".into();
        t.plural = "widgets".into();
        t
    }

    #[test]
    fn the_object_schema_gets_type_meta_a_metadata_reference_and_its_gvk() {
        let schema = json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "template": {"type": "object", "x-kubernetes-embedded-resource": true},
                }},
            },
        });
        let schemas = schemas(&widget(), &schema);
        let names: Vec<&str> = schemas.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "io.kube-sim.example.v1.WidgetList",
                "io.kube-sim.example.v1.Widget"
            ]
        );
        let object = &schemas[1].1;
        assert_eq!(
            object["x-kubernetes-group-version-kind"],
            json!([{"group": "example.kube-sim.io", "version": "v1", "kind": "Widget"}])
        );
        assert_eq!(object["properties"]["kind"]["type"], "string");
        assert_eq!(
            object["properties"]["metadata"]["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
        );
        let embedded = &object["properties"]["spec"]["properties"]["template"];
        assert_eq!(embedded["required"], json!(["kind", "apiVersion"]));
        assert!(embedded["properties"]["metadata"].is_object());
        let list = &schemas[0].1;
        assert_eq!(
            list["properties"]["items"]["items"]["$ref"],
            "#/components/schemas/io.kube-sim.example.v1.Widget"
        );
    }
}
