{{/*
conductor.name is the chart name, or nameOverride.
*/}}
{{- define "conductor.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
conductor.fullname is the base name of every object: fullnameOverride, else
the release name when it contains the chart name, else release-chart. It is
cut to 52 characters so that suffixes such as "-headless" keep names within
the 63 characters of a DNS label.
*/}}
{{- define "conductor.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
conductor.chart is the helm.sh/chart label value.
*/}}
{{- define "conductor.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
conductor.labels are the labels of every object; pass a dict with the root
context as "root" and the component ("indexer", "replica", ...).
*/}}
{{- define "conductor.labels" -}}
helm.sh/chart: {{ include "conductor.chart" .root }}
{{ include "conductor.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Values.image.tag | default .root.Chart.AppVersion | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end }}

{{/*
conductor.selectorLabels select the pods of one component.
*/}}
{{- define "conductor.selectorLabels" -}}
app.kubernetes.io/name: {{ include "conductor.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
conductor.image is the container image reference.
*/}}
{{- define "conductor.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
conductor.validate stops the render on settings conductor would refuse or
that contradict each other; every workload template includes it.
*/}}
{{- define "conductor.validate" -}}
{{- if and (not .Values.auth.existingSecret) (not .Values.insecure) }}
{{- fail "conductor serves beyond loopback only with an admin token: set auth.existingSecret to a Secret holding an admin-token key (see values.yaml), or set insecure=true to serve every endpoint open" }}
{{- end }}
{{- if and .Values.metrics.protect (not .Values.auth.existingSecret) }}
{{- fail "metrics.protect needs auth.existingSecret: /metrics is then behind the admin token" }}
{{- end }}
{{- if and .Values.nats.enabled (not .Values.nats.url) }}
{{- fail "nats.enabled needs nats.url, the address of an existing NATS server with JetStream" }}
{{- end }}
{{- if and .Values.nats.enabled .Values.nats.replica.autoscaling.enabled (gt (int .Values.nats.replica.autoscaling.minReplicas) (int .Values.nats.replica.autoscaling.maxReplicas)) }}
{{- fail "nats.replica.autoscaling.minReplicas exceeds maxReplicas" }}
{{- end }}
{{- include "conductor.checkMemoryLimit" (list "memoryLimit" .Values.memoryLimit "resources.limits.memory" ((.Values.resources | default dict).limits | default dict).memory) }}
{{- if .Values.nats.enabled }}
{{- include "conductor.checkMemoryLimit" (list "nats.replica.memoryLimit" .Values.nats.replica.memoryLimit "nats.replica.resources.limits.memory" ((.Values.nats.replica.resources | default dict).limits | default dict).memory) }}
{{- end }}
{{- end }}

{{/*
conductor.checkMemoryLimit stops the render when a --memory-limit (list:
its value name, its value, the container limit's name, the limit) is above
the container's memory limit: the Go runtime would let the heap grow past
what the kernel allows, and the pod would be killed before the runtime
collected harder. A limit of "" or "0", or no container limit, is no check.
*/}}
{{- define "conductor.checkMemoryLimit" -}}
{{- $name := index . 0 }}{{ $val := index . 1 }}{{ $limitName := index . 2 }}{{ $limit := index . 3 }}
{{- if and $val $limit }}
{{- $soft := float64 (include "conductor.goBytes" $val) }}
{{- $hard := float64 (include "conductor.quantityBytes" $limit) }}
{{- if gt $soft $hard }}
{{- fail (printf "%s %v is above %s %v: the Go runtime would let the heap grow past the container's memory limit, and the kernel would kill the pod first; set %s below it (about 90%% of it)" $name $val $limitName $limit $name) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
conductor.goBytes is a --memory-limit value (a number with B, K/KB/KiB,
M/MB/MiB, G/GB/GiB or T/TB/TiB, in any case, each a power of 1024, as
conductor and GOMEMLIMIT read them) in bytes.
*/}}
{{- define "conductor.goBytes" -}}
{{- $s := lower (toString .) }}
{{- $num := regexFind "^[0-9]+" $s }}
{{- $unit := trimPrefix $num $s }}
{{- $k := 1024.0 }}
{{- $mult := dict "" 1.0 "b" 1.0 "k" $k "kb" $k "kib" $k "m" (mulf $k $k) "mb" (mulf $k $k) "mib" (mulf $k $k) "g" (mulf $k $k $k) "gb" (mulf $k $k $k) "gib" (mulf $k $k $k) "t" (mulf $k $k $k $k) "tb" (mulf $k $k $k $k) "tib" (mulf $k $k $k $k) }}
{{- mulf (float64 $num) (get $mult $unit) }}
{{- end }}

{{/*
conductor.quantityBytes is a Kubernetes memory quantity (4Gi, 4G, 4096Mi,
1.5Gi, a plain number of bytes) in bytes.
*/}}
{{- define "conductor.quantityBytes" -}}
{{- if not (kindIs "string" .) }}
{{- float64 . }}
{{- else }}
{{- $s := . }}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?" $s }}
{{- $unit := trimPrefix $num $s }}
{{- $k := 1024.0 }}
{{- $mult := dict "" 1.0 "m" 0.001 "k" 1000.0 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 "Ki" $k "Mi" (mulf $k $k) "Gi" (mulf $k $k $k) "Ti" (mulf $k $k $k $k) "Pi" (mulf $k $k $k $k $k) "Ei" (mulf $k $k $k $k $k $k) }}
{{- mulf (float64 $num) (get $mult $unit) }}
{{- end }}
{{- end }}

{{/*
conductor.discoveryNamespaces is the list of namespaces discovery watches
(the release namespace unless discovery.namespaces names some).
*/}}
{{- define "conductor.discoveryNamespaces" -}}
{{- if .Values.discovery.namespaces }}
{{- join "," .Values.discovery.namespaces }}
{{- else }}
{{- .Release.Namespace }}
{{- end }}
{{- end }}

{{/*
conductor.commonArgs are the arguments the indexer and the replicas share:
listeners, configuration, logging, access control and the NATS stream.
*/}}
{{- define "conductor.commonArgs" -}}
- --listen=0.0.0.0
- --http-port={{ .Values.ports.http }}
- --rpc-port={{ .Values.ports.rpc }}
- --config=/etc/conductor/config.json
- --log-format=json
- --log-level={{ .Values.logLevel }}
{{- if .Values.dynamo.enabled }}
- --dynamo-port={{ .Values.dynamo.port }}
{{- end }}
{{- with .Values.auth.existingSecret }}
- --admin-token-file=/var/run/secrets/conductor/{{ $.Values.auth.adminTokenKey }}
{{- with $.Values.auth.queryTokenKey }}
- --query-token-file=/var/run/secrets/conductor/{{ . }}
{{- end }}
{{- with $.Values.auth.clientTokensKey }}
- --client-tokens-file=/var/run/secrets/conductor/{{ . }}
{{- end }}
{{- end }}
{{- if .Values.insecure }}
- --insecure
{{- end }}
{{- if .Values.metrics.protect }}
- --protect-metrics
{{- end }}
{{- with .Values.allowEndpoints }}
- {{ printf "--allow-endpoints=%s" . | quote }}
{{- end }}
{{- if .Values.nats.enabled }}
- {{ printf "--nats-url=%s" .Values.nats.url | quote }}
- --nats-stream={{ .Values.nats.stream }}
- --nats-subject-prefix={{ .Values.nats.subjectPrefix }}
{{- end }}
{{- end }}

{{/*
conductor.ports are the container ports of a conductor container.
*/}}
{{- define "conductor.ports" -}}
- name: http
  containerPort: {{ .Values.ports.http }}
  protocol: TCP
- name: rpc
  containerPort: {{ .Values.ports.rpc }}
  protocol: TCP
{{- if .Values.dynamo.enabled }}
- name: dynamo
  containerPort: {{ .Values.dynamo.port }}
  protocol: TCP
{{- end }}
{{- end }}

{{/*
conductor.servicePorts are the ports of a Service in front of conductor pods.
*/}}
{{- define "conductor.servicePorts" -}}
- name: http
  port: {{ .Values.ports.http }}
  targetPort: http
  protocol: TCP
- name: rpc
  port: {{ .Values.ports.rpc }}
  targetPort: rpc
  protocol: TCP
{{- if .Values.dynamo.enabled }}
- name: dynamo
  port: {{ .Values.dynamo.port }}
  targetPort: dynamo
  protocol: TCP
{{- end }}
{{- end }}

{{/*
conductor.probes are the readiness, liveness and startup probes.
*/}}
{{- define "conductor.probes" -}}
readinessProbe:
  httpGet:
    path: /health
    port: http
  periodSeconds: {{ .Values.probes.readiness.periodSeconds }}
  timeoutSeconds: {{ .Values.probes.readiness.timeoutSeconds }}
  failureThreshold: {{ .Values.probes.readiness.failureThreshold }}
livenessProbe:
  httpGet:
    path: /livez
    port: http
  periodSeconds: {{ .Values.probes.liveness.periodSeconds }}
  timeoutSeconds: {{ .Values.probes.liveness.timeoutSeconds }}
  failureThreshold: {{ .Values.probes.liveness.failureThreshold }}
startupProbe:
  httpGet:
    path: /livez
    port: http
  periodSeconds: {{ .Values.probes.startup.periodSeconds }}
  timeoutSeconds: {{ .Values.probes.startup.timeoutSeconds }}
  failureThreshold: {{ .Values.probes.startup.failureThreshold }}
{{- end }}

{{/*
conductor.volumeMounts are the mounts every conductor container has: the
configuration, the tokens and /tmp.
*/}}
{{- define "conductor.volumeMounts" -}}
- name: config
  mountPath: /etc/conductor
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- if .Values.auth.existingSecret }}
- name: tokens
  mountPath: /var/run/secrets/conductor
  readOnly: true
{{- end }}
{{- end }}

