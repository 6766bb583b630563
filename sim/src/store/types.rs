//! Resource types the store serves: the built-in catalogue and the registry CRDs extend.

use std::sync::Arc;

use serde_json::Value;

/// A registered resource type (built-in or from a CRD), one per served group-version.
#[derive(Clone, Debug)]
pub struct ResourceType {
    /// API group; empty for the core group.
    pub group: String,
    /// API version within the group, for example `v1`.
    pub version: String,
    /// Kind, for example `StatefulSet`.
    pub kind: String,
    /// Plural resource name used in URLs, for example `statefulsets`.
    pub plural: String,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// Singular resource name (lower-case kind).
    pub singular: String,
    /// Short names for kubectl (`sts`).
    pub short_names: Vec<String>,
    /// Categories (`all`).
    pub categories: Vec<String>,
    /// Whether the type has a `/status` subresource.
    pub status_subresource: bool,
    /// The `/scale` subresource, when the type has one.
    pub scale: Option<ScaleSubresource>,
    /// Extra table columns shown by `kubectl get` after Name.
    pub printer_columns: Vec<PrinterColumn>,
    /// Whether `metadata.generation` is maintained for this type.
    pub has_generation: bool,
    /// Fields besides `metadata.name`/`metadata.namespace` accepted in field selectors.
    pub selectable_fields: Vec<String>,
    /// Name of the CustomResourceDefinition that defines the type, if any.
    pub crd: Option<String>,
    /// The version objects are stored in (all served versions share one storage).
    pub storage_version: String,
    /// Key of the storage bucket; versions and aliases of one resource share it.
    pub(crate) storage: String,
    /// `openAPIV3Schema` of this version, for custom resources.
    pub(crate) schema: Option<Arc<Value>>,
}

/// Where the `/scale` subresource reads and writes replicas.
#[derive(Clone, Debug)]
pub struct ScaleSubresource {
    /// JSON path of the desired replicas, for example `.spec.replicas`.
    pub spec_replicas_path: String,
    /// JSON path of the observed replicas, for example `.status.replicas`.
    pub status_replicas_path: String,
    /// JSON path of the label selector string, if any.
    pub label_selector_path: Option<String>,
}

/// A table column (a CRD's `additionalPrinterColumns` entry).
#[derive(Clone, Debug)]
pub struct PrinterColumn {
    /// Column header.
    pub name: String,
    /// OpenAPI type: string, integer, number, boolean, date.
    pub type_: String,
    /// OpenAPI format, may be empty.
    pub format: String,
    /// Description shown by `kubectl get -o wide` help.
    pub description: String,
    /// JSONPath (simple dotted form) evaluated against the object.
    pub json_path: String,
    /// 0 shows by default; higher priorities only with `-o wide`.
    pub priority: i64,
}

impl ResourceType {
    /// `v1` for the core group, else `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The apiVersion objects carry in storage.
    pub(crate) fn storage_api_version(&self) -> String {
        if self.group.is_empty() {
            self.storage_version.clone()
        } else {
            format!("{}/{}", self.group, self.storage_version)
        }
    }

    /// The verbs discovery advertises.
    pub fn verbs(&self) -> Vec<&'static str> {
        vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }

    /// Whether this type is one of the custom resources served from a CRD.
    pub fn is_custom(&self) -> bool {
        self.crd.is_some()
    }
}

struct Builtin {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    status: bool,
    scale: bool,
    generation: bool,
    all: bool,
}

const fn b(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
) -> Builtin {
    Builtin {
        group,
        version,
        kind,
        plural,
        namespaced,
        short,
        status: false,
        scale: false,
        generation: false,
        all: false,
    }
}

impl Builtin {
    const fn status(mut self) -> Self {
        self.status = true;
        self
    }
    const fn scale(mut self) -> Self {
        self.scale = true;
        self
    }
    const fn generation(mut self) -> Self {
        self.generation = true;
        self
    }
    const fn all(mut self) -> Self {
        self.all = true;
        self
    }
}

/// Built-in kinds: stored generically; a few get controllers, the rest are just served.
const BUILTINS: &[Builtin] = &[
    b("", "v1", "Namespace", "namespaces", false, &["ns"]).status(),
    b("", "v1", "Pod", "pods", true, &["po"])
        .status()
        .generation()
        .all(),
    b("", "v1", "ConfigMap", "configmaps", true, &["cm"]),
    b("", "v1", "Secret", "secrets", true, &[]),
    b("", "v1", "Service", "services", true, &["svc"])
        .status()
        .all(),
    b("", "v1", "ServiceAccount", "serviceaccounts", true, &["sa"]),
    b("", "v1", "Event", "events", true, &["ev"]),
    b("", "v1", "Endpoints", "endpoints", true, &["ep"]),
    b(
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        true,
        &["pvc"],
    )
    .status(),
    b("", "v1", "Node", "nodes", false, &["no"]).status(),
    b(
        "",
        "v1",
        "ResourceQuota",
        "resourcequotas",
        true,
        &["quota"],
    )
    .status(),
    b("", "v1", "LimitRange", "limitranges", true, &["limits"]),
    b("apps", "v1", "StatefulSet", "statefulsets", true, &["sts"])
        .status()
        .scale()
        .generation()
        .all(),
    b("apps", "v1", "Deployment", "deployments", true, &["deploy"])
        .status()
        .scale()
        .generation()
        .all(),
    b("apps", "v1", "ReplicaSet", "replicasets", true, &["rs"])
        .status()
        .scale()
        .generation()
        .all(),
    b("apps", "v1", "DaemonSet", "daemonsets", true, &["ds"])
        .status()
        .generation()
        .all(),
    b(
        "apps",
        "v1",
        "ControllerRevision",
        "controllerrevisions",
        true,
        &[],
    ),
    b("batch", "v1", "Job", "jobs", true, &[])
        .status()
        .generation()
        .all(),
    b("batch", "v1", "CronJob", "cronjobs", true, &["cj"])
        .status()
        .generation()
        .all(),
    b("coordination.k8s.io", "v1", "Lease", "leases", true, &[]),
    b("events.k8s.io", "v1", "Event", "events", true, &["ev"]),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        false,
        &[],
    ),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
        &[],
    ),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "Role",
        "roles",
        true,
        &[],
    ),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        true,
        &[],
    ),
    b(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
        &["crd", "crds"],
    )
    .status()
    .generation(),
    b(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        true,
        &["pdb"],
    )
    .status()
    .generation(),
    b(
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        true,
        &["netpol"],
    )
    .generation(),
    b(
        "networking.k8s.io",
        "v1",
        "Ingress",
        "ingresses",
        true,
        &["ing"],
    )
    .status()
    .generation(),
    b(
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
        false,
        &["pc"],
    ),
    b(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
        false,
        &[],
    )
    .generation(),
    b(
        "admissionregistration.k8s.io",
        "v1",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
        false,
        &[],
    )
    .generation(),
    b(
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        true,
        &["hpa"],
    )
    .status()
    .all(),
];

