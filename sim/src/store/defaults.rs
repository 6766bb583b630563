//! Defaulting of built-in kinds, as kube-apiserver's registered defaulters do it, so the
//! stored objects (and the diffs kubectl computes against them) look like a real cluster's.

use serde_json::{Map, Value, json};

use super::meta;
use super::types::ResourceType;

fn obj_mut<'a>(v: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    let map = v.as_object_mut().expect("object");
    let entry = map.entry(key).or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    entry.as_object_mut().expect("object")
}

fn default(map: &mut Map<String, Value>, key: &str, value: Value) {
    if map.get(key).is_none_or(Value::is_null) {
        map.insert(key.to_string(), value);
    }
}

fn image_pull_policy(image: &str) -> &'static str {
    let last = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') {
        "IfNotPresent"
    } else if !last.contains(':') || last.ends_with(":latest") {
        "Always"
    } else {
        "IfNotPresent"
    }
}

fn container_defaults(c: &mut Value) {
    let Some(map) = c.as_object_mut() else { return };
    let image = map
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    default(map, "imagePullPolicy", json!(image_pull_policy(&image)));
    default(map, "terminationMessagePath", json!("/dev/termination-log"));
    default(map, "terminationMessagePolicy", json!("File"));
    default(map, "resources", json!({}));
    if let Some(Value::Array(ports)) = map.get_mut("ports") {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            default(p, "protocol", json!("TCP"));
        }
    }
    if let Some(Value::Array(env)) = map.get_mut("env") {
        for e in env.iter_mut() {
            if let Some(fr) = e
                .get_mut("valueFrom")
                .and_then(|v| v.get_mut("fieldRef"))
                .and_then(Value::as_object_mut)
            {
                default(fr, "apiVersion", json!("v1"));
            }
        }
    }
}

fn pod_spec_defaults(spec: &mut Map<String, Value>) {
    default(spec, "restartPolicy", json!("Always"));
    default(spec, "terminationGracePeriodSeconds", json!(30));
    default(spec, "dnsPolicy", json!("ClusterFirst"));
    default(spec, "schedulerName", json!("default-scheduler"));
    default(spec, "securityContext", json!({}));
    for key in ["containers", "initContainers"] {
        if let Some(Value::Array(cs)) = spec.get_mut(key) {
            cs.iter_mut().for_each(container_defaults);
        }
    }
    if let Some(Value::Array(vols)) = spec.get_mut("volumes") {
        for v in vols.iter_mut().filter_map(Value::as_object_mut) {
            for (src, mode_key) in [
                ("configMap", "defaultMode"),
                ("secret", "defaultMode"),
                ("projected", "defaultMode"),
            ] {
                if let Some(s) = v.get_mut(src).and_then(Value::as_object_mut) {
                    default(s, mode_key, json!(420));
                }
            }
        }
    }
}

fn template_defaults(obj: &mut Value) {
    let spec = obj_mut(obj, "spec");
    if let Some(tpl) = spec.get_mut("template") {
        let tspec = obj_mut(tpl, "spec");
        pod_spec_defaults(tspec);
    }
}

fn qos_class(spec: &Value) -> &'static str {
    let containers = spec
        .get("containers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let has_resources = containers.iter().any(|c| {
        c.get("resources")
            .and_then(Value::as_object)
            .is_some_and(|r| {
                r.values()
                    .any(|v| v.as_object().is_some_and(|m| !m.is_empty()))
            })
    });
    if has_resources {
        "Burstable"
    } else {
        "BestEffort"
    }
}

/// Fills in defaults of a built-in object; `old` is the stored object on updates.
pub(crate) fn apply(rt: &ResourceType, obj: &mut Value, old: Option<&Value>) {
    if rt.crd.is_some() {
        return;
    }
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => pod(obj, old),
        ("apps", "statefulsets") => statefulset(obj),
        ("apps", "deployments") => deployment(obj),
        ("apps", "replicasets") => {
            template_defaults(obj);
            default(obj_mut(obj, "spec"), "replicas", json!(1));
        }
        ("apps", "daemonsets") => daemonset(obj),
        ("batch", "jobs") => job(obj),
        ("", "services") => service(obj, old),
        ("", "namespaces") => namespace(obj),
        ("", "secrets") => {
            if let Some(map) = obj.as_object_mut() {
                default(map, "type", json!("Opaque"));
            }
        }
        _ => {}
    }
}

