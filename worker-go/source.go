package swarmworker

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	coreclient "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// readRetry is how long to wait before reading the ConfigMap again after a failed read.
const readRetry = 2 * time.Second

// source follows the worker's own ConfigMap through the API: GET, then WATCH by
// metadata.name. There is no fallback to a mounted file: a worker that cannot reach the API
// cannot renew its Lease either, so the operator hands its jobs to others, and it must run
// none of them.
type source struct {
	configMaps coreclient.ConfigMapInterface
	name       string
	pod        string
	out        *latest[Observed]
	log        *slog.Logger
}

// watchEnd says why a watch ended, so a failing one is not retried in a tight loop.
type watchEnd int

const (
	// watchExpired: the resourceVersion is older than the server's history (410 Gone): GET
	// again at once, and watch without a resourceVersion.
	watchExpired watchEnd = iota
	// watchFailed: GET again after a pause.
	watchFailed
)

// follow publishes this pod's entry on out until ctx ends.
func (s *source) follow(ctx context.Context) {
	expired := false
	for ctx.Err() == nil {
		configMap, err := s.configMaps.Get(ctx, s.name, metav1.GetOptions{})
		version := ""
		switch {
		case err == nil:
			s.publish(configMap)
			version = configMap.ResourceVersion
		case apierrors.IsNotFound(err):
			// No ConfigMap yet: watch for its creation rather than GET it again later.
			s.log.Debug("no ConfigMap yet; watching for it", "configMap", s.name)
		default:
			s.log.Warn("cannot read the ConfigMap", "configMap", s.name, "error", err)
			sleep(ctx, readRetry)
			continue
		}
		if expired {
			// A GET returns the object's own resourceVersion, which may be older than the
			// server's watch history too; without one the watch starts with the object as it is.
			version, expired = "", false
		}
		if s.watch(ctx, version) == watchExpired {
			expired = true
			continue
		}
		sleep(ctx, readRetry)
	}
}

// watch follows the ConfigMap from version ("": from the object as it is) until the watch
// fails or expires. client-go's RetryWatcher resumes a watch from the last resourceVersion
// seen across timeouts and broken connections, but needs one to start from; without one a
// plain watch runs first, as long as it lasts, and the RetryWatcher takes over from the last
// resourceVersion it delivered.
func (s *source) watch(ctx context.Context, version string) watchEnd {
	if version == "" {
		var end watchEnd
		var over bool
		if version, end, over = s.watchFromNow(ctx); over {
			return end
		}
		if version == "" {
			return watchFailed
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watcher, err := watchtools.NewRetryWatcherWithContext(ctx, version, s.lister())
	if err != nil {
		s.log.Warn("cannot watch the ConfigMap", "configMap", s.name, "error", err)
		return watchFailed
	}
	defer watcher.Stop()
	for event := range watcher.ResultChan() {
		if end, over := s.handle(event); over {
			return end
		}
	}
	return watchFailed
}

// watchFromNow watches without a resourceVersion (the first event is the object as it is)
// until the watch closes, and returns the last resourceVersion it delivered; over when it
// ended on an error event.
func (s *source) watchFromNow(ctx context.Context) (string, watchEnd, bool) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watcher, err := s.lister().WatchWithContext(ctx, metav1.ListOptions{AllowWatchBookmarks: true})
	if err != nil {
		s.log.Warn("cannot watch the ConfigMap", "configMap", s.name, "error", err)
		return "", watchFailed, true
	}
	defer watcher.Stop()
	version := ""
	for event := range watcher.ResultChan() {
		if end, over := s.handle(event); over {
			return "", end, true
		}
		if object, ok := event.Object.(metav1.Object); ok && object.GetResourceVersion() != "" {
			version = object.GetResourceVersion()
		}
	}
	return version, watchFailed, false
}

// handle publishes what one event says; true when the watch is over.
func (s *source) handle(event watch.Event) (watchEnd, bool) {
	switch event.Type {
	case watch.Added, watch.Modified:
		if configMap, ok := event.Object.(*corev1.ConfigMap); ok {
			s.publish(configMap)
		}
	case watch.Deleted:
		// The jobs keep running: only a new version may change them.
		s.log.Warn("ConfigMap deleted", "configMap", s.name)
	case watch.Error:
		err := apierrors.FromObject(event.Object)
		var status apierrors.APIStatus
		if errors.As(err, &status) && status.Status().Code == http.StatusGone {
			s.log.Debug("watch expired; reading again", "configMap", s.name)
			return watchExpired, true
		}
		s.log.Warn("watch failed; reading again", "configMap", s.name, "error", err)
		return watchFailed, true
	}
	return watchFailed, false
}

// lister watches the one ConfigMap by name: RBAC cannot name one ConfigMap per pod, so the
// worker may watch them all, but it asks only for its own.
func (s *source) lister() *cache.ListWatch {
	selector := fields.OneTermEqualSelector("metadata.name", s.name).String()
	return &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			options.FieldSelector = selector
			return s.configMaps.Watch(ctx, options)
		},
	}
}

// publish hands this pod's entry of configMap to the event loop, if it has a usable one.
func (s *source) publish(configMap *corev1.ConfigMap) {
	if observed, ok := observe(configMap, s.pod, s.log); ok {
		s.out.set(observed)
	}
}

// observe is pod's entry of configMap's config.yml, if it has a usable one.
func observe(configMap *corev1.ConfigMap, pod string, log *slog.Logger) (Observed, bool) {
	text, ok := configMap.Data[ConfigKey]
	if !ok {
		log.Warn("the ConfigMap has no worker config", "key", ConfigKey)
		return Observed{}, false
	}
	observed, err := ParseEntry(text, pod)
	if err != nil {
		log.Warn("cannot read the ConfigMap's worker config", "error", err)
		return Observed{}, false
	}
	return observed, true
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
}
