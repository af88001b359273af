#!/bin/bash
# The kubelet tier's node, run in the VM-tier guest as its run script (test/vm/guest-init.sh starts
# it; every binary is read from the host over the guest's 9p root). It makes the guest a
# Kubernetes node: cgroup v2, containerd (CRI) with runc and the CNI bridge, the images imported
# from archives, then kubelet registered against the host's kube-apiserver.
# Inputs (exported by the harness, test/kubelet/node.ts):
#   KN_CONTAINERD_DIR   directory with containerd, containerd-shim-runc-v2, ctr
#   KN_KUBELET          kubelet binary
#   KN_KUBECONFIG_DATA  kubelet's kubeconfig (its text: the host's /tmp is not the guest's)
#   KN_NODE_NAME, KN_NODE_LABELS   the Node's name and --node-labels
#   KN_CONTAINERD_ROOT  a tar of a containerd root with the node's images already unpacked
#                       (test/kubelet/containerd-root.sh), unpacked into the tmpfs
#   KN_SANDBOX_IMAGE    the pause image containerd runs sandboxes with
#   KN_API_VIP          the Service IP of "kubernetes" (10.96.0.1), DNATed to KN_API_FWD
#   KN_API_FWD          the guestfwd address:port QEMU relays to the host's kube-apiserver
#   KN_REGISTRY         the image registry as images name it (127.0.0.1:PORT on the host)
#   KN_REGISTRY_MIRROR  the guestfwd address:port QEMU relays to it (its certificate names it)
#   KN_REGISTRY_CA_DATA the registry's test CA (PEM text)
#   KN_LOG_DIR          where containerd.log and kubelet.log go (the harness's shared dir)
set -euo pipefail
say() { echo "kubelet-node[$(cut -d' ' -f1 /proc/uptime)s]: $*"; }
log_dir=${KN_LOG_DIR:-/run/vm}

# cgroup v2 with every controller handed down to the kubepods hierarchy kubelet makes.
if ! grep -q ' /sys/fs/cgroup cgroup2 ' /proc/mounts; then
  mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup
fi
for c in $(cat /sys/fs/cgroup/cgroup.controllers); do
  echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || say "controller $c not delegated"
done

# Bidirectional mount propagation needs shared mounts; a Talos root is shared too.
mount --make-rshared /
# The overlay root can't hold overlayfs snapshots (an overlay upper dir on overlayfs): tmpfs.
for d in /var/lib/containerd /var/lib/kubelet /var/log/pods /run/containerd; do
  mkdir -p "$d"
  mount -t tmpfs -o mode=0711 tmpfs "$d"
done
mount --make-shared /var/lib/kubelet
mkdir -p /var/lib/kubelet/plugins_registry /var/lib/kubelet/plugins /etc/cni/net.d /etc/containerd
: >/etc/machine-id
cat /proc/sys/kernel/random/uuid | tr -d - >/etc/machine-id

# The Service IP of "kubernetes", as kube-proxy would route it: to the host's kube-apiserver
# through QEMU's guestfwd (no route leaves the guest otherwise).
for m in br_netfilter bridge veth nf_nat xt_nat iptable_nat nft_chain_nat xt_conntrack; do modprobe "$m" 2>/dev/null || true; done
echo 1 >/proc/sys/net/ipv4/ip_forward
# DNAT happens after the routing decision: the Service range needs a route (on-link, eth0).
ip route add 10.96.0.0/16 dev eth0
iptables -t nat -A OUTPUT -d "$KN_API_VIP/32" -p tcp --dport 443 -j DNAT --to-destination "$KN_API_FWD"
iptables -t nat -A PREROUTING -d "$KN_API_VIP/32" -p tcp --dport 443 -j DNAT --to-destination "$KN_API_FWD"
# Pod traffic to the forward leaves by eth0 with the node's address, as a SNAT to the node IP.
iptables -t nat -A POSTROUTING -s 10.88.0.0/16 ! -d 10.88.0.0/16 -j MASQUERADE

cat >/etc/cni/net.d/10-bridge.conflist <<'EOF'
{ "cniVersion": "1.0.0", "name": "kubelet-tier",
  "plugins": [
    { "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": { "type": "host-local", "ranges": [[{ "subnet": "10.88.0.0/16" }]],
                "routes": [{ "dst": "0.0.0.0/0" }] } },
    { "type": "portmap", "capabilities": { "portMappings": true } } ] }
