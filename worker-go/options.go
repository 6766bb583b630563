package swarmworker

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Option overrides a setting from the environment, or sets what the environment cannot give;
// pass options to [New].
type Option func(*options)

type options struct {
	lookup   func(string) (string, bool)
	set      []func(*partialSettings)
	client   kubernetes.Interface
	log      *slog.Logger
	shutdown <-chan struct{}
}

// WithLookupEnv reads the settings through lookup instead of os.LookupEnv (tests pass a map's
// lookup, or one that finds nothing so that only options count).
func WithLookupEnv(lookup func(string) (string, bool)) Option {
	return func(o *options) { o.lookup = lookup }
}

func setting(set func(*partialSettings)) Option {
	return func(o *options) { o.set = append(o.set, set) }
}

// WithPodName sets the pod name (POD_NAME).
func WithPodName(name string) Option { return setting(func(p *partialSettings) { p.podName = &name }) }

// WithNamespace sets the namespace (POD_NAMESPACE).
func WithNamespace(namespace string) Option {
	return setting(func(p *partialSettings) { p.namespace = &namespace })
}

// WithPodUID sets the pod uid (POD_UID).
func WithPodUID(uid string) Option { return setting(func(p *partialSettings) { p.podUID = &uid }) }

// WithPool sets the pool (SWARM_POOL).
func WithPool(pool string) Option { return setting(func(p *partialSettings) { p.pool = &pool }) }

// WithConfigMap sets the pool's ConfigMap (SWARM_CONFIG_MAP); the worker reads its own,
// <name>.<pod>.
func WithConfigMap(name string) Option {
	return setting(func(p *partialSettings) { p.configMap = &name })
}

// WithReport sets the report file (SWARM_WORKER_REPORT).
func WithReport(path string) Option { return setting(func(p *partialSettings) { p.report = &path }) }

// WithPermit sets the permit F (SWARM_PERMIT_SECONDS, whole seconds, at least 2, default
// 30 s): how long after its send a fence read lets the worker run the jobs it showed. The
// worker reads every F/2; a shorter permit moves a lost worker's jobs sooner and costs reads.
func WithPermit(permit time.Duration) Option {
	return setting(func(p *partialSettings) { p.permit = &permit })
}

// WithHealthAddr sets where the worker serves /readyz and /healthz (SWARM_WORKER_HEALTH_ADDR,
// an IP:port, default 0.0.0.0:8081); port 0 picks a free one, which [Worker.HealthAddr] tells.
func WithHealthAddr(addr string) Option {
	return setting(func(p *partialSettings) { p.healthAddr = &addr })
}

// WithTerminationDeadline sets how long a terminating worker waits to acknowledge a version
// without jobs (SWARM_TERMINATION_SECONDS, default 25 s); keep it below the pod's grace
// period.
func WithTerminationDeadline(deadline time.Duration) Option {
	return setting(func(p *partialSettings) { p.terminationDeadline = &deadline })
}

// WithClient uses client instead of one configured from the environment (a kubeconfig, else
// in-cluster). Build it with [NewClient]: a client that retries 429s on its own sends an API
// server that sheds load more than the worker's hold lets through.
func WithClient(client kubernetes.Interface) Option {
	return func(o *options) { o.client = client }
}

// WithLogger logs to logger instead of slog.Default(). Once [Worker.Run] has started, klog's
// lines, and with them client-go's, go to logger too (with the attribute logger=klog).
func WithLogger(logger *slog.Logger) Option {
	return func(o *options) { o.log = logger }
}

// WithShutdown terminates the worker once done is closed (a context's Done, say) instead of
// on SIGTERM or SIGINT.
func WithShutdown(done <-chan struct{}) Option {
	return func(o *options) { o.shutdown = done }
}

// New is a worker with its settings from the environment, overridden by opts, listening on its
// health address (which [Worker.Run] serves and closes); it fails with a
// [*MissingSettingError] or [*InvalidSettingError] naming the variable, when no Kubernetes
// client can be configured, or when it cannot listen on the health address.
func New(opts ...Option) (*Worker, error) {
	o := options{lookup: os.LookupEnv}
	for _, opt := range opts {
		opt(&o)
	}
	partial := fromEnv(o.lookup)
	for _, set := range o.set {
		set(&partial)
	}
	settings, err := partial.complete()
	if err != nil {
		return nil, err
	}
	if o.client == nil {
		if o.client, err = defaultClient(); err != nil {
			return nil, err
		}
	}
	if o.log == nil {
		o.log = slog.Default()
	}
	// Bound here rather than in Run, so that a port in use fails the start with an error the
	// application can report.
	listener, err := net.Listen("tcp", settings.HealthAddr)
	if err != nil {
		return nil, fmt.Errorf("cannot serve readiness on %s (%s): %w", settings.HealthAddr, healthAddrVar, err)
	}
	return &Worker{settings: settings, client: o.client, log: o.log, shutdown: o.shutdown, health: listener}, nil
}

// defaultClient is a client from the kubeconfig (KUBECONFIG or ~/.kube/config), or the
// in-cluster configuration when there is none (see [NewClient]).
func defaultClient() (kubernetes.Interface, error) {
	loading := clientcmd.NewDefaultClientConfigLoadingRules()
	config, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loading, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("cannot configure a Kubernetes client (in-cluster or kubeconfig): %w", err)
	}
	return NewClient(config)
}

// NewClient is the client [New] builds for config when no [WithClient] is given: it speaks
// JSON, and hands a 429 (Too Many Requests) to the worker at once instead of retrying it inside
// the call as client-go does by default, so that the worker's hold spaces every request the API
// server sheds. Build a client given to [WithClient] with it, or from a config as it sets it.
func NewClient(config *rest.Config) (kubernetes.Interface, error) {
	config = rest.CopyConfig(config)
	// JSON rather than client-go's default protobuf: kube-sim (the repository's test API
	// server) decodes no Lease in protobuf, and a worker's few small requests gain nothing.
	config.ContentType = "application/json"
	withoutShedRetries(config)
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("cannot configure a Kubernetes client (in-cluster or kubeconfig): %w", err)
	}
	return client, nil
}
