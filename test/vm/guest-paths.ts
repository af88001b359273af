// Where node paths live in the guest. The node plugin acts only inside its kubelet directory
// (--kubelet-dir), so every staging/publish path the VM tier hands it is below this one — as on
// the Talos VM the guest plays. guest-init.sh unmounts what is left below it at power-off.
export const GUEST_KUBELET_DIR = '/var/lib/kubelet';
