package swarmworker

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

func TestRunReturnsThroughAClientWhoseWatchIgnoresItsContext(t *testing.T) {
	client := fake.NewClientset(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "swarm-go", Name: SliceName(testConfigMap, testPod)},
		Data:       map[string]string{ConfigKey: "version: 1\nworkloads:\n  " + testPod + ":\n    version: 1\n    jobs: [a]\n"},
	})
	w := runWorker(t, WithClient(client))
	eventually(t, 5*time.Second, "job a and the watch", func() bool {
		watching := slices.ContainsFunc(client.Actions(), func(action clienttesting.Action) bool { return action.GetVerb() == "watch" })
		return watching && slices.Equal(w.jobs.running(), []string{"a"})
	})
	w.cancel()
	exit, err := w.returned(t)
	if exit.Reason != Canceled || err != nil {
		t.Fatalf("Run returned %+v, %v", exit, err)
	}
	if got := w.jobs.running(); len(got) != 0 {
		t.Fatalf("jobs %v run after Run returned", got)
	}
}
