{{/* Every object's name, as serving.manifests.object_name makes it (values.schema.json keeps it a DNS-1035 label). */}}
{{- define "ernie-bundle.name" -}}
{{- printf "ernie-bundle-%s" .Values.task | replace "_" "-" | lower -}}
{{- end -}}

{{- define "ernie-bundle.labels" -}}
app.kubernetes.io/name: {{ include "ernie-bundle.name" . }}
app.kubernetes.io/part-of: ernie-bundle
{{- end -}}

{{- define "ernie-bundle.metadata" -}}
name: {{ include "ernie-bundle.name" . }}
namespace: {{ .Values.namespace | default .Release.Namespace }}
labels:
  {{- include "ernie-bundle.labels" . | nindent 2 }}
{{- end -}}

{{/* request = limit: Guaranteed QoS. Quoted: a --set number stays a quantity string. */}}
{{- define "ernie-bundle.resources" -}}
requests:
  cpu: {{ .Values.resources.cpu | quote }}
  memory: {{ .Values.resources.memory | quote }}
limits:
  cpu: {{ .Values.resources.cpu | quote }}
  memory: {{ .Values.resources.memory | quote }}
{{- end -}}

{{/* A cross-field rule the values schema cannot say. */}}
{{- define "ernie-bundle.checked" -}}
{{- if gt (int .Values.replicas.min) (int .Values.replicas.max) -}}
{{- fail (printf "replicas: min %v is larger than max %v" .Values.replicas.min .Values.replicas.max) -}}
{{- end -}}
{{- end -}}

{{/* The image's entrypoint (Dockerfile) and the server arguments every container passes it. */}}
{{- define "ernie-bundle.start" -}}
- python3
- /opt/ernie-bundle/start.py
{{- end -}}

{{- define "ernie-bundle.serverArgs" -}}
- --model-control-mode=none
- --strict-readiness=true
- --exit-on-error=true
{{- end -}}

{{- define "ernie-bundle.image" -}}
{{ .Values.image | default (printf "ernie-bundle-%s:latest" .Values.task) | quote }}
{{- end -}}
