{{- define "hooks.name" -}}
{{ .Release.Name }}-{{ .Chart.Name }}
{{- end -}}
{{- define "hooks.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}
