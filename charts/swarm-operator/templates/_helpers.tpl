{{/*
Object names are those of deploy/, whatever the release's name: the Lease, the docs and the
runbooks name them (`kubectl -n <namespace> logs deploy/swarm-operator`), and a second release
of the chart in the same namespace (or a second cluster-wide one) fails to install instead of
running two operators on the same pools.
*/}}
{{- define "swarm-operator.name" -}}
swarm-operator
{{- end }}

{{/* helm.sh/chart: <name>-<version>. */}}
{{- define "swarm-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The labels of deploy/ that selectors use. Never add to them: selectors are immutable. */}}
{{- define "swarm-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "swarm-operator.name" . }}
{{- end }}

{{/* Helm's own labels (the only labels deploy/ does not have) and the user's commonLabels. */}}
{{- define "swarm-operator.helmLabels" -}}
helm.sh/chart: {{ include "swarm-operator.chart" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The labels of the operator's objects. */}}
{{- define "swarm-operator.labels" -}}
{{ include "swarm-operator.selectorLabels" . }}
{{ include "swarm-operator.helmLabels" . }}
{{- end }}

{{/* The labels of the workers' objects (workerRbac, workerLeasePolicy), as in deploy/. */}}
{{- define "swarm-operator.workerLabels" -}}
app.kubernetes.io/name: swarm-worker
{{ include "swarm-operator.helmLabels" . }}
{{- end }}

{{/* metadata.annotations (indented under metadata), when commonAnnotations has any. */}}
{{- define "swarm-operator.annotations" -}}
{{- with .Values.commonAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
{{- end }}
{{- end }}

{{/* The namespace of the leader-election Lease. */}}
{{- define "swarm-operator.leaseNamespace" -}}
{{- .Values.leaderElection.namespace | default .Release.Namespace }}
{{- end }}

{{/* The operator's ServiceAccount: the chart's, or an existing one (serviceAccount.create false). */}}
{{- define "swarm-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- .Values.serviceAccount.name | default (include "swarm-operator.name" .) }}
{{- else }}
{{- required "serviceAccount.name: name the existing ServiceAccount the operator runs as when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The operator's image: by digest when image.digest is set, else by tag (empty: appVersion). */}}
{{- define "swarm-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* The operator's ServiceAccount as a subject of a binding. */}}
{{- define "swarm-operator.subjects" -}}
- kind: ServiceAccount
  name: {{ include "swarm-operator.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
{{- end }}

{{/*
Exactly the verbs the operator uses (deploy/rbac/cluster_role.yaml): the rules of the ClusterRole,
or of the Role in watchNamespace.
*/}}
{{- define "swarm-operator.rules" -}}
# Watch pools (reflector: list + watch), re-read one before writing for it (get), and report
# its status (server-side apply).
- apiGroups: ["swarm.io"]
  resources: ["swarmpools"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["swarm.io"]
  resources: ["swarmpools/status"]
  verbs: ["patch"]
# Cache the worker StatefulSets and Deployments, and the ReplicaSets that own a
# Deployment's pods.
- apiGroups: ["apps"]
  resources: ["statefulsets", "deployments", "replicasets"]
  verbs: ["list", "watch"]
# Cache worker pods, list them live around a config write, delete stale ones.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch", "delete"]
# Read the pool's ConfigMap, watch the ones it owns, write it with server-side apply
# (an apply that creates the ConfigMap needs create); create, list and delete the workers' own
# ConfigMaps of Acknowledge pools; watch and read the ConfigMaps pools take jobs from
# (spec.jobsFrom, label swarm.io/jobs-source), which it never writes.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Events about pools (events.k8s.io/v1; repeated events are patched as a series).
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
# Cache the workers' Leases (label swarm.io/pool): what each acknowledged under
# rollout.policy Acknowledge.
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["list", "watch"]
{{- end }}

{{/*
Leader election: the replicas share one Lease (read it, create it the first time, take and renew
it with server-side apply).
*/}}
{{- define "swarm-operator.leaderElectionRules" -}}
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "create", "patch"]
{{- end }}

{{/* The manager's arguments. */}}
{{- define "swarm-operator.args" -}}
- run
- --log-format={{ .Values.logFormat }}
{{- with .Values.leaderElection }}
{{- if .enabled }}
- --leader-elect
{{- with .namespace }}
- --leader-elect-namespace={{ . }}
{{- end }}
{{- with .leaseName }}
- --leader-elect-lease-name={{ . }}
{{- end }}
{{- if not (kindIs "invalid" .leaseDurationSeconds) }}
- --leader-elect-lease-duration={{ .leaseDurationSeconds | int64 }}
{{- end }}
{{- end }}
{{- end }}
{{- if not (kindIs "invalid" .Values.maxConcurrentReconciles) }}
- --max-concurrent-reconciles={{ .Values.maxConcurrentReconciles | int64 }}
{{- end }}
{{- with .Values.watchNamespace }}
- --namespace={{ . }}
{{- end }}
{{- with .Values.metrics }}
{{- if ne (int64 .port) 8443 }}
- --metrics-addr=0.0.0.0:{{ .port | int64 }}
{{- end }}
{{- if .insecure }}
- --metrics-insecure
{{- else if .certSecret }}
- --metrics-cert-dir={{ include "swarm-operator.metricsCertDir" $ }}
{{- end }}
{{- end }}
{{- end }}

{{/* Where metrics.certSecret is mounted. */}}
{{- define "swarm-operator.metricsCertDir" -}}
/var/run/secrets/swarm-operator/metrics-cert
{{- end }}

{{/* The scheme of /metrics, also the name of the metrics Service's port. */}}
{{- define "swarm-operator.metricsScheme" -}}
{{- if .Values.metrics.insecure }}http{{ else }}https{{ end }}
{{- end }}
