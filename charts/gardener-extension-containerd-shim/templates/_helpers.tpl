{{/* Name of the namespaced objects of the controller. */}}
{{- define "containerd-shim.name" -}}
gardener-extension-containerd-shim
{{- end -}}

{{/* Name of the cluster-scoped objects, following Gardener's naming scheme for extensions. */}}
{{- define "containerd-shim.clusterName" -}}
extensions.gardener.cloud:extension-containerd-shim
{{- end -}}

{{/* Labels that select the controller's pods; never change them (selectors are immutable). */}}
{{- define "containerd-shim.selectorLabels" -}}
app.kubernetes.io/name: {{ include "containerd-shim.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "containerd-shim.labels" -}}
{{ include "containerd-shim.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Name of the leader-election Lease: the binary's default unless values name another. */}}
{{- define "containerd-shim.leaderElectionID" -}}
{{- .Values.leaderElection.id | default "containerd-shim-leader-election" -}}
{{- end -}}

{{/*
The controller image: `image.ref`, else repository and tag from values, each defaulting to the
image vector's entry `gardener-extension-containerd-shim` (images.yaml) and, for the tag, the
chart's appVersion. A tag `sha256:...` is a digest, as in Gardener's image vectors.
*/}}
{{- define "containerd-shim.image" -}}
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
{{- if and (not .Values.image.repository) (not .Values.image.tag) $entry.ref -}}
{{- $entry.ref -}}
{{- else -}}
{{- $repository := .Values.image.repository | default $entry.repository -}}
{{- if not $repository -}}
{{- fail "no controller image: set image.repository or image.ref (images.yaml has no entry gardener-extension-containerd-shim)" -}}
{{- end -}}
{{- $tag := .Values.image.tag | default $entry.tag | default .Chart.AppVersion -}}
{{- if hasPrefix "sha256:" $tag -}}
{{- printf "%s@%s" $repository $tag -}}
{{- else -}}
{{- printf "%s:%s" $repository $tag -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The shim catalog overlay as YAML text (values give a map or a string), or "". */}}
{{- define "containerd-shim.catalogOverlay" -}}
{{- if kindIs "string" .Values.shimCatalog -}}
{{- .Values.shimCatalog -}}
{{- else if .Values.shimCatalog -}}
{{- toYaml .Values.shimCatalog -}}
{{- end -}}
{{- end -}}

{{/* Priority class: the runtime cluster's when Gardener deploys there, else the seed's. */}}
{{- define "containerd-shim.priorityClassName" -}}
{{- if ((.Values.gardener).runtimeCluster).enabled -}}
{{- .Values.gardener.runtimeCluster.priorityClassName | default "gardener-system-900" -}}
{{- else -}}
gardener-system-900
{{- end -}}
{{- end -}}
