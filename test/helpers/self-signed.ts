// A self-signed serving certificate made with openssl, for test servers that speak TLS: the
// certificate is also the CA a client pins (`ca_file`, a service account's ca.crt).
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

export interface SelfSigned {
  keyPath: string;
  certPath: string;
  /** PEM text of the key and the certificate. */
  key: string;
  cert: string;
}

export interface SelfSignedOptions {
  /** `ec` (P-256, fast; default) or `rsa` (2048 bits). */
  keyType?: 'ec' | 'rsa';
  /** Default `127.0.0.1`. */
  commonName?: string;
  /** Default `IP:127.0.0.1`. */
  subjectAltName?: string;
  /** Default 1. */
  days?: number;
}

/** Writes `<dir>/<name>.key` and `<dir>/<name>.crt`. */
export function selfSigned(dir: string, name: string, o: SelfSignedOptions = {}): SelfSigned {
  const keyPath = path.join(dir, `${name}.key`);
  const certPath = path.join(dir, `${name}.crt`);
  const newKey = o.keyType === 'rsa' ? ['rsa:2048'] : ['ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1'];
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      ...newKey,
      '-nodes',
      '-keyout',
      keyPath,
      '-out',
      certPath,
      '-days',
      String(o.days ?? 1),
      '-subj',
      `/CN=${o.commonName ?? '127.0.0.1'}`,
      '-addext',
      `subjectAltName=${o.subjectAltName ?? 'IP:127.0.0.1'}`,
    ],
    { stdio: 'ignore' },
  );
  return { keyPath, certPath, key: fs.readFileSync(keyPath, 'utf8'), cert: fs.readFileSync(certPath, 'utf8') };
}