EOF

cat >/etc/containerd/config.toml <<EOF
version = 3
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "/etc/containerd/certs.d"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$KN_SANDBOX_IMAGE"
[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = false
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "/etc/cni/net.d"
EOF

# The registry's 127.0.0.1 is the host's, not this guest's: containerd pulls through the relay,
# verifying the registry's certificate against the test CA (hosts.toml, as a user configures a
# mirror with a private CA).
certs="/etc/containerd/certs.d/$KN_REGISTRY"
mkdir -p "$certs"
printf '%s' "$KN_REGISTRY_CA_DATA" >"$certs/ca.crt"
cat >"$certs/hosts.toml" <<EOF
server = "https://$KN_REGISTRY"
[host."https://$KN_REGISTRY_MIRROR"]
  capabilities = ["pull", "resolve"]
  ca = "$certs/ca.crt"
EOF

export PATH="$KN_CONTAINERD_DIR:$PATH"
# The images, unpacked on the host (an import here would gunzip and hash every layer emulated).
tar --xattrs --xattrs-include='*' --numeric-owner -C /var/lib/containerd -xf "$KN_CONTAINERD_ROOT"
say "containerd root unpacked ($(du -sh /var/lib/containerd | cut -f1))"
say "starting containerd"
containerd --config /etc/containerd/config.toml >>"$log_dir/containerd.log" 2>&1 &
for _ in $(seq 1 600); do
  ctr version >/dev/null 2>&1 && break
  sleep 0.2
done
ctr version >/dev/null || { say "containerd did not answer"; exit 1; }
say "containerd up"
say "images: $(ctr -n k8s.io images ls -q | tr '\n' ' ')"

cat >/var/lib/kubelet/config.yaml <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
failSwapOn: false
address: 127.0.0.1
healthzBindAddress: 127.0.0.1
healthzPort: 10248
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
# The guest's root and kubelet dir are tmpfs: no ephemeral-storage accounting, no disk eviction.
localStorageCapacityIsolation: false
evictionHard: {memory.available: "20Mi"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
nodeStatusUpdateFrequency: 5s
syncFrequency: 10s
fileCheckFrequency: 10s
maxPods: 30
EOF
: >>/etc/resolv.conf
printf '%s' "$KN_KUBECONFIG_DATA" >/var/lib/kubelet/kubeconfig

# kubelet's pid is in /run/kubelet.pid; when it exits it is started again, as systemd's
# Restart=always does on a real node (the tier kills it to test volume reconstruction).
start_kubelet() {
  say "starting kubelet"
  "$KN_KUBELET" --config=/var/lib/kubelet/config.yaml --kubeconfig=/var/lib/kubelet/kubeconfig \
    --hostname-override="$KN_NODE_NAME" --node-labels="$KN_NODE_LABELS" --node-ip=10.0.2.15 \
    --root-dir=/var/lib/kubelet --cert-dir=/var/lib/kubelet/pki --v=2 >>"$log_dir/kubelet.log" 2>&1 &
  kubelet=$!
  kubelet_started=$SECONDS
  echo "$kubelet" >/run/kubelet.pid
}
start_kubelet
# The host reaches guest services through QEMU's hostfwd, which delivers to 127.0.0.1 from the
# user network's host address; kubelet's KUBE-FIREWALL drops non-loopback sources to 127/8 (the
# route_localnet guard). kubelet puts its jump first in INPUT, then only checks that it exists:
# so once it is there, that one source is let in ahead of it.
for _ in $(seq 1 1200); do
  iptables -C INPUT -j KUBE-FIREWALL 2>/dev/null && break
  sleep 0.5
done
iptables -I INPUT 1 -s 10.0.2.2/32 -d 127.0.0.0/8 -i eth0 -j ACCEPT
say "hostfwd source let in ahead of KUBE-FIREWALL"
while :; do
  code=0
  wait "$kubelet" || code=$?
  # One that cannot start at all ends the node (the harness reports it) instead of looping.
  [ $((SECONDS - kubelet_started)) -ge 20 ] || { say "kubelet exited ($code) within 20 s of its start"; exit 1; }
  say "kubelet exited ($code); starting it again in 1 s"
  sleep 1
  start_kubelet
done
