package swarmworker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The API server the integration tests run the worker against: the one the kubeconfig
// SWARM_WORKER_GO_KUBECONFIG names, else a kube-sim this package starts from the binary
// KUBE_SIM (a path relative to this directory or to the repository root), else none: the
// tests skip, unless SWARM_WORKER_GO_REQUIRE_CLUSTER=1.

type cluster struct {
	config *rest.Config
	client kubernetes.Interface
	simURL string // kube-sim's URL; "" on a real API server
}

var (
	clusterOnce   sync.Once
	sharedCluster *cluster
	clusterErr    error
	simProcess    *exec.Cmd
)

func TestMain(m *testing.M) {
	code := m.Run()
	if simProcess != nil {
		_ = simProcess.Process.Signal(syscall.SIGTERM)
		_ = simProcess.Wait()
	}
	os.Exit(code)
}

// testCluster is the API server to test against, or skips the test when there is none.
func testCluster(t *testing.T) *cluster {
	t.Helper()
	clusterOnce.Do(func() { sharedCluster, clusterErr = connect() })
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
	if sharedCluster == nil {
		const why = "no API server: set SWARM_WORKER_GO_KUBECONFIG to a kubeconfig, or KUBE_SIM to a kube-sim binary (cargo build -p kube-sim)"
		if os.Getenv("SWARM_WORKER_GO_REQUIRE_CLUSTER") == "1" {
			t.Fatal(why + " (SWARM_WORKER_GO_REQUIRE_CLUSTER=1)")
		}
		t.Skip(why)
	}
	return sharedCluster
}

func connect() (*cluster, error) {
	if kubeconfig := os.Getenv("SWARM_WORKER_GO_KUBECONFIG"); kubeconfig != "" {
		return fromKubeconfig(kubeconfig, false)
	}
	if binary := os.Getenv("KUBE_SIM"); binary != "" {
		return startKubeSim(binary)
	}
	return nil, nil
}

func fromKubeconfig(path string, sim bool) (*cluster, error) {
	config, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	config.QPS, config.Burst = 100, 200
	// kube-sim decodes no Pod or Lease in protobuf, client-go's default for typed clients.
	config.ContentType = "application/json"
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	c := &cluster{config: config, client: client}
	if sim {
		c.simURL = strings.TrimSuffix(config.Host, "/")
	}
	return c, nil
}

// startKubeSim starts kube-sim as test_swarm_worker.py does: simulated delays at a tenth, its
// kubeconfig written once it listens.
func startKubeSim(binary string) (*cluster, error) {
	if _, err := os.Stat(binary); err != nil && !filepath.IsAbs(binary) {
		binary = filepath.Join("..", binary) // given from the repository root
	}
	dir, err := os.MkdirTemp("", "swarm-worker-go-sim")
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	cmd := exec.Command(binary, "--kubeconfig", kubeconfig, "--time-scale", "0.1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("KUBE_SIM=%s: %w", binary, err)
	}
	simProcess = cmd
	listening := make(chan error, 1)
	go func() {
		// "kube-sim listening on ..." once the kubeconfig is written.
		_, err := bufio.NewReader(stdout).ReadString('\n')
		listening <- err
	}()
	select {
	case err := <-listening:
		if err != nil {
			return nil, fmt.Errorf("kube-sim did not start: %w", err)
		}
	case <-time.After(30 * time.Second):
		return nil, errors.New("kube-sim did not start within 30 s")
	}
	return fromKubeconfig(kubeconfig, true)
}

// needsSim skips a step that needs kube-sim's own endpoints.
func (c *cluster) needsSim(t *testing.T) {
	t.Helper()
	if c.simURL == "" {
		t.Skip("needs kube-sim's /kube-sim/v1 endpoints")
	}
}

// compact drops kube-sim's watch history: watches from older resourceVersions get 410.
func (c *cluster) compact(t *testing.T) {
	t.Helper()
	response, err := http.Post(c.simURL+"/kube-sim/v1/compact", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	response.Body.Close()
}

// servedRequest is one request kube-sim served.
type servedRequest struct {
	Method string `json:"method"`
	Path   string `json:"path"`
	Query  string `json:"query"`
}

// served are the requests kube-sim served, in order.
func (c *cluster) served(t *testing.T) []servedRequest {
	t.Helper()
	response, err := http.Get(c.simURL + "/kube-sim/v1/requests")
	if err != nil {
		t.Fatal(err)
	}
	defer response.Body.Close()
	var served []servedRequest
	if err := json.NewDecoder(response.Body).Decode(&served); err != nil {
		t.Fatal(err)
	}
	return served
}

// configMapWatches are the queries of the ConfigMap watches kube-sim served in namespace.
func (c *cluster) configMapWatches(t *testing.T, namespace string) []string {
	t.Helper()
	var watches []string
	for _, request := range c.served(t) {
		if request.Path == "/api/v1/namespaces/"+namespace+"/configmaps" && strings.Contains(request.Query, "watch=true") {
			watches = append(watches, request.Query)
		}
	}
	return watches
}

// eventually polls check until it holds, for at most timeout.
func eventually(t *testing.T, timeout time.Duration, what string, check func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !check() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// background is a context that ends with the test.
func background(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}
