//! Table columns of built-in kinds, after kube-apiserver's printers, so `kubectl get`
//! shows what it shows on a real cluster.

use serde_json::{Value, json};

use super::table::{Column, age_cell, age_column, name_column};
use crate::store::ResourceType;
use crate::store::meta;

fn s<'a>(o: &'a Value, path: &[&str]) -> Option<&'a str> {
    meta::str_at(o, path)
}

fn i(o: &Value, path: &[&str]) -> i64 {
    meta::at(o, path).and_then(Value::as_i64).unwrap_or(0)
}

fn none_if_empty(v: String) -> Value {
    if v.is_empty() {
        json!("<none>")
    } else {
        json!(v)
    }
}

fn list<'a>(o: &'a Value, path: &[&str]) -> &'a [Value] {
    meta::at(o, path)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn pod_ready(o: &Value) -> Value {
    let total = list(o, &["spec", "containers"]).len();
    let ready = list(o, &["status", "containerStatuses"])
        .iter()
        .filter(|c| c.get("ready").and_then(Value::as_bool) == Some(true))
        .count();
    json!(format!("{ready}/{total}"))
}

fn pod_status(o: &Value) -> Value {
    if meta::at(o, &["metadata", "deletionTimestamp"]).is_some() {
        return json!("Terminating");
    }
    let waiting = list(o, &["status", "containerStatuses"])
        .iter()
        .find_map(|c| meta::str_at(c, &["state", "waiting", "reason"]));
    json!(
        s(o, &["status", "reason"])
            .or(waiting)
            .or(s(o, &["status", "phase"]))
            .unwrap_or("Pending")
    )
}

fn pod_restarts(o: &Value) -> Value {
    json!(
        list(o, &["status", "containerStatuses"])
            .iter()
            .map(|c| c.get("restartCount").and_then(Value::as_i64).unwrap_or(0))
            .sum::<i64>()
    )
}

fn pod_ip(o: &Value) -> Value {
    none_if_empty(s(o, &["status", "podIP"]).unwrap_or("").to_string())
}

fn pod_node(o: &Value) -> Value {
    none_if_empty(s(o, &["spec", "nodeName"]).unwrap_or("").to_string())
}

fn none(_: &Value) -> Value {
    json!("<none>")
}

fn ready_of_replicas(o: &Value) -> Value {
    json!(format!(
        "{}/{}",
        i(o, &["status", "readyReplicas"]),
        i(o, &["spec", "replicas"])
    ))
}

fn containers(o: &Value) -> Value {
    let names: Vec<&str> = list(o, &["spec", "template", "spec", "containers"])
        .iter()
        .filter_map(|c| c.get("name").and_then(Value::as_str))
        .collect();
    json!(names.join(","))
}

fn images(o: &Value) -> Value {
    let images: Vec<&str> = list(o, &["spec", "template", "spec", "containers"])
        .iter()
        .filter_map(|c| c.get("image").and_then(Value::as_str))
        .collect();
    json!(images.join(","))
}

fn updated(o: &Value) -> Value {
    json!(i(o, &["status", "updatedReplicas"]))
}

fn available(o: &Value) -> Value {
    json!(i(o, &["status", "availableReplicas"]))
}

fn data_count(o: &Value) -> Value {
    let count = |k: &str| {
        o.get(k)
            .and_then(Value::as_object)
            .map(|m| m.len())
            .unwrap_or(0)
    };
    json!(count("data") + count("binaryData"))
}

fn secret_type(o: &Value) -> Value {
    json!(s(o, &["type"]).unwrap_or("Opaque"))
}

fn phase(o: &Value) -> Value {
    json!(s(o, &["status", "phase"]).unwrap_or(""))
}

fn svc_type(o: &Value) -> Value {
    json!(s(o, &["spec", "type"]).unwrap_or("ClusterIP"))
}

fn cluster_ip(o: &Value) -> Value {
    none_if_empty(s(o, &["spec", "clusterIP"]).unwrap_or("").to_string())
}

fn ports(o: &Value) -> Value {
    let ports: Vec<String> = list(o, &["spec", "ports"])
        .iter()
        .map(|p| {
            format!(
                "{}/{}",
                p.get("port").map(|v| v.to_string()).unwrap_or_default(),
                p.get("protocol").and_then(Value::as_str).unwrap_or("TCP")
            )
        })
        .collect();
    none_if_empty(ports.join(","))
}

fn holder(o: &Value) -> Value {
    json!(s(o, &["spec", "holderIdentity"]).unwrap_or(""))
}

fn created_at(o: &Value) -> Value {
    json!(s(o, &["metadata", "creationTimestamp"]).unwrap_or(""))
}

