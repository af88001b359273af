// The in-memory Proxmox of test/unit/proxmox/api/fake-api.ts plus what `move` needs beyond it: the
// VM lifecycle (create, destroy, offline migration with local disks, task logs) and the
// caller's privileges. The migration follows qemu-server's offline path as the simulator models
// it (sim/ops/migrate.ts): the VM is locked `migrate`, every volume its config references is
// copied to the target under the same name (another name when that is taken), the config moves,
// and the source copy is freed; faults make the copy fail (nothing changed), leave the source
// copy behind (task failed, VM on the target), or keep the task running until `finishMigrations`.
import { AlreadyExists, FailedPrecondition, NotFound } from '../../../../src/errors.js';
import type { CallOptions, ProxmoxVmLifecycle, TaskStatus } from '../../../../src/proxmox/api/api.js';
import { volidOfValue } from '../../../../src/proxmox/index.js';
import { FakeProxmox, type FakeVm } from '../../proxmox/api/fake-api.js';

type Perms = Record<string, Record<string, number>>;

/** Every privilege move and the CSI role need, granted on `/`. */
export const ALL_PRIVILEGES: Perms = {
  '/': Object.fromEntries(
    [
      'VM.Audit',
      'VM.Allocate',
      'VM.Config.Options',
      'VM.Migrate',
      'VM.Config.Disk',
      'Datastore.Audit',
      'Datastore.AllocateSpace',
      'Datastore.Allocate',
    ].map((p) => [p, 1]),
  ),
};

interface LifecycleTask {
  exit: string;
  log: string[];
  running: boolean;
}

export class FakeMoverProxmox extends FakeProxmox implements ProxmoxVmLifecycle {
  perms: Perms | Error = ALL_PRIVILEGES;
  migrateFault: 'off' | 'copy' | 'cleanup' | 'hang' = 'off';
  /** Lifecycle calls in order, e.g. `migrateVm 9999 hyper1->hyper2`. */
  readonly lifecycle: string[] = [];
  private readonly ltasks = new Map<string, LifecycleTask>();
  private readonly hanging: Array<() => void> = [];
  private lseq = 0;

  private ltask(node: string, type: string, vmid: number, t: LifecycleTask): string {
    const upid = `UPID:${node}:1000${(++this.lseq).toString(16).padStart(4, '0')}:00000001:00000001:${type}:${vmid}:${this.tokenUser}:`;
    this.ltasks.set(upid, t);
    return upid;
  }

  private onNode(node: string, vmid: number): FakeVm {
    const vm = this.vms.get(vmid);
    if (!vm || vm.node !== node)
      throw new NotFound(`Proxmox test: Configuration file 'nodes/${node}/qemu-server/${vmid}.conf' does not exist`);
    return vm;
  }

  /** Volume ids the VM's config references (drives and unusedN, current and pending). */
  private referenced(vm: FakeVm): Array<{ key: string; volid: string }> {
    const out: Array<{ key: string; volid: string }> = [];
    for (const map of [vm.config, vm.pending])
      for (const [key, v] of map) {
        const volid = volidOfValue(key, v);
        if (volid) out.push({ key, volid });
      }
    return out;
  }

  override async taskStatus(node: string, upid: string, o?: CallOptions): Promise<TaskStatus> {
    const t = this.ltasks.get(upid);
    if (!t) return super.taskStatus(node, upid, o);
    return t.running ? { status: 'running' } : { status: 'stopped', exitstatus: t.exit };
  }

  async taskLog(_node: string, upid: string): Promise<string[]> {
    const t = this.ltasks.get(upid);
    if (!t) throw new NotFound(`Proxmox test: no such task '${upid}'`);
    return t.log;
  }

  async permissions(): Promise<Perms> {
    if (this.perms instanceof Error) throw this.perms;
    return this.perms;
  }

