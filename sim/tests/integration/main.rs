//! kube-sim's conformance, API and stress tests, one module each, linked into one binary.

mod api_apply;
mod api_cli;
mod api_crd;
mod api_delete;
mod api_discovery;
mod api_events;
mod api_kube_rs;
mod api_list_watch;
mod api_support;
mod api_writes;
mod controllers_conformance;
mod kubectl_conformance;
mod kubelet_probes;
mod stress;
