{{/* Labels on every object's metadata (not on pod templates or selectors, which stay as in
deploy/): what the kustomization adds (part-of) and Helm's own. */}}
{{- define "gpupool.labels" -}}
app.kubernetes.io/part-of: gpupool
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* The image both workloads run: repository:tag, or repository@digest when a digest is set. */}}
{{- define "gpupool.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/* Where `--path` reads policy (configMap and directory sources). */}}
{{- define "gpupool.policyPath" -}}
{{- if eq .Values.source.type "configMap" -}}
/etc/gpupool/policy
{{- else -}}
{{ .Values.source.directory.path }}
{{- end -}}
{{- end }}

{{/* Values that do not hold together, refused with one line each (values.schema.json checks
each value on its own). */}}
{{- define "gpupool.checks" -}}
{{- if and .Values.kueue.enabled .Values.admissionGate.namespaces -}}
{{- fail "admissionGate.namespaces: in Kueue mode (kueue.enabled) Kueue admits training; gating a namespace as well makes every training pod there a kueue-gated-training finding. Leave admissionGate.namespaces empty." -}}
{{- end -}}
{{- if and (eq .Values.source.type "git") (not .Values.source.git.url) (not .Values.source.git.urlSecret.name) -}}
{{- fail "source.git.url: empty; give the policy repository's URL (or source.git.urlSecret), or set source.type to configMap or directory" -}}
{{- end -}}
{{- if and (eq .Values.source.type "configMap") (not .Values.source.configMap.files) -}}
{{- fail "source.configMap.files: empty; with source.type=configMap give the policy files (name.yaml: text)" -}}
{{- end -}}
{{- if and .Values.source.git.credentials.create (not .Values.source.git.credentials.sshPrivateKey) -}}
{{- fail "source.git.credentials.sshPrivateKey: empty while source.git.credentials.create is true" -}}
{{- end -}}
{{- if and .Values.controller.webhook.enabled (ne .Values.source.type "git") -}}
{{- fail "controller.webhook.enabled: the push webhook needs source.type=git" -}}
{{- end -}}
{{- end }}
