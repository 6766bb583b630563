package swarmworker

import "sync"

// latest holds the newest value one goroutine publishes for another, which wants only the
// newest: a value not read yet is replaced, and Changed fires once for any number of sets.
type latest[T any] struct {
	mu      sync.Mutex
	value   T
	has     bool
	changes chan struct{}
}

func newLatest[T any]() *latest[T] {
	return &latest[T]{changes: make(chan struct{}, 1)}
}

// set publishes value.
func (l *latest[T]) set(value T) {
	l.mu.Lock()
	l.value, l.has = value, true
	l.mu.Unlock()
	select {
	case l.changes <- struct{}{}:
	default:
	}
}

// get is the newest value, if any was set.
func (l *latest[T]) get() (T, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.value, l.has
}

// take is the newest value, marked as seen: Changed does not fire for it again.
func (l *latest[T]) take() (T, bool) {
	select {
	case <-l.changes:
	default:
	}
	return l.get()
}

// changed fires after a set not yet taken.
func (l *latest[T]) changed() <-chan struct{} {
	return l.changes
}
