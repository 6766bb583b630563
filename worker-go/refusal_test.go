package swarmworker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The worker against API server answers that retrying cannot cure, on the fake API server of
// fakeapi_test.go: no cluster needed.

var (
	configMaps = schema.GroupResource{Resource: "configmaps"}
	leases     = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
)

// rbacForbidden is the API server's answer when RBAC does not let the worker's ServiceAccount
// do verb on resource.
func rbacForbidden(verb string, resource schema.GroupResource, name string) metav1.Status {
	why := fmt.Errorf("%s %q cannot %s resource %q in API group %q in the namespace %q",
		"User", "system:serviceaccount:swarm-go:default", verb, resource.Resource, resource.Group, "swarm-go")
	return apierrors.NewForbidden(resource, name, why).ErrStatus
}

// policyForbidden is the API server's answer when deploy/worker-lease-policy refuses a write.
func policyForbidden() metav1.Status {
	why := errors.New("ValidatingAdmissionPolicy 'swarm-worker-lease' with binding 'swarm-worker-lease' denied request: " +
		"Lease swarm-worker-0 is labelled swarm.io/pool: only the pod named swarm-worker-0 may write it, with its own " +
		"pod-bound service-account token, but this token is bound to pod swarm-worker-1 (a worker writes only the Lease named like its own pod)")
	return apierrors.NewForbidden(leases, testPod, why).ErrStatus
}

// returned waits for Run to return and gives what it returned; a Run that keeps retrying fails
// the test.
func (w *runningWorker) returned(t *testing.T) (Exit, error) {
	t.Helper()
	select {
	case exit := <-w.exit:
		err := <-w.err
		w.exit <- exit // for the cleanup
		return exit, err
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10 s: it retries what was refused, or a goroutine of its does not end")
	}
	return Exit{}, nil
}

// checkNotRetried checks that no request refused was sent again.
func checkNotRetried(t *testing.T, api *fakeAPI) {
	t.Helper()
	refusals := api.refusedRequests()
	if unique := slices.Compact(slices.Sorted(slices.Values(refusals))); len(unique) != len(refusals) {
		t.Fatalf("a refused request was sent again: %v", refusals)
	}
}

// checkRefused checks that Run returned a refusal of verb on kind, with every job stopped and
// nothing sent again after the refusal.
func checkRefused(t *testing.T, w *runningWorker, api *fakeAPI, verb, kind, name string) *RefusedError {
	t.Helper()
	exit, err := w.returned(t)
	var refused *RefusedError
	if !errors.As(err, &refused) || exit != (Exit{Reason: Refused}) {
		t.Fatalf("Run returned %+v, %v", exit, err)
	}
	if refused.Verb != verb || refused.Kind != kind || refused.Namespace != "swarm-go" || refused.Name != name {
		t.Fatalf("refused %+v", refused)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("refused to %s %s swarm-go/%s", verb, kind, name)) {
		t.Fatalf("the message does not name the request: %v", err)
	}
	if running := w.jobs.running(); len(running) > 0 {
		t.Fatalf("jobs %v still run after Run returned", running)
	}
	checkNotRetried(t, api)
	return refused
}

func TestRunReturnsARefusedLeaseUpdateAfterStoppingEveryJob(t *testing.T) {
	api := newFakeAPI(t)
	api.setConfig(1, "a")
	w := runWorker(t, WithClient(api.client(t)), WithPermit(MinPermit))
	eventually(t, 10*time.Second, "version 1 acknowledged", func() bool { acked, ok := api.acked(); return ok && acked == 1 })

	api.refuse("update", "leases", rbacForbidden("update", leases, testPod))
	api.setConfig(2, "a", "b")
	refused := checkRefused(t, w, api, "update", "Lease", testPod)
	if !apierrors.IsForbidden(refused) {
		t.Fatalf("not a 403: %v", refused)
	}
	for _, want := range []string{"403 Forbidden", `cannot update resource "leases"`, "the worker Role in namespace swarm-go",
		"create, get and update on leases", "deploy/worker-rbac/"} {
		if !strings.Contains(refused.Error(), want) {
			t.Fatalf("the message lacks %q: %v", want, refused)
		}
	}
	if got := strings.Join(w.jobs.log(), ", "); got != "start a, start b, stop a, stop b" {
		t.Fatalf("jobs: %s", got)
	}
	if got := api.refusedRequests(); !slices.Equal(got, []string{"update leases"}) {
		t.Fatalf("refused %v", got)
	}
}

func TestRunReturnsARefusedFenceReadWithoutStartingAJob(t *testing.T) {
	api := newFakeAPI(t)
	api.setConfig(1, "a")
	api.refuse("get", "configmaps", rbacForbidden("get", configMaps, SliceName(testConfigMap, testPod)))
	w := runWorker(t, WithClient(api.client(t)))
	refused := checkRefused(t, w, api, "get", "ConfigMap", SliceName(testConfigMap, testPod))
	if !strings.Contains(refused.Error(), "get and watch on configmaps") {
		t.Fatalf("the message does not say what to grant: %v", refused)
	}
	if got := w.jobs.log(); len(got) != 0 {
		t.Fatalf("jobs without a fence read: %v", got)
	}
}

