package swarmworker

import (
	"fmt"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// DefaultTerminationDeadline is how long a terminating worker waits for a version it may
// acknowledge unless SWARM_TERMINATION_SECONDS says otherwise: within Kubernetes' default
// grace period of 30 s, with room to exit.
const DefaultTerminationDeadline = 25 * time.Second

// DefaultHealthAddr is where the worker serves readiness unless SWARM_WORKER_HEALTH_ADDR says
// otherwise: port 8081 of every interface, where the pod template's probe looks.
const DefaultHealthAddr = "0.0.0.0:8081"

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
	// Permit (SWARM_PERMIT_SECONDS, whole seconds, at least 2, default 30) is how long after
	// its send a fence read lets the worker run the jobs it showed; the Lease's
	// leaseDurationSeconds, from which the operator computes how long it waits for a revoke.
	Permit time.Duration
	// HealthAddr (SWARM_WORKER_HEALTH_ADDR, an IP:port, default 0.0.0.0:8081; port 0 picks a
	// free one) is where the worker serves /readyz and /healthz.
	HealthAddr string
	// TerminationDeadline (SWARM_TERMINATION_SECONDS, default 25 s) is how long after SIGTERM
	// the worker waits to acknowledge a version without jobs before it returns anyway; keep
	// it below the pod's terminationGracePeriodSeconds.
	TerminationDeadline time.Duration
}

// OwnConfigMap is the ConfigMap this worker reads, <ConfigMap>.<PodName>.
func (s Settings) OwnConfigMap() string {
	return SliceName(s.ConfigMap, s.PodName)
}

// ReadEvery is how often the worker sends a fence read when nothing fails.
func (s Settings) ReadEvery() time.Duration {
	return ReadInterval(s.Permit)
}

// ReadyWithin is how long after the send of its last successful read the worker answers
// ready.
func (s Settings) ReadyWithin() time.Duration {
	return ReadyWithin(s.Permit)
}

// MissingSettingError says that a setting has no value in the environment or the options.
type MissingSettingError struct {
	// Name is the environment variable.
	Name string
}

func (e *MissingSettingError) Error() string {
	return e.Name + " is not set: pass it through the pod's environment or a worker option"
}

// InvalidSettingError says that a setting's environment variable (or the option that stands
// for it) does not hold what it must.
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
	permitVar      = "SWARM_PERMIT_SECONDS"
	healthAddrVar  = "SWARM_WORKER_HEALTH_ADDR"
	terminationVar = "SWARM_TERMINATION_SECONDS"

	permitExpected     = "expected a whole number of seconds, at least 2 (unset: 30)"
	healthAddrExpected = "expected an IP address and a port, such as 0.0.0.0:8081 or [::]:8081 (port 0: a free one)"
)

// retiredVars are the settings of the renewing protocol this one replaced: set, they are
// refused rather than ignored, since the worker would not do what they ask.
var retiredVars = []string{"SWARM_LEASE_DURATION_SECONDS", "SWARM_FENCE_MARGIN_SECONDS"}

// partialSettings are the settings as read from the environment, each possibly missing until
// an option fills it.
type partialSettings struct {
	podName, namespace, podUID, pool, configMap, report, healthAddr *string
	permit, terminationDeadline                                     *time.Duration
	invalid                                                         []*InvalidSettingError
	retired                                                         *InvalidSettingError
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
	for _, name := range retiredVars {
		if value := get(name); value != nil && p.retired == nil {
			p.retired = &InvalidSettingError{Name: name, Value: *value,
				Expected: "no longer read: the worker is fenced by reads of its ConfigMap, not by Lease renewals; remove it (" + permitVar + " sets the permit)"}
		}
	}
	if value := get(permitVar); value != nil {
		if permit, ok := parseSeconds(*value, true); ok && permit >= MinPermit {
			p.permit = &permit
		} else {
			p.invalid = append(p.invalid, &InvalidSettingError{Name: permitVar, Value: *value, Expected: permitExpected})
		}
	}
	if value := get(terminationVar); value != nil {
		if deadline, ok := parseSeconds(*value, false); ok {
			p.terminationDeadline = &deadline
		} else {
			p.invalid = append(p.invalid, &InvalidSettingError{Name: terminationVar, Value: *value, Expected: "expected a positive number of seconds"})
		}
	}
	if value := get(healthAddrVar); value != nil {
		addr := strings.TrimSpace(*value)
		p.healthAddr = &addr
	}
	p.podName, p.namespace, p.podUID = get("POD_NAME"), get("POD_NAMESPACE"), get("POD_UID")
	p.pool, p.configMap, p.report = get("SWARM_POOL"), get("SWARM_CONFIG_MAP"), get("SWARM_WORKER_REPORT")
	return p
}

// complete is the settings, or the first retired variable set, or the first invalid variable
// an option did not override, or the first missing one, or an option out of range.
func (p partialSettings) complete() (Settings, error) {
	if p.retired != nil {
		return Settings{}, p.retired
	}
	overridden := map[string]bool{
		permitVar:      p.permit != nil,
		terminationVar: p.terminationDeadline != nil,
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
		Permit:              DefaultPermit,
		HealthAddr:          DefaultHealthAddr,
		TerminationDeadline: DefaultTerminationDeadline,
	}
	if p.configMap != nil {
		s.ConfigMap = *p.configMap
	}
	if p.report != nil {
		s.Report = *p.report
	}
	if p.permit != nil {
		s.Permit = *p.permit
	}
	if p.healthAddr != nil {
		s.HealthAddr = *p.healthAddr
	}
	if p.terminationDeadline != nil {
		s.TerminationDeadline = *p.terminationDeadline
	}
	// An option is held to what the variable may say: the Lease carries whole seconds.
	if s.Permit < MinPermit || s.Permit%time.Second != 0 {
		return Settings{}, &InvalidSettingError{Name: permitVar, Value: s.Permit.String(), Expected: permitExpected}
	}
	if !validHealthAddr(s.HealthAddr) {
		return Settings{}, &InvalidSettingError{Name: healthAddrVar, Value: s.HealthAddr, Expected: healthAddrExpected}
	}
	if s.TerminationDeadline <= 0 {
		return Settings{}, &InvalidSettingError{Name: terminationVar, Value: s.TerminationDeadline.String(), Expected: "expected a positive number of seconds"}
	}
	return s, nil
}

// validHealthAddr reports whether addr is an IP literal and a port: a host name is refused,
// since which interface it binds would depend on the resolver.
func validHealthAddr(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if _, err := netip.ParseAddr(host); err != nil {
		return false
	}
	_, err = strconv.ParseUint(port, 10, 16)
	return err == nil
}

// parseSeconds reads a number of seconds as the pod's environment gives it: whole or not,
// positive either way.
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