fn selectable_fields(group: &str, plural: &str) -> Vec<String> {
    let fields: &[&str] = match (group, plural) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("events.k8s.io", "events") => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "type",
        ],
        ("", "secrets") => &["type"],
        ("", "namespaces") => &["status.phase"],
        ("", "nodes") => &["spec.unschedulable"],
        ("apps", "replicasets") => &["status.replicas"],
        ("batch", "jobs") => &["status.successful"],
        _ => &[],
    };
    fields.iter().map(|s| s.to_string()).collect()
}

/// The resource types served at start, before any CRD.
pub(crate) fn builtin_types() -> Vec<Arc<ResourceType>> {
    BUILTINS
        .iter()
        .map(|bt| {
            // Both Event APIs share one storage, kept in the core/v1 shape.
            let storage = if bt.plural == "events" {
                "/events".to_string()
            } else {
                format!("{}/{}", bt.group, bt.plural)
            };
            let storage_version = if bt.plural == "events" {
                "v1"
            } else {
                bt.version
            };
            let scale = bt.scale.then(|| ScaleSubresource {
                spec_replicas_path: ".spec.replicas".into(),
                status_replicas_path: ".status.replicas".into(),
                label_selector_path: Some(".status.selector".into()),
            });
            let mut categories = Vec::new();
            if bt.all {
                categories.push("all".to_string());
            }
            Arc::new(ResourceType {
                group: bt.group.into(),
                version: bt.version.into(),
                kind: bt.kind.into(),
                plural: bt.plural.into(),
                namespaced: bt.namespaced,
                singular: bt.kind.to_lowercase(),
                short_names: bt.short.iter().map(|s| s.to_string()).collect(),
                categories,
                status_subresource: bt.status,
                scale,
                printer_columns: Vec::new(),
                has_generation: bt.generation,
                selectable_fields: selectable_fields(bt.group, bt.plural),
                crd: None,
                storage_version: storage_version.into(),
                storage,
                schema: None,
            })
        })
        .collect()
}

/// All served resource types, in a stable order (built-ins first, then CRDs by name).
#[derive(Clone, Default)]
pub(crate) struct Registry {
    types: Vec<Arc<ResourceType>>,
}

impl Registry {
    pub(crate) fn with_builtins() -> Self {
        Self {
            types: builtin_types(),
        }
    }

    pub(crate) fn all(&self) -> &[Arc<ResourceType>] {
        &self.types
    }

    /// By `group`, `version` and plural (URL form).
    pub(crate) fn by_resource(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<Arc<ResourceType>> {
        self.types
            .iter()
            .find(|t| t.group == group && t.version == version && t.plural == plural)
            .cloned()
    }

    /// By apiVersion (`v1`, `apps/v1`) and kind.
    pub(crate) fn by_gvk(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceType>> {
        let (group, version) = split_api_version(api_version);
        self.types
            .iter()
            .find(|t| t.group == group && t.version == version && t.kind == kind)
            .cloned()
    }

    /// The type objects of a storage bucket are stored as.
    pub(crate) fn storage_type(&self, storage: &str) -> Option<Arc<ResourceType>> {
        self.types
            .iter()
            .find(|t| {
                t.storage == storage
                    && t.version == t.storage_version
                    && (t.plural != "events" || t.group.is_empty())
            })
            .cloned()
    }

    /// Replaces every type a CRD defines with `types` (empty to remove them).
    pub(crate) fn set_crd_types(&mut self, crd: &str, types: Vec<Arc<ResourceType>>) {
        self.types.retain(|t| t.crd.as_deref() != Some(crd));
        self.types.extend(types);
        let (builtins, mut custom): (Vec<_>, Vec<_>) =
            self.types.drain(..).partition(|t| t.crd.is_none());
        custom.sort_by(|a, b| (&a.crd, &a.version).cmp(&(&b.crd, &b.version)));
        self.types = builtins;
        self.types.extend(custom);
    }
}

/// Splits `apps/v1` into (`apps`, `v1`) and `v1` into (``, `v1`).
pub(crate) fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}
