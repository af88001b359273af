import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import { csiClient, type VolumeCapability } from '../../helpers/csi-client.js';
import { present } from '../../helpers/present.js';
import { spawnProgram } from '../../helpers/program.js';
import { tempDir } from '../../helpers/temp-dir.js';
import { loadSubcommand, subcommandNames } from '../../../src/cli/index.js';
import type { Teardown } from '../../helpers/teardown.js';
import { nodeIdentityArgs, socketEndpointArgs, writeProxmoxConfig } from '../../harness/backends.js';

/** The program in controller mode, its --proxmox-config (written into `dir`) naming `cluster`. */
function spawnController(t: Teardown, dir: string, cluster: Parameters<typeof writeProxmoxConfig>[1], args: string[]) {
  const cfg = path.join(dir, 'config.yaml');
  writeProxmoxConfig(cfg, cluster);
  return spawnProgram(t, ['--mode', 'controller', '--proxmox-config', cfg, ...args]);
}

// The program's own help is a user's first doc: it names every subcommand the program runs, with
// a line each, as well as the serving flags.
t.test('main: --help lists every subcommand with its summary, then the serving flags', async (t) => {
  const child = spawnProgram(t, ['--help']);
  t.equal(await child.exited, 0);
  const out = child.output();
  const lines = out.split('\n');
  for (const name of subcommandNames()) {
    const summary = (await loadSubcommand(name)).summary;
    const line = lines.find((l) => l.trimStart().startsWith(`pve-nfs-csi ${name} `));
    t.ok(line?.endsWith(summary), `${name}: ${line ?? 'no usage line'}`);
  }
  t.match(out, /^Usage: pve-nfs-csi \[flags\]\s+serve CSI/m);
  t.match(out, /^ {2}--proxmox-endpoint EP/m);
});

// The real program: both drivers in node mode on unix sockets, Identity answered on each with
// its own name, then SIGTERM → exit 0 with the sockets removed.
t.test('main: serves both endpoints and exits 0 on SIGTERM leaving no socket', async (t) => {
  const dir = tempDir(t, 'csi-main-');
  const pve = path.join(dir, 'proxmox.sock');
  const nfs = path.join(dir, 'nfs.sock');
  const child = spawnProgram(t, [
    '--mode',
    'node',
    ...nodeIdentityArgs(),
    ...socketEndpointArgs(pve, nfs),
    '--metrics-address',
    '127.0.0.1:0',
  ]);
  await child.ready();
  for (const [sock, name] of [
    [pve, 'csi.proxmox.sinextra.dev'],
    [nfs, 'nfs.csi.k8s.io'],
  ] as const) {
    const c = csiClient(`unix://${sock}`);
    t.equal((await c.identity.GetPluginInfo()).name, name);
    t.equal((await c.identity.Probe()).ready?.value, true);
    t.ok((await c.node.NodeGetInfo()).nodeId === 'talos-worker-1');
    c.close();
  }
  child.kill('SIGTERM');
  t.equal(await child.exited, 0, 'exit code 0');
  t.notOk(fs.existsSync(pve), 'proxmox socket removed');
  t.notOk(fs.existsSync(nfs), 'nfs socket removed');
});