/// A new pod also gets its initial status: Pending, with its QoS class.
fn pod(obj: &mut Value, old: Option<&Value>) {
    let spec = obj_mut(obj, "spec");
    pod_spec_defaults(spec);
    default(spec, "serviceAccountName", json!("default"));
    default(spec, "serviceAccount", json!("default"));
    default(spec, "enableServiceLinks", json!(true));
    default(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    default(spec, "priority", json!(0));
    if old.is_none() {
        let qos = qos_class(&obj["spec"]);
        obj["status"] = json!({"phase": "Pending", "qosClass": qos});
    }
}

fn statefulset(obj: &mut Value) {
    template_defaults(obj);
    let spec = obj_mut(obj, "spec");
    default(spec, "replicas", json!(1));
    default(spec, "podManagementPolicy", json!("OrderedReady"));
    default(spec, "revisionHistoryLimit", json!(10));
    default(
        spec,
        "updateStrategy",
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
    );
    default(
        spec,
        "persistentVolumeClaimRetentionPolicy",
        json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
    );
}

fn deployment(obj: &mut Value) {
    template_defaults(obj);
    let spec = obj_mut(obj, "spec");
    default(spec, "replicas", json!(1));
    default(spec, "revisionHistoryLimit", json!(10));
    default(spec, "progressDeadlineSeconds", json!(600));
    default(
        spec,
        "strategy",
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}),
    );
}

fn daemonset(obj: &mut Value) {
    template_defaults(obj);
    let spec = obj_mut(obj, "spec");
    default(spec, "revisionHistoryLimit", json!(10));
    default(
        spec,
        "updateStrategy",
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}),
    );
}

fn job(obj: &mut Value) {
    template_defaults(obj);
    let spec = obj_mut(obj, "spec");
    default(spec, "backoffLimit", json!(6));
    default(spec, "completionMode", json!("NonIndexed"));
    default(spec, "suspend", json!(false));
}

/// A service keeps the cluster IP it was given; a new one gets one derived from its name.
fn service(obj: &mut Value, old: Option<&Value>) {
    let old_spec = old
        .and_then(|o| o.get("spec"))
        .cloned()
        .unwrap_or(json!({}));
    let name = meta::name(obj).to_string();
    let spec = obj_mut(obj, "spec");
    default(spec, "type", json!("ClusterIP"));
    default(spec, "sessionAffinity", json!("None"));
    if spec.get("type").and_then(Value::as_str) != Some("ExternalName") {
        let ip = old_spec
            .get("clusterIP")
            .cloned()
            .unwrap_or_else(|| json!(cluster_ip(&name)));
        default(spec, "clusterIP", ip.clone());
        let ip = spec.get("clusterIP").cloned().unwrap_or(ip);
        default(spec, "clusterIPs", json!([ip]));
        default(spec, "ipFamilies", json!(["IPv4"]));
        default(spec, "ipFamilyPolicy", json!("SingleStack"));
        default(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if let Some(Value::Array(ports)) = spec.get_mut("ports") {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            default(p, "protocol", json!("TCP"));
            if let Some(port) = p.get("port").cloned() {
                default(p, "targetPort", port);
            }
        }
    }
}

/// A namespace is labelled with its name, finalized by `kubernetes` and `Active`.
fn namespace(obj: &mut Value) {
    let name = meta::name(obj).to_string();
    let m = meta::meta_mut(obj);
    let labels = m.entry("labels").or_insert_with(|| json!({}));
    if let Some(l) = labels.as_object_mut() {
        l.insert("kubernetes.io/metadata.name".into(), json!(name));
    }
    let spec = obj_mut(obj, "spec");
    default(spec, "finalizers", json!(["kubernetes"]));
    let status = obj_mut(obj, "status");
    default(status, "phase", json!("Active"));
}

/// A stable cluster IP in 10.96.0.0/12 derived from the service name.
fn cluster_ip(name: &str) -> String {
    let h = name
        .bytes()
        .fold(2166136261u32, |h, b| (h ^ b as u32).wrapping_mul(16777619));
    format!("10.96.{}.{}", (h >> 8) % 256, (h % 254) + 1)
}