{{/*
conductor.volumes are the pod volumes behind conductor.volumeMounts. The
Secret volume names only the keys in use, so a missing key stops the pod at
mount time with an event naming it.
*/}}
{{- define "conductor.volumes" -}}
- name: config
  configMap:
    name: {{ include "conductor.fullname" . }}-config
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- with .Values.auth.existingSecret }}
- name: tokens
  secret:
    secretName: {{ . }}
    defaultMode: 288 # 0440: readable by the pod's group (fsGroup)
    items:
      - key: {{ $.Values.auth.adminTokenKey }}
        path: {{ $.Values.auth.adminTokenKey }}
      {{- with $.Values.auth.queryTokenKey }}
      - key: {{ . }}
        path: {{ . }}
      {{- end }}
      {{- with $.Values.auth.clientTokensKey }}
      - key: {{ . }}
        path: {{ . }}
      {{- end }}
{{- end }}
{{- end }}

{{/*
conductor.podSpecCommon is the part of a pod spec the indexer and the
replicas share (everything but the containers and the volumes).
*/}}
{{- define "conductor.podSpecCommon" -}}
serviceAccountName: {{ include "conductor.fullname" . }}
terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
conductor.podMetadata is a pod template's metadata; pass a dict with "root"
and "component".
*/}}
{{- define "conductor.podMetadata" -}}
labels:
  {{- include "conductor.labels" . | nindent 2 }}
  {{- with .root.Values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
annotations:
  checksum/config: {{ include (print .root.Template.BasePath "/configmap.yaml") .root | sha256sum }}
  {{- with .root.Values.podAnnotations }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
