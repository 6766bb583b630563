package swarmworker

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// fakeAPI is an API server just large enough for one worker, so that tests of how the worker
// meets the API server's answers run without a cluster: the worker's own ConfigMap (GET, and
// a watch that stays open and sends nothing), its Lease (GET, create, update), and, on demand,
// a refusal of chosen requests, or a 429 to every request, answered as the API server answers
// them.
type fakeAPI struct {
	server *httptest.Server
	mux    *http.ServeMux

	mu       sync.Mutex
	config   string // config.yml of the worker's ConfigMap; "": no ConfigMap
	lease    *coordinationv1.Lease
	revision int
	refusals []fakeRefusal
	refused  []string       // "<verb> <resource>" of each request refused
	served   map[string]int // requests answered otherwise, by "<verb> <resource>"
	shedding bool           // every request is answered 429, as API Priority and Fairness does
	shed     []shedRequest  // the requests answered 429
}

// shedRequest is a request the fake API server shed.
type shedRequest struct {
	at      time.Time
	request string // "<verb> <resource>"
}

// fakeRefusal refuses each request of verb on resource (configmaps, leases) with status.
type fakeRefusal struct {
	verb, resource string
	status         metav1.Status
}

func newFakeAPI(t *testing.T) *fakeAPI {
	a := &fakeAPI{mux: http.NewServeMux(), served: map[string]int{}}
	a.mux.HandleFunc("GET /api/v1/namespaces/{namespace}/configmaps/{name}", a.getConfigMap)
	a.mux.HandleFunc("GET /api/v1/namespaces/{namespace}/configmaps", a.watchConfigMaps)
	a.mux.HandleFunc("GET /apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}", a.getLease)
	a.mux.HandleFunc("POST /apis/coordination.k8s.io/v1/namespaces/{namespace}/leases", a.writeLease)
	a.mux.HandleFunc("PUT /apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}", a.writeLease)
	a.server = httptest.NewServer(a)
	t.Cleanup(func() {
		// Open watches end with their connections.
		a.server.CloseClientConnections()
		a.server.Close()
	})
	return a
}

// client is the worker's client (NewClient) of the fake API server.
func (a *fakeAPI) client(t *testing.T) kubernetes.Interface {
	t.Helper()
	client, err := NewClient(&rest.Config{Host: a.server.URL})
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// setConfig writes the worker's ConfigMap as the operator does: testPod's entry.
func (a *fakeAPI) setConfig(version uint64, jobs ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.config = fmt.Sprintf("version: %d\nworkloads:\n  %s:\n    version: %d\n    jobs: [%s]\n", version, testPod, version, strings.Join(jobs, ", "))
}

// refuse answers every request of verb (get, watch, create, update) on resource with status.
func (a *fakeAPI) refuse(verb, resource string, status metav1.Status) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refusals = append(a.refusals, fakeRefusal{verb: verb, resource: resource, status: status})
}

// stopRefusing answers every request as it did before any refuse.
func (a *fakeAPI) stopRefusing() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refusals = nil
}

// shedAll answers every request from now on with a 429, or, shedding false, stops.
func (a *fakeAPI) shedAll(shedding bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.shedding = shedding
}

// shedRequests are the requests answered 429 so far, in the order they came.
func (a *fakeAPI) shedRequests() []shedRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.shed)
}

// refusedRequests are the requests refused so far, "<verb> <resource>" each.
func (a *fakeAPI) refusedRequests() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.refused...)
}

// answered is how many requests of verb on resource were answered other than by a refusal.
func (a *fakeAPI) answered(verb, resource string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.served[verb+" "+resource]
}

// acked is the version the worker's Lease acknowledges, if any.
func (a *fakeAPI) acked() (uint64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return AckedVersion(a.lease)
}

func (a *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	verb, resource := requestOf(r)
	a.mu.Lock()
	if a.shedding {
		a.shed = append(a.shed, shedRequest{at: time.Now(), request: verb + " " + resource})
		a.mu.Unlock()
		// As API Priority and Fairness answers: a Retry-After and a text body, no Status.
		w.Header().Set("Retry-After", "1")
		http.Error(w, "Too many requests, please try again later.", http.StatusTooManyRequests)
		return
	}
	for _, refusal := range a.refusals {
		if refusal.verb == verb && refusal.resource == resource {
			a.refused = append(a.refused, verb+" "+resource)
			a.mu.Unlock()
			writeStatus(w, refusal.status)
			return
		}
	}
	a.served[verb+" "+resource]++
	a.mu.Unlock()
	a.mux.ServeHTTP(w, r)
}

// requestOf is a request's verb and resource, as RBAC names them.
func requestOf(r *http.Request) (string, string) {
	resource := "configmaps"
	if strings.Contains(r.URL.Path, "/leases") {
		resource = "leases"
	}
	switch {
	case r.Method == http.MethodPost:
		return "create", resource
	case r.Method == http.MethodPut:
		return "update", resource
	case r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1":
		return "watch", resource
	}
	return "get", resource
}

func (a *fakeAPI) getConfigMap(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	name := r.PathValue("name")
	if a.config == "" || name != SliceName(testConfigMap, testPod) {
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name).ErrStatus)
		return
	}
	writeObject(w, http.StatusOK, &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.PathValue("namespace"), ResourceVersion: "1"},
		Data:       map[string]string{ConfigKey: a.config},
	})
}

// watchConfigMaps is a watch that sends nothing until the client leaves: the worker reads on
// its own schedule.
func (a *fakeAPI) watchConfigMaps(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	<-r.Context().Done()
}

func (a *fakeAPI) getLease(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lease == nil {
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, r.PathValue("name")).ErrStatus)
		return
	}
	writeObject(w, http.StatusOK, a.lease)
}

// writeLease stores a created or updated Lease as sent, with a new resourceVersion.
func (a *fakeAPI) writeLease(w http.ResponseWriter, r *http.Request) {
	var lease coordinationv1.Lease
	if err := json.NewDecoder(r.Body).Decode(&lease); err != nil {
		writeStatus(w, apierrors.NewBadRequest(err.Error()).ErrStatus)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	status := http.StatusOK
	if r.Method == http.MethodPost {
		if a.lease != nil {
			writeStatus(w, apierrors.NewAlreadyExists(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, lease.Name).ErrStatus)
			return
		}
		status = http.StatusCreated
	}
	a.revision++
	lease.TypeMeta = metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"}
	lease.ResourceVersion = strconv.Itoa(a.revision)
	a.lease = &lease
	writeObject(w, status, &lease)
}

func writeObject(w http.ResponseWriter, code int, object any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(object)
}

// writeStatus answers with status as the API server does: a Status object, its code the
// response's.
func writeStatus(w http.ResponseWriter, status metav1.Status) {
	status.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}
	status.Status = metav1.StatusFailure
	writeObject(w, int(status.Code), &status)
}