fn role_ref(o: &Value) -> Value {
    json!(format!(
        "{}/{}",
        s(o, &["roleRef", "kind"]).unwrap_or(""),
        s(o, &["roleRef", "name"]).unwrap_or("")
    ))
}

fn event_last_seen(o: &Value) -> Value {
    let ts = s(o, &["series", "lastObservedTime"])
        .or(s(o, &["lastTimestamp"]))
        .or(s(o, &["eventTime"]))
        .or(s(o, &["metadata", "creationTimestamp"]));
    age_cell(ts)
}

fn event_type(o: &Value) -> Value {
    json!(s(o, &["type"]).unwrap_or(""))
}

fn event_reason(o: &Value) -> Value {
    json!(s(o, &["reason"]).unwrap_or(""))
}

fn event_object(o: &Value) -> Value {
    let kind = s(o, &["involvedObject", "kind"])
        .unwrap_or("")
        .to_lowercase();
    json!(format!(
        "{kind}/{}",
        s(o, &["involvedObject", "name"]).unwrap_or("")
    ))
}

fn event_message(o: &Value) -> Value {
    json!(s(o, &["message"]).unwrap_or(""))
}

fn event_count(o: &Value) -> Value {
    let series = i(o, &["series", "count"]);
    json!(if series > 0 {
        series
    } else {
        i(o, &["count"]).max(1)
    })
}

/// Columns of a built-in kind with a dedicated printer, `None` for Name and Age only.
pub(crate) fn columns(rt: &ResourceType) -> Option<Vec<Column>> {
    let c = Column::computed;
    let cols = match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => pod_columns(),
        ("apps", "statefulsets") => vec![
            name_column(),
            c("Ready", "string", 0, ready_of_replicas),
            age_column(),
            c("Containers", "string", 1, containers),
            c("Images", "string", 1, images),
        ],
        ("apps", "deployments") => deployment_columns(),
        ("", "configmaps") => vec![
            name_column(),
            c("Data", "integer", 0, data_count),
            age_column(),
        ],
        ("", "secrets") => vec![
            name_column(),
            c("Type", "string", 0, secret_type),
            c("Data", "integer", 0, data_count),
            age_column(),
        ],
        ("", "namespaces") => vec![name_column(), c("Status", "string", 0, phase), age_column()],
        ("", "services") => service_columns(),
        ("coordination.k8s.io", "leases") => {
            vec![
                name_column(),
                c("Holder", "string", 0, holder),
                age_column(),
            ]
        }
        ("apiextensions.k8s.io", "customresourcedefinitions")
        | ("rbac.authorization.k8s.io", "clusterroles" | "roles") => {
            vec![name_column(), c("Created At", "date", 0, created_at)]
        }
        ("rbac.authorization.k8s.io", "clusterrolebindings" | "rolebindings") => {
            vec![
                name_column(),
                c("Role", "string", 0, role_ref),
                age_column(),
            ]
        }
        ("", "events") => event_columns(),
        _ => return None,
    };
    Some(cols)
}

fn pod_columns() -> Vec<Column> {
    let c = Column::computed;
    vec![
        name_column(),
        c("Ready", "string", 0, pod_ready),
        c("Status", "string", 0, pod_status),
        c("Restarts", "integer", 0, pod_restarts),
        age_column(),
        c("IP", "string", 1, pod_ip),
        c("Node", "string", 1, pod_node),
        c("Nominated Node", "string", 1, none),
        c("Readiness Gates", "string", 1, none),
    ]
}

fn deployment_columns() -> Vec<Column> {
    let c = Column::computed;
    vec![
        name_column(),
        c("Ready", "string", 0, ready_of_replicas),
        c("Up-to-date", "integer", 0, updated),
        c("Available", "integer", 0, available),
        age_column(),
        c("Containers", "string", 1, containers),
        c("Images", "string", 1, images),
    ]
}

fn service_columns() -> Vec<Column> {
    let c = Column::computed;
    vec![
        name_column(),
        c("Type", "string", 0, svc_type),
        c("Cluster-IP", "string", 0, cluster_ip),
        c("External-IP", "string", 0, none),
        c("Port(s)", "string", 0, ports),
        age_column(),
    ]
}

/// Events lead with when and what happened; their name comes last, and only with `-o wide`.
fn event_columns() -> Vec<Column> {
    let c = Column::computed;
    vec![
        c("Last Seen", "string", 0, event_last_seen),
        c("Type", "string", 0, event_type),
        c("Reason", "string", 0, event_reason),
        c("Object", "string", 0, event_object),
        c("Message", "string", 0, event_message),
        c("Count", "integer", 1, event_count),
        Column {
            priority: 1,
            ..name_column()
        },
    ]
}
