package swarmworker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

const (
	testPod       = "swarm-worker-0"
	testConfigMap = "swarm-config" // the pool's ConfigMap, which a worker never reads
	// testPermit is the workers' permit F in the tests: reads every 2 s, not ready 2.4 s after
	// the last read's send, jobs stopped 4 s after it.
	testPermit = 4 * time.Second
)

// testEnv is one integration test's namespace, with the worker's Pod in it.
type testEnv struct {
	t         *testing.T
	c         *cluster
	namespace string
	podUID    string
	report    string
	leases    *leaseRecorder
}

func newTestEnv(t *testing.T) *testEnv {
	c := testCluster(t)
	ctx := background(t)
	namespace := fmt.Sprintf("swarm-go-%d", time.Now().UnixNano())
	_, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.client.CoreV1().Namespaces().Delete(context.Background(), namespace, metav1.DeleteOptions{})
	})
	// The Lease's owner; no node runs it.
	pod, err := c.client.CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: testPod},
		Spec: corev1.PodSpec{
			NodeName:   "swarm-go-test-nowhere",
			Containers: []corev1.Container{{Name: "worker", Image: "none"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	env := &testEnv{t: t, c: c, namespace: namespace, podUID: string(pod.UID), report: filepath.Join(t.TempDir(), "report.jsonl")}
	env.leases = recordLeases(t, c.client, namespace)
	return env
}

// writeConfig writes what the operator writes for testPod: its own ConfigMap with its entry.
func (e *testEnv) writeConfig(version uint64, jobs ...string) {
	e.t.Helper()
	text := fmt.Sprintf("version: %d\nworkloads:\n  %s:\n    version: %d\n    jobs: [%s]\n", version, testPod, version, strings.Join(jobs, ", "))
	e.writeConfigMap(SliceName(testConfigMap, testPod), text)
}

func (e *testEnv) writeConfigMap(name, text string) {
	e.t.Helper()
	configMaps := e.c.client.CoreV1().ConfigMaps(e.namespace)
	body := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{ConfigKey: text}}
	_, err := configMaps.Update(context.Background(), body, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		_, err = configMaps.Create(context.Background(), body, metav1.CreateOptions{})
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *testEnv) lease() *coordinationv1.Lease {
	e.t.Helper()
	lease, err := e.c.client.CoordinationV1().Leases(e.namespace).Get(context.Background(), testPod, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return lease
}

// waitAcked waits for the Lease to acknowledge version; it returns the first such write.
func (e *testEnv) waitAcked(version uint64) *coordinationv1.Lease {
	e.t.Helper()
	var first *coordinationv1.Lease
	eventually(e.t, 20*time.Second, fmt.Sprintf("acked-version %d", version), func() bool {
		first = e.leases.first(func(lease *coordinationv1.Lease) bool {
			acked, ok := AckedVersion(lease)
			return ok && acked == version
		})
		return first != nil
	})
	return first
}

// lines are the report's lines, as written.
func (e *testEnv) lines() []reportLine {
	e.t.Helper()
	text, err := os.ReadFile(e.report)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	// Only whole lines: the worker may be writing the next one (or created the file and not
	// yet written its first).
	whole := bytes.Split(text, []byte("\n"))
	whole = whole[:len(whole)-1]
	var lines []reportLine
	for _, raw := range whole {
		var line reportLine
		if err := json.Unmarshal(raw, &line); err != nil {
			e.t.Fatalf("%s: %v", raw, err)
		}
		lines = append(lines, line)
	}
	return lines
}

// reportLine is a report line as read back.
type reportLine struct {
	Version *uint64
	Running []string
	UID     string
	At      time.Time
	Until   time.Time
}

// changes are the report's lines, one per change of jobs: a line a fence read adds (the same
// jobs, a later permit deadline) is checked and merged.
func (e *testEnv) changes() []reportLine {
	e.t.Helper()
	var changes []reportLine
	for _, line := range e.lines() {
		if n := len(changes); n > 0 && len(line.Running) > 0 && slices.Equal(changes[n-1].Running, line.Running) {
			if !line.Until.After(changes[n-1].Until) {
				e.t.Fatalf("a repeated line does not extend the permit: %+v", line)
			}
			changes[n-1].Until = line.Until
			continue
		}
		changes = append(changes, line)
	}
	return changes
}

func (e *testEnv) running() [][]string {
	var running [][]string
	for _, line := range e.changes() {
		running = append(running, line.Running)
	}
	return running
}

// leaseRecorder keeps every state of the worker's Lease, to see what each write held.
type leaseRecorder struct {
	mu     sync.Mutex
	leases []*coordinationv1.Lease
}

func recordLeases(t *testing.T, client kubernetes.Interface, namespace string) *leaseRecorder {
	ctx := background(t)
	leases := client.CoordinationV1().Leases(namespace)
	list, err := leases.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	selector := fields.OneTermEqualSelector("metadata.name", testPod).String()
	watcher, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			options.FieldSelector = selector
			return leases.Watch(ctx, options)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(watcher.Stop)
	r := &leaseRecorder{}
	go func() {
		for event := range watcher.ResultChan() {
			if lease, ok := event.Object.(*coordinationv1.Lease); ok {
				r.mu.Lock()
				r.leases = append(r.leases, lease)
				r.mu.Unlock()
			}
		}
	}()
	return r
}

// count is how many states of the Lease were seen: one per write.
func (r *leaseRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.leases)
}

func (r *leaseRecorder) first(match func(*coordinationv1.Lease) bool) *coordinationv1.Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, lease := range r.leases {
		if match(lease) {
			return lease
		}
	}
	return nil
}

// testJobs records every start and stop, and keeps each running job's permit.
type testJobs struct {
	mu      sync.Mutex
	events  []string
	permits map[string]Permit
}

func (j *testJobs) Start(_ context.Context, job string, permit Permit) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.permits == nil {
		j.permits = map[string]Permit{}
	}
	if _, ok := j.permits[job]; ok {
		panic("started twice: " + job)
	}
	j.permits[job] = permit
	j.events = append(j.events, "start "+job)
}

