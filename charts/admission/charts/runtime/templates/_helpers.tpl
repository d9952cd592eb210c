{{/* Labels that select the admission pods; never change them (selectors are immutable). */}}
{{- define "admission.selectorLabels" -}}
app.kubernetes.io/name: {{ .Values.global.name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "admission.labels" -}}
{{ include "admission.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: admission
{{- end -}}

{{/* The image: as the seed chart resolves the controller image, from the same vector. */}}
{{- define "admission.image" -}}
{{- if .Values.image.ref -}}
{{- .Values.image.ref -}}
{{- else -}}
{{- $entry := dict -}}
{{- $vector := .Files.Get "images.yaml" | fromYaml -}}
{{- range ($vector.images | default list) -}}
{{- if eq .name "gardener-extension-containerd-shim" -}}
{{- $entry = . -}}
{{- end -}}
{{- end -}}
{{- $repository := .Values.image.repository | default $entry.repository -}}
{{- if not $repository -}}
{{- fail "no image: set image.repository or image.ref" -}}
{{- end -}}
{{- $tag := .Values.image.tag | default $entry.tag | default .Chart.AppVersion -}}
{{- if hasPrefix "sha256:" $tag -}}
{{- printf "%s@%s" $repository $tag -}}
{{- else -}}
{{- printf "%s:%s" $repository $tag -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The shim catalog overlay as YAML text (values give a map or a string), or "". */}}
{{- define "admission.catalogOverlay" -}}
{{- if kindIs "string" .Values.shimCatalog -}}
{{- .Values.shimCatalog -}}
{{- else if .Values.shimCatalog -}}
{{- toYaml .Values.shimCatalog -}}
{{- end -}}
{{- end -}}

{{/* The Secret with the serving certificate. */}}
{{- define "admission.tlsSecretName" -}}
{{- .Values.tls.secretName | default (printf "%s-tls" .Values.global.name) -}}
{{- end -}}
