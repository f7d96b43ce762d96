{{/* The MigrationRun of this release's revision: <release name>-<stage>-<revision> or <namePrefix>-<revision>, DNS-safe, <= 57
(so <name>-wait <= 63 for revisions up to 99999). */}}
{{- define "stagehand-migration.runName" -}}
{{- $prefix := printf "%s-%s" (.Release.Name | replace "." "-" | trunc 44 | trimSuffix "-") .Values.stage -}}
{{- with .Values.run.namePrefix -}}
{{- $prefix = . | lower | replace "_" "-" | replace "." "-" | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- printf "%s-%d" $prefix (int .Release.Revision) -}}
{{- end -}}

{{- define "stagehand-migration.stage" -}}
{{- if not (has .Values.stage (list "pre" "post")) -}}
{{- fail (printf "stage must be pre or post, not %q" (toString .Values.stage)) -}}
{{- end -}}
{{- .Values.stage -}}
{{- end -}}

{{- define "stagehand-migration.release" -}}
{{- required "release is required: the release being deployed, e.g. --set release=v1.18.0" .Values.release -}}
{{- end -}}

{{- define "stagehand-migration.labels" -}}
app.kubernetes.io/name: stagehand-migration
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
stagehand.dev/stage: {{ include "stagehand-migration.stage" . }}
{{- end -}}

{{- define "stagehand-migration.waitName" -}}
{{- printf "%s-wait" (include "stagehand-migration.runName" . | trunc 58 | trimSuffix "-") -}}
{{- end -}}
