package swarmworker

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The worker against an API server (see cluster_test.go): the scenarios of
// examples/python-worker/test_swarm_worker.py that the operator relies on.

func TestIntegrationAcknowledgesEachVersionAfterApplyingItAndExitsAfterAnEmptyEntry(t *testing.T) {
	e := newTestEnv(t)
	e.writeConfig(1, "a", "b")
	w := e.startWorker(nil)
	acked1 := e.waitAcked(1)
	e.checkLeaseIsOurs()
	changes := e.changes()
	if len(changes) != 2 || changes[0].Version != nil || len(changes[0].Running) != 0 || changes[0].UID != e.podUID {
		t.Fatalf("report %+v", changes)
	}
	if *changes[1].Version != 1 || !slices.Equal(changes[1].Running, []string{"a", "b"}) || !changes[1].At.Before(acked1.Spec.RenewTime.Time) {
		t.Fatalf("started %+v, acknowledged at %v", changes[1], acked1.Spec.RenewTime)
	}
	if code := w.readyz(t); code != http.StatusOK {
		t.Fatalf("readyz %d after a read", code)
	}

	// b moves to another worker: it must have stopped before version 2 is acknowledged.
	e.writeConfig(2, "a")
	acked2 := e.waitAcked(2)
	if stopped := e.changes()[2]; *stopped.Version != 2 || !slices.Equal(stopped.Running, []string{"a"}) || !stopped.At.Before(acked2.Spec.RenewTime.Time) {
		t.Fatalf("stopped %+v", stopped)
	}

	// A new job is reported before it starts, and acknowledged once it runs; with kube-sim,
	// after the watch history was dropped.
	if e.c.simURL != "" {
		e.c.compact(t)
	}
	e.writeConfig(3, "a", "c")
	acked3 := e.waitAcked(3)
	if added := e.changes()[3]; *added.Version != 3 || !slices.Equal(added.Running, []string{"a", "c"}) || !added.At.Before(acked3.Spec.RenewTime.Time) {
		t.Fatalf("added %+v", added)
	}

	// A version that changes nothing here is acknowledged too, with no change of jobs.
	e.writeConfig(4, "a", "c")
	e.waitAcked(4)
	if n := len(e.changes()); n != 4 {
		t.Fatalf("%d changes: %v", n, e.running())
	}
	if got := strings.Join(w.jobs.log(), ", "); got != "start a, start b, stop b, start c" {
		t.Fatalf("jobs: %s", got)
	}

	// SIGTERM stops everything and the worker answers not ready; a version that still lists
	// jobs is neither run nor acknowledged.
	close(w.shutdown)
	eventually(t, 10*time.Second, "the stop line after SIGTERM", func() bool { return len(e.changes()) == 5 })
	if running := e.changes()[4].Running; len(running) != 0 {
		t.Fatalf("running after SIGTERM: %v", running)
	}
	if code := w.readyz(t); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz %d after SIGTERM", code)
	}
	e.writeConfig(5, "a", "e")
	time.Sleep(1500 * time.Millisecond)
	select {
	case exit := <-w.exit:
		t.Fatalf("returned early: %+v", exit)
	default:
	}
	if acked, _ := AckedVersion(e.lease()); acked != 4 || len(e.changes()) != 5 {
		t.Fatalf("acked %d, report %v", acked, e.running())
	}

	// The operator revokes every job of the terminating pod: that version ends the worker.
	e.writeConfig(6)
	e.waitAcked(6)
	select {
	case exit := <-w.exit:
		w.exit <- exit
		if exit != (Exit{Reason: Acknowledged, Version: 6}) {
			t.Fatalf("exit %+v", exit)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the worker did not return after acknowledging an empty entry")
	}
	if got := strings.Join(w.jobs.log(), ", "); got != "start a, start b, stop b, start c, stop a, stop c" {
		t.Fatalf("jobs: %s", got)
	}
}

func TestIntegrationWritesNothingAtRestAndExtendsThePermitByQuorumReads(t *testing.T) {
	e := newTestEnv(t)
	e.writeConfig(1, "a")
	e.startWorker(nil)
	acked := e.waitAcked(1)
	// The write at start, then the acknowledgement; nothing after.
	writes := e.leases.count()
	if writes > 2 {
		t.Fatalf("%d Lease writes before the first acknowledgement", writes)
	}
	extendedBefore := len(e.lines())
	start := 0
	if e.c.simURL != "" {
		start = len(e.c.served(t))
	}
	time.Sleep(3*ReadInterval(testPermit) + time.Second)
	if n := e.leases.count(); n != writes {
		t.Fatalf("%d Lease writes at rest", n-writes)
	}
	if lease := e.lease(); lease.ResourceVersion != acked.ResourceVersion {
		t.Fatalf("the Lease changed at rest: %+v", lease.Spec)
	}
	// Each fence read extends the permit: one report line per read.
	if extended := len(e.lines()) - extendedBefore; extended < 3 {
		t.Fatalf("%d permit extensions in three read intervals", extended)
	}
	if e.c.simURL == "" {
		return
	}
	var reads int
	own := "/api/v1/namespaces/" + e.namespace + "/configmaps/" + SliceName(testConfigMap, testPod)
	for _, request := range e.c.served(t)[start:] {
		if request.Path == own && request.Method == http.MethodGet {
			reads++
			if strings.Contains(request.Query, "resourceVersion") {
				t.Fatalf("a fence read with a resourceVersion, which the cache may answer: %s", request.Query)
			}
		}
		if strings.Contains(request.Path, "/leases") && request.Method != http.MethodGet {
			t.Fatalf("a Lease write at rest: %+v", request)
		}
	}
	if reads < 3 || reads > 5 {
		t.Fatalf("%d fence reads in three read intervals", reads)
	}
}

