{{- define "capabilities.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "capabilities.minAvailable" -}}
{{ required "minAvailable is required" .Values.minAvailable }}
{{- end }}