  async createVm(node: string, vmid: number, options: Record<string, string>): Promise<string> {
    this.lifecycle.push(`createVm ${vmid} ${node}`);
    const there = this.vms.get(vmid);
    if (there)
      throw new AlreadyExists(
        `Proxmox test: unable to create VM ${vmid}: VM ${vmid} already exists on node '${there.node}'`,
      );
    this.vms.set(vmid, {
      vmid,
      name: options.name ?? `VM ${vmid}`,
      node,
      running: false,
      config: new Map(Object.entries(options)),
      pending: new Map(),
      pendingDelete: new Set(),
    });
    return this.ltask(node, 'qmcreate', vmid, { exit: 'OK', log: [], running: false });
  }

  /** qemu-server frees the volumes the VM owns that its config references; a missing one is no error. */
  async destroyVm(node: string, vmid: number): Promise<string> {
    this.lifecycle.push(`destroyVm ${vmid} ${node}`);
    const vm = this.onNode(node, vmid);
    for (const { volid } of this.referenced(vm)) {
      const [storage = '', disk = ''] = volid.split(':');
      if (disk.startsWith(`vm-${vmid}-`)) this.nodes.get(node)?.get(storage)?.volumes.delete(disk);
    }
    this.vms.delete(vmid);
    return this.ltask(node, 'qmdestroy', vmid, { exit: 'OK', log: [], running: false });
  }

  async migrateVm(node: string, vmid: number, target: string): Promise<string> {
    this.lifecycle.push(`migrateVm ${vmid} ${node}->${target}`);
    const vm = this.onNode(node, vmid);
    if (vm.running) throw new FailedPrecondition('Proxmox test: online migration is not what move asks for');
    if (vm.config.has('lock')) throw new FailedPrecondition(`Proxmox test: VM is locked (${vm.config.get('lock')})`);
    const task: LifecycleTask = {
      exit: 'OK',
      log: [`starting migration of VM ${vmid} to node '${target}'`],
      running: false,
    };
    const upid = this.ltask(node, 'qmigrate', vmid, task);
    if (this.migrateFault === 'copy') {
      task.log.push(`ERROR: storage migration to '${target}' failed: exit code 255`, 'ERROR: migration aborted');
      task.exit = 'migration aborted';
      return upid;
    }
    const finish = () => {
      for (const { key, volid } of this.referenced(vm)) {
        const [storage = '', disk = ''] = volid.split(':');
        const src = this.storageOf(node, storage);
        const dst = this.storageOf(target, storage);
        let name = disk;
        for (let i = 0; dst.volumes.has(name); i++) name = `vm-${vmid}-disk-${i}`;
        dst.volumes.set(name, src.volumes.get(disk) ?? 0);
        task.log.push(`volume '${volid}' is '${storage}:${name}' on the target`);
        vm.config.set(key, `${storage}:${name}`);
        if (this.migrateFault !== 'cleanup') src.volumes.delete(disk);
      }
      if (this.migrateFault === 'cleanup') {
        task.log.push(`ERROR: removing local copy failed`);
        task.exit = 'migration problems';
      }
      vm.node = target;
      vm.config.delete('lock');
      task.running = false;
    };
    if (this.migrateFault !== 'hang') {
      finish();
      return upid;
    }
    vm.config.set('lock', 'migrate');
    task.running = true;
    this.hanging.push(finish);
    return upid;
  }

  /** Ends the migrations a `hang` fault kept running. */
  finishMigrations(): void {
    for (const f of this.hanging.splice(0)) f();
  }
}

/** Three hosts with local-lvm, a worker VM on hyper1, and the disk `vm-9999-<pv>` on hyper1. */
export function moverCluster(pv: string, sizeBytes = 16 * 2 ** 20): FakeMoverProxmox {
  const f = new FakeMoverProxmox();
  for (const host of ['hyper1', 'hyper2', 'hyper3']) f.addNode(host);
  f.addVm({ vmid: 111, name: 'talos-worker-1', node: 'hyper1' });
  f.storageOf('hyper1', 'local-lvm').volumes.set(`vm-9999-${pv}`, sizeBytes);
  return f;
}
