{{/* Labels every object of the release carries; selectors use only the app.kubernetes.io/name
and component labels, which never change between versions (as in deploy/). */}}
{{- define "kpe.labels" -}}
app.kubernetes.io/part-of: kpe
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kpe.selector" -}}
app.kubernetes.io/name: kpe
app.kubernetes.io/component: server
{{- end -}}

{{- define "kpe.schedulerSelector" -}}
app.kubernetes.io/name: kpe-scheduler
app.kubernetes.io/component: scheduler
{{- end -}}

{{/* The namespaces no policy matches and the pod webhook skips: the control plane's and kpe's own. */}}
{{- define "kpe.excludedNamespaces" -}}
{{- $names := concat .Values.webhooks.excludedNamespaces (list .Release.Namespace) | uniq -}}
{{- toJson $names -}}
{{- end -}}

{{- define "kpe.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The controllers kpe runs: status too when the policies are objects (it writes their status). */}}
{{- define "kpe.controllers" -}}
{{- if eq .Values.policies.source "cluster" -}}gates,reservations,requeue,status{{- else -}}gates,reservations,requeue{{- end -}}
{{- end -}}

{{/* The ServiceAccount subject of kpe's bindings. */}}
{{- define "kpe.subject" -}}
- kind: ServiceAccount
  name: kpe
  namespace: {{ .Release.Namespace }}
{{- end -}}

{{/* certificates.source helm: a CA and the certificates it signs, made at install and read back
from the cluster on upgrades (lookup), so what kube-scheduler and the API server trust stays
valid. Worked out once per render and kept in .Values (the Secrets and the webhooks' caBundle
must agree). Values are base64, as Secret data. Rotating: delete the four Secrets, then upgrade. */}}
{{- define "kpe.generatedCertificates" -}}
{{- if not (hasKey .Values.certificates "generatedData") -}}
{{- $ns := .Release.Namespace -}}
{{- $found := dict -}}
{{- range $name := list "kpe-ca" "kpe-tls" "kpe-scheduler-client" "kpe-apiserver-client" -}}
{{- $secret := lookup "v1" "Secret" $ns $name -}}
{{- if and $secret $secret.data -}}{{- $_ := set $found $name $secret.data -}}{{- end -}}
{{- end -}}
{{- if eq (len $found) 4 -}}
{{- $_ := set .Values.certificates "generatedData" $found -}}
{{- else -}}
{{- $ca := genCA "kpe-ca" 3650 -}}
{{- $caData := dict "tls.crt" ($ca.Cert | b64enc) "tls.key" ($ca.Key | b64enc) "ca.crt" ($ca.Cert | b64enc) -}}
{{- $service := printf "kpe.%s.svc" $ns -}}
{{- $tls := genSignedCert $service nil (list $service (printf "%s.cluster.local" $service)) 3650 $ca -}}
{{- $scheduler := genSignedCert "kube-scheduler-to-kpe" nil nil 3650 $ca -}}
{{- $apiserver := genSignedCert "kube-apiserver-to-kpe" nil nil 3650 $ca -}}
{{- $made := dict "kpe-ca" $caData -}}
{{- $_ := set $made "kpe-tls" (dict "tls.crt" ($tls.Cert | b64enc) "tls.key" ($tls.Key | b64enc) "ca.crt" ($ca.Cert | b64enc)) -}}
{{- $_ := set $made "kpe-scheduler-client" (dict "tls.crt" ($scheduler.Cert | b64enc) "tls.key" ($scheduler.Key | b64enc) "ca.crt" ($ca.Cert | b64enc)) -}}
{{- $_ := set $made "kpe-apiserver-client" (dict "tls.crt" ($apiserver.Cert | b64enc) "tls.key" ($apiserver.Key | b64enc) "ca.crt" ($ca.Cert | b64enc)) -}}
{{- $_ := set .Values.certificates "generatedData" $made -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The webhooks' caBundle: the chart's CA, yours (certificates.caBundle), or none (cert-manager injects it). */}}
{{- define "kpe.caBundle" -}}
{{- if eq .Values.certificates.source "helm" -}}
{{- include "kpe.generatedCertificates" . -}}
{{- index .Values.certificates.generatedData "kpe-ca" "ca.crt" -}}
{{- else if eq .Values.certificates.source "existing" -}}
{{- .Values.certificates.caBundle -}}
{{- end -}}
{{- end -}}
