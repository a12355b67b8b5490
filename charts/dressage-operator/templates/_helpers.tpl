{{/* Chart name, truncated to a DNS label. */}}
{{- define "dressage-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full resource name prefix: release name + chart name unless one contains the other. */}}
{{- define "dressage-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "dressage-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object of the release. */}}
{{- define "dressage-operator.labels" -}}
helm.sh/chart: {{ include "dressage-operator.chart" . }}
{{ include "dressage-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: dressage
{{- end }}

{{/* Labels that select the operator pod (stable across upgrades). */}}
{{- define "dressage-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dressage-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "dressage-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "dressage-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The one namespace the operator watches in single-namespace mode. */}}
{{- define "dressage-operator.watchNamespace" -}}
{{- default .Release.Namespace .Values.watchNamespace }}
{{- end }}

{{- define "dressage-operator.metricsServiceName" -}}
{{- printf "%s-metrics" (include "dressage-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* repository:tag with the tag defaulting to the chart's appVersion. `global.imageRegistry`,
when set, replaces everything before the repository's last path part
(`ghcr.io/dressage/dressage-runtime` -> `<registry>/dressage-runtime`): the `--registry` that
scripts/build-images.sh pushed the images to. */}}
{{- define "dressage-operator.imageRef" -}}
{{- $tag := default .root.Chart.AppVersion .image.tag }}
{{- $repository := .image.repository }}
{{- $registry := (.root.Values.global | default dict).imageRegistry | default "" | trimSuffix "/" }}
{{- if $registry }}
{{- $repository = printf "%s/%s" $registry (base $repository) }}
{{- end }}
{{- printf "%s:%s" $repository $tag }}
{{- end }}

{{/* PromQL matchers of the operator's scrape target in `up`. */}}
{{- define "dressage-operator.operatorTargetSelector" -}}
{{- if .Values.prometheusRule.operatorTargetSelector }}
{{- .Values.prometheusRule.operatorTargetSelector }}
{{- else }}
{{- printf "job=%q, namespace=%q" (include "dressage-operator.metricsServiceName" .) .Release.Namespace }}
{{- end }}
{{- end }}