func (j *testJobs) Stop(_ context.Context, job string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.permits[job]; !ok {
		panic("stopped without running: " + job)
	}
	delete(j.permits, job)
	j.events = append(j.events, "stop "+job)
}

// running are the jobs started and not stopped, sorted.
func (j *testJobs) running() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Sorted(maps.Keys(j.permits))
}

func (j *testJobs) log() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.events)
}

// runningWorker is a worker running in the test.
type runningWorker struct {
	worker   *Worker
	jobs     *testJobs
	logs     *syncBuffer
	shutdown chan struct{}
	exit     chan Exit
	err      chan error // what Run returned with exit, sent first
	cancel   context.CancelFunc
}

// readyz is what the worker's /readyz answers.
func (w *runningWorker) readyz(t *testing.T) int {
	t.Helper()
	response, err := http.Get("http://" + w.worker.HealthAddr().String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	response.Body.Close()
	return response.StatusCode
}

// startWorker runs the library's worker for testPod through client (the cluster's unless
// given), with a short permit and readiness on a free port of the loopback. Run must not
// return an error.
func (e *testEnv) startWorker(client kubernetes.Interface, opts ...Option) *runningWorker {
	e.t.Helper()
	if client == nil {
		client = e.c.client
	}
	opts = append([]Option{
		WithNamespace(e.namespace), WithPodUID(e.podUID), WithReport(e.report), WithClient(client),
		WithTerminationDeadline(15 * time.Second),
	}, opts...)
	var w *runningWorker
	// Registered first, so that it runs once runWorker's cleanup has ended the worker.
	e.t.Cleanup(func() {
		if w == nil {
			return
		}
		select {
		case err := <-w.err:
			if err != nil {
				e.t.Errorf("Run: %v", err)
			}
		default:
		}
	})
	w = runWorker(e.t, opts...)
	return w
}

// runWorker runs the library's worker for testPod with the options of the tests (a short
// permit, readiness on a free port of the loopback, no environment), then opts; the worker is
// canceled when the test ends.
func runWorker(t *testing.T, opts ...Option) *runningWorker {
	t.Helper()
	logs := &syncBuffer{}
	opts = append([]Option{
		WithLookupEnv(func(string) (string, bool) { return "", false }),
		WithPodName(testPod), WithNamespace("swarm-go"), WithPodUID("00000000-0000-0000-0000-00000000000a"),
		WithPool("swarm"), WithConfigMap(testConfigMap), WithPermit(testPermit), WithHealthAddr("127.0.0.1:0"),
		WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
	}, opts...)
	w := &runningWorker{jobs: &testJobs{}, logs: logs, shutdown: make(chan struct{}), exit: make(chan Exit, 1), err: make(chan error, 1)}
	worker, err := New(append(opts, WithShutdown(w.shutdown))...)
	if err != nil {
		t.Fatal(err)
	}
	w.worker = worker
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go func() {
		exit, err := worker.Run(ctx, w.jobs)
		w.err <- err
		w.exit <- exit
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case exit := <-w.exit:
			w.exit <- exit
		case <-time.After(10 * time.Second):
			t.Error("the worker did not return after its context ended")
		}
		if t.Failed() {
			t.Logf("worker log:\n%s", logs.String())
		}
	})
	return w
}

// syncBuffer is a log sink shared by goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
