//! The built-in kinds accepted in protobuf, and the JSON fields of their messages.

use chrono::{DateTime, SecondsFormat};
use k8s_pb::api::authorization::v1 as authorization;
use k8s_pb::api::core::v1 as core;
use k8s_pb::api::policy::v1 as policy;
use k8s_pb::api::rbac::v1 as rbac;
use k8s_pb::api::scheduling::v1 as scheduling;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use prost::Message;
use serde_json::Value;

use super::json::{Element, ToJson, camel, messages, put};

/// Decodes `raw` as the message of `kind` in `api_version`; `None` for kinds not listed.
pub(super) fn decode(api_version: &str, kind: &str, raw: &[u8]) -> Option<Result<Value, String>> {
    fn as_json<M: Message + Default + ToJson>(raw: &[u8]) -> Result<Value, String> {
        M::decode(raw).map(|m| m.value()).map_err(|e| e.to_string())
    }
    let decode = match (api_version, kind) {
        ("v1", "Namespace") => as_json::<core::Namespace>,
        ("v1", "ConfigMap") => as_json::<core::ConfigMap>,
        ("v1", "Secret") => as_json::<core::Secret>,
        ("v1", "ServiceAccount") => as_json::<core::ServiceAccount>,
        ("v1", "Service") => as_json::<core::Service>,
        ("v1", "ResourceQuota") => as_json::<core::ResourceQuota>,
        ("rbac.authorization.k8s.io/v1", "Role") => as_json::<rbac::Role>,
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => as_json::<rbac::ClusterRole>,
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => as_json::<rbac::RoleBinding>,
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            as_json::<rbac::ClusterRoleBinding>
        }
        ("scheduling.k8s.io/v1", "PriorityClass") => as_json::<scheduling::PriorityClass>,
        ("policy/v1", "PodDisruptionBudget") => as_json::<policy::PodDisruptionBudget>,
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => {
            as_json::<authorization::SelfSubjectAccessReview>
        }
        ("authorization.k8s.io/v1", "SelfSubjectRulesReview") => {
            as_json::<authorization::SelfSubjectRulesReview>
        }
        ("authorization.k8s.io/v1", "SubjectAccessReview") => {
            as_json::<authorization::SubjectAccessReview>
        }
        ("authorization.k8s.io/v1", "LocalSubjectAccessReview") => {
            as_json::<authorization::LocalSubjectAccessReview>
        }
        _ => return None,
    };
    Some(decode(raw))
}

/// `metav1.Time`: RFC 3339 in seconds, and null for the zero time (an empty message).
impl ToJson for meta::Time {
    fn value(&self) -> Value {
        match self.seconds {
            None if self.nanos.unwrap_or(0) == 0 => Value::Null,
            seconds => DateTime::from_timestamp(seconds.unwrap_or(0), 0).map_or(Value::Null, |t| {
                Value::String(t.to_rfc3339_opts(SecondsFormat::Secs, true))
            }),
        }
    }
}

/// `resource.Quantity`: its string form.
impl ToJson for Quantity {
    fn value(&self) -> Value {
        Value::String(self.string.clone().unwrap_or_default())
    }
}

/// `intstr.IntOrString`: a number for type 0, a string for type 1.
impl ToJson for IntOrString {
    fn value(&self) -> Value {
        match self.r#type {
            Some(1) => Value::String(self.str_val.clone().unwrap_or_default()),
            _ => Value::from(self.int_val.unwrap_or(0)),
        }
    }
}

/// `metav1.FieldsV1`: its raw bytes are the JSON itself.
impl ToJson for meta::FieldsV1 {
    fn value(&self) -> Value {
        self.raw
            .as_deref()
            .and_then(|raw| serde_json::from_slice(raw).ok())
            .unwrap_or(Value::Null)
    }
}

/// `authorizationv1.ExtraValue`: a plain list of strings in JSON.
impl ToJson for authorization::ExtraValue {
    fn value(&self) -> Value {
        self.items.value()
    }
}

