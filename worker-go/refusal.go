package swarmworker

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// RefusedError is a request for the worker's own objects that the API server refused for good:
// a 401 (its credentials are not accepted) or a 403 (RBAC or an admission policy forbids it)
// on a fence read or the watch of its ConfigMap, or on a read or write of its Lease. Retrying
// cannot cure it, and a worker retrying forever would hide the misconfiguration, so
// [Worker.Run] stops every job and returns it. Its message says which request was refused,
// the API server's reason, and what to fix. A missing ConfigMap (404) is no refusal: it shows
// no jobs.
type RefusedError struct {
	// Verb is the request's: get or watch (the ConfigMap), get, create or update (the Lease).
	Verb string
	// Kind is the object's kind: ConfigMap or Lease.
	Kind string
	// Namespace and Name name the object.
	Namespace, Name string
	// Err is the API server's answer, a *k8s.io/apimachinery/pkg/api/errors.StatusError
	// carrying its message: apierrors.IsForbidden and IsUnauthorized see through.
	Err error
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("the API server refused to %s %s %s/%s (%s): %s", e.Verb, e.Kind, e.Namespace, e.Name,
		e.answer(), e.fix())
}

// Unwrap is the API server's answer.
func (e *RefusedError) Unwrap() error {
	return e.Err
}

// answer is the status code, reason and message the API server gave.
func (e *RefusedError) answer() string {
	var status apierrors.APIStatus
	if !errors.As(e.Err, &status) {
		return e.Err.Error()
	}
	s := status.Status()
	return fmt.Sprintf("%d %s: %s", s.Code, s.Reason, s.Message)
}

// fix says what makes the request pass, by who refused it.
func (e *RefusedError) fix() string {
	switch {
	case apierrors.IsUnauthorized(e.Err):
		return "the worker's credentials were not accepted: run it with its pod's service-account token " +
			"(automountServiceAccountToken must not be false) or a kubeconfig that is still valid"
	case admissionDenial(e.Err):
		return "an admission policy refused the write: the Lease admission policy (deploy/worker-lease-policy) " +
			"admits a write of a Lease labelled " + PoolLabel + " only from the pod the Lease is named after, " +
			"with that pod's own service-account token and spec.holderIdentity its uid: set POD_NAME and POD_UID " +
			"from the downward API (metadata.name, metadata.uid) and run the worker in that pod"
	}
	return "the worker's ServiceAccount needs the worker Role in namespace " + e.Namespace +
		" (get and watch on configmaps; create, get and update on leases.coordination.k8s.io), " +
		"as deploy/worker-rbac/ grants and binds"
}

// admissionDenial reports whether a 403 came from an admission policy or webhook rather than
// from RBAC, by the message the API server composes for each.
func admissionDenial(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	message := status.Status().Message
	return strings.Contains(message, "ValidatingAdmissionPolicy") || strings.Contains(message, "admission webhook")
}

// refusal is err as a [*RefusedError] when retrying cannot cure it, else nil. Permanent: 401,
// and 403 from RBAC or admission (API Priority and Fairness answers 429, never 403). Not
// permanent: a 403 for a namespace being deleted, which the pod's own deletion follows, and
// everything else, a 404 included.
func refusal(err error, verb, kind, namespace, name string) *RefusedError {
	switch {
	case apierrors.IsUnauthorized(err):
	case apierrors.IsForbidden(err) && !namespaceTerminating(err):
	default:
		return nil
	}
	return &RefusedError{Verb: verb, Kind: kind, Namespace: namespace, Name: name, Err: err}
}

// namespaceTerminating reports whether a 403 refuses a create in a namespace being deleted: by
// its cause, or by the message the API server has always given it, for servers that leave
// the cause out (kube-sim does).
func namespaceTerminating(err error) bool {
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		return true
	}
	var status apierrors.APIStatus
	return errors.As(err, &status) && strings.Contains(status.Status().Message, "because it is being terminated")
}

// refusals carries the first refusal from the worker's goroutines to its event loop.
type refusals chan *RefusedError

func newRefusals() refusals {
	return make(refusals, 1)
}

// report hands refused to the event loop; one is enough to end it.
func (r refusals) report(refused *RefusedError) {
	select {
	case r <- refused:
	default:
	}
}
