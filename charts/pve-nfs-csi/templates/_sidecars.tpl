{{/*
One Kubernetes CSI sidecar of the controller pod. Call with
(dict "root" $ "name" "proxmox-provisioner" "sidecar" $.Values.sidecars.provisioner
      "socket" "socket-proxmox" "timeout" "3m" "args" (list ...) "env" (list ...)).
Every sidecar talks to its driver through /csi/csi.sock, the driver's own emptyDir.
*/}}
{{- define "pve-nfs-csi.controllerSidecar" -}}
- name: {{ .name }}
  image: {{ include "pve-nfs-csi.sidecarImage" .sidecar.image }}
  imagePullPolicy: {{ .sidecar.image.pullPolicy }}
  args:
    - --csi-address=/csi/csi.sock
    - --v={{ .root.Values.sidecars.logVerbosity }}
    - --timeout={{ .timeout }}
    - --leader-election
    {{- range .args }}
    - {{ . }}
    {{- end }}
    {{- range .sidecar.extraArgs }}
    - {{ . }}
    {{- end }}
  {{- with .env }}
  env:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml .root.Values.controller.securityContext | nindent 4 }}
  resources:
    {{- toYaml .sidecar.resources | nindent 4 }}
  volumeMounts:
    - name: {{ .socket }}
      mountPath: /csi
{{- end -}}

{{/* The sidecars of the Proxmox driver in the controller pod. */}}
{{- define "pve-nfs-csi.proxmoxControllerSidecars" -}}
{{- $v := .Values -}}
{{- $provArgs := list "--extra-create-metadata" "--default-fstype=ext4" -}}
{{- $provEnv := list -}}
{{- /* GA in these sidecars: left unset, each probes the API server for the v1 API and enables it. */ -}}
{{- $vacArgs := ternary (list) (list "--feature-gates=VolumeAttributesClass=false") $v.proxmox.volumeAttributesClass -}}
{{- $provArgs = concat $provArgs $vacArgs -}}
{{- if $v.proxmox.capacity.enabled -}}
{{- /* The owner reference walks pod -> ReplicaSet -> Deployment, so uninstalling removes the objects. */ -}}
{{- $provArgs = concat $provArgs (list "--enable-capacity" "--capacity-ownerref-level=2" (printf "--capacity-poll-interval=%s" $v.proxmox.capacity.pollInterval)) -}}
{{- $provEnv = list (dict "name" "NAMESPACE" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.namespace"))) (dict "name" "POD_NAME" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.name"))) -}}
{{- end -}}
{{ include "pve-nfs-csi.controllerSidecar" (dict "root" . "name" "proxmox-provisioner" "sidecar" $v.sidecars.provisioner "socket" "socket-proxmox" "timeout" $v.proxmox.timeout "args" $provArgs "env" $provEnv) }}
{{ include "pve-nfs-csi.controllerSidecar" (dict "root" . "name" "proxmox-attacher" "sidecar" $v.sidecars.attacher "socket" "socket-proxmox" "timeout" $v.proxmox.timeout "args" (list)) }}
{{ include "pve-nfs-csi.controllerSidecar" (dict "root" . "name" "proxmox-resizer" "sidecar" $v.sidecars.resizer "socket" "socket-proxmox" "timeout" $v.proxmox.timeout "args" (concat (list "--handle-volume-inuse-error=false") $vacArgs)) }}
{{- /* Neither driver offers group snapshots: with that gate off csi-snapshotter neither looks for
the VolumeGroupSnapshot CRDs nor needs their RBAC. */ -}}
{{- if include "pve-nfs-csi.snapshotsOn" (dict "root" . "key" "proxmox") }}
{{ include "pve-nfs-csi.controllerSidecar" (dict "root" . "name" "proxmox-snapshotter" "sidecar" $v.sidecars.snapshotter "socket" "socket-proxmox" "timeout" $v.proxmox.timeout "args" (list "--feature-gates=CSIVolumeGroupSnapshot=false")) }}
{{- end }}
{{- end -}}

{{/* The sidecars of the NFS driver in the controller pod: no attacher, nothing to hot-plug. */}}
{{- define "pve-nfs-csi.nfsControllerSidecars" -}}
{{- $v := .Values -}}
{{ include "pve-nfs-csi.controllerSidecar" (dict "root" . "name" "nfs-provisioner" "sidecar" $v.sidecars.provisioner "socket" "socket-nfs" "timeout" $v.nfs.timeout "args" (list "--extra-create-metadata")) }}
{{ include "pve-nfs-csi.controllerSidecar" (dict "root" . "name" "nfs-resizer" "sidecar" $v.sidecars.resizer "socket" "socket-nfs" "timeout" $v.nfs.timeout "args" (list "--handle-volume-inuse-error=false")) }}
{{- /* As for Proxmox: no group snapshots. */ -}}
{{- if include "pve-nfs-csi.snapshotsOn" (dict "root" . "key" "nfs") }}
{{ include "pve-nfs-csi.controllerSidecar" (dict "root" . "name" "nfs-snapshotter" "sidecar" $v.sidecars.snapshotter "socket" "socket-nfs" "timeout" $v.nfs.timeout "args" (list "--feature-gates=CSIVolumeGroupSnapshot=false")) }}
{{- end }}
{{- end -}}

{{/*
A node-driver-registrar in the node pod. Call with (dict "root" $ "name" "proxmox-registrar"
"volume" "plugin-dir-proxmox" "socket" "/var/lib/kubelet/plugins/<driver>/csi.sock" "port" 1234
"security" (dict ...)). kubelet connects to the socket path on the host, the registrar to the
same directory mounted at /csi.
*/}}
{{- define "pve-nfs-csi.registrar" -}}
{{- $s := .root.Values.sidecars.nodeDriverRegistrar -}}
- name: {{ .name }}
  image: {{ include "pve-nfs-csi.sidecarImage" $s.image }}
  imagePullPolicy: {{ $s.image.pullPolicy }}
  args:
    - --csi-address=/csi/csi.sock
    - --kubelet-registration-path={{ .socket }}
    - --http-endpoint={{ include "pve-nfs-csi.nodeListen" (dict "root" .root "port" .port) }}
    - --v={{ .root.Values.sidecars.logVerbosity }}
    {{- range $s.extraArgs }}
    - {{ . }}
    {{- end }}
  livenessProbe:
    {{- include "pve-nfs-csi.nodeProbe" (dict "root" .root "port" .port) | nindent 4 }}
  securityContext:
    {{- toYaml .security | nindent 4 }}
  resources:
    {{- toYaml $s.resources | nindent 4 }}
  volumeMounts:
    - name: {{ .volume }}
      mountPath: /csi
    - name: registration-dir
      mountPath: /registration
{{- end -}}
