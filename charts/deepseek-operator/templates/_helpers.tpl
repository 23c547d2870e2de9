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

{{/* The operator's ServiceAccount name. */}}
{{- define "deepseek-operator.serviceAccountName" -}}
{{- default (include "deepseek-operator.fullname" .) .Values.operator.serviceAccount.name -}}
{{- end -}}

{{/* The agent's ServiceAccount name. */}}
{{- define "deepseek-operator.agentServiceAccountName" -}}
{{- default (printf "%s-agent" (include "deepseek-operator.fullname" .)) .Values.agent.serviceAccount.name -}}
{{- end -}}
