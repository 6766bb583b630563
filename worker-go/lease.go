package swarmworker

import (
	"math"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Holder is the pod instance a worker Lease belongs to.
type Holder struct {
	// Pod is the pod name, also the Lease's name.
	Pod string
	// Namespace is the namespace of the pod and the Lease.
	Namespace string
	// UID is the pod uid: the Lease's holderIdentity.
	UID string
	// Pool is the SwarmPool's name, the Lease's PoolLabel.
	Pool string
}

// RenewedLease is the Lease to write for holder at now, acknowledging acked (nil: nothing
// yet), given the Lease read from the API (nil when there is none); duration is the worker's
// permit F, its leaseDurationSeconds. current is not modified.
//
// A Lease held by another uid was left by a previous pod of the same name: it is taken over,
// with a new acquire time, a transition counted, this pod as owner instead of that one, and no
// acknowledgement but this instance's own. Labels, annotations and owners that are not the
// protocol's are kept, and so is the resourceVersion (the write is a read-modify-write).
func RenewedLease(current *coordinationv1.Lease, holder Holder, acked *uint64, duration time.Duration, now time.Time) *coordinationv1.Lease {
	var lease *coordinationv1.Lease
	if current != nil {
		lease = current.DeepCopy()
	} else {
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: holder.Pod, Namespace: holder.Namespace}}
	}
	lease.TypeMeta = metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"}
	renewSpec(&lease.Spec, holder.UID, duration, metav1.NewMicroTime(now))

	meta := &lease.ObjectMeta
	if meta.Labels == nil {
		meta.Labels = map[string]string{}
	}
	meta.Labels[PoolLabel] = holder.Pool
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	// The annotation speaks for this process only: a version acknowledged by a previous pod
	// instance (or a previous run of this container) says nothing about what runs now.
	if acked != nil {
		meta.Annotations[AckedVersionAnnotation] = strconv.FormatUint(*acked, 10)
	} else {
		delete(meta.Annotations, AckedVersionAnnotation)
	}
	meta.OwnerReferences = ownedBy(meta.OwnerReferences, holder)
	return lease
}

// renewSpec moves renewTime to now and takes the Lease over for uid if another held it.
func renewSpec(spec *coordinationv1.LeaseSpec, uid string, duration time.Duration, now metav1.MicroTime) {
	if spec.HolderIdentity == nil || *spec.HolderIdentity != uid {
		if spec.HolderIdentity != nil {
			transitions := int32(1)
			if spec.LeaseTransitions != nil {
				transitions = *spec.LeaseTransitions + 1
			}
			spec.LeaseTransitions = &transitions
		}
		spec.HolderIdentity = &uid
		spec.AcquireTime = &now
	}
	if spec.AcquireTime == nil {
		spec.AcquireTime = &now
	}
	renewed := now
	spec.RenewTime = &renewed
	seconds := int32(min(max(int64(duration/time.Second), 1), math.MaxInt32))
	spec.LeaseDurationSeconds = &seconds
}

// ownedBy keeps every owner but another pod, and adds holder's pod unless it is one already.
func ownedBy(owners []metav1.OwnerReference, holder Holder) []metav1.OwnerReference {
	kept := make([]metav1.OwnerReference, 0, len(owners)+1)
	ours := false
	for _, owner := range owners {
		if owner.Kind == "Pod" && string(owner.UID) != holder.UID {
			continue
		}
		ours = ours || string(owner.UID) == holder.UID
		kept = append(kept, owner)
	}
	if !ours {
		kept = append(kept, metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: holder.Pod, UID: types.UID(holder.UID)})
	}
	return kept
}

// AckedVersion is the acknowledged version a Lease carries, if it has a readable one.
func AckedVersion(lease *coordinationv1.Lease) (uint64, bool) {
	if lease == nil {
		return 0, false
	}
	text, ok := lease.Annotations[AckedVersionAnnotation]
	if !ok {
		return 0, false
	}
	version, err := strconv.ParseUint(text, 10, 64)
	return version, err == nil
}
