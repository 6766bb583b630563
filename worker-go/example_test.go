package swarmworker_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	swarmworker "github.com/swarm-operator/swarm-operator/worker-go"
)

// resizeJobs runs each job as a goroutine that does units of work, each only while its permit
// holds.
type resizeJobs struct {
	mu    sync.Mutex
	stop  map[string]func()
	units int    // units of work a job does before it idles
	done  func() // called once a job has done its units
}

func (j *resizeJobs) Start(ctx context.Context, job string, permit swarmworker.Permit) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for unit := 1; unit <= j.units; unit++ {
			// Before each unit: a paused process may run this goroutine before the worker's
			// timer has stopped the job.
			if !permit.Holds() {
				return
			}
			fmt.Printf("%s: unit %d done\n", job, unit)
		}
		j.done()
		<-ctx.Done()
	}()
	j.mu.Lock()
	defer j.mu.Unlock()
	j.stop[job] = func() { cancel(); <-ended }
}

// Stop returns only once the job's goroutine has ended; the worker revoked its permit first.
func (j *resizeJobs) Stop(_ context.Context, job string) {
	j.mu.Lock()
	stop := j.stop[job]
	delete(j.stop, job)
	j.mu.Unlock()
	stop()
	fmt.Println(job, "stopped")
}

// A worker's main: its settings from the pod's environment (POD_NAME, POD_NAMESPACE, POD_UID
// from the downward API, SWARM_POOL from the pool's pod template), its client in-cluster. It
// needs a cluster, so this example is only compiled.
func ExampleWorker_Run() {
	worker, err := swarmworker.New()
	if err != nil {
		log.Print(err) // a *MissingSettingError or *InvalidSettingError names the variable
		os.Exit(2)
	}
	exit, err := worker.Run(context.Background(), &resizeJobs{stop: map[string]func(){}, units: 1000, done: func() {}})
	if err != nil {
		// The API server refused a request for good (RBAC, the Lease admission policy): every
		// job has stopped, and the message says which request and what to fix.
		log.Print(err)
		os.Exit(1)
	}
	log.Printf("stopped: %s, version %d acknowledged", exit.Reason, exit.Version)
}

// A job checks its permit before each unit of work. Here the worker runs against client-go's
// fake clientset, which holds the pod's own ConfigMap as the operator writes it: the worker
// reads it, starts job resize, and stops it when Run's context ends.
func ExamplePermit_Holds() {
	client := fake.NewClientset(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "batch", Name: swarmworker.SliceName("resizer-config", "resizer-0")},
		Data: map[string]string{
			swarmworker.ConfigKey: "version: 4\nworkloads:\n  resizer-0:\n    version: 4\n    jobs: [resize]\n",
		},
	})
	worker, err := swarmworker.New(
		swarmworker.WithLookupEnv(func(string) (string, bool) { return "", false }),
		swarmworker.WithPodName("resizer-0"), swarmworker.WithNamespace("batch"),
		swarmworker.WithPodUID("3f0c9a52-5d7e-4c4b-9a57-0d6f1f2b7e11"), swarmworker.WithPool("resizer"),
		swarmworker.WithHealthAddr("127.0.0.1:0"), swarmworker.WithClient(client),
		swarmworker.WithLogger(slog.New(slog.DiscardHandler)),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exit, err := worker.Run(ctx, &resizeJobs{stop: map[string]func(){}, units: 3, done: cancel})
	fmt.Println(exit.Reason, err)
	// Output:
	// resize: unit 1 done
	// resize: unit 2 done
	// resize: unit 3 done
	// resize stopped
	// Canceled <nil>
}

// Settings come from the pod's environment, here a map, and options override them; New also
// binds the health address, which Run then serves.
func ExampleWorker_Settings() {
	env := map[string]string{
		"POD_NAME": "resizer-0", "POD_NAMESPACE": "batch", "POD_UID": "3f0c9a52-5d7e-4c4b-9a57-0d6f1f2b7e11",
		"SWARM_POOL": "resizer", "SWARM_PERMIT_SECONDS": "20",
	}
	worker, err := swarmworker.New(
		swarmworker.WithLookupEnv(func(name string) (string, bool) { value, ok := env[name]; return value, ok }),
		swarmworker.WithHealthAddr("127.0.0.1:0"),
		swarmworker.WithClient(fake.NewClientset()),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	settings := worker.Settings()
	fmt.Println("reads", settings.OwnConfigMap(), "every", settings.ReadEvery())
	fmt.Println("permit", settings.Permit, "ready within", settings.ReadyWithin())
	fmt.Println("terminating for at most", settings.TerminationDeadline)

	_, err = swarmworker.New(swarmworker.WithLookupEnv(func(name string) (string, bool) {
		if name == "POD_NAME" {
			return "", false
		}
		value, ok := env[name]
		return value, ok
	}))
	var missing *swarmworker.MissingSettingError
	fmt.Println(errors.As(err, &missing), err)
	// Output:
	// reads resizer-config.resizer-0 every 10s
	// permit 20s ready within 12s
	// terminating for at most 25s
	// true POD_NAME is not set: pass it through the pod's environment or a worker option
}

// A worker's entry of config.yml: the version it acknowledges once it runs exactly these jobs.
func ExampleParseEntry() {
	text := "version: 7\nworkloads:\n  resizer-0:\n    version: 7\n    jobs: [resize, thumbnails]\n  resizer-1:\n    version: 3\n    jobs: []\n"
	for _, pod := range []string{"resizer-0", "resizer-1", "resizer-2"} {
		entry, err := swarmworker.ParseEntry(text, pod)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(pod, entry.Version, entry.Jobs)
	}
	// Output:
	// resizer-0 7 [resize thumbnails]
	// resizer-1 7 []
	// resizer-2 7 []
}