func TestRunReturnsARefusedWatch(t *testing.T) {
	api := newFakeAPI(t)
	api.setConfig(1, "a")
	api.refuse("watch", "configmaps", rbacForbidden("watch", configMaps, ""))
	w := runWorker(t, WithClient(api.client(t)))
	refused := checkRefused(t, w, api, "watch", "ConfigMap", SliceName(testConfigMap, testPod))
	if !strings.Contains(refused.Error(), `cannot watch resource "configmaps"`) {
		t.Fatalf("the message lacks the API server's: %v", refused)
	}
}

func TestRunReturnsTheLeaseAdmissionPolicysRefusal(t *testing.T) {
	api := newFakeAPI(t)
	api.setConfig(1, "a")
	api.refuse("create", "leases", policyForbidden())
	w := runWorker(t, WithClient(api.client(t)))
	refused := checkRefused(t, w, api, "create", "Lease", testPod)
	for _, want := range []string{"ValidatingAdmissionPolicy 'swarm-worker-lease'", "bound to pod swarm-worker-1",
		"deploy/worker-lease-policy", "POD_UID"} {
		if !strings.Contains(refused.Error(), want) {
			t.Fatalf("the message lacks %q: %v", want, refused)
		}
	}
	if strings.Contains(refused.Error(), "deploy/worker-rbac") {
		t.Fatalf("an admission refusal blamed on RBAC: %v", refused)
	}
}

func TestRunReturnsWhenItsCredentialsAreNotAccepted(t *testing.T) {
	api := newFakeAPI(t)
	api.setConfig(1, "a")
	unauthorized := apierrors.NewUnauthorized("Unauthorized").ErrStatus
	for _, request := range [][2]string{{"get", "configmaps"}, {"watch", "configmaps"}, {"get", "leases"}, {"create", "leases"}} {
		api.refuse(request[0], request[1], unauthorized)
	}
	w := runWorker(t, WithClient(api.client(t)))
	exit, err := w.returned(t)
	var refused *RefusedError
	if !errors.As(err, &refused) || exit.Reason != Refused || !apierrors.IsUnauthorized(err) {
		t.Fatalf("Run returned %+v, %v", exit, err)
	}
	if !strings.Contains(err.Error(), "401 Unauthorized") || !strings.Contains(err.Error(), "credentials were not accepted") {
		t.Fatalf("message: %v", err)
	}
	if got := w.jobs.log(); len(got) != 0 {
		t.Fatalf("jobs: %v", got)
	}
	checkNotRetried(t, api)
}

func TestRunRetriesAMissingConfigMapAndAnOverloadedAPIServer(t *testing.T) {
	api := newFakeAPI(t)
	// No ConfigMap yet (404) and API Priority and Fairness rejecting the Lease's creation (429):
	// neither ends Run. Each 429 holds the fence reads too, which then take turns with the
	// Lease's creation as the probe.
	api.refuse("create", "leases", apierrors.NewTooManyRequests("too many requests, please try again later", 0).ErrStatus)
	w := runWorker(t, WithClient(api.client(t)), WithPermit(MinPermit))
	time.Sleep(2*ReadInterval(MinPermit) + 500*time.Millisecond)
	select {
	case exit := <-w.exit:
		t.Fatalf("Run returned %+v, %v", exit, <-w.err)
	default:
	}
	if reads := api.answered("get", "configmaps"); reads < 1 {
		t.Fatalf("%d fence reads", reads)
	}
	if creates := len(api.refusedRequests()); creates < 2 {
		t.Fatalf("the Lease's creation was tried %d times", creates)
	}

	api.setConfig(1, "a")
	api.stopRefusing()
	eventually(t, 5*time.Second, "job a", func() bool { return slices.Equal(w.jobs.running(), []string{"a"}) })
	eventually(t, 5*time.Second, "version 1 acknowledged", func() bool { acked, ok := api.acked(); return ok && acked == 1 })
}

func TestOnlyA401OrA403ForTheWorkerIsARefusal(t *testing.T) {
	// Known by its cause alone, and by its message alone.
	terminating := apierrors.NewForbidden(leases, testPod, errors.New("the namespace is going"))
	terminating.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause, Message: "namespace swarm-go is being terminated"}}
	for _, c := range []struct {
		err     error
		refused bool
	}{
		{apierrors.NewForbidden(leases, testPod, errors.New("RBAC")), true},
		{apierrors.NewUnauthorized("Unauthorized"), true},
		{apierrors.NewGenericServerResponse(403, "get", configMaps, "x", "", 0, false), true},
		{terminating, false},
		{apierrors.NewForbidden(leases, testPod, errors.New("unable to create new content in namespace swarm-go because it is being terminated")), false},
		{apierrors.NewNotFound(configMaps, "x"), false},
		{apierrors.NewTooManyRequests("APF", 1), false},
		{apierrors.NewInternalError(errors.New("etcd")), false},
		{apierrors.NewConflict(leases, testPod, errors.New("changed")), false},
		{apierrors.NewServiceUnavailable("starting"), false},
		{context.DeadlineExceeded, false},
		{errors.New("connection refused"), false},
	} {
		if got := refusal(c.err, "get", "Lease", "swarm-go", testPod) != nil; got != c.refused {
			t.Errorf("%v: refusal %v", c.err, got)
		}
	}
}
