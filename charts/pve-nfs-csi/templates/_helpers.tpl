{{/* Names, labels and the small pieces several templates share. */}}

{{- define "pve-nfs-csi.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "pve-nfs-csi.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "pve-nfs-csi.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "pve-nfs-csi.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component: call with (dict "root" $ "component" "controller"). */}}
{{- define "pve-nfs-csi.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pve-nfs-csi.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "pve-nfs-csi.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* repository:tag of a sidecar image value. */}}
{{- define "pve-nfs-csi.sidecarImage" -}}
{{- printf "%s:%s" .repository .tag -}}
{{- end -}}

{{- define "pve-nfs-csi.controllerServiceAccount" -}}
{{- printf "%s-controller" (include "pve-nfs-csi.fullname" .) -}}
{{- end -}}

{{- define "pve-nfs-csi.nodeServiceAccount" -}}
{{- printf "%s-node" (include "pve-nfs-csi.fullname" .) -}}
{{- end -}}

{{/* Driver names are compatibility contracts (PVs, VolumeAttachments and StorageClasses name them), not settings. */}}
{{- define "pve-nfs-csi.proxmoxDriver" -}}csi.proxmox.sinextra.dev{{- end -}}
{{- define "pve-nfs-csi.nfsDriver" -}}nfs.csi.k8s.io{{- end -}}

{{/* "true" when the chart renders the Proxmox config Secret itself: clusters listed inline in
proxmox.config win over existingConfigSecret, whose default names the upstream chart's Secret (so
inline config works without also blanking existingConfigSecret). */}}
{{- define "pve-nfs-csi.proxmoxInlineConfig" -}}
{{- if or .Values.proxmox.config.clusters (not .Values.proxmox.existingConfigSecret) -}}true{{- end -}}
{{- end -}}

{{- define "pve-nfs-csi.proxmoxConfigSecret" -}}
{{- if include "pve-nfs-csi.proxmoxInlineConfig" . -}}
{{- printf "%s-proxmox-config" (include "pve-nfs-csi.fullname" .) -}}
{{- else -}}
{{- .Values.proxmox.existingConfigSecret -}}
{{- end -}}
{{- end -}}

{{- define "pve-nfs-csi.proxmoxConfigKey" -}}
{{- if include "pve-nfs-csi.proxmoxInlineConfig" . -}}
config.yaml
{{- else -}}
{{- .Values.proxmox.existingConfigSecretKey -}}
{{- end -}}
{{- end -}}

{{- define "pve-nfs-csi.assertDrivers" -}}
{{- if not (or .Values.proxmox.enabled .Values.nfs.enabled) -}}
{{- fail "both drivers are disabled: set proxmox.enabled or nfs.enabled to true" -}}
{{- end -}}
{{- end -}}

{{/*
Kubernetes refuses to change a CSIDriver's spec.attachRequired and spec.volumeLifecycleModes
(immutable in storage/v1 validation, ValidateCSIDriverUpdate). helm would stop an upgrade that
changes one half-way, with some objects updated and the release failed; this check reads the
live object (helm install/upgrade only: `helm template` has no cluster and skips it) and
refuses before anything is changed, saying what to do (docs/helm.md, "A CSIDriver's immutable
fields"). Call with (dict "name" N "attachRequired" B "modes" LIST ["valueHint" KEY]).
*/}}
{{- define "pve-nfs-csi.csiDriverUnchanged" -}}
{{- with (lookup "storage.k8s.io/v1" "CSIDriver" "" .name) }}
{{- $live := .spec | default dict }}
{{- $liveAttach := ternary $live.attachRequired true (hasKey $live "attachRequired") }}
{{- $liveModes := $live.volumeLifecycleModes | default (list "Persistent") }}
{{- $why := "" }}
{{- if ne $liveAttach $.attachRequired }}
{{- $why = printf "spec.attachRequired is %v in the cluster and %v in this release" $liveAttach $.attachRequired }}
{{- else if ne (toJson $liveModes) (toJson $.modes) }}
{{- $why = printf "spec.volumeLifecycleModes is %s in the cluster and %s in this release" (toJson $liveModes) (toJson $.modes) }}
{{- end }}
{{- if $why }}
{{- fail (printf "CSIDriver %s: %s. Kubernetes does not allow changing this field, so the upgrade would stop half-way; nothing was changed. Keep the cluster's value%s, or delete the CSIDriver object and run the upgrade again (docs/helm.md, \"A CSIDriver's immutable fields\")." $.name $why (ternary (printf " (%s)" ($.valueHint | default "")) "" (hasKey $ "valueHint"))) }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
Where a node-local HTTP endpoint listens and where kubelet probes it. On the host network the
endpoint stays on loopback so it is not reachable from other machines.
Call with (dict "root" $ "port" 1234); returns the listen address.
*/}}
{{- define "pve-nfs-csi.nodeListen" -}}
{{- if .root.Values.node.hostNetwork -}}
{{- printf "127.0.0.1:%v" .port -}}
{{- else -}}
{{- printf ":%v" .port -}}
{{- end -}}
{{- end -}}

