package swarmworker

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// DefaultTerminationDeadline is how long a terminating worker waits for a version it may
// acknowledge unless SWARM_TERMINATION_SECONDS says otherwise: within Kubernetes' default
// grace period of 30 s, with room to exit.
const DefaultTerminationDeadline = 25 * time.Second

// Settings is everything the worker needs to know about itself, from the pod's environment
// (the downward API and the pool's pod spec), each overridable by an [Option].
type Settings struct {
	// PodName (POD_NAME) is the entry of config.yml to run, and the Lease's name.
	PodName string
	// Namespace (POD_NAMESPACE) is where the ConfigMap and the Lease are.
	Namespace string
	// PodUID (POD_UID) is the Lease's holder identity and its owner reference.
	PodUID string
	// Pool (SWARM_POOL) is the SwarmPool's name, the Lease's swarm.io/pool label.
	Pool string
	// ConfigMap (SWARM_CONFIG_MAP, default <pool>-config) is the pool's ConfigMap; the worker
	// reads its own, [Settings.OwnConfigMap].
	ConfigMap string
	// Report (SWARM_WORKER_REPORT) is the report file; empty for none.
	Report string
	// LeaseDuration (SWARM_LEASE_DURATION_SECONDS, default 40 s) is the Lease's
	// leaseDurationSeconds, renewed every quarter of it and at once on each acknowledgement.
	LeaseDuration time.Duration
	// FenceMargin (SWARM_FENCE_MARGIN_SECONDS, default max(2 s, duration / 5), at most half
	// the duration) is how long before its Lease could look expired the worker stops every
	// job.
	FenceMargin time.Duration
	// TerminationDeadline (SWARM_TERMINATION_SECONDS, default 25 s) is how long after SIGTERM
	// the worker waits to acknowledge a version without jobs before it returns anyway; keep
	// it below the pod's terminationGracePeriodSeconds.
	TerminationDeadline time.Duration
}

// OwnConfigMap is the ConfigMap this worker reads, <ConfigMap>.<PodName>.
func (s Settings) OwnConfigMap() string {
	return SliceName(s.ConfigMap, s.PodName)
}

// FenceAfter is how long after its last successful Lease write the worker may run jobs.
func (s Settings) FenceAfter() time.Duration {
	return FenceLimit(s.LeaseDuration, s.FenceMargin)
}

// RenewEvery is how often the Lease is renewed when no acknowledgement is due.
func (s Settings) RenewEvery() time.Duration {
	return RenewInterval(s.LeaseDuration)
}

// MissingSettingError says that a setting has no value in the environment or the options.
type MissingSettingError struct {
	// Name is the environment variable.
	Name string
}

func (e *MissingSettingError) Error() string {
	return e.Name + " is not set: pass it through the pod's environment or a worker option"
}

// InvalidSettingError says that a setting's environment variable does not hold what it must.
type InvalidSettingError struct {
	// Name is the environment variable.
	Name string
	// Value is what it holds.
	Value string
	// Expected says what it must hold.
	Expected string
}

func (e *InvalidSettingError) Error() string {
	return fmt.Sprintf("%s is %q: %s", e.Name, e.Value, e.Expected)
}

const (
	leaseDurationVar = "SWARM_LEASE_DURATION_SECONDS"
	fenceMarginVar   = "SWARM_FENCE_MARGIN_SECONDS"
	terminationVar   = "SWARM_TERMINATION_SECONDS"
)

// partialSettings are the settings as read from the environment, each possibly missing until
// an option fills it.
type partialSettings struct {
	podName, namespace, podUID, pool, configMap, report *string
	leaseDuration, fenceMargin, terminationDeadline     *time.Duration
	invalid                                             []*InvalidSettingError
}

// fromEnv reads the protocol's variables through lookup; empty values count as unset.
func fromEnv(lookup func(string) (string, bool)) partialSettings {
	get := func(name string) *string {
		value, ok := lookup(name)
		if !ok || strings.TrimSpace(value) == "" {
			return nil
		}
		return &value
	}
	var p partialSettings
	seconds := func(name string, whole bool) *time.Duration {
		value := get(name)
		if value == nil {
			return nil
		}
		parsed, ok := parseSeconds(*value, whole)
		if !ok {
			expected := "expected a positive number of seconds"
			if whole {
				expected = "expected a whole number of seconds, at least 1 (unset: 40)"
			}
			p.invalid = append(p.invalid, &InvalidSettingError{Name: name, Value: *value, Expected: expected})
			return nil
		}
		return &parsed
	}
	p.leaseDuration = seconds(leaseDurationVar, true)
	p.fenceMargin = seconds(fenceMarginVar, false)
	p.terminationDeadline = seconds(terminationVar, false)
	p.podName, p.namespace, p.podUID = get("POD_NAME"), get("POD_NAMESPACE"), get("POD_UID")
	p.pool, p.configMap, p.report = get("SWARM_POOL"), get("SWARM_CONFIG_MAP"), get("SWARM_WORKER_REPORT")
	return p
}

// complete is the settings, or the first invalid variable an option did not override, or
// the first missing one.
func (p partialSettings) complete() (Settings, error) {
	overridden := map[string]bool{
		leaseDurationVar: p.leaseDuration != nil,
		fenceMarginVar:   p.fenceMargin != nil,
		terminationVar:   p.terminationDeadline != nil,
	}
	for _, bad := range p.invalid {
		if !overridden[bad.Name] {
			return Settings{}, bad
		}
	}
	required := []struct {
		name  string
		value *string
	}{{"SWARM_POOL", p.pool}, {"POD_NAME", p.podName}, {"POD_NAMESPACE", p.namespace}, {"POD_UID", p.podUID}}
	for _, setting := range required {
		if setting.value == nil {
			return Settings{}, &MissingSettingError{Name: setting.name}
		}
	}
	s := Settings{
		PodName: *p.podName, Namespace: *p.namespace, PodUID: *p.podUID, Pool: *p.pool,
		ConfigMap:           *p.pool + "-config",
		LeaseDuration:       DefaultLeaseDuration,
		TerminationDeadline: DefaultTerminationDeadline,
	}
	if p.configMap != nil {
		s.ConfigMap = *p.configMap
	}
	if p.report != nil {
		s.Report = *p.report
	}
	if p.leaseDuration != nil {
		s.LeaseDuration = *p.leaseDuration
	}
	s.FenceMargin = DefaultMargin(s.LeaseDuration)
	if p.fenceMargin != nil {
		s.FenceMargin = *p.fenceMargin
	}
	if p.terminationDeadline != nil {
		s.TerminationDeadline = *p.terminationDeadline
	}
	return s, nil
}

// parseSeconds reads a number of seconds as the pod's environment gives it: whole (and at
// least 1) or not, positive either way.
func parseSeconds(value string, whole bool) (time.Duration, bool) {
	value = strings.TrimSpace(value)
	if whole {
		seconds, err := strconv.ParseUint(value, 10, 64)
		if err != nil || seconds < 1 || seconds > math.MaxInt64/uint64(time.Second) {
			return 0, false
		}
		return time.Duration(seconds) * time.Second, true
	}
	seconds, err := strconv.ParseFloat(value, 64)
	if err != nil || math.IsNaN(seconds) || math.IsInf(seconds, 0) || seconds <= 0 ||
		seconds*float64(time.Second) >= math.MaxInt64 {
		return 0, false
	}
	return time.Duration(seconds * float64(time.Second)), true
}
