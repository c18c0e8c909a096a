{{/* Names ------------------------------------------------------------------------------ */}}

{{- define "hedwig.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* "<release>-<chart>", or the release name when it already holds the chart name. */}}
{{- define "hedwig.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "hedwig.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "hedwig.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels: call with (dict "ctx" $ "component" "operator"). ------------------------------ */}}

{{- define "hedwig.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hedwig.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "hedwig.labels" -}}
{{ include "hedwig.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: hedwig
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
helm.sh/chart: {{ include "hedwig.chart" .ctx }}
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Images: call with (dict "image" .Values.x.image "ctx" $). ---------------------------- */}}

{{- define "hedwig.image" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The operator -------------------------------------------------------------------------- */}}

{{- define "hedwig.operator.fullname" -}}
{{- printf "%s-operator" (include "hedwig.fullname" .) -}}
{{- end -}}

{{- define "hedwig.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create -}}
{{- default (include "hedwig.operator.fullname" .) .Values.operator.serviceAccount.name -}}
{{- else -}}
{{- required "operator.serviceAccount.name is required when operator.serviceAccount.create is false" .Values.operator.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* ClusterRoles are cluster-wide: the namespace keeps two releases of one name apart. */}}
{{- define "hedwig.operator.clusterRoleName" -}}
{{- printf "%s-%s" .Release.Namespace (include "hedwig.operator.fullname" .) -}}
{{- end -}}

{{/* The namespaces the operator watches (a list; empty means every namespace). */}}
{{- define "hedwig.operator.namespaces" -}}
{{- if .Values.operator.watchAllNamespaces -}}
[]
{{- else if .Values.operator.watchNamespaces -}}
{{- toJson (uniq .Values.operator.watchNamespaces) -}}
{{- else -}}
{{- toJson (list .Release.Namespace) -}}
{{- end -}}
{{- end -}}

{{/* ZooKeeper ----------------------------------------------------------------------------- */}}

{{- define "hedwig.zookeeper.fullname" -}}
{{- printf "%s-zookeeper" (include "hedwig.fullname" .) -}}
{{- end -}}

{{- define "hedwig.zookeeper.headless" -}}
{{- printf "%s-zookeeper-headless" (include "hedwig.fullname" .) -}}
{{- end -}}

{{/* The connection string: every server of the chart's ensemble, or the external one. */}}
{{- define "hedwig.zookeeper.connect" -}}
{{- if .Values.zookeeper.enabled -}}
{{- $servers := list -}}
{{- range $i := until (int .Values.zookeeper.replicas) -}}
{{- $servers = append $servers (printf "%s-%d.%s.%s.svc.%s:2181" (include "hedwig.zookeeper.fullname" $) $i (include "hedwig.zookeeper.headless" $) $.Release.Namespace $.Values.clusterDomain) -}}
{{- end -}}
{{- join "," $servers -}}
{{- else -}}
{{- required "zookeeper.external.connect is required when zookeeper.enabled is false" .Values.zookeeper.external.connect -}}
{{- end -}}
{{- end -}}

{{/* The default HubPool ------------------------------------------------------------------- */}}

{{- define "hedwig.hubPool.name" -}}
{{- default (include "hedwig.fullname" .) .Values.hubPool.name -}}
{{- end -}}

{{/* Hub pods: labels the operator puts on every pool's pods (operator/hedwig_operator/builders/labels.py). */}}
{{- define "hedwig.hub.podSelector" -}}
app.kubernetes.io/name: hedwig-hub
app.kubernetes.io/part-of: hedwig
{{- end -}}

{{/* NetworkPolicy peers: an empty list allows everyone. */}}
{{- define "hedwig.networkPolicy.from" -}}
{{- if . }}
from:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "hedwig.zookeeper.admin" -}}
{{- printf "%s-zookeeper-admin" (include "hedwig.fullname" .) -}}
{{- end -}}

{{/* The external metrics API ---------------------------------------------------------------- */}}

{{- define "hedwig.metricsApi.fullname" -}}
{{- printf "%s-metrics-api" (include "hedwig.fullname" .) -}}
{{- end -}}

{{- define "hedwig.metricsApi.serviceAccountName" -}}
{{- if .Values.metricsApi.serviceAccount.create -}}
{{- default (include "hedwig.metricsApi.fullname" .) .Values.metricsApi.serviceAccount.name -}}
{{- else -}}
{{- required "metricsApi.serviceAccount.name is required when metricsApi.serviceAccount.create is false" .Values.metricsApi.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Cluster-wide names: the namespace keeps two releases of one name apart. */}}
{{- define "hedwig.metricsApi.clusterName" -}}
{{- printf "%s-%s" .Release.Namespace (include "hedwig.metricsApi.fullname" .) -}}
{{- end -}}

{{- define "hedwig.metricsApi.pool" -}}
{{- default (include "hedwig.hubPool.name" .) .Values.metricsApi.pool -}}
{{- end -}}

{{- define "hedwig.metricsApi.hubs" -}}
{{- if .Values.metricsApi.hubs -}}
{{- .Values.metricsApi.hubs -}}
{{- else if .Values.hubPool.enabled -}}
{{- printf "%s.%s.svc:4080" (include "hedwig.hubPool.name" .) .Release.Namespace -}}
{{- else -}}
{{- fail "metricsApi.hubs is required when hubPool.enabled is false" -}}
{{- end -}}
{{- end -}}

{{/* Whether the hubs it reads are secured (the chart's pool's setting). */}}
{{- define "hedwig.metricsApi.secured" -}}
{{- if .Values.hubPool.security.enabled -}}true{{- end -}}
{{- end -}}
