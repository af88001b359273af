// Runs the real csi-sanity once against endpoints that are already serving, and prints its own
// summary. Shared by the host tier (test/sanity/main.ts) and the VM tier (test/vm/tier.ts).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { run } from '../harness/procs.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

export interface SanityRun {
  label: string;
  runDir: string;
  /** Node endpoint (csi.endpoint) and controller endpoint, as csi-sanity dials them. */
  nodeEndpoint: string;
  controllerEndpoint: string;
  volumeParameters: Record<string, string>;
  /** A VolumeAttributesClass's parameters for the ModifyVolume specs (drivers that advertise MODIFY_VOLUME). */
  mutableParameters?: Record<string, string> | undefined;
  /** Where the mount and staging dirs live; for the guest, commands that create them there. */
  mountDir: string;
  stagingDir: string;
  pathCommands?: { create: string; remove: string; check: string } | undefined;
  args: string[];
}

export async function runSanity(s: SanityRun): Promise<number> {
  const bin = process.env.CSI_SANITY ?? path.join(ROOT, '.tools', 'csi-sanity');
  const params = path.join(s.runDir, 'params.yaml');
  fs.writeFileSync(
    params,
    Object.entries(s.volumeParameters)
      .map(([k, v]) => `${k}: ${JSON.stringify(v)}`)
      .join('\n') + '\n',
  );
  const yamlMap = (m: Record<string, string>) =>
    Object.entries(m)
      .map(([k, v]) => `${k}: ${JSON.stringify(v)}`)
      .join('\n') + '\n';
  const mutable = path.join(s.runDir, 'mutable-params.yaml');
  if (s.mutableParameters) fs.writeFileSync(mutable, yamlMap(s.mutableParameters));
  const args = [
    `--csi.endpoint=${s.nodeEndpoint}`,
    `--csi.controllerendpoint=${s.controllerEndpoint}`,
    `--csi.mountdir=${s.mountDir}`,
    `--csi.stagingdir=${s.stagingDir}`,
    `--csi.testvolumeparameters=${params}`,
    ...(s.mutableParameters ? [`--csi.testvolumemutableparameters=${mutable}`] : []),
    `--ginkgo.junit-report=${path.join(s.runDir, 'junit.xml')}`,
    '--ginkgo.no-color',
    ...(s.pathCommands
      ? [
          `--csi.createmountpathcmd=${s.pathCommands.create}`,
          `--csi.createstagingpathcmd=${s.pathCommands.create}`,
          `--csi.removemountpathcmd=${s.pathCommands.remove}`,
          `--csi.removestagingpathcmd=${s.pathCommands.remove}`,
          `--csi.checkpathcmd=${s.pathCommands.check}`,
          // Each path command is a guest-agent round trip into an emulated guest.
          '--csi.createpathcmdtimeout=60s',
          '--csi.removepathcmdtimeout=60s',
          '--csi.checkpathcmdtimeout=60s',
        ]
      : []),
    ...s.args,
  ];
  const out = path.join(s.runDir, 'csi-sanity.log');
  console.log(`csi-sanity ${s.label}: ${args.join(' ')}`);
  const t0 = Date.now();
  const code = await run(bin, args, { stdoutFile: out });
  const text = fs.readFileSync(out, 'utf8');
  // csi-sanity's own summary: the failures with their location, then the counts.
  const summary = text
    .split('\n')
    .filter((l) => /^\s*\[(FAIL|PANICKED)\]|^Ran \d+ of|^(SUCCESS|FAIL)!|^Summarizing/.test(l));
  console.log(summary.join('\n'));
  console.log(
    `csi-sanity ${s.label}: exit ${code} in ${((Date.now() - t0) / 1000).toFixed(1)} s; full log ${path.relative(ROOT, out)}`,
  );
  return code;
}