func TestIntegrationAGrantedJobStartsOnlyOnAFenceReadSentAfterTheGrant(t *testing.T) {
	e := newTestEnv(t)
	e.writeConfig(1, "a")
	w := e.startWorker(nil)
	e.waitAcked(1)
	granted := time.Now()
	e.writeConfig(2, "a", "b")
	e.waitAcked(2)
	// The watch event only asks for a read: the permit b started on counts from a read sent
	// after the write that granted it.
	var first *reportLine
	for _, line := range e.lines() {
		if slices.Contains(line.Running, "b") {
			first = &line
			break
		}
	}
	if first == nil {
		t.Fatalf("b never ran: %v", e.running())
	}
	if sent := first.Until.Add(-testPermit); !sent.After(granted) {
		t.Fatalf("b started on a read sent %v before the grant", granted.Sub(sent))
	}
	if !w.jobs.permits["b"].Holds() {
		t.Fatal("b runs without a permit")
	}
}

func TestIntegrationRunsNothingWithoutTheAPIAndStopsItsJobsWithinThePermitWhenCutOff(t *testing.T) {
	e := newTestEnv(t)
	proxy, client := newProxy(t, e.c)
	e.writeConfig(1, "a")
	w := e.startWorker(client)
	eventually(t, 5*time.Second, "the start line", func() bool { return len(e.changes()) == 1 })
	time.Sleep(1500 * time.Millisecond)
	if e.lease() != nil || len(w.jobs.log()) != 0 || len(e.changes()) != 1 {
		t.Fatalf("ran without the API: jobs %v, report %v", w.jobs.log(), e.running())
	}
	if code := w.readyz(t); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz %d before the first read", code)
	}

	proxy.open(t)
	e.waitAcked(1)
	first := e.leases.first(func(*coordinationv1.Lease) bool { return true })
	if *first.Spec.HolderIdentity != e.podUID || *first.Spec.LeaseDurationSeconds != int32(testPermit/time.Second) {
		t.Fatalf("the first write is not ours: %+v", first.Spec)
	}
	permit := w.jobs.permits["a"]
	if !permit.Holds() {
		t.Fatal("a runs without a permit")
	}
	if code := w.readyz(t); code != http.StatusOK {
		t.Fatalf("readyz %d after a read", code)
	}

	// The API server stops answering: reads fail, readiness goes first, then the jobs, at
	// most the permit after the last read's send. Meanwhile the entry changes.
	cut := time.Now()
	writes := e.leases.count()
	proxy.close()
	e.writeConfig(2, "a", "c")
	eventually(t, testPermit+2*time.Second, "not ready", func() bool { return w.readyz(t) == http.StatusServiceUnavailable })
	if waited := time.Since(cut); waited > ReadyWithin(testPermit)+time.Second {
		t.Fatalf("not ready %v after the cut", waited)
	}
	eventually(t, testPermit+2*time.Second, "the stop", func() bool { return slices.Contains(w.jobs.log(), "stop a") })
	if waited := time.Since(cut); waited > testPermit+500*time.Millisecond {
		t.Fatalf("stopped %v after the cut", waited)
	}
	if permit.Holds() {
		t.Fatal("the permit holds once lapsed")
	}
	if last := e.changes()[len(e.changes())-1]; len(last.Running) != 0 {
		t.Fatalf("no report line for the lapse: %v", e.running())
	}
	if e.leases.count() != writes {
		t.Fatal("a Lease write while cut off")
	}
	time.Sleep(500 * time.Millisecond)
	if got := strings.Join(w.jobs.log(), ", "); got != "start a, stop a" {
		t.Fatalf("jobs while cut off: %s", got)
	}

	// Back: the next read runs the new entry, once.
	proxy.open(t)
	e.waitAcked(2)
	if got := strings.Join(w.jobs.log(), ", "); got != "start a, stop a, start a, start c" {
		t.Fatalf("jobs: %s", got)
	}
	if got := e.running(); len(got) != 4 || !slices.Equal(got[3], []string{"a", "c"}) {
		t.Fatalf("report: %v", got)
	}
	if code := w.readyz(t); code != http.StatusOK {
		t.Fatalf("readyz %d after the API came back", code)
	}
}

