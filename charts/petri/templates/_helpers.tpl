{{/*
Labels of every object: the ones config/default gives (part-of) plus Helm's.
*/}}
{{- define "petri.labels" -}}
app.kubernetes.io/part-of: petri
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
An image reference from {repository, tag}; the tag defaults to appVersion.
Call with (list $image $).
*/}}
{{- define "petri.image" -}}
{{- $image := index . 0 -}}
{{- $root := index . 1 -}}
{{- printf "%s:%s" $image.repository (default $root.Chart.AppVersion $image.tag) -}}
{{- end }}

{{/*
The scheduling and pull settings of a pod. Call with (list $component $).
*/}}
{{- define "petri.podPlacement" -}}
{{- $c := index . 0 -}}
{{- $root := index . 1 -}}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
Objects of a file of files/ (a copy of config/, made by make generate), with
the chart's labels and namespaces. Call with (list $path $).
*/}}
{{- define "petri.fromConfig" -}}
{{- $path := index . 0 -}}
{{- $root := index . 1 -}}
{{- $text := $root.Files.Get $path | replace "petri-system" $root.Values.namespaces.management -}}
{{- $text = regexReplaceAll "(?m)namespace: petri-sync$" $text (printf "namespace: %s" $root.Values.namespaces.sync) -}}
{{- range $doc := regexSplit "(?m)^---\\s*$" $text -1 }}
{{- $obj := fromYaml $doc }}
{{- if $obj.kind }}
{{- $labels := merge (fromYaml (include "petri.labels" $root)) ($obj.metadata.labels | default dict) }}
{{- $_ := set $obj.metadata "labels" $labels }}
---
{{ toYaml $obj }}
{{- end }}
{{- end }}
{{- end }}
