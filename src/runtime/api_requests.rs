//! Counts the operator's requests to the API server by verb and resource, the way the API
//! server's own `apiserver_request_total` labels them, so a user (and the operator benchmark)
//! can see what each pool costs the control plane.

use http::{Method, Request};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tower::util::MapRequestLayer;

/// Label set of the request counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// Kubernetes verb: get, list, watch, create, update, patch, delete, deletecollection.
    pub verb: &'static str,
    /// Resource, with its subresource after a slash (`swarmpools/status`).
    pub resource: String,
}

/// The request counter family: `swarm_operator_api_requests_total{verb,resource}`.
pub type RequestCounter = Family<RequestLabels, Counter>;

/// A client layer that counts every request in `counter` before sending it.
pub fn counting_layer<B>(
    counter: RequestCounter,
) -> MapRequestLayer<impl Fn(Request<B>) -> Request<B> + Clone> {
    MapRequestLayer::new(move |request: Request<B>| {
        let uri = request.uri();
        counter
            .get_or_create(&classify(request.method(), uri.path(), uri.query()))
            .inc();
        request
    })
}

/// The verb and resource of a request to a Kubernetes API path.
pub fn classify(method: &Method, path: &str, query: Option<&str>) -> RequestLabels {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    // `/api/v1/...` or `/apis/<group>/<version>/...`; anything else (discovery, /version).
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => &[][..],
    };
    // Namespaced paths name the namespace first; `/namespaces/<ns>` alone is a namespace.
    let rest = match rest {
        ["namespaces", _ns, resource, tail @ ..] => {
            let mut r = vec![*resource];
            r.extend_from_slice(tail);
            r
        }
        other => other.to_vec(),
    };
    let (resource, named) = match rest.as_slice() {
        [] => ("(other)".to_owned(), false),
        [resource] => ((*resource).to_owned(), false),
        [resource, _name] => ((*resource).to_owned(), true),
        [resource, _name, sub, ..] => (format!("{resource}/{sub}"), true),
    };
    let watching = query.is_some_and(|q| {
        q.split('&')
            .any(|pair| pair == "watch=true" || pair == "watch=1")
    });
    let verb = match *method {
        Method::GET if watching => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => "other",
    };
    RequestLabels { verb, resource }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(method: Method, path: &str, query: Option<&str>) -> (&'static str, String) {
        let l = classify(&method, path, query);
        (l.verb, l.resource)
    }

    #[test]
    fn requests_are_labelled_like_the_api_server_labels_them() {
        let cases = [
            (
                Method::GET,
                "/api/v1/namespaces/swarm/configmaps/cfg",
                None,
                ("get", "configmaps"),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/swarm/pods",
                Some("labelSelector=x"),
                ("list", "pods"),
            ),
            (
                Method::GET,
                "/api/v1/pods",
                Some("labelSelector=x&watch=true&resourceVersion=5"),
                ("watch", "pods"),
            ),
            (
                Method::PATCH,
                "/apis/swarm.io/v1alpha1/namespaces/swarm/swarmpools/p/status",
                Some("fieldManager=swarm-operator"),
                ("patch", "swarmpools/status"),
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/swarm/pods/w-0",
                None,
                ("delete", "pods"),
            ),
            (
                Method::POST,
                "/apis/events.k8s.io/v1/namespaces/swarm/events",
                None,
                ("create", "events"),
            ),
            (
                Method::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/swarm-system/leases/swarm-operator",
                None,
                ("update", "leases"),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/swarm",
                None,
                ("get", "namespaces"),
            ),
            (Method::GET, "/version", None, ("list", "(other)")),
        ];
        for (method, path, query, (verb, resource)) in cases {
            assert_eq!(
                labels(method, path, query),
                (verb, resource.to_owned()),
                "{path}"
            );
        }
    }

    #[test]
    fn the_layer_counts_each_request_once() {
        use tower::{Layer, Service, ServiceExt, service_fn};
        let counter = RequestCounter::default();
        let mut service = counting_layer(counter.clone())
            .layer(service_fn(|_: Request<()>| async { Ok::<_, ()>(()) }));
        let request = || {
            Request::get("/api/v1/namespaces/a/pods/p")
                .body(())
                .expect("valid request")
        };
        futures::executor::block_on(async {
            for _ in 0..2 {
                service.ready().await.unwrap();
                service.call(request()).await.unwrap();
            }
        });
        let get_pods = RequestLabels {
            verb: "get",
            resource: "pods".into(),
        };
        assert_eq!(counter.get_or_create(&get_pods).get(), 2);
    }
}
