{{/* Chart name, truncated to a DNS label. */}}
{{- define "deepseek-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Prefix of every object name: the release name, plus the chart name unless it contains it. */}}
{{- define "deepseek-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "deepseek-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "deepseek-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Labels that select the release's Pods (add app.kubernetes.io/component). */}}
{{- define "deepseek-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "deepseek-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The image reference, by digest when one is given. */}}
{{- define "deepseek-operator.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The image of spec.modelCache.fill's Jobs: the operator's own (it runs fill-weights). */}}
{{- define "deepseek-operator.fillImage" -}}
{{- include "deepseek-operator.image" . -}}
{{- end -}}

{{/* The vLLM router image the operator runs for a serving without spec.router.image. */}}
{{- define "deepseek-operator.routerImage" -}}
{{- if .Values.routerImage.digest -}}
{{- printf "%s@%s" .Values.routerImage.repository .Values.routerImage.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.routerImage.repository .Values.routerImage.tag -}}
{{- end -}}
{{- end -}}

{{/* The operator's ServiceAccount name. */}}
{{- define "deepseek-operator.serviceAccountName" -}}
{{- default (include "deepseek-operator.fullname" .) .Values.operator.serviceAccount.name -}}
{{- end -}}

{{/* The agent's ServiceAccount name. */}}
{{- define "deepseek-operator.agentServiceAccountName" -}}
{{- default (printf "%s-agent" (include "deepseek-operator.fullname" .)) .Values.agent.serviceAccount.name -}}
{{- end -}}

{{/* The operator's cluster-scoped reads: needed whatever namespaces it watches. */}}
{{- define "deepseek-operator.clusterRules" -}}
# GPU facts (GFD and agent labels): read only.
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["get", "list", "watch"]
# GPU facts of nodes NVIDIA's DRA driver serves (gpu.nvidia.com ResourceSlices): read only.
- apiGroups: ["resource.k8s.io"]
  resources: ["resourceslices"]
  verbs: ["get", "list", "watch"]
# Which of those devices ResourceClaims hold (in any namespace), so they are not counted free:
# read only, listed and watched, never fetched alone.
- apiGroups: ["resource.k8s.io"]
  resources: ["resourceclaims"]
  verbs: ["list", "watch"]
# Kueue AdmissionChecks whose controller is the operator (a P/D pair admitted whole): read, and
# their Active condition written (server-side apply of the status).
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["admissionchecks"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["admissionchecks/status"]
  verbs: ["patch"]
# kopf scans CRDs to resolve the resources it serves.
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["get", "list", "watch"]
{{- end -}}

{{/* The operator's rights inside a namespace it serves (a Role there, or the ClusterRole). */}}
{{- define "deepseek-operator.namespacedRules" -}}
# The primary resource: kopf watches it and patches its own annotations/finalizers.
- apiGroups: ["serving.deepseek-operator.io"]
  resources: ["deepseekservings"]
  verbs: ["get", "list", "watch", "patch"]
# Status is only ever merge-patched (controller/kube.py), never read or replaced on its own.
- apiGroups: ["serving.deepseek-operator.io"]
  resources: ["deepseekservings/status"]
  verbs: ["patch"]
# The rendered children, written by server-side apply (patch) and watched for drift.
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Multi-pod replicas: one LeaderWorkerSet (sigs.k8s.io/lws) per DeepSeekServing.
- apiGroups: ["leaderworkerset.x-k8s.io"]
  resources: ["leaderworkersets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
{{- if .Values.computeDomain.enabled }}
# Multi-node NVLink: one ComputeDomain (NVIDIA DRA driver, IMEX channels) per DeepSeekServing.
- apiGroups: ["resource.nvidia.com"]
  resources: ["computedomains"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
{{- end }}
# DRA clusters: one ResourceClaimTemplate per DeepSeekServing the pods claim their GPUs from.
- apiGroups: ["resource.k8s.io"]
  resources: ["resourceclaimtemplates"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Prefill/decode disaggregation with an endpoint picker: one InferencePool per DeepSeekServing.
- apiGroups: ["inference.networking.k8s.io"]
  resources: ["inferencepools"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Kueue's Workloads (one per replica of a serving with spec.queueName), for the Admitted
# condition; only the operator's own admission check entry in their status is ever written.
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads/status"]
  verbs: ["patch"]
# The StatefulSets LeaderWorkerSet makes (read only): a refused pod shows only there.
- apiGroups: ["apps"]
  resources: ["statefulsets"]
  verbs: ["get", "list", "watch"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Read-only: our LeaderWorkerSet pods (label-selected LIST + WATCH), for the clique and
# readiness of each group in status.groups. No pod is ever created or changed. `get` is never
# called by the operator: it is there because each serving's router Role grants pods
# get/list/watch, and the API server lets a subject write a Role only with the rights it grants
# (RBAC escalation check). Holding these three read verbs is narrower than the `escalate` verb.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
# spec.modelCache.fill: the shared fill Job is read, created once and patched (each serving adds
# itself to its ownerReferences); never deleted (the garbage collector does that with its last
# owner). The fill pod's log is read (tailLines) for its progress: the pod itself gets no API
# rights. The claim is read for its size (never written).
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "create", "patch"]
- apiGroups: [""]
  resources: ["pods/log"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get"]
# The vLLM router of each serving: its ServiceAccount, a Role granting it pods get/list/watch in
# the serving's namespace (discovery of the engines), the RoleBinding, and the NetworkPolicies
# fencing the engines (NIXL side channel and HTTP port). No `bind` or `escalate`: the operator
# holds every right the Role grants, which is what the API server checks instead.
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Events on DeepSeekServings: kopf.event() POSTs core/v1 Events (never events.k8s.io, never
# patches them); list reads a StatefulSet's FailedCreate Events (the pod refusal's text).
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "list"]
# kopf peering (HA) in namespaced mode: a KopfPeering per watched namespace.
- apiGroups: ["kopf.dev"]
  resources: ["kopfpeerings"]
  verbs: ["get", "list", "watch", "patch"]
{{- end -}}
