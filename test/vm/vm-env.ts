// What test/vm/vm.sh hands a VM-tier scenario in its environment (the guest agent's socket, the
// node plugins' endpoints, the guest's NFS export): the value, or an error that says how the
// scenario is meant to be run.
export function vmEnv(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run through test/vm/vm.sh run`);
  return v;
}
