{{/* The release's full name (<release>-stagehand, or <release> when it already holds "stagehand"). */}}
{{- define "stagehand.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "stagehand.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{ include "stagehand.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "stagehand.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "stagehand.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "stagehand.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The namespace the operator watches; "*" for all namespaces. */}}
{{- define "stagehand.watchNamespace" -}}
{{- default .Release.Namespace .Values.watchNamespace -}}
{{- end -}}

{{/* "true" when the install is cluster-wide (watchNamespace "*"), else "". */}}
{{- define "stagehand.clusterWide" -}}
{{- if eq (include "stagehand.watchNamespace" .) "*" -}}true{{- end -}}
{{- end -}}

{{/* listenAddress with a port (the `port` key): an IPv6 address goes in brackets. */}}
{{- define "stagehand.listen" -}}
{{- if contains ":" .host -}}[{{ .host }}]:{{ .port }}{{- else -}}{{ .host }}:{{ .port }}{{- end -}}
{{- end -}}