messages! {
    meta::ObjectMeta {
        name, generate_name, namespace, self_link, uid, resource_version, generation,
        creation_timestamp: ptr, deletion_timestamp, deletion_grace_period_seconds: ptr,
        labels, annotations, owner_references, finalizers, managed_fields,
    }
    meta::OwnerReference { api_version, kind, name, uid, controller: ptr, block_owner_deletion: ptr }
    meta::ManagedFieldsEntry {
        manager, operation, api_version, time, fields_type, fields_v1 as "fieldsV1", subresource,
    }
    meta::LabelSelector { match_labels, match_expressions }
    meta::LabelSelectorRequirement { key, operator, values }
    meta::Condition { r#type, status, observed_generation, last_transition_time: ptr, reason, message }

    core::Namespace { metadata, spec, status }
    core::NamespaceSpec { finalizers }
    core::NamespaceStatus { phase, conditions }
    core::NamespaceCondition { r#type, status, last_transition_time, reason, message }
    core::ConfigMap { metadata, immutable: ptr, data, binary_data }
    core::Secret { metadata, immutable: ptr, data, string_data, r#type }
    core::ServiceAccount { metadata, secrets, image_pull_secrets, automount_service_account_token: ptr }
    core::ObjectReference { kind, namespace, name, uid, api_version, resource_version, field_path }
    core::LocalObjectReference { name }
    core::ResourceQuota { metadata, spec, status }
    core::ResourceQuotaSpec { hard, scopes, scope_selector }
    core::ResourceQuotaStatus { hard, used }
    core::ScopeSelector { match_expressions }
    core::ScopedResourceSelectorRequirement { scope_name, operator, values }
    core::Service { metadata, spec, status }
    core::ServiceSpec {
        ports, selector, cluster_ip as "clusterIP", cluster_ips as "clusterIPs", r#type,
        external_ips as "externalIPs", session_affinity, load_balancer_ip as "loadBalancerIP",
        load_balancer_source_ranges, external_name, external_traffic_policy,
        health_check_node_port, publish_not_ready_addresses, session_affinity_config,
        ip_families, ip_family_policy: ptr, allocate_load_balancer_node_ports: ptr,
        load_balancer_class: ptr, internal_traffic_policy: ptr, traffic_distribution: ptr,
    }
    core::ServicePort { name, protocol, app_protocol: ptr, port: ptr, target_port, node_port }
    core::ServiceStatus { load_balancer, conditions }
    core::LoadBalancerStatus { ingress }
    core::LoadBalancerIngress { ip, hostname, ip_mode: ptr, ports }
    core::PortStatus { port: ptr, protocol, error: ptr }
    core::SessionAffinityConfig { client_ip as "clientIP" }
    core::ClientIpConfig { timeout_seconds: ptr }

    rbac::Role { metadata, rules }
    rbac::ClusterRole { metadata, rules, aggregation_rule }
    rbac::AggregationRule { cluster_role_selectors }
    rbac::PolicyRule {
        verbs, api_groups, resources, resource_names, non_resource_ur_ls as "nonResourceURLs",
    }
    rbac::RoleBinding { metadata, subjects, role_ref }
    rbac::ClusterRoleBinding { metadata, subjects, role_ref }
    rbac::Subject { kind, api_group, name, namespace }
    rbac::RoleRef { api_group, kind, name }

    scheduling::PriorityClass { metadata, value: ptr, global_default, description, preemption_policy: ptr }

    policy::PodDisruptionBudget { metadata, spec, status }
    policy::PodDisruptionBudgetSpec {
        min_available, selector, max_unavailable, unhealthy_pod_eviction_policy: ptr,
    }
    policy::PodDisruptionBudgetStatus {
        observed_generation, disrupted_pods, disruptions_allowed: ptr, current_healthy: ptr,
        desired_healthy: ptr, expected_pods: ptr, conditions,
    }

    // Reviews are answered by the server, so the status a client sends is not read.
    authorization::SelfSubjectAccessReview { metadata, spec }
    authorization::SelfSubjectAccessReviewSpec { resource_attributes, non_resource_attributes }
    authorization::SelfSubjectRulesReview { metadata, spec }
    authorization::SelfSubjectRulesReviewSpec { namespace }
    authorization::SubjectAccessReview { metadata, spec }
    authorization::LocalSubjectAccessReview { metadata, spec }
    authorization::SubjectAccessReviewSpec {
        resource_attributes, non_resource_attributes, user, groups, extra, uid,
    }
    authorization::ResourceAttributes {
        namespace, verb, group, version, resource, subresource, name, field_selector,
        label_selector,
    }
    authorization::NonResourceAttributes { path, verb }
    authorization::FieldSelectorAttributes { raw_selector, requirements }
    authorization::LabelSelectorAttributes { raw_selector, requirements }
    meta::FieldSelectorRequirement { key, operator, values }
}
