// Builds the licence check of the Go worker module's dependencies
// (scripts/check-dependency-licenses.sh): google/licensecheck reads each module's licence file.
module swarm-operator/hack/licenses

go 1.26.0

require github.com/google/licensecheck v0.3.1