{{/*
httpGet probe of a node-local /healthz: call with (dict "root" $ "port" 1234), probed on
127.0.0.1 on the host network; "host" (bool) overrides that.
*/}}
{{- define "pve-nfs-csi.nodeProbe" -}}
httpGet:
  path: /healthz
  port: {{ .port }}
  {{- if (hasKey . "host" | ternary .host .root.Values.node.hostNetwork) }}
  host: 127.0.0.1
  {{- end }}
initialDelaySeconds: 10
periodSeconds: 30
timeoutSeconds: 10
failureThreshold: 5
{{- end -}}

{{/*
Where the node plugin serves /metrics and /healthz: on the host network, metrics.nodeAddress
(127.0.0.1 by default; hostIP = the node's address, expanded by the kubelet from $(HOST_IP));
on the pod network, every address of the pod.
*/}}
{{- define "pve-nfs-csi.nodeMetricsListen" -}}
{{- $m := .Values.metrics -}}
{{- if not .Values.node.hostNetwork -}}
{{- printf "0.0.0.0:%v" $m.nodePort -}}
{{- else if eq $m.nodeAddress "hostIP" -}}
{{- printf "$(HOST_IP):%v" $m.nodePort -}}
{{- else -}}
{{- printf "%s:%v" $m.nodeAddress $m.nodePort -}}
{{- end -}}
{{- end -}}

{{/* Which metrics endpoints something outside the pod can scrape: a list of "controller", "node". */}}
{{- define "pve-nfs-csi.scrapeable" -}}
{{- $l := list "controller" -}}
{{- if not (hasPrefix "127.0.0.1:" (include "pve-nfs-csi.nodeMetricsListen" .)) -}}
{{- $l = append $l "node" -}}
{{- end -}}
{{- toJson $l -}}
{{- end -}}

{{/*
"true" when csi-snapshotter runs for one driver, "" otherwise. Call with (dict "root" $ "key"
"proxmox"). <driver>.snapshots.enabled: true or false decides; "auto" (the default) runs it only
where the cluster serves VolumeSnapshotContents (helm install/upgrade against the cluster, or
`helm template --api-versions snapshot.storage.k8s.io/v1/VolumeSnapshotContent`) or where this
release creates the driver's VolumeSnapshotClass, which needs the CRDs anyway. Without the CRDs
the sidecar's informers fail their list every few seconds for as long as the pod runs, which is
all a cluster without snapshot-controller (the seed's) would get from it.
*/}}
{{- define "pve-nfs-csi.snapshotsOn" -}}
{{- $d := index .root.Values .key -}}
{{- $s := $d.snapshots -}}
{{- if and $d.enabled (or (eq (toString $s.enabled) "true") (and (eq (toString $s.enabled) "auto") (or (.root.Capabilities.APIVersions.Has "snapshot.storage.k8s.io/v1/VolumeSnapshotContent") $s.volumeSnapshotClass.create))) -}}
true
{{- end -}}
{{- end -}}

{{/*
"true" when an optional monitoring object renders, "" otherwise. Call with (dict "root" $ "value"
<its enabled value> "api" "<group/version/Kind>"). true or false decides; "auto" (the default)
renders it only where the cluster serves that API (helm install/upgrade against the cluster, or
`helm template --api-versions monitoring.coreos.com/v1/PrometheusRule`), as snapshots do: without
the CRD the object would fail the install, and a cluster that grows one later gets it on the next
`helm upgrade`. metrics.enabled false turns every one off.
*/}}
{{- define "pve-nfs-csi.monitoringOn" -}}
{{- $v := toString .value -}}
{{- if and .root.Values.metrics.enabled (or (eq $v "true") (and (eq $v "auto") (.root.Capabilities.APIVersions.Has .api))) -}}
true
{{- end -}}
{{- end -}}
