// A per-run CA and server certificate made with the openssl CLI, like the self-signed
// "PVE Cluster Manager CA" a fresh Proxmox host has. Clients pin ca.pem.

import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface TlsFiles {
  caFile: string;
  certFile: string;
  keyFile: string;
  cert: Buffer;
  key: Buffer;
}

async function openssl(args: string[]): Promise<void> {
  try {
    await run('openssl', args, { timeout: 30_000 });
  } catch (e) {
    const err = e as { stderr?: string; message: string };
    throw new Error(`openssl ${args[0]} failed (is the openssl CLI installed?): ${err.stderr?.trim() || err.message}`, {
      cause: e,
    });
  }
}

export async function generateTls(dir: string, hostNames: string[]): Promise<TlsFiles> {
  const caKey = join(dir, 'pve-root-ca.key');
  const caFile = join(dir, 'pve-root-ca.pem');
  const keyFile = join(dir, 'pve-ssl.key');
  const certFile = join(dir, 'pve-ssl.pem');
  const csr = join(dir, 'pve-ssl.csr');
  const ext = join(dir, 'pve-ssl.ext');
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  await openssl([
    'req',
    '-x509',
    ...ec,
    '-keyout',
    caKey,
    '-out',
    caFile,
    '-days',
    '3650',
    '-subj',
    `/CN=Proxmox Virtual Environment/OU=${randomBytes(8).toString('hex')}/O=PVE Cluster Manager CA`,
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign',
  ]);
  const san = ['IP:127.0.0.1', 'DNS:localhost', ...hostNames.map((h) => `DNS:${h}`)].join(',');
  await writeFile(
    ext,
    `subjectAltName=${san}\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n`,
  );
  await openssl([
    'req',
    '-new',
    ...ec,
    '-keyout',
    keyFile,
    '-out',
    csr,
    '-subj',
    '/CN=localhost/OU=PVE Cluster Node/O=Proxmox Virtual Environment',
  ]);
  await openssl([
    'x509',
    '-req',
    '-in',
    csr,
    '-CA',
    caFile,
    '-CAkey',
    caKey,
    '-set_serial',
    `0x${randomBytes(8).toString('hex')}`,
    '-out',
    certFile,
    '-days',
    '825',
    '-extfile',
    ext,
  ]);
  await rm(csr, { force: true });
  await rm(ext, { force: true });
  await rm(caKey, { force: true });
  return { caFile, certFile, keyFile, cert: await readFile(certFile), key: await readFile(keyFile) };
}