func TestIntegrationTakesOverALeaseLeftByAPreviousPodAndReadsOnlyItsOwnConfigMap(t *testing.T) {
	e := newTestEnv(t)
	previous := "00000000-0000-0000-0000-000000000000"
	left := RenewedLease(nil, Holder{Pod: testPod, Namespace: e.namespace, UID: previous, Pool: "swarm"}, ptr(uint64(9)), 10*time.Second, time.Now())
	if _, err := e.c.client.CoordinationV1().Leases(e.namespace).Create(background(t), left, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The pool's ConfigMap, in the shared format, offers jobs this worker must not run.
	e.writeConfigMap(testConfigMap, "version: 5\nworkloads:\n  swarm-worker-0:\n    version: 5\n    jobs: [x]\n")
	e.writeConfig(2, "a")
	w := e.startWorker(nil)
	e.waitAcked(2)
	// (kube-sim's garbage collector may delete the Lease of the gone pod first: then it is
	// created anew, without a transition.)
	if acked, _ := AckedVersion(e.checkLeaseIsOurs()); acked != 2 {
		t.Fatalf("acked %d", acked)
	}
	if got := strings.Join(w.jobs.log(), ", "); got != "start a" {
		t.Fatalf("jobs: %s", got)
	}
}

func TestIntegrationFollowsTheConfigMapAfterItsWatchBreaksAndTheHistoryIsCompacted(t *testing.T) {
	e := newTestEnv(t)
	e.c.needsSim(t)
	proxy, client := newProxy(t, e.c)
	proxy.open(t)
	e.writeConfig(1, "a")
	e.startWorker(client, WithPermit(60*time.Second))
	e.waitAcked(1)
	before := len(e.c.configMapWatches(t, e.namespace))
	for _, query := range e.c.configMapWatches(t, e.namespace) {
		if !strings.Contains(query, "fieldSelector=metadata.name%3D"+SliceName(testConfigMap, testPod)) {
			t.Fatalf("a watch of other ConfigMaps: %s", query)
		}
	}

	// The ConfigMap's own resourceVersion is now older than any history the server keeps.
	e.c.compact(t)
	proxy.drop()
	eventually(t, 10*time.Second, "a watch that starts from the current state", func() bool {
		for _, query := range e.c.configMapWatches(t, e.namespace)[before:] {
			if !strings.Contains(query, "resourceVersion=") || strings.Contains(query, "resourceVersion=&") || strings.HasSuffix(query, "resourceVersion=") {
				return true
			}
		}
		return false
	})
	// With a 60 s permit the next scheduled read is 30 s away: only the watch brings version
	// 2 this soon.
	e.writeConfig(2, "b")
	e.waitAcked(2)
	if n := len(e.c.configMapWatches(t, e.namespace)) - before; n > 3 {
		t.Fatalf("%d watches: the worker kept re-watching from an expired resourceVersion", n)
	}
}

func ptr[T any](value T) *T { return &value }

// checkLeaseIsOurs checks the Lease's holder, duration, label and owner, and returns it.
func (e *testEnv) checkLeaseIsOurs() *coordinationv1.Lease {
	e.t.Helper()
	lease := e.lease()
	if *lease.Spec.HolderIdentity != e.podUID || *lease.Spec.LeaseDurationSeconds != int32(testPermit/time.Second) || lease.Spec.AcquireTime == nil {
		e.t.Fatalf("Lease spec %+v", lease.Spec)
	}
	if lease.Labels[PoolLabel] != "swarm" {
		e.t.Fatalf("labels %v", lease.Labels)
	}
	if owners := lease.OwnerReferences; len(owners) != 1 || owners[0].APIVersion != "v1" || owners[0].Kind != "Pod" ||
		owners[0].Name != testPod || string(owners[0].UID) != e.podUID {
		e.t.Fatalf("owners %+v", owners)
	}
	return lease
}

func TestIntegrationARefusedAcknowledgementEndsRunWithEveryJobStoppedAndReported(t *testing.T) {
	e := newTestEnv(t)
	refuser, client := newRefuser(t, e.c, "update", "leases", rbacForbidden("update", leases, testPod))
	e.writeConfig(1, "a")
	w := e.startWorker(client)
	e.waitAcked(1)

	refuser.on.Store(true)
	e.writeConfig(2, "a", "b")
	exit, err := w.returned(t)
	var refused *RefusedError
	if !errors.As(err, &refused) || exit.Reason != Refused || refused.Verb != "update" || refused.Kind != "Lease" {
		t.Fatalf("Run returned %+v, %v", exit, err)
	}
	if got := strings.Join(w.jobs.log(), ", "); got != "start a, start b, stop a, stop b" {
		t.Fatalf("jobs: %s", got)
	}
	if last := e.changes()[len(e.changes())-1]; len(last.Running) != 0 {
		t.Fatalf("the report still shows jobs running: %v", e.running())
	}
	if acked, _ := AckedVersion(e.lease()); acked != 1 {
		t.Fatalf("acked %d", acked)
	}
}
