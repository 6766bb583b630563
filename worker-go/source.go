package swarmworker

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	coreclient "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// source WATCHes the worker's own ConfigMap by metadata.name, for speed only: an event proves
// nothing (a watch may be served from the API server's cache) and changes nothing by itself;
// it makes the worker send a fence read at once.
type source struct {
	configMaps coreclient.ConfigMapInterface
	namespace  string
	name       string
	events     chan<- struct{} // buffered: one pending event stands for any number
	refusals   refusals
	shed       *shed // holds every (re)start of the watch while the worker is shed
	log        *slog.Logger
	// retryCeiling bounds the wait before watching again after a failed watch: 1 s doubling
	// to it, spread at random, since thousands of workers re-watching every second would keep
	// an overloaded API server overloaded.
	retryCeiling time.Duration
}

// watchEnd says why a watch ended, so a failing one is not retried in a tight loop.
type watchEnd int

const (
	// watchExpired: the resourceVersion is older than the server's history (410 Gone):
	// watch again at once, without a resourceVersion.
	watchExpired watchEnd = iota
	// watchFailed: watch again after a pause.
	watchFailed
	// watchRefused: the API server refused the watch for good; it was reported.
	watchRefused
	// watchShed: the API server shed the watch (429): watch again once the worker's hold
	// lets it.
	watchShed
)

// follow watches until ctx ends or the watch is refused: from the object as it is, then from
// the last resourceVersion seen, again from the object as it is after a 410.
func (s *source) follow(ctx context.Context) {
	var backoff retry
	for ctx.Err() == nil {
		started := time.Now()
		end := s.watch(ctx)
		if end != watchFailed || time.Since(started) > s.retryCeiling {
			// It ran: a failure now is not one of a row.
			backoff = retry{}
		}
		switch end {
		case watchRefused:
			return
		case watchFailed:
			sleep(ctx, backoff.next(s.retryCeiling))
		case watchShed:
			// The next start waits for the worker's hold in lister's Watch.
		}
	}
}

// watch follows the ConfigMap from the object as it is until the watch fails or expires.
// client-go's RetryWatcher resumes a watch from the last resourceVersion seen across timeouts
// and broken connections, but needs one to start from: a plain watch runs first, as long as it
// lasts, and the RetryWatcher takes over from the last resourceVersion it delivered.
func (s *source) watch(ctx context.Context) watchEnd {
	version, end, over := s.watchFromNow(ctx)
	if over {
		return end
	}
	if version == "" {
		return watchFailed
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
		return "", s.failed(err), true
	}
	defer watcher.Stop()
	// A watch that ignores its context (client-go's fake clientset's does) ends with it too, or
	// Run would never return.
	defer context.AfterFunc(ctx, watcher.Stop)()
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

// handle asks for a fence read on a change; true when the watch is over.
func (s *source) handle(event watch.Event) (watchEnd, bool) {
	switch event.Type {
	case watch.Added, watch.Modified, watch.Deleted:
		select {
		case s.events <- struct{}{}:
		default:
		}
	case watch.Error:
		// client-go's RetryWatcher hands a 401 or 403 on as an error event.
		err := apierrors.FromObject(event.Object)
		var status apierrors.APIStatus
		if errors.As(err, &status) && status.Status().Code == http.StatusGone {
			s.log.Debug("watch expired; watching from now", "configMap", s.name)
			return watchExpired, true
		}
		return s.failed(err), true
	}
	return watchFailed, false
}

// failed reports a refusal of the watch, or logs a failure it retries.
func (s *source) failed(err error) watchEnd {
	if refused := refusal(err, "watch", "ConfigMap", s.namespace, s.name); refused != nil {
		s.refusals.report(refused)
		return watchRefused
	}
	if apierrors.IsTooManyRequests(err) {
		s.log.Debug("the API server shed the watch; watching again once the worker's hold ends", "configMap", s.name)
		return watchShed
	}
	s.log.Warn("watch failed; watching again", "configMap", s.name, "error", err)
	return watchFailed
}

// lister watches the one ConfigMap by name: RBAC cannot name one ConfigMap per pod, so the
// worker may watch them all, but it asks only for its own. Each start, the RetryWatcher's
// restarts too (it retries a failed start every second on its own), waits for the worker's
// hold and counts through it.
func (s *source) lister() *cache.ListWatch {
	selector := fields.OneTermEqualSelector("metadata.name", s.name).String()
	return &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			pass, err := s.shed.admit(ctx)
			if err != nil {
				return nil, err
			}
			options.FieldSelector = selector
			watcher, err := s.configMaps.Watch(ctx, options)
			pass.done(err)
			return watcher, err
		},
	}
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
