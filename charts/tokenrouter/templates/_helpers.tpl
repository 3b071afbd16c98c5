{{/* The release's full name (63 characters at most). */}}
{{- define "tokenrouter.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object of the chart. */}}
{{- define "tokenrouter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/part-of: tokenrouter
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{ include "tokenrouter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* Labels that select the operator pod. */}}
{{- define "tokenrouter.selectorLabels" -}}
app.kubernetes.io/name: tokenrouter-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tokenrouter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "tokenrouter.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}
