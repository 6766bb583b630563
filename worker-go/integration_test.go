package swarmworker

import (
	"slices"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"strings"
	"testing"
	"time"
)

// The worker against an API server (see cluster_test.go): the scenarios of
// examples/python-worker/test_swarm_worker.py that the operator relies on.

func TestIntegrationAcknowledgesEachVersionAfterApplyingItAndExitsAfterAnEmptyEntry(t *testing.T) {
	e := newTestEnv(t)
	e.writeConfig(1, "a", "b")
	w := e.startWorker(nil)
	acked1 := e.waitAcked(1)
	lease := e.checkLeaseIsOurs()
	changes := e.changes()
	if len(changes) != 2 || changes[0].Version != nil || len(changes[0].Running) != 0 || changes[0].UID != e.podUID {
		t.Fatalf("report %+v", changes)
	}
	if *changes[1].Version != 1 || !slices.Equal(changes[1].Running, []string{"a", "b"}) || !changes[1].At.Before(acked1.Spec.RenewTime.Time) {
		t.Fatalf("started %+v, acknowledged at %v", changes[1], acked1.Spec.RenewTime)
	}
	renewed := lease.Spec.RenewTime.Time
	eventually(t, 5*time.Second, "a renewal", func() bool { return e.lease().Spec.RenewTime.After(renewed) })

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

	// SIGTERM stops everything; a version that still lists jobs is neither run nor acked.
	close(w.shutdown)
	eventually(t, 10*time.Second, "the stop line after SIGTERM", func() bool { return len(e.changes()) == 5 })
	if running := e.changes()[4].Running; len(running) != 0 {
		t.Fatalf("running after SIGTERM: %v", running)
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

func TestIntegrationRunsNothingWithoutTheAPIFencesWhenLeaseWritesFailAndRunsAgainAfterARenewalAndARead(t *testing.T) {
	e := newTestEnv(t)
	proxy, client := newProxy(t, e.c)
	e.writeConfig(1, "a")
	w := e.startWorker(client)
	eventually(t, 5*time.Second, "the start line", func() bool { return len(e.changes()) == 1 })
	time.Sleep(1500 * time.Millisecond)
	if e.lease() != nil || len(w.jobs.log()) != 0 || len(e.changes()) != 1 {
		t.Fatalf("ran without the API: jobs %v, report %v", w.jobs.log(), e.running())
	}

	proxy.open(t)
	acked1 := e.waitAcked(1)
	first := e.leases.first(func(*coordinationv1.Lease) bool { return true })
	if _, ok := AckedVersion(first); ok || *first.Spec.HolderIdentity != e.podUID {
		t.Fatalf("the first write acknowledged something, or is not ours: %+v", first)
	}
	started := e.changes()[1]
	if !first.Spec.RenewTime.Time.Before(started.At) || !started.At.Before(acked1.Spec.RenewTime.Time) {
		t.Fatalf("a job started before the first Lease write, or was acknowledged before it started")
	}
	permit := w.jobs.permits["a"]
	if !permit.Holds() {
		t.Fatal("a runs without a permit")
	}

	// The API server stops answering: the Lease cannot be renewed, and the worker fences
	// itself (limit: 2 s after its last renewal was sent). Meanwhile the entry changes.
	cut := time.Now()
	proxy.close()
	e.writeConfig(2, "a", "c")
	eventually(t, 5*time.Second, "the fence", func() bool { return slices.Contains(w.jobs.log(), "stop a") })
	if waited := time.Since(cut); waited > testLease-DefaultMargin(testLease)+time.Second {
		t.Fatalf("fenced %v after the cut", waited)
	}
	if permit.Holds() {
		t.Fatal("the permit holds while fenced")
	}
	if last := e.changes()[len(e.changes())-1]; len(last.Running) != 0 {
		t.Fatalf("no report line for the fence: %v", e.running())
	}
	time.Sleep(500 * time.Millisecond)
	if got := strings.Join(w.jobs.log(), ", "); got != "start a, stop a" {
		t.Fatalf("jobs while fenced: %s", got)
	}

	// Back: a renewal, then a fresh read, then the new entry once.
	proxy.open(t)
	e.waitAcked(2)
	if got := strings.Join(w.jobs.log(), ", "); got != "start a, stop a, start a, start c" {
		t.Fatalf("jobs: %s", got)
	}
	if got := e.running(); len(got) != 4 || !slices.Equal(got[3], []string{"a", "c"}) {
		t.Fatalf("report: %v", got)
	}
}

func TestIntegrationFollowsTheConfigMapAfterItsWatchBreaksAndTheHistoryIsCompacted(t *testing.T) {
	e := newTestEnv(t)
	e.c.needsSim(t)
	proxy, client := newProxy(t, e.c)
	proxy.open(t)
	e.writeConfig(1, "a")
	e.startWorker(client)
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
	if *lease.Spec.HolderIdentity != e.podUID || *lease.Spec.LeaseDurationSeconds != 4 || lease.Spec.AcquireTime == nil {
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