// docs/design.md#bounded-shutdown: SIGTERM exit is bounded by --drain-timeout even while a Proxmox request hangs
// (closing the HTTP agent used to wait for it). In-flight requests are aborted after the drain.
t.test('main: SIGTERM exits within the drain timeout + 2 s while a Proxmox call hangs', async (t) => {
  const { startSimulator, SimulatorAdmin } = await import('../../../sim/index.js');
  const sim = await startSimulator({ backend: 'none', faults: { authFailureDelayMs: 0 } });
  t.teardown(() => sim.close());
  const dir = tempDir(t, 'csi-main-');
  const sock = path.join(dir, 'ctl.sock');
  const child = spawnController(t, dir, sim, ['--proxmox-endpoint', `unix://${sock}`, '--drain-timeout', '2s']);
  await child.ready();
  const c = csiClient(`unix://${sock}`);
  t.teardown(() => c.close());
  const cap: VolumeCapability = { mount: {}, accessMode: { mode: 'SINGLE_NODE_WRITER' } };
  const vol = await c.controller.CreateVolume({
    name: 'pvc-hang',
    volumeCapabilities: [cap],
    parameters: { storage: 'local-lvm' },
    accessibilityRequirements: {
      preferred: [
        { segments: { 'topology.kubernetes.io/region': 'homelab', 'topology.kubernetes.io/zone': 'hyper1' } },
      ],
    },
  });
  // Every VM config read now hangs for 60 s: the publish's VM config batch (which runs on its
  // own, without the caller's deadline) sits in one.
  await new SimulatorAdmin(sim.adminUrl).patchFaults({
    latencyByRoute: { 'GET /nodes/{node}/qemu/{vmid}/pending': 60_000, 'GET /nodes/{node}/qemu/{vmid}/config': 60_000 },
  });
  const pending = c.controller
    .ControllerPublishVolume({
      volumeId: present(vol.volume, 'volume').volumeId,
      nodeId: 'talos-worker-1',
      volumeCapability: cap,
    })
    .catch((e: unknown) => e);
  // Let the call reach the simulator.
  await new Promise((r) => setTimeout(r, 1500));
  const t0 = Date.now();
  child.kill('SIGTERM');
  t.equal(await child.exited, 0, 'exit code 0');
  const took = Date.now() - t0;
  t.ok(took <= 4000, `exited ${took} ms after SIGTERM (drain 2 s + at most 2 s)`);
  const answer = await pending;
  t.ok(answer, 'the hanging call got an answer or lost its connection');
  t.comment(answer instanceof Error ? answer.message : JSON.stringify(answer));
});

// docs/design.md#probe-readiness: Probe says whether the process can serve. A Proxmox cluster that does not answer,
// and a handle naming an NFS server that does not answer (the legacy a/b/c/d form included),
// leave Probe ready; csi_backend_up reports them as down instead.
t.test('main: unreachable backends leave Probe ready and show in csi_backend_up', async (t) => {
  const { freePort } = await import('../../helpers/free-port.js');
  const dead = await freePort(); // nothing listens here: Proxmox API and NFS both refused
  const metricsPort = await freePort();
  const dir = tempDir(t, 'csi-main-');
  const pve = path.join(dir, 'pve.sock');
  const nfs = path.join(dir, 'nfs.sock');
  const cluster = {
    url: `https://127.0.0.1:${dead}/api2/json`,
    tokenId: 'csi@pve!csi',
    tokenSecret: '11111111-2222-3333-4444-555555555555',
  };
  const child = spawnController(t, dir, cluster, [
    ...socketEndpointArgs(pve, nfs),
    '--nfs-port',
    String(dead),
    '--nfs-mount-port',
    String(dead),
    '--nfs-call-timeout',
    '1s',
    '--metrics-address',
    `127.0.0.1:${metricsPort}`,
  ]);
  await child.ready();
  const p = csiClient(`unix://${pve}`);
  const n = csiClient(`unix://${nfs}`);
  t.teardown(() => {
    p.close();
    n.close();
  });
  t.equal((await p.identity.Probe()).ready?.value, true, 'Proxmox: ready although its API does not answer');
  // The legacy form too (server/share/subDir), with a loopback name: only loopback is a target here.
  for (const volumeId of ['127.0.0.1#volume1/k8s#pvc-x##', 'localhost/volume1/k8s/pvc-y']) {
    await n.controller.DeleteVolume({ volumeId }).catch((e: unknown) => e);
  }
  t.equal((await n.identity.Probe()).ready?.value, true, 'NFS: ready after handles named servers that do not answer');
  t.equal((await n.identity.Probe()).ready?.value, true, 'and stays ready');
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  t.match(
    text,
    /csi_backend_up\{driver="csi.proxmox.sinextra.dev",kind="proxmox",backend="homelab"\} 0/,
    'the Proxmox cluster is down in the metrics',
  );
  t.match(
    text,
    /csi_backend_up\{driver="nfs.csi.k8s.io",kind="nfs",backend="127.0.0.1"\} 0/,
    'the NFS server is down in the metrics',
  );
  child.kill('SIGTERM');
});
