{{/* Chart name, at most 63 characters. */}}
{{- define "docflash.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's resources; component suffixes are added to it, so it keeps room for them. */}}
{{- define "docflash.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Name of one component's resources: (dict "root" $ "component" "api"). */}}
{{- define "docflash.componentName" -}}
{{- printf "%s-%s" (include "docflash.fullname" .root) .component | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "docflash.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the release's pods. */}}
{{- define "docflash.selectorLabels" -}}
app.kubernetes.io/name: {{ include "docflash.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels on every resource. */}}
{{- define "docflash.labels" -}}
helm.sh/chart: {{ include "docflash.chart" . }}
{{ include "docflash.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: docflash
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels of one component's resources: (dict "root" $ "component" "api"). */}}
{{- define "docflash.componentLabels" -}}
{{ include "docflash.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Selector labels of one component's pods: (dict "root" $ "component" "api"). */}}
{{- define "docflash.componentSelectorLabels" -}}
{{ include "docflash.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "docflash.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "docflash.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Image reference of `images.<component>`: (dict "root" $ "image" .Values.images.api). */}}
{{- define "docflash.image" -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) }}
{{- end }}

{{/* Name of the Secret with the application's secrets. */}}
{{- define "docflash.secretName" -}}
{{- default (include "docflash.componentName" (dict "root" . "component" "secrets")) .Values.secrets.existingSecret }}
{{- end }}

{{/* Name of the Secret with Flower's basic-auth entry. */}}
{{- define "docflash.flowerSecretName" -}}
{{- default (include "docflash.componentName" (dict "root" . "component" "flower")) .Values.flower.auth.existingSecret }}
{{- end }}

{{/* Whether the KEDA ScaledObject is rendered: "true" or "". */}}
{{- define "docflash.kedaEnabled" -}}
{{- $setting := .Values.worker.autoscaling.keda.enabled }}
{{- if eq (toString $setting) "auto" }}
{{- if .Capabilities.APIVersions.Has "keda.sh/v1alpha1/ScaledObject" }}true{{ end }}
{{- else if $setting }}true{{ end }}
{{- end }}

{{/* Whether the ServiceMonitor is rendered: "true" or "". */}}
{{- define "docflash.serviceMonitorEnabled" -}}
{{- $setting := .Values.monitoring.serviceMonitor.enabled }}
{{- if eq (toString $setting) "auto" }}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor" }}true{{ end }}
{{- else if $setting }}true{{ end }}
{{- end }}

{{/* The Redis endpoint as a dict: host (host:port), db, tls (bool), passwordSecret ({name, key}). */}}
{{- define "docflash.redis" -}}
{{- if .Values.redis.enabled }}
{{- $host := printf "%s.%s.svc:6379" (include "docflash.componentName" (dict "root" . "component" "redis")) .Release.Namespace }}
{{- toYaml (dict "host" $host "db" "0" "tls" false "passwordSecret" (dict "name" "" "key" "")) }}
{{- else }}
{{- $url := urlParse .Values.redis.external.url }}
{{- $db := trimPrefix "/" $url.path | default "0" }}
{{- toYaml (dict "host" $url.host "db" $db "tls" (eq $url.scheme "rediss") "passwordSecret" .Values.redis.external.passwordSecret) }}
{{- end }}
{{- end }}

{{/* Env entries for the Redis URL; with a password, it is read from its Secret and spliced in by the kubelet. */}}
{{- define "docflash.redisEnv" -}}
{{- $redis := include "docflash.redis" . | fromYaml }}
{{- $scheme := ternary "rediss" "redis" $redis.tls }}
{{- /* Celery's Redis result backend refuses a rediss:// URL that does not say how to check certificates. */}}
{{- $query := ternary "?ssl_cert_reqs=required" "" $redis.tls }}
{{- if $redis.passwordSecret.name }}
- name: DOCFLASH_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $redis.passwordSecret.name }}
      key: {{ $redis.passwordSecret.key }}
- name: DOCFLASH_REDIS_URL
  value: {{ printf "%s://:$(DOCFLASH_REDIS_PASSWORD)@%s/%s%s" $scheme $redis.host $redis.db $query | quote }}
{{- else }}
- name: DOCFLASH_REDIS_URL
  value: {{ printf "%s://%s/%s%s" $scheme $redis.host $redis.db $query | quote }}
{{- end }}
{{- end }}

{{/* Env entries every docflash container gets: S3 credentials (optional: absent keys mean the IAM role) and Redis. */}}
{{- define "docflash.commonEnv" -}}
- name: DOCFLASH_S3_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ include "docflash.secretName" . }}
      key: s3-access-key-id
      optional: true
- name: DOCFLASH_S3_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "docflash.secretName" . }}
      key: s3-secret-access-key
      optional: true
{{ include "docflash.redisEnv" . | trim }}
{{- end }}

{{/* envFrom of every docflash container. */}}
{{- define "docflash.envFrom" -}}
- configMapRef:
    name: {{ include "docflash.componentName" (dict "root" . "component" "config") }}
{{- end }}

{{/* Pod annotations that roll the pods when the configuration or the chart's secrets change. */}}
{{- define "docflash.checksums" -}}
checksum/config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
checksum/secrets: {{ include (print .Template.BasePath "/secrets.yaml") . | sha256sum }}
{{- end }}

{{/* prometheus.io scrape annotations for a pod serving /metrics on `port`: (dict "root" $ "port" 8000). */}}
{{- define "docflash.scrapeAnnotations" -}}
{{- if .root.Values.monitoring.scrapeAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end }}

{{/* Checks across values that the schema cannot express; fails the render with the value's name. */}}
{{- define "docflash.validate" -}}
{{- $c := .Values.config }}
{{- if ge (int $c.taskSoftTimeLimit) (int $c.taskHardTimeLimit) }}
{{- fail "config.taskSoftTimeLimit must be below config.taskHardTimeLimit" }}
{{- end }}
{{- if le (int $c.brokerVisibilityTimeout) (int $c.taskHardTimeLimit) }}
{{- fail "config.brokerVisibilityTimeout must exceed config.taskHardTimeLimit, or long documents run twice" }}
{{- end }}
{{- if le (int .Values.worker.terminationGracePeriodSeconds) (int $c.taskHardTimeLimit) }}
{{- fail "worker.terminationGracePeriodSeconds must exceed config.taskHardTimeLimit, or stopping workers cut documents" }}
{{- end }}
{{- $keda := .Values.worker.autoscaling.keda }}
{{- if lt (int $keda.scaleDownStabilizationSeconds) (min (int $c.taskHardTimeLimit) 3600) }}
{{- fail "worker.autoscaling.keda.scaleDownStabilizationSeconds must be at least config.taskHardTimeLimit (or 3600, the most Kubernetes allows)" }}
{{- end }}
{{- if lt (int $keda.cooldownPeriod) (int $c.taskHardTimeLimit) }}
{{- fail "worker.autoscaling.keda.cooldownPeriod must be at least config.taskHardTimeLimit" }}
{{- end }}
{{- if gt (int $keda.minReplicas) (int $keda.maxReplicas) }}
{{- fail "worker.autoscaling.keda.minReplicas must not exceed worker.autoscaling.keda.maxReplicas" }}
{{- end }}
{{- if gt (int .Values.api.autoscaling.minReplicas) (int .Values.api.autoscaling.maxReplicas) }}
{{- fail "api.autoscaling.minReplicas must not exceed api.autoscaling.maxReplicas" }}
{{- end }}
{{- if and .Values.watcher.enabled (not $c.watch.uri) }}
{{- fail "config.watch.uri must be set when watcher.enabled is true" }}
{{- end }}
{{- if and .Values.secrets.existingSecret (or .Values.secrets.apiKeys .Values.secrets.s3AccessKeyId .Values.secrets.s3SecretAccessKey) }}
{{- fail "secrets.existingSecret is set: leave secrets.apiKeys, secrets.s3AccessKeyId and secrets.s3SecretAccessKey empty" }}
{{- end }}
{{- if ne (empty .Values.secrets.s3AccessKeyId) (empty .Values.secrets.s3SecretAccessKey) }}
{{- fail "secrets.s3AccessKeyId and secrets.s3SecretAccessKey must be set together (or both left empty for IRSA)" }}
{{- end }}
{{- end }}
